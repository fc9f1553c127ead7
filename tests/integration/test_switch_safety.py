# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The running server is sacred: playbooks/switch_variant.yml as an operator meets it.

Each case of issue 16 through real ansible-playbook runs: a protected daemon on GPU 2, a taken port,
read-only and full disks, two runs at once, kill -9 of the controller mid-switch, a variant that is
another's configuration under a new name, an engine whose /health is 200 while every generation fails,
a reserved engine flag, and an API key an engine cannot take. Each asserts on the process table, the
port and the state file, not only on messages.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from switchbed import (PLAY, ROOT, STOP, engines, fake_engine, flat, fleet, levels_of, observed, port_owner,  # noqa: F401 pylint: disable=unused-import
                       serving, stand_in, started, switch, untouched)

from ansible_collections.inferops.serving.plugins.module_utils import _procs

BIN = os.path.dirname(sys.executable)
HOLDER = os.path.join(ROOT, "tests", "support", "gpu_holder.py")


def protected_daemon(fleet, tmp_path, gpu):
    daemon_bin = tmp_path / "nv-hostengine"
    os.symlink(os.path.realpath(sys.executable), str(daemon_bin))
    return fleet.gpus.hold(gpu, used_mib=512, argv=[str(daemon_bin), HOLDER])


@pytest.mark.parametrize("holder", ["protected", "out_of_scope"])
def test_a_gpu_holder_that_would_remain_is_found_before_the_stop(switch, fleet, tmp_path, holder):
    before = started(switch, fleet)
    if holder == "protected":
        daemon = protected_daemon(fleet, tmp_path, 2)
        why = "nv-hostengine (pid %d), which is never signalled" % daemon.pid
    else:
        daemon = fleet.gpus.hold(2, used_mib=4096, args=["monitoring-agent"])
        why = "GPU 2 is held by pid %d" % daemon.pid
    plan = switch("slow", check=True)
    assert plan.rc != 0
    assert "nothing was stopped: GPU 2 is held by" in flat(plan) and why in flat(plan)
    result = plan.result("inference_server")
    assert result["outcome"] == "nothing_stopped" and len(result["blockers"]) == 1

    run = switch("slow")
    assert run.rc != 0
    out = flat(run)
    assert "Variant slow failed on localhost" in out and "nothing was stopped" in out and why in out
    assert "ROLLED BACK" not in out and "RESTORE FAILED" not in out
    assert run.recap()["changed"] == 0
    untouched(fleet, before)
    assert daemon.poll() is None  # never signalled
    observed("%s holder on GPU 2 (old pid %d)" % (holder, before["pid"]), run, fleet)


def test_a_taken_new_port_is_found_before_the_stop_and_named(switch, fleet):
    before = started(switch, fleet)
    other = socket.socket()
    other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    other.bind(("127.0.0.1", 0))
    other.listen(1)
    new_port = other.getsockname()[1]
    try:
        run = switch("slow", extra={"serving_port": new_port})
    finally:
        other.close()
    assert run.rc != 0
    out = flat(run)
    assert "nothing was stopped: port %d on 127.0.0.1 is taken by pid %d" % (new_port, os.getpid()) in out
    assert "which is not instance 'sv'" in out and "ROLLED BACK" not in out
    assert run.recap()["changed"] == 0
    untouched(fleet, before)
    observed("new port %d taken (old pid %d)" % (new_port, before["pid"]), run, fleet)


def _mount(path, *options):
    path.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options or ("size=64m",)), "tmpfs", str(path)],
                      capture_output=True, check=False).returncode != 0:
        pytest.skip("needs root and mount (CI has both)")


def _umount(path):
    subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


