# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Level aggregates from per-request timings, exactly as benchmarking.md defines them."""

from __future__ import annotations


import pytest

import stand_in

stand_in.importable()
from ansible_collections.inferops.serving.plugins.module_utils import _metrics as m  # noqa: E402
from ansible_collections.inferops.serving.plugins.module_utils._openai_stream import StreamRecord  # noqa: E402


def rec(t_send, t_first, t_last, n_out=256, n_events=256, prompt=100, usage=True, error=None):
    r = StreamRecord()
    r.t_send, r.t_first, r.t_last, r.t_end = t_send, t_first, t_last, t_last
    r.n_events = n_events
    if usage:
        r.usage = {"prompt_tokens": prompt, "completion_tokens": n_out}
    if error:
        r.error_kind, r.error, r.t_first = error, "detail of " + error, None
    return r


def test_percentiles_interpolate_like_numpy():
    vals = list(range(1, 101))
    d = m.distribution(vals)
    assert d["p50"] == pytest.approx(50.5) and d["p90"] == pytest.approx(90.1) and d["p99"] == pytest.approx(99.01)
    assert (d["min"], d["max"], d["count"], d["mean"]) == (1, 100, 100, 50.5)
    assert m.distribution([])["count"] == 0 and m.distribution([None])["mean"] is None


def test_request_timings_definitions():
    t = m.request_timings(rec(10.0, 10.05, 12.6))
    assert t["ttft"] == pytest.approx(0.05)
    assert t["e2e"] == pytest.approx(2.6)
    assert t["tpot"] == pytest.approx(2.55 / 255)
    assert t["decode_tps"] == pytest.approx(100.0)
    assert t["e2e_tps"] == pytest.approx(256 / 2.6)
    assert t["tokens_per_chunk"] == 1.0 and t["token_source"] == "usage"


def test_request_timings_several_tokens_per_chunk_and_no_usage():
    t = m.request_timings(rec(0.0, 0.05, 0.9, n_out=256, n_events=86))
    assert t["tpot"] == pytest.approx(0.85 / 255) and t["tokens_per_chunk"] == pytest.approx(256 / 86.0)
    u = m.request_timings(rec(0.0, 0.05, 0.9, n_events=86, usage=False))
    assert u["n_out"] == 86 and u["token_source"] == "content_events" and u["n_in"] is None


def test_aggregate_window_throughput_goodput_and_failures():
    records = [rec(0.0, 0.05, 2.6), rec(0.0, 0.5, 3.0), rec(2.6, 2.65, 5.2), rec(3.0, None, None, error="dropped")]
    records[-1].t_end = 3.1
    out = m.aggregate(records, 2, output_tokens=256, ignore_eos=True, slo={"ttft_ms": 100}, labels={"variant": "a"})
    assert out["duration_s"] == pytest.approx(5.2)
    assert (out["completed"], out["failed"], out["errors"]) == (3, 1, {"dropped": 1})
    assert out["output_throughput"] == pytest.approx(3 * 256 / 5.2, rel=1e-4)
    assert out["input_throughput"] == pytest.approx(300 / 5.2, rel=1e-4)
    assert out["request_throughput"] == pytest.approx(3 / 5.2, rel=1e-4)
    assert out["slo_met"] == 2 and out["goodput"] == pytest.approx(2 / 5.2, rel=1e-3)
    assert out["ttft_ms"]["max"] == pytest.approx(500.0) and out["token_source"] == "usage"
    assert out["labels"] == {"variant": "a"} and out["length_mismatch"] == 0
    assert out["error_samples"]["dropped"] == "detail of dropped"


def test_aggregate_mismatch_mixed_sources_and_no_slo():
    out = m.aggregate([rec(0, 0.1, 1.0, n_out=200), rec(0, 0.1, 1.0, n_events=100, usage=False)], 2, output_tokens=256, ignore_eos=True)
    assert out["length_mismatch"] == 2 and out["goodput"] is None
    assert out["token_source"].startswith("mixed") and out["input_throughput"] is None


def test_meets_slo_each_target():
    t = {"ttft": 0.05, "e2e": 2.0, "tpot": 0.01}
    assert m.meets_slo(t, {"ttft_ms": 60, "tpot_ms": 11, "e2e_ms": 2500})
    assert not m.meets_slo(t, {"tpot_ms": 9})
    assert not m.meets_slo(t, {"e2e_ms": 1999})
    assert not m.meets_slo(dict(t, no_text=True), {"e2e_ms": 9999})


def test_completed_without_text_counts_tokens_not_latencies():
    """A stream whose tokens all decode to no text (usage says 8): completed, in the throughput, not in
    the latency distributions; the window ends when it ended."""
    empty = rec(0.0, None, None, n_out=8, n_events=0)
    empty.t_end = 4.0
    out = m.aggregate([rec(0.0, 0.05, 2.6), empty], 2, output_tokens=8, ignore_eos=False, slo={"e2e_ms": 9000})
    assert out["completed"] == 2 and out["failed"] == 0 and out["no_text"] == 1
    assert out["output_tokens"] == 256 + 8 and out["duration_s"] == 4.0
    assert out["ttft_ms"]["count"] == 1 and out["e2e_ms"]["count"] == 1 and out["tokens_per_chunk"]["count"] == 1
    assert out["slo_met"] == 1


PROM = """# HELP vllm:spec_decode_num_drafts_total x
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} %d
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} %d
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} %d
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} %d
"""


def test_acceptance_from_counter_deltas_not_since_start():
    before = m.parse_prometheus(PROM % (600, 400, 3000, 250))   # since start: 1 + 250/1000 = 1.25
    after = m.parse_prometheus(PROM % (700, 500, 3600, 650))    # window: 1 + 400/200 = 3.0
    acc = m.acceptance_from_counters(before, after)
    assert acc["acceptance_length"] == 3.0 and acc["acceptance_rate"] == pytest.approx(400 / 600.0, rel=1e-3)
    assert m.acceptance_from_counters(before, before) is None
    assert m.acceptance_from_counters({}, after) is None


def test_acceptance_from_sglang_meta_info():
    a, b = rec(0, 0.1, 1), rec(0, 0.1, 1)
    a.meta_info = {"completion_tokens": 256, "spec_verify_ct": 86}
    b.meta_info = {"completion_tokens": 256, "spec_verify_ct": 86}
    assert m.acceptance_from_meta([a, b])["acceptance_length"] == pytest.approx(256 / 86.0, rel=1e-3)
    assert m.acceptance_from_meta([rec(0, 0.1, 1)]) is None
