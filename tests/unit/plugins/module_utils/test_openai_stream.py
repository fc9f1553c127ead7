# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The client's pure decoders: chunked transfer encoding, SSE splitting, event interpretation."""

from __future__ import annotations

import asyncio
import json
import random
import time

import pytest

import stand_in

stand_in.importable()
from ansible_collections.inferops.serving.plugins.module_utils import _openai_stream as s  # noqa: E402


def chunked(*parts):
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def feed_bytewise(decoder, data):
    return b"".join(decoder.feed(data[i:i + 1]) for i in range(len(data)))


def test_chunked_decoder_whole_and_bytewise():
    raw = chunked(b"hello ", b"w\xc3", b"\xa9rld" * 100)
    whole = s.ChunkedDecoder()
    assert whole.feed(raw) == b"hello w\xc3\xa9" + b"rld" + b"\xa9rld" * 99
    assert whole.done
    byte = s.ChunkedDecoder()
    assert feed_bytewise(byte, raw) == b"hello w\xc3\xa9rld" + b"\xa9rld" * 99
    assert byte.done


def test_chunked_decoder_extensions_and_trailers():
    d = s.ChunkedDecoder()
    out = d.feed(b"5;ext=1\r\nabcde\r\n0\r\nX-Trailer: 1\r\n\r\n")
    assert out == b"abcde" and d.done


def test_chunked_decoder_bad_size():
    with pytest.raises(s.RequestError) as err:
        s.ChunkedDecoder().feed(b"zz\r\n")
    assert err.value.kind == "bad_response"


def test_sse_parser_splits_events_across_reads_and_crlf():
    p = s.SSEParser()
    stream = b": comment\r\n\r\ndata: {\"a\": 1}\r\n\r\nevent: x\ndata: [DONE]\n\n" + b"data: tail"
    got = []
    for i in range(len(stream)):
        got.extend(p.feed(stream[i:i + 1]))
    assert got == [b'{"a": 1}', b"[DONE]"]
    assert p.flush() == [b"tail"]


def test_sse_parser_multiline_data():
    assert s.SSEParser().feed(b"data: {\"a\":\ndata: 2}\n\n") == [b'{"a":\n2}']


def event(obj):
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def test_record_ignores_role_only_usage_only_and_done():
    r = s.StreamRecord()
    r.t_send = 0.0
    r.on_event(event({"choices": [{"delta": {"role": "assistant", "content": ""}}]}), 0.01)
    assert r.t_first is None
    r.on_event(event({"choices": [{"delta": {"content": "h\u00e9"}}]}), 0.05)
    r.on_event(event({"choices": [{"delta": {"reasoning_content": "x"}, "finish_reason": "length"}]}), 0.06)
    r.on_event(event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}), 0.5)
    r.on_event(b"[DONE]", 0.6)
    assert (r.t_first, r.t_last, r.n_events, r.chars) == (0.05, 0.06, 2, 3)
    assert r.usage["completion_tokens"] == 2 and r.done and r.finish_reason == "length"
    assert not r.chunk_usage and r.n_first == 1


def test_record_per_chunk_usage_sets_n_first():
    r = s.StreamRecord()
    r.on_event(event({"choices": [{"text": "abc"}], "usage": {"completion_tokens": 3}}), 1.0)
    assert r.n_first == 3 and r.chunk_usage


def test_record_error_event_and_bad_json():
    r = s.StreamRecord()
    r.on_event(event({"error": {"message": "boom"}}), 1.0)
    assert r.error_kind == "server_error" and r.error == "boom"
    r2 = s.StreamRecord()
    r2.on_event(b"{not json", 1.0)
    assert r2.error_kind == "bad_event"


def test_split_utf8_inside_an_event_decodes_whole():
    p = s.SSEParser()
    data = b"data: " + event({"choices": [{"text": "\u65e5\U0001f600"}]}) + b"\n\n"
    cut = data.index(b"\xf0") + 2
    events = p.feed(data[:cut]) + p.feed(data[cut:])
    r = s.StreamRecord()
    r.on_event(events[0], 1.0)
    assert r.chars == 2


@pytest.mark.parametrize("url,host,port,prefix", [
    ("http://127.0.0.1:8000", "127.0.0.1", 8000, ""),
    ("http://h:1/v1/", "h", 1, ""),
    ("https://h/proxy/v1", "h", 443, "/proxy"),
    ("localhost:30000", "localhost", 30000, ""),
])
def test_target(url, host, port, prefix):
    t = s.Target(url)
    assert (t.host, t.port, t.prefix) == (host, port, prefix)
    assert t.path("/v1/models") == prefix + "/v1/models"


