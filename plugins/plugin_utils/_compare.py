# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare variants on one host: which is faster here, and by how much, with repeats and confidence intervals.

Each variant is benchmarked several times (repeats); a repeat is the list of throughput_bench levels
(or the throughput_bench result itself). Per concurrency and metric:

- a variant's figure is the geometric mean over its repeats, with a 95 % Student-t interval computed on
  the logarithms (n - 1 degrees of freedom) and taken back with exp;
- a variant against the reference (the first variant in run order that did not fail) is the ratio of the
  geometric means, variant / reference, with a 95 % Welch interval on the difference of the mean logs
  (Welch-Satterthwaite degrees of freedom), taken back with exp; significant when it excludes 1.

The figure and its interval estimate the same thing, and a ratio is symmetric on the log scale (x1.10 and
x0.91 are the same distance from 1). Throughputs and latencies are positive and their noise is
multiplicative, which is what logs suit.

Goodput and SLO attainment can be 0 (no request met the SLO), where a log does not exist. They are read on
their own scale: the arithmetic mean with a Student-t interval, and the ratio of the means with Fieller's
interval (Welch degrees of freedom at the estimate), which allows a 0 on the variant's side; a reference
mean within its own noise of 0 makes that interval unbounded, and then no interval and no significance are
claimed (``why`` says so). Any other metric with a value <= 0 falls back to the same arithmetic treatment,
and ``estimate`` says which figure a cell or ratio is.

This replaced a 95 % bootstrap percentile interval of the median: over 2 to 5 values a percentile
bootstrap can only return (roughly) the values' own range, which covered the truth 67 % of the time at 2
repeats and 87 % at 3, and called identical variants different in 34 % and 14 % of pairs.
tests/unit/plugins/plugin_utils/test_compare_coverage.py measures the promise kept now.

This file is the verdict: figures, ratios, winner, drift, the resolved diff, the keep plan and the SLO
checks. The statistics themselves (t, incomplete beta, Welch, Fieller, prediction and sequential intervals)
are in _stats.py, shared with the regression gate; the schedule is _compare_schedule.py (the
compare_schedule filter), the words and the table _compare_render.py. Standard library only, deterministic
(no resampling, so no seed), unit-tested without Ansible; the compare_variants filter only feeds input in.
"""

from __future__ import annotations

import math

from ansible_collections.inferops.serving.plugins.module_utils import _metrics
from ansible_collections.inferops.serving.plugins.plugin_utils import _resolved_diff, _steady
from ansible_collections.inferops.serving.plugins.plugin_utils._compare_render import lines as _lines, markdown_table
from ansible_collections.inferops.serving.plugins.plugin_utils._compare_schedule import (
    MIN_EFFECT, ORDERS, CompareError, decision, schedule)
from ansible_collections.inferops.serving.plugins.plugin_utils._results_common import (
    COMPARED, DISTRIBUTIONS, bench_levels, conc_key as _conc_key, num)
from ansible_collections.inferops.serving.plugins.plugin_utils._stats import (
    ARITHMETIC, CONFIDENCE, GEOMETRIC, RATIO_OF, bounded, fieller_ratio, log_moments, moments, sequential_confidence, t_interval,
    welch_log_ratio)

__all__ = ("ORDERS", "CompareError", "schedule", "markdown_table")  # kept here for the verdict's readers

# What variants are compared on: the metric table's COMPARED view (_results_common.Metric rows: key, short
# label (verdict lines), label (tables), unit, digits printed, which way is better, ...), in rank order. A
# distribution (DISTRIBUTIONS) is read at its p50. An absent or null figure is skipped, never taken as 0.
METRICS = COMPARED
METRIC_KEYS = tuple(metric.key for metric in METRICS)
_BY_KEY = dict((metric.key, metric) for metric in METRICS)
# where in a level: (key,) for a number, (key, "p50") for a distribution (a dict of percentiles)
_PLACES = dict((key, (key, "p50") if key in DISTRIBUTIONS else (key,)) for key in METRIC_KEYS)
THROUGHPUT, GOODPUT, ATTAINMENT = "output_throughput", "goodput", "slo_attainment"

# Metrics that can be 0 in a healthy run (no request met the SLO): no logarithm, read on their own scale.
ZERO_ALLOWED = frozenset((GOODPUT, ATTAINMENT))

# the largest value a metric can take: an interval of a share stops at 1 (and one of values >= 0 at 0)
_CEILING = {ATTAINMENT: 1.0}


def read_metric(level, key):
    """The figure of one metric in a level dict, or None when it is absent or null.

    A distribution is read at its p50; a plain number where a distribution is expected (a history
    record, which keeps only the p50) is taken as it is.
    """
    place = _PLACES[key]
    value = level.get(place[0]) if isinstance(level, dict) else None
    if isinstance(value, dict):
        value = value.get(place[1]) if len(place) > 1 else None
    value = num(value)
    return None if value is None else float(value)


def _log_scale(values, metric=None):
    """Whether a metric's values are read on the log scale: never for ZERO_ALLOWED, never with a value <= 0."""
    return metric not in ZERO_ALLOWED and all(v > 0 for v in values)


