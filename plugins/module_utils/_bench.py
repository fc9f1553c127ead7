# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The closed-loop load generator behind throughput_bench.

Per level: exactly ``concurrency`` workers, each on its own keep-alive connection; every worker
first sends ``warmup`` requests (excluded), then the level warms up to steady state (below), then all
start together and each sends its next request as soon as its previous one finished, until
``requests`` were sent. A probe task measures the event loop's own scheduling lag, so a saturated
client shows in ``client.loop_lag_ms``.

Warm-up to steady state (``warmup_tolerance``, ``warmup_max_s``; off when ``warmup`` is 0 or
``warmup_max_s`` is None): after the fixed warm-up, the level's workers send windows of
WARMUP_WINDOW_ROUNDS requests each (a window: concurrency x WARMUP_WINDOW_ROUNDS requests, all
workers together, excluded) until the output throughputs of two successive windows agree within
``warmup_tolerance`` (relative to the earlier one), or ``warmup_max_s`` seconds have passed since the
level's warm-up began (no window starts after that; one in flight runs to its end), or a window
completes no request (the measured requests then show why). The decision is warmup_step(), a pure
function of the windows' throughputs and the time, driven by the WarmUp state machine.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys

from ansible_collections.inferops.serving.plugins.module_utils import _bench_args, _metrics, _openai_stream as _stream

CLIENT_NAME = "inferops.serving.throughput_bench"
CLIENT_VERSION = "0.5.0"  # galaxy.yml's version: a module cannot read it on the target (tests/unit/test_version.py)
LAG_PROBE_S = 0.005
LAG_WARN_MS = 5.0
WARMUP_WINDOW_ROUNDS = 2             # requests per worker in one steady-state warm-up window
SCRAPE_TIMEOUT = 10.0                 # seconds one metrics scrape, read and parsed, may take (at most the request timeout)
METRICS_MAX = 16 * 1024 * 1024        # bytes of one metrics scrape (vLLM's /metrics is hundreds of KiB)
PARSE_SLICE = 1024 * 1024             # characters of exposition text parsed at a time

WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from "
         "or one had by word but not what all were we when your can said there use an each which she "
         "do how their if will up other about out many then them these so some her would make like").split()


def build_prompt(input_tokens, index=0):
    """About ``input_tokens`` tokens of common words (one token each in usual BPE vocabularies),
    led by a per-request number so that prefix caches do not serve whole prompts."""
    words = ["%d" % index]
    n = len(WORDS)
    words.extend(WORDS[(index + i) % n] for i in range(max(0, input_tokens - 1)))
    return " ".join(words)


def steady(previous, this, tolerance):
    """Whether two successive warm-up windows agree: both output throughputs (tokens/s) measured and positive
    (a window that completed no request has None), and |this - previous| <= tolerance * previous."""
    if previous is None or this is None or previous <= 0 or this <= 0:
        return False
    return abs(this - previous) <= tolerance * previous


WINDOW, STEADY, OUT_OF_TIME, NOTHING_COMPLETED = "window", "steady", "out_of_time", "nothing_completed"


def warmup_step(windows, tolerance, elapsed_s, max_s):
    """What a level's warm-up does next, from its windows' output throughputs so far (oldest first; None for a
    window that completed no request) and the seconds since the level's warm-up began: STEADY when the last two
    windows agree (steady()), NOTHING_COMPLETED when the last window completed no request, OUT_OF_TIME once
    max_s has passed, else WINDOW (send one more window). Pure: no clock, no I/O."""
    if len(windows) >= 2 and steady(windows[-2], windows[-1], tolerance):
        return STEADY
    if windows and windows[-1] is None:
        return NOTHING_COMPLETED
    if elapsed_s >= max_s:
        return OUT_OF_TIME
    return WINDOW