@pytest.mark.parametrize("where, how", [("log", "read-only"), ("log", "full"), ("state", "read-only")])
def test_a_read_only_or_full_disk_is_found_before_the_stop(switch, fleet, tmp_path, where, how):
    """The state dir is the running server's (remounted read-only under it); the new variant's log dir is a
    disk of its own, read-only or full (a log the engine writes to cannot be remounted read-only)."""
    target = fleet.state_dir if where == "state" else tmp_path / "newlog"
    _mount(target, "size=2m" if how == "full" else "size=64m")
    extra = {} if where == "state" else {"serving_log_dir": str(target)}
    try:
        before = started(switch, fleet)
        if how == "full":
            with open(str(target / "filler"), "wb") as handle:
                try:
                    while True:
                        handle.write(b"\0" * 65536)
                except OSError:
                    pass
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(target)], check=True)
        run = switch("slow", extra=extra)
        assert run.rc != 0
        out = flat(run)
        assert "nothing was stopped" in out and "ROLLED BACK" not in out
        expect = {"read-only": "Read-only file system", "full": "MiB free (at least 16 MiB needed)"}[how]
        assert expect in out, out[-2000:]
        assert run.recap()["changed"] == 0
        untouched(fleet, before)
        assert [n for n in os.listdir(str(target)) if ".tmp." in n or n.startswith(".inferops")] == []
        observed("%s dir %s (old pid %d)" % (where, how, before["pid"]), run, fleet)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(target)], capture_output=True, check=False)
        switch(playbook=STOP)  # the server's files may be on that disk: stop it before the disk goes
        _umount(target)


def _kill_group(proc):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _popen_playbook(fleet, ansible_env, variant, extra=None):
    """ansible-playbook in its own session (the controller, its workers and the modules they run)."""
    argv = [os.path.join(BIN, "ansible-playbook"), "-i", fleet.inventory, PLAY,
            "-e", json.dumps(dict(extra or {}, variant=variant, bench="never"))]
    env = dict(ansible_env, **fleet.gpus.env)
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _journal(fleet):
    path = fleet.state_dir / "sv.switch.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting for %s" % what)


def _controller_gone(proc):
    members = [i.pid for i in _procs.list_procs() if i.pgid == proc.pid and i.state not in ("Z", "X")]
    return members == []


@pytest.mark.parametrize("variant, ends", [("hang", "fast"), ("slowload", "slowload")])
def test_kill_9_of_the_controller_mid_switch_the_host_finishes_alone(switch, fleet, ansible_env, variant, ends):
    fleet.add_variants({"slowload": {"command": fake_engine(fleet.port, "ok") + ["--load-s", "4"]}})
    fleet.set_vars(serving_progress_delay=30)  # the module call is still waiting when the controller dies
    started(switch, fleet)
    first_id = _journal(fleet).get("id")
    proc = _popen_playbook(fleet, ansible_env, variant)
    _wait_for(lambda: _journal(fleet).get("id") != first_id and _journal(fleet).get("phase") == "waiting",
              60, "the switch to reach its wait")
    _kill_group(proc)  # kill -9 of ansible-playbook, its workers and the module they ran
    assert _controller_gone(proc)
    done = _wait_for(lambda: _journal(fleet).get("outcome"), 60, "the host to finish the switch alone")
    assert done == ("rolled_back" if ends == "fast" else "ready")
    record = serving(fleet, ends)
    print("\nOBSERVED kill -9 mid-switch to %s: controller gone; host: %s; phases %s; state: %s pid %d"
          % (variant, done, _journal(fleet)["phases"], record["variant"], record["pid"]))
    if ends == "fast":
        assert "ROLLED BACK: fast serves again" in _journal(fleet)["msg"]
    # the next run knows what serves (it does not say "nothing recorded before")
    again = switch(ends, extra={"bench": "never"})
    assert again.rc == 0 and again.recap()["changed"] == 0, again.stdout[-3000:]
    assert "serves it already, healthy: nothing to change" in again.stdout
    assert fleet.record()["pid"] == record["pid"]


