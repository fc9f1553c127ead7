# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters of playbooks/tune.yml: the candidates of a grid, the benchmark digest, what the history has
measured already, the plan of each candidate (measure it, take its repeats from the history, or skip a
failure), the failures to remember, the winner as a catalog entry."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.plugin_utils import _tune


def tune_candidates(catalog, base, grid, max_candidates=_tune.DEFAULT_MAX_CANDIDATES):
    try:
        return _tune.candidates(catalog, base, grid, max_candidates)
    except _tune.TuneError as exc:
        raise AnsibleFilterError("tune_candidates: %s" % exc)


def bench_digest(bench):
    return _tune.bench_digest(bench)


def tune_measured(history_text, host, fingerprint, digest, repeats):
    return _tune.measured(_tune.parse_history(history_text), host, fingerprint, digest, repeats)


def tune_entry(verdict, base, catalog):
    return _tune.tuned_entry(base, verdict, catalog)


def tune_plan(history_text, failures, host, fingerprint, digest, repeats, fresh=False, retry_failed=False):
    return _tune.plan_candidate(_tune.parse_history(history_text), failures, host, fingerprint, digest, int(repeats),
                                fresh=bool(fresh), retry_failed=bool(retry_failed))


def tune_failures(failures, failed_variants, measured_now, keys):
    return _tune.new_failures(failures, failed_variants, measured_now, keys)


class FilterModule(object):
    def filters(self):
        return {"tune_candidates": tune_candidates, "bench_digest": bench_digest, "tune_measured": tune_measured,
                "tune_entry": tune_entry, "tune_plan": tune_plan, "tune_failures": tune_failures}
