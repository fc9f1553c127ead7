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

import pytest
from switchbed import STOP, benchmarked, engines, fake_engine, fleet, flat, port_owner, serving, started, switch, untouched  # noqa: F401 pylint: disable=unused-import
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


LOSSES = {
    "emptied": ("corrupt", lambda path: path.write_text("")),
    "half-written": ("corrupt", lambda path: path.write_text('{"varia')),
    "deleted": ("missing", lambda path: path.unlink()),
}


def _stopped_pids(run):
    return [pid for r in run.results("inference_server") + run.results("async_status")
            for pid in r["result"].get("stopped_pids") or ()]


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_a_lost_state_file_is_rebuilt_and_a_failed_switch_restores_what_served(switch, fleet, loss):  # noqa: F811 pylint: disable=redefined-outer-name
    """The state file emptied, half-written or deleted while fast serves, then a switch to a variant that
    crashes: the record is rebuilt from the engine's marker and NAME.launch.json, so the switch knows it stops
    fast, and restores it when crash fails (it used to report nothing_stopped with nothing serving)."""
    before = started(switch, fleet)
    why, lose = LOSSES[loss]
    lose(fleet.state_dir / "sv.json")
    run = switch("crash")
    assert run.rc != 0
    out = flat(run)
    assert "state file was %s: rebuilt from pid %d (variant fast)" % (why, before["pid"]) in out, out[-4000:]
    assert "switched from fast" in out or "Variant crash failed on localhost" in out
    assert "ROLLED BACK: fast serves again" in out and "nothing was stopped" not in out
    assert before["pid"] in _stopped_pids(run)
    after = serving(fleet, "fast")  # the state file, the one engine, the port's owner, /health
    assert after["pid"] != before["pid"] and after["fingerprint"] == before["fingerprint"]
    assert stat.S_IMODE(os.stat(fleet.state_dir / "sv.json").st_mode) == 0o600


def test_a_rerun_with_a_lost_state_file_keeps_the_healthy_server(switch, fleet):  # noqa: F811 pylint: disable=redefined-outer-name
    """Re-running the variant that serves, its state file gone: NAME.launch.json confirms the configuration and
    the secrets, so the same process serves on and the record is written again. Check mode writes nothing."""
    before = started(switch, fleet)
    (fleet.state_dir / "sv.json").unlink()
    plan = switch("fast", check=True)
    assert plan.rc == 0 and fleet.record() is None
    assert "state file was missing: rebuilt from pid %d (variant fast)" % before["pid"] in flat(plan)
    run = switch("fast")  # bench auto: a switch would benchmark
    assert run.rc == 0, run.stdout[-3000:]
    out = flat(run)
    assert ("serves it already, healthy: nothing to change (state file was missing: rebuilt from pid %d (variant fast), "
            "and written again)" % before["pid"]) in out
    assert run.result("inference_server")["reason"] == ("state file was missing: rebuilt from pid %d (variant fast); it "
                                                        "serves with this configuration and is healthy" % before["pid"])
    assert run.recap()["changed"] == 1 and not benchmarked(run)  # the state file written again; no switch, no benchmark
    after = serving(fleet, "fast", pid=before["pid"])
    assert after["recovered"] == "missing" and after["fingerprint"] == before["fingerprint"]
    assert stat.S_IMODE(os.stat(fleet.state_dir / "sv.json").st_mode) == 0o600
    again = switch("fast", extra={"bench": "never"})
    assert again.rc == 0 and again.recap()["changed"] == 0
    serving(fleet, "fast", pid=before["pid"])


def test_with_the_launch_file_lost_too_the_server_restarts_once_and_says_why(switch, fleet):  # noqa: F811 pylint: disable=redefined-outer-name
    """Nothing left confirms the secrets the engine was started with (NAME.launch.json gone too): the same
    configuration restarts once, saying so; the run after that keeps it."""
    before = started(switch, fleet)
    (fleet.state_dir / "sv.json").write_text("")
    (fleet.state_dir / "sv.launch.json").unlink()
    run = switch("fast", extra={"bench": "never"})
    assert run.rc == 0, run.stdout[-3000:]
    out = flat(run)
    assert "state file was corrupt: rebuilt from pid %d (variant unknown: sv.launch.json is gone)" % before["pid"] in out
    assert "nothing left confirms the secrets it was started with" in out
    assert "switched from pid %d, variant unknown" % before["pid"] in out
    assert before["pid"] in _stopped_pids(run)
    after = serving(fleet, "fast")
    assert after["pid"] != before["pid"]
    again = switch("fast", extra={"bench": "never"})
    assert again.rc == 0 and again.recap()["changed"] == 0
    serving(fleet, "fast", pid=after["pid"])


