# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the variant comparison: medians over repeats, bootstrap intervals, ratios, winner, lines."""

from __future__ import annotations

import copy
import random

import pytest

from ansible_collections.inferops.serving.plugins.plugin_utils import _compare as cmp

from bench_shapes import bench_result, level

HOST = "gpu-node-01"


def lvl(conc, out, tpot=10.0, ttft=50.0, goodput=None, acceptance=None, attainment=None):
    """A throughput_bench level (the module's shape) with the given figures."""
    item = level(conc)
    item.update(output_throughput=out, goodput=goodput, acceptance_length=acceptance, slo_attainment=attainment)
    item["tpot_ms"] = dict(item["tpot_ms"], p50=tpot)
    item["ttft_ms"] = dict(item["ttft_ms"], p50=ttft)
    item["decode_tps_per_request"] = dict(item["decode_tps_per_request"], p50=1000.0 / tpot)
    return item


def repeats(rng, n, concs, out, tpot=10.0, noise=0.01, **kwargs):
    """n repeats of a sweep over concs: output throughput around out * conc, TPOT around tpot, relative noise."""
    return [[lvl(c, out * c * rng.gauss(1.0, noise), tpot * rng.gauss(1.0, noise), **kwargs) for c in concs]
            for _draw in range(n)]


def rows(result, variant=None, concurrency=None, metric=None):
    return [row for row in result["comparisons"]
            if (variant is None or row["variant"] == variant) and (concurrency is None or row["concurrency"] == concurrency)
            and (metric is None or row["metric"] == metric)]


@pytest.fixture
def known():
    """baseline around 100 tok/s per unit of concurrency, nextn 1.42x that with a 1.42x shorter TPOT."""
    rng = random.Random(7)
    return {"baseline": {"repeats": repeats(rng, 5, (1, 8, 32), 100.0)},
            "nextn": {"repeats": repeats(rng, 5, (1, 8, 32), 142.0, tpot=10.0 / 1.42)}}


# ---- the table of metrics ---------------------------------------------------------------------

def test_metrics_read_the_module_shapes_and_skip_what_is_null():
    item = lvl(4, 400.0, tpot=8.0, ttft=40.0)
    assert cmp.read_metric(item, "output_throughput") == 400.0
    assert cmp.read_metric(item, "tpot_ms") == 8.0
    assert cmp.read_metric(item, "ttft_ms") == 40.0
    assert cmp.read_metric(item, "decode_tps_per_request") == 125.0
    assert cmp.read_metric(item, "goodput") is None and cmp.read_metric(item, "acceptance_length") is None
    del item["goodput"]
    assert cmp.read_metric(item, "goodput") is None
    assert cmp.read_metric({"tpot_ms": 7.5}, "tpot_ms") == 7.5  # a history record keeps the p50 only
    assert cmp.read_metric({"output_throughput": True}, "output_throughput") is None
    assert [row[5] for row in cmp.METRICS] == ["higher", "lower", "lower", "higher", "higher", "higher", "higher"]


# ---- summaries and intervals ------------------------------------------------------------------

def test_summary_is_the_median_over_repeats_with_an_interval_around_it():
    reps = [[lvl(1, v), lvl(4, 4 * v)] for v in (98.0, 103.0, 100.0, 99.0, 101.0)]
    summary = cmp.summarize(reps)
    assert list(summary) == [1, 4]
    cell = summary[1]["output_throughput"]
    assert cell["median"] == 100.0 and cell["n"] == 5 and cell["values"] == [98.0, 103.0, 100.0, 99.0, 101.0]
    assert 98.0 <= cell["ci_low"] <= 100.0 <= cell["ci_high"] <= 103.0
    assert summary[4]["output_throughput"]["median"] == 400.0
    assert "goodput" not in summary[1] and "acceptance_length" not in summary[1]


