# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Take one engine instance out of a router and put it back, and wait until it is drained. Standard library only.

One small interface (Router: list_workers, find, remove + wait_gone, add + wait_healthy, in_flight, check_admin)
with an adapter per router type (ROUTER_TYPES): Router itself for sglang-router 0.3.2 (below), SmgRouter for smg
1.13.0 and VllmRouter for vllm-router 0.1.17 (each class names its sources), identify() for auto, and none (no
router API: the drain alone).

The sglang adapter's router is sglang-router 0.3.2 (PyPI; the Rust gateway of sgl-project, whose history continues in
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
import socket
import subprocess
import time
import uuid

from urllib.parse import quote, urlsplit

from ansible_collections.inferops.serving.plugins.module_utils import _http, _metrics, _procs

# The one list of router types: router_worker's router_type choices; the role's check of serving_router.type and
# inference_server's router option also take "command", the argv hooks (ROLE_ROUTER_TYPES).
# sglang: sglang-router 0.3.2; smg: the Shepherd Model Gateway 1.13.0; vllm: vllm-router 0.1.17; none: no router
# API (a load balancer that hooks drive): the drain alone; auto: identified from the router's own answers.
ROUTER_TYPES = ("sglang", "smg", "vllm", "none", "auto")
COMMAND = "command"
ROLE_ROUTER_TYPES = ROUTER_TYPES + (COMMAND,)
# The router types with no list to read: none (the drain alone) and command (a load balancer that argv hooks drive:
# inference_server's router option runs its remove and add hooks inside the instance's unit; router_worker has none)
LISTLESS = ("none", COMMAND)
# The engines' in-flight gauges (docs: reference engines.md, "Replicas, routers and draining"): SGLang's with
# --enable-metrics (srt/observability/metrics_collector.py, one series per scheduler rank), vLLM's per engine.
DRAIN_METRICS = {"sglang": "sglang:num_running_reqs", "vllm": "vllm:num_requests_running"}
POLL = 0.1          # seconds between two reads of the router's listing or the engine's /metrics
REQUEST_MAX = 10.0  # seconds one request may take at most (less when the wait's deadline is nearer)
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
FORBIDDEN = "the key may list but not change workers (admin role required)"

ARGUMENT_SPEC = dict(
    router_url=dict(type="list", elements="str"),
    router_type=dict(type="str", default="sglang", choices=list(ROUTER_TYPES)),
    worker_url=dict(type="str", required=True),
    state=dict(type="str", default="present", choices=["present", "absent"]),
    timeout=dict(type="float", default=60.0),
    drain_metric=dict(type="str"),
    drain_metrics_url=dict(type="str"),
    drain_timeout=dict(type="float", default=60.0),
    keep_healthy=dict(type="int", default=0),
    api_key=dict(type="str", no_log=True),
    engine_state=dict(type="path"),
)


class RouterError(Exception):
    """The router (or the engine's /metrics) did not do or show what was asked; ``result`` carries what is known."""

    def __init__(self, msg, result=None, timed_out=False):
        super(RouterError, self).__init__(msg)
        self.msg = msg
        self.result = result or {}
        self.timed_out = timed_out


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


def router_urls(p):
    """router_url as a list (one URL, or several: routers run in pairs); [] when unset."""
    value = p.get("router_url")
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return list(value)


def url_problems(p):
    """Messages for bad URLs and numbers among the module's parameters (empty when all are good)."""
    problems = []
    urls = router_urls(p)
    if p.get("router_type", "sglang") not in LISTLESS and not urls:
        problems.append("router_url is required with router_type %s (the router's base URL, such as "
                        "http://10.0.0.5:30000, or a list of them); router_type none drains without a router"
                        % p.get("router_type"))
    for url in urls:
        try:
            Url(url, "router_url")
        except ValueError as exc:
            problems.append(str(exc))
    if len(set(urls)) != len(urls):
        problems.append("router_url lists a router twice: %s" % ", ".join(urls))
    for key, query in (("worker_url", False), ("drain_metrics_url", True)):
        if key == "drain_metrics_url" and p.get(key) is None:
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
    if metric:
        problems.extend(metric_problems("drain_metric", metric))
    return problems


def metric_problems(what, metric):
    """[] for a Prometheus metric name, else the one problem, naming `what` holds it."""
    if isinstance(metric, str) and _METRIC_NAME.match(metric):
        return []
    examples = " or ".join(sorted(DRAIN_METRICS.values()))
    return ["%s must be a Prometheus metric name such as %s, got %r" % (what, examples, metric)]


# ---------------------------------------------------------------------------- the router
def _body_text(text, limit=300):
    text = (text or "").strip().replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def summary(workers):
    """The listing as the module returns it: id, url and health of each worker (and smg's status)."""
    out = []
    for w in workers:
        entry = {"id": w.get("id"), "url": w.get("url"), "is_healthy": w.get("is_healthy")}
        if "status" in w:
            entry["status"] = w.get("status")
        out.append(entry)
    return out


def _seen(workers):
    if not workers:
        return "no workers"
    return ", ".join("%s (%s)" % (w.get("url"), w.get("status") or ("healthy" if w.get("is_healthy") else "unhealthy"))
                     for w in workers)


def find_worker(worker_url, workers):
    """The entries of a router's ``workers`` listing that are this worker: those listed under the same canonical
    URL, or, when none is, those whose URL differs only in how it spells the loopback host. The one rule of
    router_worker and of the final check's membership (plugin_utils/_replicas.py)."""
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