def _bounded(value, metric, nonnegative):
    return bounded(value, nonnegative, _CEILING.get(metric))


def centre(values, metric=None):
    """(figure, ci_low, ci_high, estimate) of one variant's values of one metric over its repeats.

    The geometric mean with a 95 % t-interval on the logs (n - 1 degrees of freedom), taken back with exp:
    the interval is multiplicative, as the noise is. For ZERO_ALLOWED metrics, or any value <= 0: the
    arithmetic mean with a 95 % t-interval, kept within what the metric can be (0, and 1 for a share).
    One value: no interval (None, None): there is no spread to measure it with.
    """
    values = [float(v) for v in values]
    if not values:
        return None, None, None, None
    if _log_scale(values, metric):
        n, mean, var, figure = log_moments(values)
        if var is None:
            return figure, None, None, GEOMETRIC
        if var == 0.0:
            return figure, figure, figure, GEOMETRIC
        low, high, _df = t_interval(mean, [(var / n, n)])
        return figure, math.exp(low), math.exp(high), GEOMETRIC
    n, mean, var = moments(values)
    if var is None:
        return mean, None, None, ARITHMETIC
    low, high, _df = t_interval(mean, [(var / n, n)])
    nonnegative = min(values) >= 0
    return mean, _bounded(low, metric, nonnegative), _bounded(high, metric, nonnegative), ARITHMETIC


def ratio(base_values, variant_values, metric=None, confidence=CONFIDENCE):
    """variant / base with a 95 % interval, significant when the interval excludes 1.

    Returns {ratio, ci_low, ci_high, significant, base_median, variant_median, estimate, df, why}:
    ``base_median`` and ``variant_median`` are the figures the ratio divides (the geometric means, or the
    means: ``estimate`` says "ratio of geometric means" or "ratio of means"; the key names stayed from
    when they were medians, so that their readers did not change); ``df`` the Welch-Satterthwaite degrees
    of freedom used; ``why`` says why there is no ratio or no interval (else None).

    Log scale (the default; see centre): exp(diff +- t * se) on the difference of the mean logs, Welch's
    unequal variances. ZERO_ALLOWED metrics or a value <= 0: Fieller's interval of the ratio of means.
    One value on a side: the ratio, but no interval and never significant. Every repeat of each side
    equal: the interval is the ratio itself (no noise was seen), significant unless it is 1.
    """
    base, variant = [float(v) for v in base_values], [float(v) for v in variant_values]
    out = {"ratio": None, "ci_low": None, "ci_high": None, "significant": False, "base_median": None,
           "variant_median": None, "estimate": None, "df": None, "why": None}
    if not base or not variant:
        out["why"] = "no values on %s" % ("either side" if not base and not variant else
                                          "the reference's side" if not base else "the variant's side")
        return out
    if _log_scale(base, metric) and _log_scale(variant, metric):
        welch_log_ratio(base, variant, out, confidence)
        out["estimate"] = RATIO_OF[GEOMETRIC]
    else:
        fieller_ratio(base, variant, out, confidence)
        out["estimate"] = RATIO_OF[ARITHMETIC]
    if out["ratio"] is not None and (len(base) < 2 or len(variant) < 2):
        out["why"] = "one repeat on %s: no spread to measure the noise with" % (
            "each side" if len(base) < 2 and len(variant) < 2 else "the reference's side" if len(base) < 2
            else "the variant's side")
    if out["ci_low"] is not None:
        out["significant"] = out["ci_low"] > 1.0 or out["ci_high"] < 1.0
    return out