def test_one_repeat_gives_a_degenerate_interval():
    summary = cmp.summarize([[lvl(2, 210.0)]])
    cell = summary[2]["output_throughput"]
    assert (cell["median"], cell["ci_low"], cell["ci_high"], cell["n"]) == (210.0, 210.0, 210.0, 1)
    assert cmp.ratio([100.0], [142.0]) == dict(ratio=1.42, ci_low=pytest.approx(1.42), ci_high=pytest.approx(1.42),
                                               significant=False, base_median=100.0, variant_median=142.0)
    assert cmp.ratio([100.0], [100.0])["significant"] is False


def test_a_repeat_may_be_the_throughput_bench_result_itself():
    summary = cmp.summarize([bench_result((1, 4)), bench_result((1, 4))])
    assert list(summary) == [1, 4] and summary[4]["output_throughput"]["n"] == 2


def test_ratio_of_a_known_speedup_contains_it_and_is_significant():
    rng = random.Random(3)
    base = [rng.gauss(100.0, 1.0) for _draw in range(5)]
    variant = [rng.gauss(142.0, 1.42) for _draw in range(5)]
    out = cmp.ratio(base, variant)
    assert out["ci_low"] <= 1.42 <= out["ci_high"] and out["significant"]
    assert out["ci_low"] <= out["ratio"] <= out["ci_high"]
    assert out["ratio"] == pytest.approx(1.42, rel=0.02)


def test_same_distribution_is_not_significant():
    rng = random.Random(11)
    out = cmp.ratio([rng.gauss(100.0, 2.0) for _draw in range(5)], [rng.gauss(100.0, 2.0) for _draw in range(5)])
    assert out["ci_low"] <= 1.0 <= out["ci_high"] and not out["significant"]


def test_a_zero_base_median_gives_no_ratio():
    assert cmp.ratio([0.0, 0.0, 1.0], [5.0, 5.0, 5.0]) == dict(ratio=None, ci_low=None, ci_high=None, significant=False,
                                                               base_median=0.0, variant_median=5.0)


# ---- the objective ----------------------------------------------------------------------------

def test_objective_is_throughput_at_the_highest_concurrency_or_goodput_under_an_slo():
    levels = [lvl(1, 100.0, goodput=1.0), lvl(32, 2000.0, goodput=9.0), lvl(8, 700.0)]
    assert cmp.objective(levels, False) == ("output_throughput", 32)
    assert cmp.objective(levels, True) == ("goodput", 32)
    assert cmp.objective([lvl(1, 100.0), lvl(8, 700.0)], True) == ("output_throughput", 8)  # no goodput anywhere
    assert cmp.objective(cmp.summarize([levels]), True) == ("goodput", 32)
    assert cmp.objective([], False) == ("output_throughput", None)


# ---- compare ----------------------------------------------------------------------------------

def test_known_speedup_is_found_with_its_interval_and_the_winner(known):
    out = cmp.compare(HOST, known, ["baseline", "nextn"])
    assert out["reference"] == "baseline" and out["winner"] == "nextn" and out["failed_variants"] == []
    assert out["objective"] == {"metric": "output_throughput", "concurrency": 32}
    for conc in (1, 8, 32):
        row, = rows(out, "nextn", conc, "output_throughput")
        assert row["ci_low"] <= 1.42 <= row["ci_high"] and row["significant"] and row["improved"] is True
        assert row["repeats"] == {"baseline": 5, "variant": 5} and row["host"] == HOST and row["baseline"] == "baseline"
        tpot, = rows(out, "nextn", conc, "tpot_ms")
        assert tpot["ci_low"] <= 1 / 1.42 <= tpot["ci_high"] and tpot["significant"] and tpot["improved"] is True
    # no goodput, no acceptance length: no row for them, and the four other metrics at each of three levels
    assert set(row["metric"] for row in out["comparisons"]) == {
        "output_throughput", "tpot_ms", "ttft_ms", "decode_tps_per_request"}
    assert len(out["comparisons"]) == 12
    assert set(out["summaries"]) == {"baseline", "nextn"}
    assert out["summaries"]["nextn"][32]["output_throughput"]["n"] == 5


