# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whose a process is, by its marker, and whether that instance is live: real processes, real state files
and locks. Another live instance's process is never in a reclaim scope, whatever the patterns say."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import (
    _gpu, _idle_check, _instances, _lock, _marker, _procs, _supervisor)

import fake_pynvml

HOLDER = os.path.join(os.path.dirname(__file__), "..", "..", "..", "support", "gpu_holder.py")


def spawn(state_dir, name="b", version=2, label="vllm"):
    marker = _marker.make(name, str(state_dir))
    value = marker.value() if version == 2 else marker.identity
    proc = subprocess.Popen([sys.executable, HOLDER, label], env=dict(os.environ, INFEROPS_INSTANCE=value),
                            cwd=str(state_dir))
    time.sleep(0.15)
    return proc


def record(state_dir, name, pid, **extra):
    info = _procs.read_proc(pid)
    _supervisor.StateStore(name, str(state_dir)).save(dict({"pid": pid, "starttime": info.starttime}, **extra))


@pytest.fixture
def procs():
    started = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_unmarked_process_belongs_to_no_instance(procs):
    env = dict((k, v) for k, v in os.environ.items() if k != "INFEROPS_INSTANCE")
    procs.append(subprocess.Popen([sys.executable, HOLDER, "vllm"], env=env))
    time.sleep(0.15)
    assert _instances.Instances("a@0123456789ab").ownership(procs[0].pid) is None


def test_own_marker_is_own_even_when_its_record_names_another_pid(tmp_path, procs):
    procs.append(spawn(tmp_path, "a"))
    owner = _instances.Instances(_marker.identity("a", str(tmp_path))).ownership(procs[0].pid)
    assert owner.kind == _instances.OWN and not owner.live


@pytest.mark.parametrize("version", [1, 2])
def test_another_instance_with_a_live_record_is_live_and_named(tmp_path, procs, version):
    procs.append(spawn(tmp_path, "b", version))
    record(tmp_path, "b", procs[0].pid, variant="fast")
    owner = _instances.Instances(_marker.identity("a", str(tmp_path))).ownership(procs[0].pid)
    assert owner.live and (owner.pid, owner.variant) == (procs[0].pid, "fast")
    assert owner.holds([4], procs[0].pid, _marker.identity("a", str(tmp_path))) == (
        "GPU 4 is held by instance b (pid %d, variant fast): give each instance its own GPUs (gpu_check.gpus and "
        "CUDA_VISIBLE_DEVICES), or stop b" % procs[0].pid)
    # seen from another state directory, or from a check of no instance, b's directory is named
    assert "GPUs 4, 5 are held by instance b of %s (pid" % tmp_path in owner.holds([4, 5], procs[0].pid, None)


def test_a_worker_of_a_live_instance_is_live_and_says_which_pid_serves(tmp_path, procs):
    procs.extend([spawn(tmp_path, "b"), spawn(tmp_path, "b")])
    record(tmp_path, "b", procs[0].pid, variant="fast")
    owner = _instances.Instances(None).ownership(procs[1].pid)
    assert owner.live and "(pid %d, variant fast, serving as pid %d)" % (procs[1].pid, procs[0].pid) in owner.holds(
        [0], procs[1].pid)


def test_an_instance_whose_recorded_engine_is_gone_left_a_leftover(tmp_path, procs):
    procs.extend([spawn(tmp_path, "b"), spawn(tmp_path, "b")])
    record(tmp_path, "b", procs[0].pid)
    procs[0].kill()
    procs[0].wait()
    owner = _instances.Instances(None).ownership(procs[1].pid)
    assert owner.kind == _instances.LEFTOVER and "whose recorded engine pid %d is gone" % procs[0].pid in owner.describe()
    assert _instances.Instances(None).ownership(spawn_after(tmp_path, procs)).kind == _instances.LEFTOVER


def spawn_after(tmp_path, procs):
    _supervisor.StateStore("b", str(tmp_path)).clear()
    procs.append(spawn(tmp_path, "b"))
    return procs[-1].pid