def test_target_rejects_other_schemes():
    with pytest.raises(ValueError):
        s.Target("ftp://h/")


def test_request_body_fixes_length():
    body = json.loads(s.request_body("chat", "m", "hi", 16, True))
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["min_tokens"] == 16 and body["max_tokens"] == 16
    plain = json.loads(s.request_body("completions", "m", "hi", 16, False))
    assert plain["prompt"] == "hi" and "ignore_eos" not in plain and "min_tokens" not in plain


# ---------------------------------------------------------------------------- linear parsing, size caps
class ReferenceSSEParser(object):
    """SSEParser as it was before it became linear (whole buffer rejoined and searched on every read): the
    semantics the new one must keep."""

    def __init__(self):
        self._buf = b""

    def feed(self, data):
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        if b"\n\n" not in buf:
            self._buf = buf
            return []
        parts = buf.split(b"\n\n")
        self._buf = parts.pop()
        return [p for p in (s.SSEParser._data(block) for block in parts) if p is not None]  # pylint: disable=protected-access

    def flush(self):
        block, self._buf = self._buf, b""
        return [p for p in (s.SSEParser._data(block),) if p is not None and block.strip()]  # pylint: disable=protected-access


def _random_stream(rng):
    """Events of data lines (some multiline, some empty), comments, event: and id: lines, data without a space,
    LF or CRLF line ends chosen per line, sometimes an unterminated last event."""
    out = []
    for dummy in range(rng.randint(0, 12)):
        lines = []
        for dummy2 in range(rng.randint(1, 4)):
            kind = rng.random()
            if kind < 0.6:
                value = "".join(rng.choice("ab{}\": ,x") for dummy3 in range(rng.randint(0, 20)))
                lines.append(("data: " if rng.random() < 0.8 else "data:") + value)
            elif kind < 0.75:
                lines.append(": keep-alive")
            elif kind < 0.9:
                lines.append("event: delta")
            else:
                lines.append("id: %d" % rng.randint(0, 99))
        eol = [rng.choice(["\n", "\r\n"]) for dummy2 in lines] + [rng.choice(["\n", "\r\n"])]
        out.append("".join(line + e for line, e in zip(lines, eol)) + eol[-1])
    if rng.random() < 0.3:
        out.append("data: tail" + rng.choice(["", "\n", "\r\n", "\r"]))
    return "".join(out).encode()


def _run(parser, data, cuts):
    got = []
    prev = 0
    for cut in cuts + [len(data)]:
        got.extend(parser.feed(data[prev:cut]))
        prev = cut
    return got, parser.flush()


def test_sse_parser_matches_the_reference_on_random_streams_and_splits():
    rng = random.Random(26)
    for dummy in range(600):
        data = _random_stream(rng)
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 12)))) if len(data) > 1 else []
        if rng.random() < 0.2:
            cuts = list(range(1, len(data)))  # byte by byte
        assert _run(s.SSEParser(), data, cuts) == _run(ReferenceSSEParser(), data, list(cuts)), (data, cuts)


@pytest.mark.parametrize("data", [
    b"data: a\r\n\r\ndata: b\r\n\r\n", b"data: a\n\ndata: b\n\n", b"data: a\r\n\r\n", b"data: x\r\ndata: y\r\n\r\n",
    b"data: a\r\n\r\n\r\n\r\ndata: b\r\n\r\n",
])
def test_sse_parser_every_split_of_crlf_streams(data):
    for i in range(1, len(data)):
        for j in range(i, len(data)):
            cuts = sorted({i, j})
            assert _run(s.SSEParser(), data, cuts) == _run(ReferenceSSEParser(), data, list(cuts)), (data, cuts)


def test_sse_parser_is_linear_a_50_mb_event_in_256_kib_reads():
    p = s.SSEParser(max_event=64 << 20)
    data = b"data: " + b"x" * (50 << 20)
    read = 256 * 1024
    began = time.monotonic()
    reads = 0
    for i in range(0, len(data), read):
        assert p.feed(data[i:i + read]) == []
        reads += 1
    # the pending event is the reads themselves, never rejoined while it waits: no read rescans the earlier ones
    assert len(p._parts) == reads and p._size == len(data)  # pylint: disable=protected-access
    (got,) = p.feed(b"\n\n")
    took = time.monotonic() - began
    assert len(got) == 50 << 20 and got[:2] == b"xx"
    assert took < 5.0, took  # about 0.3 s here; rejoining and searching it all on every read took 7.8 s
    assert p.feed(b"data: 1\n\n") == [b"1"]


