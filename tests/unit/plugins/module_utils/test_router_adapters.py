# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _router's adapters for smg 1.13 and vllm-router 0.1.17, router_type auto, the key's role,
several routers, keep_healthy under a concurrent removal, and the drain's end when the engine is gone; each fake
behaves as the real router was seen to (tests/integration/test_router_worker.py runs the real ones)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from urllib.parse import unquote

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _router


class Clock(object):
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.now += s


class Fake(object):
    """smg (kind smg: ids, status, a 5 s drain, 409 on a listed URL, a failed add's job gone after 8 s) or
    vllm-router (kind vllm: no ids, by URL, synchronous add)."""

    def __init__(self, clock, kind, down=(), keys=None):
        self.clock, self.kind, self.down, self.keys = clock, kind, set(down), keys or {}
        self.workers, self.jobs, self.calls, self.n = [], {}, [], 0

    def entry(self, url, load=0):
        self.n += 1
        w = {"url": url, "is_healthy": True, "load": load}
        if self.kind == "smg":
            w.update(id="01a2481e-0000-7000-8000-%012d" % self.n, status="ready")
        self.workers.append(w)
        return w

    def tick(self):
        for w in list(self.workers):
            if w.get("status") == "draining" and self.clock() >= w["gone_at"]:
                self.workers.remove(w)
        for wid, job in list(self.jobs.items()):
            if self.clock() >= job["at"]:
                del self.jobs[wid]
                if job["ok"]:
                    w = self.entry(job["url"])
                    w["id"] = wid

    def __call__(self, host, port, method, path, body=None, api_key=None, timeout=10.0, https=False, **kw):
        self.calls.append((method, path, timeout))
        self.tick()
        if self.keys and method != "GET" and self.keys.get(api_key) != "admin":
            return 403, json.dumps({"error": "admin role required"})
        if method == "GET" and path == "/workers":
            return 200, json.dumps({"workers": self.workers, "total": len(self.workers)})
        if method == "GET" and path == "/list_workers":
            if self.kind == "vllm":
                return 200, json.dumps({"urls": [w["url"] for w in self.workers]})
            return 404, json.dumps({"error": {"type": "invalid_request_error", "code": "unknown_url"}})
        if self.kind == "smg":
            wid = path.rsplit("/", 1)[1]
            if method == "GET" and wid in self.jobs:
                return 200, json.dumps({"id": wid, "status": "pending",
                                        "job_status": {"job_type": "AddWorker", "status": "processing", "message": None}})
            if method == "DELETE":
                for w in self.workers:
                    if w["id"] == wid:
                        w.update(status="draining", is_healthy=False, gone_at=self.clock() + 5.0)
                        return 202, json.dumps({"status": "accepted", "worker_id": wid})
                return 404, json.dumps({"error": "Worker %s not found" % wid, "code": "WORKER_NOT_FOUND"})
            if method == "POST":
                if any(w["url"] == body["url"] for w in self.workers):
                    return 409, json.dumps({"code": "WORKER_ALREADY_EXISTS"})
                self.n += 1
                wid = "01a2481f-0000-7000-8000-%012d" % self.n
                ok = body["url"] not in self.down
                self.jobs[wid] = {"url": body["url"], "at": self.clock() + (0.5 if ok else 12.0), "ok": ok}
                return 202, json.dumps({"status": "accepted", "worker_id": wid})
            return 404, json.dumps({"error": "Worker %s not found" % wid, "code": "WORKER_NOT_FOUND"})
        if method == "DELETE" and path.startswith("/workers/"):
            url = unquote(path[len("/workers/"):])
            self.workers = [w for w in self.workers if w["url"] != url]
            return 200, json.dumps({"success": True, "message": "Worker %s removed successfully" % url})
        if method == "POST" and path == "/workers":
            if body["url"] in self.down:
                self.clock.now += min(timeout, 10.0)
                if timeout < 10.0:
                    raise _router.socket.timeout("timed out")
                return 400, json.dumps({"error": "Timeout 10s waiting for worker %s to become healthy. Please set "
                                        "--worker-startup-timeout-secs to a larger value" % body["url"],
                                        "code": "ADD_WORKER_FAILED"})
            self.entry(body["url"])
            return 200, json.dumps({"success": True})
        return 404, ""


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture(scope="module")
def alive_state(tmp_path_factory):
    """A state file whose engine is alive (this process): the drain's engine watch says it runs."""
    path = tmp_path_factory.mktemp("state") / "alive.json"
    path.write_text(json.dumps({"pid": os.getpid()}))
    return str(path)


ALIVE = None  # set by the autouse fixture below


@pytest.fixture(autouse=True)
def _alive(alive_state):
    global ALIVE  # pylint: disable=global-statement
    ALIVE = alive_state