def test_the_lines_say_it_exactly(known):
    out = cmp.compare(HOST, known, ["baseline", "nextn"])
    row, = rows(out, "nextn", 32, "output_throughput")
    median = out["summaries"]["nextn"][32]["output_throughput"]["median"]
    assert out["lines"] == [
        "compare gpu-node-01: nextn vs baseline at c=32: output \u00d7%.2f [%.2f, %.2f] significant"
        % (row["ratio"], row["ci_low"], row["ci_high"]),
        "compare gpu-node-01: winner nextn (output %.1f tok/s at c=32, median of 5)" % median,
    ]


def test_same_distribution_variants_are_not_significant_and_a_tie_goes_to_the_earlier():
    rng = random.Random(5)
    results = {"a": {"repeats": repeats(rng, 5, (4,), 100.0, noise=0.02)},
               "b": {"repeats": repeats(rng, 5, (4,), 100.0, noise=0.02)}}
    out = cmp.compare(HOST, results, ["a", "b"])
    row, = rows(out, "b", 4, "output_throughput")
    assert row["ci_low"] <= 1.0 <= row["ci_high"] and not row["significant"] and row["improved"] is None
    assert out["lines"][0].endswith(" not significant")
    same = {"a": {"repeats": [[lvl(4, 400.0)]]}, "b": {"repeats": [[lvl(4, 400.0)]]}}
    assert cmp.compare(HOST, same, ["b", "a"])["winner"] == "b"
    assert cmp.compare(HOST, same, ["a", "b"])["winner"] == "a"


def test_the_winner_is_the_known_best_of_several_whatever_the_order():
    rng = random.Random(9)
    results = dict((name, {"repeats": repeats(rng, 3, (1, 16), out)})
                   for name, out in (("baseline", 100.0), ("fast", 150.0), ("faster", 180.0), ("slow", 80.0)))
    for order in (["baseline", "fast", "faster", "slow"], ["slow", "faster", "baseline", "fast"]):
        out = cmp.compare(HOST, results, order)
        assert out["winner"] == "faster" and out["reference"] == order[0]
        assert len([line for line in out["lines"] if " vs " in line]) == 3


def test_lower_is_better_metrics_pick_the_lowest():
    rng = random.Random(13)
    results = {"baseline": {"repeats": repeats(rng, 3, (8,), 100.0, tpot=12.0)},
               "nextn": {"repeats": repeats(rng, 3, (8,), 90.0, tpot=7.0)},
               "vllm_mtp": {"repeats": repeats(rng, 3, (8,), 110.0, tpot=9.0)}}
    order = ["baseline", "nextn", "vllm_mtp"]
    assert cmp.compare(HOST, results, order)["winner"] == "vllm_mtp"
    out = cmp.compare(HOST, results, order, objective_metric="tpot_ms")
    assert out["winner"] == "nextn" and out["objective"] == {"metric": "tpot_ms", "concurrency": 8}
    median = out["summaries"]["nextn"][8]["tpot_ms"]["median"]
    assert out["lines"][-1] == "compare gpu-node-01: winner nextn (TPOT %.2f ms at c=8, median of 3)" % median
    tpot, = rows(out, "nextn", 8, "tpot_ms")
    assert tpot["ratio"] < 1 and tpot["significant"] and tpot["improved"] is True
    assert out["lines"][0].startswith("compare gpu-node-01: nextn vs baseline at c=8: TPOT \u00d70.58 [")


