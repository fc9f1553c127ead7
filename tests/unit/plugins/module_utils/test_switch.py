# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the pieces that keep a running server safe: the switch transaction's outcomes (with a
stand-in supervisor), readiness on a broken engine. The instance lock is tested in test_lock.py, the
preflight in test_preflight.py."""

from __future__ import annotations

import json
import os
import types

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _engines, _idle_check, _supervisor, _switch


# -- readiness on a broken engine -------------------------------------------------------------------

def test_wait_ready_fails_fast_when_health_is_200_but_generation_fails(monkeypatch):
    now = [0.0]
    seen = []

    def probe(*_a, **_k):
        seen.append(now[0])
        return _engines.Probe("error", "POST /v1/completions: HTTP 500 CUDA error")

    monkeypatch.setattr(_engines, "probe", probe)
    sup = types.SimpleNamespace(ending=lambda record: None)
    params = {"name": "sv", "host": "127.0.0.1", "port": 1, "ready_timeout": 1800.0, "api_key": None}
    with pytest.raises(_switch.ServerError, match="every generation failed for 10s.*HTTP 500 CUDA error"):
        _switch.wait_ready(sup, {}, types.SimpleNamespace(probe_model="m", health_timeout=10.0), params,
                           clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert now[0] == pytest.approx(_switch.BROKEN_GRACE_S) and len(seen) >= _switch.BROKEN_PROBES


def test_probe_tells_a_5xx_from_loading():
    from http.server import BaseHTTPRequestHandler, HTTPServer
    import threading

    codes = {"/v1/completions": 500}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def do_POST(self):
            self.send_response(codes["/v1/completions"])
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"oops")

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        assert _engines.probe("127.0.0.1", port, "m").state == "error"
        codes["/v1/completions"] = 503
        assert _engines.probe("127.0.0.1", port, "m").state == "loading"
    finally:
        server.shutdown()


# -- engines: where the key goes --------------------------------------------------------------------

def _p(**kw):
    base = dict(name="t", engine="command", model="m", host="127.0.0.1", port=8000, api_key=None,
                served_model_name=None, engine_args={}, command=["srv", "--port", "8000"], env={})
    base.update(kw)
    return base


def test_command_api_key_must_be_where_the_program_reads_it():
    with pytest.raises(_engines.EngineError, match="engine command: api_key is set but appears nowhere"):
        _engines.adapter("command").build(_p(api_key="k3y"))
    launch = _engines.adapter("command").build(_p(api_key="k3y", command=["srv", "--api-key", "k3y"]))
    assert launch.public_argv == ["srv", "--api-key", "<redacted>"]
    assert _engines.adapter("command").build(_p(api_key="k3y", env={"SRV_KEY": "k3y"})).argv == ["srv", "--port", "8000"]


# -- the transaction's outcomes, with a stand-in supervisor ------------------------------------------

class FakeSup(object):
    """Records what a switch does; start() of a given argv[0] 'fails' (exits) as told."""

    kind = "process"
    marker = "m@x"
    run = None  # no run_command: the engine version reads as unknown
    log_keep = 5

    def __init__(self, state_dir, failing=()):
        self.store = _supervisor.StateStore("sv", state_dir)
        self.log_path = os.path.join(state_dir, "sv.log")
        self.failing = set(failing)
        self.events = []
        self.next_pid = 100
        self.running = {}

    def start(self, argv, env, fingerprint=None):
        self.next_pid += 1
        self.events.append(("start", argv[0]))
        self.running[self.next_pid] = argv[0]
        return {"pid": self.next_pid, "pgid": self.next_pid, "starttime": 1, "log_offset": 0}

    def stop(self, record, timeout, grace=None):
        pid = (record or {}).get("pid")
        self.events.append(("stop", self.running.pop(pid, None)))
        return [pid] if pid else []

    def carriers(self):
        return {}

    def ending(self, record):
        if self.running.get(record["pid"]) in self.failing:
            return {"code": 3, "signal": None, "signum": None, "message": "exited with code 3"}
        return None


def _params(state_dir, exe, variant):
    return dict(name="sv", engine="command", model="m", host="127.0.0.1", port=1, api_key=None,
                served_model_name=None, engine_args={}, command=[exe], env={}, variant=variant,
                ready_timeout=5.0, stop_timeout=1.0, state_dir=state_dir, log_dir=state_dir, gpu_check=None,
                python=None, executable=None, supervisor="process")


def _switch_to(tmp_path, sup, new, failing_previous=False, with_previous_params=True):
    state_dir = str(tmp_path)
    old_params = _params(state_dir, "old-engine", "old")
    old = {"pid": 50, "variant": "old", "fingerprint": "sha256:old", "url": "http://127.0.0.1:1"}
    sup.running[50] = "old-engine"
    if failing_previous:
        sup.failing.add("old-engine")
    params = _params(state_dir, new, new)
    launch = _engines.adapter("command").build(params)
    switch = _switch.Switch(sup, params, launch, old=old, stop_old=True, previous=dict(old),
                            previous_params=old_params if with_previous_params else None,
                            verify_gpus=lambda check, mode, owner=None: {}, what="switch to " + new)
    return switch.run()


@pytest.fixture
def ready_probe(monkeypatch):
    monkeypatch.setattr(_engines, "probe", lambda *a, **k: _engines.Probe("ready", "1 token"))
    monkeypatch.setattr(_switch, "wait_port_free", lambda *a, **k: True)


def test_switch_ready_records_the_new_server_and_forgets_the_previous(tmp_path, ready_probe):
    sup = FakeSup(str(tmp_path))
    data = _switch_to(tmp_path, sup, "new-engine")
    assert data["outcome"] == "ready" and data["phase"] == "done"
    assert [p for p, _t in data["phases"]] == ["stopping", "checking_gpus", "starting", "waiting", "done"]
    assert sup.events == [("stop", "old-engine"), ("start", "new-engine")]
    record = sup.store.load()
    assert record["variant"] == "new-engine" and "previous" not in record and "loading" not in record
    launches = json.load(open(str(tmp_path / "sv.launch.json")))
    assert launches["current"]["command"] == ["new-engine"] and "previous" not in launches
    assert os.stat(str(tmp_path / "sv.launch.json")).st_mode & 0o777 == 0o600
    own = json.load(open(str(tmp_path / "sv.switches" / ("%s.json" % data["id"]))))
    assert own["outcome"] == "ready"


def test_switch_failure_restores_the_previous_server(tmp_path, ready_probe):
    sup = FakeSup(str(tmp_path), failing={"new-engine"})
    data = _switch_to(tmp_path, sup, "new-engine")
    assert data["outcome"] == "rolled_back"
    assert data["msg"].startswith("sv exited with code 3 before it was ready")
    assert data["outcome_msg"].startswith("ROLLED BACK: old serves again at http://127.0.0.1:1 (pid ")
    assert sup.events == [("stop", "old-engine"), ("start", "new-engine"), ("stop", "new-engine"),
                          ("start", "old-engine")]
    record = sup.store.load()
    assert record["variant"] == "old" and record["pid"] == data["restored"]["pid"] and "previous" not in record


def test_switch_restore_that_fails_too_leaves_a_true_record(tmp_path, ready_probe):
    sup = FakeSup(str(tmp_path), failing={"new-engine"})
    data = _switch_to(tmp_path, sup, "new-engine", failing_previous=True)
    assert data["outcome"] == "restore_failed"
    assert "RESTORE FAILED: nothing serves (restoring old failed: sv exited with code 3" in data["msg"]
    assert sup.store.load() is None and not os.path.exists(str(tmp_path / "sv.launch.json"))
    assert sup.running == {}  # nothing left running


def test_switch_without_the_previous_launch_says_restore_failed(tmp_path, ready_probe):
    sup = FakeSup(str(tmp_path), failing={"new-engine"})
    data = _switch_to(tmp_path, sup, "new-engine", with_previous_params=False)
    assert data["outcome"] == "restore_failed" and "was not recorded" in data["msg"]


def test_a_crash_of_the_switch_code_itself_still_ends_in_a_known_state(tmp_path, ready_probe):
    sup = FakeSup(str(tmp_path))

    def broken_check(check, mode, owner=None):
        raise SystemExit(1)  # what a fail_json deep inside would do

    state_dir = str(tmp_path)
    old_params = _params(state_dir, "old-engine", "old")
    sup.running[50] = "old-engine"
    params = dict(_params(state_dir, "new-engine", "new"), gpu_check={"timeout": 1})
    switch = _switch.Switch(sup, params, _engines.adapter("command").build(params),
                            old={"pid": 50, "variant": "old", "url": "u", "fingerprint": "f"}, stop_old=True,
                            previous={"pid": 50, "variant": "old", "url": "u", "fingerprint": "f"},
                            previous_params=old_params, verify_gpus=broken_check, what="switch to new")
    data = switch.run()
    assert data["outcome"] == "restore_failed" and "SystemExit" in data["msg"] and data["error"]


def test_gpu_check_failure_after_the_stop_is_a_switch_failure(tmp_path, ready_probe):
    sup = FakeSup(str(tmp_path))
    calls = []

    def check(params, mode, owner=None):
        calls.append(params)
        if len(calls) == 1:
            raise _idle_check.CheckFailed("GPU 3 held", {"clean": False})
        return {"clean": True}

    state_dir = str(tmp_path)
    old_params = dict(_params(state_dir, "old-engine", "old"), gpu_check={"timeout": 1})
    sup.running[50] = "old-engine"
    params = dict(_params(state_dir, "new-engine", "new"), gpu_check={"timeout": 1})
    old = {"pid": 50, "variant": "old", "url": "u", "fingerprint": "f"}
    data = _switch.Switch(sup, params, _engines.adapter("command").build(params), old=old, stop_old=True,
                          previous=dict(old), previous_params=old_params, verify_gpus=check, what="switch to new").run()
    assert data["outcome"] == "rolled_back" and "GPUs not clean (sv was not started): GPU 3 held" in data["msg"]
    assert sup.events == [("stop", "old-engine"), ("start", "old-engine")]  # the new one never started


def test_a_failed_start_s_log_tail_is_masked_and_named_where_it_is_now(tmp_path, ready_probe):
    """The tail quotes what the engine printed (its key among it): the journal masks the key of the variant
    started and the token of the one restored, and says the failed start's log is sv.log.1 after the restore."""
    sup = FakeSup(str(tmp_path), failing={"new-engine"})
    with open(sup.log_path, "w") as handle:
        handle.write("server_args=ServerArgs(api_key='sk-new-0001', token='hf_old_token_9')\nRuntimeError: boom\n")
    state_dir = str(tmp_path)
    old_params = dict(_params(state_dir, "old-engine", "old"), env={"HF_TOKEN": "hf_old_token_9"})
    sup.running[50] = "old-engine"
    params = dict(_params(state_dir, "new-engine", "new"), api_key="sk-new-0001", command=["new-engine", "sk-new-0001"])
    launch = _engines.adapter("command").build(params)
    old = {"pid": 50, "variant": "old", "fingerprint": "sha256:old", "url": "http://127.0.0.1:1"}
    data = _switch.Switch(sup, params, launch, old=old, stop_old=True, previous=dict(old), previous_params=old_params,
                          verify_gpus=lambda check, mode, owner=None: {}, what="switch to new").run()
    assert data["outcome"] == "rolled_back"
    assert data["log_tail"][0] == "server_args=ServerArgs(api_key='********', token='********')"
    assert data["log_file"] == sup.log_path + ".1"  # two starts: the failed one, then the restore
    for path in (tmp_path / "sv.switch.json", tmp_path / "sv.switches" / ("%s.json" % data["id"])):
        text = path.read_text()
        assert "sk-new-0001" not in text and "hf_old_token_9" not in text


