# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of playbooks/tune.yml: the candidates a grid of engine_args gives (each `extends` the
base variant), what the history has measured already (so a tune resumes instead of starting engines
again), and the winner as a catalog entry ready to paste. Standard library only, and throughput_bench's
settings (module_utils/_bench_args.py) for the defaults of the bench digest."""

from __future__ import annotations

import hashlib
import itertools
import json
import re

from ansible_collections.inferops.serving.plugins.module_utils import _bench_args

DEFAULT_MAX_CANDIDATES = 16
# the benchmark settings that make two measurements comparable (labels and the URL are not)
_BENCH_KEYS = ("api", "concurrency", "requests_per_level", "input_tokens", "output_tokens", "ignore_eos", "slo",
               "model")
# the warm-up to steady state (0.4.0), with throughput_bench's defaults (its argument spec's) when unset: every
# digest since has them, so a history measured before (whose digest lacks them) does not count as measured for a
# tune; and the warm-up requests (0.5.0), so that unset and the default share a digest
_WARMUP_KEYS = tuple((key, float(_bench_args.BENCH_SPEC[key]["default"]))
                     for key in ("warmup_tolerance", "warmup_max_s", "warmup"))


class TuneError(ValueError):
    """Bad tune input; the message names what was wrong and what is allowed."""


def _slug(value):
    text = json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_") or "x"


def candidates(catalog, base, grid, max_candidates=DEFAULT_MAX_CANDIDATES):
    """{name: {"extends": base, "engine_args": {...}}} for every combination of grid's values, in grid order;
    named after what they change: BASE+key=value+key=value."""
    if not isinstance(catalog, dict) or base not in catalog:
        raise TuneError("base must be a variant of serving_variants (%s), got %r" % (", ".join(sorted(catalog or {})), base))
    if not isinstance(grid, dict) or not grid:
        raise TuneError("tune_grid must be a non-empty dict of engine_args key -> list of values, got %r" % (grid,))
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise TuneError("tune_grid[%s] must be a non-empty list of values, got %r" % (key, values))
        if len(set(_slug(v) for v in values)) != len(values):
            raise TuneError("tune_grid[%s] repeats a value: %r" % (key, values))
    total = 1
    for values in grid.values():
        total *= len(values)
    limit = int(max_candidates)
    if total > limit:
        raise TuneError("tune_grid gives %d candidates (%s), more than tune_max_candidates=%d: narrow the grid or raise "
                        "tune_max_candidates" % (total, " x ".join(str(len(v)) for v in grid.values()), limit))
    keys = list(grid)
    out = {}
    for combo in itertools.product(*(grid[key] for key in keys)):
        args = dict(zip(keys, combo))
        name = "+".join([base] + ["%s=%s" % (key, _slug(value)) for key, value in args.items()])
        if name in catalog:
            raise TuneError("candidate %s is already a variant of serving_variants: rename that variant" % name)
        out[name] = {"extends": base, "engine_args": args,
                     "description": "tune candidate: %s with %s" % (base, json.dumps(args, sort_keys=True))}
    return out


def bench_digest(bench):
    """A short digest of the benchmark settings that make two measurements comparable: _BENCH_KEYS as given, and
    the warm-up to steady state (_WARMUP_KEYS) as numbers, throughput_bench's defaults when unset."""
    bench = bench or {}
    settings = dict((key, bench.get(key)) for key in _BENCH_KEYS)
    for key, default in _WARMUP_KEYS:
        value = bench.get(key)
        try:
            settings[key] = float(default if value is None or value == "" else value)  # 120, 120.0 and "120" alike
        except (TypeError, ValueError):
            settings[key] = value  # not a number: throughput_bench refuses it; the digest still differs
    return "bench:" + hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def measured(history, host, fingerprint, digest, repeats):
    """The repeats the history holds for this host, fingerprint and benchmark digest, as lists of levels
    (the newest `repeats` of them), or [] when fewer than `repeats` were measured."""
    groups = {}
    for rec in history or ():
        labels = rec.get("labels") or {}
        if rec.get("host") != host or rec.get("fingerprint") != fingerprint or labels.get("bench") != digest:
            continue
        if rec.get("repeat") is None:
            continue
        groups.setdefault((rec.get("time") or "", rec.get("run"), rec.get("repeat")), []).append(rec)
    if len(groups) < int(repeats):
        return []
    newest = sorted(groups)[-int(repeats):]
    return [sorted(groups[key], key=lambda rec: rec.get("concurrency") or 0) for key in newest]


def failure_key(host, fingerprint, digest):
    """The key of a candidate in tune-failures-HOST.json: one configuration, benchmarked one way, on one host."""
    return "%s %s %s" % (host, fingerprint, digest)


def plan_candidate(history, failures, host, fingerprint, digest, repeats, fresh=False, retry_failed=False):
    """What a tune does with one candidate, planned: {"key", "measure": bool, "result": {"repeats": [...]} |
    {"failed": why} | None}. Its repeats from the history when it holds enough of them (unless fresh); else
    "failed before, not retried" when it failed to start here before (unless retry_failed); else measure it."""
    key = failure_key(host, fingerprint, digest)
    done = [] if fresh else measured(history, host, fingerprint, digest, repeats)
    if done:
        return {"key": key, "measure": False, "result": {"repeats": done}}
    if key in (failures or {}) and not retry_failed:
        return {"key": key, "measure": False,
                "result": {"failed": "failed before, not retried (tune_retry_failed=true retries it): %s" % failures[key]}}
    return {"key": key, "measure": True, "result": None}


def new_failures(failures, failed_variants, measured_now, keys):
    """tune-failures-HOST.json after a tune: failures plus each candidate measured in this run that failed
    (failed_variants: the verdict's rows), under its key (keys: variant -> failure_key)."""
    out = dict(failures or {})
    for row in failed_variants or ():
        if row["variant"] in measured_now:
            out[keys[row["variant"]]] = row["reason"]
    return out


def tuned_entry(base, verdict, catalog):
    """The winner as a catalog entry ready to paste (YAML text): extends base, its engine_args, and its
    measured figures in a comment."""
    winner = (verdict or {}).get("winner")
    spec = (catalog or {}).get(winner) or {}
    if not winner or spec.get("extends") != base:
        why = "no candidate won" if not winner else "%s is not a candidate of %s" % (winner, base)
        return "# tune %s: %s\n" % (base, why)
    objective = verdict.get("objective") or {}
    cell = (((verdict.get("summaries") or {}).get(winner) or {}).get(objective.get("concurrency")) or {}).get(
        objective.get("metric")) or {}
    interval = ("[%s, %s]" % (cell.get("ci_low"), cell.get("ci_high")) if cell.get("ci_low") is not None
                else "(no interval)")
    lines = ["# tuned from %s on %s: %s %s at c=%s, %s of %s %s" % (
        base, verdict.get("host"), objective.get("metric"), cell.get("median"), objective.get("concurrency"),
        cell.get("estimate") or "median", cell.get("n"), interval)]
    lines += ["# " + line for line in verdict.get("lines") or []]
    name = "tuned-%s" % base
    lines.append("%s:" % name)
    lines.append("  extends: %s" % base)
    lines.append("  engine_args:")
    for key, value in sorted((spec.get("engine_args") or {}).items()):
        lines.append("    %s: %s" % (key, json.dumps(value)))
    return "\n".join(lines) + "\n"
