# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The scenario's blind spot on 8 (fake) GPUs, as tests/gpu/multi_gpu.sh plays it on real ones.

`nvidia-smi --query-gpu=index,memory.used --format=csv,noheader | head -2` says GPUs 0 and 1 are
free while GPU 7 (then GPUs 3 and 7) hold a leftover and a protected daemon holds another GPU.
gpu_idle_check lists all 8, reclaims the leftovers and leaves the protected process alone,
failing with its name and GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HOLDER = os.path.join(os.path.dirname(__file__), "..", "support", "gpu_holder.py")
PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: check
      inferops.serving.gpu_idle_check: %s
"""
ARGS = {"reclaim": True, "kill_grace": 2, "timeout": 20, "backend": "nvidia_smi"}


def head2(fake_gpus):
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader"],
                         env=dict(os.environ, **fake_gpus.env), capture_output=True, text=True, check=True).stdout
    return out.splitlines()[:2]


def test_leftover_on_gpu7_reclaimed_protected_daemon_left_and_named(run_playbook, fake_gpus, tmp_path):
    daemon_bin = tmp_path / "nv-hostengine"
    os.symlink(os.path.realpath(sys.executable), str(daemon_bin))
    daemon = fake_gpus.hold(5, used_mib=512, argv=[str(daemon_bin), HOLDER])
    leftover = fake_gpus.hold(7, used_mib=81920, args=["sglang.launch_server", "--tp-size", "8"])
    assert head2(fake_gpus) == ["0, 0 MiB", "1, 0 MiB"]  # what the manual check looked at: "all clean"
    run = run_playbook(PLAY % json.dumps(ARGS), env=fake_gpus.env)
    assert run.rc == 2
    result = run.result(task="check")
    assert [g["index"] for g in result["gpus"]] == list(range(8))
    assert result["killed"] == [leftover.pid] and leftover.wait(5) == -15
    assert "GPU 5 is held by protected process" in result["msg"]
    assert "nv-hostengine (pid %d); it is never signalled" % daemon.pid in result["msg"]
    time.sleep(0.2)
    assert daemon.poll() is None


def test_leftovers_on_gpus_3_and_7_both_reclaimed(run_playbook, fake_gpus):
    left3 = fake_gpus.hold(3, used_mib=40960, args=["vllm", "serve", "m"])
    left7 = fake_gpus.hold(7, used_mib=40960, args=["VLLM::EngineCore"])
    run = run_playbook(PLAY % json.dumps(ARGS), env=fake_gpus.env)
    assert run.rc == 0, run.stdout[-2000:]
    result = run.result(task="check")
    assert sorted(result["killed"]) == sorted([left3.pid, left7.pid])
    dirty_first = [g for g in result["gpus"] if not g["clean"]]
    assert result["clean"] and not dirty_first and len(result["gpus"]) == 8
