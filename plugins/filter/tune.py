# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters of playbooks/tune.yml: the candidates of a grid, the benchmark digest, what the history has
measured already, the plan of each candidate (measure it, take its repeats from the history, or skip a
failure), the failures to remember, the winner as a catalog entry."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.inferops.serving.plugins.plugin_utils._lazy import LazyModule

# Imported on first use: Ansible loads every filter file to find one filter (plugin_utils/_lazy.py).
_results_history = LazyModule("_results_history")
_tune = LazyModule("_tune")
# stands for a default that lives in a module not imported yet
_DEFAULT = object()


def _count(filter_name, what, value):
    """A whole number given to a filter (a template may pass it as text), or an error naming it."""
    try:
        if isinstance(value, bool) or float(value) != int(float(value)):
            raise ValueError(value)
        return int(float(value))
    except (TypeError, ValueError):
        raise AnsibleFilterError("%s: %s must be a whole number, got %r" % (filter_name, what, value))


def tune_candidates(catalog, base, grid, max_candidates=_DEFAULT):
    """The candidates of a tune grid; max_candidates not given: _tune.DEFAULT_MAX_CANDIDATES."""
    if max_candidates is _DEFAULT:
        max_candidates = _tune.DEFAULT_MAX_CANDIDATES
    max_candidates = _count("tune_candidates", "max_candidates (tune_max_candidates)", max_candidates)
    try:
        return _tune.candidates(catalog, base, grid, max_candidates)
    except _tune.TuneError as exc:
        raise AnsibleFilterError("tune_candidates: %s" % exc)


def bench_digest(bench):
    return _tune.bench_digest(bench)


def tune_measured(history_text, host, fingerprint, digest, repeats):
    return _tune.measured(_results_history.parse_history(history_text), host, fingerprint, digest,
                          _count("tune_measured", "repeats", repeats))


def tune_entry(verdict, base, catalog):
    return _tune.tuned_entry(base, verdict, catalog)


def tune_plan(history_text, failures, host, fingerprint, digest, repeats, fresh=False, retry_failed=False):
    return _tune.plan_candidate(_results_history.parse_history(history_text), failures, host, fingerprint, digest,
                                _count("tune_plan", "repeats", repeats), fresh=boolean(fresh, strict=False),
                                retry_failed=boolean(retry_failed, strict=False))


def tune_failures(failures, failed_variants, measured_now, keys):
    return _tune.new_failures(failures, failed_variants, measured_now, keys)


class FilterModule(object):
    def filters(self):
        return {"tune_candidates": tune_candidates, "bench_digest": bench_digest, "tune_measured": tune_measured,
                "tune_entry": tune_entry, "tune_plan": tune_plan, "tune_failures": tune_failures}