def test_an_instance_being_changed_is_live_though_nothing_is_recorded(tmp_path, procs):
    procs.append(spawn(tmp_path, "b"))
    lock = _lock.InstanceLock(str(tmp_path), "b").acquire("switch to fast (sha256:1)", 1)
    try:
        assert _lock.held(str(tmp_path), "b")
        owner = _instances.Instances(None).ownership(procs[0].pid)
        assert owner.live and "being changed by pid %d (switch to fast" % os.getpid() in owner.why
    finally:
        lock.release()
    assert not _lock.held(str(tmp_path), "b")
    assert not _lock.held(str(tmp_path), "nobody")
    assert _instances.Instances(None).ownership(procs[0].pid).kind == _instances.LEFTOVER


def test_what_cannot_be_known_counts_as_live(tmp_path, procs):
    (tmp_path / "b.json").write_text('{"varia')
    procs.append(spawn(tmp_path, "b"))
    assert _instances.Instances(None).ownership(procs[0].pid).live  # a corrupt state file
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.Popen([sys.executable, HOLDER], cwd=str(elsewhere),
                            env=dict(os.environ, INFEROPS_INSTANCE=_marker.identity("c", str(tmp_path / "gone"))))
    procs.append(proc)
    time.sleep(0.15)
    owner = _instances.Instances(None).ownership(proc.pid)  # version 1, not started in its state directory
    assert owner.live and "does not say where its state is" in owner.why


def _nvml(children):
    nv = fake_pynvml.FakeNvml([fake_pynvml.gpu(0)])
    nv.nvmlDeviceGetComputeRunningProcesses = lambda handle: [
        fake_pynvml.types.SimpleNamespace(pid=c.pid, usedGpuMemory=1024 * 1024 * 1024)
        for c in children if _procs.alive(c.pid)]
    return nv


def test_a_check_with_reclaim_all_never_signals_another_live_instance_and_names_it(tmp_path, procs):
    procs.append(spawn(tmp_path, "b", label="VLLM::EngineCore"))
    record(tmp_path, "b", procs[0].pid, variant="nextn")
    p = dict((key, spec.get("default")) for key, spec in _idle_check.ARGUMENT_SPEC.items())
    p.update(reclaim=True, reclaim_all=True, reclaim_match=[".*"])
    check = _idle_check.IdleCheck(_gpu.NvmlBackend(_nvml(procs)), [0], reclaim=True, timeout=5, poll_interval=0.01,
                                  kill_grace=1, scope=_idle_check.scope(p, _marker.identity("a", str(tmp_path))))
    with pytest.raises(_idle_check.CheckFailed) as failed:
        check.run()
    assert failed.value.msg == ("GPU 0 is held by instance b (pid %d, variant nextn): give each instance its own GPUs "
                                "(gpu_check.gpus and CUDA_VISIBLE_DEVICES), or stop b" % procs[0].pid)
    assert failed.value.result["killed"] == [] and procs[0].poll() is None
    assert failed.value.result["gpus"][0]["processes"][0]["instance"] == "b"
    # the same holder once b no longer has a live record: a leftover, reclaimed
    _supervisor.StateStore("b", str(tmp_path)).clear()
    check = _idle_check.IdleCheck(_gpu.NvmlBackend(_nvml(procs)), [0], reclaim=True, timeout=5, poll_interval=0.01,
                                  kill_grace=1, scope=_idle_check.scope(p, _marker.identity("a", str(tmp_path))))
    assert check.run()["killed"] == [procs[0].pid] and procs[0].wait(5) == -15


def test_a_group_signal_never_takes_in_another_live_instances_process(tmp_path, procs):
    procs.append(spawn(tmp_path, "b"))
    record(tmp_path, "b", procs[0].pid)
    scope = _procs.Scope(reclaim_all=True, patterns=[".*"], owners=_instances.Instances(None))
    mine = _procs.ProcInfo(pid=10 ** 7, ppid=1, pgid=4242, sid=4242, state="S", starttime=1, comm="vllm",
                           argv=["vllm"], exe="")
    theirs = _procs.read_proc(procs[0].pid)
    theirs.pgid = 4242
    assert scope.classify(theirs)[0] == "instance"
    targets = scope.targets([mine], procs=[mine, theirs])
    assert [(t.pgid, t.pid) for t in targets] == [(None, mine.pid)]  # the holder alone, not its group
