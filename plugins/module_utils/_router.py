# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Take one engine instance out of a router and put it back, and wait until it is drained. Standard library only.

The router is sglang-router 0.3.2 (PyPI; the Rust gateway of sgl-project, whose history continues in
lightseekorg/smg: the release commit "[smg] release 0.3.2 (#17168)", c7f9bf9f563c). The shapes used here, each
read in that commit and seen on the real router (tests/integration/test_router_worker.py):

- ``GET /workers`` -> ``{"workers": [{"id", "url", "is_healthy", "load", "model_id", ...}], "total", "stats"}``
  (src/core/worker_service.rs ListWorkersResult, WorkerInfo in src/protocols/worker_spec.rs). A worker's
  ``url`` is the string it was added with (the registry's url_to_id map, src/core/worker_registry.rs, is keyed
  by it as given: no trailing-slash or host normalisation); ``load`` is the router's own count, which stays 0
  under round_robin, so a drain is read from the engine instead (drained()).
- ``DELETE /workers/{id}`` -> 202 ``{"status": "accepted", "worker_id", "message"}``; 404
  ``{"error", "code": "WORKER_NOT_FOUND"}`` for an unknown id, 400 for one that is not a UUID. The removal
  runs in the background (a RemoveWorker job): poll GET /workers until the id is gone. Requests already
  streaming from the worker go on to their end; only new ones stop going there.
