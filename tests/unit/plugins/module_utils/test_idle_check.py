# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The poll loop: deadline, no fixed sleep, escalation, check mode, failure messages."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _gpu, _idle_check, _procs

import fake_pynvml

HOLDER = os.path.join(os.path.dirname(__file__), "..", "..", "..", "support", "gpu_holder.py")
MIB = 1024 * 1024


class Clock(object):
    """A fake monotonic clock; sleep() advances it."""

    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


class ScriptedBackend(object):
    """Returns one scripted list of GPUs per snapshot (the last one repeats)."""

    name = "scripted"

    def __init__(self, frames):
        self.frames = frames
        self.calls = 0

    def snapshot(self, indices, health=True):
        frame = self.frames[min(self.calls, len(self.frames) - 1)]
        self.calls += 1
        return [dict(g, processes=list(g["processes"]), health=dict(g["health"])) for g in frame(self.calls)]


def gpu(index, used=0, pids=()):
    g = _gpu.new_gpu(index, "GPU-%d" % index, "NVIDIA H200", used, 143771)
    g["processes"] = [{"pid": p, "name": "python", "used_mib": used, "type": "compute", "mig_device": None}
                      for p in pids]
    return g


def test_clean_at_once_returns_without_sleeping():
    clock = Clock()
    check = _idle_check.IdleCheck(ScriptedBackend([lambda n: [gpu(i) for i in range(8)]]), range(8),
                                  clock=clock, sleep=clock.sleep)
    result = check.run()
    assert result["clean"] and len(result["gpus"]) == 8 and clock.sleeps == []
    assert result["killed"] == [] and result["changed"] is False


def test_polls_until_clean_then_returns_within_one_interval():
    clock = Clock()
    frames = [lambda n: [gpu(0, used=900)] if n < 4 else [gpu(0)]]
    check = _idle_check.IdleCheck(ScriptedBackend(frames), [0], timeout=10, poll_interval=0.05,
                                  clock=clock, sleep=clock.sleep)
    result = check.run()
    assert result["clean"]
    assert clock.sleeps == [0.05, 0.05, 0.05]
    assert result["waited_s"] == pytest.approx(0.15)


def test_the_time_a_read_takes_counts_against_the_interval():
    clock = Clock()

    def slow_read(n):
        clock.now += 0.03  # each read takes 30 ms (an nvidia-smi call)
        return [gpu(0, used=900)] if n < 3 else [gpu(0)]
    check = _idle_check.IdleCheck(ScriptedBackend([slow_read]), [0], timeout=10, poll_interval=0.1,
                                  clock=clock, sleep=clock.sleep)
    assert check.run()["clean"]
    assert clock.sleeps == pytest.approx([0.07, 0.07])


def test_deadline_fails_naming_each_dirty_gpu_and_holder():
    clock = Clock()
    frames = [lambda n: [gpu(0), gpu(7, used=4096, pids=[os.getpid()])]]
    check = _idle_check.IdleCheck(ScriptedBackend(frames), [0, 7], timeout=2, poll_interval=0.5,
                                  clock=clock, sleep=clock.sleep)
    with pytest.raises(_idle_check.CheckFailed) as info:
        check.run()
    msg = info.value.msg
    assert msg.startswith("GPUs not clean after 2.0s: GPU 7 (GPU-7): 4096 MiB used (limit 0)")
    assert "pid %d python, 4096 MiB [this check or its ancestor]" % os.getpid() in msg
    assert "GPU 0" not in msg
    assert sum(clock.sleeps) == pytest.approx(2.0)
    assert info.value.result["clean"] is False


def test_threshold_allows_small_usage():
    clock = Clock()
    check = _idle_check.IdleCheck(ScriptedBackend([lambda n: [gpu(0, used=12)]]), [0], max_used_mib=16,
                                  clock=clock, sleep=clock.sleep)
    assert check.run()["clean"]


def test_protected_holder_fails_at_once_and_names_it():
    clock = Clock()
    scope = _procs.Scope()
    scope.classify = lambda info: ("protected", "protected process")
    frames = [lambda n: [gpu(3, used=10, pids=[4242])]]
    frames_backend = ScriptedBackend(frames)
    check = _idle_check.IdleCheck(frames_backend, [3], reclaim=True, scope=scope, clock=clock, sleep=clock.sleep)
    with pytest.raises(_idle_check.CheckFailed, match="GPU 3 is held by protected process python"):
        check.run()
    assert clock.sleeps == [] and check.killed == []


