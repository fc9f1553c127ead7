# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark client in-process against the timing-exact stand-in, one edge case per run.

Short streams (16 tokens, 2 ms steps) keep each case well under a second; the timing assertions
are loose here (the integration tests check the figures), what is checked is that every stream
shape is read to the end and counted right.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import urllib.request

import pytest

import stand_in

stand_in.importable()
from ansible_collections.inferops.serving.plugins.module_utils import _bench, _openai_stream as s  # noqa: E402

N = 16


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bench(url, api="completions", concurrency=2, requests=4, output_tokens=N, **kw):
    b = _bench.Bench(s.Target(url), "stand-in", api=api, input_tokens=8, output_tokens=output_tokens, timeout=10, **kw)
    results, client = _bench.run(b, [(concurrency, requests, 1)])
    return results[0], client


def stats(url):
    with urllib.request.urlopen(url + "/stats?trace=1", timeout=5) as resp:
        return json.loads(resp.read())


@pytest.mark.parametrize("flags,api", [
    ((), "completions"),
    (("--role-chunk",), "chat"),
    (("--usage", "inline"), "completions"),
    (("--usage", "late", "--late-usage-ms", "30"), "chat"),
    (("--no-done",), "completions"),
    (("--utf8",), "chat"),
    (("--transfer", "close"), "completions"),
    (("--transfer", "close", "--no-done", "--usage", "none"), "chat"),
])
def test_every_stream_shape_is_read_and_counted(flags, api):
    port = free_port()
    with stand_in.stand_in(port, "--ttft-ms", 20, "--step-ms", 2, "--k", 3, *flags) as url:
        res, client = bench(url, api=api)
        trace = stats(url)["trace"]
    assert res["completed"] == 4 and res["failed"] == 0, res["errors"]
    no_usage = "none" in flags
    if no_usage:  # one token counted per content event, and said so: 6 events of up to 3 tokens
        assert res["output_tokens"] == 4 * 6 and res["length_mismatch"] == 4
    else:
        assert res["output_tokens"] == 4 * N and res["length_mismatch"] == 0
    assert res["token_source"] == ("usage" if not no_usage else
                                   "content_events (no usage from the server: one token counted per content event)")
    if not no_usage:
        assert res["tokens_per_chunk"]["p50"] == pytest.approx(N / 6.0, abs=1e-3)  # ceil(16 / 3) chunks
        assert res["tpot_ms"]["p50"] == pytest.approx(5 * 2.0 / (N - 1), rel=0.5)
        assert res["input_tokens_per_request"]["min"] == 8 + (3 if api == "chat" else 0)
    assert res["ttft_ms"]["min"] >= 20.0
    # a late usage chunk must not stretch e2e: e2e ends at the last content event
    assert res["e2e_ms"]["max"] < 20 + 5 * 2 + 25
    assert client["version"] == _bench.CLIENT_VERSION and len(trace) == 4 + 2
    close = "close" in flags
    assert res["connections_opened"] == (2 + 4 if close else 2)  # warm-up + measured; keep-alive: one each


def test_batch_cap_queues_requests_and_the_client_sees_it_in_ttft():
    port = free_port()
    with stand_in.stand_in(port, "--ttft-ms", 20, "--step-ms", 2, "--batch-cap", 2) as url:
        res, dummy = bench(url, concurrency=4, requests=8)
        summary = stats(url)
    assert res["completed"] == 8 and summary["max_active"] == 2
    e2e_ms = 20 + 15 * 2.0
    # two decode at once: half the requests wait a whole stream for a slot
    assert res["ttft_ms"]["max"] >= e2e_ms + 20 and res["ttft_ms"]["min"] < e2e_ms
    assert res["output_throughput"] < 0.75 * 4 * N / (e2e_ms / 1000.0)


def test_dropped_connections_are_counted_not_hidden():
    port = free_port()
    with stand_in.stand_in(port, "--ttft-ms", 10, "--step-ms", 2, "--drop-every", 3) as url:
        res, dummy = bench(url, concurrency=2, requests=6)
    assert res["requests"] == 6 and res["failed"] >= 1 and res["completed"] + res["failed"] == 6
    assert res["errors"].get("dropped") == res["failed"]
    assert "closed before the response was complete" in res["error_samples"]["dropped"]
    assert res["output_throughput"] > 0  # the completed ones still count


def test_spec_decode_counters_are_deltas_over_the_level():
    port = free_port()
    with stand_in.stand_in(port, "--ttft-ms", 10, "--step-ms", 2, "--k", 3, "--metrics") as url:
        res, dummy = bench(url, metrics_url=url + "/metrics")
    # each step after the first accepts k - 1 = 2 drafts: acceptance length 3, not the since-start 1.25
    assert res["acceptance_length"] == pytest.approx(3.0)
    assert res["spec_decode"]["source"].startswith("vllm /metrics")


