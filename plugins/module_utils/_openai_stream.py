# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A lean streaming OpenAI client: raw HTTP/1.1 over asyncio, standard library only.

One concern: send a request, time every server-sent event on arrival. The connection is an
``asyncio.BufferedProtocol`` (``_Protocol``): every read lands in one preallocated buffer and is
stamped with the arrival clock inside ``buffer_updated``, before any coroutine is resumed, then
de-chunked and split into SSE events in place. Events are decoded from UTF-8 only once complete, so a character split across
reads or HTTP chunks is whole again. Keep-alive: one connection serves request after request until
the server closes it.

Also a synchronous GET (``http_get``, over ``_http.request``) for ``/v1/models`` and a metrics endpoint.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import selectors
import socket
import ssl
import time
from urllib.parse import urlsplit

from ansible_collections.inferops.serving.plugins.module_utils import _http

monotonic = time.monotonic


class StampingSelector(selectors.DefaultSelector):
    """The platform's default selector, noting the monotonic time each select() returned.

    Every socket read the event loop then runs in that turn was ready when select() returned, so
    that moment is the closest the client can know of the data's arrival. Stamping each read when
    its callback runs instead makes the reads processed late in a busy turn (with 128 streams, a
    turn handles dozens) look several milliseconds late, which is client error, not server timing.
    """

    last = 0.0

    def select(self, timeout=None):
        events = super(StampingSelector, self).select(timeout)
        self.last = monotonic()
        return events

    def stamp(self):
        return self.last


def new_event_loop():
    """(loop, clock): an asyncio loop on a StampingSelector and the arrival clock to stamp reads with."""
    selector = StampingSelector()
    return asyncio.SelectorEventLoop(selector), selector.stamp


class Target(object):
    """Where requests go: scheme, host, port, path prefix (``/v1`` is added by the caller)."""

    def __init__(self, url):
        parts = urlsplit(url if "://" in url else "http://" + url)
        if parts.scheme not in ("http", "https"):
            raise ValueError("url must be http:// or https://, got %r" % url)
        if not parts.hostname:
            raise ValueError("url has no host: %r" % url)
        self.url = url
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):
            prefix = prefix[:-3]
        self.prefix = prefix
        default_port = (parts.scheme == "https" and self.port == 443) or (parts.scheme == "http" and self.port == 80)
        self.host_header = self.host if default_port else "%s:%d" % (self.host, self.port)

    def path(self, rel):
        return self.prefix + rel

    def full(self, rel):
        return "%s://%s%s" % (self.scheme, self.host_header, self.path(rel))


class RequestError(Exception):
    """A request failed: ``kind`` is a short category for counting, ``str()`` the detail."""

    def __init__(self, kind, detail):
        Exception.__init__(self, detail)
        self.kind = kind


# Size caps: a read past one is a failure of kind "oversized" (an error answer's body is cut instead).
HEAD_MAX = _http.HEAD_MAX                # the status line and headers of an answer
LINE_MAX = _http.LINE_MAX                # one chunk-size (or trailer) line of a chunked body
EVENT_MAX = 8 * 1024 * 1024              # one server-sent event, not complete yet
JSON_MAX = _http.BODY_MAX                # a JSON answer of the synchronous GETs (/v1/models, the identification)
ERROR_BODY_MAX = _http.ERROR_BODY_MAX    # the body of an answer that is not a stream (an error): cut there


def _oversized(what, cap):
    return RequestError("oversized", "%s passed %s; read no further" % (what, _http.size_text(cap)))


