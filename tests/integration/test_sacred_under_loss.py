# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Sacred under loss (the first rows done): what an operator's mistakes and an engine's chatter leave, through
the real playbooks. A relative state directory is refused with nothing changed (it used to resolve under
playbooks/ and stop nothing while the server ran); the engine's log, where an engine may print its key, is
0640; a foreign holder of the instance's lock is named, not the dead process the lock file names; the first re-run
after a power cut mid-switch converges."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys

from switchbed import STOP, fake_engine, fleet, flat, serving, started, switch, untouched  # noqa: F401 pylint: disable=unused-import
from test_switch_safety import _journal, _kill_group, _popen_playbook, _wait_for

from ansible_collections.inferops.serving.plugins.module_utils import _procs


def test_a_relative_state_dir_is_refused_and_the_server_runs_on(switch, fleet):  # noqa: F811 pylint: disable=redefined-outer-name
    before = started(switch, fleet)
    for playbook in (STOP, None):
        run = switch("slow" if playbook is None else None, extra={"serving_state_dir": "state"},
                     **({"playbook": playbook} if playbook else {}))
        assert run.rc != 0
        assert "state_dir must be an absolute path, got 'state'" in flat(run)
        assert run.recap()["changed"] == 0
        untouched(fleet, before)
    assert not os.path.exists(os.path.join(os.path.dirname(STOP), "state"))


def test_the_engine_log_is_readable_by_its_owner_and_group_only(switch, fleet):  # noqa: F811 pylint: disable=redefined-outer-name
    started(switch, fleet)
    log = fleet.log_dir / "sv.log"
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o640
    os.chmod(log, 0o644)  # left so by an earlier version
    assert switch("slow", extra={"bench": "never"}).rc == 0
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o640


def test_a_foreign_lock_holder_is_named_not_the_dead_process_the_lock_file_names(switch, fleet):  # noqa: F811 pylint: disable=redefined-outer-name
    before = started(switch, fleet)
    lock = fleet.state_dir / "sv.lock"
    named = json.loads(lock.read_text())["pid"]  # the last switch's process, long gone
    assert not _procs.alive(named)
    code = "import fcntl, sys, time; f = open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"
    foreign = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert foreign.stdout.readline().strip() == "held"
        run = switch("slow", extra={"serving_lock_timeout": 1})
    finally:
        foreign.kill()
        foreign.wait()
    assert run.rc != 0
    out = flat(run)
    assert "nothing was stopped: another run is changing this instance: %s is held by pid %d (" % (lock, foreign.pid) in out
    assert "the lock file names pid %d (" % named in out and "which is gone" in out
    assert run.recap()["changed"] == 0
    untouched(fleet, before)


def test_after_a_power_cut_mid_switch_the_first_rerun_converges(switch, fleet, ansible_env):  # noqa: F811 pylint: disable=redefined-outer-name
    """The switch process, the watchdog and the engine killed at once while the new variant loads: no exit
    record says the engine failed, so the re-run starts the wanted variant afresh and says what it found,
    instead of resuming a dead load and blaming the variant."""
    fleet.add_variants({"slowload": {"command": fake_engine(fleet.port, "ok") + ["--load-s", "3"]}})
    fleet.set_vars(serving_progress_delay=30)
    started(switch, fleet)
    proc = _popen_playbook(fleet, ansible_env, "slowload")
    waiting = _wait_for(lambda: _journal(fleet).get("phase") == "waiting" and _journal(fleet), 60, "the wait")
    record = fleet.record()
    assert record["variant"] == "slowload" and record["loading"]
    for pid in (waiting["pid"], record["watchdog"], record["pid"]):  # the power cut: all at once
        os.kill(pid, signal.SIGKILL)
    _kill_group(proc)
    _wait_for(lambda: not any(_procs.alive(p) for p in (waiting["pid"], record["watchdog"], record["pid"])), 10,
              "the host's processes to be gone")
    run = switch("slowload", extra={"bench": "never"})
    assert run.rc == 0, run.stdout[-3000:]
    assert "the switch to slowload was interrupted at waiting (switch process %d gone)" % waiting["pid"] in flat(run)
    after = serving(fleet, "slowload")
    assert after["pid"] != record["pid"]
