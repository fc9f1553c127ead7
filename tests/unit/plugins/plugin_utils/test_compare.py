# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the variant comparison: Student's t, geometric means and their t-intervals, ratios (Welch on
the logs, Fieller for goodput and SLO attainment), winner, lines. Expected figures are computed here from their
definitions (statistics, printed t tables), not read back from the module; test_compare_coverage.py measures
that the intervals keep their promise."""

from __future__ import annotations

import copy
import math
import random
import statistics

import pytest

from ansible_collections.inferops.serving.plugins.plugin_utils import _compare as cmp, _stats

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


# ---- Student's t ------------------------------------------------------------------------------

# t(0.975, df) from printed tables (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2), and the normal limit
T_TABLE = [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (5, 2.5706), (9, 2.2622), (10, 2.2281), (20, 2.0860),
           (30, 2.0423), (100, 1.9840), (1e6, 1.95996), (1e12, 1.95996)]


@pytest.mark.parametrize("df, expected", T_TABLE)
def test_t_quantile_matches_the_printed_tables(df, expected):
    assert _stats.t_quantile(0.975, df) == pytest.approx(expected, abs=6e-5)
    assert _stats.t_quantile(0.025, df) == pytest.approx(-expected, abs=6e-5)  # symmetric


@pytest.mark.parametrize("p, df, expected", [
    (0.995, 1, 63.6567), (0.995, 3, 5.8409), (0.995, 10, 3.1693), (0.95, 2, 2.9200), (0.95, 7, 1.8946), (0.9, 1, 3.0777),
    (0.9, 15, 1.3406)])
def test_t_quantile_at_other_levels(p, df, expected):
    assert _stats.t_quantile(p, df) == pytest.approx(expected, abs=6e-5)
    assert _stats.t_quantile(0.5, df) == 0.0


def test_t_cdf_matches_the_closed_forms_of_one_and_two_degrees_of_freedom():
    for t in (-30.0, -2.0, -0.3, 0.0, 0.7, 4.3027, 12.7062, 100.0):
        assert _stats.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-13)  # Cauchy
        assert _stats.t_cdf(t, 2) == pytest.approx(0.5 + t / (2.0 * math.sqrt(2.0 + t * t)), abs=1e-13)
    assert _stats.t_cdf(1.959963984540054, 1e12) == pytest.approx(0.975, abs=1e-12)


def test_non_integer_degrees_of_freedom_fall_between_their_neighbours_and_invert_the_cdf():
    """Welch's df is rarely whole: 1.3 lies between 1 and 2 (where Hill's approximation alone is 3 % off)."""
    grid = [1.0 + 0.05 * i for i in range(0, 181)]  # 1 to 10
    quantiles = [_stats.t_quantile(0.975, df) for df in grid]
    assert all(a > b for a, b in zip(quantiles, quantiles[1:]))  # falls as df grows
    assert _stats.t_quantile(0.975, 1) > _stats.t_quantile(0.975, 1.3) > _stats.t_quantile(0.975, 2)
    assert _stats.t_quantile(0.975, 2) > _stats.t_quantile(0.975, 2.5) > _stats.t_quantile(0.975, 3)
    for df in (1.0, 1.3, 1.77, 2.5, 3.85, 7.2, 18.6, 250.5):
        for p in (0.6, 0.9, 0.975, 0.999):
            assert _stats.t_cdf(_stats.t_quantile(p, df), df) == pytest.approx(p, abs=1e-12)
    assert _stats.t_quantile(0.975, 1.3) == pytest.approx(7.50053, abs=5e-5)


@pytest.mark.parametrize("p, df", [(0.0, 3), (1.0, 3), (1.5, 3), (0.975, 0), (0.975, -1.0)])
def test_t_quantile_refuses_what_has_no_quantile(p, df):
    with pytest.raises(ValueError):
        _stats.t_quantile(p, df)


# ---- summaries and intervals ------------------------------------------------------------------

T4 = 2.7764451051977987  # t(0.975, 4)


def test_summary_is_the_geometric_mean_over_repeats_with_a_t_interval_on_the_logs():
    values = [98.0, 103.0, 100.0, 99.0, 101.0]
    reps = [[lvl(1, v), lvl(4, 4 * v)] for v in values]
    summary = cmp.summarize(reps)
    assert list(summary) == [1, 4]
    cell = summary[1]["output_throughput"]
    logs = [math.log(v) for v in values]
    half = T4 * statistics.stdev(logs) / math.sqrt(5)
    assert cell["median"] == pytest.approx(statistics.geometric_mean(values), rel=1e-12)
    assert cell["ci_low"] == pytest.approx(math.exp(statistics.fmean(logs) - half), rel=1e-12)
    assert cell["ci_high"] == pytest.approx(math.exp(statistics.fmean(logs) + half), rel=1e-12)
    assert cell["ci_low"] < cell["median"] < cell["ci_high"]
    assert cell["n"] == 5 and cell["values"] == values and cell["estimate"] == "geometric mean"
    assert summary[4]["output_throughput"]["median"] == pytest.approx(4 * statistics.geometric_mean(values), rel=1e-12)
    assert "goodput" not in summary[1] and "acceptance_length" not in summary[1]
    # the interval is multiplicative: farther above the figure than below it
    assert cell["ci_high"] / cell["median"] == pytest.approx(cell["median"] / cell["ci_low"], rel=1e-12)


def test_goodput_and_attainment_are_read_as_means_that_allow_zero():
    reps = [[lvl(8, 800.0, goodput=g, attainment=a)] for g, a in ((0.0, 0.97), (2.0, 1.0), (1.0, 0.99))]
    cell = cmp.summarize(reps)[8]
    half = T_TABLE[1][1] * statistics.stdev([0.0, 2.0, 1.0]) / math.sqrt(3)  # t(0.975, 2)
    assert cell["goodput"]["median"] == pytest.approx(1.0) and cell["goodput"]["estimate"] == "mean"
    assert cell["goodput"]["ci_high"] == pytest.approx(1.0 + half, abs=1e-3)
    assert cell["goodput"]["ci_low"] == 0.0  # 1 - 2.48 cut at 0: a goodput is never negative
    share = cell["slo_attainment"]
    assert share["median"] == pytest.approx(statistics.fmean([0.97, 1.0, 0.99])) and share["estimate"] == "mean"
    assert share["ci_high"] == 1.0 and 0.9 < share["ci_low"] < share["median"]  # a share stops at 1
    # a metric that is never 0 in a healthy run, with a 0 anyway: the mean, no logarithm
    figure, low, high, estimate = cmp.centre([0.0, 50.0, 100.0])
    assert (figure, estimate) == (50.0, "mean") and low == 0.0 and high > 100.0


def test_one_repeat_gives_a_figure_but_no_interval():
    summary = cmp.summarize([[lvl(2, 210.0)]])
    cell = summary[2]["output_throughput"]
    assert (cell["median"], cell["ci_low"], cell["ci_high"], cell["n"]) == (210.0, None, None, 1)
    got = cmp.ratio([100.0], [142.0])
    assert got == dict(ratio=pytest.approx(1.42), ci_low=None, ci_high=None, significant=False, base_median=100.0,
                       variant_median=142.0, estimate="ratio of geometric means", df=None,
                       why="one repeat on each side: no spread to measure the noise with")
    assert cmp.ratio([100.0], [100.0])["significant"] is False
    assert cmp.ratio([100.0, 101.0], [142.0])["why"] == "one repeat on the variant's side: no spread to measure the noise with"
    # equal repeats: their value exactly, and an interval of no width
    assert cmp.centre([7.5, 7.5, 7.5]) == (7.5, 7.5, 7.5, "geometric mean")


def test_a_repeat_may_be_the_throughput_bench_result_itself():
    summary = cmp.summarize([bench_result((1, 4)), bench_result((1, 4))])
    assert list(summary) == [1, 4] and summary[4]["output_throughput"]["n"] == 2


def test_the_ratio_is_of_geometric_means_with_a_welch_interval_on_the_logs():
    base, variant = [100.0, 104.0, 98.0], [150.0, 139.0, 146.0, 144.0]
    out = cmp.ratio(base, variant)
    assert out["estimate"] == "ratio of geometric means"
    assert out["base_median"] == pytest.approx(statistics.geometric_mean(base), rel=1e-12)
    assert out["variant_median"] == pytest.approx(statistics.geometric_mean(variant), rel=1e-12)
    assert out["ratio"] == pytest.approx(statistics.geometric_mean(variant) / statistics.geometric_mean(base), rel=1e-12)
    lb, lv = [math.log(v) for v in base], [math.log(v) for v in variant]
    vb, vv = statistics.variance(lb) / 3, statistics.variance(lv) / 4
    df = (vb + vv) ** 2 / (vb ** 2 / 2 + vv ** 2 / 3)  # Welch-Satterthwaite
    assert out["df"] == pytest.approx(df, rel=1e-12) and 2 < df < 5
    # the interval's ends are exactly t(0.975, df) standard errors from the difference of the mean logs
    diff, se = statistics.fmean(lv) - statistics.fmean(lb), math.sqrt(vb + vv)
    assert _stats.t_cdf((math.log(out["ci_high"]) - diff) / se, df) == pytest.approx(0.975, abs=1e-12)
    assert _stats.t_cdf((math.log(out["ci_low"]) - diff) / se, df) == pytest.approx(0.025, abs=1e-12)
    assert out["significant"] and out["why"] is None
    # symmetric: the other way round is the inverse, interval and all
    back = cmp.ratio(variant, base)
    assert back["ratio"] == pytest.approx(1 / out["ratio"]) and back["ci_low"] == pytest.approx(1 / out["ci_high"])


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


def test_two_repeats_that_differ_by_their_own_spread_are_not_significant():
    """What the bootstrap got wrong: with 2 repeats a side its interval was the range of the resampled
    ratios, and 100/101 against 103/104 read "significant". t(0.975, ~2) = 4.3 standard errors say no."""
    out = cmp.ratio([100.0, 101.0], [103.0, 104.0])
    assert out["ratio"] == pytest.approx(math.sqrt(103.0 * 104.0 / 100.0 / 101.0))
    assert out["ci_low"] < 1.0 < out["ci_high"] and not out["significant"]
    assert out["df"] == pytest.approx(2.0, abs=0.01)


def test_goodput_ratio_is_fiellers_interval_of_the_ratio_of_means():
    base, variant = [5.0, 5.4, 4.8], [0.9, 1.2, 1.0]
    out = cmp.ratio(base, variant, cmp.GOODPUT)
    mb, mv = statistics.fmean(base), statistics.fmean(variant)
    eb, ev = statistics.variance(base) / 3, statistics.variance(variant) / 3
    rho = mv / mb
    df = (ev + rho * rho * eb) ** 2 / ((ev ** 2 + (rho * rho * eb) ** 2) / 2)
    assert out["estimate"] == "ratio of means" and out["ratio"] == pytest.approx(rho)
    assert (out["base_median"], out["variant_median"]) == (pytest.approx(mb), pytest.approx(mv))
    assert out["df"] == pytest.approx(df, rel=1e-12)
    q = _stats.t_quantile(0.975, df)
    for end in (out["ci_low"], out["ci_high"]):  # each end solves (mv - rho mb)^2 = t^2 (ev + rho^2 eb)
        assert (mv - end * mb) ** 2 == pytest.approx(q * q * (ev + end * end * eb), rel=1e-9)
    assert 0.0 < out["ci_low"] < rho < out["ci_high"] < 1.0 and out["significant"]
    assert cmp.ratio(base, base, cmp.GOODPUT)["significant"] is False
    # a goodput of 0 in a repeat is a figure like any other; a ratio of goodputs is never below 0
    noisy = cmp.ratio(base, [0.0, 1.2, 0.6], cmp.GOODPUT)
    assert noisy["ci_low"] == 0.0 and noisy["ratio"] < noisy["ci_high"] < 1.0 and noisy["significant"]


def test_a_zero_reference_gives_no_ratio_and_a_noisy_one_no_interval():
    assert cmp.ratio([0.0, 0.0, 0.0], [5.0, 5.0, 5.0], cmp.GOODPUT) == dict(
        ratio=None, ci_low=None, ci_high=None, significant=False, base_median=0.0, variant_median=5.0,
        estimate="ratio of means", df=None, why="the reference's mean is 0")
    # a throughput with a 0 among its repeats: no logarithm, the mean; so near 0 that Fieller's set is unbounded
    out = cmp.ratio([0.0, 0.0, 1.0], [5.0, 5.0, 5.0])
    assert out["estimate"] == "ratio of means" and out["ratio"] == pytest.approx(15.0)
    assert out["ci_low"] is None and not out["significant"] and "unbounded" in out["why"]
    assert cmp.ratio([], [1.0])["why"] == "no values on the reference's side"


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
    assert median == pytest.approx(statistics.geometric_mean(
        [rep[-1]["output_throughput"] for rep in known["nextn"]["repeats"]]), rel=1e-12)
    assert row["estimate"] == "ratio of geometric means" and row["why"] is None
    assert row["variant_median"] == median
    first, last = [rep[-1]["output_throughput"] for rep in known["baseline"]["repeats"]][::4]
    assert out["lines"] == [
        "compare gpu-node-01: nextn vs baseline at c=32: output \u00d7%.2f [%.2f, %.2f] significant"
        % (row["ratio"], row["ci_low"], row["ci_high"]),
        "compare gpu-node-01: drift of baseline over the comparison: output at c=32 %.1f tok/s on its first repeat, "
        "%.1f tok/s on its last (\u00d7%.2f over 5 repeats)" % (first, last, last / first),
        "compare gpu-node-01: winner nextn (output %.1f tok/s at c=32, geometric mean of 5)" % median,
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
    assert out["lines"][-1] == "compare gpu-node-01: winner nextn (TPOT %.2f ms at c=8, geometric mean of 3)" % median
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
    assert cell["n"] == 2 and cell["median"] == pytest.approx(math.sqrt(2.0 * 3.0))


def test_with_an_slo_the_winner_is_judged_on_goodput():
    rng = random.Random(23)
    results = {"baseline": {"repeats": repeats(rng, 3, (1, 16), 100.0, goodput=5.0)},
               "nextn": {"repeats": repeats(rng, 3, (1, 16), 140.0, goodput=4.0)}}
    out = cmp.compare(HOST, results, ["baseline", "nextn"])
    assert out["objective"] == {"metric": "goodput", "concurrency": 16} and out["winner"] == "baseline"
    # every repeat the same goodput: no noise seen, an interval of no width, and 0.80 is not 1
    assert out["lines"][0] == "compare gpu-node-01: nextn vs baseline at c=16: goodput \u00d70.80 [0.80, 0.80] significant"
    assert out["lines"][-1] == "compare gpu-node-01: winner baseline (goodput 5.00 req/s at c=16, mean of 3)"
    row, = rows(out, "nextn", 16, "goodput")
    assert row["estimate"] == "ratio of means" and out["summaries"]["nextn"][16]["goodput"]["estimate"] == "mean"


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
    assert "compare gpu-node-01: nextn disqualified at c=16: 85 % of requests met the SLO (mean of 3), under the " \
           "90 % required" in out["lines"]
    assert out["lines"][-1] == "compare gpu-node-01: winner batched (goodput 6.00 req/s at c=16, mean of 3)"
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
    assert out["lines"][2].startswith("compare gpu-node-01: drift of baseline over the comparison")
    assert len(out["lines"]) == 4


def test_every_variant_failed():
    out = cmp.compare(HOST, {"a": {"failed": "port in use"}}, ["a"])
    assert out["reference"] is None and out["winner"] is None and out["comparisons"] == []
    assert out["lines"] == ["compare gpu-node-01: a failed: port in use", "compare gpu-node-01: no winner (every variant failed)"]


def test_one_repeat_each_does_not_crash_gives_no_interval_and_claims_no_difference():
    results = {"baseline": {"repeats": [[lvl(32, 100.0)]]}, "nextn": {"repeats": [[lvl(32, 142.0)]]}}
    out = cmp.compare(HOST, results, ["baseline", "nextn"])
    assert out["lines"] == ["compare gpu-node-01: nextn vs baseline at c=32: output \u00d71.42 (no interval: one repeat on "
                            "each side: no spread to measure the noise with)",
                            "compare gpu-node-01: winner nextn (output 142.0 tok/s at c=32, geometric mean of 1)"]
    row, = rows(out, "nextn", 32, "output_throughput")
    assert row["significant"] is False and row["improved"] is None and row["ci_low"] is None
    table = cmp.markdown_table(out)
    assert "| 32 | nextn | 142.0 | " in table and "| \u00d71.42 |" in table  # no interval printed where there is none


def test_a_reference_without_goodput_gives_no_ratio_and_the_line_says_why():
    results = {"a": {"repeats": [[lvl(4, 400.0, goodput=0.0)], [lvl(4, 410.0, goodput=0.0)]]},
               "b": {"repeats": [[lvl(4, 420.0, goodput=1.0)], [lvl(4, 430.0, goodput=2.0)]]}}
    out = cmp.compare(HOST, results, ["a", "b"])
    assert out["objective"]["metric"] == "goodput"
    assert out["lines"][0] == "compare gpu-node-01: b vs a at c=4: goodput ratio undefined (the reference's mean is 0)"


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
    note, = [line for line in lines if line.startswith("Geometric mean")]
    assert "t-interval on the logs" in note and "ratio of the geometric means [95 % Welch" in note
    assert "bootstrap" not in text and "Median" not in text


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


# ---- the order of the runs, and the drift -------------------------------------------------------

def test_blocked_serves_each_variant_once_for_all_its_repeats():
    assert cmp.schedule(["a", "b"], 3) == [{"variant": "a", "repeats": 3, "round": 0},
                                           {"variant": "b", "repeats": 3, "round": 0}]


def test_interleaved_runs_one_repeat_of_each_variant_in_turn_reversed_every_other_round():
    steps = cmp.schedule(["a", "b", "c"], 3, "interleaved")
    assert [(s["variant"], s["round"], s["repeats"]) for s in steps] == [
        ("a", 0, 1), ("b", 0, 1), ("c", 0, 1), ("c", 1, 1), ("b", 1, 1), ("a", 1, 1), ("a", 2, 1), ("b", 2, 1),
        ("c", 2, 1)]


@pytest.mark.parametrize("variants, repeats, order, why", [
    (["a"], 2, "random", "compare_order must be one of blocked, interleaved, got 'random'"),
    (["a"], 0, "blocked", "repeats must be a whole number, 1 or more, got 0"),
    (["a"], True, "blocked", "repeats must be a whole number"),
    ([], 2, "blocked", "variants must be a non-empty list"),
    ([""], 2, "blocked", "variants must be a non-empty list"),
])
def test_schedule_refuses_what_it_cannot_order(variants, repeats, order, why):
    with pytest.raises(cmp.CompareError, match=why):
        cmp.schedule(variants, repeats, order)


def drifting(order, repeats_=4, per_run=0.06):
    """Two identical variants (100 tok/s at c=4) on a host that loses per_run of its speed with every
    benchmark run, in the order given: the runs' figures, as the comparison would collect them."""
    results, run = {}, 0
    for step in cmp.schedule(["a", "b"], repeats_, order):
        for _repeat in range(step["repeats"]):
            speed = 400.0 * (1.0 - per_run) ** run
            results.setdefault(step["variant"], {"repeats": []})["repeats"].append([lvl(4, speed)])
            run += 1
    return results