@pytest.mark.timeout(600)  # a long flow: several minutes on a loaded 2-core machine
def test_two_runs_at_once_one_waits_and_exactly_one_engine_serves(switch, fleet, ansible_env, tmp_path):
    # a load long enough that the second run meets the first one's switch under way even on a busy machine (8 s
    # was not, with two test workers and a load average of 7 on 2 cores: ansible-playbook alone took that long)
    fleet.add_variants({"slowload": {"command": fake_engine(fleet.port, "ok") + ["--load-s", "20"], "ready_timeout": 90}})
    # the third run's engine loads until the test has seen the fourth refused: an event, not a 20 s load
    loaded = tmp_path / "gated.loaded"
    fleet.add_variants({"gated": {"command": fake_engine(fleet.port, "ok") + ["--load-s", "0.2", "--ready-file", str(loaded)],
                                  "ready_timeout": 90}})
    started(switch, fleet)
    first = _popen_playbook(fleet, ansible_env, "slowload")
    _wait_for(lambda: _journal(fleet).get("target", {}).get("variant") == "slowload", 60, "the first switch")
    second = _popen_playbook(fleet, ansible_env, "slow")  # waits for the lock (lock_timeout 60), then switches
    out1, out2 = first.communicate(timeout=300)[0], second.communicate(timeout=300)[0]
    assert first.returncode == 0, out1[-3000:]
    assert second.returncode == 0, out2[-3000:]
    assert "switched from slowload" in " ".join(out2.split())  # it ran after the first one, on what that left
    record = serving(fleet, "slow")
    print("\nOBSERVED two runs at once: both rc 0, the second switched from slowload; one engine %s, state slow pid %d"
          % (sorted(engines(fleet)), record["pid"]))

    # a run that gives up waiting names who holds the lock, and kills nothing of theirs
    third = _popen_playbook(fleet, ansible_env, "gated")
    _wait_for(lambda: _journal(fleet).get("target", {}).get("variant") == "gated"
              and not _journal(fleet).get("outcome"), 60, "the third switch")
    fourth = switch("fast", extra={"serving_lock_timeout": 1})
    assert fourth.rc != 0
    out = flat(fourth)
    holder = _journal(fleet)["pid"]
    assert "nothing was stopped: another run is changing this instance: pid %d (switch to gated" % holder in out
    assert "waited lock_timeout=1.0s" in out and "since 20" in out
    assert fourth.recap()["changed"] == 0
    observed("lock_timeout=1 while another run switches", fourth, fleet)
    assert third.poll() is None and not _journal(fleet).get("outcome")  # still loading: the refusal changed nothing
    loaded.write_text("")
    assert third.communicate(timeout=300)[0] and third.returncode == 0
    serving(fleet, "gated")


def test_a_variant_with_the_same_configuration_is_relabelled_not_restarted(switch, fleet, run_playbook, tmp_path):
    fleet.add_variants({"fast2": {"extends": "fast", "description": "fast, under another name"}})
    before = started(switch, fleet)
    results = tmp_path / "results"
    run = switch("fast2", extra={"bench": "always"},
                 env={"ANSIBLE_CALLBACKS_ENABLED": "record,inferops.serving.bench_facts",
                      "INFEROPS_RESULTS_DIR": str(results)})
    assert run.rc == 0, run.stdout[-3000:]
    assert run.recap()["changed"] == 1
    assert "serves it already as fast: relabelled fast -> fast2, nothing restarts" in run.stdout
    assert run.result("inference_server")["outcome"] == "relabelled"
    record = serving(fleet, "fast2", pid=before["pid"])
    assert record["fingerprint"] == before["fingerprint"]
    assert all(level["labels"]["variant"] == "fast2" for level in levels_of(run))
    history = [json.loads(line) for line in (results / "history.jsonl").read_text().splitlines()]
    assert history and all(row["variant"] == "fast2" for row in history)
    # a rollout back to the name fast relabels too, and its verification reads the record: it names fast
    roll = run_playbook(os.path.join(ROOT, "playbooks", "rollout.yml"), inventory=fleet.inventory,
                        extra_vars={"variant": "fast", "rollout_min_speedup": 0, "bench": "never"},
                        env=fleet.gpus.env)
    assert roll.rc == 0, roll.stdout[-3000:]
    serving(fleet, "fast", pid=before["pid"])
    observed("fast2 = fast's configuration (pid %d)" % before["pid"], run, fleet)


