# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the rollout decisions: canary gate, batch verdict, fleet summary."""

from __future__ import annotations

import pytest

from ansible_collections.inferops.serving.plugins.plugin_utils import _rollout as ro


def levels(*pairs):
    return [{"concurrency": conc, "output_throughput": tps, "labels": {}} for conc, tps in pairs]


# ---- canary gate ------------------------------------------------------------------------------

def test_gate_passes_when_every_level_is_at_least_min_speedup():
    gate = ro.canary_gate(levels((1, 96.0), (32, 2000.0)), levels((1, 100.0), (32, 1500.0)), 0.95, "h1", "v2", "v1")
    assert gate["checked"] and gate["passed"]
    assert gate["worst"]["concurrency"] == 1 and gate["worst"]["ratio"] == pytest.approx(0.96)
    assert gate["msg"].startswith("canary gate passed on h1: v2 vs v1, worst 0.96x")


def test_gate_fails_on_the_worst_level_and_names_host_figure_and_level():
    gate = ro.canary_gate(levels((1, 99.0), (32, 1200.0)), levels((1, 100.0), (32, 1500.0)), 0.95, "gpu-07", "v2", "v1")
    assert gate["checked"] and not gate["passed"]
    assert gate["worst"] == {"concurrency": 32, "baseline": 1500.0, "candidate": 1200.0, "ratio": pytest.approx(0.8)}
    assert gate["msg"].startswith(
        "CANARY GATE STOPPED THE ROLLOUT on gpu-07: v2 gives 1200.0 tok/s output throughput at concurrency 32, "
        "0.80x the 1500.0 tok/s that v1 gave on gpu-07 just before; rollout_min_speedup is 0.95")


def test_gate_at_exactly_min_speedup_passes():
    assert ro.canary_gate(levels((4, 95.0)), levels((4, 100.0)), 0.95)["passed"]


def test_gate_compares_only_levels_both_measured_and_skips_zero_baselines():
    gate = ro.canary_gate(levels((1, 10.0), (8, 50.0)), levels((8, 100.0), (16, 0.0)), 0.4)
    assert [row["concurrency"] for row in gate["levels"]] == [8] and gate["passed"]


@pytest.mark.parametrize("candidate, baseline, previous, why", [
    (levels((1, 5.0)), [], "", "nothing served before"),
    ([], [], "v1", "no benchmarks (serving_bench empty"),
    (levels((1, 5.0)), [], "v1", "no benchmark of v1 to compare with"),
    ([], levels((1, 5.0)), "v1", "no benchmark of v2"),
    (levels((1, 5.0)), levels((2, 5.0)), "v1", "no concurrency level measured by both"),
])
def test_gate_without_numbers_to_compare_is_not_checked_and_says_why(candidate, baseline, previous, why):
    gate = ro.canary_gate(candidate, baseline, 0.95, "h1", "v2", previous)
    assert not gate["checked"] and gate["passed"]
    assert gate["msg"].startswith("canary gate on h1 not checked: " + why)


# ---- batch verdict ----------------------------------------------------------------------------

def outcome(status, variant="v2", previous="v1"):
    return {"status": status, "variant": variant, "previous": previous}


def test_a_clean_batch_goes_on_and_the_last_one_is_final():
    out = {"h2": outcome("switched"), "h3": outcome("unchanged")}
    going = ro.batch_verdict(["h2", "h3"], out, 0, remaining=2)
    assert not going["stop"] and not going["final"] and going["reason"] == "every host of the batch converged"
    assert ro.batch_verdict(["h2", "h3"], out, 0, remaining=0)["final"]


@pytest.mark.parametrize("pct, stop", [(0, True), (33, True), (34, False), ("34%", False), (100, True)])
def test_failures_must_exceed_the_budget_and_a_fully_failed_batch_always_stops(pct, stop):
    out = {"a": outcome("switched"), "b": outcome("unreachable", None), "c": outcome("switched")}
    verdict = ro.batch_verdict(["a", "b", "c"], out, pct, remaining=3)
    assert verdict["stop"] is (pct != 100 and stop)
    assert verdict["failed"] == ["b unreachable"]
    every = ro.batch_verdict(["b"], out, 100, remaining=3)
    assert every["stop"] and "every host of the batch" in every["reason"]


def test_a_host_without_an_outcome_counts_as_failed():
    verdict = ro.batch_verdict(["a", "b"], {"a": outcome("switched")}, 50, remaining=1)
    assert verdict["failed"] == ["b no outcome"] and not verdict["stop"]
    assert "within rollout_max_fail_percentage 50%" in verdict["reason"]


def test_a_failed_canary_gate_stops_whatever_the_budget():
    out = {"a": outcome("gate_kept", "v2"), "b": outcome("switched")}
    verdict = ro.batch_verdict(["a", "b"], out, 100, remaining=2)
    assert verdict["stop"] and verdict["gate"] == ["a"] and verdict["reason"] == "the canary gate failed on a"


def test_the_verdict_says_which_hosts_exceeded_the_budget():
    out = {"a": outcome("rolled_back", "v1"), "b": outcome("switched")}
    reason = ro.batch_verdict(["a", "b"], out, 0, remaining=4)["reason"]
    assert reason == "1 of 2 hosts of the batch failed (a rolled back), more than rollout_max_fail_percentage 0%"


# ---- summary ----------------------------------------------------------------------------------

def test_summary_of_failures_says_whether_anything_serves():
    hostvars = {"a": {"rollout_outcome": outcome("failed", None)}, "b": {"rollout_outcome": outcome("failed", "v1")},
                "c": {"rollout_outcome": outcome("gate_kept", "v2")}}
    lines = ro.summary(["a", "b", "c"], {}, {h: v["rollout_outcome"] for h, v in hostvars.items()}, "v2")["lines"]
    assert lines[0] == "ROLLOUT of v2: 1 of 3 hosts serve it"
    within = {"stop": False, "last": True, "failed": ["a failed"], "reason": "1 of 3 hosts of the batch failed (a failed), within"}
    assert ro.summary(["a"], {}, {}, "v2", within)["lines"][0] == "ROLLOUT of v2: 0 of 1 hosts serve it; " + within["reason"]
    assert lines[1:] == ["a     serves nothing  (failed: nothing serves)", "b     serves v1  (failed: still serves it)",
                         "c     serves v2  (slower canary, left on it)"]