# ---------------------------------------------------------------------------- pure decoders
class ChunkedDecoder(object):
    """Incremental decoder of HTTP/1.1 chunked transfer encoding. ``feed`` returns payload bytes.
    A chunk-size or trailer line longer than ``max_line`` is RequestError 'oversized'."""

    def __init__(self, max_line=LINE_MAX):
        self.max_line = max_line
        self._buf = b""
        self._left = 0          # payload bytes still expected in the current chunk
        self._state = "size"    # size | data | crlf | trailer | done
        self.done = False

    def feed(self, data):
        out = []
        buf = self._buf + data if self._buf else data
        pos = 0
        end = len(buf)
        while pos < end:
            state = self._state
            if state == "data":
                take = min(self._left, end - pos)
                out.append(buf[pos:pos + take])
                pos += take
                self._left -= take
                if self._left == 0:
                    self._state = "crlf"
            elif state == "crlf":
                if end - pos < 2:
                    break
                pos += 2
                self._state = "size"
            elif state == "size":
                nl = buf.find(b"\n", pos)
                if nl < 0:
                    break
                line = buf[pos:nl].split(b";", 1)[0].strip()
                pos = nl + 1
                try:
                    size = int(line, 16)
                except ValueError:
                    raise RequestError("bad_response", "bad chunk size line %r" % line[:40])
                if size == 0:
                    self._state = "trailer"
                else:
                    self._left = size
                    self._state = "data"
            elif state == "trailer":
                nl = buf.find(b"\n", pos)
                if nl < 0:
                    break
                line = buf[pos:nl].strip()
                pos = nl + 1
                if not line:
                    self._state = "done"
                    self.done = True
                    pos = end
            else:
                pos = end
        self._buf = buf[pos:] if pos < end else b""
        if len(self._buf) > self.max_line:  # only a line waits here: a size, trailer or CRLF line, never data
            self._buf = b""
            raise _oversized("a chunk-size line", self.max_line)
        return b"".join(out) if len(out) != 1 else out[0]


class SSEParser(object):
    """Incremental server-sent-events splitter. ``feed`` returns the ``data`` payloads (bytes) of
    the events completed by this read; comments, ``event:`` and ``id:`` lines are skipped.

    Linear in the bytes read: the event not complete yet is kept as a list of pieces (CRLF already made
    LF, but for a CR that ends a read), each read is searched alone for the blank line (and the byte
    before it), and the pieces are joined once, when an event completes. An event that passes
    ``max_event`` bytes before its end is RequestError 'oversized'."""

    def __init__(self, max_event=EVENT_MAX):
        self.max_event = max_event
        self._parts = []        # the incomplete event, never an empty piece
        self._size = 0

    def feed(self, data):
        if self._parts:
            return self._more(data)
        # nothing pending, the usual case: whole events, one or a few per read
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        if b"\n\n" not in data:
            if data:
                self._keep(data)
            return []
        return self._split(data)

    def _more(self, data):
        parts = self._parts
        last = parts[-1]
        if last[-1:] == b"\r" and data[:1] == b"\n":  # a CRLF split across reads
            if len(last) > 1:
                parts[-1] = last[:-1]
            else:
                parts.pop()
            self._size -= 1
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        if b"\n\n" not in data and not (data[:1] == b"\n" and parts and parts[-1][-1:] == b"\n"):
            if data:
                self._keep(data)
            return []
        parts.append(data)
        buf = b"".join(parts)
        self._parts = []
        self._size = 0
        return self._split(buf)

    def _split(self, buf):
        """The data of the events complete in buf; what follows the last blank line is kept for the next read."""
        blocks = buf.split(b"\n\n")
        rest = blocks.pop()
        if rest:
            self._keep(rest)
        return [p for p in (self._data(block) for block in blocks) if p is not None]

    def _keep(self, data):
        self._parts.append(data)
        self._size += len(data)
        if self._size > self.max_event:
            self._parts = []
            self._size = 0
            raise _oversized("one server-sent event", self.max_event)

    def flush(self):
        """The last event of a stream that ended without a blank line."""
        block = b"".join(self._parts)
        self._parts = []
        self._size = 0
        return [p for p in (self._data(block),) if p is not None and block.strip()]

    @staticmethod
    def _data(block):
        if block.startswith(b"data:") and b"\n" not in block:
            return block[6:] if block[5:6] == b" " else block[5:]
        lines = []
        for line in block.split(b"\n"):
            if line.startswith(b"data:"):
                value = line[5:]
                lines.append(value[1:] if value[:1] == b" " else value)
        return b"\n".join(lines) if lines else None