def _given(url):
    return url.given if isinstance(url, Url) else url


class Router(object):
    """The worker API of one router: the interface every router type's adapter has, with sglang-router 0.3.2's
    behaviour (see the module's docstring for each shape). ``request`` is _http.request's signature (injectable,
    as are clock and sleep).

    The interface: list_workers(), find(), remove() (send the removal, then wait_gone()), add() (send the add,
    then wait_healthy()), in_flight(entry) (the router's own count of requests in flight to a listed worker, None
    where it keeps none that a drain can use), and check_admin() (whether the key may change workers)."""

    kind = "sglang"
    product = "sglang-router 0.3"

    def __init__(self, url, api_key=None, request=None, clock=time.monotonic, sleep=time.sleep, poll=POLL):
        self.url = url if isinstance(url, Url) else Url(url, "router_url")
        self.api_key = api_key
        self.request = request or _http.request
        self.clock = clock
        self.sleep = sleep
        self.poll = poll
        self.loads = []  # the router's in-flight counts of the worker seen while a removal was under way

    @property
    def name(self):
        return self.url.given

    def _call(self, method, path, body=None, deadline=None, cap=REQUEST_MAX):
        """(status, parsed JSON or None, text). Raises RouterError when the router cannot be reached, or refuses
        the key (401, or 403: a key that may list but not change workers). ``cap`` bounds one request (None: only
        the deadline does)."""
        timeout = cap or REQUEST_MAX
        if deadline is not None:
            left = max(0.2, deadline - self.clock())
            timeout = min(cap, left) if cap else left
        try:
            status, text = self.request(self.url.host, self.url.port, method, self.url.target(path), body,
                                        self.api_key, timeout=timeout, https=self.url.https)
        except (OSError, http.client.HTTPException) as exc:
            raise RouterError("router %s: %s %s failed: %s" % (self.name, method, path, exc or type(exc).__name__),
                              timed_out=isinstance(exc, socket.timeout))
        if status == 401:
            raise RouterError("router %s answered 401 Unauthorized to %s %s: %s" % (
                self.name, method, path, "api_key is not the key it was started with (--api-key)" if self.api_key
                else "it runs with --api-key; give that key as api_key"))
        if status == 403:
            # smg / sglang-router --control-plane-api-keys: a key of role user may read, not change (smg
            # crates/auth/src/middleware.rs, "Returns 403 Forbidden if the user doesn't have admin role")
            raise RouterError("router %s answered 403 Forbidden to %s %s: %s; nothing was changed"
                              % (self.name, method, path, FORBIDDEN))
        try:
            data = json.loads(text) if text else None
        except ValueError:
            data = None
        return status, data, text

    # -- reading
    def list_workers(self, deadline=None):
        status, data, text = self._call("GET", "/workers", deadline=deadline)
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get("workers"), list):
            raise RouterError("router %s: GET /workers answered %d, not the listing {\"workers\": [...]} of "
                              "%s: %s" % (self.name, status, self.product, _body_text(text)))
        return [w for w in data["workers"] if isinstance(w, dict)]

    def find(self, worker_url, workers):
        return find_worker(worker_url, workers)

    def healthy(self, entry):
        """Listed and taking requests."""
        return bool(entry.get("is_healthy"))

    def in_flight(self, entry):
        """sglang-router 0.3.2 keeps ``load`` 0 under round_robin (streams are not counted): no reading."""
        return None

    def check_admin(self, deadline=None):
        """Whether the key may change workers, changing nothing: a DELETE of a random UUID is answered 404 (no such
        worker) for an admin key, 403 for a user-role key (_call raises). Other answers say nothing: let the
        real change tell. Without a key there is no role to ask about (a router that wants one answered 401)."""
        if self.api_key:
            self._call("DELETE", "/workers/%s" % uuid.uuid4(), deadline=deadline)

    # -- changing
    def _send_remove(self, entry, deadline):
        status, dummy, text = self._call("DELETE", "/workers/%s" % entry.get("id"), deadline=deadline)
        if status == 404:
            return  # gone already (another run removed it between our listing and now)
        if not 200 <= status < 300:
            raise RouterError("router %s: DELETE /workers/%s (worker %s) answered %d: %s"
                              % (self.name, entry.get("id"), entry.get("url"), status, _body_text(text)))

    def remove(self, worker_url, entries, timeout):
        """Remove each entry (this worker as listed), then wait until none is listed. Returns (listing, seconds)."""
        start = self.clock()
        deadline = start + timeout
        self.loads = []
        for entry in entries:
            self._send_remove(entry, deadline)
        return self.wait_gone(worker_url, entries, deadline, timeout), self.clock() - start

    def wait_gone(self, worker_url, entries, deadline, timeout):
        """Poll the listing until none of ``entries`` (by id where the router has ids) nor any entry of this URL
        is listed. Records the router's in-flight count of the entries still listed (in_flight) in self.loads."""
        ids = set(entry.get("id") for entry in entries if entry.get("id"))
        while True:
            workers = self.list_workers(deadline)
            left = [w for w in workers if (w.get("id") in ids) or self.find(worker_url, [w])]
            if left:
                counts = [self.in_flight(w) for w in left]
                if all(c is not None for c in counts):
                    self.loads.append(sum(counts))
            if not left:
                return workers
            if self.clock() >= deadline:
                raise RouterError("router %s still lists worker %s %gs after it accepted its removal; it lists %s"
                                  % (self.name, _given(worker_url), timeout, _seen(workers)),
                                  {"workers": summary(workers), "listed": True})
            self.sleep(self.poll)

    def _send_add(self, want, deadline):
        """POST the worker; returns what wait_healthy needs to follow the add (the router's job id, or None)."""
        status, data, text = self._call("POST", "/workers", {"url": want.given}, deadline=deadline)
        if not 200 <= status < 300:
            raise RouterError("router %s: POST /workers {\"url\": %s} answered %d: %s"
                              % (self.name, want.given, status, _body_text(text)))
        return data.get("worker_id") if isinstance(data, dict) else None

    def add(self, worker_url, timeout):
        """Add the worker, then wait until it is listed and healthy. Returns (its entry, listing, seconds)."""
        want = worker_url if isinstance(worker_url, Url) else Url(worker_url, "worker_url")
        start = self.clock()
        deadline = start + timeout
        worker_id = self._send_add(want, deadline)
        entry, workers = self.wait_healthy(want, worker_id, deadline, timeout)
        return entry, workers, self.clock() - start

    def wait_healthy(self, want, worker_id, deadline, timeout):
        while True:
            workers = self.list_workers(deadline)
            found = self.find(want, workers)
            healthy = [w for w in found if self.healthy(w)]
            if healthy:
                return healthy[0], workers
            if not found and worker_id:
                self.check_job(want, worker_id, workers, deadline)
            if self.clock() >= deadline:
                what = "lists it %s" % (found[0].get("status") or "unhealthy") if found else "does not list it"
                raise RouterError("router %s accepted worker %s but %s %gs later; it lists %s"
                                  % (self.name, want.given, what, timeout, _seen(workers)),
                                  {"workers": summary(workers), "listed": bool(found)})
            self.sleep(self.poll)

    def check_job(self, want, worker_id, workers, deadline):
        """sglang-router 0.3.2 reports a failed add at once as its job's status "failed" with its message."""
        job = self.job_status(worker_id, deadline)
        if job and job.get("status") == "failed":
            raise RouterError("router %s could not add worker %s: %s"
                              % (self.name, want.given, job.get("message") or "its job failed"),
                              {"workers": summary(workers), "listed": False})

    def job_status(self, worker_id, deadline=None):
        """The router's job_status of a worker being added (None when it has none or the route is unknown)."""
        status, data, dummy = self._call("GET", "/workers/%s" % worker_id, deadline=deadline)
        if status == 200 and isinstance(data, dict) and isinstance(data.get("job_status"), dict):
            return data["job_status"]
        return None


