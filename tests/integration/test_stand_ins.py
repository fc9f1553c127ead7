# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The stand-in engines read request bodies sent with Transfer-Encoding: chunked, as smg 1.13.0 forwards them
(no Content-Length), besides Content-Length ones: each server in its own process, over a raw socket."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SUPPORT = os.path.join(os.path.dirname(HERE), "support")
sys.path.insert(0, SUPPORT)

from stand_in import stand_in, stop, wait_health  # noqa: E402 pylint: disable=wrong-import-position
from stream_server import dechunk  # noqa: E402 pylint: disable=wrong-import-position


def chunked(obj, sizes=(7, 1, 5)):
    """obj as JSON in chunks of the given sizes (the rest in one), with an extension and a trailer field."""
    data, out = json.dumps(obj).encode(), []
    for size in sizes:
        piece, data = data[:size], data[size:]
        out.append(b"%x;ext=1\r\n%s\r\n" % (len(piece), piece))
    out.append(b"%x\r\n%s\r\n" % (len(data), data))
    return b"".join(out) + b"0\r\nX-Trailer: 1\r\n\r\n"


def exchange(port, path, body, pieces=3):
    """POST a chunked body, written in `pieces` separate sends, then a second request on the same connection."""
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" % path
    wire = head + body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        step = max(1, len(wire) // pieces)
        for i in range(0, len(wire), step):
            sock.sendall(wire[i:i + step])
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while data.count(b"HTTP/1.1 ") < 2 or not data.rstrip().endswith(b"}"):
            piece = sock.recv(65536)
            if not piece:
                break
            data += piece
    return data.decode()


def test_dechunk_reads_to_the_end_and_waits_for_more():
    wire = chunked({"a": "b" * 40}) + b"NEXT"
    body, end = dechunk(wire, 0)
    assert json.loads(body) == {"a": "b" * 40} and wire[end:] == b"NEXT"
    for cut in range(len(wire) - 4):
        assert dechunk(wire[:cut], 0) is None
    with pytest.raises(ValueError):
        dechunk(b"zz\r\nab\r\n0\r\n\r\n", 0)


def test_stream_server_and_fake_engine_answer_a_chunked_body(port):
    req = {"model": "m", "prompt": "hi", "max_tokens": 3, "stream": False}
    with stand_in(port, "--model", "m", "--ttft-ms", "1", "--step-ms", "1"):
        out = exchange(port, b"/v1/completions", chunked(req))
    assert out.startswith("HTTP/1.1 200"), out
    assert '"text_completion"' in out and out.count("HTTP/1.1 200") == 2, out
    proc = subprocess.Popen([sys.executable, os.path.join(SUPPORT, "fake_engine.py"), "--port", str(port),
                             "--model", "m", "--mode", "ok", "--load-s", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_health("http://127.0.0.1:%d" % port, proc=proc)
        out = exchange(port, b"/v1/completions", chunked(req))
    finally:
        stop(proc)
    assert out.startswith("HTTP/1.0 200") and '"text_completion"' in out, out  # HTTP/1.0: one request a connection
