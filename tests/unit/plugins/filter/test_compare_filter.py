# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the compare_variants filter: it compares, and refuses bad input naming what is allowed."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.filter import compare as compare_filter

from bench_shapes import bench_result


def test_the_filter_is_registered_and_compares():
    func = compare_filter.FilterModule().filters()["compare_variants"]
    results = {"baseline": {"repeats": [bench_result((1, 4), step_ms=10.0)]},
               "nextn": {"repeats": [bench_result((1, 4), step_ms=5.0)["results"]]},
               "broken": {"failed": "engine exited with code 1"}}
    out = func(results, "h1", ["baseline", "nextn", "broken"])
    assert out["reference"] == "baseline" and out["winner"] == "nextn"
    assert out["objective"] == {"metric": "goodput", "concurrency": 4}  # the shapes carry a goodput
    assert out["lines"][-2:] == ["compare h1: broken failed: engine exited with code 1",
                                 "compare h1: winner nextn (goodput %.2f req/s at c=4, mean of 1)"
                                 % out["summaries"]["nextn"][4]["goodput"]["median"]]


@pytest.mark.parametrize("results, order, objective, why", [
    ("baseline", ["baseline"], None, r"compare_variants: results must be a dict \{variant: \{repeats: .*got str"),
    ({"a": {"repeats": [[]]}}, [], None, "compare_variants: order must be a non-empty list of the variants in run order"),
    ({"a": {}}, ["a"], None, "compare_variants: variant a of host h1 must be a dict with repeats .* or failed"),
    ({"a": [[]]}, ["a"], None, "compare_variants: variant a of host h1 must be a dict with repeats"),
    ({"a": {"repeats": "x"}}, ["a"], None, "compare_variants: variant a of host h1: repeats must be a non-empty list"),
    ({"a": {"repeats": [[]]}}, ["a"], "fast", "compare_variants: objective_metric 'fast' is not one of output_throughput"),
])
def test_bad_input_raises_a_filter_error(results, order, objective, why):
    with pytest.raises(AnsibleFilterError, match=why):
        compare_filter.compare_variants(results, "h1", order, objective)


def test_compare_schedule_takes_repeats_as_ansible_hands_them_and_refuses_a_bad_order():
    func = compare_filter.FilterModule().filters()["compare_schedule"]
    assert [s["variant"] for s in func(["a", "b"], "2", "interleaved")] == ["a", "b", "b", "a"]
    assert func(("a",), 3) == [{"variant": "a", "repeats": 3, "round": 0}]
    with pytest.raises(AnsibleFilterError, match="compare_schedule: compare_order must be one of blocked, interleaved"):
        func(["a"], 2, "random")
    with pytest.raises(AnsibleFilterError, match="compare_schedule: repeats must be a whole number"):
        func(["a"], "x")


def test_compare_variants_refuses_an_unknown_order():
    with pytest.raises(AnsibleFilterError, match="compare_variants: compare_order must be one of"):
        compare_filter.compare_variants({"a": {"repeats": [bench_result((1,), step_ms=5.0)]}}, "h1", ["a"],
                                        compare_order="x")
