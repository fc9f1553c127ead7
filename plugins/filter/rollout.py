# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""canary_gate, rollout_verdict and rollout_summary: the decisions of playbooks/rollout.yml."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.plugin_utils import _rollout


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


def rollout_summary(hosts, hostvars, variant, verdict=None):
    hosts = list(hosts)
    return _rollout.summary(hosts, _facts(hosts, hostvars, "rollout_before"),
                            _facts(hosts, hostvars, "rollout_outcome"), variant, verdict)


class FilterModule(object):
    def filters(self):
        return {"canary_gate": canary_gate, "rollout_verdict": rollout_verdict, "rollout_summary": rollout_summary}