# ---------------------------------------------------------------------------- one request's record
class StreamRecord(object):
    """What one streamed request measured (monotonic seconds)."""

    __slots__ = ("t_send", "t_first", "t_last", "t_end", "n_events", "n_first", "usage", "chunk_usage",
                 "meta_info", "spec_details", "finish_reason", "chars", "done", "error", "error_kind", "status")

    def __init__(self):
        self.t_send = None
        self.t_first = None
        self.t_last = None
        self.t_end = None
        self.n_events = 0        # events that carried generated text
        self.n_first = 1
        self.usage = None
        self.chunk_usage = False  # the server reported usage on content chunks (per-chunk counts)
        self.meta_info = None
        self.spec_details = None  # SGLang's sglext.spec_tokens_details (a list when n > 1)
        self.finish_reason = None
        self.chars = 0
        self.done = False        # saw data: [DONE]
        self.error = None
        self.error_kind = None
        self.status = None

    def _native(self, obj, t):
        """SGLang's native /generate stream (0.5.9 tokenizer_manager.py): each event carries the whole text so
        far and meta_info with the completion tokens so far, which stand in for usage."""
        meta = obj.get("meta_info") or {}
        tokens = meta.get("completion_tokens")
        if len(obj["text"]) > self.chars:
            if self.t_first is None:
                self.t_first = t
                if tokens:
                    self.n_first = tokens
                    self.chunk_usage = True
            self.t_last = t
            self.n_events += 1
            self.chars = len(obj["text"])
        if isinstance(meta.get("finish_reason"), dict):
            self.finish_reason = meta["finish_reason"].get("type")
        if tokens is not None:
            self.usage = {"prompt_tokens": meta.get("prompt_tokens"), "completion_tokens": tokens}

    def on_event(self, payload, t):
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(payload.decode("utf-8"))
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the decoder goes
            self.error_kind, self.error = "bad_event", "event is not JSON: %r" % payload[:80]
            return
        if not isinstance(obj, dict):
            return
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            self.error_kind = "server_error"
            self.error = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            return
        usage = obj.get("usage")
        if "meta_info" in obj:
            self.meta_info = obj["meta_info"]
        if "choices" not in obj and isinstance(obj.get("text"), str):
            self._native(obj, t)
            return
        sglext = obj.get("sglext")
        if isinstance(sglext, dict) and sglext.get("spec_tokens_details"):
            # sglang 0.5.23 serving_completions.py / serving_chat.py: {"choices": [], "sglext": {"spec_tokens_details": {...}}}
            self.spec_details = sglext["spec_tokens_details"]
        content = False
        for choice in obj.get("choices") or ():
            text = choice.get("text")
            if not text:
                delta = choice.get("delta")
                if delta:
                    text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
            if text:
                content = True
                self.chars += len(text)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        if content:
            if self.t_first is None:
                self.t_first = t
                if usage and usage.get("completion_tokens"):
                    self.n_first = usage["completion_tokens"]
                    self.chunk_usage = True
            self.t_last = t
            self.n_events += 1
        if usage:
            self.usage = usage