@pytest.mark.parametrize("stream", [b"data: " + b"x" * (9 << 20), b"x" * (9 << 20), b"data: a\n" * (2 << 20)])
def test_an_event_over_the_cap_is_oversized_and_forgotten(stream):
    p = s.SSEParser()
    with pytest.raises(s.RequestError) as raised:
        for i in range(0, len(stream), 256 * 1024):
            p.feed(stream[i:i + 256 * 1024])
    assert raised.value.kind == "oversized" and str(raised.value) == "one server-sent event passed 8 MiB; read no further"
    assert p._size == 0 and p._parts == []  # pylint: disable=protected-access


def test_events_up_to_the_cap_are_read():
    p = s.SSEParser(max_event=100)
    assert p.feed(b"data: " + b"x" * 94) == [] and p.feed(b"\n\n") == [b"x" * 94]
    assert p.feed(b"data: " + b"y" * 200 + b"\n\n") == [b"y" * 200]  # a whole event in one read is never pending


def test_chunked_decoder_caps_a_size_line():
    d = s.ChunkedDecoder()
    for dummy in range(15):
        assert d.feed(b"f" * 4096) == b""
    with pytest.raises(s.RequestError) as raised:
        d.feed(b"f" * 4096 + b"f")
    assert raised.value.kind == "oversized" and "a chunk-size line passed 64 KiB" in str(raised.value)
    d = s.ChunkedDecoder(max_line=16)
    assert d.feed(b"5;name=value\r\nhello\r\n") == b"hello"  # a short extension is fine
    with pytest.raises(s.RequestError):
        d.feed(b"0\r\nX-Trailer: " + b"v" * 20)


def _response(head, body=b"", sse=False):
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        response = s._Response(s.StreamRecord(), future)  # pylint: disable=protected-access
        try:
            response.feed(head + body, 1.0)
        except s.RequestError as exc:
            response.fail(exc.kind, str(exc))
        return response, future
    finally:
        loop.close()


def test_a_response_head_without_end_is_oversized():
    response, future = _response(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: aaaa\r\n" * 6000)
    assert future.done() and future.exception().kind == "oversized"
    assert str(future.exception()) == "the response head passed 64 KiB; read no further"
    response.feed(b"more", 2.0)  # what still comes is dropped
    assert response.head == b""


def test_a_head_split_across_reads_on_its_crlf_is_found():
    loop = asyncio.new_event_loop()
    try:
        response = s._Response(s.StreamRecord(), loop.create_future())  # pylint: disable=protected-access
        raw = b"HTTP/1.1 500 Oops\r\nContent-Length: 2\r\n\r\nno"
        for i in range(len(raw)):
            response.feed(raw[i:i + 1], 1.0)
        assert response.future.done() and response.record.status == 500 and response.text() == "no"
    finally:
        loop.close()


def test_an_error_body_is_cut_at_its_cap():
    head = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n" % (200 << 20)
    response, future = _response(head, b'{"error": {"message": "on fire", "pad": "' + b"x" * (s.ERROR_BODY_MAX + 10))
    assert future.done() and future.result() is response and response.cut and not response.keep_alive
    text = response.error_text("HTTP 500")
    assert text.startswith('{"error": {"message": "on fire"') and text.endswith(" (the body passed 1 MiB: read no further)")


def test_a_bad_content_length_is_a_bad_response():
    dummy, future = _response(b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n")
    assert future.exception().kind == "bad_response"


def test_an_event_nested_too_deep_is_a_bad_event_not_a_crash():
    r = s.StreamRecord()
    r.on_event(b"[" * 100000, 1.0)
    assert r.error_kind == "bad_event"
    assert s._error_message("[" * 100000) == "[" * 300  # pylint: disable=protected-access


def test_connecting_counts_in_the_request_timeout():
    async def never(*args, **kwargs):
        await asyncio.sleep(30)

    async def go():
        conn = s.Connection(s.Target("http://127.0.0.1:9"))
        conn.connect = never
        return await conn.post("/v1/completions", b"{}", 0.3)

    loop = asyncio.new_event_loop()
    try:
        began = time.monotonic()
        record = loop.run_until_complete(go())
        assert time.monotonic() - began < 2.0
    finally:
        loop.close()
    assert record.error_kind == "timeout" and record.error == "cannot connect to 127.0.0.1:9 within 0.3s"