def test_unhealthy_gpu_fails_at_once():
    clock = Clock()
    bad = gpu(2)
    bad["health"]["ecc_uncorrected_volatile"] = 5
    check = _idle_check.IdleCheck(ScriptedBackend([lambda n: [gpu(0), bad]]), [0, 2], clock=clock, sleep=clock.sleep)
    with pytest.raises(_idle_check.CheckFailed, match=r"GPU 2 \(GPU-2, PCI unknown\) is unhealthy: 5 uncorrected volatile ECC"):
        check.run()


def _holder(*args):
    child = subprocess.Popen([sys.executable, HOLDER] + list(args))
    for _attempt in range(200):
        info = _procs.read_proc(child.pid)
        if info and info.argv[1:2] == [HOLDER]:
            return child
        time.sleep(0.01)
    return child


def _nvml_for(children):
    """A fake NVML whose GPU 0 is held by the given real processes while they live."""
    nv = fake_pynvml.FakeNvml([fake_pynvml.gpu(0)])

    def procs(handle):
        return [fake_pynvml.types.SimpleNamespace(pid=c.pid, usedGpuMemory=1024 * MIB)
                for c in children if _procs.alive(c.pid)]
    nv.nvmlDeviceGetComputeRunningProcesses = procs
    return nv


def test_reclaim_terminates_in_scope_holder_and_waits_until_free():
    child = _holder("vllm", "serve", "leftover")
    try:
        check = _idle_check.IdleCheck(_gpu.NvmlBackend(_nvml_for([child])), [0], reclaim=True, timeout=10,
                                      poll_interval=0.01, kill_grace=5)
        result = check.run()
        assert result["clean"] and result["killed"] == [child.pid] and result["changed"]
        assert child.wait(5) == -15  # SIGTERM was enough
    finally:
        if child.poll() is None:
            child.kill()


def test_reclaim_escalates_to_sigkill_after_grace():
    child = _holder("--ignore-term", "sglang.launch_server")
    try:
        time.sleep(0.2)  # let it install its SIGTERM handler
        start = time.monotonic()
        check = _idle_check.IdleCheck(_gpu.NvmlBackend(_nvml_for([child])), [0], reclaim=True, timeout=10,
                                      poll_interval=0.01, kill_grace=0.5)
        result = check.run()
        assert result["clean"] and result["killed"] == [child.pid]
        assert child.wait(5) == -9
        assert 0.5 <= time.monotonic() - start < 3
    finally:
        if child.poll() is None:
            child.kill()


def test_out_of_scope_holder_is_left_alone_until_the_deadline():
    child = _holder("train.py")
    try:
        check = _idle_check.IdleCheck(_gpu.NvmlBackend(_nvml_for([child])), [0], reclaim=True, timeout=0.3,
                                      poll_interval=0.05, kill_grace=0.1)
        with pytest.raises(_idle_check.CheckFailed, match=r"\[not in reclaim scope\]"):
            check.run()
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_check_mode_reports_would_kill_and_kills_nothing():
    child = _holder("vllm", "serve")
    try:
        check = _idle_check.IdleCheck(_gpu.NvmlBackend(_nvml_for([child])), [0], reclaim=True, check_mode=True)
        result = check.run()
        assert result["changed"] and result["would_kill"] == [child.pid] and result["killed"] == []
        assert result["clean"] is False
        time.sleep(0.1)
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_unset_protected_means_the_one_built_in_list():
    p = dict((key, spec.get("default")) for key, spec in _idle_check.ARGUMENT_SPEC.items())
    assert p["protected"] is None  # no copy of the list in the argument spec (nor in the docs)
    assert _idle_check.scope(p).protected == _procs.DEFAULT_PROTECTED
    assert _idle_check.scope(dict(p, protected=["my-monitor"])).protected == ("my-monitor",)
    assert _idle_check.scope(dict(p, protected=[])).protected == ()  # a list replaces it, as before
