# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters of compare.yml and tune.yml: the variants benchmarked on one host, compared with repeats and
confidence intervals (compare_variants); what serves afterwards (compare_keep); whether -e slo and
-e slo_attainment are valid (slo_problems)."""

from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.plugin_utils._lazy import LazyModule

# Imported on first use: Ansible loads every filter file to find one filter (plugin_utils/_lazy.py).
_compare = LazyModule("_compare")
_compare_schedule = LazyModule("_compare_schedule")
_results_history = LazyModule("_results_history")
# stands for a default that lives in a module not imported yet
_DEFAULT = object()


def compare_variants(results, host, order, objective_metric=None, slo_attainment=None, compare_order=None, sequential=None):
    try:
        return _compare.compare(host, results, order, objective_metric, slo_attainment=slo_attainment,
                                compare_order=compare_order, sequential=sequential or None)
    except _compare.CompareError as exc:
        raise AnsibleFilterError("compare_variants: %s" % exc)


def compare_schedule(variants, repeats, order="blocked"):
    try:
        return _compare.schedule(list(variants), int(repeats) if isinstance(repeats, str) and repeats.isdigit()
                                 else repeats, order)
    except _compare.CompareError as exc:
        raise AnsibleFilterError("compare_schedule: %s" % exc)


def _whole(value):
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


def _number(value):
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value


def compare_until_plan(repeats, max_repeats, budget_s, min_effect=_DEFAULT, order="interleaved"):
    """compare_until: decided, checked: {first_look, max_rounds, looks, budget_s, min_effect} (_compare_schedule.until_plan).
    min_effect not given: _compare_schedule.MIN_EFFECT."""
    if min_effect is _DEFAULT:
        min_effect = _compare_schedule.MIN_EFFECT
    try:
        return _compare_schedule.until_plan(_whole(repeats), _whole(max_repeats), _number(budget_s), _number(min_effect), order)
    except _compare.CompareError as exc:
        raise AnsibleFilterError("compare_until_plan: %s" % exc)


def compare_next(verdict, plan, rounds, elapsed_s):
    """Whether a compare_until: decided run stops after this round, and why (_compare_schedule.next_step)."""
    return _compare_schedule.next_step(verdict, plan, int(rounds), float(elapsed_s))


def compare_expect(history_text, runs, host, variants, digest, plan):
    """Before the first round: the rounds expected to fit in the budget, from the history's benchmarks and the run
    files' engine loads (_compare_schedule.expected_rounds)."""
    history = _results_history.parse_history(history_text) if isinstance(history_text, str) else history_text
    documents = []
    for run in runs or ():
        if isinstance(run, str):
            try:
                run = json.loads(run)
            except ValueError:
                continue  # a run file cut short: it says nothing
        if isinstance(run, dict):
            documents.append(run)
    return _compare_schedule.expected_rounds(history, documents, host, list(variants), digest, plan)


def compare_keep(verdict, keep, order, before=None):
    return _compare.keep_plan(verdict, keep, list(order), before or None)


def slo_problems(slo, attainment):
    return _compare.slo_problems(slo, attainment)


class FilterModule(object):
    def filters(self):
        return {"compare_variants": compare_variants, "compare_keep": compare_keep, "slo_problems": slo_problems,
                "compare_schedule": compare_schedule, "compare_until_plan": compare_until_plan, "compare_next": compare_next,
                "compare_expect": compare_expect}