class WarmUp(object):
    """One level's warm-up to steady state, as a state machine with the time passed in (no clock, no I/O):
    next(now) says whether to send another window (WINDOW) or why the warm-up is over; add(tps) records a
    window's output throughput; result() gives warmup_s, steady and warmup_windows for the level."""

    def __init__(self, tolerance, max_s, began):
        self.tolerance = tolerance
        self.max_s = max_s
        self.began = began
        self.windows = []
        self.state = WINDOW
        self.ended = began

    def next(self, now):
        if self.state == WINDOW:
            self.state = warmup_step(self.windows, self.tolerance, now - self.began, self.max_s)
            self.ended = now
        return self.state

    def add(self, tps):
        if self.state != WINDOW:
            raise ValueError("the warm-up is over (%s): no window to add" % self.state)
        self.windows.append(tps)

    def result(self):
        return {"warmup_s": round(max(0.0, self.ended - self.began), 3), "steady": self.state == STEADY,
                "warmup_end": self.state,
                "warmup_windows": [None if tps is None else round(tps, 2) for tps in self.windows]}


def window_throughput(records, concurrency):
    """A warm-up window's output throughput (tokens/s), defined as a level's (sum of n_out over
    max(t_last) - min(t_send)); None when no request of it completed."""
    agg = _metrics.aggregate(records, concurrency)
    if not agg["completed"]:
        return None
    return agg["output_throughput"]


def _unsteady_text(result):
    repeat = (result.get("labels") or {}).get("repeat")
    where = "c=%d%s" % (result["concurrency"], "" if repeat is None else " (repeat %s)" % repeat)
    if result.get("warmup_end") == NOTHING_COMPLETED:
        return "%s, a warm-up window completed no request" % where
    return "%s, warmup_max_s ran out after %.1f s of warm-up (windows %s tok/s; raise warmup_max_s or " \
        "warmup_tolerance)" % (where, result["warmup_s"], result.get("warmup_windows"))


class LagProbe(object):
    """Sleeps LAG_PROBE_S again and again; the overshoot of each wake-up is the loop's lag."""

    def __init__(self, interval=LAG_PROBE_S):
        self.interval = interval
        self.samples = []
        self._task = None

    async def _run(self):
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(self.interval)
            self.samples.append(max(0.0, loop.time() - t - self.interval))

    def start(self):
        self.samples = []
        self._task = asyncio.ensure_future(self._run())

    async def stop(self):
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        return _metrics.distribution(self.samples, 1000.0, 3)


def identify(target, api_key=None, timeout=5.0):
    """Which engine serves there, from what it answers: SGLang has GET /get_model_info (0.5.9 and 0.5.23
    srt/entrypoints/http_server.py), vLLM GET /version -> {"version": ...} (0.34.0
    entrypoints/serve/instrumentator/basic.py); anything else is a plain OpenAI server ("openai").
    Both questions together take at most ``timeout`` seconds (a question not answered in time: "openai")."""
    deadline = _stream.monotonic() + timeout
    for path, engine, key in (("/get_model_info", "sglang", "model_path"), ("/version", "vllm", "version")):
        left = deadline - _stream.monotonic()
        if left <= 0:
            break
        try:
            status, text = _stream.http_get(target.full(path), api_key, left)
        except _stream.RequestError:
            continue
        if status == 200:
            try:
                if key in json.loads(text):
                    return engine
            except (ValueError, TypeError, RecursionError):
                continue
    return "openai"


def parse_metrics(text, deadline):
    """_metrics.parse_prometheus over slices of whole lines (its sums are per line, so they add up), so that
    the parse holds one slice's lines at a time and stops, returning None, once the deadline has passed."""
    out = {}
    pos, end = 0, len(text)
    while pos < end:
        cut = text.find("\n", pos + PARSE_SLICE)
        cut = end if cut < 0 else cut + 1
        for key, value in _metrics.parse_prometheus(text[pos:cut]).items():
            out[key] = out.get(key, 0.0) + value
        pos = cut
        if pos < end and _stream.monotonic() > deadline:
            return None
    return out