def run(fake, clock, check_mode=False, request=None, **params):
    p = dict(router_url=["http://127.0.0.1:30000"], router_type=fake.kind, worker_url="http://127.0.0.1:8001",
             state="present", timeout=20.0, drain_metric=None, drain_metrics_url=None, drain_timeout=3.0,
             keep_healthy=0, api_key=None, engine_state=ALIVE)
    p.update(params)
    return _router.converge(p, check_mode=check_mode, request=request or fake, clock=clock, sleep=clock.sleep)


def test_the_one_list_of_types_is_the_module_choices_and_the_role_check():
    assert _router.ROUTER_TYPES == ("sglang", "smg", "vllm", "none", "auto")
    assert _router.ARGUMENT_SPEC["router_type"]["choices"] == list(_router.ROUTER_TYPES)
    assert _router.ROLE_ROUTER_TYPES == _router.ROUTER_TYPES + ("command",)


def test_smg_removal_waits_until_the_draining_entry_is_gone(clock):
    fake = Fake(clock, "smg")
    fake.entry("http://127.0.0.1:8001")
    fake.entry("http://127.0.0.1:8002")
    start = clock()
    result, dummy = run(fake, clock, state="absent")
    assert result["listed"] is False and clock() - start >= 5.0  # draining counted as listed
    assert [w["url"] for w in fake.workers] == ["http://127.0.0.1:8002"]


def test_smg_without_a_gauge_drains_on_its_own_count(clock):
    fake = Fake(clock, "smg")
    fake.entry("http://127.0.0.1:8001", load=0)
    result, dummy = run(fake, clock, state="absent", drain_timeout=30.0)
    assert result["drain_value"] == 0.0 and "counted 0 requests in flight" in result["drain"]
    busy = Fake(clock, "smg")
    busy.entry("http://127.0.0.1:8001", load=2)
    start = clock()
    result, dummy = run(busy, clock, state="absent", drain_timeout=30.0, engine_state=ALIVE)
    # gone from the listing with 2 in flight: smg no longer counts them; the whole drain_timeout, said so
    assert result["drain_value"] is None and clock() - start >= 30.0
    assert result["drain"] == ("no in-flight reading (no engine gauge, and the router counts none): waited the whole "
                               "drain_timeout of 30s")


def test_smg_readd_of_a_draining_url_waits_until_gone_then_adds(clock):
    fake = Fake(clock, "smg")
    fake.entry("http://127.0.0.1:8001")
    with pytest.raises(_router.RouterError) as err:
        run(fake, clock, state="absent", timeout=2.0)  # the removal's wait runs out during smg's 5 s drain
    assert "still lists worker" in err.value.msg and fake.workers[0]["status"] == "draining"
    result, dummy = run(fake, clock, state="present")
    assert result["listed"] is True and result["worker"]["status"] == "ready"
    clock.sleep(10.0)
    fake.tick()
    assert [(w["url"], w["status"]) for w in fake.workers] == [("http://127.0.0.1:8001", "ready")]
    assert not [c for c in fake.calls if c[0] == "POST"][1:]  # one POST, never answered 409


def test_smg_failed_add_is_found_when_its_job_disappears(clock):
    fake = Fake(clock, "smg", down={"http://127.0.0.1:8001"})
    with pytest.raises(_router.RouterError) as err:
        run(fake, clock, timeout=60.0)
    assert "ended without listing the worker" in err.value.msg and "404" in err.value.msg
    assert "Failed job: type=AddWorker" in err.value.msg and clock() - 1000.0 < 20.0


def test_vllm_removal_by_url_confirmed_by_the_listing(clock):
    fake = Fake(clock, "vllm")
    fake.entry("http://127.0.0.1:8001")
    fake.entry("http://127.0.0.1:8002")
    result, dummy = run(fake, clock, state="absent", keep_healthy=1)
    assert result["listed"] is False and [w["url"] for w in fake.workers] == ["http://127.0.0.1:8002"]
    assert ("DELETE", "/workers/http%3A%2F%2F127.0.0.1%3A8001") in [c[:2] for c in fake.calls]
    assert "waited the whole drain_timeout" in result["drain"]


def test_vllm_add_is_one_request_bounded_by_the_whole_timeout(clock):
    fake = Fake(clock, "vllm", down={"http://127.0.0.1:8001"})
    with pytest.raises(_router.RouterError) as err:
        run(fake, clock, timeout=30.0)
    post = [c for c in fake.calls if c[0] == "POST"][0]
    assert post[2] == pytest.approx(30.0)  # no per-request cap shorter than the module's timeout
    assert "--worker-startup-timeout-secs" in err.value.msg and "400" in err.value.msg
    with pytest.raises(_router.RouterError) as err:
        run(fake, clock, timeout=4.0)
    assert "did not answer POST /workers" in err.value.msg and "--worker-startup-timeout-secs" in err.value.msg