def test_under_a_drift_blocked_reads_a_difference_that_interleaved_does_not():
    blocked = cmp.compare(HOST, drifting("blocked"), ["a", "b"], compare_order="blocked")
    interleaved = cmp.compare(HOST, drifting("interleaved"), ["a", "b"], compare_order="interleaved")
    slow = rows(blocked, "b", 4, "output_throughput")[0]
    fair = rows(interleaved, "b", 4, "output_throughput")[0]
    assert slow["significant"] and slow["ratio"] == pytest.approx(0.94 ** 4)  # b ran after a, on a slower host
    # a ran at runs 0, 3, 4, 7 and b at 1, 2, 5, 6: the same mean position, so the same geometric mean
    assert not fair["significant"] and fair["ratio"] == pytest.approx(1.0)
    # the drift is shown either way: the reference's first repeat against its last
    assert blocked["drift"]["ratio"] == pytest.approx(0.94 ** 3)
    assert interleaved["drift"]["ratio"] == pytest.approx(0.94 ** 7)
    assert blocked["order"] == "blocked" and interleaved["order"] == "interleaved"
    line = [ln for ln in blocked["lines"] if "drift" in ln][0]
    assert line.startswith("compare %s: drift of a over the comparison (blocked order): output at c=4 400" % HOST), line
    assert "(\u00d70.83 over 4 repeats)" in line
    assert "Drift (interleaved order): a's" in cmp.markdown_table(interleaved)