def test_a_switch_after_a_lost_state_file_says_what_it_stopped(switch, fleet):  # noqa: F811 pylint: disable=redefined-outer-name
    before = started(switch, fleet)
    (fleet.state_dir / "sv.json").unlink()
    run = switch("slow", extra={"bench": "never"})
    assert run.rc == 0, run.stdout[-3000:]
    out = flat(run)
    assert "switched from fast: state file was missing: rebuilt from pid %d (variant fast); the configuration changed" \
        % before["pid"] in out
    assert "nothing recorded before" not in out
    assert not _procs.alive(before["pid"]) and before["pid"] in _stopped_pids(run)
    serving(fleet, "slow")


def test_stop_with_a_lost_state_file_stops_the_server_it_finds(switch, fleet):  # noqa: F811 pylint: disable=redefined-outer-name
    before = started(switch, fleet)
    (fleet.state_dir / "sv.json").write_text('{"varia')
    run = switch(playbook=STOP)
    assert run.rc == 0, run.stdout[-3000:]
    assert not _procs.alive(before["pid"]) and not engines(fleet)
    assert fleet.record() is None and port_owner(fleet.port) is None
    assert run.result("inference_server")["recovered"] == "state file was corrupt: rebuilt from pid %d (variant fast)" \
        % before["pid"]


KEY = "sk-inferops-test-4f9c2a"
TOKEN = "hf_inferopsTestToken77"


def test_secrets_an_engine_prints_are_masked_in_journals_and_messages(switch, fleet):  # noqa: F811 pylint: disable=redefined-outer-name
    """An engine that prints its arguments and credentials at start (SGLang logs server_args=ServerArgs(...)),
    then fails: its own log holds them (0640, moved to sv.log.1 by the restore), but the run's output, the log
    tail kept in sv.switch.json and sv.switches/*.json, and the message never do."""
    fleet.add_variants({"chatty": {"command": fake_engine(fleet.port, "exit") + ["--echo-args", "--key", KEY],
                                   "env": {"HF_TOKEN": TOKEN, "SERVING_API_KEY": KEY}}})
    started(switch, fleet)
    run = switch("chatty")
    assert run.rc != 0
    out = flat(run)
    assert "ROLLED BACK: fast serves again" in out
    assert KEY not in run.stdout and TOKEN not in run.stdout
    assert "server_args=ServerArgs(" in out and "********" in out
    assert "(in %s)" % (fleet.log_dir / "sv.log.1") in out  # the failed start's log, where the restore moved it
    journals = [fleet.state_dir / "sv.switch.json"] + sorted((fleet.state_dir / "sv.switches").iterdir())
    for path in journals:
        text = path.read_text()
        assert KEY not in text and TOKEN not in text, path
    assert any("server_args=ServerArgs(" in line for line in json.loads(journals[0].read_text())["log_tail"])
    failed_log = fleet.log_dir / "sv.log.1"
    assert KEY in failed_log.read_text()  # the engine's own log holds what it printed: readable by owner and group only
    assert stat.S_IMODE(os.stat(failed_log).st_mode) == 0o640
    serving(fleet, "fast")


def test_each_start_gets_its_own_log_and_log_keep_of_them_remain(switch, fleet):  # noqa: F811 pylint: disable=redefined-outer-name
    fleet.set_vars(serving_log_keep=3)
    for variant in ("fast", "slow", "fast", "slow", "fast"):
        assert switch(variant, extra={"bench": "never"}).rc == 0
    logs = sorted(p.name for p in fleet.log_dir.iterdir())
    assert logs == ["sv.log", "sv.log.1", "sv.log.2"]
    for path in (fleet.log_dir / name for name in logs):
        assert path.read_text().count("=== inferops.serving ") == 1  # one start per file
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    refused = switch("slow", extra={"serving_log_keep": 0})
    assert refused.rc != 0 and "log_keep must be 1 or more" in flat(refused)
    serving(fleet, "fast")
