# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bench_summary filter (a throughput_bench result as compact rows, for set_stats / AWX artifacts) and
bench_repeats (its levels as one list per repeat)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.plugin_utils._lazy import LazyModule

# Imported on first use: Ansible loads every filter file to find one filter (plugin_utils/_lazy.py).
_results_collect = LazyModule("_results_collect")
_results_history = LazyModule("_results_history")


def bench_summary(result, host=None):
    if not isinstance(result, dict):
        raise AnsibleFilterError("bench_summary expects a throughput_bench result (a dict), got %s"
                                 % type(result).__name__)
    return _results_history.bench_summary(result, host)


def bench_repeats(levels):
    if not isinstance(levels, list):
        raise AnsibleFilterError("bench_repeats expects the results list of a throughput_bench result, got %s"
                                 % type(levels).__name__)
    return _results_collect.split_repeats(levels)


class FilterModule(object):
    def filters(self):
        return {"bench_summary": bench_summary, "bench_repeats": bench_repeats}
