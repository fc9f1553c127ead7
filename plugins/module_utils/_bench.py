# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The closed-loop load generator behind throughput_bench.

Per level: exactly ``concurrency`` workers, each on its own keep-alive connection; every worker
first sends ``warmup`` requests (excluded), then all start together and each sends its next
request as soon as its previous one finished, until ``requests`` were sent. A probe task measures
the event loop's own scheduling lag, so a saturated client shows in ``client.loop_lag_ms``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys

from ansible_collections.inferops.serving.plugins.module_utils import _metrics, _openai_stream as _stream

CLIENT_NAME = "inferops.serving.throughput_bench"
CLIENT_VERSION = "0.1.0"
LAG_PROBE_S = 0.005
LAG_WARN_MS = 5.0
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


ENGINES = ("auto", "sglang", "vllm", "trtllm", "transformers", "openai")


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


class Bench(object):
    def __init__(self, target, model, api="completions", input_tokens=128, output_tokens=256,
                 ignore_eos=True, api_key=None, timeout=600.0, slo=None, labels=None,
                 metrics_url=None, scrape=None, engine="openai"):
        self.target = target
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
            # connect and warm up every worker; all measured requests start after this barrier
            await asyncio.gather(*(self._warm(c, warmup) for c in conns))
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
