# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters of playbooks/tune.yml: the candidates of a grid, the benchmark digest, what the history has
measured already, the winner as a catalog entry."""

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


class FilterModule(object):
    def filters(self):
        return {"tune_candidates": tune_candidates, "bench_digest": bench_digest, "tune_measured": tune_measured,
                "tune_entry": tune_entry}