def test_null_goodput_and_acceptance_are_skipped_never_zero():
    rng = random.Random(17)
    results = {"baseline": {"repeats": repeats(rng, 3, (1, 4), 100.0)},  # no SLO, no speculative decoding
               "nextn": {"repeats": repeats(rng, 3, (1, 4), 140.0, goodput=3.0, acceptance=2.9)}}
    out = cmp.compare(HOST, results, ["baseline", "nextn"])
    assert not rows(out, metric="goodput") and not rows(out, metric="acceptance_length")
    assert out["summaries"]["nextn"][4]["acceptance_length"]["median"] == 2.9
    assert "acceptance_length" not in out["summaries"]["baseline"][4]
    assert out["objective"]["metric"] == "output_throughput"  # the reference measured no goodput
    # some repeats with and some without: only the numbers count
    mixed = [[lvl(4, 400.0, acceptance=2.0)], [lvl(4, 410.0, acceptance=None)], [lvl(4, 405.0, acceptance=3.0)]]
    cell = cmp.summarize(mixed)[4]["acceptance_length"]
    assert cell["n"] == 2 and cell["median"] == 2.5


def test_with_an_slo_the_winner_is_judged_on_goodput():
    rng = random.Random(23)
    results = {"baseline": {"repeats": repeats(rng, 3, (1, 16), 100.0, goodput=5.0)},
               "nextn": {"repeats": repeats(rng, 3, (1, 16), 140.0, goodput=4.0)}}
    out = cmp.compare(HOST, results, ["baseline", "nextn"])
    assert out["objective"] == {"metric": "goodput", "concurrency": 16} and out["winner"] == "baseline"
    assert out["lines"][0] == "compare gpu-node-01: nextn vs baseline at c=16: goodput \u00d70.80 [0.80, 0.80] significant"
    assert out["lines"][-1] == "compare gpu-node-01: winner baseline (goodput 5.00 req/s at c=16, median of 3)"


def test_an_slo_disqualifies_a_variant_that_meets_it_too_rarely():
    # nextn has the best goodput but only 85 % of its requests meet the targets; with 90 % required it
    # cannot win, and the next best (batched, 97 %) does; the reference is still what the others are compared with
    rng = random.Random(29)
    results = {"baseline": {"repeats": repeats(rng, 3, (1, 16), 100.0, goodput=5.0, attainment=0.99)},
               "nextn": {"repeats": repeats(rng, 3, (1, 16), 160.0, goodput=7.0, attainment=0.85)},
               "batched": {"repeats": repeats(rng, 3, (1, 16), 120.0, goodput=6.0, attainment=0.97)}}
    order = ["baseline", "nextn", "batched"]
    assert cmp.compare(HOST, results, order)["winner"] == "nextn"  # no threshold: goodput alone
    out = cmp.compare(HOST, results, order, slo_attainment=0.9)
    assert out["winner"] == "batched" and out["objective"] == {"metric": "goodput", "concurrency": 16}
    assert out["disqualified"] == [{"host": HOST, "variant": "nextn", "concurrency": 16, "slo_attainment": 0.85,
                                    "n": 3, "required": 0.9}]
    assert "compare gpu-node-01: nextn disqualified at c=16: 85 % of requests met the SLO (median of 3), under the " \
           "90 % required" in out["lines"]
    assert out["lines"][-1] == "compare gpu-node-01: winner batched (goodput 6.00 req/s at c=16, median of 3)"
    assert rows(out, variant="nextn", concurrency=16, metric="goodput")  # still compared
    assert "- nextn disqualified at c=16: SLO attainment 0.85, under the 0.90 required" in cmp.markdown_table(out)
    # nobody meets 99.5 %: no winner, and the line says why
    none = cmp.compare(HOST, results, order, slo_attainment=0.995)
    assert none["winner"] is None and len(none["disqualified"]) == 3
    assert none["lines"][-1] == "compare gpu-node-01: no winner (no variant met the SLO)"
    # a variant without any attainment (no SLO measured) cannot show it met one
    bare = {"baseline": {"repeats": repeats(rng, 2, (4,), 100.0, goodput=5.0)}}
    assert cmp.compare(HOST, bare, ["baseline"], slo_attainment=0.9)["lines"][-1] == (
        "compare gpu-node-01: no winner (no variant met the SLO)")
    for bad in (0, 1.5, "most", True):
        with pytest.raises(cmp.CompareError, match="slo_attainment must be a share of requests above 0 and at most 1"):
            cmp.compare(HOST, results, order, slo_attainment=bad)