# ---------------------------------------------------------------------------- the connection
class _Response(object):
    """Parses one HTTP response from raw reads; timestamps come from the caller."""

    def __init__(self, record, future):
        self.record = record
        self.future = future
        self.head = b""
        self.headers = None
        self.mode = None        # chunked | length | close
        self.left = 0
        self.chunked = None
        self.sse = None
        self.body = []
        self.body_size = 0
        self.cut = False        # the body passed ERROR_BODY_MAX: the rest was never read
        self.keep_alive = True

    def feed(self, data, t):
        if self.future.done():  # failed, timed out or cut: what still comes is not read
            return
        if self.headers is None:
            start = max(0, len(self.head) - 3)  # a CRLFCRLF split across reads
            self.head += data
            idx = self.head.find(b"\r\n\r\n", start)
            if idx < 0 or idx > HEAD_MAX:
                if idx >= 0 or len(self.head) > HEAD_MAX:
                    self.head = b""
                    self.keep_alive = False
                    raise _oversized("the response head", HEAD_MAX)
                return
            data = self.head[idx + 4:]
            self._parse_head(self.head[:idx].decode("latin-1"))
            self.head = b""
            if self.future.done():
                return
        if not data:
            if self.mode == "length" and self.left == 0:
                self._finish()
            return
        if self.mode == "chunked":
            payload = self.chunked.feed(data)
        elif self.mode == "length":
            payload = data[:self.left]
            self.left -= len(payload)
        else:
            payload = data
        if payload:
            if self.sse is not None:
                for event in self.sse.feed(payload):
                    self.record.on_event(event, t)
            else:
                self.body.append(payload)
                self.body_size += len(payload)
                if self.body_size > ERROR_BODY_MAX:  # only its message is used: the rest is left unread
                    self.cut = True
                    self.keep_alive = False
                    self._finish()
                    return
        if (self.mode == "chunked" and self.chunked.done) or (self.mode == "length" and self.left <= 0):
            self._finish()

    def _parse_head(self, head):
        lines = head.split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            self.fail("bad_response", "bad status line %r" % lines[0][:80])
            return
        headers = {}
        for line in lines[1:]:
            key, dummy, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        self.headers = headers
        self.record.status = status
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.mode = "chunked"
            self.chunked = ChunkedDecoder()
        elif "content-length" in headers:
            self.mode = "length"
            try:
                self.left = int(headers["content-length"])
            except ValueError:
                self.fail("bad_response", "bad Content-Length %r" % headers["content-length"][:40])
                return
        else:
            self.mode = "close"
        if headers.get("connection", "").lower() == "close" or self.mode == "close" or lines[0].startswith("HTTP/1.0"):
            self.keep_alive = False
        if status == 200 and "text/event-stream" in headers.get("content-type", ""):
            self.sse = SSEParser()

    def eof(self, t):
        if self.future.done():
            return
        if self.mode == "close" and self.headers is not None:
            if self.sse is not None:
                for event in self.sse.flush():
                    self.record.on_event(event, t)
            self._finish()
        else:
            self.fail("dropped", "connection closed before the response was complete")

    def _finish(self):
        self.record.t_end = monotonic()
        if self.sse is not None:
            for event in self.sse.flush():
                self.record.on_event(event, self.record.t_end)
        if not self.future.done():
            self.future.set_result(self)

    def fail(self, kind, detail):
        if not self.future.done():
            self.future.set_exception(RequestError(kind, detail))

    def text(self):
        return b"".join(self.body)[:ERROR_BODY_MAX].decode("utf-8", "replace")

    def error_text(self, default):
        """The message of an answer that is not a stream (its body's error message), saying when it was cut."""
        msg = _error_message(self.text()) or default
        if self.cut:
            msg += " (the body passed %s: read no further)" % _http.size_text(ERROR_BODY_MAX)
        return msg


READ_BUFFER = 256 * 1024


class _Protocol(asyncio.BufferedProtocol):
    """Reads straight into one preallocated buffer (``recv_into``) shared by every connection of
    the process: the loop is single-threaded and each read is consumed before the next one starts.
    A plain ``asyncio.Protocol`` has the transport allocate a fresh 256 KiB ``bytes`` for every
    ``recv()`` and shrink it, which for hundreds of small SSE reads per second cost more CPU than
    the parsing and delayed the arrival timestamps of every other stream."""

    _buffer = bytearray(READ_BUFFER)
    _view = memoryview(_buffer)

    def __init__(self, clock=monotonic):
        self.clock = clock
        self.transport = None
        self.response = None
        self.closed = False

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except (OSError, AttributeError):
                pass

    def get_buffer(self, sizehint):
        return self._view

    def buffer_updated(self, nbytes):
        t = self.clock()
        response = self.response
        if response is not None:
            data = self._buffer[:nbytes]
            try:
                response.feed(bytes(data), t)
            except RequestError as exc:
                response.fail(exc.kind, str(exc))

    def eof_received(self):
        self.closed = True
        if self.response is not None:
            self.response.eof(monotonic())
        return False

    def connection_lost(self, exc):
        self.closed = True
        if self.response is not None:
            self.response.eof(monotonic())


