# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the rollout filters: every filter registered and documented; canary_gate, rollout_verdict and
rollout_settings refuse bad input with a filter error; rollout_summary and rollout_progress read hostvars; the
per-host filters chained as playbooks/rollout.yml chains them."""

from __future__ import annotations

import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.filter import rollout as rollout_filter


def outcome(status, variant="v2", previous="v1"):
    return {"status": status, "variant": variant, "previous": previous}


def test_gate_refuses_a_result_that_is_not_a_level_list():
    with pytest.raises(AnsibleFilterError, match="candidate must be the list of levels"):
        rollout_filter.canary_gate({"results": []}, [])
    with pytest.raises(AnsibleFilterError, match="each level needs concurrency"):
        rollout_filter.canary_gate([{"output_throughput": 1.0}], [])


def test_a_bad_budget_is_refused():
    with pytest.raises(AnsibleFilterError, match="rollout_max_fail_percentage must be a number"):
        rollout_filter.rollout_verdict(["a"], {"a": {}}, "lots")


def test_summary_names_what_every_host_serves_now():
    hostvars = {
        "h1": {"rollout_before": {"reachable": True, "variant": "v1"}, "rollout_outcome": outcome("switched")},
        "h2": {"rollout_before": {"reachable": True, "variant": "v1"},
               "rollout_outcome": outcome("rolled_back", "v1")},
        "h3": {"rollout_before": {"reachable": True, "variant": "v1"},
               "rollout_outcome": dict(outcome("unreachable", None), drained=True)},
        "h4": {"rollout_before": {"reachable": True, "variant": "v1"}},
        "h5": {"rollout_before": {"reachable": False, "variant": None}},
        "h6": {"rollout_before": {"reachable": True, "variant": None}},
    }
    verdict = {"stop": True, "last": False, "reason": "1 of 1 hosts of the batch failed (h2 rolled back)"}
    out = rollout_filter.rollout_summary(sorted(hostvars), hostvars, "v2", verdict)
    assert out["serving"] == {"h1": "v2", "h2": "v1", "h3": None, "h4": "v1", "h5": None, "h6": None}
    assert out["counts"] == {"switched": 1, "rolled_back": 1, "unreachable": 1, "untouched": 3}
    assert out["lines"] == [
        "ROLLOUT of v2: 1 of 6 hosts serve it; stopped: 1 of 1 hosts of the batch failed (h2 rolled back)",
        "h1    serves v2  (switched from v1)",
        "h2    serves v1  (its switch failed and was rolled back)",
        "h3    serves ?  (unreachable during the rollout: unknown (was v1), left drained)",
        "h4    serves v1  (not reached by the rollout)",
        "h5    serves ?  (not reached; unreachable at the survey)",
        "h6    serves nothing  (not reached by the rollout)",
    ]


def test_the_module_registers_exactly_its_filters_each_with_its_documentation():
    filters = rollout_filter.FilterModule().filters()
    assert sorted(filters) == ["canary_gate", "rollout_canary_gate", "rollout_failure", "rollout_host_plan",
                               "rollout_outcome", "rollout_progress", "rollout_scope", "rollout_settings",
                               "rollout_summary", "rollout_verdict"]
    assert all(filters[name] is getattr(rollout_filter, name) for name in filters)
    here = os.path.dirname(os.path.abspath(rollout_filter.__file__))
    assert [name for name in filters if not os.path.isfile(os.path.join(here, "%s.yml" % name))] == []


def test_bad_settings_are_a_filter_error_naming_them():
    with pytest.raises(AnsibleFilterError, match=r"^rollout_settings: Bad rollout settings: rollout_drain_cmd must be "
                                                 r"an argv list of strings .*got the string 'lbctl disable'\.$"):
        rollout_filter.rollout_settings({"rollout_drain_cmd": "lbctl disable", "rollout_slow_canary": None})
    with pytest.raises(AnsibleFilterError, match="rollout_settings: the settings must be a dict, got str"):
        rollout_filter.rollout_settings("keep")
    assert rollout_filter.rollout_settings({"rollout_max_fail_percentage": "10%"})["max_fail_percentage"] == 10.0


def test_progress_reads_the_batches_from_hostvars():
    hostvars = {"a": {"rollout_batch_hosts": ["a"]}, "b": {}, "c": {}}
    assert rollout_filter.rollout_progress(["a", "b", "c"], hostvars) == {"canary": False, "started": 1, "remaining": 2}
    assert rollout_filter.rollout_progress(["b", "c"], hostvars)["canary"]


def test_a_bad_argument_to_a_per_host_filter_is_a_filter_error_naming_the_filter():
    with pytest.raises(AnsibleFilterError, match="rollout_outcome: plan must be a dict, got list"):
        rollout_filter.rollout_outcome("h1", "v2", [])
    with pytest.raises(AnsibleFilterError, match="rollout_host_plan: no .gate. in its arguments"):
        rollout_filter.rollout_host_plan("v2", {})  # not rollout_settings' result
    with pytest.raises(AnsibleFilterError, match="rollout_canary_gate: the benchmark result.s results must be the list of its levels, got dict"):
        rollout_filter.rollout_canary_gate({"results": {"concurrency": 1}}, [], rollout_filter.rollout_settings({}), {})


def test_the_filters_chained_as_the_playbook_chains_them():
    settings = rollout_filter.rollout_settings({"rollout_drain_cmd": ["lb", "off", "h1"], "rollout_min_speedup": None})
    plan = rollout_filter.rollout_host_plan("v2", settings, serving={"variant": "v1", "fingerprint": "a"},
                                            fingerprint="b", switches=True, bench=True, canary=True)
    assert plan["drain"] and plan["bench_before"] and plan["gate"]
    bench = {"results": [{"concurrency": 1, "output_throughput": 50.0, "labels": {"variant": "v2", "fingerprint": "b"}}]}
    gate = rollout_filter.rollout_canary_gate(bench, [{"concurrency": 1, "output_throughput": 100.0}], settings, plan,
                                              "h1", "v2", None)
    assert not gate["passed"] and gate["roll_back"]
    ended = rollout_filter.rollout_outcome("h1", "v2", plan, gate, True, settings)
    assert ended["fail"] and ended["undrain"] and ended["outcome"]["status"] == "gate_rolled_back"
    rescued = rollout_filter.rollout_failure("h1", {"msg": ended["msg"], "failed": True}, ended=ended,
                                             alive={"skipped": True}, switch="", now=None, plan=plan,
                                             before={"reachable": True, "variant": "v1"}, drained=True)
    assert rescued["outcome"] == dict(ended["outcome"], detail=ended["msg"])
    assert rescued["msg"].endswith(". h1 was rolled back to v1.")
    hostvars = {"h1": {"rollout_outcome": rescued["outcome"]}}
    verdict = rollout_filter.rollout_verdict(["h1"], hostvars, settings["max_fail_percentage"], 3)
    assert verdict["stop"] and verdict["reason"] == "the canary gate failed on h1"
