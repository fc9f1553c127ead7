# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters of compare.yml and tune.yml: the variants benchmarked on one host, compared with repeats and
confidence intervals (compare_variants); what serves afterwards (compare_keep); whether -e slo and
-e slo_attainment are valid (slo_problems)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.plugin_utils import _compare


def compare_variants(results, host, order, objective_metric=None, slo_attainment=None, compare_order=None):
    try:
        return _compare.compare(host, results, order, objective_metric, slo_attainment=slo_attainment,
                                compare_order=compare_order)
    except _compare.CompareError as exc:
        raise AnsibleFilterError("compare_variants: %s" % exc)


def compare_schedule(variants, repeats, order="blocked"):
    try:
        return _compare.schedule(list(variants), int(repeats) if isinstance(repeats, str) and repeats.isdigit()
                                 else repeats, order)
    except _compare.CompareError as exc:
        raise AnsibleFilterError("compare_schedule: %s" % exc)


def compare_keep(verdict, keep, order, before=None):
    return _compare.keep_plan(verdict, keep, list(order), before or None)


def slo_problems(slo, attainment):
    return _compare.slo_problems(slo, attainment)


class FilterModule(object):
    def filters(self):
        return {"compare_variants": compare_variants, "compare_keep": compare_keep, "slo_problems": slo_problems,
                "compare_schedule": compare_schedule}
