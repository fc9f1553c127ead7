# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The decisions of playbooks/rollout.yml, each a pure function of plugin_utils/_rollout:
rollout_settings, rollout_progress, rollout_host_plan, canary_gate, rollout_canary_gate,
rollout_outcome, rollout_failure, rollout_verdict, rollout_summary and rollout_scope."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.plugin_utils._lazy import LazyModule

# Imported on first use: Ansible loads every filter file to find one filter (plugin_utils/_lazy.py).
_rollout = LazyModule("_rollout")


def _facts(hosts, hostvars, name):
    """host -> hostvars[host][name] (None where unset); hostvars may be Ansible's or a plain dict."""
    out = {}
    for host in hosts:
        try:
            out[host] = hostvars[host].get(name)
        except KeyError:
            out[host] = None
    return out


def canary_gate(candidate, baseline, min_speedup=0.95, host="?", variant="?", previous=""):
    try:
        return _rollout.canary_gate(candidate, baseline, min_speedup, host, variant, previous)
    except (_rollout.RolloutError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("canary_gate: %s" % exc)


def rollout_verdict(batch, hostvars, max_fail_percentage=0, remaining=0):
    try:
        return _rollout.batch_verdict(batch, _facts(batch, hostvars, "rollout_outcome"), max_fail_percentage,
                                      remaining)
    except _rollout.RolloutError as exc:
        raise AnsibleFilterError("rollout_verdict: %s" % exc)


def _call(name, func, *args, **kwargs):
    try:
        return func(*args, **kwargs)
    except KeyError as exc:
        raise AnsibleFilterError("%s: no %s in its arguments (settings come from rollout_settings, a plan from "
                                 "rollout_host_plan)" % (name, exc))
    except (_rollout.RolloutError, AttributeError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("%s: %s" % (name, exc))


def _mapping(name, what, value):
    if value is None:
        return {}
    if not hasattr(value, "get"):
        raise AnsibleFilterError("%s: %s must be a dict, got %s" % (name, what, type(value).__name__))
    return value


def rollout_scope(switch_plan, selected="all"):
    """The instances a host's first switch of the rollout acts on: the plan's first (a host of instances), else the
    run's own selection."""
    return _call("rollout_scope", _rollout.scope, switch_plan, selected)


def rollout_settings(given):
    """The rollout_* variables (name -> value, None where not given) checked and normalised."""
    return _call("rollout_settings", _rollout.settings, _mapping("rollout_settings", "the settings", given))


def rollout_progress(hosts, hostvars):
    hosts = list(hosts)
    return _rollout.progress(hosts, _facts(hosts, hostvars, "rollout_batch_hosts"))


def rollout_host_plan(variant, settings, serving=None, fingerprint=None, switches=False, bench=False, canary=False):
    return _call("rollout_host_plan", _rollout.host_plan, variant, _mapping("rollout_host_plan", "settings", settings),
                 _mapping("rollout_host_plan", "serving", serving), fingerprint, switches, bench, canary)


def rollout_canary_gate(result, baseline, settings, plan, host="?", variant="?", baseline_error=None):
    return _call("rollout_canary_gate", _rollout.canary_check, _mapping("rollout_canary_gate", "the result", result),
                 baseline, _mapping("rollout_canary_gate", "settings", settings),
                 _mapping("rollout_canary_gate", "plan", plan), host, variant, baseline_error)


def rollout_outcome(host, variant, plan, gate=None, drained=False, settings=None):
    return _call("rollout_outcome", _rollout.outcome, host, variant, _mapping("rollout_outcome", "plan", plan),
                 _mapping("rollout_outcome", "gate", gate), drained, _mapping("rollout_outcome", "settings", settings))


def rollout_failure(host, error, ended=None, alive=None, switch="", now=None, plan=None, before=None, drained=False):
    return _call("rollout_failure", _rollout.failure, host, _mapping("rollout_failure", "error", error),
                 _mapping("rollout_failure", "ended", ended), _mapping("rollout_failure", "alive", alive), switch, now,
                 _mapping("rollout_failure", "plan", plan), _mapping("rollout_failure", "before", before), drained)


def rollout_summary(hosts, hostvars, variant, verdict=None):
    hosts = list(hosts)
    return _rollout.summary(hosts, _facts(hosts, hostvars, "rollout_before"),
                            _facts(hosts, hostvars, "rollout_outcome"), variant, verdict)


class FilterModule(object):
    def filters(self):
        return {"canary_gate": canary_gate, "rollout_verdict": rollout_verdict, "rollout_summary": rollout_summary,
                "rollout_settings": rollout_settings, "rollout_progress": rollout_progress,
                "rollout_host_plan": rollout_host_plan, "rollout_canary_gate": rollout_canary_gate,
                "rollout_outcome": rollout_outcome, "rollout_failure": rollout_failure, "rollout_scope": rollout_scope}