SglangRouter = Router


class SmgRouter(Router):
    """The Shepherd Model Gateway (smg 1.13.0 on PyPI, the successor of sglang-router; source read in
    lightseekorg/smg at 73da68ca9 (after v1.9.0: the 1.13.0 tag is not in the mirror), each shape seen on the
    real 1.13.0 wheel (tests/integration/test_router_worker.py):

    - ``GET /workers``: sglang-router's listing plus each worker's ``status`` (``pending``, ``ready``,
      ``draining``, ...) and a UUIDv7 ``id``. A worker being added is not listed until it is ready.
    - ``DELETE /workers/{id}`` 202: the worker is listed ``status: draining``, ``is_healthy: false`` for its
      drain_settle_secs (default 5: model_gateway/src/config/types.rs default_drain_settle_secs, with no flag in
      ``smg launch``; workflow/steps/local/drain_workers.rs), then it is gone, even with streams still open. A
      draining worker counts as listed here: the removal is done when it is gone. Its ``load`` (and Prometheus
      ``smg_worker_requests_active{worker=URL}``) counts the requests smg has in flight to it, streams included,
      while it is listed; both go when the worker goes.
    - ``POST /workers`` of a URL it still lists (draining included) is answered 409 ``WORKER_ALREADY_EXISTS``; so an
      add of a URL still listed first waits until it is gone, then adds (one code path; a pending removal then
      can no longer take the re-added worker out).
    - A failed add: ``GET /workers/{id}`` shows its job ``processing`` (status ``pending``) for the router's
      --worker-startup-timeout-secs and a few seconds more, then 404 ``WORKER_NOT_FOUND``; never ``failed``.
      Its reason is only in smg's log ("Failed job: type=AddWorker ..."), so the job's disappearance without a
      listing is the failure.
    - 403 for a control-plane key of role user (crates/auth/src/middleware.rs): it may list, not change.
    """

    kind = "smg"
    product = "smg 1.13"

    def healthy(self, entry):
        return bool(entry.get("is_healthy")) and entry.get("status", "ready") == "ready"

    def in_flight(self, entry):
        load = entry.get("load")
        return load if isinstance(load, (int, float)) and not isinstance(load, bool) else None

    def _send_remove(self, entry, deadline):
        if entry.get("status") == "draining":
            return  # its removal is under way already (an earlier run's): wait until it is gone
        super(SmgRouter, self)._send_remove(entry, deadline)

    def add(self, worker_url, timeout):
        want = worker_url if isinstance(worker_url, Url) else Url(worker_url, "worker_url")
        start = self.clock()
        deadline = start + timeout
        listed = self.find(want, self.list_workers(deadline))
        if listed:
            # still listed (draining after a removal): smg answers 409 to an add now, and its pending removal
            # would take a re-added worker out; wait until it is gone, then add
            self.wait_gone(want, listed, deadline, timeout)
        worker_id = self._send_add(want, deadline)
        entry, workers = self.wait_healthy(want, worker_id, deadline, timeout)
        return entry, workers, self.clock() - start

    def check_job(self, want, worker_id, workers, deadline):
        status, data, text = self._call("GET", "/workers/%s" % worker_id, deadline=deadline)
        if status == 200 and isinstance(data, dict) and isinstance(data.get("job_status"), dict):
            self.last_job = data["job_status"]
            if self.last_job.get("status") == "failed":
                raise RouterError("router %s could not add worker %s: %s" % (
                    self.name, want.given, self.last_job.get("message") or "its AddWorker job failed"),
                    {"workers": summary(workers), "listed": False})
            return
        if status == 404:
            again = self.list_workers(deadline)
            if self.find(want, again):
                return  # listed meanwhile: the job ended in success
            job = getattr(self, "last_job", None) or {}
            raise RouterError(
                "router %s could not add worker %s: its AddWorker job %s ended without listing the worker "
                "(GET /workers/%s: 404 %s; last job status %r). smg logs the reason as \"Failed job: type=AddWorker, "
                "worker=%s, error=...\": its health check of %s/health failed for its --worker-startup-timeout-secs"
                % (self.name, want.given, worker_id, worker_id, _body_text(text, 200), job.get("status"), want.given,
                   want.given), {"workers": summary(again), "listed": False})