def _levels_of(repeat, where):
    """The level dicts of one repeat: a list of levels, or a throughput_bench result (dict with results)."""
    if isinstance(repeat, dict):
        if not isinstance(repeat.get("results"), list):
            raise CompareError("%s is a dict without results: a repeat is a list of throughput_bench levels "
                               "or a throughput_bench result" % where)
        return bench_levels(repeat)
    if not isinstance(repeat, list):
        raise CompareError("%s must be a list of throughput_bench levels or a throughput_bench result, got %s"
                           % (where, type(repeat).__name__))
    for pos, level in enumerate(repeat):
        if not isinstance(level, dict) or "concurrency" not in level:
            raise CompareError("%s, level %d: each level must be a dict with a concurrency, got %r"
                               % (where, pos + 1, level if not isinstance(level, dict) else sorted(level)))
    return repeat


def summarize(repeats, where="repeats"):
    """{concurrency: {metric: {median, ci_low, ci_high, n, values, estimate}}} over the repeats.

    ``repeats`` is a list, one entry per repeat, of lists of level dicts. Each level is one
    observation of its concurrency (normally one per repeat); ``values`` keeps them in repeat order.
    Metrics a level does not have (null or absent) are skipped. ``median`` is centre()'s figure, the
    geometric mean (the mean for goodput, SLO attainment or a value <= 0), as ``estimate`` says: the key
    kept its name so that every reader of a summary (reports, charts, tune, rollout) reads it unchanged.
    ``ci_low`` and ``ci_high`` are None with one repeat.
    """
    if not isinstance(repeats, list):
        raise CompareError("%s must be a list of repeats (each a list of levels), got %s"
                           % (where, type(repeats).__name__))
    observed = {}
    for pos, repeat in enumerate(repeats):
        for level in _levels_of(repeat, "%s: repeat %d" % (where, pos + 1)):
            per_metric = observed.setdefault(level["concurrency"], {})
            for key in METRIC_KEYS:
                value = read_metric(level, key)
                if value is not None:
                    per_metric.setdefault(key, []).append(value)
    summary = {}
    for conc in sorted(observed, key=_conc_key):
        summary[conc] = {}
        for key in METRIC_KEYS:
            values = observed[conc].get(key)
            if not values:
                continue
            figure, low, high, estimate = centre(values, key)
            summary[conc][key] = {"median": figure, "ci_low": low, "ci_high": high, "n": len(values),
                                  "values": values, "estimate": estimate}
    return summary


def _as_summary(levels_or_summary):
    if isinstance(levels_or_summary, dict):
        return levels_or_summary
    found = {}
    for level in levels_or_summary or []:
        if isinstance(level, dict) and "concurrency" in level:
            for key in METRIC_KEYS:
                if read_metric(level, key) is not None:
                    found.setdefault(level["concurrency"], {})[key] = True
    return found


def objective(levels_or_summary, slo_set):
    """(metric, concurrency) the winner is judged on.

    Output throughput at the highest concurrency measured; with an SLO set, goodput at the highest
    concurrency that has one (output throughput when no level has a goodput). ``levels_or_summary``
    is a list of levels or a summary from summarize(). (metric, None) when nothing was measured.
    """
    summary = _as_summary(levels_or_summary)
    metric = THROUGHPUT
    if slo_set and any(GOODPUT in summary[conc] for conc in summary):
        metric = GOODPUT
    concs = sorted((c for c in summary if metric in summary[c]), key=_conc_key)
    return metric, (concs[-1] if concs else None)