- ``POST /workers {"url": URL}`` -> 202 ``{"status": "accepted", "worker_id", "url", "location", "message"}``;
  an AddWorker job then checks the worker's ``/health`` (for up to the router's --worker-startup-timeout-secs),
  asks ``/server_info`` (``/get_server_info``), ``/model_info`` (``/get_model_info``), none of them required,
  registers it and marks it healthy (src/core/steps/worker/local/*, shared/activate.rs).
- ``GET /workers/{id}`` of a worker still being added -> its ``job_status``: ``{"job_type": "AddWorker",
  "status": "processing" | "failed", "message"}``; a failed add is reported at once with the router's message.
- The worker routes take ``Authorization: Bearer KEY`` when the router runs with --api-key (src/middleware.rs
  auth_middleware, applied to the worker routes in src/server.rs): 401 without it.

Worker URLs are compared as the router cannot: scheme and host in lower case, the default port made explicit
(80, 443), trailing slashes dropped, so ``http://H:8000/`` is ``http://h:8000``. A URL listed exactly so is the
match; failing that, one that differs only in spelling the loopback host (``localhost``, ``127.0.0.0/8``,
``::1``: each the router's own host) matches too. No name is resolved through DNS: what a name means on the
router's host is not knowable from here.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import time

from urllib.parse import urlsplit

from ansible_collections.inferops.serving.plugins.module_utils import _http, _metrics

ROUTER_TYPES = ("sglang", "none")  # none: no router API (a load balancer driven by hooks): the drain alone
# The engines' in-flight gauges (docs: reference engines.md, "Replicas, routers and draining"): SGLang's with
# --enable-metrics (srt/observability/metrics_collector.py, one series per scheduler rank), vLLM's per engine.
DRAIN_METRICS = {"sglang": "sglang:num_running_reqs", "vllm": "vllm:num_requests_running"}
POLL = 0.1          # seconds between two reads of the router's listing or the engine's /metrics
REQUEST_MAX = 10.0  # seconds one request may take at most (less when the wait's deadline is nearer)
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")

ARGUMENT_SPEC = dict(
    router_url=dict(type="str"),
    router_type=dict(type="str", default="sglang", choices=list(ROUTER_TYPES)),
    worker_url=dict(type="str", required=True),
    state=dict(type="str", default="present", choices=["present", "absent"]),
    timeout=dict(type="float", default=60.0),
    drain_metric=dict(type="str"),
    drain_metrics_url=dict(type="str"),
    drain_timeout=dict(type="float", default=60.0),
    keep_healthy=dict(type="int", default=0),
    api_key=dict(type="str", no_log=True),
)


class RouterError(Exception):
    """The router (or the engine's /metrics) did not do or show what was asked; ``result`` carries what is known."""

    def __init__(self, msg, result=None):
        super(RouterError, self).__init__(msg)
        self.msg = msg
        self.result = result or {}


# ---------------------------------------------------------------------------- URLs
class Url(object):
    """An http(s) URL, split: scheme, host (lower case, no brackets), port (explicit), path (no trailing '/')."""

    def __init__(self, text, name="url", query=False):
        self.text = text
        if not isinstance(text, str) or not text.strip():
            raise ValueError("%s must be an http:// or https:// URL, got %r" % (name, text))
        try:
            parts = urlsplit(text.strip())
            port = parts.port
        except ValueError as exc:
            raise ValueError("%s must be an http:// or https:// URL with a port from 1 to 65535, got %r (%s)"
                             % (name, text, exc))
        scheme = (parts.scheme or "").lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("%s must be an http:// or https:// URL with a host (http://HOST:PORT), got %r"
                             % (name, text))
        if parts.username is not None or parts.password is not None:
            raise ValueError("%s must not carry a user or password (give api_key for the router), got a URL with one"
                             % name)
        if parts.fragment or (parts.query and not query):
            raise ValueError("%s must be scheme://host[:port][/path] with no %s, got %r"
                             % (name, "fragment" if parts.fragment else "query", text))
        if port == 0:
            raise ValueError("%s must have a port from 1 to 65535, got %r" % (name, text))
        self.scheme = scheme
        self.host = parts.hostname.lower()
        self.port = port or (443 if scheme == "https" else 80)
        self.path = parts.path.rstrip("/")
        self.query = parts.query
        netloc = parts.netloc.lower()
        self.given = "%s://%s%s" % (scheme, netloc, self.path)  # as the user wrote it, tidied: what is sent

    @property
    def https(self):
        return self.scheme == "https"

    @property
    def canonical(self):
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s://%s:%d%s" % (self.scheme, host, self.port, self.path)

    @property
    def loopback_key(self):
        """The canonical form with any loopback spelling of the host as one word."""
        host = "[%s]" % self.host if ":" in self.host else self.host
        if is_loopback(self.host):
            host = "LOOPBACK"
        return "%s://%s:%d%s" % (self.scheme, host, self.port, self.path)

    def target(self, path):
        """The request target of ``path`` under this URL's own path (a router behind a prefix)."""
        out = (self.path + path) or "/"
        if self.query:
            out += "?" + self.query
        return out


def is_loopback(host):
    host = host.rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_problems(p):
    """Messages for bad URLs and numbers among the module's parameters (empty when all are good)."""
    problems = []
    if p.get("router_type", "sglang") != "none" and not p.get("router_url"):
        problems.append("router_url is required with router_type %s (the router's base URL, such as "
                        "http://10.0.0.5:30000); router_type none drains without a router" % p.get("router_type"))
    for key, query in (("router_url", False), ("worker_url", False), ("drain_metrics_url", True)):
        if key in ("router_url", "drain_metrics_url") and p.get(key) is None:
            continue
        try:
            Url(p.get(key), key, query=query)
        except ValueError as exc:
            problems.append(str(exc))
    if p.get("timeout") is None or not p["timeout"] > 0:
        problems.append("timeout must be a positive number of seconds (how long the router may take to list or "
                        "unlist the worker), got %s" % p.get("timeout"))
    if p.get("drain_timeout") is None or not p["drain_timeout"] >= 0:
        problems.append("drain_timeout must be 0 or more seconds, got %s" % p.get("drain_timeout"))
    metric = p.get("drain_metric")
    if metric and not _METRIC_NAME.match(metric):
        problems.append("drain_metric must be a Prometheus metric name such as %s, got %r"
                        % (" or ".join(sorted(DRAIN_METRICS.values())), metric))
    return problems


# ---------------------------------------------------------------------------- the router
def _body_text(text, limit=300):
    text = (text or "").strip().replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def summary(workers):
    """The listing as the module returns it: id, url and health of each worker."""
    return [{"id": w.get("id"), "url": w.get("url"), "is_healthy": w.get("is_healthy")} for w in workers]


def _seen(workers):
    if not workers:
        return "no workers"
    return ", ".join("%s (%s)" % (w.get("url"), "healthy" if w.get("is_healthy") else "unhealthy") for w in workers)


class Router(object):
    """The worker API of one router. ``request`` is _http.request's signature (injectable, as are clock and sleep)."""

    def __init__(self, url, api_key=None, request=None, clock=time.monotonic, sleep=time.sleep, poll=POLL):
        self.url = url if isinstance(url, Url) else Url(url, "router_url")
        self.api_key = api_key
        self.request = request or _http.request
        self.clock = clock
        self.sleep = sleep
        self.poll = poll

    @property
    def name(self):
        return self.url.given

    def _call(self, method, path, body=None, deadline=None):
        """(status, parsed JSON or None, text). Raises RouterError when the router cannot be reached."""
        timeout = REQUEST_MAX
        if deadline is not None:
            timeout = min(REQUEST_MAX, max(0.2, deadline - self.clock()))
        try:
            status, text = self.request(self.url.host, self.url.port, method, self.url.target(path), body,
                                        self.api_key, timeout=timeout, https=self.url.https)
        except (OSError, http.client.HTTPException) as exc:
            raise RouterError("router %s: %s %s failed: %s" % (self.name, method, path, exc or type(exc).__name__))
        if status == 401:
            raise RouterError("router %s answered 401 Unauthorized to %s %s: %s" % (
                self.name, method, path, "api_key is not the key it was started with (--api-key)" if self.api_key
                else "it runs with --api-key; give that key as api_key"))
        try:
            data = json.loads(text) if text else None
        except ValueError:
            data = None
        return status, data, text

    def list_workers(self, deadline=None):
        status, data, text = self._call("GET", "/workers", deadline=deadline)
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get("workers"), list):
            raise RouterError("router %s: GET /workers answered %d, not the listing {\"workers\": [...]} of "
                              "sglang-router 0.3: %s" % (self.name, status, _body_text(text)))
        return [w for w in data["workers"] if isinstance(w, dict)]

    def find(self, worker_url, workers):
        """The entries of ``workers`` that are this worker: those listed under the same canonical URL, or, when
        none is, those whose URL differs only in how it spells the loopback host."""
        want = worker_url if isinstance(worker_url, Url) else Url(worker_url, "worker_url")
        exact, alias = [], []
        for entry in workers:
            try:
                listed = Url(str(entry.get("url")), "listed url")
            except ValueError:
                continue
            if listed.canonical == want.canonical:
                exact.append(entry)
            elif listed.loopback_key == want.loopback_key:
                alias.append(entry)
        return exact or alias

    def remove(self, worker_url, entries, timeout):
        """DELETE each entry (this worker as listed), then wait until none is listed. Returns (listing, seconds)."""
        start = self.clock()
        deadline = start + timeout
        for entry in entries:
            status, dummy, text = self._call("DELETE", "/workers/%s" % entry.get("id"), deadline=deadline)
            if status == 404:
                continue  # gone already (another run removed it between our listing and now)
            if not 200 <= status < 300:
                raise RouterError("router %s: DELETE /workers/%s (worker %s) answered %d: %s"
                                  % (self.name, entry.get("id"), entry.get("url"), status, _body_text(text)))
        ids = set(entry.get("id") for entry in entries)
        while True:
            workers = self.list_workers(deadline)
            left = [w for w in workers if w.get("id") in ids or self.find(worker_url, [w])]
            if not left:
                return workers, self.clock() - start
            if self.clock() >= deadline:
                raise RouterError("router %s still lists worker %s %gs after it accepted its removal; it lists %s"
                                  % (self.name, _given(worker_url), timeout, _seen(workers)),
                                  {"workers": summary(workers), "listed": True})
            self.sleep(self.poll)

    def add(self, worker_url, timeout):
        """POST the worker, then wait until it is listed and healthy. Returns (its entry, listing, seconds)."""
        want = worker_url if isinstance(worker_url, Url) else Url(worker_url, "worker_url")
        start = self.clock()
        deadline = start + timeout
        status, data, text = self._call("POST", "/workers", {"url": want.given}, deadline=deadline)
        if not 200 <= status < 300:
            raise RouterError("router %s: POST /workers {\"url\": %s} answered %d: %s"
                              % (self.name, want.given, status, _body_text(text)))
        worker_id = data.get("worker_id") if isinstance(data, dict) else None
        while True:
            workers = self.list_workers(deadline)
            found = self.find(want, workers)
            healthy = [w for w in found if w.get("is_healthy")]
            if healthy:
                return healthy[0], workers, self.clock() - start
            if not found and worker_id:
                job = self.job_status(worker_id, deadline)
                if job and job.get("status") == "failed":
                    raise RouterError("router %s could not add worker %s: %s"
                                      % (self.name, want.given, job.get("message") or "its job failed"),
                                      {"workers": summary(workers), "listed": False})
            if self.clock() >= deadline:
                what = "lists it unhealthy" if found else "does not list it"
                raise RouterError("router %s accepted worker %s but %s %gs later; it lists %s"
                                  % (self.name, want.given, what, timeout, _seen(workers)),
                                  {"workers": summary(workers), "listed": bool(found)})
            self.sleep(self.poll)

    def job_status(self, worker_id, deadline=None):
        """The router's job_status of a worker being added (None when it has none or the route is unknown)."""
        status, data, dummy = self._call("GET", "/workers/%s" % worker_id, deadline=deadline)
        if status == 200 and isinstance(data, dict) and isinstance(data.get("job_status"), dict):
            return data["job_status"]
        return None


def _given(url):
    return url.given if isinstance(url, Url) else url


# ---------------------------------------------------------------------------- the drain
def read_gauge(url, metric, request=None, timeout=REQUEST_MAX):
    """(value or None, why): ``metric`` summed over its series on the engine's /metrics. A metric declared
    (# TYPE) with no series yet is 0 (prometheus_client prints a labelled gauge's series once one is set);
    one not there at all is None, with why."""
    request = request or _http.request
    try:
        status, text = request(url.host, url.port, "GET", url.target(""), None, None, timeout=timeout,
                               https=url.https, accept="text/plain")
    except (OSError, http.client.HTTPException) as exc:
        return None, "GET %s failed: %s" % (url.given, exc or type(exc).__name__)
    if status != 200:
        return None, "GET %s answered %d: %s" % (url.given, status, _body_text(text, 200))
    values = _metrics.parse_prometheus(text)
    if metric in values:
        return values[metric], None
    if re.search(r"^# TYPE %s " % re.escape(metric), text, re.M):
        return 0.0, None
    return None, ("%s has no %s (SGLang exports it with --enable-metrics; vLLM's is vllm:num_requests_running)"
                  % (url.given, metric))


def drained(metrics_url, metric, timeout, request=None, clock=time.monotonic, sleep=time.sleep, poll=POLL):
    """Wait until the engine has no request in flight: its gauge ``metric``, summed over its series, reads 0 on
    ``metrics_url`` (every series 0: the gauges never go below). Returns {"drained_s", "drain_value"}: how long
    it took and the last value read. Raises RouterError at ``timeout`` naming the last value or why none was
    read. Without a metric (an engine with no in-flight gauge) it waits ``timeout`` seconds, the only bound
    there is, and returns drain_value None."""
    start = clock()
    if not metric:
        if timeout > 0:
            sleep(timeout)
        return {"drained_s": round(clock() - start, 3), "drain_value": None}
    url = metrics_url if isinstance(metrics_url, Url) else Url(metrics_url, "drain_metrics_url", query=True)
    deadline = start + timeout
    value, why = None, None
    while True:
        value, why = read_gauge(url, metric, request, timeout=min(REQUEST_MAX, max(0.2, deadline - clock())))
        if value is not None and value == 0:
            return {"drained_s": round(clock() - start, 3), "drain_value": 0.0}
        if clock() >= deadline:
            if value is not None:
                msg = "%s still read %g on %s %gs after the worker left the router" % (metric, value, url.given, timeout)
            else:
                msg = "no reading of %s within %gs: %s" % (metric, timeout, why)
            raise RouterError(msg, {"drained_s": round(clock() - start, 3), "drain_value": value})
        sleep(poll)


# ---------------------------------------------------------------------------- the module's run
def _diff_view(entries):
    if not entries:
        return {"listed": False}
    entry = entries[0]
    return {"listed": True, "id": entry.get("id"), "url": entry.get("url"), "is_healthy": entry.get("is_healthy")}


def metrics_url_of(p):
    return p.get("drain_metrics_url") or Url(p["worker_url"], "worker_url").given + "/metrics"


def _drain_only(p, worker, request, clock, sleep, poll):
    """router_type none: no router to ask (a load balancer that hooks drive). state absent waits until the engine
    is drained, as after a removal; present has nothing to do. A wait changes nothing."""
    result = {"changed": False, "router_url": None, "worker_url": worker.given, "drained_s": None,
              "drain_value": None, "waited_s": 0.0, "worker": None, "listed": None, "workers": []}
    if p["state"] == "absent":
        try:
            result.update(drained(metrics_url_of(p), p.get("drain_metric"), p["drain_timeout"], request=request,
                                  clock=clock, sleep=sleep, poll=poll))
        except RouterError as exc:
            exc.msg = "worker %s did not drain: %s" % (worker.given, exc.msg)
            exc.result = dict(result, **exc.result)
            raise
    return result, {"before": {}, "after": {}}


def converge(p, check_mode=False, request=None, clock=time.monotonic, sleep=time.sleep, poll=POLL):
    """One run of router_worker: (result, diff). Raises RouterError (its result the partial one) on failure."""
    worker = Url(p["worker_url"], "worker_url")
    if p.get("router_type") == "none":
        return _drain_only(p, worker, request, clock, sleep, poll)
    router = Router(p["router_url"], p.get("api_key"), request=request, clock=clock, sleep=sleep, poll=poll)
    workers = router.list_workers()
    before = router.find(worker, workers)
    result = {"changed": False, "router_url": router.name, "worker_url": worker.given, "drained_s": None,
              "drain_value": None, "waited_s": 0.0}

    def finish(entries, listing, after_view):
        result["worker"] = entries[0] if entries else None
        result["listed"] = bool(entries)
        result["workers"] = summary(listing)
        return result, {"before": _diff_view(before), "after": after_view}

    if p["state"] == "absent":
        if not before:
            return finish([], workers, _diff_view([]))
        others = [w for w in workers if w not in before and w.get("is_healthy")]
        if len(others) < p.get("keep_healthy", 0):
            raise RouterError("taking worker %s out of router %s would leave %d healthy worker(s) there (%s), fewer "
                              "than keep_healthy %d: it stays in, and nothing was stopped"
                              % (worker.given, router.name, len(others),
                                 ", ".join(w.get("url", "?") for w in others) or "none", p["keep_healthy"]),
                              dict(result, worker=before[0], listed=True, workers=summary(workers)))
        result["changed"] = True
        if check_mode:
            return finish(before, workers, _diff_view([]))
        try:
            workers, waited = router.remove(worker, before, p["timeout"])
        except RouterError as exc:
            exc.result = dict(result, **exc.result)
            raise
        result["waited_s"] = round(waited, 3)
        partial = dict(result, worker=None, listed=False, workers=summary(workers))
        try:
            result.update(drained(metrics_url_of(p), p.get("drain_metric"), p["drain_timeout"], request=request,
                                  clock=clock, sleep=sleep, poll=poll))
        except RouterError as exc:
            exc.msg = "worker %s left router %s, but it did not drain: %s" % (worker.given, router.name, exc.msg)
            exc.result = dict(partial, **exc.result)
            raise
        return finish([], workers, _diff_view([]))

    healthy = [w for w in before if w.get("is_healthy")]
    if healthy:
        return finish(healthy, workers, _diff_view(healthy))
    result["changed"] = True
    wanted = {"listed": True, "url": worker.given, "is_healthy": True}
    if check_mode:
        return finish(before, workers, wanted)
    start = clock()
    try:
        if before:
            # listed, but the router marks it unhealthy: it refuses to add a URL it lists ("Worker ... already
            # exists"), so the entry goes first (it takes no traffic while unhealthy) and the add re-probes it
            router.remove(worker, before, p["timeout"])
        entry, workers, dummy = router.add(worker, max(0.0, p["timeout"] - (clock() - start)))
    except RouterError as exc:
        exc.result = dict(result, **exc.result)
        if before:
            exc.msg += " (it was listed unhealthy before and was removed to be added again)"
        raise
    result["waited_s"] = round(clock() - start, 3)
    return finish([entry], workers, _diff_view([entry]))
