# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A timing-exact stand-in for an OpenAI-compatible streaming server (standard library only).

Run it in its own process (python tests/support/stream_server.py --port P ...). Each streamed
request gets its first content chunk TTFT after admission, then one chunk every STEP ms carrying K
tokens, until max_tokens. Chunks are scheduled on absolute deadlines, so a late wake-up does not
shift the ones after it. At most B requests decode at once (--batch-cap); the others wait.

So the truth is known in advance: tpot = step/k, decode tok/s = k/step, and at concurrency C <= B
output throughput = C*n / (ttft + (ceil(n/k) - 1)*step).

Edge cases, each a flag: a role-only first chunk, a usage-only last chunk (on time, late, inline on
the last content chunk, or none), [DONE] or not, multi-byte UTF-8 tokens split across writes,
chunked transfer encoding or close-delimited bodies, dropped connections, vLLM spec-decode counters
on /metrics and SGLang-style meta_info. GET /stats reports how late the server's own writes were
(?reset=1 clears it), so a benchmark can tell server drift from client error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
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

    def summary(self):
        late = sorted(self.late)
        n = len(late)
        pct = (lambda q: late[min(n - 1, int(q * n))] * 1000.0) if n else (lambda q: None)
        return {"chunks": n, "requests": self.requests, "max_active": self.max_active,
                "late_ms": {"mean": (sum(late) / n * 1000.0) if n else None, "p50": pct(0.5),
                            "p99": pct(0.99), "max": (late[-1] * 1000.0) if n else None}}


