# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The process supervisor's watchdog with real processes: how an engine ended is recorded and read by a
later supervisor object (another module call), no zombie is left, a launch failure is an error, a watchdog
killed by hand leaves the engine stoppable, and the stop is orderly (main process first)."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
from run_command import run_command

from ansible_collections.inferops.serving.plugins.module_utils import _procs, _supervisor

SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                       "support")


def supervisor(tmp_path):
    """A fresh supervisor object, as each module call makes one."""
    return _supervisor.ProcessSupervisor("wd", str(tmp_path / "state"), str(tmp_path / "log"), run=run_command)


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def gone(pid):
    """No process, not even a zombie, has this pid."""
    return _procs.read_proc(pid) is None


def test_the_exit_code_is_recorded_and_read_by_a_later_call_and_no_zombie_lingers(tmp_path):
    record = supervisor(tmp_path).start([sys.executable, "-c", "import time, sys; time.sleep(0.3); sys.exit(3)"], {})
    assert record["watchdog"] != os.getpid() and record["pid"] != record["watchdog"]
    info = _procs.read_proc(record["pid"])
    assert info.pgid == record["pid"] and info.ppid == record["watchdog"]  # its own group, the watchdog's child
    assert _procs.read_proc(record["watchdog"]).pgid != info.pgid
    wait_for(lambda: gone(record["pid"]))
    later = supervisor(tmp_path)
    end = later.ending(record)
    assert end["code"] == 3 and end["signal"] is None and end["message"].startswith("exited with code 3 at ")
    assert later.exit_code(record) == 3
    wait_for(lambda: gone(record["watchdog"]))  # a watchdog whose engine is gone exits


def test_a_signal_is_named(tmp_path):
    sup = supervisor(tmp_path)
    record = sup.start([sys.executable, "-c", "import time; time.sleep(60)"], {})
    assert sup.ending(record) is None and sup.exit_code(record) is None
    os.kill(record["pid"], signal.SIGKILL)
    wait_for(lambda: gone(record["pid"]))
    end = supervisor(tmp_path).ending(record)
    assert end["signal"] == "SIGKILL" and end["code"] is None and end["message"].startswith("was killed by SIGKILL at ")
    assert _supervisor.exit_code_of(end) == -9


def test_the_engine_gets_env_marker_cwd_and_log_and_never_a_shell(tmp_path):
    sup = supervisor(tmp_path)
    code = "import os; print(os.environ['A'], os.environ['INFEROPS_INSTANCE'], os.getcwd(), flush=True)"
    record = sup.start([sys.executable, "-c", code, "$HOME", "~"], {"A": "one two"})
    wait_for(lambda: gone(record["pid"]))
    log = open(sup.log_path).read()
    assert "one two %s %s" % (sup.marker_env(), sup.state_dir) in log
    assert supervisor(tmp_path).ending(record)["code"] == 0
    # the watchdog itself carries no marker: a stop's sweep never ends it before it records the exit
    record = sup.start([sys.executable, "-c", "import time; time.sleep(60)"], {})
    try:
        assert _procs.environ_get(record["watchdog"], _supervisor.MARKER_KEY) is None
        assert _procs.environ_has(record["pid"], _supervisor.MARKER_KEY, sup.marker_env())
    finally:
        sup.stop(record, 5)


def test_a_launch_that_cannot_exec_is_an_error(tmp_path):
    with pytest.raises(_supervisor.SupervisorError, match=r"cannot launch '/nonexistent/engine': No such file"):
        supervisor(tmp_path).start(["/nonexistent/engine", "--port", "1"], {})


def test_a_watchdog_killed_by_hand_leaves_the_engine_stoppable(tmp_path):
    sup = supervisor(tmp_path)
    record = sup.start([sys.executable, "-c", "import time; time.sleep(60)"], {})
    os.kill(record["watchdog"], signal.SIGKILL)
    wait_for(lambda: not _procs.alive(record["watchdog"]))
    assert _procs.alive(record["pid"], starttime=record["starttime"])  # the engine lives on
    later = supervisor(tmp_path)
    assert later.alive(record) and later.ending(record) is None
    assert record["pid"] in later.stop(record, 5)
    wait_for(lambda: not _procs.alive(record["pid"]))
    assert "its watchdog (pid %d) ended before it" % record["watchdog"] in later.ending(record)["message"]


def test_the_stop_asks_the_main_process_first_so_its_worker_releases(tmp_path):
    """fake_engine --worker: the worker releases only when the main process asks; a group-wide SIGTERM
    would reach it first and leak."""
    sup = supervisor(tmp_path)
    flag = tmp_path / "worker"
    record = sup.start([sys.executable, os.path.join(SUPPORT, "fake_engine.py"), "--port", "0", "--mode", "never-ready",
                        "--worker", str(flag)], {})
    wait_for(lambda: "worker" in open(sup.log_path).read())
    group = [i.pid for i in _procs.list_procs() if i.pgid == record["pgid"] and i.state not in ("Z", "X")]
    assert len(group) == 2
    signalled = sup.stop(record, 20, grace=10)
    assert flag.read_text() == "released"
    assert signalled == [record["pid"]]  # nothing else needed a signal
    end = supervisor(tmp_path).ending(record)
    assert end["code"] == 0, end

    # a main process that ignores SIGTERM: after the grace the group gets SIGTERM, then SIGKILL at the timeout
    record = sup.start([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                        "time.sleep(60)"], {})
    wait_for(lambda: _procs.read_proc(record["pid"]) is not None and "signal" in " ".join(
        open("/proc/%d/cmdline" % record["pid"]).read().split("\0")))
    time.sleep(0.3)  # the handler is installed
    started = time.monotonic()
    sup.stop(record, 1.5, grace=0.5)
    assert 1.4 <= time.monotonic() - started < 10
    assert supervisor(tmp_path).ending(record)["signal"] == "SIGKILL"