def test_a_failed_variant_is_listed_and_the_reference_is_the_first_that_did_not_fail(known):
    results = dict(known, broken={"failed": "engine exited with code 1", "log_tail": ["Traceback", "OOM"]})
    out = cmp.compare(HOST, results, ["broken", "baseline", "nextn"])
    assert out["reference"] == "baseline" and out["winner"] == "nextn"
    assert out["failed_variants"] == [{"host": HOST, "variant": "broken", "reason": "engine exited with code 1",
                                       "log_tail": ["Traceback", "OOM"]}]
    assert "broken" not in out["summaries"] and not rows(out, "broken")
    assert out["lines"][0] == "compare gpu-node-01: broken failed: engine exited with code 1"
    assert out["lines"][1].startswith("compare gpu-node-01: nextn vs baseline at c=32: output \u00d7")
    assert len(out["lines"]) == 3


def test_every_variant_failed():
    out = cmp.compare(HOST, {"a": {"failed": "port in use"}}, ["a"])
    assert out["reference"] is None and out["winner"] is None and out["comparisons"] == []
    assert out["lines"] == ["compare gpu-node-01: a failed: port in use", "compare gpu-node-01: no winner (every variant failed)"]


def test_one_repeat_each_does_not_crash_gives_degenerate_intervals_and_claims_no_difference():
    results = {"baseline": {"repeats": [[lvl(32, 100.0)]]}, "nextn": {"repeats": [[lvl(32, 142.0)]]}}
    out = cmp.compare(HOST, results, ["baseline", "nextn"])
    assert out["lines"] == ["compare gpu-node-01: nextn vs baseline at c=32: output \u00d71.42 [1.42, 1.42] not significant",
                            "compare gpu-node-01: winner nextn (output 142.0 tok/s at c=32, median of 1)"]


def test_the_objective_level_is_the_highest_every_variant_measured():
    results = {"baseline": {"repeats": [[lvl(1, 100.0), lvl(8, 700.0), lvl(64, 3000.0)]]},
               "nextn": {"repeats": [[lvl(1, 140.0), lvl(8, 900.0)]]}}  # its c=64 level did not run
    out = cmp.compare(HOST, results, ["baseline", "nextn"])
    assert out["objective"] == {"metric": "output_throughput", "concurrency": 8} and out["winner"] == "nextn"
    assert set(row["concurrency"] for row in out["comparisons"]) == {1, 8}


def test_same_input_gives_the_same_output(known):
    before = copy.deepcopy(known)
    first = cmp.compare(HOST, known, ["baseline", "nextn"])
    assert known == before  # the input is not changed
    assert cmp.compare(HOST, copy.deepcopy(known), ["baseline", "nextn"]) == first
    assert cmp.markdown_table(first) == cmp.markdown_table(cmp.compare(HOST, known, ["baseline", "nextn"]))


@pytest.mark.parametrize("results, order, why", [
    ([], ["a"], "results must be a dict"),
    ({"a": {"repeats": [[]]}}, [], "order must be a non-empty list"),
    ({"a": {"repeats": [[]]}}, "a", "order must be a non-empty list"),
    ({"a": {"repeats": [[]]}}, ["a", "b"], "order names b, which results of host gpu-node-01 do not have"),
    ({"a": {"repeats": [[]]}, "b": {"failed": "x"}}, ["a"], "results of host gpu-node-01 have b, which order does not"),
    ({"a": {"levels": []}}, ["a"], "variant a of host gpu-node-01 must be a dict with repeats"),
    ({"a": {"repeats": []}}, ["a"], "repeats must be a non-empty list"),
    ({"a": {"repeats": [[{"output_throughput": 1.0}]]}}, ["a"], "repeat 1, level 1: each level must be a dict with a concurrency"),
    ({"a": {"repeats": ["x"]}}, ["a"], "repeat 1 must be a list of throughput_bench levels"),
])
def test_bad_input_is_refused_naming_what_is_wrong(results, order, why):
    with pytest.raises(cmp.CompareError, match=why):
        cmp.compare(HOST, results, order)