def _check(host, results, order, objective_metric, slo_attainment=None):
    if not isinstance(results, dict):
        raise CompareError("results must be a dict {variant: {repeats: [[levels...], ...]} or {failed: reason}}, got %s"
                           % type(results).__name__)
    if isinstance(order, str) or not isinstance(order, (list, tuple)) or not order:
        raise CompareError("order must be a non-empty list of the variants in run order, got %r" % (order,))
    if len(set(order)) != len(order):
        raise CompareError("order names a variant twice: %s" % ", ".join(str(v) for v in order))
    missing = [v for v in order if v not in results]
    if missing:
        raise CompareError("order names %s, which results of host %s do not have (they have: %s)"
                           % (", ".join(str(v) for v in missing), host, ", ".join(str(v) for v in results) or "none"))
    extra = [v for v in results if v not in order]
    if extra:
        raise CompareError("results of host %s have %s, which order does not name (order: %s)"
                           % (host, ", ".join(str(v) for v in extra), ", ".join(str(v) for v in order)))
    for variant in order:
        entry = results[variant]
        if not isinstance(entry, dict) or not (entry.get("failed") or "repeats" in entry):
            raise CompareError("variant %s of host %s must be a dict with repeats (a list of repeats, each a list "
                               "of levels) or failed (the reason), got %r"
                               % (variant, host, sorted(entry) if isinstance(entry, dict) else entry))
        if not entry.get("failed") and (not isinstance(entry["repeats"], list) or not entry["repeats"]):
            raise CompareError("variant %s of host %s: repeats must be a non-empty list of repeats (each a list of "
                               "levels), got %r" % (variant, host, entry["repeats"]))
    if objective_metric is not None and objective_metric not in _BY_KEY:
        raise CompareError("objective_metric %r is not one of %s" % (objective_metric, ", ".join(METRIC_KEYS)))
    if slo_attainment is not None and (num(slo_attainment) is None or not 0.0 < float(slo_attainment) <= 1.0):
        raise CompareError("slo_attainment must be a share of requests above 0 and at most 1 (0.9: nine requests "
                           "in ten meet every SLO target), got %r" % (slo_attainment,))


def _objective_concurrency(metric, summaries, reference):
    """The highest concurrency at which every measured variant has the metric, else the reference's highest."""
    measured = [s for s in summaries.values() if s]
    common = None
    for summary in measured:
        concs = set(c for c in summary if metric in summary[c])
        common = concs if common is None else common & concs
    if common:
        return sorted(common, key=_conc_key)[-1]
    concs = sorted((c for c in summaries.get(reference) or {} if metric in summaries[reference][c]), key=_conc_key)
    return concs[-1] if concs else None


def _winner(metric, conc, summaries, measured):
    better = _BY_KEY[metric].better
    best = None
    for variant in measured:  # run order: a tie keeps the earlier variant
        cell = (summaries[variant].get(conc) or {}).get(metric)
        if cell is None:
            continue
        if best is None or (cell["median"] > best[1] if better == "higher" else cell["median"] < best[1]):
            best = (variant, cell["median"], cell["n"])
    return best


def disqualified(summaries, measured, conc, required):
    """The variants that did not meet the SLO at the objective's concurrency: those whose mean share of
    requests meeting every target (over the repeats: the share of all their requests when the repeats sent
    as many) is under ``required`` (or that measured no share at all)."""
    out = []
    for variant in measured:
        cell = (summaries[variant].get(conc) or {}).get(ATTAINMENT)
        if cell is None or cell["median"] < float(required):
            out.append({"variant": variant, "concurrency": conc, "slo_attainment": cell["median"] if cell else None,
                        "n": cell["n"] if cell else 0, "required": float(required)})
    return out


def _sequential(given):
    """compare()'s ``sequential`` in plain types (a role passes strings): looks, rounds, min_effect, stopped, budget_s."""
    if not isinstance(given, dict) or "looks" not in given:
        raise CompareError("sequential must be a dict with looks (the planned looks), rounds, min_effect and optionally "
                           "stopped and budget_s, got %r" % (given,))
    try:
        out = {"looks": int(given["looks"]), "rounds": int(given.get("rounds") or 0),
               "min_effect": float(given.get("min_effect") or MIN_EFFECT),
               "budget_s": float(given["budget_s"]) if given.get("budget_s") not in (None, "") else None}
    except (TypeError, ValueError):
        raise CompareError("sequential: looks and rounds must be whole numbers, min_effect and budget_s numbers, got %r"
                           % (given,))
    if out["looks"] < 1:
        raise CompareError("sequential: looks must be 1 or more, got %r" % (given["looks"],))
    out["stopped"] = given.get("stopped") if given.get("stopped") not in ("", "None") else None
    return out


