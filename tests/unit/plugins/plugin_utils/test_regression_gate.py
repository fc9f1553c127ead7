# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the regression gate (plugin_utils/_results_regressions.py): a run against the window of its
history, on the prediction interval and the threshold; unconfirmed below 3 runs; the ack; the window's key."""

from __future__ import annotations

import datetime
import json
import math
import os

import pytest

from ansible_collections.inferops.serving.plugins.plugin_utils import _results_collect, _results_history, _results_run
from ansible_collections.inferops.serving.plugins.plugin_utils import _results_regressions as gate
from ansible_collections.inferops.serving.plugins.plugin_utils import _stats

from bench_shapes import bench_result

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


def rec(run, tput, tpot=10.0, conc=1, fp="f", bench="bench:a", compare=None, host="h", variant="v"):
    labels = {"bench": bench}
    if compare:
        labels["compare"] = compare
    return {"host": host, "variant": variant, "concurrency": conc, "output_throughput": tput, "tpot_ms": tpot,
            "fingerprint": fp, "run": run, "labels": labels}


# an 8 % spread: the runs the issue describes
SPREAD = [100.0, 92.0, 108.0, 96.0, 104.0]


def history(values=None, **kw):
    return [rec("r%d" % pos, value, **kw) for pos, value in enumerate(SPREAD if values is None else values)]


def test_prediction_interval_is_students_for_one_new_value():
    values = [1.0, 2.0, 3.0, 4.0]
    mean, low, high, df = _stats.prediction_interval(values)
    sd = math.sqrt(sum((v - 2.5) ** 2 for v in values) / 3)
    half = 3.182446 * sd * math.sqrt(1 + 1 / 4.0)  # t(0.975, 3) from the printed tables
    assert df == 3 and mean == 2.5 and low == pytest.approx(2.5 - half, rel=1e-6) and high == pytest.approx(2.5 + half, rel=1e-6)
    assert _stats.prediction_interval([5.0]) == (5.0, None, None, None)
    assert _stats.prediction_interval([5.0, 5.0]) == (5.0, 5.0, 5.0, None)
    with pytest.raises(ValueError, match="confidence"):
        _stats.prediction_interval(values, 1.0)


def test_a_run_13_percent_slower_inside_the_spread_of_the_last_five_is_no_regression():
    # the old rule flagged it: 13 % below the one run before (96 -> 83.5 would be -13 %)
    assert gate.find_regressions([rec("new", 87.0)], history(), 10) == []


def test_a_run_far_below_the_window_is_a_confirmed_regression_with_its_interval_and_n():
    (found,) = gate.find_regressions([rec("new", 70.0)], history(), 10)
    assert found["confirmed"] is True and found["n"] == 5 and found["metric"] == "output_throughput"
    geo = math.exp(sum(math.log(v) for v in SPREAD) / 5)
    assert found["before"] == pytest.approx(geo) and found["after"] == 70.0
    assert found["low"] < geo < found["high"] and found["low"] > 70.0
    assert found["confidence"] == pytest.approx(1 - 0.05 / 2)  # two figures judged: throughput and TPOT
    (line,) = gate.regression_lines([found])
    assert line.startswith("REGRESSION: host h, variant v, concurrency 1: output throughput 99.8 \u2192 70.0 tok/s (-29.9 %; "
                           "window geometric mean of N=5 run(s), 97.5 % prediction interval [")
    assert "unconfirmed" not in line


def test_worse_but_within_the_threshold_is_no_regression_even_outside_the_interval():
    steady = history([100.0, 100.5, 99.5, 100.2, 99.8])
    assert gate.find_regressions([rec("new", 95.0)], steady, 10) == []
    assert [r["metric"] for r in gate.find_regressions([rec("new", 95.0)], steady, 3)] == ["output_throughput"]


def test_fewer_than_three_runs_is_unconfirmed_and_says_how_many():
    (found,) = gate.find_regressions([rec("new", 70.0)], history([100.0, 98.0]), 10)
    assert found["confirmed"] is False and found["n"] == 2
    assert "[unconfirmed: 2 run(s) in the window, 3 needed]" in gate.regression_lines([found])[0]
    assert gate.confirmed([found]) == [] and gate.confirmed([found], with_unconfirmed=True) == [found]


def test_the_window_holds_the_last_n_runs_only():
    old_and_slow = history([50.0, 50.0, 50.0] + SPREAD)
    assert gate.windows(old_and_slow, 5)[("h", None, "v", 1, "bench:a", "single")][0]["run"] == "r3"
    assert gate.find_regressions([rec("new", 70.0)], old_and_slow, 10, window=5)[0]["n"] == 5
    assert len(gate.windows(old_and_slow, 3)[("h", None, "v", 1, "bench:a", "single")]) == 3
    assert gate.find_regressions([rec("new", 40.0)], old_and_slow, 10, window=3)[0]["n"] == 3
    with pytest.raises(ValueError, match="regression_window"):
        gate.find_regressions([rec("new", 70.0)], old_and_slow, 10, window=0)


