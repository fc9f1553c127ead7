# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A hostile OpenAI-compatible server (standard library only): one misbehaviour, chosen by argv.

    python tests/support/hostile_server.py BEHAVIOUR --port-file PATH

It listens on 127.0.0.1, a free port it writes to PATH once it listens. Everything answers like a plain
OpenAI server (GET /v1/models lists "hostile"; /get_model_info and /version are 404; GET /metrics a few
counters; POST /v1/completions and /v1/chat/completions a short stream of two tokens and [DONE]), except
the one endpoint BEHAVIOUR names, which misbehaves (see BEHAVIOURS). A thread per connection; a write to a
client that has gone ends that connection's thread.
"""

from __future__ import annotations

import argparse
import json
import os
import socketserver
import sys
import time

from stream_server import dechunk  # this file's own directory is sys.path[0]

MODELS = json.dumps({"object": "list", "data": [{"id": "hostile", "object": "model"}]}).encode()
MB = 1024 * 1024

BEHAVIOURS = {
    "drip-models": "GET /v1/models: a 10 MB body announced, dripped 1 KB every 0.5 s",
    "slowloris-models": "GET /v1/models: the status line, then the headers 1 byte every 0.4 s, without end",
    "slowloris-stream": "POST: the status line, then the headers 1 byte every 0.4 s, without end",
    "drip-identify": "GET /get_model_info and /version: the headers, then a body 1 byte every 0.4 s",
    "drip-metrics": "GET /metrics: the headers, then a body 1 byte every 0.4 s",
    "endless-stream": "POST: a 200 event stream of content events as fast as it can, never finished",
    "bad-json-stream": "POST: a 200 event stream whose events are not JSON (one nested 100000 deep), then [DONE]",
    "bad-json-models": "GET /v1/models: 200 with a body that is not JSON (arrays nested 100000 deep, never closed)",
    "huge-event": "POST: a 200 event stream of one 50 MB event (data: xxx...), then [DONE]",
    "flood": "POST: a 200 event stream of bytes without any newline, without end",
    "flood-models": "GET /v1/models: 200, a close-delimited body of bytes without end",
    "no-blank-line-stream": "POST: the status line, then 4 KB header lines without end (no blank line)",
    "no-blank-line-models": "GET /v1/models: the status line, then 4 KB header lines without end",
    "chunk-line-stream": "POST: a chunked 200 event stream whose first chunk-size line never ends",
    "chunk-line-models": "GET /v1/models: a chunked 200 whose first chunk-size line never ends",
    "huge-error-stream": "POST: HTTP 500 with a 200 MB JSON error body",
    "huge-error-models": "GET /v1/models: HTTP 500 with a 200 MB JSON error body",
}


def where(behaviour):
    """The endpoint a behaviour spoils: models, stream, identify or metrics (its last word; else the stream)."""
    last = behaviour.rsplit("-", 1)[-1]
    return last if last in ("models", "stream", "identify", "metrics") else "stream"


def _event(obj):
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _stream_body():
    return (_event({"choices": [{"index": 0, "text": " a"}]}) + _event({"choices": [{"index": 0, "text": " b"}]})
            + _event({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}})
            + b"data: [DONE]\n\n")


class Handler(socketserver.BaseRequestHandler):
    behaviour = None

    def handle(self):
        try:
            while self._one():
                pass
        except (OSError, ValueError):
            pass  # the client went: that is the end of it

    def _read_request(self):
        data = b""
        while b"\r\n\r\n" not in data:
            piece = self.request.recv(65536)
            if not piece:
                return None
            data += piece
        head, dummy, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path = lines[0].split(" ")[:2]
        length, chunked = 0, False
        for line in lines[1:]:
            key, dummy, value = line.partition(":")
            if key.strip().lower() == "content-length":
                length = int(value.strip())
            if key.strip().lower() == "transfer-encoding" and "chunked" in value.lower():
                chunked = True  # as smg 1.13.0 forwards request bodies
        while chunked and dechunk(rest, 0) is None:
            piece = self.request.recv(65536)
            if not piece:
                return None
            rest += piece
        while not chunked and len(rest) < length:
            piece = self.request.recv(65536)
            if not piece:
                return None
            rest += piece
        return method, path

    def _send(self, status, body, ctype="application/json", extra=()):
        head = ["HTTP/1.1 %s" % status, "Content-Type: %s" % ctype, "Content-Length: %d" % len(body)] + list(extra)
        self.request.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)

    def _one(self):
        got = self._read_request()
        if got is None:
            return False
        method, path = got
        path = path.split("?", 1)[0]
        hostile = getattr(self, "_" + self.behaviour.replace("-", "_"))
        if method == "POST" and path.endswith("/completions"):
            kind = "stream"
        elif path.endswith("/v1/models"):
            kind = "models"
        elif path.endswith("/get_model_info") or path.endswith("/version"):
            kind = "identify"
        elif path.endswith("/metrics"):
            kind = "metrics"
        else:
            kind = "other"
        if kind == where(self.behaviour):
            hostile()
            return False
        if kind == "stream":
            self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                                 + _stream_body())
            return False
        if kind == "models":
            self._send("200 OK", MODELS)
        elif kind == "metrics":
            self._send("200 OK", b"# TYPE x counter\nx_total 1\n", "text/plain; version=0.0.4")
        elif path.endswith("/health"):
            self._send("200 OK", b"")
        else:
            self._send("404 Not Found", b'{"detail": "Not Found"}')
        return True

    # ------------------------------------------------------------------ the misbehaviours
    def _drip_models(self):
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (10 * MB))
        self.request.sendall(b'{"object": "list", "data": [')
        while True:
            self.request.sendall(b" " * 1024)
            time.sleep(0.5)

    def _bad_json_models(self):  # nested deeper than the JSON decoder recurses, and never closed
        self._send("200 OK", b'{"object": "list", "data": ' + b"[" * 100000)

    def _slowloris(self):
        self.request.sendall(b"HTTP/1.1 200 OK\r\n")
        while True:
            for byte in b"X-Slow: a\r\n":
                self.request.sendall(bytes([byte]))
                time.sleep(0.4)

    _slowloris_models = _slowloris_stream = _slowloris

    def _drip_body(self):
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
        while True:
            self.request.sendall(b" ")
            time.sleep(0.4)

    _drip_identify = _drip_metrics = _drip_body

    def _sse_head(self, extra=b""):
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n" + extra + b"\r\n")

    def _endless_stream(self):
        self._sse_head()
        batch = _event({"choices": [{"index": 0, "text": " again"}]}) * 200
        while True:
            self.request.sendall(batch)

    def _bad_json_stream(self):
        self._sse_head()
        self.request.sendall(b"data: " + b"[" * 100000 + b"\n\ndata: {\"choices\": [{\"text\": \"a\"\n\ndata: [DONE]\n\n")

    def _huge_event(self):
        self._sse_head()
        self.request.sendall(b"data: ")
        block = b"x" * MB
        for dummy in range(50):
            self.request.sendall(block)
        self.request.sendall(b"\n\ndata: [DONE]\n\n")

    def _flood(self):
        self._sse_head()
        block = b"x" * (256 * 1024)
        while True:
            self.request.sendall(block)

    def _flood_models(self):
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
        block = b"[" * (256 * 1024)
        while True:
            self.request.sendall(block)

    def _no_blank_line(self):
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n")
        line = b"X-Pad: " + b"a" * 4096 + b"\r\n"
        while True:
            self.request.sendall(line)

    _no_blank_line_stream = _no_blank_line_models = _no_blank_line

    def _chunk_line(self, ctype):
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n" % ctype)
        block = b"f" * (64 * 1024)
        while True:
            self.request.sendall(block)

    def _chunk_line_stream(self):
        self._chunk_line(b"text/event-stream")

    def _chunk_line_models(self):
        self._chunk_line(b"application/json")

    def _huge_error(self):
        size = 200 * MB
        self.request.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n" % size)
        start = b'{"error": {"message": "the engine is on fire", "pad": "'
        self.request.sendall(start)
        block = b"x" * MB
        sent = len(start)
        while sent + len(block) <= size:
            self.request.sendall(block)
            sent += len(block)

    _huge_error_stream = _huge_error_models = _huge_error


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("behaviour", choices=sorted(BEHAVIOURS))
    parser.add_argument("--port-file", required=True, help="where to write the port, once listening")
    args = parser.parse_args(argv)
    Handler.behaviour = args.behaviour
    server = Server(("127.0.0.1", 0), Handler)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as out:
        out.write("%d\n" % server.server_address[1])
    os.rename(tmp, args.port_file)
    try:
        server.serve_forever(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