class Connection(object):
    """One keep-alive HTTP/1.1 connection that streams one request at a time."""

    def __init__(self, target, api_key=None, ssl_context=None, clock=monotonic):
        self.target = target
        self.api_key = api_key
        self.ssl_context = ssl_context
        self.clock = clock  # stamps the arrival of each read (StampingSelector.stamp, or monotonic)
        self.protocol = None
        self.opened = 0          # connections opened (1 when keep-alive held throughout)

    async def connect(self):
        loop = asyncio.get_running_loop()
        ctx = None
        if self.target.scheme == "https":
            ctx = self.ssl_context or ssl.create_default_context()
        try:
            _transport, self.protocol = await loop.create_connection(
                lambda: _Protocol(self.clock), self.target.host, self.target.port, ssl=ctx)
        except (OSError, ssl.SSLError) as exc:
            self.protocol = None
            kind = "connection_refused" if isinstance(exc, ConnectionRefusedError) else "connect_error"
            raise RequestError(kind, "cannot connect to %s:%d: %s" % (self.target.host, self.target.port, exc))
        self.opened += 1

    def close(self):
        if self.protocol is not None and self.protocol.transport is not None:
            self.protocol.transport.close()
        self.protocol = None

    async def post(self, rel_path, body, timeout):
        """POST JSON ``body`` (bytes) and return a StreamRecord; failures are set on the record."""
        record = StreamRecord()
        try:
            left = timeout
            if self.protocol is None or self.protocol.closed:
                began = monotonic()
                try:  # the connection counts in the request's time (a task of its own only when connecting)
                    await asyncio.wait_for(self.connect(), timeout)
                except asyncio.TimeoutError:
                    raise RequestError("timeout", "cannot connect to %s:%d within %ss" % (
                        self.target.host, self.target.port, timeout))
                left = max(0.0, timeout - (monotonic() - began))
            response = await self._exchange(rel_path, body, record, left)
            if record.status != 200:
                record.error_kind = "http_%d" % record.status
                record.error = response.error_text("HTTP %d" % record.status)
            elif response.sse is None:
                record.error_kind = "not_a_stream"
                record.error = "expected text/event-stream, got %r" % response.headers.get("content-type")
                if response.cut:
                    record.error += " (its body passed %s: read no further)" % _http.size_text(ERROR_BODY_MAX)
            elif record.error_kind is None and record.t_first is None and not _usage_tokens(record.usage):
                # no text and no usage: nothing shows that anything was generated. (With usage, the
                # request completed with tokens that decode to no text, special tokens for example:
                # it counts, without latencies.)
                record.error_kind, record.error = "no_content", "the stream carried no generated text"
            if not response.keep_alive:
                self.close()
        except RequestError as exc:
            record.error_kind, record.error = exc.kind, str(exc)
            self.close()
        except asyncio.TimeoutError:
            record.error_kind, record.error = "timeout", "no complete response within %ss" % timeout
            self.close()
        if record.t_end is None:
            record.t_end = monotonic()
        return record

    async def _exchange(self, rel_path, body, record, timeout):
        protocol = self.protocol
        future = asyncio.get_running_loop().create_future()
        protocol.response = _Response(record, future)
        head = ["POST %s HTTP/1.1" % self.target.path(rel_path), "Host: " + self.target.host_header,
                "Content-Type: application/json", "Accept: text/event-stream",
                "Content-Length: %d" % len(body), "Connection: keep-alive"]
        if self.api_key:
            head.append("Authorization: Bearer " + self.api_key)
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        # a plain timer instead of asyncio.wait_for, which wraps every request in another task
        timer = future.get_loop().call_later(timeout, _expire, future)
        record.t_send = monotonic()
        protocol.transport.write(data)
        try:
            return await future
        finally:
            timer.cancel()
            protocol.response = None