def test_a_runs_figure_is_the_geometric_mean_of_its_repeats():
    runs = [rec("r%d" % (pos // 2), value, compare="c%d" % (pos // 2)) for pos, value in enumerate([90.0, 110.0] * 4)]
    window = gate.windows(runs, 5)[("h", None, "v", 1, "bench:a", "compare")]
    assert len(window) == 4 and window[0]["figures"]["output_throughput"] == pytest.approx(math.sqrt(90.0 * 110.0))


def test_the_window_is_kept_by_bench_digest_and_kind_not_by_fingerprint():
    past = history()
    assert gate.find_regressions([rec("new", 70.0, bench="bench:b")], past, 10) == []  # other benchmark settings
    assert gate.find_regressions([rec("new", 70.0, compare="c1")], past, 10) == []  # a compare's repeat
    (found,) = gate.find_regressions([rec("new", 70.0, fp="g")], past, 10)  # an engine upgrade is judged
    assert found["fingerprint_change"] == ["new", "f", "g"]
    assert "[fingerprint f \u2192 g from run new]" in gate.regression_lines([found])[0]
    inside = history(fp="f")[:3] + [rec("r3", 96.0, fp="g"), rec("r4", 104.0, fp="g")]
    (found,) = gate.find_regressions([rec("new", 70.0, fp="g")], inside, 10)
    assert found["fingerprint_change"] == ["r3", "f", "g"]


def test_an_ack_restarts_the_window_of_the_levels_it_names():
    past = history() + [{"ack": "h/v", "run": "ack1", "time": "t"}] + [rec("r9", 70.0)]
    (found,) = gate.find_regressions([rec("new", 40.0)], past, 10)
    assert found["n"] == 1 and found["confirmed"] is False
    assert gate.find_regressions([rec("new", 70.0)], history(), 10, acks=gate.parse_ack("all")) == []
    assert gate.find_regressions([rec("new", 70.0)], history(), 10, acks=gate.parse_ack("h/v/1")) == []
    assert len(gate.find_regressions([rec("new", 70.0)], history(), 10, acks=gate.parse_ack("h/v/4, g"))) == 1


@pytest.mark.parametrize("bad", ["h/", "/v", "a/b/c/d", " , "])
def test_a_bad_ack_is_refused_naming_what_is_allowed(bad):
    with pytest.raises(gate.AckError, match="'all' or HOST, HOST/VARIANT or HOST/VARIANT/CONCURRENCY"):
        gate.parse_ack(bad)


def collect(result):
    col = _results_collect.RunCollector()
    col.add_play("Bench")
    col.add("h", "throughput_bench", "bench", result)
    return col


def test_finish_records_the_ack_in_the_history_and_the_window_restarts_there(tmp_path):
    out_dir = str(tmp_path)
    for pos, step in enumerate([10.0, 10.4, 9.6]):
        out = _results_run.finish(collect(bench_result(step_ms=step)), out_dir, "b.yml", "2.19", 10,
                                  NOW + datetime.timedelta(minutes=pos))
        assert out.regressions == []
    slow = _results_run.finish(collect(bench_result(step_ms=20.0)), out_dir, "b.yml", "2.19", 10,
                               NOW + datetime.timedelta(minutes=5))
    assert slow.regressions and all(reg["confirmed"] and reg["n"] == 3 for reg in slow.regressions)
    acked = _results_run.finish(collect(bench_result(step_ms=20.0)), out_dir, "b.yml", "2.19", 10,
                                NOW + datetime.timedelta(minutes=6), ack="all")
    assert acked.regressions == [] and any("regression_ack all" in note for note in acked.notes)
    lines = [json.loads(line) for line in open(os.path.join(out_dir, "history.jsonl"))]
    acks = [line for line in lines if "ack" in line]
    assert acks == [{"ack": "all", "run": acked.run["run"], "time": acked.run["time"]}]
    assert lines.index(acks[0]) == 12  # after the 4 earlier runs of 3 levels, before this run's
    assert _results_history.read_history(os.path.join(out_dir, "history.jsonl"))[1] == 0  # an ack is no bad line
    again = _results_run.finish(collect(bench_result(step_ms=20.0)), out_dir, "b.yml", "2.19", 10,
                                NOW + datetime.timedelta(minutes=7))
    assert again.regressions == []
    bad = _results_run.finish(collect(bench_result(step_ms=20.0)), out_dir, "b.yml", "2.19", 10,
                              NOW + datetime.timedelta(minutes=8), ack="h/")
    assert any("regression_ack must be" in warning for warning in bad.warnings)
    with open(bad.paths["run"]) as handle:
        assert json.load(handle)["regression_gate"] == {"window": 5, "ack": None}