def compare(host, results, order, objective_metric=None, slo_attainment=None, compare_order=None, sequential=None):
    """Every variant of one host against the reference (the first in order that did not fail).

    ``results`` maps each variant to {"repeats": [[levels...], ...]} or {"failed": reason,
    "log_tail": [...]}; ``order`` lists the variants in run order. The objective is
    ``objective_metric`` (a key of METRICS) or, by default, output throughput (goodput when the
    reference measured one, i.e. an SLO was set) at the highest concurrency every variant measured.
    ``slo_attainment`` (a share, 0 to 1): a variant whose mean share of requests meeting the SLO at
    that concurrency is lower is disqualified; it is still compared, but it cannot win. ``compare_order``
    (blocked or interleaved, None when not told) is how the repeats ran; the reference's first and last
    repeat are in ``drift`` either way.

    ``sequential`` (compare_until: decided): {looks, rounds, min_effect[, stopped]}: every ratio's interval is
    the sequential one (_stats.sequential_confidence over the planned looks), valid at whichever look the
    comparison stops; ``sequential`` in the result then also says each variant's decision at the objective
    (_compare_schedule.decision) and, once told, why it stopped.
    """
    _check(host, results, order, objective_metric, slo_attainment)
    confidence = CONFIDENCE
    if sequential is not None:
        sequential = _sequential(sequential)
        confidence = sequential_confidence(sequential["looks"])
    if compare_order is not None and compare_order not in ORDERS:
        raise CompareError("compare_order must be one of %s, got %r" % (", ".join(ORDERS), compare_order))
    failed, summaries, measured = [], {}, []
    for variant in order:
        entry = results[variant]
        if entry.get("failed"):
            row = {"host": host, "variant": variant, "reason": str(entry["failed"])}
            if entry.get("log_tail"):
                row["log_tail"] = entry["log_tail"]
            failed.append(row)
            continue
        summaries[variant] = summarize(entry["repeats"], where="variant %s" % variant)
        measured.append(variant)
    reference = measured[0] if measured else None

    if objective_metric is None:
        metric = objective(summaries[reference], True)[0] if reference else THROUGHPUT
    else:
        metric = objective_metric
    conc = _objective_concurrency(metric, summaries, reference) if reference else None

    comparisons = []
    base = summaries.get(reference) or {}
    for variant in measured[1:]:
        mine = summaries[variant]
        for level in sorted(set(base) & set(mine), key=_conc_key):
            for key in METRIC_KEYS:
                if key not in base[level] or key not in mine[level]:
                    continue
                est = ratio(base[level][key]["values"], mine[level][key]["values"], key, confidence)
                improved = None
                if est["significant"]:
                    improved = (est["ratio"] > 1.0) == (_BY_KEY[key].better == "higher")
                comparisons.append({"host": host, "baseline": reference, "variant": variant, "concurrency": level,
                                    "metric": key, "ratio": est["ratio"], "ci_low": est["ci_low"],
                                    "ci_high": est["ci_high"],
                                    "repeats": {"baseline": base[level][key]["n"], "variant": mine[level][key]["n"]},
                                    "significant": est["significant"], "improved": improved,
                                    "baseline_median": est["base_median"], "variant_median": est["variant_median"],
                                    "estimate": est["estimate"], "why": est["why"], "confidence": confidence})

    out = disqualified(summaries, measured, conc, slo_attainment) if slo_attainment is not None and conc is not None else []
    for row in out:
        row["host"] = host
    eligible = [v for v in measured if v not in set(row["variant"] for row in out)]
    best = _winner(metric, conc, summaries, eligible) if conc is not None else None
    result = {"host": host, "reference": reference, "summaries": summaries, "comparisons": comparisons,
              "failed_variants": failed, "disqualified": out, "winner": best[0] if best else None,
              "objective": {"metric": metric, "concurrency": conc}, "order": compare_order}
    result["drift"] = drift(result)
    # a level measured before its server was steady (throughput_bench's warm-up ran out) is named
    result["unsteady"] = _steady.unsteady_levels(results, measured)
    result["resolved"] = resolved_settings(results, reference, measured[1:])
    if sequential is not None:
        result["sequential"] = dict(sequential, confidence=confidence, decisions=decision(result, sequential["min_effect"]))
    result["lines"] = _lines(result, order)
    return result


