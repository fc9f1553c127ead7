# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""router_worker's main() run in-process (ansible.module_utils.testing.patch_module_args, its JSON read from
stdout) against a small router on 127.0.0.1 that answers sglang-router 0.3.2's worker API (a thread; changes
take effect on the next listing, as the real router's background jobs do) and an engine's /metrics: bad input
refused naming the parameter, both states, idempotence, check mode, diff, and the API key kept out of the
result. The real router is in tests/integration/test_router_worker.py."""

from __future__ import annotations

import json
import threading
import uuid

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.inferops.serving.plugins.modules import router_worker

KEY = "rk-inferops-unit-51c3e9"


class State(object):
    def __init__(self):
        self.workers = []
        self.pending = []
        self.requests = []
        self.running = 0  # the engine's sglang:num_running_reqs


class Handler(BaseHTTPRequestHandler):
    state = None

    def _answer(self, status, obj, ctype="application/json"):
        data = obj.encode() if isinstance(obj, str) else json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self):
        st = self.state
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        st.requests.append((self.command, self.path, body, self.headers.get("Authorization")))
        if self.path == "/metrics":
            if st.running:
                st.running -= 1  # one request ends between two scrapes
            return self._answer(200, "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank=\"0\"} %d\n"
                                % st.running, "text/plain")
        if self.headers.get("Authorization") != "Bearer " + KEY:
            return self._answer(401, "")
        if self.command == "GET" and self.path == "/workers":
            for action in st.pending:
                action()
            st.pending[:] = []
            return self._answer(200, {"workers": st.workers, "total": len(st.workers), "stats": {}})
        if self.command == "DELETE" and self.path.startswith("/workers/"):
            wid = self.path.rsplit("/", 1)[1]
            st.pending.append(lambda: st.workers.__setitem__(slice(None), [w for w in st.workers if w["id"] != wid]))
            return self._answer(202, {"status": "accepted", "worker_id": wid})
        if self.command == "POST" and self.path == "/workers":
            entry = {"id": str(uuid.uuid4()), "url": body["url"], "is_healthy": True, "load": 0}
            st.pending.append(lambda: st.workers.append(entry))
            return self._answer(202, {"status": "accepted", "worker_id": entry["id"], "url": body["url"]})
        return self._answer(404, {"error": "no route"})

    do_GET = do_POST = do_DELETE = _route

    def log_message(self, *args):
        pass


@pytest.fixture
def router():
    """(its URL, its State): the router and, on the same server, the engine's /metrics."""
    state = State()
    handler = type("H", (Handler,), {"state": state})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % srv.server_address[1], state
    srv.shutdown()
    srv.server_close()


def run_module(capsys, check=False, diff=False, **args):
    capsys.readouterr()
    args = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exited:
            router_worker.main()
    out = capsys.readouterr().out
    return exited.value.code, json.loads(out), out


@pytest.mark.parametrize("args, msg", [
    (dict(router_url="10.0.0.5:30000"), "router_url must be an http:// or https:// URL with a host (http://HOST:PORT), "
                                        "got '10.0.0.5:30000'"),
    (dict(worker_url="grpc://127.0.0.1:8001"), "worker_url must be an http:// or https:// URL with a host"),
    (dict(drain_metrics_url="127.0.0.1:8001/metrics"), "drain_metrics_url must be an http:// or https:// URL"),
    (dict(timeout=0), "timeout must be a positive number of seconds"),
    (dict(drain_timeout=-5), "drain_timeout must be 0 or more seconds, got -5.0"),
    (dict(drain_metric="num running"), "drain_metric must be a Prometheus metric name"),
    (dict(state="drained"), "value of state must be one of: present, absent, got: drained"),
    (dict(router_type="nginx"), "value of router_type must be one of: sglang, smg, vllm, none, auto, got: nginx"),
])
def test_bad_input_is_refused_naming_the_parameter(capsys, router, args, msg):
    url, state = router
    base = dict(router_url=url, worker_url="http://127.0.0.1:8001", api_key=KEY)
    code, result, dummy = run_module(capsys, **dict(base, **args))
    assert code == 1 and result["failed"] and msg in result["msg"], result["msg"]
    assert state.requests == []  # refused before anything was sent


