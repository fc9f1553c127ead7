# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A closed-loop streaming load on a loopback server (standard library only), for tests and benchmarks.

`workers` clients, each sending one streaming completion after another until stopped, bounded in time
(`limit_s`) and in count (`max_requests`, over all clients). A request fails unless it answers HTTP 200
and its stream ends with [DONE]; a connection refused or reset, a timeout, a malformed answer
(urllib.error.URLError, http.client.HTTPException, OSError, ValueError) is a failed request, never an
exception of the caller.

Each request is kept as (start, end, ok) on time.monotonic, so that a caller can cut the run into
windows (before, during and after something it timed on the same clock):

    with Load("http://127.0.0.1:30080") as load:
        time.sleep(3)
        began = time.monotonic(); switch(); ended = time.monotonic()
        time.sleep(1)
    during = load.latencies(began, ended)   # the successful requests that started while it ran
    print(percentile(during, 50), percentile(during, 99), load.counts(began, ended))
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

LOOPBACK_NAMES = ("localhost",)


def percentile(values, q):
    """The q-th percentile (0 <= q <= 100) of values by nearest rank, as the p99 of the tests has always
    been read: the element at index int(q/100 * n) of the sorted values (the largest for q = 100); None
    when there are none."""
    if not 0 <= q <= 100:
        raise ValueError("q must be within 0 and 100, not %r" % (q,))
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(q / 100.0 * len(ordered)))]


def loopback(url):
    """Whether url names this host only (127.0.0.0/8, ::1 or localhost)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def finished(text):
    """Whether an OpenAI stream's last data chunk carries a finish_reason. transformers serve (5.24) ends a chat
    stream with that chunk (and its usage) and sends no "data: [DONE]", directly or through smg 1.13.0."""
    chunks = [line[len("data:"):].strip() for line in text.splitlines() if line.startswith("data:")]
    try:
        last = json.loads(chunks[-1]) if chunks else None
    except ValueError:
        return False
    choices = last.get("choices") if isinstance(last, dict) else None
    return bool(choices) and isinstance(choices[0], dict) and bool(choices[0].get("finish_reason"))


class Load(object):
    """A closed loop of streaming completions to url (loopback only): `workers` clients, each sending
    one request after another until the `with` block ends, for at most `limit_s` seconds and at most
    `max_requests` requests in all. A request fails unless it answers 200 and its stream ends with [DONE]
    (chat: or with a chunk that has a finish_reason, see finished()).

    sent, failed and errors (why each failed, in order) are running totals; records() the requests as
    (start, end, ok) on time.monotonic, in the order they ended; latencies() and counts() of a window."""

    def __init__(self, url, workers=4, tokens=24, limit_s=240, max_requests=100000, model="standin",
                 timeout=30, chat=False):
        if not loopback(url):
            raise ValueError("Load sends to this host only (a loopback address), not to %s" % url)
        if workers < 1 or limit_s <= 0 or max_requests < 1:
            raise ValueError("Load needs at least one worker, a positive limit_s and max_requests")
        self.url, self.workers, self.tokens, self.limit_s = url.rstrip("/"), workers, tokens, limit_s
        self.max_requests, self.model, self.timeout = max_requests, model, timeout
        # chat: POST /v1/chat/completions with only the OpenAI fields (a transformers serve behind smg's
        # OpenAI backend: smg 1.13 answers /v1/completions "Completion endpoint not implemented" there, and
        # transformers serve refuses ignore_eos with HTTP 422)
        self.chat = chat
        self.sent = self.failed = 0
        self.errors = []
        self._records = []
        self._started = 0  # requests begun (sent counts those that ended)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = []
        # loopback only: never through a proxy that the environment may name
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self.began = self.ended = None

    def _one(self):
        if self.chat:
            path = "/v1/chat/completions"
            body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": "hi"}],
                               "max_tokens": self.tokens, "stream": True}).encode()
        else:
            path = "/v1/completions"
            body = json.dumps({"model": self.model, "prompt": "hi", "max_tokens": self.tokens, "stream": True,
                               "ignore_eos": True}).encode()
        req = urllib.request.Request(self.url + path, data=body,
                                     headers={"Content-Type": "application/json"})
        start = time.monotonic()
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                text = resp.read().decode("utf-8", "replace")
            ok = resp.status == 200 and ("[DONE]" in text or (self.chat and finished(text)))
            why = None if ok else "status %s, no [DONE]: %r" % (resp.status, text[-200:])
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
            ok, why = False, "%s: %s" % (type(exc).__name__, exc)
        end = time.monotonic()
        with self._lock:
            self.sent += 1
            self._records.append((start, end, ok))
            if not ok:
                self.failed += 1
                self.errors.append(why)

    def _take(self):
        """Claim one request of the max_requests budget; False once it is spent."""
        with self._lock:
            if self._started >= self.max_requests:
                return False
            self._started += 1
            return True

    def _loop(self, deadline):
        while not self._stop.is_set() and time.monotonic() < deadline and self._take():
            self._one()

    def __enter__(self):
        self.began = time.monotonic()
        deadline = self.began + self.limit_s
        for index in range(self.workers):
            thread = threading.Thread(target=self._loop, args=(deadline,), name="load-%d" % index, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout + 30)
        self.ended = time.monotonic()

    def records(self, begin=None, end=None):
        """The requests (start, end, ok) that started within [begin, end) (either bound open when None)."""
        with self._lock:
            found = list(self._records)
        return [r for r in found if (begin is None or r[0] >= begin) and (end is None or r[0] < end)]

    def latencies(self, begin=None, end=None):
        """The latencies (end - start, seconds) of the successful requests that started within [begin, end)."""
        return [stop - start for start, stop, ok in self.records(begin, end) if ok]

    def counts(self, begin=None, end=None):
        """(sent, failed) of the requests that started within [begin, end)."""
        window = self.records(begin, end)
        return len(window), sum(1 for _s, _e, ok in window if not ok)

    def p99(self, begin=None, end=None):
        """The 99th percentile latency of the successful requests (of a window), or None."""
        return percentile(self.latencies(begin, end), 99)