def drift(result):
    """How the reference moved over the comparison: its objective figure at the first repeat against the
    last one, in the order they ran ({variant, metric, concurrency, first, last, ratio, n}), or None with
    fewer than 2 repeats or a first figure of 0. Under the blocked order a drift of the host shows here as
    the reference changing while it alone was measured; interleaved, the others ran between its repeats."""
    reference = result.get("reference")
    metric, conc = result["objective"]["metric"], result["objective"]["concurrency"]
    cell = ((result.get("summaries") or {}).get(reference) or {}).get(conc, {}).get(metric) if reference else None
    values = (cell or {}).get("values") or []
    if len(values) < 2 or not values[0]:
        return None
    return {"variant": reference, "metric": metric, "concurrency": conc, "first": values[0], "last": values[-1],
            "ratio": values[-1] / values[0], "n": len(values)}


def resolved_settings(results, reference, variants):
    """What the engines resolved, the reference against each variant (plugin_utils/_resolved_diff.diff): the
    settings that differ, asked for (in either variant's engine_args) or chosen by the engine itself. Only
    where a side recorded what it resolved (inference_server's resolved; a tune's variant taken from the
    history has none)."""
    out = []
    base = results.get(reference) or {}
    for variant in variants:
        mine = results[variant]
        if base.get("resolved") is None and mine.get("resolved") is None:
            continue
        out.append(_resolved_diff.diff(
            {"name": reference, "engine_args": base.get("engine_args"), "resolved": base.get("resolved")},
            {"name": variant, "engine_args": mine.get("engine_args"), "resolved": mine.get("resolved")}))
    return out


KEEP_WORDS = ("best", "previous", "last")


def keep_plan(verdict, keep, order, before=None):
    """What serves once a comparison is over (compare.yml's and tune.yml's keep). verdict: compare()'s; keep:
    best (the winner), previous (what served before), last (the last variant of order that did not fail) or
    a variant's name; before: the variant that served before the comparison, or None.

    Without a winner (every variant failed, or none met the SLO) best falls back to previous, and so does
    last when every variant failed: the host ends as it began. Returns {"serve": variant or None, "stop":
    whether nothing should serve (nothing did before), "fail": why the run fails, or None}."""
    failed = [row["variant"] for row in verdict.get("failed_variants") or ()]
    if keep == "best":
        chosen = verdict.get("winner")
    elif keep == "last":
        chosen = ([v for v in order if v not in failed] or [None])[-1]
    elif keep == "previous":
        chosen = None
    else:
        chosen = keep
    serve = chosen or before or None
    fail = None
    if verdict.get("reference") is None:  # the first variant that did not fail: none did
        fail = "compare %s: every variant failed, nothing was measured (%s serves, as before): %s" % (
            verdict.get("host"), before or "nothing",
            " | ".join("%s: %s" % (row["variant"], row["reason"]) for row in verdict.get("failed_variants") or ()))
    return {"serve": serve, "stop": serve is None, "fail": fail}


def slo_problems(slo, attainment):
    """compare.yml's and tune.yml's -e slo (throughput_bench's targets: _metrics.slo_problems) and
    -e slo_attainment (a share above 0 and at most 1): messages, empty when both are good."""
    problems = _metrics.slo_problems(slo if slo is not None else {})
    try:
        share = float(attainment)
    except (TypeError, ValueError):
        share = None
    if isinstance(attainment, bool) or share is None or not 0 < share <= 1:
        problems.append("slo_attainment is the share of requests that must meet the SLO, above 0 and at most 1, "
                        "got %r" % (attainment,))
    return problems