class VllmRouter(Router):
    """vllm-router 0.1.17 (PyPI; vllm-project/router, src/server.rs and src/routers/http/router.rs of the stored
    commit 00edc4e9, each shape seen on the real 0.1.17 wheel, tests/integration/test_router_worker.py):

    - ``GET /workers`` -> ``{"workers": [{"url", "model_id", "worker_type", "is_healthy", "load", ...}]}`` with
      no ``id``; ``GET /list_workers`` -> ``{"urls": [...]}``.
    - Workers are addressed by URL: ``DELETE /workers/{url-encoded}`` 200 ``{"success": true, "message": "Worker
      URL removed successfully"}``, synchronous, and also 200 for a URL it does not know; so a removal is
      confirmed by the listing. (``POST /remove_worker?url=`` is the legacy route, the same.)
    - ``POST /workers {"url"}`` is synchronous: 200 ``{"success": true, "message": "Successfully added worker:
      URL"}`` once the worker's /health answered, or 400 ``{"error": "Timeout Ns waiting for worker URL to become
      healthy. Please set ... --worker-startup-timeout-secs ...", "code": "ADD_WORKER_FAILED"}`` after its own
      --worker-startup-timeout-secs (default 600). The module's timeout is the deadline of the whole add, with no
      shorter cap on that one request.
    - ``load`` counts requests only under the cache_aware policy: no in-flight reading here.
    - Its --api-key is the key it sends to the workers; its worker API has no auth of its own.
    """

    kind = "vllm"
    product = "vllm-router 0.1"

    def check_admin(self, deadline=None):
        return None  # its worker API has no roles

    def _send_remove(self, entry, deadline):
        url = str(entry.get("url"))
        status, dummy, text = self._call("DELETE", "/workers/%s" % quote(url, safe=""), deadline=deadline)
        if not 200 <= status < 300:
            raise RouterError("router %s: DELETE /workers/%s (worker %s) answered %d: %s"
                              % (self.name, quote(url, safe=""), url, status, _body_text(text)))

    def _send_add(self, want, deadline):
        try:
            status, data, text = self._call("POST", "/workers", {"url": want.given}, deadline=deadline, cap=None)
        except RouterError as exc:
            if exc.timed_out:
                exc.msg = ("router %s did not answer POST /workers {\"url\": %s} within the module's timeout: "
                           "vllm-router answers an add only once the worker is healthy, or once its own "
                           "--worker-startup-timeout-secs (default 600) ran out" % (self.name, want.given))
            exc.result.setdefault("listed", False)
            raise
        if not 200 <= status < 300:
            message = data.get("error") if isinstance(data, dict) else None
            raise RouterError("router %s could not add worker %s (POST /workers answered %d): %s (vllm-router waits "
                              "for the worker's /health up to its --worker-startup-timeout-secs)"
                              % (self.name, want.given, status, message or _body_text(text)), {"listed": False})
        return None


ADAPTERS = {"sglang": Router, "smg": SmgRouter, "vllm": VllmRouter}


def identify(url, api_key=None, request=None, clock=time.monotonic, sleep=time.sleep, poll=POLL):
    """router_type auto: which router answers at ``url``, from its own answers. Returns (adapter, how).
    - GET /workers must be a listing {"workers": [...]} (all three).
    - An entry with ``status`` is smg's; an entry without ``id`` is vllm-router's.
    - GET /list_workers: vllm-router answers {"urls": [...]}; smg answers 404 with its error object
      {"error": {"code": "unknown_url", ...}}; sglang-router 0.3.2 answers 404 with an empty body (each seen on
      the real routers)."""
    probe = Router(url, api_key, request=request, clock=clock, sleep=sleep, poll=poll)
    tried = []
    workers = probe.list_workers()
    tried.append("GET /workers: a listing of %d worker(s)" % len(workers))
    if any("status" in w for w in workers):
        return SmgRouter(url, api_key, request, clock, sleep, poll), "its GET /workers entries carry status (smg)"
    if workers and not any("id" in w for w in workers):
        return VllmRouter(url, api_key, request, clock, sleep, poll), "its GET /workers entries have no id (vllm-router)"
    status, data, text = probe._call("GET", "/list_workers")
    tried.append("GET /list_workers: %d %s" % (status, _body_text(text, 120) or "(empty)"))
    if status == 200 and isinstance(data, dict) and isinstance(data.get("urls"), list):
        return VllmRouter(url, api_key, request, clock, sleep, poll), "GET /list_workers answered {\"urls\"} (vllm-router)"
    if status == 404 and isinstance(data, dict) and isinstance(data.get("error"), dict) \
            and data["error"].get("code") == "unknown_url":
        return SmgRouter(url, api_key, request, clock, sleep, poll), "its 404 is smg's error object (code unknown_url)"
    if status == 404 and not (text or "").strip() and all("id" in w for w in workers):
        return Router(url, api_key, request, clock, sleep, poll), "GET /list_workers answered 404 with no body (sglang-router)"
    raise RouterError("router %s is none of sglang-router 0.3, smg 1.13, vllm-router 0.1 (router_type auto); tried: %s"
                      % (probe.name, "; ".join(tried)))


