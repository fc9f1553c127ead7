# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One synchronous HTTP request over http.client, standard library only.

The one helper for the collection's short requests: the readiness probe (_engines.probe: GET /health,
a 1-token POST) and the benchmark's GETs (_openai_stream.http_get: /v1/models, the engine identification,
a metrics endpoint).

Every wait is bounded as a whole: ``timeout`` is the deadline of the whole exchange (connect, send, the
status line and headers, the body), not of each socket read, so a server that drips its answer a byte at a
time ends at the deadline like one that never answers. Every read is bounded in size too: the head by
HEAD_MAX, the body by ``max_body`` (Oversized beyond it), an error answer's body cut at ERROR_BODY_MAX.
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import ssl
import time

HEAD_MAX = 64 * 1024              # bytes of status line and headers
LINE_MAX = 64 * 1024              # bytes of one chunk-size line (http.client's own cap on a line, _MAXLINE)
BODY_MAX = 4 * 1024 * 1024        # bytes of a body, unless the caller says otherwise (a JSON answer)
ERROR_BODY_MAX = 1024 * 1024      # bytes read of an error answer's body (status >= 400): only its message is used
_READ = 64 * 1024                 # bytes asked of http.client per body read

monotonic = time.monotonic


class Oversized(http.client.HTTPException):
    """The answer passed a size cap (its head HEAD_MAX, a chunk-size line LINE_MAX, its body max_body); ``what``
    says which."""

    def __init__(self, what, cap):
        http.client.HTTPException.__init__(self, "%s passed %s; read no further" % (what, size_text(cap)))
        self.what = what
        self.cap = cap


def size_text(n):
    """1048576 -> '1 MiB', 65536 -> '64 KiB', 100 -> '100 bytes'."""
    for unit, scale in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return "%d %s" % (n // scale, unit)
    return "%d bytes" % n


def _left(deadline, timeout):
    left = deadline - monotonic()
    if left <= 0:
        raise socket.timeout("no complete answer within %gs" % timeout)
    return left


class _DeadlineReader(io.RawIOBase):
    """The socket's read side for http.client: before each recv the socket's timeout becomes the time left
    to the deadline (socket.timeout once it has passed); while ``cap`` is set, at most that many bytes are
    read (the head: HEAD_MAX, and what the buffer may read ahead of it)."""

    def __init__(self, owner):
        io.RawIOBase.__init__(self)
        self._owner = owner
        self.count = 0
        self.cap = HEAD_MAX + io.DEFAULT_BUFFER_SIZE

    def readable(self):
        return True

    def readinto(self, b):
        owner = self._owner
        view = memoryview(b)
        if self.cap is not None:
            if self.count >= self.cap:
                raise Oversized("the response head", HEAD_MAX)
            if len(view) > self.cap - self.count:
                view = view[:self.cap - self.count]
        owner.sock.settimeout(_left(owner.deadline, owner.total))
        try:
            n = owner.sock.recv_into(view)
        except socket.timeout:
            raise socket.timeout("no complete answer within %gs" % owner.total)
        self.count += n
        return n

    def close(self):
        io.RawIOBase.close(self)
        self._owner.reader_closed()


class _DeadlineSocket(object):
    """The connected socket as http.client sees it: sends and reads bounded by the deadline. Like a socket's
    own makefile(), the socket really closes once both it and its reader are closed (http.client closes the
    connection and keeps reading through the response when the server closes after it)."""

    def __init__(self, sock, deadline, total):
        self.sock = sock
        self.deadline = deadline
        self.total = total
        self.reader = None
        self._closed = False

    def sendall(self, data):
        self.sock.settimeout(_left(self.deadline, self.total))
        try:
            return self.sock.sendall(data)
        except socket.timeout:
            raise socket.timeout("no complete answer within %gs" % self.total)

    def makefile(self, mode="rb", *args, **kwargs):
        if "r" not in mode or "w" in mode or self.reader is not None:
            raise ValueError("one reader, and only reads, go through this socket's file")
        self.reader = _DeadlineReader(self)
        return io.BufferedReader(self.reader)

    def close(self):
        self._closed = True
        if self.reader is None or self.reader.closed:
            self.sock.close()

    def reader_closed(self):
        if self._closed:
            self.sock.close()

    def __getattr__(self, name):
        return getattr(self.sock, name)


class _Deadline(object):
    """Mixed into http.client's connections: connect within the time left, then bound every send and read."""

    deadline = 0.0
    total = 0.0
    bounded = None

    def connect(self):
        self.timeout = _left(self.deadline, self.total)
        try:
            super(_Deadline, self).connect()
        except socket.timeout:
            raise socket.timeout("no complete answer within %gs" % self.total)
        self.sock = self.bounded = _DeadlineSocket(self.sock, self.deadline, self.total)


class _HTTPConnection(_Deadline, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_Deadline, http.client.HTTPSConnection):
    pass


def request(host, port, method, path, body=None, api_key=None, timeout=10.0, https=False, ssl_context=None,
            accept="application/json", limit=None, max_body=BODY_MAX):
    """(status, body text) of one request, all of it within ``timeout`` seconds. body (JSON-serialisable) is
    sent as JSON. At most ``limit`` bytes of the answer are read (the rest is left unread, quietly); else a
    body over ``max_body`` bytes raises Oversized; an error answer's body (status 400 or more) is cut at
    ERROR_BODY_MAX, quietly, as only its message matters. Raises socket.timeout (an OSError) when the whole
    exchange did not end within ``timeout``, OSError or http.client.HTTPException (Oversized included) when
    the server cannot be reached or answers garbage."""
    deadline = monotonic() + timeout
    if https:
        conn = _HTTPSConnection(host, port, timeout=timeout, context=ssl_context or ssl.create_default_context())
    else:
        conn = _HTTPConnection(host, port, timeout=timeout)
    conn.deadline, conn.total = deadline, timeout
    resp = None
    try:
        headers = {"Accept": accept}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if api_key:
            headers["Authorization"] = "Bearer %s" % api_key
        conn.request(method, path, body=data, headers=headers)
        try:
            resp = conn.getresponse()
        except http.client.LineTooLong:
            raise Oversized("the response head", HEAD_MAX)
        if conn.bounded is not None and conn.bounded.reader is not None:
            conn.bounded.reader.cap = None  # the head was read: the body's own cap applies, below
        if limit is not None:
            return resp.status, _read_body(resp, limit, True).decode("utf-8", "replace")
        if resp.status >= 400:
            return resp.status, _read_body(resp, min(max_body, ERROR_BODY_MAX), True).decode("utf-8", "replace")
        return resp.status, _read_body(resp, max_body, False).decode("utf-8", "replace")
    finally:
        if resp is not None:
            resp.close()
        conn.close()


def _read_body(resp, cap, quiet):
    """The body, at most cap bytes: cut there when quiet, else Oversized when it has more."""
    pieces = []
    size = 0
    while True:
        want = min(_READ, cap - size if quiet else cap + 1 - size)
        if want <= 0:
            break
        try:
            piece = resp.read(want)
        except http.client.LineTooLong:
            raise Oversized("a chunk-size line", LINE_MAX)
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
        if size > cap:
            raise Oversized("the body", cap)
    return b"".join(pieces)
