# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _http.request against real local servers on 127.0.0.1 (http.server in a thread, raw
sockets, a TLS server with a self-signed certificate): status codes, the JSON body and the headers it
sends (Accept, Content-Type, the bearer key), the read limit, and the errors it raises (refused, a
server that never answers, garbage, an untrusted certificate), each within a short timeout."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time

from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _http


class Handler(BaseHTTPRequestHandler):
    """GET/POST /echo: the request as JSON; /status/N: that status; /big: 10000 bytes; /latin1: bad UTF-8."""

    def _answer(self, status, body, ctype="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _route(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.path.startswith("/status/"):
            code = int(self.path.rsplit("/", 1)[1])
            return self._answer(code, json.dumps({"error": {"code": code}}).encode())
        if self.path == "/big":
            return self._answer(200, b"0123456789" * 1000, "text/plain")
        if self.path == "/latin1":
            return self._answer(200, "d\u00e9j\u00e0".encode("latin-1"), "text/plain")
        if self.path == "/utf8":
            return self._answer(200, json.dumps({"text": "\u65e5\u672c \U0001f600"}, ensure_ascii=False).encode())
        seen = {"method": self.command, "path": self.path, "body": body.decode("utf-8"),
                "headers": dict((k.lower(), v) for k, v in self.headers.items())}
        return self._answer(201 if self.command == "POST" else 200, json.dumps(seen).encode())

    do_GET = do_POST = do_PUT = do_DELETE = _route

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    """A real HTTP server on 127.0.0.1, a free port, in a thread: its port."""
    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def silent_port():
    """A socket that listens (the kernel completes the handshake) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def _answer_once(reply):
    """A raw server that reads one request, sends reply bytes and closes: its port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)

    def serve():
        conn, dummy = sock.accept()
        with conn:
            conn.settimeout(2)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            conn.sendall(reply)
        sock.close()

    threading.Thread(target=serve, daemon=True).start()
    return sock.getsockname()[1]


def test_get_returns_the_status_and_the_text(server):
    status, text = _http.request("127.0.0.1", server, "GET", "/echo", timeout=2)
    assert status == 200 and isinstance(text, str)
    seen = json.loads(text)
    assert seen["method"] == "GET" and seen["path"] == "/echo" and seen["body"] == ""
    assert seen["headers"]["accept"] == "application/json"
    assert "authorization" not in seen["headers"] and "content-type" not in seen["headers"]


@pytest.mark.parametrize("code", [204, 401, 404, 500, 503])
def test_any_status_is_returned_not_raised(server, code):
    status, text = _http.request("127.0.0.1", server, "GET", "/status/%d" % code, timeout=2)
    assert status == code
    assert text == ("" if code == 204 else json.dumps({"error": {"code": code}}))


def test_a_body_is_sent_as_json_with_its_content_type(server):
    body = {"model": "m", "prompt": "h\u00e9", "max_tokens": 1, "stream": False}
    status, text = _http.request("127.0.0.1", server, "POST", "/v1/completions", body=body, timeout=2)
    seen = json.loads(text)
    assert status == 201 and seen["method"] == "POST" and seen["path"] == "/v1/completions"
    assert json.loads(seen["body"]) == body
    assert seen["headers"]["content-type"] == "application/json"
    assert int(seen["headers"]["content-length"]) == len(json.dumps(body).encode("utf-8"))


def test_an_empty_body_is_still_sent_as_json(server):
    dummy, text = _http.request("127.0.0.1", server, "PUT", "/echo", body={}, timeout=2)
    seen = json.loads(text)
    assert seen["method"] == "PUT" and seen["body"] == "{}" and seen["headers"]["content-type"] == "application/json"


def test_the_api_key_goes_as_a_bearer_token_and_accept_as_asked(server):
    dummy, text = _http.request("127.0.0.1", server, "DELETE", "/echo", api_key="sk-test-4c9f", timeout=2,
                                accept="text/plain; version=0.0.4")
    seen = json.loads(text)
    assert seen["method"] == "DELETE"
    assert seen["headers"]["authorization"] == "Bearer sk-test-4c9f"
    assert seen["headers"]["accept"] == "text/plain; version=0.0.4"
    dummy, text = _http.request("127.0.0.1", server, "GET", "/echo", api_key="", timeout=2)
    assert "authorization" not in json.loads(text)["headers"]  # an empty key sends no header


