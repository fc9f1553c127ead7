# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare variants on one host: which is faster here, and by how much, with repeats and confidence intervals.

Each variant is benchmarked several times (repeats); a repeat is the list of throughput_bench levels
(or the throughput_bench result itself). Per concurrency and metric, a variant's figure is the median
over its repeats, with a 95 % bootstrap percentile interval of that median; a variant against the
reference (the first variant in run order that did not fail) is the ratio of the medians with a 95 %
bootstrap percentile interval, significant when the interval excludes 1.

Standard library only, deterministic (a seeded ``random.Random`` per interval), unit-tested without
Ansible; the compare_variants filter only feeds input in.
"""

from __future__ import annotations

import random
import statistics

from ansible_collections.inferops.serving.plugins.module_utils import _metrics
from ansible_collections.inferops.serving.plugins.plugin_utils._results_common import (
    COMPARED, DISTRIBUTIONS, bench_levels, fmt, md_escape, num)

DEFAULT_SEED = 19
DEFAULT_RESAMPLES = 2000
CONFIDENCE = 0.95

# What variants are compared on: the metric table's COMPARED view (_results_common.Metric rows: key, short
# label (verdict lines), label (tables), unit, digits printed, which way is better, ...), in rank order. A
# distribution (DISTRIBUTIONS) is read at its p50. An absent or null figure is skipped, never taken as 0.
METRICS = COMPARED
METRIC_KEYS = tuple(metric.key for metric in METRICS)
_BY_KEY = dict((metric.key, metric) for metric in METRICS)
# where in a level: (key,) for a number, (key, "p50") for a distribution (a dict of percentiles)
_PLACES = dict((key, (key, "p50") if key in DISTRIBUTIONS else (key,)) for key in METRIC_KEYS)
THROUGHPUT, GOODPUT, ATTAINMENT = "output_throughput", "goodput", "slo_attainment"


class CompareError(ValueError):
    """Bad input to the comparison; the message says what was wrong and what is allowed."""


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


def _median(values):
    return statistics.median(values)


def _percentile(ordered, fraction):
    """Linear interpolation between the closest ranks of a sorted list (numpy's default)."""
    pos = fraction * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _interval(estimates):
    ordered = sorted(estimates)
    tail = (1.0 - CONFIDENCE) / 2.0
    return _percentile(ordered, tail), _percentile(ordered, 1.0 - tail)


def _resampled_median(rng, values):
    return _median(rng.choices(values, k=len(values)))


def bootstrap_median(values, seed=DEFAULT_SEED, resamples=DEFAULT_RESAMPLES):
    """(median, ci_low, ci_high): the median and a 95 % bootstrap percentile interval of it."""
    values = list(values)
    if not values:
        return None, None, None
    middle = _median(values)
    if len(values) == 1:
        return middle, middle, middle
    rng = random.Random(seed)
    low, high = _interval([_resampled_median(rng, values) for _draw in range(resamples)])
    return middle, low, high


def ratio(base_values, variant_values, seed=DEFAULT_SEED, resamples=DEFAULT_RESAMPLES):
    """Ratio of medians variant / base with a 95 % bootstrap percentile interval.

    Each group is resampled independently with replacement; each resample gives the ratio of the
    resampled medians (a resample whose base median is 0 is left out). Significant when the interval
    excludes 1.0. A base median of 0 (or no values) gives ratio None, not significant.
    """
    base, variant = list(base_values), list(variant_values)
    out = {"ratio": None, "ci_low": None, "ci_high": None, "significant": False,
           "base_median": _median(base) if base else None, "variant_median": _median(variant) if variant else None}
    if not base or not variant or not out["base_median"]:
        return out
    out["ratio"] = out["variant_median"] / out["base_median"]
    rng = random.Random(seed)
    estimates = []
    for _draw in range(resamples):
        below = _resampled_median(rng, base)
        above = _resampled_median(rng, variant)
        if below:
            estimates.append(above / below)
    if not estimates:
        return out
    out["ci_low"], out["ci_high"] = _interval(estimates)
    # one value on a side gives no spread to resample: never evidence of a difference. With 2 or 3 repeats
    # a percentile interval is only the values' range (measured: identical variants read "significant" in
    # 33 % of pairs at 2 repeats, 11 % at 3, 5 % at 5)
    enough = len(base) >= 2 and len(variant) >= 2
    out["significant"] = enough and (out["ci_low"] > 1.0 or out["ci_high"] < 1.0)
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


def _conc_key(conc):
    return (not isinstance(conc, (int, float)), conc if isinstance(conc, (int, float)) else str(conc))


def summarize(repeats, seed=DEFAULT_SEED, resamples=DEFAULT_RESAMPLES, where="repeats"):
    """{concurrency: {metric: {median, ci_low, ci_high, n, values}}} over the repeats.

    ``repeats`` is a list, one entry per repeat, of lists of level dicts. Each level is one
    observation of its concurrency (normally one per repeat); ``values`` keeps them in repeat order.
    Metrics a level does not have (null or absent) are skipped.
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
            middle, low, high = bootstrap_median(values, seed, resamples)
            summary[conc][key] = {"median": middle, "ci_low": low, "ci_high": high, "n": len(values),
                                  "values": values}
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


def _fmt_interval(low, high, digits):
    return "[%s, %s]" % (fmt(low, digits, fixed=True), fmt(high, digits, fixed=True))


def _with_unit(value, digits, unit):
    return "%s %s" % (fmt(value, digits, fixed=True), unit) if unit else fmt(value, digits, fixed=True)


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
    """The variants that did not meet the SLO at the objective's concurrency: those whose median share of
    requests meeting every target is under ``required`` (or that measured no share at all)."""
    out = []
    for variant in measured:
        cell = (summaries[variant].get(conc) or {}).get(ATTAINMENT)
        if cell is None or cell["median"] < float(required):
            out.append({"variant": variant, "concurrency": conc, "slo_attainment": cell["median"] if cell else None,
                        "n": cell["n"] if cell else 0, "required": float(required)})
    return out


def compare(host, results, order, objective_metric=None, seed=DEFAULT_SEED, resamples=DEFAULT_RESAMPLES,
            slo_attainment=None):
    """Every variant of one host against the reference (the first in order that did not fail).

    ``results`` maps each variant to {"repeats": [[levels...], ...]} or {"failed": reason,
    "log_tail": [...]}; ``order`` lists the variants in run order. The objective is
    ``objective_metric`` (a key of METRICS) or, by default, output throughput (goodput when the
    reference measured one, i.e. an SLO was set) at the highest concurrency every variant measured.
    ``slo_attainment`` (a share, 0 to 1): a variant whose median share of requests meeting the SLO at
    that concurrency is lower is disqualified; it is still compared, but it cannot win.
    """
    _check(host, results, order, objective_metric, slo_attainment)
    failed, summaries, measured = [], {}, []
    for variant in order:
        entry = results[variant]
        if entry.get("failed"):
            row = {"host": host, "variant": variant, "reason": str(entry["failed"])}
            if entry.get("log_tail"):
                row["log_tail"] = entry["log_tail"]
            failed.append(row)
            continue
        summaries[variant] = summarize(entry["repeats"], seed, resamples, where="variant %s" % variant)
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
                est = ratio(base[level][key]["values"], mine[level][key]["values"], seed, resamples)
                improved = None
                if est["significant"]:
                    improved = (est["ratio"] > 1.0) == (_BY_KEY[key].better == "higher")
                comparisons.append({"host": host, "baseline": reference, "variant": variant, "concurrency": level,
                                    "metric": key, "ratio": est["ratio"], "ci_low": est["ci_low"],
                                    "ci_high": est["ci_high"],
                                    "repeats": {"baseline": base[level][key]["n"], "variant": mine[level][key]["n"]},
                                    "significant": est["significant"], "improved": improved,
                                    "baseline_median": est["base_median"], "variant_median": est["variant_median"]})

    out = disqualified(summaries, measured, conc, slo_attainment) if slo_attainment is not None and conc is not None else []
    for row in out:
        row["host"] = host
    eligible = [v for v in measured if v not in set(row["variant"] for row in out)]
    best = _winner(metric, conc, summaries, eligible) if conc is not None else None
    result = {"host": host, "reference": reference, "summaries": summaries, "comparisons": comparisons,
              "failed_variants": failed, "disqualified": out, "winner": best[0] if best else None,
              "objective": {"metric": metric, "concurrency": conc}}
    result["lines"] = _lines(result, order)
    return result


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


def _lines(result, order):
    host, reference = result["host"], result["reference"]
    metric, conc = result["objective"]["metric"], result["objective"]["concurrency"]
    short, unit, digits = _BY_KEY[metric].short, _BY_KEY[metric].unit, _BY_KEY[metric].digits
    failed = dict((row["variant"], row) for row in result["failed_variants"])
    rows = dict((row["variant"], row) for row in result["comparisons"]
                if row["concurrency"] == conc and row["metric"] == metric)
    lines = []
    for variant in order:
        if variant in failed:
            lines.append("compare %s: %s failed: %s" % (host, variant, failed[variant]["reason"]))
            continue
        if variant == reference:
            continue
        head = "compare %s: %s vs %s at c=%s: %s" % (host, variant, reference, conc, short)
        row = rows.get(variant)
        if row is None:
            lines.append("%s not measured by both" % head)
        elif row["ratio"] is None:
            lines.append("%s ratio undefined (%s median is 0)" % (head, reference))
        elif row["ci_low"] is None:
            lines.append("%s \u00d7%.2f (no interval)" % (head, row["ratio"]))
        else:
            verdict = "significant" if row["significant"] else "not significant"
            lines.append("%s \u00d7%.2f [%.2f, %.2f] %s" % (head, row["ratio"], row["ci_low"], row["ci_high"], verdict))
    for row in result["disqualified"]:
        met = ("%.0f %% of requests met the SLO (median of %d)" % (100.0 * row["slo_attainment"], row["n"])
               if row["slo_attainment"] is not None else "no SLO attainment was measured")
        lines.append("compare %s: %s disqualified at c=%s: %s, under the %.0f %% required"
                     % (host, row["variant"], row["concurrency"], met, 100.0 * row["required"]))
    winner = result["winner"]
    if winner is None:
        if reference is None:
            why = "every variant failed"
        elif result["disqualified"] and len(result["disqualified"]) == len(result["summaries"]):
            why = "no variant met the SLO"
        else:
            why = "no variant measured %s" % short
        lines.append("compare %s: no winner (%s)" % (host, why))
    else:
        cell = result["summaries"][winner][conc][metric]
        lines.append("compare %s: winner %s (%s %s at c=%s, median of %d)"
                     % (host, winner, short, _with_unit(cell["median"], digits, unit), conc, cell["n"]))
    return lines


def _cell(summary, conc, key):
    cell = (summary.get(conc) or {}).get(key)
    if cell is None:
        return "-"
    digits = _BY_KEY[key].digits
    return "%s %s" % (fmt(cell["median"], digits, fixed=True), _fmt_interval(cell["ci_low"], cell["ci_high"], digits))


_TABLE_COLUMNS = tuple((metric.key, metric.column) for metric in METRICS)


def markdown_table(result):
    """Side-by-side Markdown: per host, a row per concurrency x variant, median [95 % CI] per metric.

    ``result`` is what compare() returns, or a list of them (one per host).
    """
    results = result if isinstance(result, list) else [result]
    out = []
    for res in results:
        host, reference, summaries = res["host"], res["reference"], res["summaries"]
        out.append("## %s" % md_escape(host))
        out.append("")
        if reference is None:
            out.append("No variant was measured.")
        else:
            rows = dict(((row["variant"], row["concurrency"]), row) for row in res["comparisons"]
                        if row["metric"] == THROUGHPUT)
            out.append("| concurrency | variant | %s | output vs %s |"
                       % (" | ".join(title for _key, title in _TABLE_COLUMNS), md_escape(reference)))
            out.append("| ---: | --- |%s ---: |" % (" ---: |" * len(_TABLE_COLUMNS)))
            concs = set()
            for summary in summaries.values():
                concs.update(summary)
            for conc in sorted(concs, key=_conc_key):
                for variant, summary in summaries.items():
                    if conc not in summary:
                        continue
                    if variant == reference:
                        vs_ref = "reference"
                    else:
                        row = rows.get((variant, conc))
                        if row is None or row["ratio"] is None:
                            vs_ref = "-"
                        else:
                            vs_ref = "\u00d7%.2f %s%s" % (row["ratio"], _fmt_interval(row["ci_low"], row["ci_high"], 2),
                                                          " *" if row["significant"] else "")
                    out.append("| %s | %s | %s | %s |" % (
                        conc, md_escape(variant), " | ".join(_cell(summary, conc, key) for key, _title in _TABLE_COLUMNS),
                        vs_ref))
            out.append("")
            out.append("Median over the repeats [95 %% bootstrap interval]; * the ratio's interval excludes 1. "
                       "Objective: %s at c=%s; winner: %s."
                       % (_BY_KEY[res["objective"]["metric"]].label, res["objective"]["concurrency"], res["winner"]))
        if res.get("disqualified"):
            out.append("")
            out.extend("- %s disqualified at c=%s: SLO attainment %s, under the %.2f required"
                       % (md_escape(row["variant"]), row["concurrency"], fmt(row["slo_attainment"], 2, fixed=True), row["required"])
                       for row in res["disqualified"])
        if res["failed_variants"]:
            out.append("")
            out.extend("- %s failed: %s" % (md_escape(row["variant"]), md_escape(row["reason"]))
                       for row in res["failed_variants"])
        out.append("")
    return "\n".join(out)