_DEFAULT = _bench_args.defaults()  # throughput_bench's own, for a Bench made without the module


class Bench(object):
    def __init__(self, target, model, api=_DEFAULT["api"], input_tokens=_DEFAULT["input_tokens"],
                 output_tokens=_DEFAULT["output_tokens"], ignore_eos=_DEFAULT["ignore_eos"], api_key=None,
                 timeout=_DEFAULT["timeout"], slo=None, labels=None, metrics_url=None, scrape=None, engine="openai",
                 warmup_tolerance=_DEFAULT["warmup_tolerance"], warmup_max_s=None):
        self.target = target
        # the warm-up to steady state: off with warmup_max_s None (the module always passes its options)
        self.warmup_tolerance = warmup_tolerance
        self.warmup_max_s = warmup_max_s
        self.engine = engine
        self.model = model
        self.api = api
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.ignore_eos = ignore_eos
        self.api_key = api_key
        self.timeout = timeout
        self.slo = slo or None
        self.labels = labels or {}
        self.metrics_url = metrics_url
        self.scrape = scrape or self._scrape
        self.path = _stream.api_path(api)
        self._index = 0
        self.metrics_errors = []
        self.clock = _stream.monotonic  # run() sets the arrival clock of its event loop

    def _body(self):
        self._index += 1
        return _stream.request_body(self.api, self.model, build_prompt(self.input_tokens, self._index),
                                    self.output_tokens, self.ignore_eos, engine=self.engine)

    def _scrape(self):
        if not self.metrics_url:
            return None
        timeout = min(self.timeout, SCRAPE_TIMEOUT)
        deadline = _stream.monotonic() + timeout
        try:
            status, text = _stream.http_get(self.metrics_url, None, timeout, max_body=METRICS_MAX)
        except _stream.RequestError as exc:
            self.metrics_errors.append(str(exc))
            return None
        if status != 200:
            self.metrics_errors.append("GET %s returned HTTP %d" % (self.metrics_url, status))
            return None
        parsed = parse_metrics(text, deadline)
        if parsed is None:
            self.metrics_errors.append("GET %s: its %d characters were not parsed within %gs" % (
                self.metrics_url, len(text), timeout))
        return parsed

    async def level(self, concurrency, requests, warmup, repeat=None):
        conns = [_stream.Connection(self.target, self.api_key, clock=self.clock) for dummy in range(concurrency)]
        try:
            began = _stream.monotonic()
            # connect and warm up every worker, then the level to steady state; all measured requests start after
            await asyncio.gather(*(self._warm(c, warmup) for c in conns))
            warm = await self._warm_to_steady(conns, concurrency, warmup, began)
            before = self.scrape()
            records = []
            # bodies are built before the barrier, so that starting a request is only a write
            bodies = [self._body() for dummy in range(requests)]
            bodies.reverse()
            probe = LagProbe()
            gc_was = gc.isenabled()
            gc.collect()
            gc.disable()
            probe.start()
            try:
                await asyncio.gather(*(self._worker(c, bodies, records) for c in conns))
            finally:
                lag = await probe.stop()
                if gc_was:
                    gc.enable()
            after = self.scrape()
        finally:
            for c in conns:
                c.close()
        labels = self.labels if repeat is None else dict(self.labels, repeat=repeat)
        result = _metrics.aggregate(records, concurrency, self.output_tokens, self.ignore_eos, self.slo, labels)
        result["requests_per_level"] = requests
        result["warmup_per_worker"] = warmup
        result.update(warm)
        result["connections_opened"] = sum(c.opened for c in conns)
        # per request first (exact for this level), then the counters' deltas over it, then SGLang's rolling gauge
        acceptance = (_metrics.acceptance_from_sglext(records) or _metrics.acceptance_from_meta(records)
                      or _metrics.acceptance_from_counters(before, after) or _metrics.acceptance_from_gauge(after))
        result["acceptance_length"] = acceptance.get("acceptance_length") if acceptance else None
        result["spec_decode"] = acceptance
        result["client_loop_lag_ms"] = lag
        return result

    async def _warm(self, conn, warmup):
        for dummy in range(warmup):
            await conn.post(self.path, self._body(), self.timeout)
        if conn.protocol is None:
            try:
                await asyncio.wait_for(conn.connect(), self.timeout)
            except (_stream.RequestError, asyncio.TimeoutError):
                pass  # the measured requests report it

    async def _warm_to_steady(self, conns, concurrency, warmup, began):
        """Warm-up windows at the level's concurrency until WarmUp says it is over: {warmup_s, steady,
        warmup_end, warmup_windows}. Off (steady None, no window) with warmup 0 or warmup_max_s None."""
        if warmup < 1 or self.warmup_max_s is None:
            return {"warmup_s": round(_stream.monotonic() - began, 3), "steady": None, "warmup_end": "off",
                    "warmup_windows": []}
        state = WarmUp(self.warmup_tolerance, self.warmup_max_s, began)
        while state.next(_stream.monotonic()) == WINDOW:
            records = []
            await asyncio.gather(*(self._window(c, WARMUP_WINDOW_ROUNDS, records) for c in conns))
            state.add(window_throughput(records, concurrency))
        return state.result()

    async def _window(self, conn, rounds, records):
        for dummy in range(rounds):
            records.append(await conn.post(self.path, self._body(), self.timeout))

    async def _worker(self, conn, bodies, records):
        while bodies:
            records.append(await conn.post(self.path, bodies.pop(), self.timeout))

    async def run(self, levels):
        """levels: [(concurrency, requests, warmup[, repeat])] -> (results, client). repeat: the index that
        labels the level's result as one repeat of a sweep (None: no repeat label)."""
        results = []
        for level in levels:
            results.append(await self.level(*level))
        return results, self.client_info(results)

    def client_info(self, results):
        worst = max([r["client_loop_lag_ms"]["p99"] or 0.0 for r in results] or [0.0])
        info = {
            "name": CLIENT_NAME, "version": CLIENT_VERSION,
            "python": "%d.%d.%d" % sys.version_info[:3],
            "transport": "asyncio.Protocol over raw HTTP/1.1, one keep-alive connection per worker",
            "loop_lag_probe_ms": LAG_PROBE_S * 1000.0,
            "loop_lag_ms": [{"concurrency": r["concurrency"], "lag": r["client_loop_lag_ms"]} for r in results],
            "loop_lag_p99_worst_ms": worst,
            "saturated": worst > LAG_WARN_MS,
            "warnings": [],
        }
        if info["saturated"]:
            info["warnings"].append("the client's event loop lagged up to %.1f ms (p99) behind schedule: "
                                    "its timestamps may be late by as much; run the client on a less loaded "
                                    "host or lower the concurrency" % worst)
        no_text = sum(r.get("no_text") or 0 for r in results)
        if no_text:
            info["warnings"].append("%d request(s) completed with tokens (per usage) that decoded to no text, so they "
                                    "have no latencies: their tokens count in the throughputs, they are missing from "
                                    "the ttft/tpot/e2e distributions (see each level's no_text)" % no_text)
        unsteady = [r for r in results if r.get("steady") is False]
        if unsteady:
            info["warnings"].append("measured before the server was steady: %s" % "; ".join(
                _unsteady_text(r) for r in unsteady))
        if self.metrics_errors:
            info["warnings"].append("metrics_url could not be read: %s" % self.metrics_errors[0])
        return info


def run(bench, levels):
    """Run the levels on a fresh event loop whose selector stamps each read's arrival (Python 3.7+)."""
    loop, bench.clock = _stream.new_event_loop()
    try:
        return loop.run_until_complete(bench.run(levels))
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
