# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""compare_until: decided. The plan and the stopping rule (_compare_schedule.until_plan, decision, next_step),
the verdict's sequential interval and lines (_compare.compare with sequential), and the promise, measured:
seeded runs through _compare.ratio itself, stopped at the first decided look."""

from __future__ import annotations

import math
import random
import time

import pytest

from ansible_collections.inferops.serving.plugins.plugin_utils import _compare, _compare_schedule, _stats


def test_the_plan_counts_the_looks_and_refuses_what_it_cannot_do():
    plan = _compare_schedule.until_plan(3, 20, 1200)
    assert plan == {"first_look": 3, "max_rounds": 20, "looks": 18, "budget_s": 1200.0, "min_effect": 0.05}
    with pytest.raises(_compare.CompareError, match="compare_order must be interleaved .or unset., got 'blocked'"):
        _compare_schedule.until_plan(3, 20, 1200, order="blocked")
    with pytest.raises(_compare.CompareError, match="repeats must be a whole number, 2 or more"):
        _compare_schedule.until_plan(1, 20, 1200)
    with pytest.raises(_compare.CompareError, match=r"compare_max_repeats \(2\) must be at least repeats \(3\)"):
        _compare_schedule.until_plan(3, 2, 1200)
    with pytest.raises(_compare.CompareError, match="compare_budget_s must be a number of seconds above 0"):
        _compare_schedule.until_plan(3, 20, 0)
    with pytest.raises(_compare.CompareError, match="compare_min_effect must be a share above 0 and below 1"):
        _compare_schedule.until_plan(3, 20, 60, min_effect=5)


def test_the_sequential_confidence_is_bonferroni_over_the_looks():
    assert _stats.sequential_confidence(1) == 0.95
    assert _stats.sequential_confidence(18) == pytest.approx(1 - 0.05 / 18)
    with pytest.raises(ValueError, match="looks"):
        _stats.sequential_confidence(0)


def runs(values):
    return {"repeats": [[{"concurrency": 2, "output_throughput": v}] for v in values]}


def verdict(base, other, rounds, looks=18, **kw):
    return _compare.compare("h", {"a": runs(base), "b": runs(other)}, ["a", "b"], compare_order="interleaved",
                            sequential=dict({"looks": looks, "rounds": rounds, "min_effect": 0.05}, **kw))


def test_a_clear_difference_is_decided_and_the_run_stops_there():
    out = verdict([100, 101, 99, 100], [120, 121, 119, 120], 4)
    row = next(r for r in out["comparisons"] if r["metric"] == "output_throughput")
    fixed = _compare.ratio([100, 101, 99, 100], [120, 121, 119, 120])
    assert row["confidence"] == pytest.approx(1 - 0.05 / 18)
    assert row["ci_low"] < fixed["ci_low"] and row["ci_high"] > fixed["ci_high"]  # wider than the one-look interval
    assert out["sequential"]["decisions"] == {"b": "faster"}
    plan = _compare_schedule.until_plan(3, 20, 600)
    step = _compare_schedule.next_step(out, plan, 4, 100.0)
    assert step == {"stop": True, "why": "decided", "rounds": 4, "decisions": {"b": "faster"}, "round_s": 25.0, "fit": 20,
                    "said": "b faster"}


def test_no_difference_that_matters_is_decided_too_and_an_undecided_one_goes_on():
    same = verdict([100, 100.2, 99.8, 100.1, 99.9] * 2, [100.1, 99.9, 100, 100.2, 99.8] * 2, 10)
    assert same["sequential"]["decisions"] == {"b": "no difference"}
    noisy = verdict([100, 120, 85], [105, 90, 125], 3)
    assert noisy["sequential"]["decisions"] == {"b": None}
    plan = _compare_schedule.until_plan(3, 20, 600)
    assert _compare_schedule.next_step(noisy, plan, 3, 90.0)["stop"] is False
    assert _compare_schedule.next_step(noisy, plan, 3, 590.0) == {
        "stop": True, "why": "budget", "rounds": 3, "decisions": {"b": None}, "round_s": 590.0 / 3, "fit": 0,
        "said": "b undecided"}
    assert _compare_schedule.next_step(noisy, plan, 20, 100.0)["why"] == "maximum"
    assert _compare_schedule.next_step(noisy, plan, 2, 10.0)["stop"] is False  # before the first look


def test_the_verdict_says_the_rounds_and_why_it_stopped():
    out = verdict([100, 101, 99, 100], [120, 121, 119, 120], 4, stopped="decided", budget_s=600)
    line = next(line for line in out["lines"] if "round(s)" in line)
    assert line == ("compare h: ran 4 round(s), stopped: decided (every variant decided); b faster; intervals valid "
                    "at any of 18 planned looks (each at 99.722 %, Bonferroni over the looks)")
    budget = verdict([100, 120, 85], [105, 90, 125], 3, stopped="budget", budget_s=360)
    assert "stopped: budget (the budget of 360 s ran out); b undecided;" in next(line for line in budget["lines"] if "round(s)" in line)


# ---- the promise, measured ---------------------------------------------------------------------------

RUNS = 10000
FIRST, MAX = 3, 20


def optional_stopping(truth, cv, seed, confidence):
    """Interleaved rounds of two variants (log-normal, the given CV), a look after every round from FIRST to MAX,
    stopped at the first decided look (the interval excludes 1 or lies within +-5 %), through _compare.ratio.
    Returns (share read significant at the stop, share decided faster, mean rounds of those decided faster)."""
    rng = random.Random(seed)
    sigma = math.sqrt(math.log(1.0 + cv * cv))
    significant = faster = rounds_faster = 0
    for dummy in range(RUNS):
        base, other = [], []
        for rounds in range(1, MAX + 1):
            base.append(100.0 * math.exp(rng.gauss(0.0, sigma)))
            other.append(100.0 * truth * math.exp(rng.gauss(0.0, sigma)))
            if rounds < FIRST:
                continue
            est = _compare.ratio(base, other, "output_throughput", confidence)
            if est["significant"]:
                significant += 1
                if est["ratio"] > 1.0:
                    faster += 1
                    rounds_faster += rounds
                break
            if 0.95 <= est["ci_low"] and est["ci_high"] <= 1.05:
                break
    return significant / float(RUNS), faster / float(RUNS), (rounds_faster / float(faster) if faster else None)


def _level(variant, run, repeat, conc, duration, warmup, host="h", bench="bench:1", time_="2026-12-06T10:00:00Z"):
    return {"host": host, "variant": variant, "run": run, "repeat": repeat, "concurrency": conc, "duration_s": duration,
            "warmup_s": warmup, "labels": {"bench": bench, "repeat": repeat}, "time": time_}


def _run(host, *servers):
    return {"hosts": {host: {"servers": [{"variant": v, "ready_s": s} for v, s in servers]}}}


PLAN = {"first_look": 2, "max_rounds": 6, "budget_s": 200.0}


def test_the_rounds_expected_to_fit_come_from_the_newest_loads_and_benchmarks_measured_here():
    history = [
        _level("a", "r1", 0, 1, 50.0, 0.0, time_="2026-12-06T09:00:00Z"),  # an older repeat: not the newest
        _level("a", "r2", 1, 1, 3.0, 1.0, time_="2026-12-06T10:00:00Z"),
        _level("a", "r2", 1, 8, 5.0, 1.0, time_="2026-12-06T10:00:09Z"),  # a: 10 s a repeat (levels and warm-ups)
        _level("b", "r2", 1, 1, 4.0, 0.0), _level("b", "r2", 1, 8, 8.0, 0.0),  # b: 12 s
        _level("b", "r3", 0, 1, 99.0, 0.0, bench="bench:other"),  # other settings
        _level("b", "r3", 0, 1, 99.0, 0.0, host="other"),  # another host
    ]
    runs = [_run("h", ("a", 30.0), ("b", 40.0)), {"not": "a run"}, _run("h", ("a", 20.0)), _run("h", ("b", 25.0))]
    got = _compare_schedule.expected_rounds(history, runs, "h", ["a", "b"], "bench:1", PLAN)
    # first round: 22 s of benchmarks + 45 s of loads = 67 s; a later one starts one engine of two: 22 + 22.5
    assert got["round_s"] == 67.0 and got["missing"] == []
    assert got["fit"] == 3  # 67 + 44.5 + 44.5 = 156 s fits in 200 s; a fourth round (200.5 s) does not
    assert got["said"] == ("a first round is expected to take 67 s (engine loads 45 s, benchmarks 22 s, as last "
                           "measured here; each switch's own checks come on top), a later one 44 s: about 3 round(s) "
                           "fit in the budget of 200 s")
    short = _compare_schedule.expected_rounds(history, runs, "h", ["a", "b"], "bench:1", dict(PLAN, budget_s=100.0))
    assert short["fit"] == 1 and short["said"].endswith(" - fewer than the 2 before the first look: raise compare_budget_s")
    capped = _compare_schedule.expected_rounds(history, runs, "h", ["a", "b"], "bench:1", dict(PLAN, budget_s=1e6))
    assert capped["fit"] == 6  # never more than max_rounds


def test_a_variant_never_measured_here_leaves_the_estimate_to_the_first_round():
    history = [_level("a", "r2", 0, 1, 3.0, 1.0)]
    got = _compare_schedule.expected_rounds(history, [_run("h", ("a", 30.0))], "h", ["a", "c"], "bench:1", PLAN)
    assert got["round_s"] is None and got["fit"] is None
    assert got["missing"] == ["c's benchmark", "c's engine load"]
    assert got["said"] == ("no earlier measurement here of c's benchmark, c's engine load with these settings: how many "
                           "rounds fit is said once the first round has measured them")


@pytest.mark.slow_sim
def test_stopping_at_the_first_decided_look_keeps_the_promise():
    start = time.monotonic()
    looks = MAX - FIRST + 1
    sequential = _stats.sequential_confidence(looks)
    false_seq = optional_stopping(1.0, 0.05, 11, sequential)[0]
    false_naive = optional_stopping(1.0, 0.05, 11, 0.95)[0]
    _sig, caught, mean_rounds = optional_stopping(1.10, 0.05, 12, sequential)
    took = time.monotonic() - start
    print("\nsequential compare: %d runs each, first look after %d rounds, at most %d rounds (%d looks), CV 5 %% (%.1f s)"
          % (RUNS, FIRST, MAX, looks, took))
    print("identical variants read significant at the stop: %.2f %% (each look at %.3f %%); naive 95 %% at every look: "
          "%.2f %%" % (100 * false_seq, 100 * sequential, 100 * false_naive))
    print("a true x1.10 decided faster within %d rounds: %.1f %%, after %.1f rounds on average" % (MAX, 100 * caught, mean_rounds or 0.0))
    assert false_seq <= 0.05
    assert caught >= 0.80
    assert false_naive > false_seq  # what the sequential interval is for
