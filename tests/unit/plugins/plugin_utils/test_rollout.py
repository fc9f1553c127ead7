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


# ---- settings ---------------------------------------------------------------------------------

DEFAULTS = {"slow_canary": "rollback", "min_speedup": 0.95, "max_fail_percentage": 0.0, "drain_cmd": [],
            "undrain_cmd": [], "hook_host": "localhost", "gate": True}


@pytest.mark.parametrize("given", [None, {}, dict.fromkeys(ro.SETTINGS)])
def test_settings_not_given_take_their_defaults(given):
    assert ro.settings(given) == DEFAULTS


def test_settings_are_normalised():
    out = ro.settings({"rollout_slow_canary": "keep", "rollout_min_speedup": "0", "rollout_max_fail_percentage": "34%",
                       "rollout_drain_cmd": ("lbctl", "disable", "h1", 8080), "rollout_undrain_cmd": ["lbctl", "enable"],
                       "rollout_hook_host": "lb1"})
    assert out == {"slow_canary": "keep", "min_speedup": 0.0, "max_fail_percentage": 34.0,
                   "drain_cmd": ["lbctl", "disable", "h1", "8080"], "undrain_cmd": ["lbctl", "enable"],
                   "hook_host": "lb1", "gate": False}
    assert ro.settings({"rollout_min_speedup": 1, "rollout_max_fail_percentage": 100.0})["min_speedup"] == 1.0
    assert ro.settings({"rollout_min_speedup": ".5", "rollout_max_fail_percentage": "12.5"})["max_fail_percentage"] == 12.5


@pytest.mark.parametrize("name, value, message", [
    ("rollout_slow_canary", "Rollback", "rollout_slow_canary must be rollback or keep, got 'Rollback'"),
    ("rollout_slow_canary", True, "rollout_slow_canary must be rollback or keep, got True"),
    ("rollout_min_speedup", "fast", "rollout_min_speedup must be a number >= 0 (0.95: the canary may be 5% slower, "
                                    "0 turns the gate off), got 'fast'"),
    ("rollout_min_speedup", -0.5, "rollout_min_speedup must be a number >= 0"),
    ("rollout_min_speedup", "1e3", "rollout_min_speedup must be a number >= 0"),
    ("rollout_min_speedup", float("nan"), "rollout_min_speedup must be a number >= 0"),
    ("rollout_min_speedup", True, "rollout_min_speedup must be a number >= 0"),
    ("rollout_max_fail_percentage", "lots", "rollout_max_fail_percentage must be a percent from 0 to 100 "
                                            "(a number, '%' allowed), got 'lots'"),
    ("rollout_max_fail_percentage", 101, "rollout_max_fail_percentage must be a percent from 0 to 100"),
    ("rollout_max_fail_percentage", "-5%", "rollout_max_fail_percentage must be a percent from 0 to 100"),
    ("rollout_max_fail_percentage", False, "rollout_max_fail_percentage must be a percent from 0 to 100"),
    ("rollout_drain_cmd", "lbctl disable h1",
     "rollout_drain_cmd must be an argv list of strings such as [\"lbctl\", \"disable\", \"{{ inventory_hostname }}\"] "
     "(run as is, never by a shell), got the string 'lbctl disable h1'"),
    ("rollout_undrain_cmd", {"cmd": "lbctl"}, "rollout_undrain_cmd must be an argv list of strings"),
    ("rollout_undrain_cmd", ["lbctl", ["enable"], None], "got a list holding NoneType, list"),
    ("rollout_drain_cmd", ["lbctl", True], "got a list holding bool"),
    ("rollout_drain_cmd", [" ", "disable"], "rollout_drain_cmd must start with the program to run"),
    ("rollout_hook_host", "", "rollout_hook_host must be a host name (where the drain hooks run), got ''"),
    ("rollout_hook_host", ["lb1"], "rollout_hook_host must be a host name"),
])
def test_bad_settings_are_refused_naming_the_setting_what_it_may_be_and_the_value(name, value, message):
    with pytest.raises(ro.RolloutError) as err:
        ro.settings({name: value})
    assert str(err.value).startswith("Bad rollout settings: ")
    assert message in str(err.value)


def test_every_bad_setting_is_named_at_once_and_an_unknown_one_is_refused():
    with pytest.raises(ro.RolloutError) as err:
        ro.settings({"rollout_slow_canary": "maybe", "rollout_min_speedup": "x", "rollout_drain_cmd": "lbctl"})
    assert str(err.value).count("; ") == 2 and str(err.value).endswith("got the string 'lbctl'.")
    with pytest.raises(ro.RolloutError, match="unknown rollout setting.s. rollout_slow; known: rollout_slow_canary"):
        ro.settings({"rollout_slow": "keep"})


# ---- canary, plan, gate -----------------------------------------------------------------------

def test_progress_the_first_batch_is_the_canary_and_the_rest_remain():
    hosts = ["a", "b", "c", "d"]
    assert ro.progress(hosts, {}) == {"canary": True, "started": 0, "remaining": 4}
    after = ro.progress(hosts, {"a": ["a"], "b": ["b", "c"], "c": ["b", "c"], "d": None})
    assert after == {"canary": False, "started": 3, "remaining": 1}


