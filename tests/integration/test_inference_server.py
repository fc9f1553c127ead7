# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""inference_server through real ansible-playbook runs on localhost.

The real `transformers serve` engine on CPU with the tiny model, and tests/support/fake_engine.py
(engine: command) for the failure cases. Ports are picked free, state and logs live in tmp_path.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _marker, _preflight, _procs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAKE = os.path.join(ROOT, "tests", "support", "fake_engine.py")
BIN = os.path.dirname(sys.executable)


def play(srv, name="server"):
    """A one-task playbook; JSON is YAML, so the module arguments go in exactly as given."""
    return "---\n- hosts: localhost\n  gather_facts: false\n  tasks:\n    - name: %s\n      inferops.serving.inference_server: %s\n" % (
        name, json.dumps(srv))


def carriers(name, state_dir):
    return sorted(_marker.carriers(_marker.identity(name, state_dir)))


def gone(pid, timeout=5.0):
    deadline = time.monotonic() + timeout
    while _procs.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _procs.alive(pid)


def reaped(pid, timeout=5.0):
    """True once pid has left the process table altogether: alive() is already False for a zombie, which
    its parent (the watchdog) reaps a moment later."""
    deadline = time.monotonic() + timeout
    while _procs.read_proc(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    return _procs.read_proc(pid) is None


@pytest.fixture
def dirs(tmp_path):
    return {"state_dir": str(tmp_path / "state"), "log_dir": str(tmp_path / "log")}


def fake(name, port, dirs, mode="ok", model="fake", **kw):
    cmd = [sys.executable, FAKE, "--port", str(port), "--model", model, "--mode", mode]
    for key in ("load_s", "orphan", "worker"):
        if key in kw:
            cmd += ["--" + key.replace("_", "-"), str(kw.pop(key))]
    srv = dict(name=name, engine="command", model=model, port=port, command=cmd, supervisor="process",
               ready_timeout=30, stop_timeout=5, **dirs)
    srv.update(kw)
    return srv


def test_transformers_tiny_model_lifecycle(run_playbook, tiny_model, dirs, port):
    srv = dict(name="tiny", engine="transformers", model=tiny_model, port=port,
               executable=os.path.join(BIN, "transformers"), python=sys.executable,
               engine_args={"device": "cpu"}, variant="baseline", ready_timeout=300, stop_timeout=20,
               supervisor="auto", **dirs)
    try:
        first = run_playbook(play(srv))
        assert first.rc == 0, first.stdout[-3000:]
        res = first.result("inference_server")
        assert res["changed"] is True and res["variant"] == "baseline"
        assert res["argv"][:3] == [os.path.join(BIN, "transformers"), "serve", tiny_model]
        assert res["engine_version"] and res["supervisor"] == "process"
        print("tiny transformers engine ready in %.2fs" % res["ready_s"])
        assert 0 < res["ready_s"] < 300
        pid = res["pid"]
        state = json.load(open(os.path.join(dirs["state_dir"], "tiny.json")))
        assert state["pid"] == pid and state["pgid"] == pid and state["fingerprint"] == res["fingerprint"]
        assert state["port"] == port and state["started_at"] and state["argv"] == res["argv"]

        again = run_playbook(play(srv))
        assert again.rc == 0, again.stdout[-3000:]
        res2 = again.result("inference_server")
        assert res2["changed"] is False and res2["pid"] == pid and res2["fingerprint"] == res["fingerprint"]

        changed = dict(srv, engine_args={"device": "cpu", "dtype": "float32"}, variant="fp32")
        third = run_playbook(play(changed), diff=True)
        assert third.rc == 0, third.stdout[-3000:]
        res3 = third.result("inference_server")
        assert res3["changed"] is True and res3["pid"] != pid and res3["fingerprint"] != res["fingerprint"]
        assert pid in res3["stopped_pids"] and gone(pid)
        assert res3["diff"]["before"]["argv"] == res["argv"]
        assert res3["diff"]["after"]["argv"][-6:-4] == ["--dtype", "float32"]
        assert "--dtype" in third.stdout  # diff shown to the user

        stop = run_playbook(play(dict(changed, state="stopped")))
        assert stop.rc == 0, stop.stdout[-3000:]
        assert stop.result("inference_server")["changed"] is True
        assert gone(res3["pid"]) and carriers("tiny", dirs["state_dir"]) == []
        assert not os.path.exists(os.path.join(dirs["state_dir"], "tiny.json"))
        assert run_playbook(play(dict(changed, state="stopped"))).result("inference_server")["changed"] is False
    finally:
        run_playbook(play(dict(srv, state="stopped")))


def test_engine_exiting_at_start_fails_fast_with_log_tail(run_playbook, dirs, port):
    started = time.monotonic()
    run = run_playbook(play(fake("crash", port, dirs, mode="exit", ready_timeout=120)))
    elapsed = time.monotonic() - started
    assert run.rc != 0
    res = run.result("inference_server")
    assert run.results("inference_server")[-1]["status"] == "failed" and res["rc"] == 3
    assert "exited with code 3" in res["msg"]
    assert any("fake engine cannot load" in line for line in res["log_tail"])
    assert elapsed < 60  # far less than ready_timeout
    assert carriers("crash", dirs["state_dir"]) == []


def test_never_healthy_times_out_and_leaves_nothing(run_playbook, dirs, port):
    run = run_playbook(play(fake("stuck", port, dirs, mode="never-ready", ready_timeout=3)))
    assert run.rc != 0
    res = run.result("inference_server")
    assert "not ready within ready_timeout=3" in res["msg"] and "503" in res["msg"]
    assert res["log_tail"]
    assert gone(res["pid"]) and carriers("stuck", dirs["state_dir"]) == []
    assert not os.path.exists(os.path.join(dirs["state_dir"], "stuck.json"))


def test_orphan_that_left_the_group_is_swept_on_stop(run_playbook, dirs, port, tmp_path):
    orphan_file = tmp_path / "orphan.pid"
    srv = fake("orph", port, dirs, orphan=str(orphan_file))
    run = run_playbook(play(srv))
    assert run.rc == 0, run.stdout[-3000:]
    pid = run.result("inference_server")["pid"]
    deadline = time.monotonic() + 10
    while not (orphan_file.exists() and orphan_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    orphan = int(orphan_file.read_text())
    info = _procs.read_proc(orphan)
    assert info is not None and info.pgid != pid  # it left the engine's process group
    stop = run_playbook(play(dict(srv, state="stopped")))
    assert stop.rc == 0, stop.stdout[-3000:]
    assert orphan in stop.result("inference_server")["stopped_pids"]
    assert gone(pid) and gone(orphan)
    assert carriers("orph", dirs["state_dir"]) == []


def test_port_taken_by_something_else_is_a_clear_error(run_playbook, dirs, port):
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(1)
    try:
        run = run_playbook(play(fake("busy", port, dirs)))
    finally:
        sock.close()
    assert run.rc != 0
    res = run.result("inference_server")
    assert res["msg"].startswith("nothing was stopped: port %d on 127.0.0.1 is taken by pid %d" % (port, os.getpid()))
    assert res["outcome"] == "nothing_stopped" and res["blockers"]
    assert res.get("pid") is None
    assert not os.path.exists(os.path.join(dirs["state_dir"], "busy.json"))
    assert carriers("busy", dirs["state_dir"]) == []


def test_check_mode_starts_nothing_and_bad_input_changes_nothing(run_playbook, dirs, port):
    srv = fake("chk", port, dirs)
    run = run_playbook(play(srv), check=True)
    assert run.rc == 0, run.stdout[-3000:]
    res = run.result("inference_server")
    assert res["changed"] is True and res["fingerprint"].startswith("sha256:") and res["pid"] is None
    assert carriers("chk", dirs["state_dir"]) == [] and not os.path.exists(dirs["state_dir"])
    bad = dict(srv, command=None)
    run = run_playbook(play(bad))
    assert run.rc != 0
    assert "engine=command needs command" in run.result("inference_server")["msg"]
    assert not os.path.exists(dirs["state_dir"])


ROLE_PLAY = ("---\n- hosts: localhost\n  gather_facts: false\n  roles:\n"
             "    - role: inferops.serving.inference_server\n")


def role_vars_of(srv, poll_delay):
    """The inference_server role's variables for a module spec (the process supervisor)."""
    role_vars = dict(("inference_server_" + k, v) for k, v in srv.items() if k != "supervisor")
    role_vars.update(inference_server_poll_delay=poll_delay, inference_server_supervisor="process")
    return role_vars


def test_role_starts_async_with_progress_then_stops(run_playbook, dirs, port):
    srv = fake("rolled", port, dirs, load_s=8)  # longer than the first call's wait (one poll delay)
    role_vars, playbook = role_vars_of(srv, 1), ROLE_PLAY
    try:
        run = run_playbook(playbook, extra_vars=role_vars)
        assert run.rc == 0, run.stdout[-3000:]
        calls = [r for r in run.results("inference_server") if r["status"] != "skipped"]
        first = calls[0]["result"]  # the start, waiting one poll delay
        assert first["changed"] is True and first["loading"] is True and first["healthy"] is False
        assert "RETRYING" in run.stdout  # the progress lines of the async_status loop
        polls = [r for r in run.results("async_status") if r["status"] == "ok"]
        names = set(p["task"].split(" : ")[1].split(" |")[0] for p in polls)
        assert names == {"Wait until the server is ready (model loading)"}
        res = polls[-1]["result"]
        # the background job resumed the wait on the same server: no restart, the same pid
        assert res["finished"] and res["changed"] is False and res["healthy"] is True
        assert res["pid"] == first["pid"] and res["ready_s"] >= 7
        again = run_playbook(playbook, extra_vars=role_vars)
        assert again.rc == 0, again.stdout[-3000:]
        assert again.recap()["changed"] == 0
    finally:
        stop = run_playbook(playbook, extra_vars=dict(role_vars, inference_server_state="stopped"))
    assert stop.rc == 0, stop.stdout[-3000:]


def test_role_quick_start_is_one_module_call(run_playbook, dirs, port):
    srv = fake("quick", port, dirs)
    role_vars, playbook = role_vars_of(srv, 10), ROLE_PLAY
    try:
        run = run_playbook(playbook, extra_vars=role_vars)
        assert run.rc == 0, run.stdout[-3000:]
        starts = [r for r in run.results("inference_server") if r["status"] != "skipped"]
        assert len(starts) == 1 and starts[0]["result"]["healthy"] is True, starts
        assert [r for r in run.results("async_status") if r["status"] != "skipped"] == []
    finally:
        run_playbook(playbook, extra_vars=dict(role_vars, inference_server_state="stopped"))


def test_role_takes_a_variant_whole_as_its_spec(run_playbook, dirs, port):
    """inference_server_spec (as serve_variant passes a resolved variant): the role's variant variables unset, the
    spec's keys overwrite those that have defaults (engine transformers, variant ''), and a re-run changes nothing."""
    srv = fake("specced", port, dirs)
    spec = dict(name="v-spec", engine="command", model=srv.pop("model"), command=srv.pop("command"), ready_timeout=30)
    del srv["engine"], srv["ready_timeout"]
    role_vars = dict(role_vars_of(srv, 10), inference_server_spec=spec)
    try:
        run = run_playbook(ROLE_PLAY, extra_vars=role_vars)
        assert run.rc == 0, run.stdout[-3000:]
        (start,) = [r["result"] for r in run.results("inference_server") if r["status"] != "skipped"]
        assert start["changed"] is True and start["healthy"] is True and start["variant"] == "v-spec"
        assert start["argv"] == spec["command"] and start["served_model"] == "fake"
        os.kill(start["pid"], 0)  # it runs
        state = json.load(open(os.path.join(dirs["state_dir"], "specced.json")))
        assert state["pid"] == start["pid"] and state["variant"] == "v-spec"
        again = run_playbook(ROLE_PLAY, extra_vars=role_vars)
        assert again.rc == 0 and again.recap()["changed"] == 0, again.stdout[-3000:]
        assert again.result("inference_server")["pid"] == start["pid"]
    finally:
        stop = run_playbook(ROLE_PLAY, extra_vars=dict(role_vars, inference_server_state="stopped"))
    assert stop.rc == 0, stop.stdout[-3000:]
    assert gone(start["pid"])


def test_ready_wait_leaves_it_loading_and_a_later_call_resumes_or_reports_the_crash(run_playbook, dirs, port):
    srv = fake("resume", port, dirs, load_s=3, ready_wait=0.5)
    first = run_playbook(play(srv))
    assert first.rc == 0, first.stdout[-3000:]
    res = first.result("inference_server")
    assert res["changed"] is True and res["loading"] is True and res["healthy"] is False
    assert json.load(open(os.path.join(dirs["state_dir"], "resume.json")))["loading"] is True
    later = run_playbook(play(dict(srv, ready_wait=None)))
    assert later.rc == 0, later.stdout[-3000:]
    again = later.result("inference_server")
    assert again["changed"] is False and again["healthy"] is True and again["pid"] == res["pid"]
    assert again["ready_s"] >= 3  # counted from the start, not from this call
    assert "loading" not in json.load(open(os.path.join(dirs["state_dir"], "resume.json")))
    run_playbook(play(dict(srv, state="stopped")))

    # left loading, then the engine exits: the host cleans up by itself (nothing served before), and a
    # call that joins the switch by its id reports how it ended, with the log tail, starting nothing
    crash = fake("resume", port, dirs, mode="exit", load_s=1, ready_wait=0)
    left = run_playbook(play(crash))
    assert left.rc == 0 and left.result("inference_server")["loading"] is True, left.stdout[-3000:]
    switch = left.result("inference_server")["switch"]
    time.sleep(1.5)
    assert not os.path.exists(os.path.join(dirs["state_dir"], "resume.json"))
    failed = run_playbook(play(dict(crash, switch_id=switch["id"])))
    assert failed.rc != 0
    msg = failed.result("inference_server")
    assert "exited with code 3 before it was ready" in msg["msg"] and "cannot load" in " ".join(msg["log_tail"])
    assert msg["msg"].endswith("nothing was stopped: nothing served before, and the failed start was cleaned up")
    assert msg["outcome"] == "nothing_stopped" and msg["rc"] == 3
    assert carriers("resume", dirs["state_dir"]) == [] and not _procs.alive(switch["pid"])


def test_gpu_check_between_stop_and_start(run_playbook, dirs, port, fake_gpus):
    srv = fake("gpus", port, dirs, gpu_check={"backend": "nvidia_smi", "timeout": 2, "poll_interval": 0.05})
    try:
        run = run_playbook(play(srv), env=fake_gpus.env)
        assert run.rc == 0, run.stdout[-3000:]
        res = run.result("inference_server")
        assert res["gpu_check"]["clean"] is True and len(res["gpu_check"]["gpus"]) == 8
        pid = res["pid"]
        # something we must not touch holds GPU 3: found before the stop, so the old server keeps serving
        bystander = fake_gpus.hold(3, used_mib=4096)
        moved = dict(srv, variant="other")
        for check in (True, False):
            run = run_playbook(play(dict(moved, state="restarted")), env=fake_gpus.env, check=check)
            assert run.rc != 0
            res = run.result("inference_server")
            assert res["msg"] == ("nothing was stopped: GPU 3 is held by pid %d %s, 4096 MiB, which the stop does not "
                                  "end and gpu_check does not reclaim (reclaim=false)" % (bystander.pid, sys.executable))
            assert res["outcome"] == "nothing_stopped" and res["blockers"] == [res["msg"][len("nothing was stopped: "):]]
            assert res["gpu_check"]["clean"] is False and bystander.poll() is None
            assert _procs.alive(pid) and _port_open(port)  # the old server was never touched
            state = json.load(open(os.path.join(dirs["state_dir"], "gpus.json")))
            assert state["pid"] == pid and "previous" not in state
    finally:
        run_playbook(play(dict(srv, state="stopped")))


def _mem_available_mib():
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no MemAvailable in /proc/meminfo")


def test_a_start_that_would_not_fit_in_memory_is_refused_before_the_stop(run_playbook, dirs, port):
    srv = fake("mem", port, dirs, variant="small")
    try:
        run = run_playbook(play(srv))
        assert run.rc == 0, run.stdout[-3000:]
        pid = run.result("inference_server")["pid"]
        # what the host has, plus all the old engine holds, plus 1 TiB: no stop could make room for it
        need = _mem_available_mib() + _preflight.rss_mib([pid]) + 1024 * 1024
        big = dict(srv, variant="big", host_memory_mib=need, command=srv["command"] + ["--load-s", "0.1"])
        for check in (True, False):
            run = run_playbook(play(big), check=check)
            assert run.rc != 0
            res = run.result("inference_server")
            assert res["outcome"] == "nothing_stopped"
            assert res["msg"].startswith("nothing was stopped: host memory: variant big needs host_memory_mib %d MiB, "
                                         "the host has " % need), res["msg"]
            assert "process(es) of instance mem that the stop would free" in res["msg"]
            # the old engine was never touched: the same pid in the process table and in the state file
            assert _procs.alive(pid) and _port_open(port)
            state = json.load(open(os.path.join(dirs["state_dir"], "mem.json")))
            assert state["pid"] == pid and state["variant"] == "small" and "previous" not in state
        # a need the host meets switches as before
        run = run_playbook(play(dict(big, host_memory_mib=1)))
        assert run.rc == 0, run.stdout[-3000:]
        assert run.result("inference_server")["pid"] != pid and gone(pid)
    finally:
        run_playbook(play(dict(srv, state="stopped")))


def test_bad_gpu_check_changes_nothing(run_playbook, dirs, port):
    srv = fake("badgpu", port, dirs, gpu_check={"timeout": 0, "bogus": 1})
    run = run_playbook(play(srv))
    assert run.rc != 0
    assert "bogus" in run.result("inference_server")["msg"]
    run = run_playbook(play(dict(srv, gpu_check={"timeout": 0})))
    assert "gpu_check: timeout must be a positive number of seconds" in run.result("inference_server")["msg"]
    assert not os.path.exists(dirs["state_dir"])


def _port_open(port):
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_how_the_engine_ended_is_told_by_a_later_call_and_the_stop_is_orderly(run_playbook, dirs, port, tmp_path):
    """The watchdog parent reaps the engine and records how it ended: a crash (kill -9 by hand) is named by
    the next call, which leaves no zombie behind; the stop sends SIGTERM to the main process first, so its
    worker releases before it exits (fake_engine --worker), and reports the exit (code 0)."""
    flag = tmp_path / "worker"
    srv = fake("ended", port, dirs, load_s=0.2, worker=flag, stop_timeout=20)
    first = run_playbook(play(srv))
    assert first.rc == 0, first.stdout[-3000:]
    res = first.result("inference_server")
    os.kill(res["pid"], 9)
    assert gone(res["pid"])
    assert reaped(res["pid"]), _procs.read_proc(res["pid"])  # reaped by its watchdog, not left a zombie
    again = run_playbook(play(srv))
    assert again.rc == 0, again.stdout[-3000:]
    restarted = again.result("inference_server")
    assert restarted["exit"]["signal"] == "SIGKILL" and restarted["changed"] is True
    assert restarted["reason"].startswith("what was recorded no longer runs: pid %d was killed by SIGKILL at " % res["pid"])
    print("later call: %s" % restarted["reason"])

    flag.unlink()  # what the killed engine's worker, left behind and swept by the restart, wrote
    stop = run_playbook(play(dict(srv, state="stopped")))
    assert stop.rc == 0, stop.stdout[-3000:]
    stopped = stop.result("inference_server")
    assert flag.read_text() == "released"
    assert stopped["stopped_exit"]["code"] == 0, stopped["stopped_exit"]
    assert stopped["stopped_pids"] == [restarted["pid"]]  # the main process alone was signalled
    assert not carriers("ended", dirs["state_dir"])
    print("orderly stop: %s" % stopped["stopped_exit"]["message"])