def test_health_200_while_every_generation_fails_is_a_broken_engine_not_a_slow_one(switch, fleet):
    fleet.add_variants({"broken": {"command": fake_engine(fleet.port, "broken"), "ready_timeout": 600}})
    before = started(switch, fleet)
    began = time.monotonic()
    run = switch("broken")
    took = time.monotonic() - began
    assert run.rc != 0
    out = flat(run)
    assert "answers /health but every generation failed for" in out
    assert "HTTP 500" in out and "CUDA error: an illegal memory access" in out
    assert "ROLLED BACK: fast serves again" in out
    assert took < 90  # ready_timeout is 600 s: the grace window decided
    assert run.recap()["changed"] >= 1
    record = serving(fleet, "fast")
    assert record["pid"] != before["pid"]
    print("\nOBSERVED /health 200, completions 500: failed after %.1fs (ready_timeout 600)" % took)
    observed("broken engine", run, fleet)


def test_a_reserved_engine_flag_is_refused_and_nothing_is_stopped(switch, fleet):
    fleet.add_variants({"badport": {"engine": "vllm", "model": "m", "engine_args": {"--port": 9}}})
    before = started(switch, fleet)
    run = switch("badport")
    assert run.rc != 0
    out = flat(run)
    assert "nothing was stopped: engine_args must not set port: use the port parameter" in out
    assert "ROLLED BACK" not in out and run.recap()["changed"] == 0
    assert run.result("inference_server")["outcome"] == "nothing_stopped"
    untouched(fleet, before)
    observed("engine_args --port (old pid %d)" % before["pid"], run, fleet)


def test_an_api_key_goes_where_the_engine_reads_it_or_is_an_error(switch, fleet):
    before = started(switch, fleet)
    run = switch("slow", extra={"serving_api_key": "s3cret-key"})
    assert run.rc != 0
    out = flat(run)
    assert "nothing was stopped: engine command: api_key is set but appears nowhere in command or env" in out
    assert "s3cret-key" not in run.stdout
    untouched(fleet, before)
    observed("command + api_key nowhere in command (old pid %d)" % before["pid"], run, fleet)

    # in the command, the key is used by the readiness probe and redacted from what is reported
    fleet.add_variants({"keyed": {"command": stand_in(fleet.port, 2) + ["--api-key", "s3cret-key"]}})
    keyed = switch("keyed", extra={"serving_api_key": "s3cret-key", "bench": "never"})
    assert keyed.rc == 0, keyed.stdout[-3000:]
    assert "s3cret-key" not in keyed.stdout
    record = serving(fleet, "keyed")
    assert "s3cret-key" not in json.dumps(record) and "<redacted>" in record["argv"]
    mode = os.stat(str(fleet.state_dir / "sv.launch.json")).st_mode & 0o777
    assert mode == 0o600  # the one file that keeps the key, for a restore without the controller


def test_a_run_takes_over_from_a_switch_process_killed_by_hand(switch, fleet, ansible_env):
    """The switch process itself dies mid-wait (kill -9 by a person): the lock goes with it; the state file
    still names what served before under previous, and the next run restores that, not the half-loaded one."""
    fleet.add_variants({"slowload": {"command": fake_engine(fleet.port, "ok") + ["--load-s", "30"]}})
    fleet.set_vars(serving_progress_delay=30)
    started(switch, fleet)
    proc = _popen_playbook(fleet, ansible_env, "slowload")
    waiting = _wait_for(lambda: _journal(fleet).get("phase") == "waiting" and _journal(fleet), 60, "the wait")
    _kill_group(proc)
    os.kill(waiting["pid"], signal.SIGKILL)
    record = fleet.record()
    assert record["variant"] == "slowload" and record["loading"] and record["previous"]["variant"] == "fast"
    run = switch("crash")
    assert run.rc != 0
    out = flat(run)
    assert "exited with code 3 before it was ready" in out and "ROLLED BACK: fast serves again" in out
    serving(fleet, "fast")
    observed("switch process killed by hand, next run to crash", run, fleet)