def test_a_switch_that_stopped_something_never_says_nothing_was_stopped(tmp_path, ready_probe):
    """Strays stopped (no record of a server that had been ready), then the start fails: restore_failed, naming
    the pids, not nothing_stopped."""
    sup = FakeSup(str(tmp_path), failing={"new-engine"})
    sup.running[77] = "stray"
    params = _params(str(tmp_path), "new-engine", "new")
    launch = _engines.adapter("command").build(params)
    data = _switch.Switch(sup, params, launch, old={"pid": 77}, stop_old=True, previous=None, previous_params=None,
                          verify_gpus=lambda check, mode, owner=None: {}, what="switch to new").run()
    assert data["outcome"] == "restore_failed"
    assert "pids 77 were stopped" in data["outcome_msg"]


# -- the router steps (issue 34): one locked unit, out of the router and drained, switched, back in ----------

class FakeRouter(object):
    """A stand-in for _router.Membership: records leave/join against the supervisor's events; fails as told."""

    drain_timeout = 60.0
    secrets = ["router-k3y-0001"]

    def __init__(self, sup, listed=True, fail_leave=None, fail_drain=None, fail_join=False):
        self.sup, self.listed_now = sup, listed
        self.fail_leave, self.fail_drain, self.fail_join = fail_leave, fail_drain, fail_join

    def describe(self):
        return {"url": ["http://127.0.0.1:9"], "type": "sglang", "worker_url": "http://127.0.0.1:1"}

    def leave(self, on_removed=None):
        from ansible_collections.inferops.serving.plugins.module_utils import _router
        if self.fail_leave:
            raise _router.RouterError(self.fail_leave, {"listed": True})
        self.sup.events.append(("leave", self.listed_now))
        self.listed_now = False
        on_removed()
        if self.fail_drain:
            raise _router.RouterError(self.fail_drain, {"listed": False})
        return {"changed": True, "listed": False, "drain": "sglang:num_running_reqs read 0", "drained_s": 0.5}

    def join(self):
        from ansible_collections.inferops.serving.plugins.module_utils import _router
        if self.fail_join:
            raise _router.RouterError("router http://127.0.0.1:9: POST /workers failed: refused (key router-k3y-0001)")
        self.sup.events.append(("join", self.sup.running and max(self.sup.running)))
        self.listed_now = True
        return {"changed": True, "listed": True}


