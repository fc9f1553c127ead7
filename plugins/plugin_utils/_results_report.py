# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The reports of a run: the compact end-of-play summary (text lines) and the Markdown report (regressions,
the variant comparison with compare's tables, a table per host, speed-ups between variants, GPU checks).
"""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.plugin_utils import _compare
from ansible_collections.inferops.serving.plugins.plugin_utils._results_common import BY_KEY, fmt, level_key, md_escape, num
from ansible_collections.inferops.serving.plugins.plugin_utils._results_regressions import regression_lines, threshold_text


def _figure(rec, key):
    """A metric of a history record, printed with the metric table's digits."""
    return fmt(rec.get(key), BY_KEY[key].digits)


def _ratio(new, old):
    new, old = num(new), num(old)
    if new is None or not old:
        return None
    return new / old


def _fmt_ratio(ratio):
    return "-" if ratio is None else "%.2f×" % ratio


def _by_host(records):
    hosts = {}
    for rec in records:
        hosts.setdefault(rec["host"], []).append(rec)
    return hosts


def _by_server(records):
    """Records by (host, instance): each server a row group of its own (a replica is never mixed with another)."""
    servers = {}
    for rec in records:
        servers.setdefault((rec["host"], rec.get("instance")), []).append(rec)
    return servers


def _by_instance(recs):
    """A host's records by instance (None: the host's only server), in the order met."""
    units = {}
    for rec in recs:
        units.setdefault(rec.get("instance"), []).append(rec)
    return units


def _variants(recs):
    seen = []
    for rec in recs:
        if rec["variant"] not in seen:
            seen.append(rec["variant"])
    return seen


def _index(recs):
    """{(variant, concurrency): {"output_throughput": figure}}: the figure ratios between variants use, the
    compare verdict's own (_compare.centre: the geometric mean over the repeats; a single run: its own figure)."""
    values = {}
    for rec in recs:
        slot = values.setdefault((rec["variant"], rec["concurrency"]), [])
        if num(rec.get("output_throughput")) is not None:
            slot.append(rec["output_throughput"])
    return dict((key, {"output_throughput": _compare.centre(found, _compare.THROUGHPUT)[0] if found else None})
                for key, found in values.items())


def _level_table(out, recs, previous):
    """One server's levels (a host's, or one instance's): the table of every variant and concurrency, and the
    speed-up matrix between variants."""
    variants = _variants(recs)
    index = _index(recs)
    out.append("")
    out.append("| variant | fingerprint | concurrency | output tok/s | decode tok/s/req p50 | e2e tok/s/req p50 "
               "| TTFT p50 ms | TPOT p50 ms | acceptance | completed/failed | vs %s | vs previous run |"
               % md_escape(variants[0]))
    out.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for variant in variants:
        for rec in [r for r in recs if r["variant"] == variant]:
            base = index.get((variants[0], rec["concurrency"]))
            vs_base = _ratio(rec.get("output_throughput"), base and base.get("output_throughput"))
            before = previous.get(level_key(rec))
            vs_last = _ratio(rec.get("output_throughput"), before and before.get("output_throughput"))
            out.append("| %s | `%s` | %s | %s | %s | %s | %s | %s | %s | %s/%s | %s | %s |" % (
                md_escape(variant), rec.get("fingerprint") or "-", rec["concurrency"],
                _figure(rec, "output_throughput"), _figure(rec, "decode_tps_per_request"),
                _figure(rec, "e2e_tps_per_request"), _figure(rec, "ttft_ms"), _figure(rec, "tpot_ms"),
                _figure(rec, "acceptance_length"), fmt(rec.get("completed")), fmt(rec.get("failed")),
                "-" if variant == variants[0] else _fmt_ratio(vs_base),
                _fmt_ratio(vs_last) if before else "first run"))
    if len(variants) > 1:
        concs = sorted(set(r["concurrency"] for r in recs), key=lambda c: (c is None, c))
        out.append("")
        out.append("Output throughput speed-up between variants (row ÷ column variant):")
        out.append("")
        out.append("| variant | vs variant | %s |" % " | ".join("c=%s" % c for c in concs))
        out.append("| --- | --- |%s" % (" ---: |" * len(concs)))
        for a in variants:
            for b in variants:
                if a == b:
                    continue
                cells = []
                for conc in concs:
                    ra, rb = index.get((a, conc)), index.get((b, conc))
                    cells.append(_fmt_ratio(_ratio(ra and ra.get("output_throughput"),
                                                   rb and rb.get("output_throughput"))))
                out.append("| %s | %s | %s |" % (md_escape(a), md_escape(b), " | ".join(cells)))
    out.append("")


