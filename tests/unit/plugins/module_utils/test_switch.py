# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the pieces that keep a running server safe: the instance lock, the preflight, the
switch transaction's outcomes (with a stand-in supervisor), readiness on a broken engine."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import types

import pytest

from run_command import run_command

from ansible_collections.inferops.serving.plugins.module_utils import (
    _engines, _idle_check, _lock, _preflight, _procs, _supervisor, _switch)


COLLECTIONS = next(p for p in sys.path if os.path.isdir(os.path.join(p, "ansible_collections", "inferops")))


# -- the lock ---------------------------------------------------------------------------------------

def test_lock_names_its_holder_and_is_released_when_the_holder_dies(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, %r)\n"
        "from ansible_collections.inferops.serving.plugins.module_utils import _lock\n"
        "_lock.InstanceLock(%r, 'x').acquire('switch to nextn (sha256:abc)', 1)\n"
        "print('held', flush=True); time.sleep(60)") % (COLLECTIONS, str(tmp_path))],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        lock = _lock.InstanceLock(str(tmp_path), "x")
        began = time.monotonic()
        with pytest.raises(_lock.Busy) as busy:
            lock.acquire("switch to baseline", 0.5)
        assert time.monotonic() - began >= 0.5
        assert busy.value.holder["pid"] == holder.pid
        text = str(busy.value)
        assert "pid %d (switch to nextn (sha256:abc), since " % holder.pid in text
        assert "waited lock_timeout=0.5s" in text and str(tmp_path / "x.lock") in text
        # a joiner stops waiting at once when on_wait says so
        assert lock.acquire("switch to nextn", 30, on_wait=lambda h: h.get("pid") == holder.pid) is None
    finally:
        holder.kill()  # kill -9: the kernel releases the flock
        holder.wait()
    lock = _lock.InstanceLock(str(tmp_path), "x")
    assert lock.acquire("switch to baseline", 1) is lock
    assert lock.holder()["pid"] == os.getpid() and lock.holder()["what"] == "switch to baseline"
    lock.release()


def test_check_mode_lock_creates_nothing(tmp_path):
    state = tmp_path / "state"
    lock = _lock.InstanceLock(str(state), "x")
    assert lock.acquire("plan", 1, create=False) is lock
    lock.release()
    assert not state.exists()


# -- the preflight ----------------------------------------------------------------------------------

def test_dir_problems(tmp_path):
    assert _preflight.dir_problem("state_dir", str(tmp_path / "new" / "dir"), create=True) is None
    assert (tmp_path / "new" / "dir").is_dir() and os.listdir(str(tmp_path / "new" / "dir")) == []
    assert _preflight.dir_problem("log_dir", str(tmp_path / "absent"), create=False) is None
    assert not (tmp_path / "absent").exists()  # check mode looked at the parent
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert "cannot be created" in _preflight.dir_problem("log_dir", str(a_file / "sub"), create=True)
    assert "MiB free (at least 1000000000 MiB needed)" in _preflight.dir_problem(
        "state_dir", str(tmp_path), create=True, min_free_mib=10 ** 9)


def test_launcher_and_model_path(tmp_path):
    adapter = _engines.adapter("transformers")
    assert "does not exist" in _preflight.launcher_problem(adapter, {"executable": str(tmp_path / "nope")})
    assert "is not on PATH" in _preflight.launcher_problem(adapter, {"executable": "no-such-binary-xyz"})
    assert _preflight.launcher_problem(adapter, {"executable": sys.executable}) is None
    assert _preflight.model_problem({"engine": "vllm", "model": "Qwen/Qwen3"}) is None  # a hub id
    assert "does not exist" in _preflight.model_problem({"engine": "vllm", "model": str(tmp_path / "m")})
    assert _preflight.model_problem({"engine": "command", "model": "/not/a/path/either"}) is None


def test_port_problem_names_the_owner_unless_it_is_the_running_server():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        params = {"host": "127.0.0.1", "port": port, "name": "sv"}
        problem = _preflight.port_problem(params, None, False, {})
        assert problem.startswith("port %d on 127.0.0.1 is taken by pid %d (" % (port, os.getpid()))
        assert [p.pid for p in _procs.listeners(port)] == [os.getpid()]
        # the running server's own port: its stop frees it
        assert _preflight.port_problem(params, {"port": port, "host": "127.0.0.1"}, True, {}) is None
        # held by a process of the instance (spared): not a blocker either
        assert _preflight.port_problem(params, None, False, {os.getpid(): 0}) is None
    finally:
        sock.close()
    assert _preflight.port_problem({"host": "127.0.0.1", "port": port, "name": "sv"}, None, False, {}) is None


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
    switch = _switch.Switch(sup, params, launch, None, old, True, True, dict(old),
                            old_params if with_previous_params else None, lambda check, mode, owner=None: {}, "switch to " + new)
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
    switch = _switch.Switch(sup, params, _engines.adapter("command").build(params), None,
                            {"pid": 50, "variant": "old", "url": "u", "fingerprint": "f"}, True, True,
                            {"pid": 50, "variant": "old", "url": "u", "fingerprint": "f"}, old_params,
                            broken_check, "switch to new")
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
    data = _switch.Switch(sup, params, _engines.adapter("command").build(params), None, old, True, True, dict(old),
                          old_params, check, "switch to new").run()
    assert data["outcome"] == "rolled_back" and "GPUs not clean (sv was not started): GPU 3 held" in data["msg"]
    assert sup.events == [("stop", "old-engine"), ("start", "old-engine")]  # the new one never started