def make_router(kind, url, api_key=None, request=None, clock=time.monotonic, sleep=time.sleep, poll=POLL):
    """(adapter, how it was chosen) for router_type ``kind`` (auto: identify)."""
    if kind == "auto":
        return identify(url, api_key, request, clock, sleep, poll)
    return ADAPTERS[kind](url, api_key, request, clock, sleep, poll), "router_type %s" % kind


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


def engine_watch(worker, engine_state=None, clock=time.monotonic):
    """A function that says how the engine ended, or None while it may still run; the drain asks it between
    reads, so that an engine that is gone ends the wait at once.

    With ``engine_state`` (the instance's state file <state_dir>/<name>.json, which inference_server writes with
    the engine's pid and start time), a recorded pid no longer alive is gone, in the words of its watchdog's exit
    record (<state_dir>/<name>.exit.json: "was killed by SIGKILL"). Without it, or while it records no pid, an
    engine whose port refuses connections is gone ("stopped answering")."""
    def from_state():
        if not engine_state:
            return None
        try:
            with open(engine_state) as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or not record.get("pid"):
            return None
        pid = record["pid"]
        if _procs.alive(pid, starttime=record.get("starttime")):
            return False
        exit_path = engine_state[:-len(".json")] + ".exit.json" if engine_state.endswith(".json") else None
        end = None
        if exit_path:
            try:
                with open(exit_path) as handle:
                    end = json.load(handle)
            except (OSError, ValueError):
                end = None
        if isinstance(end, dict) and end.get("pid") == pid:
            when = " at %s" % end["ended_at"] if end.get("ended_at") else ""
            if end.get("signal"):
                return "the engine (pid %s) was killed by %s%s" % (pid, end["signal"], when)
            if end.get("code") is not None:
                return "the engine (pid %s) exited with code %s%s" % (pid, end["code"], when)
        return "the engine (pid %s) is no longer running (no exit record says how it ended)" % pid

    def gone():
        state = from_state()
        if state is False:
            return None
        if state:
            return state
        try:
            with socket.create_connection((worker.host, worker.port), timeout=1.0):
                return None
        except ConnectionRefusedError:
            return "the engine stopped answering (%s:%d refuses connections)" % (worker.host, worker.port)
        except OSError:
            return None  # unreachable or slow is not gone
    return gone


def drained(metrics_url, metric, timeout, request=None, clock=time.monotonic, sleep=time.sleep, poll=POLL,
            gone=None):
    """Wait until the engine has no request in flight: its gauge ``metric``, summed over its series, reads 0 on
    ``metrics_url`` (every series 0: the gauges never go below). Returns {"drained_s", "drain_value", "drain",
    "engine_ended"}: how long it took, the last value read, how the wait ended in words, and how the engine ended
    (None while it runs). Raises RouterError at ``timeout`` naming the last value or why none was read. Without a
    metric (an engine with no in-flight gauge) it waits ``timeout`` seconds, the only bound there is, and says
    so. Either way, ``gone`` (engine_watch) is asked between reads: an engine that is gone ends the wait at once."""
    start = clock()
    deadline = start + timeout

    def ended(why, value=None):
        return {"drained_s": round(clock() - start, 3), "drain_value": value, "engine_ended": why,
                "drain": "%s while draining: the wait ended at once" % why}

    if not metric:
        if gone is None and timeout > 0:
            sleep(timeout)
        while gone is not None and clock() < deadline:
            why = gone()
            if why:
                return ended(why)
            sleep(min(max(poll, 0.25), max(0.0, deadline - clock())))
        return {"drained_s": round(clock() - start, 3), "drain_value": None, "engine_ended": None,
                "drain": "no in-flight reading (no engine gauge, and the router counts none): waited the whole "
                         "drain_timeout of %gs" % timeout}
    url = metrics_url if isinstance(metrics_url, Url) else Url(metrics_url, "drain_metrics_url", query=True)
    value, why = None, None
    while True:
        value, why = read_gauge(url, metric, request, timeout=min(REQUEST_MAX, max(0.2, deadline - clock())))
        if value is not None and value == 0:
            return {"drained_s": round(clock() - start, 3), "drain_value": 0.0, "engine_ended": None,
                    "drain": "%s read 0" % metric}
        if value is None and gone:
            end = gone()
            if end:
                return ended(end)
        if clock() >= deadline:
            if value is not None:
                msg = "%s still read %g on %s %gs after the worker left the router" % (metric, value, url.given, timeout)
            else:
                msg = "no reading of %s within %gs: %s" % (metric, timeout, why)
            raise RouterError(msg, {"drained_s": round(clock() - start, 3), "drain_value": value})
        sleep(poll)