def _routed(tmp_path, sup, new, router):
    state_dir = str(tmp_path)
    old_params = _params(state_dir, "old-engine", "old")
    old = {"pid": 50, "variant": "old", "fingerprint": "sha256:old", "url": "http://127.0.0.1:1"}
    sup.running[50] = "old-engine"
    params = _params(state_dir, new, new)
    return _switch.Switch(sup, params, _engines.adapter("command").build(params), old=old, stop_old=True,
                          previous=dict(old), previous_params=old_params, verify_gpus=lambda check, mode, owner=None: {},
                          what="switch to " + new, router=router).run()


def test_a_routed_switch_leaves_drains_switches_and_joins_in_that_order(tmp_path, ready_probe):
    sup = FakeSup(str(tmp_path))
    data = _routed(tmp_path, sup, "new-engine", FakeRouter(sup))
    assert data["outcome"] == "ready" and data["listed"] is True
    assert [p for p, _t in data["phases"]] == ["leaving_router", "draining", "stopping", "checking_gpus", "starting",
                                               "waiting", "joining_router", "done"]
    assert sup.events == [("leave", True), ("stop", "old-engine"), ("start", "new-engine"), ("join", 101)]
    assert [(s["step"], s["listed"]) for s in data["router_steps"]] == [("leave", False), ("join", True)]
    assert data["router_steps"][0]["drain"] == "sglang:num_running_reqs read 0"
    journal = json.loads((tmp_path / "sv.switch.json").read_text())
    assert journal["listed"] is True and journal["router"]["worker_url"] == "http://127.0.0.1:1"