def test_no_drift_is_claimed_from_one_repeat_and_none_when_not_told_the_order():
    one = cmp.compare(HOST, {"a": {"repeats": [[lvl(4, 400.0)]]}}, ["a"])
    assert one["drift"] is None and one["order"] is None
    assert not [ln for ln in one["lines"] if "drift" in ln]


def test_compare_refuses_an_unknown_order():
    with pytest.raises(cmp.CompareError, match="compare_order must be one of blocked, interleaved"):
        cmp.compare(HOST, {"a": {"repeats": [[lvl(4, 400.0)]]}}, ["a"], compare_order="shuffled")


def test_a_level_measured_before_its_server_was_steady_is_named_in_the_verdict():
    cold = lvl(4, 300.0)
    cold.update(steady=False, warmup_s=120.4, warmup_end="out_of_time")
    warm = lvl(4, 400.0)
    warm.update(steady=True, warmup_s=0.4, warmup_end="steady")
    results = {"a": {"repeats": [[warm], [dict(warm)]]}, "b": {"repeats": [[cold], [dict(warm)]]}}
    out = cmp.compare(HOST, results, ["a", "b"])
    assert out["unsteady"] == [{"variant": "b", "concurrency": 4, "repeat": 0, "warmup_s": 120.4,
                                "warmup_end": "out_of_time", "warmup_windows": None}]
    line = [ln for ln in out["lines"] if "WARNING" in ln]
    assert line == ["compare %s: WARNING b at c=4 was measured before the server was steady (repeat 0 not steady "
                    "after 120.4 s of warm-up): its figures there may be a cold server's; raise warmup_max_s or "
                    "warmup_tolerance" % HOST]
    assert "- WARNING b at c=4 was measured before the server was steady" in cmp.markdown_table(out)
    steady = cmp.compare(HOST, {"a": {"repeats": [[warm]]}, "b": {"repeats": [[warm]]}}, ["a", "b"])
    assert steady["unsteady"] == [] and not [ln for ln in steady["lines"] if "WARNING" in ln]