# ---------------------------------------------------------------------------- a command router's hooks
def run_hook(which, argv, timeout, worker, run=subprocess.run, clock=time.monotonic):
    """A command router's hook (its ``which``, add or remove, an argv) for ``worker``: run without a shell, its
    input closed, and waited for up to ``timeout`` seconds. Returns {"hook": which, "hook_s": seconds}; raises
    RouterError when it cannot run, exits other than 0 or outlives the timeout (then it is killed), with the end of
    what it printed."""
    start = clock()
    what = "the router's %s hook for %s (%s)" % (which, worker, argv[0])
    try:
        # not the module's run_command, which has no timeout: a hook that hangs must not hold the instance's lock
        proc = run(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                   stderr=subprocess.STDOUT, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise RouterError("%s did not end within %gs: it was killed" % (what, timeout))
    except OSError as exc:
        raise RouterError("%s could not be run: %s" % (what, exc))
    if proc.returncode != 0:
        output = proc.stdout.decode("utf-8", "replace") if isinstance(proc.stdout, bytes) else (proc.stdout or "")
        raise RouterError("%s exited %d: %s" % (what, proc.returncode, _body_text(output.strip() or "(no output)")))
    return {"hook": which, "hook_s": round(clock() - start, 3)}


# ---------------------------------------------------------------------------- the module's run
def _diff_view(entries):
    if not entries:
        return {"listed": False}
    entry = entries[0]
    return {"listed": True, "id": entry.get("id"), "url": entry.get("url"), "is_healthy": entry.get("is_healthy")}


def metrics_url_of(p):
    return p.get("drain_metrics_url") or Url(p["worker_url"], "worker_url").given + "/metrics"


def _drain(p, worker, routers, request, clock, sleep, poll):
    """The drain after the worker left every router: the engine's gauge where it has one; else, where every router
    counted 0 requests in flight to the worker before it let it go (smg's ``load`` while draining), nothing
    to wait for; else the whole drain_timeout, said so."""
    gone = engine_watch(worker, p.get("engine_state"), clock)
    metric = p.get("drain_metric")
    if not metric and routers and all(r.loads for r in routers):
        if all(r.loads[-1] == 0 for r in routers):
            return {"drained_s": 0.0, "drain_value": 0.0, "engine_ended": None,
                    "drain": "no engine gauge; %s counted 0 requests in flight to the worker before letting it go"
                             % ", ".join("%s (%s)" % (r.name, r.kind) for r in routers)}
    return drained(metrics_url_of(p), metric, p["drain_timeout"], request=request, clock=clock, sleep=sleep,
                   poll=poll, gone=gone)


def _drain_only(p, worker, request, clock, sleep, poll):
    """router_type none: no router to ask (a load balancer that hooks drive). state absent waits until the engine
    is drained, as after a removal; present has nothing to do. A wait changes nothing."""
    result = {"changed": False, "router_url": None, "router_type": "none", "routers": [], "worker_url": worker.given,
              "drained_s": None, "drain_value": None, "drain": None, "engine_ended": None, "waited_s": 0.0,
              "worker": None, "listed": None, "workers": []}
    if p["state"] == "absent":
        try:
            result.update(_drain(p, worker, [], request, clock, sleep, poll))
        except RouterError as exc:
            exc.msg = "worker %s did not drain: %s" % (worker.given, exc.msg)
            exc.result = dict(result, **exc.result)
            raise
    return result, {"before": {}, "after": {}}


def _others_healthy(router, worker, workers):
    mine = router.find(worker, workers)
    return [w for w in workers if w not in mine and router.healthy(w)]


def converge(p, check_mode=False, request=None, clock=time.monotonic, sleep=time.sleep, poll=POLL, on_removed=None):
    """One run of router_worker: (result, diff). Raises RouterError (its result the partial one) on failure.
    on_removed(): called once the worker left every router and before the drain (inference_server's switch
    journals the drain as its own phase).

    Every router in router_url is identified (auto) and read first, and, for a removal, asked whether the key
    may change workers: a router that is down, unknown or refuses the key is an error before anything changes.

    keep_healthy under concurrent removals (issue 34 item 5): the listing is read again after this worker is
    gone from a router, and when it then shows fewer than keep_healthy other healthy workers (another run took
    one out meanwhile), this worker is put back and the run refused, before anything stopped. Two racing
    removals each re-check only after their own removal is done, so the later re-check sees both: at least one
    of them puts its worker back. Removals are not serialised (no lock spans hosts)."""
    worker = Url(p["worker_url"], "worker_url")
    kind = p.get("router_type") or "sglang"
    if kind == "none":
        return _drain_only(p, worker, request, clock, sleep, poll)
    routers, hows, listings = [], [], []
    for url in router_urls(p):
        router, how = make_router(kind, url, p.get("api_key"), request=request, clock=clock, sleep=sleep, poll=poll)
        routers.append(router)
        hows.append(how)
        listings.append(router.list_workers())
    befores = [r.find(worker, w) for r, w in zip(routers, listings)]
    first = routers[0]
    result = {"changed": False, "router_url": first.name, "router_type": first.kind, "worker_url": worker.given,
              "drained_s": None, "drain_value": None, "drain": None, "engine_ended": None, "waited_s": 0.0}

    def per_router(listed_flags):
        return [{"router_url": r.name, "router_type": r.kind, "identified": how, "listed": flag,
                 "workers": summary(w)} for r, how, flag, w in zip(routers, hows, listed_flags, listings)]

    def finish(entries, after_view, listed):
        result["worker"] = entries[0] if entries else None
        result["listed"] = listed
        result["workers"] = summary(listings[0])
        result["routers"] = per_router([listed] * len(routers))
        return result, {"before": _diff_view(befores[0]), "after": after_view}

    if p["state"] == "absent":
        todo = [i for i, before in enumerate(befores) if before]
        if not todo:
            return finish([], _diff_view([]), False)
        for i in todo:
            others = _others_healthy(routers[i], worker, listings[i])
            if len(others) < p.get("keep_healthy", 0):
                raise RouterError("taking worker %s out of router %s would leave %d healthy worker(s) there (%s), "
                                  "fewer than keep_healthy %d: it stays in, and nothing was stopped"
                                  % (worker.given, routers[i].name, len(others),
                                     ", ".join(w.get("url", "?") for w in others) or "none", p["keep_healthy"]),
                                  dict(result, worker=befores[i][0], listed=True, workers=summary(listings[i])))
        for i in todo:
            routers[i].check_admin()
        result["changed"] = True
        if check_mode:
            return finish(befores[0], _diff_view([]), bool(befores[0]))
        done = []
        start = clock()
        try:
            for i in todo:
                listings[i], dummy = routers[i].remove(worker, befores[i], p["timeout"])
                done.append(i)
                others = _others_healthy(routers[i], worker, listings[i])
                if len(others) < p.get("keep_healthy", 0):
                    raise RouterError(
                        "taking worker %s out of router %s left %d healthy worker(s) there (%s), fewer than "
                        "keep_healthy %d (another removal ran at the same time): it was put back, and nothing was "
                        "stopped" % (worker.given, routers[i].name, len(others),
                                     ", ".join(w.get("url", "?") for w in others) or "none", p["keep_healthy"]))
        except RouterError as exc:
            put_back = []
            for i in done:
                try:
                    routers[i].add(worker, p["timeout"])
                    put_back.append(routers[i].name)
                except RouterError as again:
                    exc.msg += "; putting it back into %s failed too: %s" % (routers[i].name, again.msg)
            exc.result = dict(result, **exc.result)
            # listed again when every router it was taken out of has it back
            if done and len(put_back) == len(done):
                exc.result["listed"] = True
            else:
                exc.result["listed"] = bool(exc.result.get("listed", False))
            raise
        result["waited_s"] = round(clock() - start, 3)
        if on_removed is not None:
            on_removed()
        partial = dict(result, worker=None, listed=False, workers=summary(listings[0]))
        try:
            result.update(_drain(p, worker, [routers[i] for i in todo], request, clock, sleep, poll))
        except RouterError as exc:
            exc.msg = "worker %s left router %s, but it did not drain: %s" % (
                worker.given, ", ".join(routers[i].name for i in todo), exc.msg)
            exc.result = dict(partial, **exc.result)
            raise
        return finish([], _diff_view([]), False)

    todo = [i for i, before in enumerate(befores) if not [w for w in before if routers[i].healthy(w)]]
    entries = [w for w in befores[0] if routers[0].healthy(w)]
    if not todo:
        return finish(entries, _diff_view(entries), True)
    result["changed"] = True
    wanted = {"listed": True, "url": worker.given, "is_healthy": True}
    if check_mode:
        return finish(befores[0], wanted, bool(entries))
    start = clock()
    for i in todo:
        router, before = routers[i], befores[i]
        try:
            if before and router.kind != "smg":
                # listed, but the router marks it unhealthy: it refuses to add a URL it lists ("Worker ... already
                # exists"), so the entry goes first (it takes no traffic while unhealthy) and the add re-probes it.
                # smg's own add does this, and waits out a removal under way (a draining entry).
                router.remove(worker, before, max(0.0, p["timeout"] - (clock() - start)))
            entry, listings[i], dummy = router.add(worker, max(0.0, p["timeout"] - (clock() - start)))
        except RouterError as exc:
            exc.result = dict(result, **exc.result)
            if before:
                exc.msg += " (it was listed %s before and was removed to be added again)" % (
                    before[0].get("status") or "unhealthy")
            raise
        if i == 0:
            entries = [entry]
    result["waited_s"] = round(clock() - start, 3)
    return finish(entries, _diff_view(entries), True)


# ---------------------------------------------------------------------------- inference_server's router option
# inference_server's ``router`` option (issue 34): the instance's router, which its switch leaves and joins under
# the instance lock. The same settings as router_worker's (ARGUMENT_SPEC), named as the role's serving_router names
# them; ``type`` takes the router types of ROLE_ROUTER_TYPES: those of ROUTER_TYPES, and ``command``, whose
# ``remove`` and ``add`` hooks (argv) the unit runs where another type's router is asked.
ROUTER_OPTION_SPEC = dict(
    url=dict(type="list", elements="str"),
    type=dict(type="str", default="sglang", choices=list(ROLE_ROUTER_TYPES)),
    remove=dict(type="list", elements="str"),
    add=dict(type="list", elements="str"),
    api_key=dict(type="str", no_log=True),
    worker_url=dict(type="str"),
    timeout=dict(type="float", default=60.0),
    drain_timeout=dict(type="float", default=60.0),
    drain_metric=dict(type="str"),
    drain_metric_by_variant=dict(type="dict"),
    keep_healthy=dict(type="int", default=0),
)


def step_entry(step, result, listed):
    """One router step as inference_server's journal keeps it (a switch's or a stop's): its name, whether
    the worker is listed after it, and how a drain ended (the keys of converge()'s result that say so)."""
    entry = {"step": step, "listed": listed}
    entry.update((key, result[key]) for key in ("changed", "drain", "drained_s", "drain_value", "engine_ended",
                                                "waited_s", "hook_s") if result.get(key) is not None)
    return entry


class Membership(object):
    """An instance's place in its router(s), as inference_server's switch changes it: leave() (the removal with
    keep_healthy and its re-check, then the drain, which an engine that ends cuts short) and join() (the add,
    waiting until listed healthy), each one converge() call, the router_worker core; for a command router, its
    remove hook then the drain, and its add hook (run_hook). ``option``: the router option;
    ``worker_url`` the instance's URL when the option names none; ``engine_state`` its state file; ``serving`` the
    variant it serves, whose gauge in the option's drain_metric_by_variant (a stop's) the drain reads, else the
    option's drain_metric."""

    def __init__(self, option, worker_url, engine_state, serving=None, **kw):
        def given(key):  # the option's value, else its default in ROUTER_OPTION_SPEC (stated there only)
            return ROUTER_OPTION_SPEC[key].get("default") if option.get(key) is None else option[key]
        gauge = (option.get("drain_metric_by_variant") or {}).get(serving) if serving else None
        self.params = {"router_url": option.get("url"), "router_type": given("type"),
                       "api_key": option.get("api_key"), "worker_url": option.get("worker_url") or worker_url,
                       "timeout": given("timeout"), "drain_metric": gauge or option.get("drain_metric"),
                       "drain_metrics_url": None, "keep_healthy": given("keep_healthy"),
                       "drain_timeout": given("drain_timeout"), "engine_state": engine_state,
                       "remove": option.get("remove"), "add": option.get("add")}
        self.option = option
        self.kw = kw  # request, clock, sleep, poll (tests)

    @property
    def drain_timeout(self):
        return self.params["drain_timeout"]

    @property
    def lists(self):
        """Whether the router has a list to read (not type none or command)."""
        return self.params["router_type"] not in LISTLESS

    @property
    def hooks(self):
        return self.params["router_type"] == COMMAND

    @property
    def secrets(self):
        return [self.params["api_key"]] if self.params["api_key"] else []

    def describe(self):
        """What the journal keeps of the router (never its key)."""
        return {"url": router_urls(self.params), "type": self.params["router_type"], "worker_url": self.params["worker_url"]}

    def problems(self):
        found = url_problems(self.params)
        for key, does in (("remove", "takes the instance out of"), ("add", "puts it back into")):
            hook = self.params[key]
            if self.hooks and not (hook and all(isinstance(arg, str) and arg for arg in hook)):
                found.append("type command needs %s: the argv of the hook that %s the load balancer (a list of "
                             "non-empty strings, run without a shell), got %r" % (key, does, hook))
            elif hook and not self.hooks:
                found.append("%s is a hook of type command only (type is %s)" % (key, self.params["router_type"]))
        for variant, gauge in sorted((self.option.get("drain_metric_by_variant") or {}).items()):
            found.extend(metric_problems("drain_metric_by_variant: variant %s's gauge" % variant, gauge))
        return ["router: %s" % problem for problem in found]

    def leave(self, on_removed=None):
        if self.hooks:
            return self._leave_by_hook(on_removed)
        return converge(dict(self.params, state="absent"), on_removed=on_removed, **self.kw)[0]

    def join(self):
        if self.hooks:
            ran = run_hook("add", self.params["add"], self.params["timeout"], self.params["worker_url"])
            return dict(ran, changed=True, router_type=COMMAND, worker_url=self.params["worker_url"], listed=None)
        return converge(dict(self.params, state="present"), **self.kw)[0]

    def _leave_by_hook(self, on_removed):
        """A command router: its remove hook, then the drain as with no router (the engine's gauge, else the whole
        drain_timeout). A remove hook that fails may have taken the instance out all the same: the add hook runs
        to put it back before the error is raised (the switch stops nothing)."""
        p = self.params
        try:
            ran = run_hook("remove", p["remove"], p["timeout"], p["worker_url"])
        except RouterError as exc:
            try:
                run_hook("add", p["add"], p["timeout"], p["worker_url"])
                exc.msg += "; the add hook ran to put it back"
            except RouterError as again:
                exc.msg += "; the add hook, run to put it back, failed too: %s" % again.msg
            exc.result = {"changed": False, "router_type": COMMAND, "worker_url": p["worker_url"], "listed": None}
            raise
        if on_removed is not None:
            on_removed()
        try:
            result = converge(dict(p, state="absent", router_type="none"), **self.kw)[0]
        except RouterError as exc:
            exc.msg = "the remove hook took it out, but " + exc.msg
            exc.result = dict(exc.result or {}, changed=True, router_type=COMMAND, **ran)
            raise
        return dict(result, changed=True, router_type=COMMAND, **ran)

    def read(self):
        """What the router lists of the worker, read and changed nothing (router type none: None, there is no
        list): listed (the first router lists it, healthy or not), healthy (every router lists it healthy),
        router_url and worker_url; the role's router_membership filter says the same from router_worker's
        listing. A router that cannot be read raises RouterError."""
        if not self.lists:
            return None
        result = converge(dict(self.params, state="present"), check_mode=True, **self.kw)[0]
        return {"listed": result.get("worker") is not None, "healthy": not result["changed"],
                "router_url": result.get("router_url"), "worker_url": result.get("worker_url")}