def test_an_unknown_objective_metric_is_refused_naming_the_allowed_ones(known):
    with pytest.raises(cmp.CompareError, match="objective_metric 'speed' is not one of output_throughput, tpot_ms"):
        cmp.compare(HOST, known, ["baseline", "nextn"], objective_metric="speed")


# ---- Markdown ---------------------------------------------------------------------------------

def test_markdown_table_puts_variants_side_by_side(known):
    results = dict(known, broken={"failed": "engine | exited"})
    text = cmp.markdown_table([cmp.compare(HOST, results, ["baseline", "nextn", "broken"])])
    lines = text.splitlines()
    assert lines[0] == "## gpu-node-01"
    assert lines[2] == ("| concurrency | variant | output tok/s | TPOT p50 ms | TTFT p50 ms | decode tok/s | goodput req/s "
                        "| SLO met | acceptance | output vs baseline |")
    body = [line for line in lines if line.startswith("| 32 |")]
    assert [line.split(" | ")[1] for line in body] == ["baseline", "nextn"]
    assert body[0].endswith("| - | - | reference |")
    assert "| \u00d71.4" in body[1] and body[1].endswith("] * |")
    assert len([line for line in lines if line.startswith("| ") and line[2].isdigit()]) == 6
    assert "- broken failed: engine \\| exited" in lines


def verdict(winner, reference="a", failed=()):
    return {"host": HOST, "winner": winner, "reference": reference,
            "failed_variants": [{"host": HOST, "variant": v, "reason": "exited with code 1"} for v in failed]}


@pytest.mark.parametrize("keep, result, before, serve", [
    ("best", verdict("b"), "x", "b"),
    ("best", verdict(None), "x", "x"),  # no winner (none met the SLO): what served before
    ("best", verdict(None), None, None),  # ... and nothing served before: stop
    ("previous", verdict("b"), "x", "x"),
    ("previous", verdict("b"), "", None),
    ("last", verdict("a", failed=["c"]), "x", "b"),  # the last that did not fail
    ("last", verdict(None, reference=None, failed=["a", "b", "c"]), "x", "x"),
    ("c", verdict("b"), "x", "c"),
])
def test_what_serves_after_a_comparison(keep, result, before, serve):
    plan = cmp.keep_plan(result, keep, ["a", "b", "c"], before)
    assert plan["serve"] == serve and plan["stop"] == (serve is None)
    assert plan["fail"] is None if result["reference"] else plan["fail"].startswith(
        "compare %s: every variant failed, nothing was measured (%s serves, as before): a: exited with code 1 | "
        "b: exited with code 1" % (HOST, before or "nothing"))


@pytest.mark.parametrize("slo, attainment, problems", [
    ({"tpot_ms": 50, "ttft_ms": "2000"}, 0.9, []),
    ({}, 1, []),
    ({"tpot": 6}, 0.9, ["slo: 'tpot' is not a target; the targets are ttft_ms, tpot_ms, e2e_ms"]),
    ({"tpot_ms": 0}, 0.9, ["slo: tpot_ms must be a positive number of milliseconds, got 0"]),
    ({"e2e_ms": "soon"}, "0.5", ["slo: e2e_ms must be a positive number of milliseconds, got 'soon'"]),
    ({"ttft_ms": True}, 0.9, ["slo: ttft_ms must be a positive number of milliseconds, got True"]),
    ({}, 0, ["slo_attainment is the share of requests that must meet the SLO, above 0 and at most 1, got 0"]),
    ({}, 1.5, ["slo_attainment is the share of requests that must meet the SLO, above 0 and at most 1, got 1.5"]),
    ("fast", 0.9, ["slo must be a mapping of ttft_ms, tpot_ms, e2e_ms to milliseconds, got 'fast'"]),
])
def test_an_slo_is_checked_as_throughput_bench_checks_it(slo, attainment, problems):
    assert cmp.slo_problems(slo, attainment) == problems
