# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a run tells its user, each a pure function of plugin_utils/_run_report: final_check, converge_checks and
plan_words."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.plugin_utils._lazy import LazyModule

# Imported on first use: Ansible loads every filter file to find one filter (plugin_utils/_lazy.py).
_run_report = LazyModule("_run_report")


def final_check(checks, membership=None, router=None):
    """The verdict of the end-of-run check of every instance of a host."""
    try:
        return _run_report.final_check(checks, membership, router)
    except (AttributeError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("final_check: %s" % exc)


def converge_checks(plan, converged, name, measured=False, plans=None, switch_plan=None):
    """The final check's readings that the run already took: its converge call's of a host's one server, or its
    plans' of a set of instances it changed nothing on (not measured)."""
    try:
        return _run_report.converge_checks(plan, converged, name, measured, plans, switch_plan)
    except (AttributeError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("converge_checks: %s" % exc)


def plan_words(switch_plan, plans, behind_router=False):
    """A replica switch's plan, one line per instance in words."""
    try:
        return _run_report.plan_words(switch_plan, plans, behind_router)
    except (AttributeError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("plan_words: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"converge_checks": converge_checks, "final_check": final_check, "plan_words": plan_words}