def test_a_routed_switch_that_fails_re_adds_the_restored_server(tmp_path, ready_probe):
    sup = FakeSup(str(tmp_path), failing={"new-engine"})
    data = _routed(tmp_path, sup, "new-engine", FakeRouter(sup))
    assert data["outcome"] == "rolled_back" and data["listed"] is True
    assert sup.events == [("leave", True), ("stop", "old-engine"), ("start", "new-engine"), ("stop", "new-engine"),
                          ("start", "old-engine"), ("join", 102)]
    assert [p for p, _t in data["phases"]][-3:] == ["restoring", "joining_router", "done"]


def test_a_drain_that_times_out_stops_nothing_and_puts_the_old_worker_back(tmp_path, ready_probe):
    sup = FakeSup(str(tmp_path))
    router = FakeRouter(sup, fail_drain="sglang:num_running_reqs still read 2 on http://127.0.0.1:1/metrics 60s after")
    data = _routed(tmp_path, sup, "new-engine", router)
    assert data["outcome"] == "nothing_stopped" and data["msg"].endswith("| nothing was stopped")
    assert "still read 2" in data["failure"] and data["listed"] is True and router.listed_now
    assert sup.events == [("leave", True), ("join", 50)]  # the old server, never stopped, back in
    assert [(s["step"], s["listed"]) for s in data["router_steps"]] == [("leave", False), ("join", True)]
    assert sup.running == {50: "old-engine"}
    assert not (tmp_path / "sv.json").exists() or json.loads((tmp_path / "sv.json").read_text()).get("pid") != 101