class Server(object):
    def __init__(self, cfg):
        self.cfg = cfg
        self.stats = Stats()
        self.sem = asyncio.Semaphore(cfg.batch_cap) if cfg.batch_cap > 0 else None
        self.active = 0
        self.counter = 0
        # spec-decode counters with a since-start history that must not leak into a run's figure
        self.drafts = 1000
        self.draft_tokens = 1000 * max(1, cfg.spec_tokens)
        self.accepted = 250

    # ------------------------------------------------------------------ HTTP plumbing
    async def handle(self, reader, writer):
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                t_arrival = asyncio.get_running_loop().time()
                lines = head.decode("latin-1").split("\r\n")
                method, target, _version = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        key, value = line.split(":", 1)
                        headers[key.strip().lower()] = value.strip()
                body = b""
                if "content-length" in headers:
                    body = await reader.readexactly(int(headers["content-length"]))
                keep = await self.route(method, target, headers, body, writer, t_arrival)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            try:
                writer.close()
            except Exception:  # pylint: disable=broad-except
                pass

    def respond(self, writer, status, obj, ctype="application/json"):
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}.get(status, "X")
        writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
                     % (status, reason.encode(), ctype.encode(), len(body)) + body)
        return True

    async def route(self, method, target, headers, body, writer, t_arrival):
        cfg = self.cfg
        path, dummy, query = target.partition("?")
        if path == "/health":
            return self.respond(writer, 200, {"status": "ok"})
        if path == "/stats":
            out = self.stats.summary()
            if "reset=1" in query:
                self.stats.reset()
            return self.respond(writer, 200, out)
        if path == "/metrics" and cfg.metrics:
            text = ("# TYPE vllm:spec_decode_num_drafts_total counter\n"
                    'vllm:spec_decode_num_drafts_total{engine="0",model_name="%s"} %d\n'
                    'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="%s"} %d\n'
                    'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="%s"} %d\n'
                    % (cfg.models[0], self.drafts, cfg.models[0], self.draft_tokens, cfg.models[0], self.accepted))
            return self.respond(writer, 200, text.encode(), "text/plain; version=0.0.4")
        if cfg.api_key and headers.get("authorization") != "Bearer " + cfg.api_key:
            return self.respond(writer, 401, {"error": {"message": "invalid api key"}})
        if path == "/v1/models" and method == "GET":
            return self.respond(writer, 200, {"object": "list", "data": [
                {"id": m, "object": "model", "owned_by": "stand-in"} for m in cfg.models]})
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            try:
                req = json.loads(body)
            except ValueError:
                return self.respond(writer, 400, {"error": {"message": "body is not JSON"}})
            if req.get("model") not in cfg.models:
                return self.respond(writer, 404, {"error": {"message": "The model `%s` does not exist." % req.get("model")}})
            return await self.generate(path.endswith("chat/completions"), req, writer, t_arrival)
        return self.respond(writer, 404, {"error": {"message": "no route %s %s" % (method, path)}})

    # ------------------------------------------------------------------ generation
    async def generate(self, chat, req, writer, t_arrival):
        cfg = self.cfg
        loop = asyncio.get_running_loop()
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

        if not req.get("stream"):
            text = "".join(self.token(i) for i in range(n))
            await asyncio.sleep(cfg.ttft + max(0, math.ceil(n / float(cfg.k)) - 1) * cfg.step)
            if chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
            else:
                choice = {"index": 0, "text": text, "finish_reason": "length"}
            return self.respond(writer, 200, dict(base, choices=[choice], usage=usage))

        chunked = cfg.transfer == "chunked"
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        head += b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"Connection: close\r\n\r\n"
        writer.write(head)

        def send(data):
            if not chunked:
                writer.write(data)
            elif cfg.utf8 and len(data) > 8:
                # split the frame inside a multi-byte character when there is one, in two HTTP chunks
                cut = next((i for i in range(len(data)) if data[i] >= 0xC0), len(data) // 2) + 1
                writer.write(b"%x\r\n%s\r\n" % (cut, data[:cut]))
                writer.write(b"%x\r\n%s\r\n" % (len(data) - cut, data[cut:]))
            else:
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))

        if self.sem is not None:
            await self.sem.acquire()
        self.active += 1
        self.stats.max_active = max(self.stats.max_active, self.active)
        try:
            t0 = loop.time()
            if cfg.role_chunk:
                send(frame(role=True))
            chunks = int(math.ceil(n / float(cfg.k)))
            sent = 0
            for i in range(chunks):
                deadline = t0 + cfg.ttft + i * cfg.step
                delay = deadline - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                self.stats.late.append(max(0.0, loop.time() - deadline))
                if drop and i == 3:
                    writer.transport.abort()
                    return False
                m = min(cfg.k, n - sent)
                text = "".join(self.token(sent + j) for j in range(m))
                sent += m
                last = i == chunks - 1
                inline = usage if (include_usage and cfg.usage == "inline" and last) else None
                send(frame(text=text, finish=("length" if n == req.get("max_tokens") else "stop") if last else None,
                           usage_obj=inline))
                if cfg.metrics and i > 0:
                    self.drafts += 1
                    self.draft_tokens += cfg.spec_tokens
                    self.accepted += cfg.k - 1
                if writer.transport.get_write_buffer_size() > 65536:
                    await writer.drain()
            extra = None
            if cfg.meta_info:
                extra = {"meta_info": {"completion_tokens": n, "spec_verify_ct": max(1, chunks)}}
            if include_usage and cfg.usage in ("last", "late"):
                if cfg.usage == "late":
                    await asyncio.sleep(cfg.late_usage)
                send(frame(choices=False, usage_obj=usage, extra=extra))
            elif extra:
                send(frame(choices=False, extra=extra))
            if cfg.done:
                send(b"data: [DONE]\n\n")
            if chunked:
                writer.write(b"0\r\n\r\n")
            await writer.drain()
            return chunked
        finally:
            self.active -= 1
            if self.sem is not None:
                self.sem.release()

    def token(self, i):
        return UTF8_TOKENS[i % len(UTF8_TOKENS)] if self.cfg.utf8 else ASCII_TOKEN


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
    ap.add_argument("--meta-info", action="store_true", help="SGLang-style meta_info in the last chunk")
    args = ap.parse_args(argv)
    return Config(host=args.host, port=args.port, ttft=args.ttft_ms / 1000.0, step=args.step_ms / 1000.0,
                  k=max(1, args.k), batch_cap=args.batch_cap, models=args.models or ["stand-in"],
                  api_key=args.api_key, role_chunk=args.role_chunk, usage=args.usage,
                  late_usage=args.late_usage_ms / 1000.0, done=args.done, utf8=args.utf8,
                  transfer=args.transfer, drop_every=args.drop_every, eos_at=args.eos_at,
                  metrics=args.metrics, spec_tokens=args.spec_tokens, meta_info=args.meta_info)


async def serve(cfg):
    server = Server(cfg)
    srv = await asyncio.start_server(server.handle, cfg.host, cfg.port, backlog=1024)
    sys.stdout.write("listening on %s:%d\n" % (cfg.host, cfg.port))
    sys.stdout.flush()
    async with srv:
        await srv.serve_forever()


def main(argv=None):
    cfg = parse_args(argv)
    try:
        asyncio.run(serve(cfg))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