def test_sglang_native_generate_gives_acceptance_length_and_the_same_timings():
    """SGLang before 0.5.23 has no spec figures on its OpenAI endpoints; its native /generate stream
    carries meta_info.spec_verify_ct (the stand-in's shape read from 0.5.9 tokenizer_manager.py)."""
    port = free_port()
    with stand_in.stand_in(port, "--ttft-ms", 10, "--step-ms", 2, "--k", 4, "--engine", "sglang") as url:
        res, dummy = bench(url, api="generate", engine="sglang")
    assert res["completed"] == 4 and res["failed"] == 0
    assert res["acceptance_length"] == pytest.approx(4.0)
    assert res["spec_decode"]["source"].startswith("sglang native /generate meta_info")
    assert res["tokens_per_chunk"]["p50"] == pytest.approx(4.0)


@pytest.mark.parametrize("k", [2, 4])
def test_acceptance_length_through_each_engines_own_shape(k):
    """The stand-in speaks each engine's real shapes (tests/support/stream_server.py, read from their
    sources): a chunk of k tokens is one speculative step, so the true acceptance length is k."""
    port = free_port()
    common = ("--ttft-ms", 10, "--step-ms", 2, "--k", k, "--spec-tokens", 4)
    with stand_in.stand_in(port, *(common + ("--engine", "sglang"))) as url:
        assert _bench.identify(s.Target(url)) == "sglang"
        # SGLang 0.5.23's OpenAI endpoint, asked for return_spec_tokens_details: the sglext chunk
        sglext, dummy = bench(url, engine="sglang", metrics_url=url + "/metrics")
        # a client that does not ask (or an older SGLang): the counter deltas over the level, not since start
        counters, dummy = bench(url, engine="openai", metrics_url=url + "/metrics")
    assert sglext["acceptance_length"] == pytest.approx(N / math.ceil(N / float(k)))
    assert sglext["spec_decode"]["source"].startswith("sglang sglext.spec_tokens_details")
    assert counters["acceptance_length"] == pytest.approx(N / math.ceil(N / float(k)))
    assert counters["spec_decode"]["source"].startswith("sglang /metrics counter deltas")
    with stand_in.stand_in(free_port(), *(common + ("--engine", "vllm", "--engines", 2))) as url:
        assert _bench.identify(s.Target(url)) == "vllm"
        vllm, dummy = bench(url, engine="vllm", concurrency=2, requests=6, metrics_url=url + "/metrics")
    # both engine series moved (requests alternate between them): their sum is the level's
    assert vllm["acceptance_length"] == pytest.approx(float(k))
    assert vllm["spec_decode"]["acceptance_rate_per_position"] == [1.0] * (k - 1) + [0.0] * (4 - (k - 1))
    with stand_in.stand_in(free_port(), *common) as url:
        assert _bench.identify(s.Target(url)) == "openai"


def test_sglang_gauge_is_the_last_resort_and_says_it_is_rolling():
    from ansible_collections.inferops.serving.plugins.module_utils import _metrics
    text = 'sglang:spec_accept_length{model_name="m"} 3.25\nsglang:num_running_reqs{model_name="m"} 1\n'
    acc = _metrics.acceptance_from_gauge(_metrics.parse_prometheus(text))
    assert acc["acceptance_length"] == 3.25 and acc["rolling"] and "not this level's figure" in acc["source"]
    created = 'vllm:spec_decode_num_drafts_total{engine="0"} 10\nvllm:spec_decode_num_drafts_created{engine="0"} 1.7e9\n'
    assert _metrics.parse_prometheus(created)["vllm:spec_decode_num_drafts_total"] == 10.0  # _created apart


def test_timeout_is_reported_per_request():
    port = free_port()
    with stand_in.stand_in(port, "--ttft-ms", 10, "--step-ms", 200) as url:
        b = _bench.Bench(s.Target(url), "stand-in", input_tokens=8, output_tokens=N, timeout=0.3)
        results, dummy = _bench.run(b, [(1, 2, 0)])
    res = results[0]
    assert res["failed"] == 2 and res["errors"] == {"timeout": 2}


def test_connection_refused_is_a_failed_request():
    port = free_port()
    conn = s.Connection(s.Target("http://127.0.0.1:%d" % port))
    record = asyncio.run(conn.post("/v1/completions", b"{}", 5))
    assert record.error_kind == "connection_refused" and str(port) in record.error