def _expire(future):
    if not future.done():
        future.set_exception(asyncio.TimeoutError())


def _usage_tokens(usage):
    tokens = (usage or {}).get("completion_tokens")
    return tokens if isinstance(tokens, int) and tokens > 0 else 0


def _error_message(text):
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return text.strip()[:300]
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj.get("message")))
        if isinstance(err, dict):
            return str(err.get("message", err))
        if err is not None:
            return str(err)
    return text.strip()[:300]


# ---------------------------------------------------------------------------- body builders
def request_body(api, model, prompt, output_tokens, ignore_eos, engine=None):
    """The JSON body (bytes) of one streamed request. engine=sglang asks its OpenAI endpoints for the
    per-request speculative-decoding figures (sglang 0.5.23 srt/entrypoints/openai/protocol.py: CompletionRequest
    and ChatCompletionRequest return_spec_tokens_details; 0.5.9 ignores an unknown field, pydantic's default)."""
    body = {"model": model, "max_tokens": output_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0}
    if engine == "sglang" and api in ("completions", "chat"):
        body["return_spec_tokens_details"] = True
    if api == "generate":  # SGLang's native API (GenerateReqInput): sampling parameters of its own
        params = {"max_new_tokens": output_tokens, "temperature": 0}
        if ignore_eos:
            params.update(ignore_eos=True, min_new_tokens=output_tokens)
        return json.dumps({"text": prompt, "sampling_params": params, "stream": True}).encode("utf-8")
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if ignore_eos:
        body["ignore_eos"] = True
        body["min_tokens"] = output_tokens
    return json.dumps(body).encode("utf-8")


def api_path(api):
    return {"chat": "/v1/chat/completions", "generate": "/generate"}.get(api, "/v1/completions")


# ---------------------------------------------------------------------------- synchronous helpers
def http_get(url, api_key=None, timeout=10.0, ssl_context=None, max_body=JSON_MAX):
    """GET ``url`` within ``timeout`` seconds in all: (status, body text). Raises RequestError: kind 'timeout'
    when the whole answer did not come in time, 'oversized' when it passed a cap (its head HEAD_MAX, its body
    max_body; an error answer's body is cut at ERROR_BODY_MAX instead), 'bad_response' when it is not HTTP,
    'unreachable' when the server cannot be reached."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        return _http.request(parts.hostname, parts.port or (443 if https else 80), "GET", path, api_key=api_key,
                             timeout=timeout, https=https, ssl_context=ssl_context, accept="application/json, text/plain",
                             max_body=max_body)
    except socket.timeout as exc:
        raise RequestError("timeout", "GET %s: %s" % (url, exc or "timed out"))
    except _http.Oversized as exc:
        raise RequestError("oversized", "GET %s: %s" % (url, exc))
    except http.client.HTTPException as exc:
        raise RequestError("bad_response", "GET %s: %s" % (url, exc or exc.__class__.__name__))
    except OSError as exc:
        raise RequestError("unreachable", "%s: %s" % (url, exc or exc.__class__.__name__))


def list_models(target, api_key=None, timeout=10.0):
    """Model ids the server offers at /v1/models, in its order, within ``timeout`` seconds in all."""
    url = target.full("/v1/models")
    status, text = http_get(url, api_key, timeout)
    if status != 200:
        raise RequestError("http_%d" % status, "GET %s returned HTTP %d: %s" % (url, status, _error_message(text)))
    try:
        data = json.loads(text).get("data") or []
        return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
    except (ValueError, AttributeError, TypeError, RecursionError):
        raise RequestError("bad_response", "GET %s: not an OpenAI model list: %r" % (url, text[:200]))
