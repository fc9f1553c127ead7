# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Scope and protection rules: who may be signalled, and whether as a whole group."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _procs

HOLDER = os.path.join(os.path.dirname(__file__), "..", "..", "..", "support", "gpu_holder.py")


def proc(pid, argv, pgid=None, comm=None, exe="", ppid=1, state="S"):
    return _procs.ProcInfo(pid=pid, ppid=ppid, pgid=pgid or pid, sid=pgid or pid, state=state, starttime=pid * 10,
                           comm=comm if comm is not None else os.path.basename(argv[0])[:15], argv=argv, exe=exe)


@pytest.fixture
def scope():
    s = _procs.Scope()
    s.untouchable = {1, 500, 501}  # pretend: init, our shell, our ansible process
    return s


@pytest.mark.parametrize("argv", [
    ["python3", "-m", "sglang.launch_server", "--model-path", "m"],
    ["/opt/venv/bin/vllm", "serve", "m"],
    ["VLLM::EngineCore"],
    ["trtllm-serve", "serve", "m"],
    ["/usr/bin/transformers", "serve", "/models/tiny"],
    ["text-generation-launcher", "--model-id", "m"],
])
def test_engine_processes_are_in_default_scope(scope, argv):
    assert scope.classify(proc(1000, argv))[0] == "reclaim"


def test_unrelated_process_is_out_of_scope_unless_reclaim_all(scope):
    assert scope.classify(proc(1000, ["python3", "train.py"]))[0] == "out_of_scope"
    wide = _procs.Scope(reclaim_all=True)
    assert wide.classify(proc(1000, ["python3", "train.py"]))[0] == "reclaim"


@pytest.mark.parametrize("info", [
    proc(2000, ["/usr/bin/nvidia-persistenced", "--user", "nvidia"]),
    proc(2001, ["/usr/bin/nv-hostengine", "-n"]),
    proc(2002, ["/usr/bin/dcgm-exporter"]),
    # comm is cut to 15 characters; argv[0] rewritten, executable renamed
    proc(2003, ["daemon"], comm="nvidia-fabricma"),
    proc(2004, ["x"], comm="x", exe="/usr/bin/nvidia-persistenced"),
])
def test_protected_daemons_are_never_in_scope_even_with_reclaim_all(info):
    wide = _procs.Scope(reclaim_all=True, patterns=[".*"])
    assert wide.classify(info)[0] == "protected"


def test_own_process_and_ancestors_are_untouchable(scope):
    assert scope.classify(proc(501, ["python3", "vllm-ish ansible module"]))[0] == "self"
    real = _procs.Scope(patterns=[".*"], reclaim_all=True)
    assert real.classify(_procs.read_proc(os.getpid()))[0] == "self"
    assert real.classify(_procs.read_proc(os.getppid()))[0] == "self"


def test_invisible_pid_is_never_signalled(scope):
    assert scope.classify(None)[0] == "invisible"


def test_bad_regex_names_the_pattern():
    with pytest.raises(ValueError, match=r"reclaim_match: '\(vllm' is not a valid regular expression"):
        _procs.Scope(patterns=["(vllm"])


def test_whole_group_when_every_member_is_in_scope(scope):
    launcher = proc(3000, ["python3", "-m", "sglang.launch_server"], pgid=3000)
    sched = proc(3001, ["sglang::scheduler_TP0"], pgid=3000)
    detok = proc(3002, ["sglang::detokenizer"], pgid=3000)
    targets = scope.targets([sched], procs=[launcher, sched, detok])
    assert len(targets) == 1 and targets[0].pgid == 3000 and targets[0].pids == [3000, 3001, 3002]


def test_only_the_holder_when_the_group_has_a_stranger(scope):
    # a leftover started from the same shell or playbook shares the group with things we must not touch
    shell = proc(4000, ["bash"], pgid=4000)
    holder = proc(4001, ["vllm", "serve", "m"], pgid=4000)
    targets = scope.targets([holder], procs=[shell, holder])
    assert len(targets) == 1 and targets[0].pgid is None and targets[0].pids == [4001]


def test_never_our_own_group(scope):
    ours = proc(500, ["vllm", "serve", "m"], pgid=500)  # even if we "look like" an engine
    holder = proc(4001, ["vllm", "serve", "m"], pgid=500)
    targets = scope.targets([holder], procs=[ours, holder])
    assert targets[0].pgid is None


def test_reclaim_all_groups_only_holders(scope):
    wide = _procs.Scope(reclaim_all=True)
    wide.untouchable = scope.untouchable
    a = proc(5000, ["python3", "job.py"], pgid=5000)
    b = proc(5001, ["python3", "worker.py"], pgid=5000)
    assert wide.targets([a, b], procs=[a, b])[0].pgid == 5000
    c = proc(5002, ["sleep", "100"], pgid=5000)
    assert [t.pgid for t in wide.targets([a, b], procs=[a, b, c])] == [None, None]


def test_zombie_group_members_do_not_block_a_group_signal(scope):
    holder = proc(6000, ["vllm", "serve"], pgid=6000)
    zombie = proc(6001, ["bash"], pgid=6000, state="Z")
    assert scope.targets([holder], procs=[holder, zombie])[0].pgid == 6000


def test_read_proc_and_alive_on_real_processes():
    child = subprocess.Popen([sys.executable, HOLDER, "vllm", "serve", "x y"])
    try:
        for _attempt in range(100):
            info = _procs.read_proc(child.pid)
            if info and "vllm" in info.argv:
                break
            time.sleep(0.02)
        assert info.argv[-3:] == ["vllm", "serve", "x y"]
        assert info.ppid == os.getpid()
        assert _procs.alive(child.pid)
        assert not _procs.alive(child.pid, starttime=info.starttime + 1)  # a reused PID is not ours
    finally:
        child.kill()
        child.wait()
    assert not _procs.alive(child.pid)


def test_send_skips_a_reused_pid():
    child = subprocess.Popen([sys.executable, HOLDER])
    try:
        time.sleep(0.1)
        info = _procs.read_proc(child.pid)
        stale = _procs.Target(pid=child.pid, members=[(child.pid, info.starttime + 1)])
        assert _procs.send(stale, _procs.SIGTERM) == []
        assert child.poll() is None
        live = _procs.Target(pid=child.pid, members=[(child.pid, info.starttime)])
        assert _procs.send(live, _procs.SIGTERM) == [child.pid]
        assert child.wait(5) == -15
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_environ_marker():
    env = dict(os.environ, INFEROPS_INSTANCE="demo:1234")
    child = subprocess.Popen([sys.executable, HOLDER], env=env)
    try:
        time.sleep(0.1)
        assert _procs.environ_has(child.pid, "INFEROPS_INSTANCE", "demo:1234")
        assert not _procs.environ_has(child.pid, "INFEROPS_INSTANCE", "other:1")
    finally:
        child.kill()
        child.wait()
