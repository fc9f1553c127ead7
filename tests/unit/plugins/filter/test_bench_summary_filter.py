# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the bench_summary filters: bench_summary (a throughput_bench result as compact rows for
set_stats / AWX artifacts) and bench_repeats (its levels, one list per repeat), each refusing input of the
wrong type with an AnsibleFilterError that names what it expects."""

from __future__ import annotations

import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.filter import bench_summary as summary_filter

from bench_shapes import bench_result, level

ROW_KEYS = ["host", "variant", "fingerprint", "concurrency", "repeat", "completed", "failed", "output_throughput",
            "decode_tps_per_request", "e2e_tps_per_request", "ttft_ms", "tpot_ms", "acceptance_length"]


def _with_repeat(lvl, repeat):
    return dict(lvl, labels=dict(lvl["labels"], repeat=repeat))


def test_the_module_registers_exactly_its_filters():
    filters = summary_filter.FilterModule().filters()
    assert filters == {"bench_summary": summary_filter.bench_summary, "bench_repeats": summary_filter.bench_repeats}
    here = os.path.dirname(os.path.abspath(summary_filter.__file__))
    assert [name for name in filters if not os.path.isfile(os.path.join(here, "%s.yml" % name))] == []


def test_one_row_per_level_with_the_p50s_and_the_host():
    result = bench_result((1, 8), step_ms=5.0, k=2, variant="nextn", fingerprint="sha256:f", acceptance_length=2.0)
    rows = summary_filter.bench_summary(result, "gpu-1")
    assert [list(row) for row in rows] == [ROW_KEYS, ROW_KEYS]
    first = rows[0]
    assert (first["host"], first["variant"], first["fingerprint"], first["concurrency"]) == (
        "gpu-1", "nextn", "sha256:f", 1)
    assert first["ttft_ms"] == 50.0 and first["tpot_ms"] == 2.5 and first["decode_tps_per_request"] == 400.0
    assert first["completed"] == 2 and first["failed"] == 0 and first["acceptance_length"] == 2.0
    assert first["output_throughput"] == pytest.approx(result["results"][0]["output_throughput"])
    assert rows[1]["concurrency"] == 8 and rows[1]["completed"] == 16
    assert first["repeat"] is None  # a single benchmark; a compare's repeats carry their index


def test_the_rows_of_repeats_carry_their_repeat_index():
    result = bench_result((1,))
    result["results"][0]["labels"] = dict(result["results"][0].get("labels") or {}, repeat=2)
    rows = summary_filter.bench_summary(result, "gpu-1")
    assert [row["repeat"] for row in rows] == [2]


def test_without_a_host_the_rows_have_no_host_key():
    rows = summary_filter.bench_summary(bench_result((4,)))
    assert list(rows[0]) == ROW_KEYS[1:]
    assert rows[0]["variant"] == "baseline" and rows[0]["fingerprint"] == "fp-baseline"


def test_each_repeat_gives_its_own_rows_and_an_unlabelled_variant_is_default():
    levels = [_with_repeat(level(c), r) for r in (0, 1) for c in (1, 4)]
    for lvl in levels:
        del lvl["labels"]["variant"]
    rows = summary_filter.bench_summary({"changed": False, "results": levels}, "h")
    assert [(row["concurrency"], row["variant"]) for row in rows] == [(1, "default"), (4, "default")] * 2


@pytest.mark.parametrize("result", [{"rc": 0}, {"results": []}, {"results": "x"}, {"results": [{"item": 1}]}, {}])
def test_a_result_without_levels_gives_no_rows(result):
    assert summary_filter.bench_summary(result, "h") == []


@pytest.mark.parametrize("result, kind", [([], "list"), ("text", "str"), (None, "NoneType"), (3, "int")])
def test_bench_summary_refuses_what_is_not_a_result(result, kind):
    with pytest.raises(AnsibleFilterError, match=r"^bench_summary expects a throughput_bench result \(a dict\), "
                                                 r"got %s$" % kind):
        summary_filter.bench_summary(result, "h")


def test_bench_repeats_groups_the_levels_by_repeat_in_the_order_met():
    levels = [_with_repeat(level(1), 1), _with_repeat(level(4), 1), _with_repeat(level(1), 0),
              _with_repeat(level(4), "0")]
    groups = summary_filter.bench_repeats(levels)
    assert [[(lvl["concurrency"], lvl["labels"]["repeat"]) for lvl in group] for group in groups] == [
        [(1, 1), (4, 1)], [(1, 0), (4, "0")]]  # "0" is repeat 0, as bench_facts reads it
    plain = [level(1), level(4)]
    assert summary_filter.bench_repeats(plain) == [plain]
    assert summary_filter.bench_repeats([]) == []


@pytest.mark.parametrize("levels, kind", [({"results": []}, "dict"), (None, "NoneType"), ("x", "str")])
def test_bench_repeats_refuses_what_is_not_a_results_list(levels, kind):
    with pytest.raises(AnsibleFilterError, match=r"^bench_repeats expects the results list of a throughput_bench "
                                                 r"result, got %s$" % kind):
        summary_filter.bench_repeats(levels)
