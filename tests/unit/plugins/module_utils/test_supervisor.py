# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _supervisor: the state store, the instance marker, the supervisor choice, the systemd unit and the systemd supervisor."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _marker, _procs, _supervisor


def test_state_store_atomic_0600_and_corrupt(tmp_path):
    store = _supervisor.StateStore("x", str(tmp_path / "state"))
    assert store.load() is None
    store.save({"pid": 1, "argv": ["a"]})
    assert store.load() == {"pid": 1, "argv": ["a"]}
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert os.listdir(str(tmp_path / "state")) == ["x.json"]  # no temp file left
    with open(store.path, "w") as handle:
        handle.write("{not json")
    assert store.load() == {"corrupt": True}
    store.clear()
    store.clear()
    assert store.load() is None


def test_marker_is_per_name_and_state_dir(tmp_path):
    assert _supervisor.marker_value("a", "/x") != _supervisor.marker_value("a", "/y")
    assert _supervisor.marker_value("a", "/x") != _supervisor.marker_value("b", "/x")
    assert _supervisor.marker_value("a", "/x").startswith("a@")


def test_auto_supervisor_is_process_without_systemd():
    assert _supervisor.choose("process") == "process"
    if not _supervisor.systemd_usable():
        assert _supervisor.choose("auto") == "process"


def test_systemd_quoting():
    assert _supervisor.systemd_quote("plain") == "plain"
    assert _supervisor.systemd_quote("a b") == '"a b"'
    assert _supervisor.systemd_quote('say "hi"') == '"say \\"hi\\""'
    assert _supervisor.systemd_quote("100%") == "100%%"
    assert _supervisor.systemd_quote("$HOME") == "$$HOME"
    assert _supervisor.systemd_quote('{"method":"mtp"}') == '"{\\"method\\":\\"mtp\\"}"'


def test_systemd_unit_renders_and_verifies(tmp_path):
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "/m dir", "--speculative-config",
            '{"method":"mtp","num_speculative_tokens":2}', "--x", "100%", "$HOME"]
    text = _supervisor.render_unit("qwen", argv, {"A": "x y", "INFEROPS_INSTANCE": "qwen@1"},
                                   str(tmp_path / "qwen.log"), 90.4)
    assert "KillMode=mixed" in text
    assert "TimeoutStopSec=90" in text
    assert 'Environment="A=x y"' in text
    unit = tmp_path / "inferops-qwen.service"
    unit.write_text(text)
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("systemd-analyze is not installed")
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "inferops-qwen.service" not in proc.stderr, proc.stderr
    bad = tmp_path / "inferops-bad.service"
    bad.write_text(text.replace("ExecStart=" + sys.executable, "ExecStart=/nonexistent/engine"))
    proc = subprocess.run([analyze, "verify", str(bad)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0  # the check is not vacuous


def test_systemd_supervisor_drives_systemctl(tmp_path):
    calls = []

    def run(argv, **dummy):
        calls.append(argv[1:])
        if argv[1] == "show":
            return 0, "MainPID=%d\nActiveState=active\nExecMainStatus=0\n" % os.getpid(), ""
        return 0, "", ""

    sup = _supervisor.SystemdSupervisor("q", str(tmp_path / "st"), str(tmp_path / "log"), unit_dir=str(tmp_path),
                                        stop_timeout=30, run=run)
    started = sup.start([os.path.basename(sys.executable), "-c", "pass"], {"A": "1"})
    unit = (tmp_path / "inferops-q.service").read_text()
    assert "ExecStart=%s -c pass" % shutil.which(os.path.basename(sys.executable)) in unit
    assert 'Environment="INFEROPS_INSTANCE=%s;v=2;dir=' % sup.marker in unit and "KillMode=mixed" in unit
    assert ["daemon-reload"] in calls and ["restart", "inferops-q.service"] in calls
    assert started["pid"] == os.getpid() and sup.exit_code(started) is None and sup.alive(started)
    sup.stop(started, 1)
    assert ["stop", "inferops-q.service"] in calls


def test_a_stop_never_takes_in_another_instances_process_from_the_recorded_group(tmp_path):
    """An engine of `a` whose process group also holds a process of `b` (b's marker): a's stop ends its
    own processes and leaves b's alive."""
    state = str(tmp_path)
    b_env = dict(os.environ, INFEROPS_INSTANCE=_marker.make("b", state).value())
    code = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
            "env=%r); time.sleep(60)" % b_env)
    leader = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                              env=dict(os.environ, INFEROPS_INSTANCE=_marker.make("a", state).value()))
    try:
        deadline = time.monotonic() + 10
        while not _marker.carriers(_marker.identity("b", state)) and time.monotonic() < deadline:
            time.sleep(0.05)
        b_pid = list(_marker.carriers(_marker.identity("b", state)))[0]
        assert _procs.read_proc(b_pid).pgid == leader.pid  # in a's group
        sup = _supervisor.ProcessSupervisor("a", state, state)
        record = {"pid": leader.pid, "pgid": leader.pid, "starttime": _procs.read_proc(leader.pid).starttime}
        assert sorted(sup.processes(record)) == [leader.pid]
        assert b_pid not in sup.stop(record, 5, grace=1)
        assert leader.wait(5) == -15 and _procs.alive(b_pid)
    finally:
        if leader.poll() is None:
            leader.kill()
            leader.wait()
        for pid in _marker.carriers(_marker.identity("b", str(tmp_path))):
            os.kill(pid, 9)