def plan(previous="v1", switches=True, bench=True, canary=True, settings=None, variant="v2"):
    return ro.host_plan(variant, settings or ro.settings({"rollout_drain_cmd": ["lb", "off"]}),
                        {"variant": previous, "fingerprint": "fp-old"} if previous else {}, "fp-new",
                        switches, bench, canary)


def test_plan_of_a_switching_canary_drains_benchmarks_first_and_gates():
    assert plan() == {"previous": "v1", "fingerprint": "fp-new", "switches": True, "drain": True,
                      "bench_before": True, "gate": True}


@pytest.mark.parametrize("kwargs, drain, bench_before, gate", [
    ({"switches": False}, False, False, False),               # serves it already: nothing to drain or gate
    ({"switches": "False"}, False, False, False),             # as Ansible may hand a bool over
    ({"canary": False}, True, False, False),                  # later batches: no gate
    ({"bench": False}, True, False, True),                    # no benchmark: the gate says why it is not checked
    ({"previous": None}, True, False, True),                  # nothing served before
    ({"previous": "v2"}, True, False, True),                  # the record names the variant already
    ({"settings": ro.settings({"rollout_min_speedup": 0})}, False, False, False),   # gate off, no hooks
])
def test_plan_branches(kwargs, drain, bench_before, gate):
    out = plan(**kwargs)
    assert (out["drain"], out["bench_before"], out["gate"]) == (drain, bench_before, gate)


def labelled(variant, fingerprint, *pairs):
    return {"results": [dict(level, labels={"variant": variant, "fingerprint": fingerprint}) for level in levels(*pairs)]}


@pytest.mark.parametrize("result, wanted", [
    (labelled("v2", "fp-new", (1, 5.0)), 1),
    (labelled("v1", "fp-new", (1, 5.0)), 0),       # the previous variant's benchmark, left over
    (labelled("v2", "fp-other", (1, 5.0)), 0),
    ({"results": []}, 0), ({}, 0), (None, 0), ({"results": [{"concurrency": 1}]}, 0),
])
def test_only_the_new_variants_own_benchmark_is_the_canarys(result, wanted):
    assert len(ro.new_levels(result, "v2", "fp-new")) == wanted


@pytest.mark.parametrize("policy, roll_back", [("rollback", True), ("keep", False)])
def test_canary_check_gates_the_new_benchmark_and_says_whether_to_roll_back(policy, roll_back):
    settings = ro.settings({"rollout_slow_canary": policy})
    gate = ro.canary_check(labelled("v2", "fp-new", (1, 40.0)), levels((1, 100.0)), settings, plan(), "h1", "v2")
    assert not gate["passed"] and gate["roll_back"] is roll_back and gate["report"] == gate["msg"]
    assert gate["msg"].startswith("CANARY GATE STOPPED THE ROLLOUT on h1: v2 gives 40.0 tok/s")
    fine = ro.canary_check(labelled("v2", "fp-new", (1, 140.0)), levels((1, 100.0)), settings, plan(), "h1", "v2")
    assert fine["passed"] and not fine["roll_back"]


def test_canary_check_report_says_why_the_baseline_is_missing():
    gate = ro.canary_check(labelled("v2", "fp-new", (1, 5.0)), [], ro.settings({}), plan(), "h1", "v2", "bench timed out")
    assert gate["passed"] and not gate["checked"] and not gate["roll_back"]
    assert gate["report"] == "canary gate on h1 not checked: no benchmark of v1 to compare with: bench timed out"
    old = ro.canary_check({"results": levels((1, 5.0))}, levels((1, 5.0)), ro.settings({}), plan(), "h1", "v2")
    assert old["msg"] == "canary gate on h1 not checked: no benchmark of v2"


# ---- how a host ended -------------------------------------------------------------------------

FAILED_GATE = {"passed": False, "checked": True, "msg": "CANARY GATE STOPPED THE ROLLOUT on h1: ..."}


@pytest.mark.parametrize("switches, status", [(True, "switched"), (False, "unchanged")])
def test_outcome_of_a_host_that_ran_through(switches, status):
    gate = {"passed": True, "msg": "canary gate passed on h1"} if switches else {}
    ended = ro.outcome("h1", "v2", plan(switches=switches), gate, switches, ro.settings({}))
    assert ended == {"outcome": {"status": status, "variant": "v2", "previous": "v1", "drained": switches,
                                 "detail": gate.get("msg", "")},
                     "undrain": switches, "fail": False, "msg": ""}


def test_a_slower_canary_rolled_back_serves_the_previous_variant_and_stops_the_rollout():
    ended = ro.outcome("h1", "v2", plan(), FAILED_GATE, True, ro.settings({}))
    assert ended["outcome"] == {"status": "gate_rolled_back", "variant": "v1", "previous": "v1", "drained": True,
                                "detail": FAILED_GATE["msg"]}
    assert ended["fail"] and ended["undrain"]
    assert ended["msg"] == FAILED_GATE["msg"] + ". h1 was rolled back to v1."


