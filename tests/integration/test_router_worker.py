# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""router_worker against each REAL router: sglang-router 0.3.2, smg 1.13.0 and vllm-router 0.1.17 (build/router-venv,
-smg, -vllm: `make router-env`; see tests/support/sglang_router.py for the flags: retries and the circuit breaker
off, so that no failed request is hidden) in front of two timing-exact stand-ins answering as SGLang
(tests/support/stream_server.py --engine sglang: its in-flight gauge sglang:num_running_reqs on /metrics). All
on loopback. The tests that take the `router` fixture run once per router.

A closed-loop streaming load runs through the router while one engine is taken out: the module returns only
once the router stopped listing it and the engine's gauge read 0, every stream the engine served had ended by
then (the engine's own trace, on the system-wide monotonic clock), no new request reached it afterwards, and no
request through the router failed. Then it is put back and listed healthy, and takes requests again. Also:
idempotence, check mode, a failed add reported with the router's own message, the router's API key, and one
run through a real ansible-playbook."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.request

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.inferops.serving.plugins.modules import router_worker

import sglang_router  # tests/support (on sys.path through tests/conftest.py)
import stand_in

GAUGE = "sglang:num_running_reqs"
STEP_MS = 20
TOKENS = 30  # one stream lasts about 5 + 29 * 20 ms = 0.6 s

pytestmark = pytest.mark.skipif(not all(sglang_router.available(kind) for kind in sglang_router.KINDS),
                                reason="the real routers are not installed: `make router-env` builds build/router-venv*")


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def gauge(engine):
    with urllib.request.urlopen(engine + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(GAUGE + "{"))


def listed(router):
    """{url: is_healthy} of the router's listing."""
    return dict((w["url"], w["is_healthy"]) for w in router.workers())


class Load(object):
    """A closed loop through the router: `clients` threads, each streaming one completion after another until
    stopped (at most limit_s). A request fails unless it answers 200 and its stream has every token and [DONE]."""

    def __init__(self, url, clients=4, limit_s=20.0):
        self.host, self.port = url.split("//", 1)[1].split(":")
        self.clients, self.limit_s = clients, limit_s
        self.sent = self.ok = 0
        self.errors = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = []

    def _one(self, n):
        body = json.dumps({"model": "stand-in", "prompt": "load%d" % n, "max_tokens": TOKENS, "stream": True})
        why = None
        try:
            conn = http.client.HTTPConnection(self.host, int(self.port), timeout=15)
            try:
                conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                text = resp.read().decode("utf-8", "replace")
            finally:
                conn.close()
            chunks = text.count('"text": " tok"')
            if resp.status != 200 or chunks != TOKENS or not text.rstrip().endswith("data: [DONE]"):
                why = "status %d, %d of %d tokens: %r" % (resp.status, chunks, TOKENS, text[-200:])
        except (OSError, http.client.HTTPException) as exc:
            why = "%s: %s" % (type(exc).__name__, exc)
        with self._lock:
            self.sent += 1
            if why:
                self.errors.append(why)
            else:
                self.ok += 1

    def _loop(self, i):
        deadline = time.monotonic() + self.limit_s
        n = 0
        while not self._stop.is_set() and time.monotonic() < deadline:
            n += 1
            self._one(i * 100000 + n)

    def __enter__(self):
        for i in range(self.clients):
            thread = threading.Thread(target=self._loop, args=(i,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self._threads:
            thread.join(30)


def run_module(capsys, check=False, diff=False, **args):
    """(exit code, result) of one router_worker main() call, in this process."""
    capsys.readouterr()
    with patch_module_args(dict(args, _ansible_check_mode=check, _ansible_diff=diff)):
        with pytest.raises(SystemExit) as exited:
            router_worker.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def engines():
    """Two stand-ins answering as SGLang on free ports: their base URLs."""
    with stand_in.stand_in(sglang_router.free_port(), "--engine", "sglang", "--ttft-ms", 5, "--step-ms", STEP_MS) as a:
        with stand_in.stand_in(sglang_router.free_port(), "--engine", "sglang", "--ttft-ms", 5,
                               "--step-ms", STEP_MS) as b:
            yield a, b


@pytest.fixture(params=sglang_router.KINDS)
def router(request, engines, tmp_path):
    """The real router (each kind in turn) with both engines, each listed healthy."""
    handle = sglang_router.start(tmp_path / "router.log", worker_urls=engines, kind=request.param)
    try:
        deadline = time.monotonic() + 15
        while listed(handle) != dict((url, True) for url in engines):
            assert time.monotonic() < deadline, "router did not list both engines: %s\n%s" % (
                handle.workers(), handle.log_tail())
            time.sleep(0.1)
        yield handle
    finally:
        handle.stop()


def test_out_under_load_drains_and_no_request_fails_then_back(capsys, engines, router):
    a, b = engines
    with Load(router.url) as load:
        deadline = time.monotonic() + 10
        while gauge(a) < 1 or gauge(b) < 1:  # both engines are streaming
            assert time.monotonic() < deadline, "no load reached both engines"
            time.sleep(0.02)
        get_json(a + "/stats?reset=1")
        called = time.monotonic()
        code, out = run_module(capsys, router_url=router.url, router_type=router.kind, worker_url=a, state="absent",
                               drain_metric=GAUGE, drain_timeout=10, timeout=10)
        returned = time.monotonic()
        assert code == 0, out
        assert out["changed"] is True and out["listed"] is False and out["worker"] is None
        assert out["drain_value"] == 0.0 and gauge(a) == 0
        # it had to wait: streams of `a` were running when it left the router (a stream lasts ~0.6 s)
        if router.kind == "smg":
            # smg lists it draining for 5 s, and the streams (~0.6 s) end within that: the wait is the removal's
            assert out["waited_s"] >= 4.5, out
        else:
            assert out["drained_s"] > 0.05, out
        assert [w["url"] for w in out["workers"]] == [b]
        trace = get_json(a + "/stats?trace=1")
        ended = [s["t_last_write"] for s in trace["trace"]]
        assert ended and max(ended) <= returned, "a stream of the removed engine ended after the module returned"
        assert max(ended) > called, "nothing was in flight on it: the drain waited on nothing"
        served_a = get_json(a + "/stats")["requests"]
        time.sleep(1.0)  # the load goes on through the router, to b only
        assert get_json(a + "/stats")["requests"] == served_a, "the router still sent requests to the removed engine"
        assert gauge(b) >= 1

        with capsys.disabled():  # the removal as the module reports it (shown with -s)
            print("\n%s removal: %s" % (router.kind, json.dumps(dict((k, out[k]) for k in (
                "router_type", "changed", "listed", "waited_s", "drained_s", "drain", "workers")), sort_keys=True)))
        code, back = run_module(capsys, router_url=router.url, router_type=router.kind, worker_url=a + "/",
                                timeout=15, diff=True)
        assert code == 0, back
        assert back["changed"] is True and back["listed"] is True and back["worker"]["is_healthy"] is True
        assert back["worker"]["url"] == a and back["diff"]["before"] == {"listed": False}
        assert listed(router) == {a: True, b: True}
        deadline = time.monotonic() + 5
        while get_json(a + "/stats")["requests"] == served_a:  # round robin sends it requests again
            assert time.monotonic() < deadline, "the engine put back got no request"
            time.sleep(0.05)

        code, again = run_module(capsys, router_url=router.url, router_type="auto", worker_url=a, timeout=15)
        assert code == 0 and again["changed"] is False and again["worker"].get("id") == back["worker"].get("id")
        assert again["router_type"] == router.kind, again["routers"]  # auto identified it
        time.sleep(0.5)
    assert load.errors == [] and load.ok == load.sent and load.sent >= 12, (load.sent, load.errors[:5])


def test_idempotence_and_check_mode_change_nothing(capsys, engines, router):
    a, b = engines
    before = router.workers()
    code, out = run_module(capsys, router_url=router.url, router_type=router.kind, worker_url=a, timeout=5)
    assert code == 0 and out["changed"] is False and out["worker"]["url"] == a

    code, out = run_module(capsys, check=True, diff=True, router_url=router.url, router_type=router.kind, worker_url=a, state="absent",
                           drain_timeout=30)
    assert code == 0 and out["changed"] is True and out["listed"] is True and out["drained_s"] is None
    assert out["diff"]["after"] == {"listed": False}
    time.sleep(0.3)  # a removal would have shown by now (it takes a few ms)
    assert router.workers() == before

    code, out = run_module(capsys, router_url=router.url, router_type=router.kind, worker_url=a, state="absent", drain_timeout=0)
    assert code == 0 and out["changed"] is True and listed(router) == {b: True}
    code, out = run_module(capsys, router_url=router.url, router_type=router.kind, worker_url=a, state="absent", drain_timeout=30)
    assert code == 0 and out["changed"] is False and out["drained_s"] is None  # not listed: no wait

    code, out = run_module(capsys, check=True, router_url=router.url, router_type=router.kind, worker_url=a)
    assert code == 0 and out["changed"] is True and out["listed"] is False
    time.sleep(0.3)
    assert listed(router) == {b: True}


FAILED_ADD = {
    # sglang-router 0.3.2: its job's status "failed" with its message, at once
    "sglang": "router %s could not add worker %s: Workflow failed at step detect_connection_mode",
    # smg 1.13.0: the job stays processing, then is gone (404), never "failed"
    "smg": "router %s could not add worker %s: its AddWorker job ",
    # vllm-router 0.1.17: the add itself answers 400 after its --worker-startup-timeout-secs (10 here)
    "vllm": "router %s could not add worker %s (POST /workers answered 400): Timeout 10s waiting for worker",
}


def test_a_worker_that_does_not_answer_fails_with_the_routers_message(capsys, router):
    dead = "http://127.0.0.1:%d" % sglang_router.free_port()
    began = time.monotonic()
    code, out = run_module(capsys, router_url=router.url, router_type=router.kind, worker_url=dead, timeout=25)
    assert code == 1 and out["failed"] and out["listed"] is False
    assert out["msg"].startswith(FAILED_ADD[router.kind] % (router.url, dead)), out["msg"]
    assert time.monotonic() - began < 20  # the router's job failed (--worker-startup-timeout-secs 10): not the 25 s
    assert dead not in listed(router)
    if router.kind == "vllm":
        assert "--worker-startup-timeout-secs" in out["msg"]


def test_smg_a_readd_after_a_removal_that_timed_out_stays_listed(capsys, engines, tmp_path):
    """The race of issue 35: a removal whose wait runs out before smg's 5 s drain, then a re-add. The re-add waits
    until the draining entry is gone, then adds; 10 s later the worker is still listed (a pending removal no
    longer takes it out)."""
    a, b = engines
    with sglang_router.start(tmp_path / "smg.log", worker_urls=engines, kind="smg") as router:
        deadline = time.monotonic() + 15
        while listed(router) != {a: True, b: True}:
            assert time.monotonic() < deadline, router.workers()
            time.sleep(0.1)
        code, out = run_module(capsys, router_url=router.url, router_type="smg", worker_url=a, state="absent",
                               timeout=2, drain_timeout=0)
        assert code == 1 and "still lists worker" in out["msg"] and "draining" in out["msg"], out["msg"]
        assert [w["status"] for w in router.workers() if w["url"] == a] == ["draining"]
        code, back = run_module(capsys, router_url=router.url, router_type="smg", worker_url=a, timeout=20)
        assert code == 0 and back["changed"] is True and back["worker"]["status"] == "ready", back
        time.sleep(10.0)
        assert [(w["url"], w["status"], w["is_healthy"]) for w in router.workers() if w["url"] == a] == [
            (a, "ready", True)], router.workers()
        assert back["worker"]["id"] in [w["id"] for w in router.workers()]


def test_smg_a_user_key_may_list_but_not_change(capsys, engines, tmp_path):
    """smg --control-plane-api-keys: a key of role user is refused (403) before anything changes; the probe of a
    random UUID tells it from an admin key without a change."""
    a, b = engines
    keys = ["admin-1:ops:admin:ak-9f1e", "user-1:viewer:user:uk-4c2d"]  # id:name:role:key (smg launch --help)
    with sglang_router.start(tmp_path / "smg.log", worker_urls=engines, kind="smg", api_key="ak-9f1e",
                             extra=["--control-plane-api-keys"] + keys) as router:
        deadline = time.monotonic() + 15
        while listed(router) != {a: True, b: True}:
            assert time.monotonic() < deadline, router.workers()
            time.sleep(0.1)
        code, out = run_module(capsys, router_url=router.url, router_type="smg", worker_url=a, state="absent",
                               api_key="uk-4c2d", drain_timeout=0)
        assert code == 1 and "the key may list but not change workers (admin role required)" in out["msg"], out
        assert listed(router) == {a: True, b: True}
        code, out = run_module(capsys, router_url=router.url, router_type="smg", worker_url=a, state="absent",
                               api_key="ak-9f1e", drain_timeout=0)
        assert code == 0 and listed(router) == {b: True}, out


def test_two_routers_of_different_kinds_auto_identified(capsys, engines, tmp_path):
    """serving_router.url as a list: membership converged on each router; router_type auto names each."""
    a, b = engines
    with sglang_router.start(tmp_path / "sgl.log", worker_urls=engines) as one, \
            sglang_router.start(tmp_path / "vllm.log", worker_urls=engines, kind="vllm") as two:
        deadline = time.monotonic() + 15
        while listed(one) != {a: True, b: True} or listed(two) != {a: True, b: True}:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        code, out = run_module(capsys, router_url=[one.url, two.url], router_type="auto", worker_url=a,
                               state="absent", drain_metric=GAUGE, drain_timeout=10, keep_healthy=1)
        found = [(r["router_type"], r["listed"]) for r in out["routers"]]
        assert code == 0 and found == [("sglang", False), ("vllm", False)], out
        assert listed(one) == {b: True} and listed(two) == {b: True}
        code, out = run_module(capsys, router_url=[one.url, two.url], router_type="auto", worker_url=a)
        assert code == 0 and out["changed"] is True and listed(one) == listed(two) == {a: True, b: True}


def test_the_routers_api_key(capsys, engines, tmp_path):
    a, b = engines
    with sglang_router.start(tmp_path / "router.log", worker_urls=[b], api_key="rk-test-8f2e") as router:
        code, out = run_module(capsys, router_url=router.url, worker_url=a, timeout=10)
        assert code == 1 and out["msg"] == ("router %s answered 401 Unauthorized to GET /workers: it runs with "
                                            "--api-key; give that key as api_key" % router.url)
        code, out = run_module(capsys, router_url=router.url, worker_url=a, timeout=10, api_key="rk-test-8f2e")
        assert code == 0 and out["changed"] is True and listed(router) == {a: True, b: True}


PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: out
      inferops.serving.router_worker:
        router_url: "{router}"
        worker_url: "{worker}"
        state: absent
        drain_metric: "sglang:num_running_reqs"
        drain_timeout: 10
    - name: back
      inferops.serving.router_worker:
        router_url: "{router}"
        worker_url: "{worker}"
        timeout: 15
    - name: again
      inferops.serving.router_worker:
        router_url: "{router}"
        worker_url: "{worker}"
"""


@pytest.mark.parametrize("router", ["sglang"], indirect=True)
def test_through_ansible_playbook(run_playbook, engines, router):
    a, b = engines
    run = run_playbook(PLAY.format(router=router.url, worker=a), diff=True)
    assert run.rc == 0, run.stdout[-3000:]
    out, back, again = run.result(task="out"), run.result(task="back"), run.result(task="again")
    assert out["changed"] and out["listed"] is False and out["drain_value"] == 0.0
    assert back["changed"] and back["worker"]["url"] == a and back["worker"]["is_healthy"] is True
    assert again["changed"] is False
    assert run.recap()["changed"] == 2
    assert listed(router) == {a: True, b: True}