# -- flags the engine really accepts ------------------------------------------------------------------

SGLANG_0523_HELP = """usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]
  --cuda-graph-max-bs-decode CUDA_GRAPH_MAX_BS_DECODE
  --cuda-graph-max-bs-prefill CUDA_GRAPH_MAX_BS_PREFILL
  --tp-size TP_SIZE, --tensor-parallel-size TP_SIZE
  --speculative-algorithm {EAGLE,EAGLE3,NEXTN,STANDALONE,NGRAM}
  --host HOST  --port PORT  --enable-metrics
"""


def test_judge_flag_as_argparse_and_click_do():
    accepted = set(_preflight._OPTION.findall(SGLANG_0523_HELP))
    assert _preflight.judge_flag("--tp-size", accepted, True) is None
    assert _preflight.judge_flag("--tp", accepted, True) is None  # argparse: a unique prefix
    assert _preflight.judge_flag("--tp", accepted, False).startswith("is not among")  # click: no prefixes
    assert _preflight.judge_flag("--cuda-graph-max-bs", accepted, True) == (
        "is ambiguous (it abbreviates --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill)")
    assert _preflight.judge_flag("--speculative-algoritm", accepted, True) == (
        "is not among the flags its --help lists; nearest: --speculative-algorithm")


def test_flag_problems_run_the_engines_help_once_and_cache_it(tmp_path):
    calls = []

    def run(argv, environ_update=None, expand_user_and_vars=True):
        calls.append((argv, environ_update))
        return 0, SGLANG_0523_HELP, ""

    params = dict(name="t", engine="sglang", model="M", host="127.0.0.1", port=30000, api_key=None,
                  served_model_name=None, python="/opt/sglang/bin/python", env={"SGLANG_X": "1"},
                  engine_args={"cuda_graph_max_bs": 128, "tp_size": 8}, state_dir=str(tmp_path))
    adapter = _engines.adapter("sglang")
    launch = adapter.build(params, "0.5.23")
    problems, how = _preflight.flag_problems(adapter, params, launch, "0.5.23", run)
    assert problems == ["engine sglang 0.5.23 does not accept --cuda-graph-max-bs: it is ambiguous (it abbreviates "
                        "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill) (set flag_check: false in the "
                        "variant if its --help is incomplete)"]
    assert how["checked"] and calls[0][0] == ["/opt/sglang/bin/python", "-m", "sglang.launch_server", "--help"]
    assert calls[0][1]["SGLANG_X"] == "1"  # the variant's environment
    again, dummy = _preflight.flag_problems(adapter, params, launch, "0.5.23", run)
    assert again == problems and len(calls) == 1  # cached per launcher and version
    assert _preflight.flag_problems(adapter, dict(params, flag_check=False), launch, "0.5.23", run) == ([], None)
    broken = _preflight.flag_problems(adapter, dict(params, state_dir=str(tmp_path / "x")), launch, "0.5.23",
                                      lambda argv, **kw: (1, "", "ModuleNotFoundError: No module named 'sglang'"))
    assert broken[0] == [] and not broken[1]["checked"] and "No module named 'sglang'" in broken[1]["why"]


def test_vllm_negations_are_taken_though_its_help_hides_them():
    # vllm 0.34.0: `--no-enable-prefix-caching` parses (enable_prefix_caching=False) but --help=all lists only
    # --enable-prefix-caching; a --no- form of a flag it does not have is still refused
    accepted = {"--enable-prefix-caching", "--tensor-parallel-size", "--trust-remote-code"}
    assert _preflight.judge_flag("--no-enable-prefix-caching", accepted, True, negatable=True) is None
    assert _preflight.judge_flag("--no-enable-prefix-caching", accepted, True, negatable=False) is not None
    assert _preflight.judge_flag("--no-such-thing", accepted, True, negatable=True).startswith("is not among")
    assert _preflight.judge_flag("--tp-size", accepted, True, negatable=True).startswith("is not among")


def test_transformers_false_is_said_and_its_own_help_accepts_it(tmp_path):
    # transformers 5.24 cli/serve.py: cb_use_cuda_graph is `bool | None = None` (None leaves the choice to
    # ContinuousBatchingConfig), so false must reach the engine as --no-cb-use-cuda-graph, and typer's
    # --help lists that form itself: no --no- form of a non-boolean may pass
    transformers = shutil.which("transformers", path=os.path.dirname(sys.executable))
    if transformers is None:
        pytest.skip("transformers is not installed beside this Python")
    params = dict(name="t", engine="transformers", model=str(tmp_path), host="127.0.0.1", port=8000,
                  api_key=None, served_model_name=None, executable=transformers, env={},
                  engine_args={"continuous_batching": True, "cb_use_cuda_graph": False, "no_device": True},
                  state_dir=str(tmp_path))
    adapter = _engines.adapter("transformers")
    launch = adapter.build(params)
    assert "--no-cb-use-cuda-graph" in launch.argv and "--cb-use-cuda-graph" not in launch.argv
    problems, how = _preflight.flag_problems(adapter, params, launch, None, run_command)
    assert how["checked"], how
    refused = [p.split(": it ")[0] for p in problems]
    assert refused == ["engine transformers (version unknown) does not accept --no-device"]
