# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_idle_check as a module, through pytest-ansible's localhost fixture and the fake nvidia-smi."""

from __future__ import annotations

import pytest

MODULE = "inferops.serving.gpu_idle_check"


def run(localhost, **args):
    return getattr(localhost, MODULE)(**args)["localhost"]


def test_all_eight_gpus_checked_by_default(localhost, fake_gpus):
    result = run(localhost, backend="nvidia_smi")
    assert not result.get("failed"), result
    assert result["clean"] is True and result["changed"] is False
    assert [g["index"] for g in result["gpus"]] == list(range(8))
    assert result["backend"] == "nvidia_smi"


def test_auto_backend_without_pynvml_falls_back_to_smi(localhost, fake_gpus):
    result = run(localhost, gpus=[0, 7])
    assert result["backend"] in ("nvidia_smi", "nvml")
    assert [g["index"] for g in result["gpus"]] == [0, 7]


def test_unknown_gpu_index_lists_the_real_ones(localhost, fake_gpus):
    result = run(localhost, gpus=[8], backend="nvidia_smi")
    assert result["failed"]
    assert result["msg"] == "gpus: no GPU with index 8 on this host; it has 0, 1, 2, 3, 4, 5, 6, 7"


@pytest.mark.parametrize("args,msg", [
    ({"timeout": 0}, "timeout must be a positive number of seconds, got 0.0"),
    ({"reclaim": True, "kill_grace": 30, "timeout": 10}, "kill_grace (30.0) must be less than timeout (10.0)"),
    ({"reclaim_match": ["(bad"]}, "reclaim_match: '(bad' is not a valid regular expression"),
    ({"backend": "dcgm"}, "value of backend must be one of: auto, nvml, nvidia_smi, got: dcgm"),
])
def test_bad_input_is_refused_with_a_clear_message(localhost, fake_gpus, args, msg):
    holder = fake_gpus.hold(7, args=["vllm", "serve"])
    result = run(localhost, **args)
    assert result["failed"] and msg in result["msg"]
    assert holder.poll() is None  # nothing changed


def test_reclaim_kills_and_reports_changed(localhost, fake_gpus):
    holder = fake_gpus.hold(7, args=["vllm", "serve", "m"])
    result = run(localhost, reclaim=True, backend="nvidia_smi", kill_grace=2)
    assert result["changed"] is True and result["clean"] is True and result["killed"] == [holder.pid]
    assert holder.wait(5) == -15
    again = run(localhost, reclaim=True, backend="nvidia_smi")
    assert again["changed"] is False and again["killed"] == []
