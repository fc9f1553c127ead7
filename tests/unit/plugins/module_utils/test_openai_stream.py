# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The client's pure decoders: chunked transfer encoding, SSE splitting, event interpretation."""

from __future__ import annotations

import json

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