def summary_lines(records, previous, regressions, window=None):
    """The compact end-of-play table: tok/s aggregate and per request, speed-up vs the previous variant."""
    lines = []
    for (host, instance), recs in _by_server(records).items():
        variants = _variants(recs)
        index = _index(recs)
        lines.append("bench_facts: %s" % host if instance is None else "bench_facts: %s instance %s" % (host, instance))
        lines.append("  %-20s %6s %12s %12s %9s %9s %9s" % (
            "variant", "conc", "out tok/s", "req tok/s", "TPOT ms", "vs prev", "vs last"))
        for pos, variant in enumerate(variants):
            for rec in [r for r in recs if r["variant"] == variant]:
                vs_variant = None
                if pos:
                    other = index.get((variants[pos - 1], rec["concurrency"]))
                    vs_variant = _ratio(rec.get("output_throughput"), other and other.get("output_throughput"))
                before = previous.get(level_key(rec))
                vs_last = _ratio(rec.get("output_throughput"), before and before.get("output_throughput"))
                lines.append("  %-20s %6s %12s %12s %9s %9s %9s" % (
                    variant[:20], rec["concurrency"], _figure(rec, "output_throughput"),
                    _figure(rec, "decode_tps_per_request"), _figure(rec, "tpot_ms"),
                    _fmt_ratio(vs_variant), _fmt_ratio(vs_last)))
    if regressions:
        lines.extend(regression_lines(regressions))
    elif records:
        lines.append("bench_facts: no regression (against the window of the last %s runs of each level, bench "
                     "settings and kind)" % (window or "earlier"))
    return lines


def comparison_section(verdicts, chart=None):
    """The report's Comparison section: per host the verdict lines and the variants side by side."""
    if not verdicts:
        return []
    out = ["## Comparison", ""]
    for host, verdict in verdicts:
        out.append("### %s" % md_escape(host))
        out.append("")
        lines = list(verdict.get("lines") or [])
        out.extend("- %s" % line for line in lines)
        if lines:
            out.append("")
        try:
            table = _compare.markdown_table(verdict).splitlines()
        except Exception as exc:  # a malformed verdict must not cost the report
            table = ["(no table for this verdict: %s)" % exc]
        if table and table[0].startswith("## "):  # markdown_table heads each host itself: the heading is above
            table = table[1:]
        while table and not table[0].strip():
            table = table[1:]
        while table and not table[-1].strip():
            table = table[:-1]
        out.extend(table)
        out.append("")
    if chart:
        out.append("![output throughput against concurrency and TPOT against output throughput, per variant](%s)"
                   % chart)
        out.append("")
    return out


def render_report(run, records, previous, regressions, threshold_pct, chart=None, compare=None, compare_chart=None):
    """The Markdown report of one run: regressions, the comparison, a table per host, speed-ups, GPU checks.

    ``compare`` is [(host, verdict)] (compare_verdicts), ``compare_chart`` the comparison chart's file name.
    """
    out = ["# Benchmark run %s" % run["run"], ""]
    out.append("- playbook: `%s`" % run.get("playbook"))
    out.append("- plays: %s" % ", ".join(run.get("plays") or []) if run.get("plays") else "- plays: -")
    out.append("- time: %s" % run["time"])
    out.append("- ansible-core %s, inferops.serving %s" % (run.get("ansible_version"), run.get("collection_version")))
    gate = run.get("regression_gate") or {}
    out.append("- regression threshold: %s %% (%s)%s" % (
        fmt(float(threshold_pct)), threshold_text(),
        ", beyond the 95 %% prediction interval of the last %s runs" % gate["window"] if gate.get("window") else ""))
    if gate.get("ack"):
        out.append("- regression_ack: %s (the window of those levels restarts with this run)" % gate["ack"])
    out.append("")
    if regressions:
        out.append("## Regressions")
        out.append("")
        out.extend("- %s" % line for line in regression_lines(regressions))
        out.append("")
    out.extend(comparison_section(compare or [], compare_chart))
    hosts = _by_host(records)
    for host, info in run["hosts"].items():
        out.append("## %s" % host)
        out.append("")
        for gpu in info.get("gpu_checks", []):
            gpus = gpu.get("gpus") or []
            killed = gpu.get("killed") or []
            out.append("- GPU check (%s): %s, %d GPU(s)%s, killed %d%s" % (
                gpu.get("task"), "clean" if gpu.get("clean") else "NOT clean", len(gpus),
                (": " + ", ".join("%s %s" % (g.get("index"), g.get("name")) for g in gpus)) if gpus else "",
                len(killed), (" (" + ", ".join(str(k.get("pid", k)) if isinstance(k, dict) else str(k)
                                               for k in killed) + ")") if killed else ""))
        for server in info.get("servers", []):
            out.append("- server %s: fingerprint `%s`, ready in %s s, argv `%s`" % (
                server.get("variant"), server.get("fingerprint"), fmt(server.get("ready_s"), 2),
                " ".join(str(a) for a in server.get("argv") or [])))
        recs = hosts.get(host, [])
        if not recs:
            out.append("")
            out.append("No benchmark results for this host.")
            out.append("")
            continue
        for instance, unit in _by_instance(recs).items():
            if instance is not None:
                out.append("")
                out.append("### instance %s" % instance)
            _level_table(out, unit, previous)
    if chart:
        out.append("![output throughput and per-request decode speed against concurrency](%s)" % chart)
        out.append("")
    return "\n".join(out)
