# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The charts of a run (PNG, with matplotlib when the controller has it): output throughput and per-request
decode speed against concurrency, and a comparison's throughput and TPOT trade-off with their intervals.
"""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.plugin_utils._results_common import num


def render_chart(path, records):
    """Write a PNG: output throughput and per-request decode speed against concurrency.

    One line per variant (host/variant when there are several hosts). Returns None when written,
    else the reason it was skipped (matplotlib missing, nothing to plot).
    """
    points = [r for r in records if num(r.get("concurrency")) is not None]
    if not points:
        return "no benchmark levels to plot"
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return "matplotlib is not installed on the controller"
    several_hosts = len(set(r["host"] for r in points)) > 1
    series = {}
    for rec in points:
        label = "%s/%s" % (rec["host"], rec["variant"]) if several_hosts else rec["variant"]
        series.setdefault(label, []).append(rec)
    fig, (left, right) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    try:
        for label, recs in series.items():
            recs = sorted(recs, key=lambda r: r["concurrency"])
            xs = [r["concurrency"] for r in recs]
            left.plot(xs, [r.get("output_throughput") for r in recs], marker="o", label=label)
            right.plot(xs, [r.get("decode_tps_per_request") for r in recs], marker="o", label=label)
        concs = sorted(set(r["concurrency"] for r in points))
        for axis, title, ylabel in ((left, "Output throughput", "output tok/s (aggregate)"),
                                    (right, "Per-request decode speed", "decode tok/s per request (p50)")):
            if len(concs) > 1 and concs[0] > 0 and concs[-1] / float(concs[0]) >= 8:
                axis.set_xscale("log", base=2)
            axis.set_xticks(concs)
            axis.set_xticklabels([str(c) for c in concs])
            axis.set_xlabel("concurrency")
            axis.set_ylabel(ylabel)
            axis.set_title(title)
            axis.set_ylim(bottom=0)
            axis.grid(True, alpha=0.3)
            axis.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        pyplot.close(fig)
    return None


def _conc_value(conc):
    """A concurrency key as a number (a key that went through JSON is a string), else None."""
    if isinstance(conc, bool):
        return None
    if isinstance(conc, (int, float)):
        return conc
    try:
        text = str(conc).strip()
        return float(text) if "." in text else int(text)
    except (TypeError, ValueError):
        return None


def _interval_cell(cells, key):
    """(figure, ci_low, ci_high) of a summary cell (its median key: the geometric mean over the repeats), the
    interval collapsed onto the figure where missing."""
    cell = cells.get(key) if isinstance(cells, dict) else None
    if not isinstance(cell, dict):
        return None
    median = num(cell.get("median"))
    if median is None:
        return None
    low, high = num(cell.get("ci_low")), num(cell.get("ci_high"))
    return (median, median if low is None else min(low, median), median if high is None else max(high, median))


def compare_series(verdicts):
    """[(label, points)]: one series per host x measured variant, points sorted by concurrency.

    A point is {"concurrency", "output_throughput", "tpot_ms"}, each figure (median, ci_low, ci_high)
    or None when that metric is missing. The label is the variant, host/variant over several hosts.
    """
    several = len(verdicts) > 1
    series = []
    for host, verdict in verdicts:
        summaries = verdict.get("summaries")
        if not isinstance(summaries, dict):
            continue
        for variant, summary in summaries.items():
            if not isinstance(summary, dict):
                continue
            points = []
            for conc, cells in summary.items():
                value = _conc_value(conc)
                if value is None:
                    continue
                points.append({"concurrency": value, "output_throughput": _interval_cell(cells, "output_throughput"),
                               "tpot_ms": _interval_cell(cells, "tpot_ms")})
            if points:
                points.sort(key=lambda p: p["concurrency"])
                series.append(("%s/%s" % (host, variant) if several else str(variant), points))
    return series


def _errors(cells):
    return [[c[0] - c[1] for c in cells], [c[2] - c[0] for c in cells]]


def render_compare_chart(path, verdicts):
    """Write a PNG of a comparison: output throughput against concurrency with its interval, and TPOT
    p50 against output throughput (the trade-off), one line per variant (the geometric mean over the repeats,
    bars its 95 % t-interval, as compare_variants gives them). Returns None when written, else the reason it
    was skipped.
    """
    series = compare_series(verdicts)
    if not any(p["output_throughput"] for _label, points in series for p in points):
        return "no compared output throughput to plot"
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return "matplotlib is not installed on the controller"
    fig, (left, right) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    try:
        concs = set()
        for label, points in series:
            tput = [p for p in points if p["output_throughput"]]
            if tput:
                cells = [p["output_throughput"] for p in tput]
                xs = [p["concurrency"] for p in tput]
                concs.update(xs)
                left.errorbar(xs, [c[0] for c in cells], yerr=_errors(cells), marker="o", capsize=3, label=label)
            both = [p for p in points if p["output_throughput"] and p["tpot_ms"]]
            if both:
                xcells, ycells = [p["output_throughput"] for p in both], [p["tpot_ms"] for p in both]
                right.errorbar([c[0] for c in xcells], [c[0] for c in ycells], xerr=_errors(xcells),
                               yerr=_errors(ycells), marker="o", capsize=3, label=label)
                for point, xcell, ycell in zip(both, xcells, ycells):
                    right.annotate("c=%s" % point["concurrency"], (xcell[0], ycell[0]), textcoords="offset points",
                                   xytext=(4, 4), fontsize=7)
        concs = sorted(concs)
        if len(concs) > 1 and concs[0] > 0 and concs[-1] / float(concs[0]) >= 8:
            left.set_xscale("log", base=2)
        left.set_xticks(concs)
        left.set_xticklabels([str(c) for c in concs])
        for axis, title, xlabel, ylabel in (
                (left, "Output throughput (geometric mean, 95 % interval)", "concurrency", "output tok/s (aggregate)"),
                (right, "TPOT against output throughput", "output tok/s (aggregate)", "TPOT p50 ms")):
            axis.set_xlabel(xlabel)
            axis.set_ylabel(ylabel)
            axis.set_title(title)
            axis.set_ylim(bottom=0)
            axis.grid(True, alpha=0.3)
            if axis.get_legend_handles_labels()[0]:
                axis.legend()
        right.set_xlim(left=0)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        pyplot.close(fig)
    return None
