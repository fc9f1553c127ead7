# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_idle_check through real ansible-playbook runs on localhost, against the fake nvidia-smi.

The holders are real processes: a reclaim really signals them, and the fake GPU is freed only
when they really die.
"""

from __future__ import annotations

import os
import sys
import time

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: check
      inferops.serving.gpu_idle_check: {args}
      register: check
"""


def play(**args):
    import json
    return PLAY.format(args=json.dumps(args))


def test_leftover_on_gpu7_only_is_found_and_reclaimed(run_playbook, fake_gpus):
    leftover = fake_gpus.hold(7, used_mib=81920, args=["-m", "vllm.entrypoints.openai.api_server"])
    bystander = fake_gpus.hold(3, used_mib=0, args=["train.py"])  # holds GPU 3, but not ours
    fake_gpus.state["holders"] = [h for h in fake_gpus.state["holders"] if h["pid"] != bystander.pid]
    fake_gpus.save()
    run = run_playbook(play(reclaim=True, kill_grace=2, timeout=20, backend="nvidia_smi"), env=fake_gpus.env)
    assert run.rc == 0, run.stdout
    result = run.result(task="check")
    assert [g["index"] for g in result["gpus"]] == list(range(8))  # every GPU, not the first two
    assert result["killed"] == [leftover.pid]
    assert result["clean"] and all(g["clean"] for g in result["gpus"])
    assert leftover.wait(5) == -15
    assert bystander.poll() is None  # not a GPU holder, never touched
    assert run.recap()["changed"] == 1


def test_without_reclaim_fails_naming_gpu_and_holder(run_playbook, fake_gpus):
    leftover = fake_gpus.hold(7, used_mib=4096, args=["sglang.launch_server"])
    run = run_playbook(play(timeout=0.5, backend="nvidia_smi"), env=fake_gpus.env)
    assert run.rc == 2
    msg = run.result(task="check")["msg"]
    assert msg.startswith("GPUs not clean after 0.5s: GPU 7 (GPU-00000007-")
    assert "pid %d" % leftover.pid in msg and "4096 MiB" in msg and "[in reclaim scope]" in msg
    assert "GPU 0" not in msg
    assert leftover.poll() is None


def test_protected_daemon_is_never_signalled(run_playbook, fake_gpus, tmp_path):
    # a real process whose executable name is nvidia-persistenced (comm is cut to 15 characters)
    daemon_bin = tmp_path / "nvidia-persistenced"
    os.symlink(os.path.realpath(sys.executable), str(daemon_bin))
    daemon = fake_gpus.hold(2, used_mib=16, argv=[str(daemon_bin), os.path.join(os.path.dirname(__file__), "..", "support", "gpu_holder.py")])
    run = run_playbook(play(reclaim=True, reclaim_all=True, timeout=5, kill_grace=1, backend="nvidia_smi"),
                       env=fake_gpus.env)
    assert run.rc == 2
    msg = run.result(task="check")["msg"]
    assert "GPU 2 is held by protected process" in msg and "(pid %d)" % daemon.pid in msg
    time.sleep(0.2)
    assert daemon.poll() is None
    assert run.result(task="check")["killed"] == []


def test_check_mode_reports_and_kills_nothing(run_playbook, fake_gpus):
    leftover = fake_gpus.hold(7, args=["vllm", "serve", "m"])
    run = run_playbook(play(reclaim=True, backend="nvidia_smi"), env=fake_gpus.env, check=True, diff=True)
    assert run.rc == 0, run.stdout
    result = run.result(task="check")
    assert result["changed"] and result["would_kill"] == [leftover.pid] and result["killed"] == []
    assert "-        - %d" % leftover.pid in run.stdout or "- %d" % leftover.pid in run.stdout  # the diff
    time.sleep(0.2)
    assert leftover.poll() is None


def test_holder_that_ignores_sigterm_gets_sigkill(run_playbook, fake_gpus):
    stubborn = fake_gpus.hold(5, args=["--ignore-term", "trtllm-serve", "serve"])
    start = time.monotonic()
    run = run_playbook(play(reclaim=True, kill_grace=1, timeout=15, backend="nvidia_smi"), env=fake_gpus.env)
    assert run.rc == 0, run.stdout
    assert run.result(task="check")["killed"] == [stubborn.pid]
    assert stubborn.wait(5) == -9
    assert time.monotonic() - start >= 1


def test_host_without_gpus(run_playbook, fake_gpus):
    fake_gpus.state = {"driver": False}
    fake_gpus.save()
    ok = run_playbook(play(require_gpus=False), env=fake_gpus.env)
    assert ok.rc == 0, ok.stdout
    result = ok.result(task="check")
    assert result["gpus"] == [] and result["clean"] and result["backend"] == "none"
    strict = run_playbook(play(), env=fake_gpus.env)
    assert strict.rc == 2
    assert "no NVIDIA GPU can be seen" in strict.result(task="check")["msg"]


def test_role_and_playbook(run_playbook, fake_gpus):
    leftover = fake_gpus.hold(7, args=["transformers", "serve", "/m"])
    run = run_playbook(os.path.join(os.path.dirname(__file__), "..", "..", "playbooks", "gpu_check.yml"),
                       env=fake_gpus.env)
    assert run.rc == 0, run.stdout
    assert run.result(action="gpu_idle_check")["killed"] == [leftover.pid]
    assert "8 GPU(s) clean via" in run.stdout