def test_keep_healthy_refused_stops_nothing_and_puts_nothing_back(tmp_path, ready_probe):
    sup = FakeSup(str(tmp_path))
    router = FakeRouter(sup, fail_leave="taking worker http://127.0.0.1:1 out of router ... fewer than keep_healthy 1")
    data = _routed(tmp_path, sup, "new-engine", router)
    assert data["outcome"] == "nothing_stopped" and "keep_healthy 1" in data["failure"] and data["listed"] is True
    assert sup.events == [] and sup.running == {50: "old-engine"}


def test_a_router_that_refuses_the_new_server_is_said_and_its_key_never_written(tmp_path, ready_probe):
    sup = FakeSup(str(tmp_path))
    data = _routed(tmp_path, sup, "new-engine", FakeRouter(sup, fail_join=True))
    assert data["outcome"] == "ready" and data["listed"] is False
    assert "but it is not in its router" in data["msg"] and data["router_error"]
    for path in (tmp_path / "sv.switch.json", tmp_path / "sv.switches" / ("%s.json" % data["id"]), tmp_path / "sv.json",
                 tmp_path / "sv.launch.json"):
        assert "router-k3y-0001" not in path.read_text(), path


def test_the_lock_note_says_each_phase(tmp_path, ready_probe):
    from ansible_collections.inferops.serving.plugins.module_utils import _lock
    sup = FakeSup(str(tmp_path))
    notes = []
    lock = types.SimpleNamespace(note=notes.append)
    state_dir = str(tmp_path)
    sup.running[50] = "old-engine"
    params = _params(state_dir, "new-engine", "v2")
    old = {"pid": 50, "variant": "old", "fingerprint": "sha256:old", "url": "http://127.0.0.1:1"}
    switch = _switch.Switch(sup, params, _engines.adapter("command").build(params), old=old, stop_old=True,
                            previous=dict(old), previous_params=_params(state_dir, "old-engine", "old"),
                            verify_gpus=lambda check, mode, owner=None: {}, what="switch to v2", router=FakeRouter(sup))
    switch.lock = lock
    switch.run()
    assert notes[:2] == ["switch to v2, now leaving router", "switch to v2, now draining (at most 60s)"]
    assert notes[-1] == "switch to v2, now joining router"
    assert _lock.describe({"pid": 7, "what": notes[1]}) == "pid 7 (switch to v2, now draining (at most 60s))"


# -- a stop behind a router (issue 34 item 2): the same unit, detached, that ends with the instance stopped ------

def _stopping(tmp_path, sup, router, check=None, running=True):
    """_switch.Stop of server sv (old-engine, pid 50, recorded) behind the router; its journal."""
    params = dict(_params(str(tmp_path), "old-engine", None), gpu_check={"timeout": 1} if check else None)
    old = {"pid": 50, "variant": "old", "fingerprint": "sha256:old", "url": "http://127.0.0.1:1"}
    sup.store.save(dict(old))
    if running:
        sup.running[50] = "old-engine"
    return _switch.Stop(sup, params, old, running=running, stopping=True, router=router,
                        verify_gpus=check or (lambda c, mode, owner=None: pytest.fail("no gpu_check given"))).run()


