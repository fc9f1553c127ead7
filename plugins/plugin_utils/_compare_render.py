# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The compare's verdict in words: its lines (printed, and kept in the run file) and its Markdown table."""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.plugin_utils import _resolved_diff, _steady
from ansible_collections.inferops.serving.plugins.plugin_utils._results_common import COMPARED, conc_key, fmt, md_escape
from ansible_collections.inferops.serving.plugins.plugin_utils._stats import GEOMETRIC

METRICS = COMPARED
_BY_KEY = dict((metric.key, metric) for metric in METRICS)
THROUGHPUT = "output_throughput"


def _fmt_interval(low, high, digits):
    return "[%s, %s]" % (fmt(low, digits, fixed=True), fmt(high, digits, fixed=True))


def _with_unit(value, digits, unit):
    return "%s %s" % (fmt(value, digits, fixed=True), unit) if unit else fmt(value, digits, fixed=True)


def lines(result, order):
    """The verdict's lines: each variant against the reference at the objective, then what else it found."""
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
            lines.append("%s ratio undefined (%s)" % (head, row.get("why") or "%s's figure is 0" % reference))
        elif row["ci_low"] is None:
            lines.append("%s \u00d7%.2f (no interval: %s)" % (head, row["ratio"], row.get("why") or "too few repeats"))
        else:
            verdict = "significant" if row["significant"] else "not significant"
            lines.append("%s \u00d7%.2f [%.2f, %.2f] %s" % (head, row["ratio"], row["ci_low"], row["ci_high"], verdict))
    seq = result.get("sequential")
    if seq:
        why = {"decided": "every variant decided", "budget": "the budget of %s s ran out" % fmt(seq.get("budget_s"), 0),
               "maximum": "compare_max_repeats reached"}.get(seq.get("stopped"), "not yet")
        decided = ", ".join("%s %s" % (name, said or "undecided") for name, said in (seq.get("decisions") or {}).items())
        lines.append("compare %s: ran %d round(s), stopped: %s (%s); %s; intervals valid at any of %d planned looks "
                     "(each at %s %%, Bonferroni over the looks)"
                     % (host, seq.get("rounds") or 0, seq.get("stopped") or "-", why, decided or "nothing to decide",
                        seq["looks"], ("%.3f" % (100.0 * seq["confidence"])).rstrip("0").rstrip(".")))
    for row in result["disqualified"]:
        met = ("%.0f %% of requests met the SLO (mean of %d)" % (100.0 * row["slo_attainment"], row["n"])
               if row["slo_attainment"] is not None else "no SLO attainment was measured")
        lines.append("compare %s: %s disqualified at c=%s: %s, under the %.0f %% required"
                     % (host, row["variant"], row["concurrency"], met, 100.0 * row["required"]))
    lines.extend(_steady.lines(result.get("unsteady"), host))
    for diff_ in result.get("resolved") or ():
        chosen = diff_["engine_chosen"]
        if chosen:
            lines.append("compare %s: WARNING %s and %s differ in %d setting(s) the engine chose by itself: %s"
                         % (host, diff_["variants"][0], diff_["variants"][1], len(chosen),
                            ", ".join("%s (%s / %s)" % (row["setting"], row["values"][0], row["values"][1])
                                      for row in chosen[:5]) + (", ..." if len(chosen) > 5 else "")))
    moved = result.get("drift")
    if moved:
        mdigits = _BY_KEY[moved["metric"]].digits
        lines.append("compare %s: drift of %s over the comparison%s: %s at c=%s %s on its first repeat, %s on its last "
                     "(\u00d7%.2f over %d repeats)"
                     % (host, moved["variant"], " (%s order)" % result["order"] if result.get("order") else "",
                        _BY_KEY[moved["metric"]].short, moved["concurrency"],
                        _with_unit(moved["first"], mdigits, _BY_KEY[moved["metric"]].unit),
                        _with_unit(moved["last"], mdigits, _BY_KEY[moved["metric"]].unit), moved["ratio"], moved["n"]))
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
        lines.append("compare %s: winner %s (%s %s at c=%s, %s of %d)"
                     % (host, winner, short, _with_unit(cell["median"], digits, unit), conc,
                        cell.get("estimate") or GEOMETRIC, cell["n"]))
    return lines


def _cell(summary, conc, key):
    cell = (summary.get(conc) or {}).get(key)
    if cell is None:
        return "-"
    digits = _BY_KEY[key].digits
    if cell.get("ci_low") is None:
        return fmt(cell["median"], digits, fixed=True)
    return "%s %s" % (fmt(cell["median"], digits, fixed=True), _fmt_interval(cell["ci_low"], cell["ci_high"], digits))


_TABLE_COLUMNS = tuple((metric.key, metric.column) for metric in METRICS)


def markdown_table(result):
    """Side-by-side Markdown: per host, a row per concurrency x variant, figure [95 % CI] per metric.

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
            for conc in sorted(concs, key=conc_key):
                for variant, summary in summaries.items():
                    if conc not in summary:
                        continue
                    if variant == reference:
                        vs_ref = "reference"
                    else:
                        row = rows.get((variant, conc))
                        if row is None or row["ratio"] is None:
                            vs_ref = "-"
                        elif row["ci_low"] is None:
                            vs_ref = "\u00d7%.2f" % row["ratio"]
                        else:
                            vs_ref = "\u00d7%.2f %s%s" % (row["ratio"], _fmt_interval(row["ci_low"], row["ci_high"], 2),
                                                          " *" if row["significant"] else "")
                    out.append("| %s | %s | %s | %s |" % (
                        conc, md_escape(variant), " | ".join(_cell(summary, conc, key) for key, _title in _TABLE_COLUMNS),
                        vs_ref))
            out.append("")
            out.append("Geometric mean over the repeats [95 %% t-interval on the logs]; goodput and SLO met: mean "
                       "[95 %% t-interval]; no interval from one repeat. Output vs %s: ratio of the geometric means "
                       "[95 %% Welch interval]; * the interval excludes 1. Objective: %s at c=%s; winner: %s."
                       % (md_escape(reference), _BY_KEY[res["objective"]["metric"]].label,
                          res["objective"]["concurrency"], res["winner"]))
        if res.get("drift"):
            moved = res["drift"]
            out.append("")
            out.append("Drift%s: %s's %s at c=%s went from %s on its first repeat to %s on its last (\u00d7%.2f)."
                       % (" (%s order)" % res["order"] if res.get("order") else "", md_escape(moved["variant"]),
                          _BY_KEY[moved["metric"]].label, moved["concurrency"],
                          fmt(moved["first"], _BY_KEY[moved["metric"]].digits, fixed=True),
                          fmt(moved["last"], _BY_KEY[moved["metric"]].digits, fixed=True), moved["ratio"]))
        for diff_ in res.get("resolved") or ():
            out.append("")
            out.extend(_resolved_diff.markdown_lines(
                diff_, heading="### Resolved settings: %s against %s" % (md_escape(diff_["variants"][0]),
                                                                         md_escape(diff_["variants"][1])))[:-1])
        if res.get("unsteady"):
            out.append("")
            out.extend("- %s" % md_escape(line) for line in _steady.lines(res["unsteady"]))
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