def test_auto_identifies_each_router_and_an_unknown_one_is_an_error(clock):
    smg, vllm = Fake(clock, "smg"), Fake(clock, "vllm")
    assert _router.identify("http://r:1", request=smg)[0].kind == "smg"
    assert _router.identify("http://r:1", request=vllm)[0].kind == "vllm"

    def sglang(host, port, method, path, *a, **kw):
        return (200, json.dumps({"workers": []})) if path == "/workers" else (404, "")
    assert _router.identify("http://r:1", request=sglang)[0].kind == "sglang"

    def other(host, port, method, path, *a, **kw):
        return (200, json.dumps({"workers": []})) if path == "/workers" else (405, "nope")
    with pytest.raises(_router.RouterError) as err:
        _router.identify("http://r:1", request=other)
    assert "none of sglang-router 0.3, smg 1.13, vllm-router 0.1" in err.value.msg
    assert "GET /workers" in err.value.msg and "GET /list_workers: 405" in err.value.msg


def test_a_user_key_is_refused_before_anything_changes(clock):
    fake = Fake(clock, "smg", keys={"admin-key": "admin", "user-key": "user"})
    fake.entry("http://127.0.0.1:8001")
    with pytest.raises(_router.RouterError) as err:
        run(fake, clock, state="absent", api_key="user-key")
    assert _router.FORBIDDEN in err.value.msg and fake.workers[0]["status"] == "ready"
    assert [c[0] for c in fake.calls] == ["GET", "DELETE"]  # the probe of a random UUID, nothing else
    result, dummy = run(fake, clock, state="absent", api_key="admin-key")
    assert result["listed"] is False


def test_membership_converged_on_each_router_and_one_down_changes_nothing(clock):
    a, b = Fake(clock, "vllm"), Fake(clock, "vllm")

    def both(host, port, *args, **kw):
        return (a if port == 30000 else b)(host, port, *args, **kw)
    pair = ["http://127.0.0.1:30000", "http://127.0.0.1:30001"]
    result, dummy = run(a, clock, request=both, router_url=pair, timeout=5.0)
    assert result["listed"] is True and len(result["routers"]) == 2
    assert [w["url"] for w in a.workers] == [w["url"] for w in b.workers] == ["http://127.0.0.1:8001"]

    def one_down(host, port, *args, **kw):
        if port == 30001:
            raise ConnectionRefusedError(111, "Connection refused")
        return a(host, port, *args, **kw)
    with pytest.raises(_router.RouterError) as err:
        run(a, clock, request=one_down, router_url=pair, state="absent")
    assert "127.0.0.1:30001" in err.value.msg and [w["url"] for w in a.workers] == ["http://127.0.0.1:8001"]


def test_a_concurrent_removal_that_leaves_fewer_than_keep_healthy_puts_it_back(clock):
    fake = Fake(clock, "vllm")
    fake.entry("http://127.0.0.1:8001")
    fake.entry("http://127.0.0.1:8002")
    real = fake.__call__

    def racing(host, port, method, path, *a, **kw):
        out = real(host, port, method, path, *a, **kw)
        if method == "DELETE" and "8001" in path:  # another run takes 8002 out at the same moment
            fake.workers = [w for w in fake.workers if "8002" not in w["url"]]
        return out
    with pytest.raises(_router.RouterError) as err:
        run(fake, clock, request=racing, state="absent", keep_healthy=1)
    assert "fewer than keep_healthy 1" in err.value.msg and "put back" in err.value.msg
    assert [w["url"] for w in fake.workers] == ["http://127.0.0.1:8001"] and err.value.result["listed"] is True


def test_the_drain_ends_at_once_when_the_engine_is_gone_in_its_exit_record_words(clock, tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    state = tmp_path / "demo.r0.json"
    state.write_text(json.dumps({"pid": proc.pid, "starttime": 1}))
    (tmp_path / "demo.r0.exit.json").write_text(json.dumps({"pid": proc.pid, "signal": "SIGKILL", "code": None}))
    gone = _router.engine_watch(_router.Url("http://127.0.0.1:9"), str(state))
    assert gone() == "the engine (pid %d) was killed by SIGKILL" % proc.pid
    out = _router.drained("http://127.0.0.1:9/metrics", None, 60.0, clock=clock, sleep=clock.sleep, gone=gone)
    assert out["drained_s"] == 0.0 and out["engine_ended"].endswith("killed by SIGKILL")
    assert "the wait ended at once" in out["drain"]
    alive = tmp_path / "alive.json"
    alive.write_text(json.dumps({"pid": os.getpid()}))
    assert _router.engine_watch(_router.Url("http://127.0.0.1:9"), str(alive))() is None
    # no state: a port that refuses is an engine that stopped answering
    assert "stopped answering" in _router.engine_watch(_router.Url("http://127.0.0.1:9"))()