def test_limit_reads_at_most_that_many_bytes(server):
    assert _http.request("127.0.0.1", server, "GET", "/big", timeout=2) == (200, "0123456789" * 1000)
    assert _http.request("127.0.0.1", server, "GET", "/big", timeout=2, limit=25) == (200, "0123456789012345678901234")


def test_the_text_is_utf8_and_bad_bytes_are_replaced(server):
    status, text = _http.request("127.0.0.1", server, "GET", "/utf8", timeout=2)
    assert json.loads(text) == {"text": "\u65e5\u672c \U0001f600"}
    status, text = _http.request("127.0.0.1", server, "GET", "/latin1", timeout=2)
    assert status == 200 and text == "d\ufffdj\ufffd"


def test_a_refused_connection_raises_oserror():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(ConnectionRefusedError):
            _http.request("127.0.0.1", port, "GET", "/health", timeout=1)


def test_a_server_that_never_answers_times_out(silent_port):
    began = time.monotonic()
    with pytest.raises(socket.timeout):
        _http.request("127.0.0.1", silent_port, "GET", "/health", timeout=0.3)
    assert 0.25 <= time.monotonic() - began < 2.0


def test_garbage_raises_an_http_exception():
    port = _answer_once(b"this is not HTTP at all\r\n\r\n")
    with pytest.raises(http.client.HTTPException):
        _http.request("127.0.0.1", port, "GET", "/health", timeout=2)


def test_a_connection_closed_without_an_answer_raises():
    port = _answer_once(b"")
    with pytest.raises((http.client.HTTPException, OSError)) as raised:
        _http.request("127.0.0.1", port, "GET", "/health", timeout=2)
    assert isinstance(raised.value, (http.client.RemoteDisconnected, ConnectionResetError))


def test_a_close_delimited_answer_is_read_to_its_end():
    # no Content-Length: the body ends where the server closes the connection
    port = _answer_once(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
    assert _http.request("127.0.0.1", port, "GET", "/health", timeout=2) == (200, "all of it")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 (openssl): (cert path, key path)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    where = tmp_path_factory.mktemp("tls")
    cert, key = str(where / "cert.pem"), str(where / "key.pem")
    proc = subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                           "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1",
                           "-addext", "subjectAltName=IP:127.0.0.1"],
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0 or not os.path.exists(cert):
        pytest.skip("openssl cannot make a self-signed certificate here: %s" % proc.stderr[-300:])
    return cert, key


@pytest.fixture
def tls_server(certificate):
    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_https_with_a_context_that_trusts_the_server(tls_server, certificate):
    context = ssl.create_default_context(cafile=certificate[0])
    status, text = _http.request("127.0.0.1", tls_server, "POST", "/echo", body={"a": 1}, api_key="k", https=True,
                                 ssl_context=context, timeout=2)
    seen = json.loads(text)
    assert status == 201 and json.loads(seen["body"]) == {"a": 1} and seen["headers"]["authorization"] == "Bearer k"


def test_https_verifies_the_certificate_by_default(tls_server):
    with pytest.raises(ssl.SSLCertVerificationError) as raised:
        _http.request("127.0.0.1", tls_server, "GET", "/echo", https=True, timeout=2)
    assert isinstance(raised.value, OSError)  # what the docstring promises callers


def test_plain_http_to_a_tls_server_is_an_error_not_a_hang(tls_server):
    began = time.monotonic()
    with pytest.raises((http.client.HTTPException, OSError)):
        _http.request("127.0.0.1", tls_server, "GET", "/echo", timeout=1)
    assert time.monotonic() - began < 2.5


