# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the rollout filters: canary_gate and rollout_verdict refuse bad input, rollout_summary reads hostvars."""

from __future__ import annotations

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