def test_a_routed_stop_leaves_drains_stops_and_checks_the_gpus_in_that_order(tmp_path):
    sup = FakeSup(str(tmp_path))
    checked = []
    data = _stopping(tmp_path, sup, FakeRouter(sup), check=lambda c, mode, owner=None: checked.append(owner) or {"clean": True})
    assert data["outcome"] == "stopped" and data["listed"] is False and data["stopped_pids"] == [50]
    assert [p for p, _t in data["phases"]] == ["leaving_router", "draining", "stopping", "checking_gpus", "done"]
    assert sup.events == [("leave", True), ("stop", "old-engine")] and checked == ["m@x"]
    assert sup.store.load() is None, "the state file says nothing runs"
    assert data["gpu_check"] == {"clean": True} and data["what"] == "stop" and data["target"]["fingerprint"] is None
    assert "router-k3y-0001" not in (tmp_path / "sv.switch.json").read_text()


def test_a_routed_stop_whose_drain_does_not_end_stops_nothing_and_puts_the_instance_back(tmp_path):
    sup = FakeSup(str(tmp_path))
    router = FakeRouter(sup, fail_drain="sglang:num_running_reqs still read 2 on http://127.0.0.1:1/metrics 60s after")
    data = _stopping(tmp_path, sup, router)
    assert data["outcome"] == "nothing_stopped" and "still read 2" in data["failure"] and data["listed"] is True
    assert sup.events == [("leave", True), ("join", 50)] and sup.running == {50: "old-engine"}
    assert sup.store.load()["pid"] == 50, "what serves is still recorded"
    assert [(s["step"], s["listed"]) for s in data["router_steps"]] == [("leave", False), ("join", True)]


def test_a_routed_stop_that_leaves_unclean_gpus_is_stopped_and_says_so(tmp_path):
    sup = FakeSup(str(tmp_path))

    def check(c, mode, owner=None):
        raise _idle_check.CheckFailed("GPU 3 held by pid 9", {"clean": False})
    data = _stopping(tmp_path, sup, FakeRouter(sup), check=check)
    assert data["outcome"] == "stopped" and data["failure"] == "GPUs not clean after stopping sv: GPU 3 held by pid 9"
    assert data["gpu_check"] == {"clean": False} and sup.running == {} and sup.store.load() is None


def test_a_routed_stop_that_fails_while_stopping_ends_in_its_journal(tmp_path):
    sup = FakeSup(str(tmp_path))

    def stop(record, timeout, grace=None):
        raise _supervisor.SupervisorError("pid 50 did not end within 1.0 s of SIGKILL")
    sup.stop = stop
    data = _stopping(tmp_path, sup, FakeRouter(sup))
    assert data["outcome"] == "failed" and data["msg"] == "pid 50 did not end within 1.0 s of SIGKILL"
    assert json.loads((tmp_path / "sv.switch.json").read_text())["outcome"] == "failed"


def test_a_routed_stop_says_each_phase_in_the_lock_note(tmp_path):
    """What a second run refused during a stop's drain quotes (docs/replicas.md)."""
    sup = FakeSup(str(tmp_path))
    notes = []
    params = dict(_params(str(tmp_path), "old-engine", None), gpu_check={"timeout": 1})
    old = {"pid": 50, "variant": "old", "fingerprint": "sha256:old", "url": "http://127.0.0.1:1"}
    sup.running[50] = "old-engine"
    stop = _switch.Stop(sup, params, old, running=True, stopping=True, router=FakeRouter(sup),
                        verify_gpus=lambda c, mode, owner=None: {"clean": True})
    stop.lock = types.SimpleNamespace(note=notes.append)
    assert stop.run()["outcome"] == "stopped"
    assert notes == ["stop, now leaving router", "stop, now draining (at most 60s)", "stop, now stopping",
                     "stop, now checking gpus"]