# ---------------------------------------------------------------------------- every wait bounded as a whole
def _serve_once(script):
    """A raw server that reads one request, then runs script(conn) (it writes what it likes) until the client
    goes or the script ends; its port. The thread ends when the client has gone."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)

    def serve():
        conn, dummy = sock.accept()
        sock.close()
        with conn:
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            try:
                script(conn)
            except OSError:
                pass  # the client went

    threading.Thread(target=serve, daemon=True).start()
    return sock.getsockname()[1]


def _drip(head, byte=b" ", every=0.05, count=400):
    def script(conn):
        conn.sendall(head)
        for dummy in range(count):
            conn.sendall(byte)
            time.sleep(every)
    return script


def _flood(head, block, total):
    def script(conn):
        conn.sendall(head)
        sent = 0
        while sent < total:
            conn.sendall(block)
            sent += len(block)
    return script


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n",       # a body dripped a byte at a time
    b"HTTP/1.1 200 OK\r\n",                                     # headers dripped a byte at a time (slowloris)
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",   # a chunk-size line dripped
])
def test_the_timeout_bounds_the_whole_exchange_not_each_read(head):
    port = _serve_once(_drip(head, b"1" if b"chunked" in head else b"a"))
    began = time.monotonic()
    with pytest.raises(socket.timeout) as raised:
        _http.request("127.0.0.1", port, "GET", "/v1/models", timeout=1.0)
    took = time.monotonic() - began
    assert 0.9 <= took < 1.9, took  # each read came within 0.05 s: only the whole exchange's deadline ends it
    assert "no complete answer within 1s" in str(raised.value)


def test_a_body_over_max_body_is_oversized_one_at_the_cap_is_read():
    body = b"x" * 1000
    port = _answer_once(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + body)
    assert _http.request("127.0.0.1", port, "GET", "/", timeout=2, max_body=1000) == (200, "x" * 1000)
    port = _answer_once(b"HTTP/1.1 200 OK\r\nContent-Length: 1001\r\n\r\n" + body + b"x")
    with pytest.raises(_http.Oversized) as raised:
        _http.request("127.0.0.1", port, "GET", "/", timeout=2, max_body=1000)
    assert str(raised.value) == "the body passed 1000 bytes; read no further"
    assert isinstance(raised.value, http.client.HTTPException)  # what the probe and other callers catch


def test_an_endless_body_stops_at_the_cap_without_reading_on():
    port = _serve_once(_flood(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", b"[" * 65536, 1 << 30))
    began = time.monotonic()
    with pytest.raises(_http.Oversized) as raised:
        _http.request("127.0.0.1", port, "GET", "/", timeout=5)
    assert "the body passed 4 MiB" in str(raised.value) and time.monotonic() - began < 3


def test_an_error_body_is_cut_at_its_cap_and_returned():
    start = b'{"error": {"message": "on fire", "pad": "'
    port = _serve_once(_flood(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n%s" % (200 << 20, start),
                              b"x" * (1 << 20), 200 << 20))
    status, text = _http.request("127.0.0.1", port, "GET", "/", timeout=5)
    assert status == 500 and len(text) == _http.ERROR_BODY_MAX and text.startswith(start.decode())


def test_headers_without_end_are_oversized():
    port = _serve_once(_flood(b"HTTP/1.1 200 OK\r\n", b"X-Pad: " + b"a" * 4096 + b"\r\n", 1 << 30))
    with pytest.raises(_http.Oversized) as raised:
        _http.request("127.0.0.1", port, "GET", "/", timeout=5)
    assert str(raised.value) == "the response head passed 64 KiB; read no further"


def test_an_endless_chunk_size_line_is_oversized():
    port = _serve_once(_flood(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"f" * 65536, 1 << 30))
    with pytest.raises(_http.Oversized) as raised:
        _http.request("127.0.0.1", port, "GET", "/", timeout=5)
    assert str(raised.value) == "a chunk-size line passed 64 KiB; read no further"


def test_a_chunked_body_is_read_whole():
    port = _answer_once(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    assert _http.request("127.0.0.1", port, "GET", "/", timeout=2) == (200, "hello world")


def test_limit_cuts_quietly_whatever_the_size():
    port = _serve_once(_flood(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", b"y" * 65536, 1 << 30))
    assert _http.request("127.0.0.1", port, "GET", "/", timeout=5, limit=10) == (200, "y" * 10)


def test_size_text():
    assert [_http.size_text(n) for n in (100, 65536, 1 << 20, 1500)] == ["100 bytes", "64 KiB", "1 MiB", "1500 bytes"]