@pytest.mark.parametrize("umask, before", [(0o000, None), (0o022, None), (0o000, 0o666)])
def test_the_engine_log_is_0640_whatever_the_umask(tmp_path, umask, before):
    """An engine may print its arguments, a key among them: its log is never readable by every local user."""
    sup = _supervisor.ProcessSupervisor("x", str(tmp_path / "state"), str(tmp_path / "log"))
    if before is not None:  # a log an earlier version left world-readable
        os.makedirs(sup.log_dir)
        with open(sup.log_path, "w") as handle:
            handle.write("old\n")
        os.chmod(sup.log_path, before)
    old = os.umask(umask)
    try:
        handle, offset = sup._open_log(["engine"])
        handle.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(sup.log_path).st_mode) == 0o640
    assert offset == 0  # a new log for each start
    if before is not None:  # the earlier log, rotated to x.log.1, is not left readable by everyone either
        assert open(sup.log_path + ".1").read() == "old\n"
        assert stat.S_IMODE(os.stat(sup.log_path + ".1").st_mode) == 0o640


def _logs(sup):
    return sorted(name for name in os.listdir(sup.log_dir) if name.startswith("x.log"))


@pytest.mark.parametrize("keep", [1, 2, 3, 5])
def test_each_start_gets_a_new_log_and_keep_logs_remain(tmp_path, keep):
    sup = _supervisor.ProcessSupervisor("x", str(tmp_path / "state"), str(tmp_path / "log"), log_keep=keep)
    for start in range(7):
        handle, dummy = sup._open_log(["engine"])
        handle.write(("start %d\n" % start).encode())
        handle.close()
    expected = ["x.log"] + ["x.log.%d" % i for i in range(1, keep)]
    assert _logs(sup) == sorted(expected)
    for index in range(keep):  # x.log is the last start, x.log.N the one N starts before
        path = _supervisor.log_holding(sup.log_path, index)
        assert open(path).read().endswith("start %d\n" % (6 - index))
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640


def test_a_smaller_log_keep_removes_the_logs_beyond_it(tmp_path):
    sup = _supervisor.ProcessSupervisor("x", str(tmp_path / "state"), str(tmp_path / "log"), log_keep=6)
    for dummy in range(6):
        sup._open_log(["engine"])[0].close()
    assert len(_logs(sup)) == 6
    sup.log_keep = 2
    sup._open_log(["engine"])[0].close()
    assert _logs(sup) == ["x.log", "x.log.1"]
