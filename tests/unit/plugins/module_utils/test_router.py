# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _router: URL comparison, the worker API client against a fake transport that behaves as
sglang-router 0.3.2 does (changes accepted at once, taking effect some polls later; a failed add reported in
the worker's job_status), the drain on an engine's /metrics, converge() for both states and check mode, all
on a fake clock; and the client over real HTTP against a small local server (the bearer key, a path prefix)."""

from __future__ import annotations

import json
import sys
import threading

from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _router


class Clock(object):
    def __init__(self):
        self.now = 1000.0
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


class FakeRouter(object):
    """The router's worker API as a transport (_http.request's signature). A DELETE or POST is accepted at
    once and takes effect after `lag` further GET /workers; an add of a URL in `down` fails its job."""

    def __init__(self, clock, workers=(), lag=2, down=(), unhealthy_after_add=False):
        self.clock = clock
        self.workers = [dict(w) for w in workers]
        self.lag = lag
        self.down = set(down)
        self.unhealthy_after_add = unhealthy_after_add
        self.pending = []  # [polls left, action]
        self.jobs = {}
        self.calls = []
        self.metrics = {}  # (host, port) -> list of texts served in turn (the last one repeats)
        self.n = 0
        self.status_override = {}

    def entry(self, url, healthy=True, wid=None):
        self.n += 1
        return {"id": wid or "00000000-0000-4000-8000-%012d" % self.n, "url": url, "is_healthy": healthy,
                "load": 0, "model_id": "unknown", "worker_type": "regular"}

    def __call__(self, host, port, method, path, body=None, api_key=None, timeout=10.0, https=False, **kw):
        self.calls.append((method, path, body, api_key, timeout))
        if (method, path) in self.status_override:
            return self.status_override[(method, path)]
        if path == "/metrics":
            texts = self.metrics[(host, port)]
            return 200, texts.pop(0) if len(texts) > 1 else texts[0]
        if method == "GET" and path == "/workers":
            for item in list(self.pending):
                item[0] -= 1
                if item[0] <= 0:
                    self.pending.remove(item)
                    item[1]()
            return 200, json.dumps({"workers": self.workers, "total": len(self.workers),
                                    "stats": {"prefill_count": 0, "decode_count": 0,
                                              "regular_count": len(self.workers)}})
        if method == "DELETE" and path.startswith("/workers/"):
            wid = path.rsplit("/", 1)[1]
            if not any(w["id"] == wid for w in self.workers):
                return 404, json.dumps({"error": "Worker %s not found" % wid, "code": "WORKER_NOT_FOUND"})
            self.pending.append([self.lag, lambda: self.workers.__setitem__(
                slice(None), [w for w in self.workers if w["id"] != wid])])
            return 202, json.dumps({"status": "accepted", "worker_id": wid, "message": "queued"})
        if method == "POST" and path == "/workers":
            url = body["url"]
            entry = self.entry(url, healthy=not self.unhealthy_after_add)
            if url in self.down:
                self.jobs[entry["id"]] = {"job_type": "AddWorker", "worker_url": url, "status": "processing",
                                          "message": None}

                def fail():
                    self.jobs[entry["id"]].update(status="failed", message="Workflow failed at step "
                                                  "detect_connection_mode: Both HTTP and gRPC health checks failed")
                self.pending.append([self.lag, fail])
            else:
                self.pending.append([self.lag, lambda: self.workers.append(entry)])
            return 202, json.dumps({"status": "accepted", "worker_id": entry["id"], "url": url,
                                    "location": "/workers/" + entry["id"]})
        if method == "GET" and path.startswith("/workers/"):
            wid = path.rsplit("/", 1)[1]
            listed = [w for w in self.workers if w["id"] == wid]
            if listed:
                return 200, json.dumps(listed[0])
            if wid in self.jobs:
                return 200, json.dumps({"id": wid, "url": self.jobs[wid]["worker_url"], "is_healthy": False,
                                        "job_status": self.jobs[wid]})
            return 404, json.dumps({"error": "Worker %s not found" % wid, "code": "WORKER_NOT_FOUND"})
        return 404, "no route"

    def methods(self):
        return [(m, p) for m, p, b, k, t in self.calls if not (m == "GET" and p in ("/workers", "/metrics"))]


@pytest.fixture
def clock():
    return Clock()


def params(**kw):
    p = {"router_url": "http://127.0.0.1:30000", "router_type": "sglang", "worker_url": "http://127.0.0.1:8001",
         "state": "present", "timeout": 5.0, "drain_metric": None, "drain_metrics_url": None, "drain_timeout": 3.0,
         "api_key": None}
    p.update(kw)
    return p


def converge(fake, clock, check_mode=False, **kw):
    return _router.converge(params(**kw), check_mode=check_mode, request=fake, clock=clock, sleep=clock.sleep)


GAUGE = ('# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\n'
         'sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="%d",pp_rank="0",moe_ep_rank="0"} %s\n')


def gauge(*values):
    return "".join(GAUGE % (rank, v) for rank, v in enumerate(values))


# ---------------------------------------------------------------------------- URLs
@pytest.mark.parametrize("a,b", [
    ("http://127.0.0.1:8001", "http://127.0.0.1:8001/"),
    ("HTTP://Engine-A:8001", "http://engine-a:8001//"),
    ("http://h", "http://h:80"),
    ("https://h/", "https://h:443"),
    ("http://[::1]:8001", "http://[::1]:8001/"),
    ("http://h:8001/prefix/", "http://h:8001/prefix"),
])
def test_same_canonical_url(a, b):
    assert _router.Url(a).canonical == _router.Url(b).canonical


@pytest.mark.parametrize("a,b", [
    ("http://h:8001", "https://h:8001"),
    ("http://h:8001", "http://h:8002"),
    ("http://h:8001", "http://h:8001/v1"),
    ("http://a:8001", "http://b:8001"),
])
def test_different_urls(a, b):
    assert _router.Url(a).canonical != _router.Url(b).canonical
    assert _router.Url(a).loopback_key != _router.Url(b).loopback_key


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.1.2.3", "[::1]", "LOCALHOST", "localhost."])
def test_loopback_spellings_share_a_key(host):
    assert _router.Url("http://%s:8001/" % host).loopback_key == _router.Url("http://127.0.0.1:8001").loopback_key


def test_a_name_is_never_taken_for_loopback():
    assert _router.Url("http://myhost:8001").loopback_key != _router.Url("http://127.0.0.1:8001").loopback_key
    assert _router.Url("http://10.0.0.1:8001").loopback_key != _router.Url("http://127.0.0.1:8001").loopback_key


def test_the_url_sent_keeps_the_host_as_written_less_the_trailing_slash():
    assert _router.Url("http://LocalHost:8001/").given == "http://localhost:8001"
    assert _router.Url("http://h").given == "http://h"  # no port added: the router lists it as sent


@pytest.mark.parametrize("key,value,words", [
    ("router_url", "10.0.0.5:30000", "router_url must be an http:// or https:// URL with a host"),
    ("router_url", "ftp://h:1", "router_url must be an http:// or https:// URL"),
    ("worker_url", "", "worker_url must be an http:// or https:// URL, got ''"),
    ("worker_url", "http://h:99999", "worker_url must be an http:// or https:// URL with a port from 1 to 65535"),
    ("worker_url", "http://u:p@h:1", "worker_url must not carry a user or password"),
    ("worker_url", "http://h:1/?x=1", "worker_url must be scheme://host[:port][/path] with no query"),
    ("drain_metrics_url", "grpc://h:1", "drain_metrics_url must be an http:// or https:// URL"),
    ("timeout", 0, "timeout must be a positive number of seconds"),
    ("drain_timeout", -1, "drain_timeout must be 0 or more seconds, got -1"),
    ("drain_metric", "sglang num running", "drain_metric must be a Prometheus metric name such as "
                                           "sglang:num_running_reqs or vllm:num_requests_running"),
])
def test_bad_input_names_the_parameter_and_what_is_allowed(key, value, words):
    problems = _router.url_problems(params(**{key: value}))
    assert len(problems) == 1 and words in problems[0], problems


def test_good_input_has_no_problems():
    assert _router.url_problems(params(drain_metrics_url="http://h:9/metrics?name[]=x", drain_timeout=0)) == []


# ---------------------------------------------------------------------------- the client
def test_find_prefers_the_exact_url_over_a_loopback_alias(clock):
    fake = FakeRouter(clock)
    exact, alias = fake.entry("http://127.0.0.1:8001/"), fake.entry("http://localhost:8001")
    router = _router.Router("http://r:1", request=fake, clock=clock, sleep=clock.sleep)
    assert router.find(_router.Url("http://127.0.0.1:8001"), [alias, exact]) == [exact]
    assert router.find(_router.Url("http://[::1]:8001"), [alias, exact]) == [alias, exact]
    assert router.find(_router.Url("http://127.0.0.1:8002"), [alias, exact]) == []


def test_remove_waits_until_the_router_no_longer_lists_it(clock):
    fake = FakeRouter(clock, lag=3)
    fake.workers = [fake.entry("http://127.0.0.1:8001"), fake.entry("http://127.0.0.1:8002")]
    router = _router.Router("http://127.0.0.1:30000", request=fake, clock=clock, sleep=clock.sleep)
    workers, waited = router.remove(_router.Url("http://127.0.0.1:8001"), [fake.workers[0]], 5.0)
    assert [w["url"] for w in workers] == ["http://127.0.0.1:8002"]
    assert waited == pytest.approx(0.2)  # seen listed twice, gone on the third read
    assert fake.methods() == [("DELETE", "/workers/00000000-0000-4000-8000-000000000001")]


def test_remove_that_never_takes_effect_fails_naming_router_worker_and_listing(clock):
    fake = FakeRouter(clock, lag=10 ** 6)
    fake.workers = [fake.entry("http://127.0.0.1:8001")]
    router = _router.Router("http://127.0.0.1:30000", request=fake, clock=clock, sleep=clock.sleep)
    with pytest.raises(_router.RouterError) as err:
        router.remove(_router.Url("http://127.0.0.1:8001"), list(fake.workers), 2.0)
    assert err.value.msg == ("router http://127.0.0.1:30000 still lists worker http://127.0.0.1:8001 2s after it "
                             "accepted its removal; it lists http://127.0.0.1:8001 (healthy)")
    assert 2.0 <= clock.now - 1000.0 <= 2.2


def test_a_worker_removed_by_someone_else_meanwhile_is_not_an_error(clock):
    fake = FakeRouter(clock)
    gone = fake.entry("http://127.0.0.1:8001")
    router = _router.Router("http://127.0.0.1:30000", request=fake, clock=clock, sleep=clock.sleep)
    workers, dummy = router.remove(_router.Url("http://127.0.0.1:8001"), [gone], 1.0)
    assert workers == []


def test_add_waits_until_listed_and_healthy(clock):
    fake = FakeRouter(clock, lag=4)
    router = _router.Router("http://127.0.0.1:30000", request=fake, clock=clock, sleep=clock.sleep)
    entry, workers, waited = router.add(_router.Url("http://127.0.0.1:8001/"), 5.0)
    assert entry["url"] == "http://127.0.0.1:8001" and entry["is_healthy"] is True
    assert [c[2] for c in fake.calls if c[0] == "POST"] == [{"url": "http://127.0.0.1:8001"}]
    assert waited == pytest.approx(0.3)


def test_add_that_the_router_fails_reports_its_message_at_once(clock):
    fake = FakeRouter(clock, lag=3, down=["http://127.0.0.1:8009"])
    router = _router.Router("http://127.0.0.1:30000", request=fake, clock=clock, sleep=clock.sleep)
    with pytest.raises(_router.RouterError) as err:
        router.add(_router.Url("http://127.0.0.1:8009"), 60.0)
    assert err.value.msg.startswith("router http://127.0.0.1:30000 could not add worker http://127.0.0.1:8009: "
                                    "Workflow failed at step detect_connection_mode")
    assert clock.now - 1000.0 < 1.0  # not the whole minute


def test_add_listed_but_never_healthy_fails_at_the_timeout(clock):
    fake = FakeRouter(clock, lag=1, unhealthy_after_add=True)
    router = _router.Router("http://127.0.0.1:30000", request=fake, clock=clock, sleep=clock.sleep)
    with pytest.raises(_router.RouterError) as err:
        router.add(_router.Url("http://127.0.0.1:8001"), 1.5)
    assert err.value.msg == ("router http://127.0.0.1:30000 accepted worker http://127.0.0.1:8001 but lists it "
                             "unhealthy 1.5s later; it lists http://127.0.0.1:8001 (unhealthy)")
    assert err.value.result["listed"] is True


def test_add_refused_names_the_status_and_body(clock):
    fake = FakeRouter(clock)
    fake.status_override[("POST", "/workers")] = (422, "Failed to deserialize the JSON body: missing field `url`")
    router = _router.Router("http://127.0.0.1:30000", request=fake, clock=clock, sleep=clock.sleep)
    with pytest.raises(_router.RouterError) as err:
        router.add(_router.Url("http://127.0.0.1:8001"), 1.0)
    assert err.value.msg == ('router http://127.0.0.1:30000: POST /workers {"url": http://127.0.0.1:8001} answered '
                             '422: Failed to deserialize the JSON body: missing field `url`')


def test_unreachable_router_is_named(clock):
    def refused(*args, **kw):
        raise ConnectionRefusedError(111, "Connection refused")
    router = _router.Router("http://127.0.0.1:30000", request=refused, clock=clock, sleep=clock.sleep)
    with pytest.raises(_router.RouterError) as err:
        router.list_workers()
    assert err.value.msg == "router http://127.0.0.1:30000: GET /workers failed: [Errno 111] Connection refused"


@pytest.mark.parametrize("key,words", [(None, "it runs with --api-key; give that key as api_key"),
                                       ("wrong", "api_key is not the key it was started with (--api-key)")])
def test_401_says_what_to_do_about_the_key(clock, key, words):
    fake = FakeRouter(clock)
    fake.status_override[("GET", "/workers")] = (401, "")
    router = _router.Router("http://127.0.0.1:30000", api_key=key, request=fake, clock=clock, sleep=clock.sleep)
    with pytest.raises(_router.RouterError) as err:
        router.list_workers()
    assert err.value.msg == "router http://127.0.0.1:30000 answered 401 Unauthorized to GET /workers: " + words


def test_a_listing_of_another_shape_is_refused(clock):
    fake = FakeRouter(clock)
    fake.status_override[("GET", "/workers")] = (200, json.dumps({"urls": ["http://127.0.0.1:8001"]}))
    router = _router.Router("http://127.0.0.1:30000", request=fake, clock=clock, sleep=clock.sleep)
    with pytest.raises(_router.RouterError) as err:
        router.list_workers()
    assert "GET /workers answered 200, not the listing" in err.value.msg and '"urls"' in err.value.msg


def test_each_request_is_bounded_by_the_time_left(clock):
    fake = FakeRouter(clock, lag=10 ** 6)
    fake.workers = [fake.entry("http://127.0.0.1:8001")]
    router = _router.Router("http://127.0.0.1:30000", request=fake, clock=clock, sleep=clock.sleep)
    with pytest.raises(_router.RouterError):
        router.remove(_router.Url("http://127.0.0.1:8001"), list(fake.workers), 0.5)
    timeouts = [c[4] for c in fake.calls]
    assert timeouts[0] == pytest.approx(0.5) and min(timeouts) == pytest.approx(0.2) and max(timeouts) <= 0.5


# ---------------------------------------------------------------------------- the drain
def test_drained_waits_until_every_series_reads_zero(clock):
    fake = FakeRouter(clock)
    fake.metrics[("127.0.0.1", 8001)] = [gauge(3, 1), gauge(1, 0), gauge(0, 1), gauge(0, 0)]
    out = _router.drained("http://127.0.0.1:8001/metrics", "sglang:num_running_reqs", 5.0, request=fake,
                          clock=clock, sleep=clock.sleep)
    assert out == {"drained_s": pytest.approx(0.3), "drain_value": 0.0, "engine_ended": None,
                   "drain": "sglang:num_running_reqs read 0"}


def test_drained_times_out_naming_the_last_value(clock):
    fake = FakeRouter(clock)
    fake.metrics[("127.0.0.1", 8001)] = [gauge(2, 1)]
    with pytest.raises(_router.RouterError) as err:
        _router.drained("http://127.0.0.1:8001/metrics", "sglang:num_running_reqs", 1.0, request=fake,
                        clock=clock, sleep=clock.sleep)
    assert err.value.msg == ("sglang:num_running_reqs still read 3 on http://127.0.0.1:8001/metrics 1s after the "
                             "worker left the router")
    assert err.value.result["drain_value"] == 3.0


def test_a_gauge_declared_with_no_series_yet_is_zero(clock):
    fake = FakeRouter(clock)
    fake.metrics[("127.0.0.1", 8001)] = ["# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n"]
    out = _router.drained("http://127.0.0.1:8001/metrics", "vllm:num_requests_running", 1.0, request=fake,
                          clock=clock, sleep=clock.sleep)
    assert out["drain_value"] == 0.0 and out["drained_s"] == 0.0


def test_a_missing_gauge_fails_at_the_timeout_saying_so(clock):
    fake = FakeRouter(clock)
    fake.metrics[("127.0.0.1", 8001)] = ['sglang:generation_tokens_total{model_name="m"} 5\n']
    with pytest.raises(_router.RouterError) as err:
        _router.drained("http://127.0.0.1:8001/metrics", "sglang:num_running_reqs", 0.5, request=fake,
                        clock=clock, sleep=clock.sleep)
    assert err.value.msg == ("no reading of sglang:num_running_reqs within 0.5s: http://127.0.0.1:8001/metrics has "
                             "no sglang:num_running_reqs (SGLang exports it with --enable-metrics; vLLM's is "
                             "vllm:num_requests_running)")
    assert err.value.result["drain_value"] is None


def test_unreachable_metrics_fail_at_the_timeout_naming_the_error(clock):
    def refused(*args, **kw):
        raise ConnectionRefusedError(111, "Connection refused")
    with pytest.raises(_router.RouterError) as err:
        _router.drained("http://127.0.0.1:8001/metrics", "sglang:num_running_reqs", 0.3, request=refused,
                        clock=clock, sleep=clock.sleep)
    assert err.value.msg == ("no reading of sglang:num_running_reqs within 0.3s: GET http://127.0.0.1:8001/metrics "
                             "failed: [Errno 111] Connection refused")


def test_without_a_metric_the_drain_is_the_fixed_wait(clock):
    out = _router.drained("http://127.0.0.1:8001/metrics", None, 7.5, request=None, clock=clock, sleep=clock.sleep)
    assert out == {"drained_s": 7.5, "drain_value": None, "engine_ended": None,
                   "drain": "no in-flight reading (no engine gauge, and the router counts none): waited the whole "
                            "drain_timeout of 7.5s"} and clock.slept == [7.5]
    clock.slept[:] = []
    assert _router.drained("http://h:1/metrics", "", 0.0, clock=clock, sleep=clock.sleep)["drained_s"] == 0.0
    assert clock.slept == []


# ---------------------------------------------------------------------------- converge
def test_absent_removes_waits_unlisted_then_drained(clock):
    fake = FakeRouter(clock, lag=2)
    fake.workers = [fake.entry("http://127.0.0.1:8001"), fake.entry("http://127.0.0.1:8002")]
    fake.metrics[("127.0.0.1", 8001)] = [gauge(2), gauge(1), gauge(0)]
    result, diff = converge(fake, clock, state="absent", drain_metric="sglang:num_running_reqs")
    assert result["changed"] is True and result["listed"] is False and result["worker"] is None
    assert result["drain_value"] == 0.0 and result["drained_s"] == pytest.approx(0.2)
    assert result["waited_s"] == pytest.approx(0.1)
    assert result["workers"] == [{"id": "00000000-0000-4000-8000-000000000002", "url": "http://127.0.0.1:8002",
                                  "is_healthy": True}]
    assert diff == {"before": {"listed": True, "id": "00000000-0000-4000-8000-000000000001",
                               "url": "http://127.0.0.1:8001", "is_healthy": True},
                    "after": {"listed": False}}
    # the drain read the engine only once the router had stopped listing it
    order = [p for m, p, b, k, t in fake.calls if m in ("DELETE",) or p == "/metrics"]
    assert order[0].startswith("/workers/") and order[1:] == ["/metrics"] * 3


def test_absent_removes_every_loopback_spelling_of_the_worker(clock):
    fake = FakeRouter(clock, lag=1)
    fake.workers = [fake.entry("http://localhost:8001/"), fake.entry("http://[::1]:8001"),
                    fake.entry("http://127.0.0.1:8002")]
    result, dummy = converge(fake, clock, state="absent", worker_url="http://127.0.0.1:8001", drain_timeout=0)
    assert [w["url"] for w in result["workers"]] == ["http://127.0.0.1:8002"]
    assert [m for m, p in fake.methods()] == ["DELETE", "DELETE"]


def test_absent_when_not_listed_changes_nothing_and_does_not_wait(clock):
    fake = FakeRouter(clock)
    fake.workers = [fake.entry("http://127.0.0.1:8002")]
    result, diff = converge(fake, clock, state="absent", drain_timeout=30)
    assert result["changed"] is False and result["listed"] is False and result["drained_s"] is None
    assert fake.methods() == [] and clock.slept == []
    assert diff == {"before": {"listed": False}, "after": {"listed": False}}


def test_absent_drain_failure_says_the_worker_left_and_what_was_read(clock):
    fake = FakeRouter(clock, lag=1)
    fake.workers = [fake.entry("http://127.0.0.1:8001")]
    fake.metrics[("127.0.0.1", 9100)] = [gauge(4)]
    with pytest.raises(_router.RouterError) as err:
        converge(fake, clock, state="absent", drain_metric="sglang:num_running_reqs",
                 drain_metrics_url="http://127.0.0.1:9100/metrics", drain_timeout=1.0)
    assert err.value.msg == ("worker http://127.0.0.1:8001 left router http://127.0.0.1:30000, but it did not drain: "
                             "sglang:num_running_reqs still read 4 on http://127.0.0.1:9100/metrics 1s after the "
                             "worker left the router")
    assert err.value.result["listed"] is False and err.value.result["drain_value"] == 4.0
    assert err.value.result["changed"] is True


def test_absent_in_check_mode_changes_nothing(clock):
    fake = FakeRouter(clock)
    fake.workers = [fake.entry("http://127.0.0.1:8001")]
    result, diff = converge(fake, clock, check_mode=True, state="absent", drain_timeout=30)
    assert result["changed"] is True and result["listed"] is True and result["drained_s"] is None
    assert fake.methods() == [] and clock.slept == []
    assert diff["after"] == {"listed": False}


def test_present_when_listed_healthy_changes_nothing(clock):
    fake = FakeRouter(clock)
    fake.workers = [fake.entry("http://127.0.0.1:8001")]
    result, diff = converge(fake, clock, worker_url="http://localhost:8001/")
    assert result["changed"] is False and result["worker"] == fake.workers[0] and fake.methods() == []
    assert diff["before"] == diff["after"]


def test_present_adds_and_waits_healthy(clock):
    fake = FakeRouter(clock, lag=2)
    result, diff = converge(fake, clock, api_key="s3cret")
    assert result["changed"] is True and result["listed"] is True and result["worker"]["is_healthy"] is True
    assert diff["before"] == {"listed": False} and diff["after"]["url"] == "http://127.0.0.1:8001"
    assert set(c[3] for c in fake.calls) == {"s3cret"}  # every request to the router carries the key


def test_present_in_check_mode_changes_nothing(clock):
    fake = FakeRouter(clock)
    result, diff = converge(fake, clock, check_mode=True)
    assert result["changed"] is True and result["listed"] is False and fake.methods() == []
    assert diff["after"] == {"listed": True, "url": "http://127.0.0.1:8001", "is_healthy": True}


@pytest.mark.parametrize("workers, listed, healthy", [
    ([("http://127.0.0.1:8001", True)], True, True),
    ([("http://127.0.0.1:8001", False)], True, False),
    ([("http://127.0.0.1:8002", True)], False, False),
    ([], False, False),
])
def test_membership_read_says_what_the_router_lists_and_changes_nothing(clock, workers, listed, healthy):
    fake = FakeRouter(clock)
    fake.workers = [fake.entry(url, healthy=up) for url, up in workers]
    option = {"url": ["http://127.0.0.1:30000"], "type": "sglang", "worker_url": "http://localhost:8001"}
    membership = _router.Membership(option, "http://127.0.0.1:9", None, request=fake, clock=clock, sleep=clock.sleep)
    assert membership.read() == {"listed": listed, "healthy": healthy, "router_url": "http://127.0.0.1:30000",
                                 "worker_url": "http://localhost:8001"}
    assert fake.methods() == [], "read only"


def test_membership_read_of_no_router_is_none_and_of_a_router_down_an_error(clock):
    assert _router.Membership({"type": "none"}, "http://127.0.0.1:8001", None).read() is None

    def refused(*args, **kw):
        raise OSError(111, "Connection refused")
    down = _router.Membership({"url": ["http://127.0.0.1:30000"]}, "http://127.0.0.1:8001", None, request=refused,
                              clock=clock, sleep=clock.sleep)
    with pytest.raises(_router.RouterError) as err:
        down.read()
    assert "127.0.0.1:30000" in err.value.msg


def test_present_when_listed_unhealthy_removes_and_adds_it_again(clock):
    fake = FakeRouter(clock, lag=1)
    fake.workers = [fake.entry("http://127.0.0.1:8001", healthy=False)]
    result, dummy = converge(fake, clock)
    assert result["changed"] is True and result["worker"]["is_healthy"] is True
    assert [m for m, p in fake.methods()] == ["DELETE", "POST"]


def test_present_failure_keeps_what_is_known(clock):
    fake = FakeRouter(clock, lag=1, down=["http://127.0.0.1:8001"])
    with pytest.raises(_router.RouterError) as err:
        converge(fake, clock)
    assert err.value.result["listed"] is False and err.value.result["changed"] is True
    assert "could not add worker http://127.0.0.1:8001" in err.value.msg


# ---------------------------------------------------------------------------- over real HTTP
class Handler(BaseHTTPRequestHandler):
    """A router behind a path prefix /gw that wants a key; /metrics of an engine on the same server."""

    seen = []

    def _answer(self, status, body, ctype="application/json"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        Handler.seen.append((self.command, self.path, self.headers.get("Authorization"), self.headers.get("Accept")))
        if self.path == "/engine/metrics":
            return self._answer(200, gauge(0, 0), "text/plain; version=0.0.4")
        if self.headers.get("Authorization") != "Bearer k":
            return self._answer(401, "")
        if self.path == "/gw/workers":
            return self._answer(200, json.dumps({"workers": [{"id": "x", "url": "http://localhost:8001",
                                                              "is_healthy": True, "load": 0}],
                                                 "total": 1, "stats": {}}))
        return self._answer(404, "{}")

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    Handler.seen = []
    yield "http://127.0.0.1:%d" % srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_real_http_prefix_key_and_metrics(server):
    result, dummy = _router.converge(params(router_url=server + "/gw/", api_key="k", worker_url="http://127.0.0.1:8001",
                                            drain_metrics_url=server + "/engine/metrics"))
    assert result["changed"] is False and result["worker"]["id"] == "x"
    assert Handler.seen == [("GET", "/gw/workers", "Bearer k", "application/json")]
    out = _router.drained(server + "/engine/metrics", "sglang:num_running_reqs", 2.0)
    assert out["drain_value"] == 0.0
    assert Handler.seen[-1] == ("GET", "/engine/metrics", None, "text/plain")  # the router's key is not sent there


def test_real_http_without_the_key(server):
    with pytest.raises(_router.RouterError) as err:
        _router.Router(server + "/gw").list_workers()
    assert "answered 401 Unauthorized to GET /workers: it runs with --api-key" in err.value.msg


def test_absent_keeps_the_last_healthy_workers_and_changes_nothing(clock):
    fake = FakeRouter(clock, lag=1)
    fake.workers = [fake.entry("http://127.0.0.1:8001"), fake.entry("http://127.0.0.1:8002"),
                    fake.entry("http://127.0.0.1:8003", healthy=False)]
    with pytest.raises(_router.RouterError) as err:
        converge(fake, clock, state="absent", keep_healthy=2, drain_timeout=0)
    assert err.value.msg == ("taking worker http://127.0.0.1:8001 out of router http://127.0.0.1:30000 would leave 1 "
                             "healthy worker(s) there (http://127.0.0.1:8002), fewer than keep_healthy 2: it stays "
                             "in, and nothing was stopped")
    assert err.value.result["listed"] is True and fake.methods() == []
    result, dummy = converge(fake, clock, state="absent", keep_healthy=1, drain_timeout=0)
    assert result["changed"] is True and [m for m, p in fake.methods()] == ["DELETE"]


def test_router_type_none_drains_without_asking_a_router(clock):
    fake = FakeRouter(clock)
    fake.metrics[("127.0.0.1", 8001)] = [gauge(1), gauge(0)]
    result, dummy = converge(fake, clock, state="absent", router_type="none", router_url=None,
                             drain_metric="sglang:num_running_reqs")
    assert result["changed"] is False and result["drain_value"] == 0.0 and result["drained_s"] == pytest.approx(0.1)
    assert [p for m, p, b, k, t in fake.calls] == ["/metrics", "/metrics"]
    result, dummy = converge(fake, clock, state="present", router_type="none", router_url=None)
    assert result["changed"] is False and len(fake.calls) == 2


def test_router_url_is_required_unless_router_type_none():
    assert _router.url_problems(params(router_url=None))[0].startswith("router_url is required with router_type sglang")
    assert _router.url_problems(params(router_url=None, router_type="none")) == []


# ---- a command router: the remove and add hooks run by the instance's unit (inference_server's router option)
def hook(log, name, code=0, sleep_s=0.0, say=""):
    """The argv of a real process that appends NAME to LOG, prints SAY, sleeps, and exits with CODE."""
    script = ("import sys, time; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n'); print(sys.argv[3]); "
              "time.sleep(float(sys.argv[4])); sys.exit(int(sys.argv[5]))")
    return [sys.executable, "-c", script, str(log), name, say or "-", str(sleep_s), str(code)]


def command_router(log, drain_timeout=0.0, **hooks):
    option = {"type": "command", "remove": hook(log, "remove"), "add": hook(log, "add"),
              "drain_timeout": drain_timeout, "timeout": 5.0}
    option.update(hooks)
    return _router.Membership(option, "http://127.0.0.1:9", None)


def test_a_command_router_s_leave_runs_its_remove_hook_then_drains_and_its_join_runs_the_add_hook(tmp_path):
    log = tmp_path / "lb.log"
    removed = []
    membership = command_router(log)
    assert not membership.lists and membership.read() is None and membership.problems() == []
    left = membership.leave(on_removed=lambda: removed.append(log.read_text().split()))
    assert removed == [["remove"]], "on_removed: after the remove hook, before the drain"
    assert left["changed"] is True and left["router_type"] == "command" and left["listed"] is None
    assert left["hook"] == "remove" and left["hook_s"] >= 0 and "drain_timeout of 0s" in left["drain"]
    joined = membership.join()
    assert joined["hook"] == "add" and joined["listed"] is None and joined["changed"] is True
    assert log.read_text().split() == ["remove", "add"]
    assert _router.step_entry("leave", left, None)["hook_s"] == left["hook_s"]


def test_a_remove_hook_that_fails_runs_the_add_hook_and_says_both(tmp_path):
    log = tmp_path / "lb.log"
    removed = []
    membership = command_router(log, remove=hook(log, "remove", code=3, say="backend r0 not found"))
    with pytest.raises(_router.RouterError) as err:
        membership.leave(on_removed=lambda: removed.append(True))
    assert "remove hook for http://127.0.0.1:9" in err.value.msg and "exited 3: backend r0 not found" in err.value.msg
    assert err.value.msg.endswith("; the add hook ran to put it back")
    assert err.value.result["listed"] is None and removed == []
    assert log.read_text().split() == ["remove", "add"]


def test_a_hook_that_outlives_its_timeout_is_killed_and_one_that_cannot_run_is_said(tmp_path):
    log = tmp_path / "lb.log"
    option = {"type": "command", "remove": hook(log, "remove"), "add": hook(log, "add", sleep_s=30), "timeout": 0.5}
    with pytest.raises(_router.RouterError, match=r"the router's add hook .* did not end within 0.5s: it was killed"):
        _router.Membership(option, "http://127.0.0.1:9", None).join()
    missing = dict(option, add=[str(tmp_path / "no-such-program")])
    with pytest.raises(_router.RouterError, match=r"could not be run: .*No such file"):
        _router.Membership(missing, "http://127.0.0.1:9", None).join()


@pytest.mark.parametrize("option, problem", [
    ({"type": "command", "add": ["lb", "add"]}, "type command needs remove: the argv of the hook that takes the instance out"),
    ({"type": "command", "remove": ["lb", "rm"], "add": []}, "type command needs add: the argv of the hook that puts it back"),
    ({"type": "command", "remove": ["lb", ""], "add": ["lb"]}, "a list of non-empty strings"),
    ({"type": "sglang", "url": ["http://127.0.0.1:30000"], "add": ["lb"]}, "add is a hook of type command only (type is sglang)"),
], ids=["no-remove", "empty-add", "empty-argument", "hook-without-command"])
def test_a_command_router_needs_both_hooks_and_no_url(option, problem):
    found = _router.Membership(option, "http://127.0.0.1:9", None).problems()
    assert len(found) == 1 and problem in found[0], found