def test_a_slower_canary_kept_stays_on_the_new_variant_and_stops_the_rollout():
    ended = ro.outcome("h1", "v2", plan(), FAILED_GATE, False, ro.settings({"rollout_slow_canary": "keep"}))
    assert ended["outcome"]["status"] == "gate_kept" and ended["outcome"]["variant"] == "v2"
    assert ended["fail"] and not ended["undrain"]  # not drained: nothing to put back
    assert ended["msg"] == FAILED_GATE["msg"] + ". h1 was left on v2 (rollout_slow_canary=keep)."


def failure(**kwargs):
    args = {"error": {"msg": "Variant flaky failed on h1"}, "ended": {}, "alive": {"ping": "pong"}, "switch": "",
            "now": "v1", "plan": plan(), "before": {"reachable": True, "variant": "v0"}, "drained": True}
    args.update(kwargs)
    return ro.failure("h1", **args)


def test_failure_rolled_back_serves_again_and_goes_back_into_the_load_balancer():
    out = failure(switch="rolled_back")
    assert out == {"outcome": {"status": "rolled_back", "variant": "v1", "previous": "v1", "drained": True,
                               "detail": "Variant flaky failed on h1"},
                   "undrain": True, "fail": True, "msg": "Variant flaky failed on h1"}


def test_failure_otherwise_is_failed_and_stays_drained_whatever_serves():
    out = failure(switch="restore_failed", now=None)
    assert out["outcome"]["status"] == "failed" and out["outcome"]["variant"] is None
    assert out["fail"] and not out["undrain"] and out["msg"] == "Variant flaky failed on h1"


@pytest.mark.parametrize("alive, error", [
    ({"unreachable": True, "msg": "ssh: connect to host 10.0.0.3 port 22: No route to host"}, {"msg": "timeout"}),
    ({"skipped": True}, {"unreachable": True, "msg": "timeout"}),
])
def test_failure_of_an_unreachable_host_says_so_and_leaves_it_drained(alive, error):
    out = failure(alive=alive, error=error, switch="rolled_back")
    assert out["outcome"] == {"status": "unreachable", "variant": None, "previous": "v1", "drained": True,
                              "detail": "timeout"}
    assert not out["undrain"] and out["fail"]
    assert out["msg"] == ("UNREACHABLE during the rollout: h1 stopped answering (%s); counted as failed, its state "
                          "is unknown. Last error: timeout" % (alive.get("msg") or ""))


@pytest.mark.parametrize("policy, status, variant", [("rollback", "gate_rolled_back", "v1"), ("keep", "gate_kept", "v2")])
def test_failure_after_the_gate_stopped_the_host_keeps_the_gate_status(policy, status, variant):
    ended = ro.outcome("h1", "v2", plan(), FAILED_GATE, True, ro.settings({"rollout_slow_canary": policy}))
    out = failure(ended=ended, error={"msg": ended["msg"]}, alive={"skipped": True}, now=None)
    assert out["outcome"] == {"status": status, "variant": variant, "previous": "v1", "drained": True,
                              "detail": ended["msg"]}
    assert out["undrain"] and out["msg"] == ended["msg"]


def test_failure_before_the_plan_takes_the_previous_variant_from_the_survey():
    out = failure(plan={}, error={}, now="v0")
    assert out["outcome"]["previous"] == "v0" and out["outcome"]["detail"] == "no message"
    assert failure(plan=plan(previous=None))["outcome"]["previous"] is None  # planned: nothing served


@pytest.mark.parametrize("status", ["switched", "unchanged", "rolled_back", "gate_rolled_back", "gate_kept",
                                    "failed", "unreachable"])
def test_a_drained_host_goes_back_into_the_load_balancer_only_when_it_serves(status):
    ending = ro._ending({"status": status, "variant": "v", "previous": "v", "drained": True, "detail": ""})
    assert ending["undrain"] is (status in ro.SERVING)
    assert not ro._ending({"status": status, "variant": "v", "previous": "v", "drained": False, "detail": ""})["undrain"]


@pytest.mark.parametrize("switch_plan, selected, scope", [
    ({"replicated": True, "first": ["r0"], "rest": ["r1", "r2"]}, "all", ["r0"]),  # the canary instance alone
    ({"replicated": True, "first": ["r1", "r2"], "rest": []}, "r1,r2", ["r1", "r2"]),  # every one that switches
    ({"replicated": True, "first": [], "rest": []}, "all", []),  # nothing switches: nothing to act on
    ({"replicated": False}, "all", "all"),  # a one-server host: the run's own selection
    ({}, None, "all"),  # before the plan (rollout_replicas starts empty)
    (None, "", "all"),
])
def test_the_rollouts_first_switch_acts_on_the_plans_first_or_the_runs_selection(switch_plan, selected, scope):
    assert ro.scope(switch_plan, selected) == scope