def test_present_then_again_then_absent_then_again(capsys, router):
    url, state = router
    worker = url + "/"  # the engine is this same server (its /metrics)
    code, added, out = run_module(capsys, router_url=url, worker_url=worker, api_key=KEY, diff=True)
    assert code == 0 and added["changed"] is True and added["listed"] is True, added
    assert added["worker"]["url"] == url and added["worker"]["is_healthy"] is True
    assert added["diff"] == {"before": {"listed": False},
                             "after": {"listed": True, "id": added["worker"]["id"], "url": url, "is_healthy": True}}
    # the key is never printed; ansible-core 2.19 echoes the arguments masked, 2.21 no longer echoes them
    assert KEY not in out
    assert added.get("invocation", {"module_args": {"api_key": "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"}})[
        "module_args"]["api_key"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    assert [(m, p, b) for m, p, b, k in state.requests if m == "POST"] == [("POST", "/workers", {"url": url})]

    code, again, dummy = run_module(capsys, router_url=url, worker_url=worker, api_key=KEY)
    assert code == 0 and again["changed"] is False and again["worker"] == added["worker"]

    state.running = 3
    code, removed, dummy = run_module(capsys, router_url=url, worker_url=worker, api_key=KEY, state="absent",
                                      drain_metric="sglang:num_running_reqs", drain_timeout=10)
    assert code == 0 and removed["changed"] is True and removed["listed"] is False and removed["worker"] is None
    assert removed["drain_value"] == 0.0 and removed["drained_s"] > 0 and removed["workers"] == []
    assert state.running == 0

    code, again, dummy = run_module(capsys, router_url=url, worker_url=worker, api_key=KEY, state="absent",
                                    drain_timeout=30)
    assert code == 0 and again["changed"] is False and again["drained_s"] is None  # no 30 s wait


def test_check_mode_changes_nothing(capsys, router):
    url, state = router
    code, result, dummy = run_module(capsys, check=True, diff=True, router_url=url, worker_url=url, api_key=KEY)
    assert code == 0 and result["changed"] is True and result["listed"] is False
    assert result["diff"]["after"] == {"listed": True, "url": url, "is_healthy": True}
    assert [m for m, p, b, k in state.requests] == ["GET"] and state.workers == []

    state.workers.append({"id": "w1", "url": url, "is_healthy": True, "load": 0})
    code, result, dummy = run_module(capsys, check=True, router_url=url, worker_url=url, api_key=KEY, state="absent",
                                     drain_timeout=30)
    assert code == 0 and result["changed"] is True and result["listed"] is True and result["drained_s"] is None
    # the key's role is asked without a change: a DELETE of a random UUID (404 for an admin key, 403 for a user one)
    assert [m for m, p, b, k in state.requests] == ["GET", "GET", "DELETE"] and len(state.workers) == 1
    assert state.requests[-1][1] != "/workers/w1"


def test_drain_that_does_not_end_fails_naming_the_value(capsys, router):
    url, state = router
    state.workers.append({"id": "w1", "url": url, "is_healthy": True, "load": 0})
    state.running = 10 ** 6
    code, result, dummy = run_module(capsys, router_url=url, worker_url=url, api_key=KEY, state="absent",
                                     drain_metric="sglang:num_running_reqs", drain_timeout=0.3)
    assert code == 1 and result["failed"] and result["listed"] is False
    assert result["msg"].startswith("worker %s left router %s, but it did not drain: sglang:num_running_reqs still "
                                    "read " % (url, url))
    assert result["drain_value"] > 0


def test_wrong_key_fails_clearly(capsys, router):
    url, state = router
    code, result, out = run_module(capsys, router_url=url, worker_url=url, api_key="not-it")
    assert code == 1 and result["msg"] == ("router %s answered 401 Unauthorized to GET /workers: api_key is not the "
                                           "key it was started with (--api-key)" % url)
    assert "not-it" not in out
