# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A timing-exact stand-in for an OpenAI-compatible streaming server (standard library only).

Run it in its own process (python tests/support/stream_server.py --port P ...). Each streamed
request gets its first content chunk TTFT after its arrival (the moment the loop's select() saw it
readable) or, when it had to wait for a decode slot, after admission, then one chunk every STEP ms carrying K
tokens, until max_tokens. Chunks are scheduled on absolute deadlines, so a late wake-up does not
shift the ones after it. At most B requests decode at once (--batch-cap); the others wait.

So the truth is known in advance: tpot = step/k, decode tok/s = k/step, and at concurrency C <= B
output throughput = C*n / (ttft + (ceil(n/k) - 1)*step).

Edge cases, each a flag: a role-only first chunk, a usage-only last chunk (on time, late, inline on
the last content chunk, or none), [DONE] or not, multi-byte UTF-8 tokens split across writes,
chunked transfer encoding or close-delimited bodies, dropped connections, vLLM spec-decode counters
on /metrics. --engine sglang or vllm gives the real engines' own shapes
(each read from the engine's source; see _sglang_metrics, _vllm_metrics and the sglext chunk): what
each answers to identify it, its Prometheus counters with several label sets and _created samples,
SGLang's in-flight gauge sglang:num_running_reqs (the requests generating at that moment),
and SGLang's sglext spec_tokens_details chunk. A chunk of k tokens is one speculative step: one draft
of --spec-tokens tokens, k - 1 of them accepted, so the acceptance length is exactly k. GET /stats reports how late the server's own writes were
(?reset=1 clears it; ?trace=1 adds every stream's arrival, admission and first and last writes on
the system monotonic clock), so a benchmark can tell server drift from client error.

--drift-epoch T --drift-per-s R make the host drift, as thermals or another tenant would: a request
arriving t seconds after the wall-clock time T steps step * (1 + R t), in every stand-in given the same T.

--cold-requests K --cold-factor F make a server that starts slow and gets faster, as a real engine that
compiles, captures CUDA graphs and fills caches on its first requests: the i-th streamed request (1-based)
steps step * (1 + (F - 1) * (K - i + 1) / K) for i <= K (F times slower at first, decaying linearly), then
step. Off by default (K = 0).

Requests are parsed in the connection's data_received and chunks written from timer callbacks, no
coroutine per request: admitting 128 requests at once takes a few milliseconds, not tens.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import selectors
import socket
import sys
import time

ASCII_TOKEN = " tok"
UTF8_TOKENS = [" h\u00e9", " \u65e5\u672c", " \U0001f600"]  # 2-, 3- and 4-byte characters


class Config(object):
    def __init__(self, **kw):
        self.__dict__.update(kw)


class Stats(object):
    def __init__(self):
        self.reset()

    def reset(self):
        self.late = []
        self.requests = 0
        self.max_active = 0
        self.trace = []  # per stream: [t_arrival, t_admitted, t_first_write, t_last_write, tokens, chunks, tag]

    def summary(self):
        late = sorted(self.late)
        n = len(late)
        pct = (lambda q: late[min(n - 1, int(q * n))] * 1000.0) if n else (lambda q: None)
        return {"chunks": n, "requests": self.requests, "max_active": self.max_active,
                "late_ms": {"mean": (sum(late) / n * 1000.0) if n else None, "p50": pct(0.5),
                            "p99": pct(0.99), "max": (late[-1] * 1000.0) if n else None}}

    def traces(self):
        """Per stream, on the system-wide monotonic clock (the same clock as the client's
        time.monotonic()): when the head arrived, when it was admitted, when its first and last
        content chunks were written, its tokens and chunks, and the prompt's first word (a tag a
        client can use to match its own records)."""
        keys = ("t_arrival", "t_admitted", "t_first_write", "t_last_write", "tokens", "chunks", "tag")
        return [dict(zip(keys, row)) for row in self.trace]


class Server(object):
    """The server's state and its routes; connections are _Conn protocols that call handle()."""

    def __init__(self, cfg, loop, arrived=None):
        self.cfg = cfg
        self.loop = loop
        self.arrived = arrived or loop.time  # when the read that completed a request became ready
        self.stats = Stats()
        self.active = 0
        self.waiting = collections.deque()  # streams waiting for a decode slot (--batch-cap)
        self.counter = 0
        # spec-decode counters with a since-start history that must not leak into a run's figure
        self.drafts = 1000
        self.draft_tokens = 1000 * max(1, cfg.spec_tokens)
        self.accepted = 250
        # per engine series (vLLM data parallel: one series per engine; a request goes to one of them)
        self.series = [{"drafts": 500 + 100 * e, "draft_tokens": (500 + 100 * e) * max(1, cfg.spec_tokens),
                        "accepted": 125 + e, "per_pos": [40 + e] * max(1, cfg.spec_tokens)}
                       for e in range(max(1, cfg.engines))]
        # SGLang: counted when a request finishes, per is_streaming label value
        self.sgl = {"true": {"gen": 7000, "verify": 3000}, "false": {"gen": 11, "verify": 5}}
        self.unstreamed = 0  # non-streamed requests generating (their answer scheduled, not yet sent)

    # ------------------------------------------------------------------ routes
    def handle(self, conn, method, target, headers, body, t_arrival):
        cfg = self.cfg
        path, dummy, query = target.partition("?")
        if path == "/health":
            return conn.respond(200, {"status": "ok"})
        if path == "/stats":
            out = self.stats.summary()
            if "trace=1" in query:
                out["trace"] = self.stats.traces()
            if "reset=1" in query:
                self.stats.reset()
            return conn.respond(200, out)
        if path == "/metrics" and cfg.engine == "sglang":
            return conn.respond(200, self._sglang_metrics().encode(), "text/plain; version=0.0.4")
        if path == "/metrics" and cfg.engine == "vllm":
            return conn.respond(200, self._vllm_metrics().encode(), "text/plain; version=0.0.4")
        if path in ("/server_info", "/get_server_info") and cfg.engine == "sglang":
            # SGLang srt/entrypoints/http_server.py get_server_info: its ServerArgs as a dict (and scheduler state);
            # a few of its fields here. sglang-router 0.3.2 takes a worker's model id from served_model_name, else
            # model_path (smg src/core/steps/worker/local/discover_metadata.rs, create_worker.rs)
            # --server-info FILE: a real ServerArgs dict (tests/support/resolved/) under these fields
            return conn.respond(200, dict(getattr(cfg, "server_info", None) or {}, **{
                "model_path": cfg.models[0], "served_model_name": cfg.models[0], "tp_size": 1, "dp_size": 1,
                "port": cfg.port, "host": cfg.host}))
        if path == "/get_model_info" and cfg.engine == "sglang":  # sglang srt/entrypoints/http_server.py
            return conn.respond(200, {"model_path": cfg.models[0], "is_generation": True})
        if path == "/version" and cfg.engine == "vllm":  # vllm entrypoints/serve/instrumentator/basic.py
            return conn.respond(200, {"version": "0.34.0"})
        if path == "/metrics" and cfg.metrics:
            text = ("# TYPE vllm:spec_decode_num_drafts_total counter\n"
                    'vllm:spec_decode_num_drafts_total{engine="0",model_name="%s"} %d\n'
                    'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="%s"} %d\n'
                    'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="%s"} %d\n'
                    % (cfg.models[0], self.drafts, cfg.models[0], self.draft_tokens, cfg.models[0], self.accepted))
            return conn.respond(200, text.encode(), "text/plain; version=0.0.4")
        if cfg.api_key and headers.get("authorization") != "Bearer " + cfg.api_key:
            return conn.respond(401, {"error": {"message": "invalid api key"}})
        if path == "/v1/models" and method == "GET":
            return conn.respond(200, {"object": "list", "data": [
                {"id": m, "object": "model", "owned_by": "stand-in"} for m in cfg.models]})
        if method == "POST" and path == "/generate" and cfg.engine == "sglang":
            # SGLang's native API (0.5.9 srt/entrypoints/http_server.py generate_request, GenerateReqInput)
            try:
                req = json.loads(body)
            except ValueError:
                return conn.respond(400, {"error": {"message": "body is not JSON"}})
            params = req.get("sampling_params") or {}
            return self.generate(conn, False, {"model": cfg.models[0], "prompt": req.get("text") or "",
                                               "max_tokens": params.get("max_new_tokens") or 128,
                                               "stream": req.get("stream"), "ignore_eos": params.get("ignore_eos")},
                                 t_arrival, native=True)
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            try:
                req = json.loads(body)
            except ValueError:
                return conn.respond(400, {"error": {"message": "body is not JSON"}})
            if req.get("model") not in cfg.models:
                return conn.respond(404, {"error": {"message": "The model `%s` does not exist." % req.get("model")}})
            return self.generate(conn, path.endswith("chat/completions"), req, t_arrival)
        return conn.respond(404, {"error": {"message": "no route %s %s" % (method, path)}})

    def _vllm_metrics(self):
        """vLLM 0.34.0's spec-decode counters (vllm/v1/spec_decode/metrics.py, prometheus_client): one series per
        engine (label engine), a _created sample beside each _total, and the per-position counter."""
        cfg, lines, now = self.cfg, [], time.time()
        for name, key in (("vllm:spec_decode_num_drafts", "drafts"), ("vllm:spec_decode_num_draft_tokens", "draft_tokens"),
                          ("vllm:spec_decode_num_accepted_tokens", "accepted")):
            lines.append("# HELP %s_total Number of spec decoding %s." % (name, key))
            lines.append("# TYPE %s_total counter" % name)
            for e, series in enumerate(self.series):
                labels = 'engine="%d",model_name="%s"' % (e, cfg.models[0])
                lines.append("%s_total{%s} %.1f" % (name, labels, series[key]))
                lines.append("%s_created{%s} %.7e" % (name, labels, now))
        name = "vllm:spec_decode_num_accepted_tokens_per_pos"
        lines.append("# TYPE %s_total counter" % name)
        for e, series in enumerate(self.series):
            for pos, count in enumerate(series["per_pos"]):
                lines.append('%s_total{engine="%d",model_name="%s",position="%d"} %.1f' % (name, e, cfg.models[0], pos, count))
        # the in-flight gauge (vllm/v1/metrics/loggers.py PrometheusStatLogger: gauge_scheduler_running, one series
        # per engine): the requests generating now, all on engine 0 here, the others' series 0
        lines += ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
                  "# TYPE vllm:num_requests_running gauge"]
        for e in range(len(self.series)):
            lines.append('vllm:num_requests_running{engine="%d",model_name="%s"} %.1f'
                         % (e, cfg.models[0], (self.active + self.unstreamed) if e == 0 else 0))
        return "\n".join(lines) + "\n"

    def _sglang_metrics(self):
        """SGLang 0.5.23's counters (srt/observability/metrics_collector.py: generation_tokens_total with an
        is_streaming label, spec_verify_calls_total, both counted when a request finishes) and the rolling
        gauge spec_accept_length, which is not a per-run figure (it says 9.99 here)."""
        cfg, lines, now = self.cfg, [], time.time()
        labels = 'model_name="%s",engine_type="unified",tp_rank="0",pp_rank="0"' % cfg.models[0]
        lines += ["# TYPE sglang:generation_tokens_total counter"]
        for streaming, counts in sorted(self.sgl.items()):
            lines.append('sglang:generation_tokens_total{%s,is_streaming="%s"} %.1f' % (labels, streaming, counts["gen"]))
            lines.append('sglang:generation_tokens_created{%s,is_streaming="%s"} %.7e' % (labels, streaming, now))
        lines += ["# TYPE sglang:spec_verify_calls_total counter",
                  "sglang:spec_verify_calls_total{%s} %.1f" % (labels, sum(c["verify"] for c in self.sgl.values())),
                  "sglang:spec_verify_calls_created{%s} %.7e" % (labels, now),
                  "# TYPE sglang:spec_accept_length gauge", "sglang:spec_accept_length{%s} 9.99" % labels]
        # the in-flight gauge (SGLang 0.5.23 srt/observability/metrics_collector.py: SchedulerMetricsCollector's
        # num_running_reqs, with its scheduler's labels model_name, engine_type, tp_rank, pp_rank, moe_ep_rank):
        # the requests generating now, streamed or not, not those waiting for a decode slot (SGLang counts those
        # in sglang:num_queue_reqs)
        running = 'model_name="%s",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"' % cfg.models[0]
        lines += ["# HELP sglang:num_running_reqs The number of running requests.",
                  "# TYPE sglang:num_running_reqs gauge",
                  "sglang:num_running_reqs{%s} %.1f" % (running, self.active + self.unstreamed)]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ generation
    def generate(self, conn, chat, req, t_arrival, native=False):
        cfg = self.cfg
        self.counter += 1
        self.stats.requests += 1
        drop = cfg.drop_every > 0 and self.counter % cfg.drop_every == 0
        n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        if cfg.eos_at and not req.get("ignore_eos"):
            n = min(n, cfg.eos_at)
        if chat:
            prompt = " ".join(str(m.get("content", "")) for m in req.get("messages", []))
        else:
            prompt = req.get("prompt") or ""
        prompt_tokens = len(prompt.split()) + (3 if chat else 0)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
        obj_name = "chat.completion.chunk" if chat else "text_completion"
        base = {"id": "cmpl-%d" % self.counter, "object": obj_name, "created": int(time.time()), "model": req["model"]}
        chunks = int(math.ceil(n / float(cfg.k)))

        if not req.get("stream"):
            text = "".join(self.token(i) for i in range(n))
            if chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
            else:
                choice = {"index": 0, "text": text, "finish_reason": "length"}
            self.unstreamed += 1

            def answer():
                self.unstreamed -= 1
                conn.respond(200, dict(base, choices=[choice], usage=usage))
            self.loop.call_later(cfg.ttft + max(0, chunks - 1) * cfg.step, answer)
            return True

        def frame(text=None, role=False, finish=None, usage_obj=None, choices=True, extra=None):
            obj = dict(base)
            if choices:
                if chat:
                    delta = {"role": "assistant", "content": ""} if role else {"content": text}
                    choice = {"index": 0, "delta": delta, "finish_reason": finish}
                else:
                    choice = {"index": 0, "text": "" if role else text, "finish_reason": finish}
                obj["choices"] = [choice]
            else:
                obj["choices"] = []
            if usage_obj is not None:
                obj["usage"] = usage_obj
            if extra:
                obj.update(extra)
            return ("data: " + json.dumps(obj, ensure_ascii=False) + "\n\n").encode("utf-8")

        if native:
            # sglang 0.5.9 tokenizer_manager.py: every event carries the text so far and meta_info with the
            # completion tokens so far and spec_verify_ct (the verify steps so far); the stream ends [DONE]
            so_far = {"text": "", "steps": 0}

            def frame(text=None, role=False, finish=None, usage_obj=None, choices=True, extra=None):
                so_far["text"] += text or ""
                so_far["steps"] += 1
                tokens = min(n, so_far["steps"] * cfg.k)
                meta = {"id": base["id"], "finish_reason": {"type": "length"} if finish else None,
                        "prompt_tokens": prompt_tokens, "completion_tokens": tokens, "cached_tokens": 0,
                        "spec_verify_ct": so_far["steps"], "spec_accept_length": round(tokens / float(so_far["steps"]), 4)}
                obj = {"text": so_far["text"], "output_ids": list(range(tokens)), "meta_info": meta}
                return ("data: " + json.dumps(obj, ensure_ascii=False) + "\n\n").encode("utf-8")

        chunked = cfg.transfer == "chunked"

        def framed(data):
            """The writes of one SSE frame: HTTP-chunked unless close-delimited."""
            if not chunked:
                return [data]
            if cfg.utf8 and len(data) > 8:
                # split the frame inside a multi-byte character when there is one, in two HTTP chunks
                cut = next((i for i in range(len(data)) if data[i] >= 0xC0), len(data) // 2) + 1
                return [b"%x\r\n%s\r\n" % (cut, data[:cut]), b"%x\r\n%s\r\n" % (len(data) - cut, data[cut:])]
            return [b"%x\r\n%s\r\n" % (len(data), data)]

        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        head += b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"Connection: close\r\n\r\n"
        extra = None
        tail = []  # after the last content chunk: usage, meta_info, [DONE], the last HTTP chunk
        if cfg.engine == "sglang" and cfg.sglext and not native and req.get("return_spec_tokens_details"):
            # sglang 0.5.23 srt/entrypoints/openai/serving_completions.py and serving_chat.py: a chunk of its own,
            # choices empty, SglExt(spec_tokens_details=SpecTokensDetails(...)) (protocol.py), before the usage chunk
            details = {"spec_accept_rate": round((cfg.k - 1) / float(max(1, cfg.spec_tokens)), 4),
                       "spec_accept_length": round(n / float(max(1, chunks)), 4), "spec_cap_length": 0.0,
                       "spec_block_accept_length": 0.0, "spec_num_correct_drafts": (cfg.k - 1) * chunks,
                       "spec_num_proposed_drafts": cfg.spec_tokens * chunks, "spec_verify_ct": max(1, chunks),
                       "spec_correct_drafts_histogram": [], "spec_cap_lens_histogram": []}
            tail.append(frame(choices=False, extra={"sglext": {"routed_experts": None, "cached_tokens_details": None,
                                                               "spec_tokens_details": details, "input_ids": None}}))
        if include_usage and cfg.usage in ("last", "late"):
            tail.append(frame(choices=False, usage_obj=usage, extra=extra))
        elif extra:
            tail.append(frame(choices=False, extra=extra))
        if cfg.done:
            tail.append(b"data: [DONE]\n\n")
        tail = [part for data in tail for part in framed(data)]
        if chunked:
            tail.append(b"0\r\n\r\n")
        stream = _Stream(self, conn, n, chunks, drop, frame, framed, head, tail,
                         usage if (include_usage and cfg.usage == "inline") else None,
                         "length" if n == req.get("max_tokens") else "stop", keep=chunked,
                         late=include_usage and cfg.usage == "late", trace=[t_arrival, None, None, None, n, chunks, prompt.split(" ", 1)[0][:32]])
        stream.native = native
        if cfg.cold_requests > 0 and self.counter <= cfg.cold_requests:
            stream.step = cfg.step * (1.0 + (cfg.cold_factor - 1.0) * (cfg.cold_requests - self.counter + 1)
                                      / float(cfg.cold_requests))
        if cfg.drift_per_s:  # --drift-per-s: the whole host slows down as time goes by (every stand-in alike)
            stream.step *= 1.0 + cfg.drift_per_s * max(0.0, time.time() - cfg.drift_epoch)
        if cfg.batch_cap > 0 and self.active >= cfg.batch_cap:
            self.waiting.append(stream)
        else:
            stream.start(t_arrival)  # TTFT counts from the request's arrival
        return True

    def finished(self):
        self.active -= 1
        while self.waiting and self.active < max(1, self.cfg.batch_cap):
            stream = self.waiting.popleft()
            if not stream.conn.closed:
                stream.start()

    def token(self, i):
        return UTF8_TOKENS[i % len(UTF8_TOKENS)] if self.cfg.utf8 else ASCII_TOKEN


class _Stream(object):
    """One streamed response: the content chunks on absolute deadlines t0 + ttft + i * step.

    Each chunk is one timer callback and one write of bytes rendered once per distinct chunk, so the
    server's own event loop stays on schedule with hundreds of streams on a small machine (a
    coroutine per stream sleeping and re-encoding JSON per chunk ran tens of ms late at 128).
    """

    def __init__(self, server, conn, n, chunks, drop, frame, framed, head, tail, inline_usage, finish, keep, late,
                 trace):
        self.server, self.conn, self.n, self.chunks, self.drop = server, conn, n, chunks, drop
        self.frame, self.framed, self.head, self.tail = frame, framed, head, tail
        self.inline_usage, self.finish, self.keep, self.late, self.trace = inline_usage, finish, keep, late, trace
        self.cache = {}
        self.i = 0
        self.sent = 0
        self.engine_index = server.counter  # the engine series (vLLM data parallel) that serves this request
        self.native = False  # SGLang's /generate: every frame differs (the text and counts so far)
        self.t0 = None
        self.step = server.cfg.step  # this stream's step (--cold-requests: slower for the first requests)

    def start(self, t0=None):
        """Decode from t0 (the arrival; a queued stream starts when it gets its slot)."""
        server = self.server
        server.active += 1
        server.stats.max_active = max(server.stats.max_active, server.active)
        loop = server.loop
        self.t0 = self.trace[1] = t0 if t0 is not None else loop.time()
        if server.cfg.role_chunk:
            self.conn.write(self.head + b"".join(self.framed(self.frame(role=True))))
            self.head = b""
        # otherwise the response head leaves with the first chunk, in the same send: the moment a
        # round's 128 requests arrive together is the busiest, and a send each cost ~3 ms of it
        loop.call_at(self.t0 + server.cfg.ttft, self.tick)

    def tick(self):
        server, cfg, conn = self.server, self.server.cfg, self.conn
        i, sent = self.i, self.sent
        deadline = self.t0 + cfg.ttft + i * self.step
        now = server.loop.time()
        server.stats.late.append(now - deadline if now > deadline else 0.0)
        if conn.closed:
            server.finished()
            return
        if self.drop and i == 3:
            conn.abort()
            server.finished()
            return
        m = min(cfg.k, self.n - sent)
        last = i == self.chunks - 1
        key = (sent % len(UTF8_TOKENS) if cfg.utf8 else 0, m, last, i if self.native else 0)
        parts = self.cache.get(key)
        if parts is None:
            text = "".join(server.token(sent + j) for j in range(m))
            parts = self.cache[key] = self.framed(self.frame(text=text, finish=self.finish if last else None,
                                                             usage_obj=self.inline_usage if last else None))
        if last and not self.late and not cfg.utf8:
            # one write (one send) for the last chunk and the tail: at the end of a round 128 streams
            # finish together, and four sends each held the next round's requests back ~20 ms
            parts = parts[:-1] + [parts[-1] + b"".join(self.tail)]
            self.tail = []
        if self.head:
            parts = [self.head + parts[0]] + parts[1:]
            self.head = b""
        for part in parts:
            conn.write(part)
        self.trace[3] = server.loop.time()
        if i == 0:
            self.trace[2] = self.trace[3]
        if cfg.metrics and i > 0:
            server.drafts += 1
            server.draft_tokens += cfg.spec_tokens
            server.accepted += cfg.k - 1
        if cfg.engine == "vllm" and i > 0:
            series = server.series[self.engine_index % len(server.series)]
            series["drafts"] += 1
            series["draft_tokens"] += cfg.spec_tokens
            series["accepted"] += cfg.k - 1
            for pos in range(min(cfg.k - 1, len(series["per_pos"]))):
                series["per_pos"][pos] += 1
        self.i, self.sent = i + 1, sent + m
        if not last:
            server.loop.call_at(self.t0 + cfg.ttft + (i + 1) * self.step, self.tick)
            return
        server.stats.trace.append(self.trace)
        if cfg.engine == "sglang":
            counts = server.sgl["true"]
            counts["gen"] += self.n
            counts["verify"] += self.chunks
        if self.late:
            # the usage chunk (and what follows it) comes late; the content is over
            server.loop.call_later(cfg.late_usage, self.end)
        else:
            # the tail leaves with the last content chunk, as a real server's usage chunk does
            self.end()
        server.finished()

    def end(self):
        for part in self.tail:
            self.conn.write(part)
        self.conn.done(self.keep)


def dechunk(buf, start):
    """A Transfer-Encoding: chunked body in ``buf`` from ``start`` (RFC 9112 7.1): (body, end of the message) once
    the zero-size chunk and the trailer section are all there, None while some is still coming. Chunk extensions
    and trailer fields are read past. Raises ValueError on a size that is not hex."""
    body, pos = [], start
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size_text = buf[pos:eol].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ValueError("chunk size %r is not hexadecimal" % size_text[:20])
        if size < 0:
            raise ValueError("negative chunk size")
        pos = eol + 2
        if size == 0:
            while True:  # trailer fields, then the empty line
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    return None
                if eol == pos:
                    return b"".join(body), eol + 2
                pos = eol + 2
        if len(buf) < pos + size + 2:
            return None
        body.append(buf[pos:pos + size])
        if buf[pos + size:pos + size + 2] != b"\r\n":
            raise ValueError("chunk of %d bytes not followed by CRLF" % size)
        pos += size + 2


def read_chunked(rfile):
    """The same from a blocking file (http.server's rfile): the decoded body."""
    body = []
    while True:
        line = rfile.readline(65537)
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ValueError("chunk size %r is not hexadecimal" % size_text[:20])
        if size == 0:
            while rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(body)
        body.append(rfile.read(size))
        rfile.readline(3)


class _Conn(asyncio.Protocol):
    """One client connection: parses requests from its reads (arrival stamped on the read that
    completes a request), one at a time; keep-alive unless the response is close-delimited."""

    def __init__(self, server):
        self.server = server
        self.transport = None
        self.buf = b""
        self.busy = False
        self.closed = False

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc):
        self.closed = True

    def data_received(self, data):
        t_arrival = self.server.arrived()
        self.buf += data
        self.next_request(t_arrival)

    def next_request(self, t_arrival=None):
        if self.busy or self.closed:
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        lines = self.buf[:end].decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            key, sep, value = line.partition(":")
            if sep:
                headers[key.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            # smg 1.13.0 forwards request bodies with Transfer-Encoding: chunked and no Content-Length
            try:
                got = dechunk(self.buf, end + 4)
            except ValueError as exc:
                self.buf = b""
                self.respond(400, {"error": {"message": "bad chunked body: %s" % exc}})
                return
            if got is None:
                return  # the body is still coming
            body, stop = got
            self.buf = self.buf[stop:]
        else:
            length = int(headers.get("content-length") or 0)
            if len(self.buf) < end + 4 + length:
                return  # the body is still coming
            body = self.buf[end + 4:end + 4 + length]
            self.buf = self.buf[end + 4 + length:]
        try:
            method, target, dummy = lines[0].split(" ", 2)
        except ValueError:
            self.respond(400, {"error": {"message": "bad request line"}})
            return
        self.busy = True
        self.server.handle(self, method, target, headers, body,
                           t_arrival if t_arrival is not None else self.server.loop.time())

    def write(self, data):
        if not self.closed:
            self.transport.write(data)

    def abort(self):
        self.closed = True
        self.transport.abort()

    def respond(self, status, obj, ctype="application/json"):
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}.get(status, "X")
        self.write(b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
                   % (status, reason.encode(), ctype.encode(), len(body)) + body)
        self.done(True)
        return True

    def done(self, keep):
        """The response is complete: serve the next request on this connection, or close it."""
        self.busy = False
        if not keep:
            self.closed = True
            self.transport.close()
            return
        if self.buf:
            self.next_request()


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--k", type=int, default=1, help="tokens per chunk")
    ap.add_argument("--batch-cap", type=int, default=0, help="most requests decoding at once (0: no cap)")
    ap.add_argument("--model", action="append", dest="models", help="served model id (repeatable)")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--role-chunk", action="store_true", help="send a role-only (empty) first chunk")
    ap.add_argument("--usage", choices=["last", "late", "inline", "none"], default="last")
    ap.add_argument("--late-usage-ms", type=float, default=200.0)
    ap.add_argument("--no-done", dest="done", action="store_false", help="omit data: [DONE]")
    ap.add_argument("--utf8", action="store_true", help="multi-byte tokens, split across writes")
    ap.add_argument("--transfer", choices=["chunked", "close"], default="chunked")
    ap.add_argument("--drop-every", type=int, default=0, help="drop every Nth stream after 3 chunks")
    ap.add_argument("--eos-at", type=int, default=0, help="stop at N tokens unless ignore_eos")
    ap.add_argument("--metrics", action="store_true", help="serve vLLM spec-decode counters on /metrics")
    ap.add_argument("--spec-tokens", type=int, default=3, help="draft tokens per draft for /metrics")
    ap.add_argument("--engine", choices=["openai", "sglang", "vllm"], default="openai",
                    help="answer as that engine: how it identifies, its /metrics, SGLang's sglext chunk")
    ap.add_argument("--engines", type=int, default=1, help="vLLM engine series on /metrics (data parallel)")
    ap.add_argument("--server-info", type=lambda path: json.load(open(path)), default=None, metavar="FILE",
                    help="--engine sglang: /server_info also answers this JSON file's fields (theirs give way to the stand-in's)")
    ap.add_argument("--no-sglext", dest="sglext", action="store_false",
                    help="SGLang without the sglext chunk (a request schema without return_spec_tokens_details, "
                         "or a gateway that passes only OpenAI fields): its /metrics counters remain")
    ap.add_argument("--cold-requests", type=int, default=0,
                    help="the first K streamed requests decode slower, the step decaying linearly to --step-ms (0: off)")
    ap.add_argument("--cold-factor", type=float, default=1.0, help="how much slower the first streamed request steps")
    ap.add_argument("--drift-epoch", type=float, default=0.0, help="wall-clock time (time.time()) the drift starts at")
    ap.add_argument("--drift-per-s", type=float, default=0.0,
                    help="a drift of the host: a request's step is step * (1 + R * seconds since --drift-epoch) (0: off)")
    ap.add_argument("--load-s", type=float, default=0.0, help="seconds before the port opens, as a model loads")
    ap.add_argument("--ignore-unknown-flags", action="store_true",
                    help="take the flags an engine's variant adds (its engine_args) and ignore them, as a real engine "
                         "would take them")
    args, unknown = ap.parse_known_args(argv)
    if unknown and not args.ignore_unknown_flags:
        ap.error("unrecognized arguments: %s" % " ".join(unknown))
    return Config(host=args.host, port=args.port, ttft=args.ttft_ms / 1000.0, step=args.step_ms / 1000.0,
                  k=max(1, args.k), batch_cap=args.batch_cap, models=args.models or ["stand-in"],
                  api_key=args.api_key, role_chunk=args.role_chunk, usage=args.usage,
                  late_usage=args.late_usage_ms / 1000.0, done=args.done, utf8=args.utf8,
                  transfer=args.transfer, drop_every=args.drop_every, eos_at=args.eos_at,
                  metrics=args.metrics, spec_tokens=args.spec_tokens,
                  engine=args.engine, engines=args.engines, sglext=args.sglext, server_info=args.server_info,
                  cold_requests=max(0, args.cold_requests), cold_factor=max(1.0, args.cold_factor),
                  drift_epoch=args.drift_epoch, drift_per_s=max(0.0, args.drift_per_s), load_s=max(0.0, args.load_s))


class StampingSelector(selectors.DefaultSelector):
    """Notes when each select() returned: every read of that loop turn was ready by then, so a
    request's arrival is stamped there, not when its callback's turn came in a busy loop turn."""

    last = 0.0

    def select(self, timeout=None):
        events = super(StampingSelector, self).select(timeout)
        self.last = time.monotonic()
        return events


async def serve(cfg, selector=None):
    loop = asyncio.get_running_loop()
    server = Server(cfg, loop, (lambda: selector.last) if selector is not None else None)
    srv = await loop.create_server(lambda: _Conn(server), cfg.host, cfg.port, backlog=1024)
    sys.stdout.write("listening on %s:%d\n" % (cfg.host, cfg.port))
    sys.stdout.flush()
    async with srv:
        await srv.serve_forever()


def main(argv=None):
    cfg = parse_args(argv)
    time.sleep(cfg.load_s)  # --load-s: a model that loads for a while before the port opens
    try:
        selector = StampingSelector()
        loop = asyncio.SelectorEventLoop(selector)
        loop.run_until_complete(serve(cfg, selector))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
