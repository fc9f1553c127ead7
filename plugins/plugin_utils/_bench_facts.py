# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of the bench_facts callback: aggregation, history, regressions, report, chart.

Everything here is a plain function over plain data (task results as dicts), so it is unit-tested
without Ansible. The callback plugin only feeds results in and prints what comes out.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import statistics

BENCH_ACTION = "throughput_bench"
GPU_ACTION = "gpu_idle_check"
SERVER_ACTION = "inference_server"
ASYNC_STATUS = "async_status"

DEFAULT_VARIANT = "default"
HISTORY_FILE = "history.jsonl"
# the set_stats key under which playbooks/compare.yml publishes {host: compare_variants verdict}
COMPARE_STAT = "inferops_compare"

# percentiles copied from a level's distributions into each history line
_DISTRIBUTIONS = ("ttft_ms", "tpot_ms", "e2e_ms", "decode_tps_per_request", "e2e_tps_per_request")
_SCALARS = ("completed", "failed", "duration_s", "output_throughput", "input_throughput",
            "request_throughput", "goodput", "slo_attainment", "tokens_per_chunk", "token_source",
            "acceptance_length")

# What a regression is judged on, one row per metric of a history record:
# (key, label, unit, digits printed, which way is better: "higher" or "lower").
REGRESSION_METRICS = (
    ("output_throughput", "output throughput", "tok/s", 1, "higher"),
    ("tpot_ms", "TPOT p50", "ms", 2, "lower"),
)
_REGRESSION_BY_KEY = dict((row[0], row) for row in REGRESSION_METRICS)


def _short(action):
    return (action or "").rsplit(".", 1)[-1]


def is_level(item):
    """A throughput_bench level: a dict with a concurrency and an output throughput."""
    return isinstance(item, dict) and "concurrency" in item and "output_throughput" in item


def bench_levels(result):
    """The level dicts of a throughput_bench result, or [] when it carries none."""
    levels = result.get("results") if isinstance(result, dict) else None
    if not isinstance(levels, list):
        return []
    return [level for level in levels if is_level(level)]


def classify(action, result):
    """Which kind of result this is: 'bench', 'gpu', 'server' or None.

    Direct calls are known by the action name (short or FQCN). A job started with ``async`` and
    ``poll: 0`` ends in an ``async_status`` result that carries the module's own keys once
    finished, so those are known by their shape.
    """
    if not isinstance(result, dict):
        return None
    name = _short(action)
    if name == BENCH_ACTION:
        return "bench" if bench_levels(result) else None
    if name == GPU_ACTION:
        return "gpu"
    if name == SERVER_ACTION:
        return "server"
    if name == ASYNC_STATUS:
        if not result.get("finished"):
            return None
        if bench_levels(result):
            return "bench"
        if "gpus" in result and "clean" in result:
            return "gpu"
        if "argv" in result and ("fingerprint" in result or "ready_s" in result):
            return "server"
    return None


def loop_items(result):
    """The per-item results of a looped task's final result, or None when it is not a loop."""
    items = result.get("results") if isinstance(result, dict) else None
    if isinstance(items, list) and items and all(
            isinstance(i, dict) and ("ansible_loop_var" in i or "item" in i) and not is_level(i) for i in items):
        return items
    return None


def split_repeats(levels):
    """The levels of one throughput_bench result as one list per repeat (their labels.repeat, in the order
    met); a result without repeat labels is one list."""
    groups, order = {}, []
    for level in levels:
        labels = level.get("labels") if isinstance(level.get("labels"), dict) else {}
        key = repeat_index(labels.get("repeat"))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(level)
    return [groups[key] for key in order]


def _pick(result, keys):
    return dict((k, result[k]) for k in keys if k in result)


class RunCollector(object):
    """Everything one playbook run produced that bench_facts records, grouped by host."""

    def __init__(self):
        self.plays = []
        self.hosts = {}
        self.order = []

    def _host(self, host):
        if host not in self.hosts:
            self.hosts[host] = {"gpu_checks": [], "servers": [], "benchmarks": []}
            self.order.append(host)
        return self.hosts[host]

    def add_play(self, name):
        if name not in self.plays:
            self.plays.append(name)

    def add(self, host, action, task, result, status="ok"):
        """Record one task result; returns the kind recorded or None. Loop results are split."""
        items = loop_items(result)
        if items is not None:
            kinds = [self.add(host, action, task, item, "failed" if item.get("failed") else status) for item in items]
            return next((k for k in kinds if k), None)
        kind = classify(action, result)
        if kind is None:
            return None
        entry = self._host(host)
        if kind == "gpu":
            self._gpu_check(entry, result, task, status)
        elif kind == "server":
            if isinstance(result.get("gpu_check"), dict):  # inference_server's gpu_check, between stop and start
                self._gpu_check(entry, dict(result["gpu_check"], msg=result.get("msg") if status != "ok" else None),
                                "%s (gpu_check)" % task, status)
            if status == "ok" and result.get("pid") is None:
                return None  # a stop, or a plan that would start: no server to record
            server = _pick(result, ("argv", "pid", "url", "fingerprint", "variant", "ready_s", "msg", "log_tail"))
            server.update(task=task, status=status)
            last = entry["servers"][-1] if entry["servers"] else {}
            if server.get("pid") is not None and (last.get("pid"), last.get("fingerprint"), last.get("status")) == (
                    server.get("pid"), server.get("fingerprint"), status):
                # the same engine again: a start's first call (loading) then its wait, or a later no-op call
                server["ready_s"] = last.get("ready_s") if last.get("ready_s") is not None else server.get("ready_s")
                entry["servers"][-1] = dict(last, **server)
            else:
                entry["servers"].append(server)
        else:
            # one benchmark per repeat: a throughput_bench call with repeats returns every repeat's levels
            for levels in split_repeats(bench_levels(result)):
                labels = {}
                for level in levels:
                    if isinstance(level.get("labels"), dict):
                        labels.update(level["labels"])
                entry["benchmarks"].append({"task": task, "status": status, "labels": labels,
                                            "client": result.get("client") or {}, "levels": levels})
        return kind

    @staticmethod
    def _gpu_check(entry, result, task, status):
        gpu = _pick(result, ("clean", "gpus", "killed", "waited_s", "backend", "msg"))
        if gpu.get("msg") is None:
            gpu.pop("msg", None)
        gpu.update(task=task, status=status)
        entry["gpu_checks"].append(gpu)

    def identity(self, host, bench):
        """(variant, fingerprint) of a benchmark: its labels, else the host's last server result."""
        servers = [s for s in self.hosts[host]["servers"] if s.get("status") == "ok"] or self.hosts[host]["servers"]
        server = servers[-1] if servers else {}
        variant = bench["labels"].get("variant") or server.get("variant") or DEFAULT_VARIANT
        fingerprint = bench["labels"].get("fingerprint") or server.get("fingerprint")
        return str(variant), fingerprint

    def is_empty(self):
        return not self.hosts


def utc_stamp(now):
    return now.strftime("%Y%m%dT%H%M%SZ")


def run_id(now, playbook):
    name = os.path.splitext(os.path.basename(playbook or "adhoc"))[0] or "adhoc"
    return "%s-%s" % (utc_stamp(now), re.sub(r"[^A-Za-z0-9_.-]+", "_", name))


def _num(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _p50(level, key):
    dist = level.get(key)
    if isinstance(dist, dict):
        return _num(dist.get("p50"))
    return _num(dist)


def repeat_index(value):
    """The 0-based repeat index of a benchmark's labels: an int, a string of digits read as one, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def history_records(collector, now, rid):
    """One flat record per host x variant x concurrency of each benchmark (the history.jsonl lines).

    A benchmark is one throughput_bench result, so each repeat of a comparison gives its own lines;
    ``repeat`` is its index from the labels (None without one), the other labels stay under ``labels``.
    """
    records = []
    stamp = now.isoformat().replace("+00:00", "Z")
    for host in collector.order:
        for bench in collector.hosts[host]["benchmarks"]:
            variant, fingerprint = collector.identity(host, bench)
            for level in bench["levels"]:
                rec = {"time": stamp, "run": rid, "host": host, "variant": variant,
                       "fingerprint": fingerprint, "concurrency": level.get("concurrency"),
                       "repeat": repeat_index(bench["labels"].get("repeat"))}
                for key in _SCALARS:
                    rec[key] = level.get(key)
                for key in _DISTRIBUTIONS:
                    dist = level.get(key)
                    rec[key] = _p50(level, key)
                    if isinstance(dist, dict):
                        for pct in ("mean", "p90", "p99"):
                            rec["%s_%s" % (key, pct)] = _num(dist.get(pct))
                rec["errors"] = level.get("errors")
                extra = dict((k, v) for k, v in bench["labels"].items() if k not in ("variant", "fingerprint", "host"))
                if extra:
                    rec["labels"] = extra
                records.append(rec)
    return records


def read_history(path):
    """(records, skipped) from a history.jsonl; a missing file is empty, corrupt lines are skipped."""
    records, skipped = [], 0
    if not os.path.exists(path):
        return records, skipped
    with open(path, "r", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            if isinstance(rec, dict) and "host" in rec and "variant" in rec and "concurrency" in rec:
                records.append(rec)
            else:
                skipped += 1
    return records, skipped


def append_history(path, records):
    """Append one JSON line per record, each with a single write on an O_APPEND file."""
    with open(path, "a", encoding="utf-8") as handle:
        for rec in records:
            handle.write(json.dumps(rec, sort_keys=True, default=str) + "\n")
            handle.flush()


def previous_levels(history, current_run=None):
    """{(host, variant, concurrency): last record} over the earlier runs in the history."""
    last = {}
    for rec in history:
        if current_run and rec.get("run") == current_run:
            continue
        last[(rec["host"], rec["variant"], rec["concurrency"])] = rec
    return last


def find_regressions(records, previous, threshold_pct):
    """Regressions of this run against the previous run of the same host + variant + concurrency.

    A regression is a change for the worse (REGRESSION_METRICS: a drop of output throughput, a rise of
    TPOT p50) by more than threshold_pct.
    """
    found = []
    limit = float(threshold_pct) / 100.0
    for rec in records:
        before = previous.get((rec["host"], rec["variant"], rec["concurrency"]))
        if not before:
            continue
        for key, _label, _unit, _digits, better in REGRESSION_METRICS:
            worse = -1 if better == "higher" else 1
            old, new = _num(before.get(key)), _num(rec.get(key))
            if old is None or new is None or old <= 0:
                continue
            change = (new - old) / old
            if change * worse > limit:
                found.append({"host": rec["host"], "variant": rec["variant"], "concurrency": rec["concurrency"],
                              "metric": key, "before": old, "after": new,
                              "change_pct": round(change * 100.0, 1), "before_run": before.get("run"),
                              "before_fingerprint": before.get("fingerprint"), "fingerprint": rec.get("fingerprint")})
    return found


def regression_lines(regressions):
    """One line per host + variant + concurrency, beginning REGRESSION:, with before -> after."""
    lines, groups = [], {}
    for reg in regressions:
        key = (reg["host"], reg["variant"], reg["concurrency"])
        if key not in groups:
            groups[key] = []
            lines.append(key)
        groups[key].append(reg)
    out = []
    for key in lines:
        regs = groups[key]
        parts = []
        for reg in regs:
            _key, name, unit, digits, _better = _REGRESSION_BY_KEY[reg["metric"]]
            parts.append("%s %s \u2192 %s %s (%+.1f %%)" % (name, _fmt(reg["before"], digits),
                                                            _fmt(reg["after"], digits), unit, reg["change_pct"]))
        line = "REGRESSION: host %s, variant %s, concurrency %s: %s" % (key[0], key[1], key[2], "; ".join(parts))
        reg = regs[0]
        if reg.get("before_fingerprint") and reg.get("before_fingerprint") != reg.get("fingerprint"):
            line += " [fingerprint %s \u2192 %s]" % (reg["before_fingerprint"], reg["fingerprint"])
        if reg.get("before_run"):
            line += " [previous run %s]" % reg["before_run"]
        out.append(line)
    return out


def _fmt(value, digits=1):
    if value is None:
        return "-"
    if isinstance(value, float):
        return ("%%.%df" % digits) % value
    return str(value)


def _ratio(new, old):
    new, old = _num(new), _num(old)
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


def _variants(recs):
    seen = []
    for rec in recs:
        if rec["variant"] not in seen:
            seen.append(rec["variant"])
    return seen


def _index(recs):
    """{(variant, concurrency): {"output_throughput": median}}: the figure ratios between variants use, the
    median over the repeats of a comparison (a single run: its own figure)."""
    values = {}
    for rec in recs:
        slot = values.setdefault((rec["variant"], rec["concurrency"]), [])
        if _num(rec.get("output_throughput")) is not None:
            slot.append(rec["output_throughput"])
    return dict((key, {"output_throughput": statistics.median(found) if found else None})
                for key, found in values.items())


def summary_lines(records, previous, regressions):
    """The compact end-of-play table: tok/s aggregate and per request, speed-up vs the previous variant."""
    lines = []
    for host, recs in _by_host(records).items():
        variants = _variants(recs)
        index = _index(recs)
        lines.append("bench_facts: %s" % host)
        lines.append("  %-20s %6s %12s %12s %9s %9s %9s" % (
            "variant", "conc", "out tok/s", "req tok/s", "TPOT ms", "vs prev", "vs last"))
        for pos, variant in enumerate(variants):
            for rec in [r for r in recs if r["variant"] == variant]:
                vs_variant = None
                if pos:
                    other = index.get((variants[pos - 1], rec["concurrency"]))
                    vs_variant = _ratio(rec.get("output_throughput"), other and other.get("output_throughput"))
                before = previous.get((host, variant, rec["concurrency"]))
                vs_last = _ratio(rec.get("output_throughput"), before and before.get("output_throughput"))
                lines.append("  %-20s %6s %12s %12s %9s %9s %9s" % (
                    variant[:20], rec["concurrency"], _fmt(rec.get("output_throughput")),
                    _fmt(rec.get("decode_tps_per_request")), _fmt(rec.get("tpot_ms"), 2),
                    _fmt_ratio(vs_variant), _fmt_ratio(vs_last)))
    if regressions:
        lines.extend(regression_lines(regressions))
    elif records:
        lines.append("bench_facts: no regression (against the previous run of each host + variant)")
    return lines


def _md_escape(text):
    return str(text).replace("|", "\\|")


# ---- variant comparisons: playbooks/compare.yml publishes compare_variants verdicts with set_stats ----

def _is_verdict(value):
    return isinstance(value, dict) and any(k in value for k in ("comparisons", "summaries", "lines"))


def compare_verdicts(custom, order=()):
    """[(host, verdict)] published as the COMPARE_STAT custom stat, the hosts of ``order`` first.

    ``custom`` is the playbook's custom stats (``AggregateStats.custom``): {"_run": {stat: value}}
    for ``set_stats`` with ``per_host: false`` (``aggregate: true`` merges the {host: verdict} dict of
    each host into one), {host: {stat: value}} with ``per_host: true``; both are read. A value that is
    not a compare_variants verdict is skipped.
    """
    if not isinstance(custom, dict):
        return []
    found = {}
    scopes = [custom.get("_run")] + [custom[key] for key in custom if key != "_run"]
    for scope in scopes:
        published = scope.get(COMPARE_STAT) if isinstance(scope, dict) else None
        if not isinstance(published, dict):
            continue
        for host, verdict in published.items():
            if _is_verdict(verdict):
                found[str(host)] = verdict
    order = [str(h) for h in order or ()]
    hosts = [h for h in order if h in found] + [h for h in found if h not in order]
    return [(host, found[host]) for host in hosts]


def _rows(value, host):
    return [dict(row, host=row.get("host") or host) for row in value or [] if isinstance(row, dict)]


def compare_document(verdicts):
    """The run file's comparison keys from [(host, verdict)]: every host's rows, flat, and each verdict in short.

    ``comparisons``: each verdict's comparisons rows (host, baseline, variant, concurrency, metric,
    ratio, ci_low, ci_high, repeats, significant, improved, medians); ``failed_variants``: (host,
    variant, reason[, log_tail]); ``compare``: {host: {reference, winner, objective, disqualified, lines}}.
    """
    comparisons, failed, short = [], [], {}
    for host, verdict in verdicts:
        comparisons.extend(_rows(verdict.get("comparisons"), host))
        failed.extend(_rows(verdict.get("failed_variants"), host))
        short[host] = {"reference": verdict.get("reference"), "winner": verdict.get("winner"),
                       "objective": verdict.get("objective"), "disqualified": _rows(verdict.get("disqualified"), host),
                       "lines": list(verdict.get("lines") or [])}
    return {"comparisons": comparisons, "failed_variants": failed, "compare": short}


def comparison_section(verdicts, chart=None):
    """The report's Comparison section: per host the verdict lines and the variants side by side."""
    if not verdicts:
        return []
    # imported here: _compare imports this module
    from ansible_collections.inferops.serving.plugins.plugin_utils import _compare
    out = ["## Comparison", ""]
    for host, verdict in verdicts:
        out.append("### %s" % _md_escape(host))
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
    """(median, ci_low, ci_high) of a summary cell, the interval collapsed onto the median where missing."""
    cell = cells.get(key) if isinstance(cells, dict) else None
    if not isinstance(cell, dict):
        return None
    median = _num(cell.get("median"))
    if median is None:
        return None
    low, high = _num(cell.get("ci_low")), _num(cell.get("ci_high"))
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
    p50 against output throughput (the trade-off), one line per variant (median over the repeats, bars
    the 95 % bootstrap intervals). Returns None when written, else the reason it was skipped.
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
                (left, "Output throughput (median, 95 % interval)", "concurrency", "output tok/s (aggregate)"),
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


def render_report(run, records, previous, regressions, threshold_pct, chart=None, compare=None, compare_chart=None):
    """The Markdown report of one run: regressions, the comparison, a table per host, speed-ups, GPU checks.

    ``compare`` is [(host, verdict)] (compare_verdicts), ``compare_chart`` the comparison chart's file name.
    """
    out = ["# Benchmark run %s" % run["run"], ""]
    out.append("- playbook: `%s`" % run.get("playbook"))
    out.append("- plays: %s" % ", ".join(run.get("plays") or []) if run.get("plays") else "- plays: -")
    out.append("- time: %s" % run["time"])
    out.append("- ansible-core %s, inferops.serving %s" % (run.get("ansible_version"), run.get("collection_version")))
    out.append("- regression threshold: %s %% (output throughput drop or TPOT p50 rise)" % _fmt(float(threshold_pct)))
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
                server.get("variant"), server.get("fingerprint"), _fmt(server.get("ready_s"), 2),
                " ".join(str(a) for a in server.get("argv") or [])))
        recs = hosts.get(host, [])
        if not recs:
            out.append("")
            out.append("No benchmark results for this host.")
            out.append("")
            continue
        variants = _variants(recs)
        index = _index(recs)
        out.append("")
        out.append("| variant | fingerprint | concurrency | output tok/s | decode tok/s/req p50 | e2e tok/s/req p50 "
                   "| TTFT p50 ms | TPOT p50 ms | acceptance | completed/failed | vs %s | vs previous run |"
                   % _md_escape(variants[0]))
        out.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for variant in variants:
            for rec in [r for r in recs if r["variant"] == variant]:
                base = index.get((variants[0], rec["concurrency"]))
                vs_base = _ratio(rec.get("output_throughput"), base and base.get("output_throughput"))
                before = previous.get((host, variant, rec["concurrency"]))
                vs_last = _ratio(rec.get("output_throughput"), before and before.get("output_throughput"))
                out.append("| %s | `%s` | %s | %s | %s | %s | %s | %s | %s | %s/%s | %s | %s |" % (
                    _md_escape(variant), rec.get("fingerprint") or "-", rec["concurrency"],
                    _fmt(rec.get("output_throughput")), _fmt(rec.get("decode_tps_per_request")),
                    _fmt(rec.get("e2e_tps_per_request")), _fmt(rec.get("ttft_ms")), _fmt(rec.get("tpot_ms"), 2),
                    _fmt(rec.get("acceptance_length"), 2), _fmt(rec.get("completed")), _fmt(rec.get("failed")),
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
                    out.append("| %s | %s | %s |" % (_md_escape(a), _md_escape(b), " | ".join(cells)))
        out.append("")
    if chart:
        out.append("![output throughput and per-request decode speed against concurrency](%s)" % chart)
        out.append("")
    return "\n".join(out)


def render_chart(path, records):
    """Write a PNG: output throughput and per-request decode speed against concurrency.

    One line per variant (host/variant when there are several hosts). Returns None when written,
    else the reason it was skipped (matplotlib missing, nothing to plot).
    """
    points = [r for r in records if _num(r.get("concurrency")) is not None]
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


def collection_version():
    """This collection's version from MANIFEST.json (installed) or galaxy.yml (checkout)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        with open(os.path.join(root, "MANIFEST.json")) as handle:
            return json.load(handle)["collection_info"]["version"]
    except (OSError, ValueError, KeyError):
        pass
    try:
        with open(os.path.join(root, "galaxy.yml")) as handle:
            match = re.search(r"^version:\s*['\"]?([^'\"\s]+)", handle.read(), re.M)
            return match.group(1) if match else None
    except OSError:
        return None


def run_document(collector, rid, now, playbook, ansible_version, threshold_pct, regressions, compare=None):
    """The run file: play, hosts, variants, fingerprints, GPU checks, every level, versions.

    With a comparison (``compare``: [(host, verdict)]) also its ``comparisons``, ``failed_variants``
    and ``compare`` (compare_document).
    """
    variants = {}
    hosts = {}
    for host in collector.order:
        info = collector.hosts[host]
        benches = []
        for bench in info["benchmarks"]:
            variant, fingerprint = collector.identity(host, bench)
            variants.setdefault(variant, [])
            if fingerprint not in variants[variant]:
                variants[variant].append(fingerprint)
            benches.append(dict(bench, variant=variant, fingerprint=fingerprint))
        hosts[host] = {"gpu_checks": info["gpu_checks"], "servers": info["servers"], "benchmarks": benches}
    doc = {"run": rid, "time": now.isoformat().replace("+00:00", "Z"), "playbook": playbook,
           "plays": list(collector.plays), "hosts": hosts, "variants": sorted(variants),
           "fingerprints": variants, "ansible_version": ansible_version,
           "collection_version": collection_version(), "regression_threshold": threshold_pct,
           "regressions": regressions}
    if compare:
        doc.update(compare_document(compare))
    return doc


class Outcome(object):
    def __init__(self):
        self.run = None
        self.records = []
        self.regressions = []
        self.summary = []
        self.warnings = []
        self.notes = []
        self.paths = {}
        self.report = None


def finish(collector, results_dir, playbook, ansible_version, threshold_pct, now=None, compare=None):
    """Build, compare and write everything for one run. Never raises on I/O: problems are warnings.

    ``compare`` is the variant comparison the playbook published, [(host, verdict)] (compare_verdicts).
    Returns an Outcome (summary lines, regressions, written paths, warnings, notes).
    """
    out = Outcome()
    compare = list(compare or [])
    now = now or datetime.datetime.now(datetime.timezone.utc)
    rid = base = run_id(now, playbook)
    serial = 1
    while os.path.exists(os.path.join(results_dir, rid + ".json")):  # two runs in one second
        serial += 1
        rid = "%s-%d" % (base, serial)
    out.records = history_records(collector, now, rid)
    history_path = os.path.join(results_dir, HISTORY_FILE)
    history = []
    try:
        history, skipped = read_history(history_path)
        if skipped:
            out.warnings.append("bench_facts: skipped %d unreadable line(s) of %s" % (skipped, history_path))
    except OSError as exc:
        out.warnings.append("bench_facts: cannot read %s (%s): regressions are not checked" % (history_path, exc))
    previous = previous_levels(history)
    out.regressions = find_regressions(out.records, previous, threshold_pct)
    out.run = run_document(collector, rid, now, playbook, ansible_version, threshold_pct, out.regressions, compare)
    out.summary = summary_lines(out.records, previous, out.regressions)

    chart_name = rid + ".png"
    compare_chart_name = rid + "-compare.png"
    report_path = os.path.join(results_dir, rid + ".md")
    try:
        os.makedirs(results_dir, exist_ok=True)
        run_path = os.path.join(results_dir, rid + ".json")
        with open(run_path, "w", encoding="utf-8") as handle:
            json.dump(out.run, handle, indent=2, sort_keys=True, default=str)
            handle.write("\n")
        out.paths["run"] = run_path
        if out.records:
            append_history(history_path, out.records)
            out.paths["history"] = history_path
            try:
                why = render_chart(os.path.join(results_dir, chart_name), out.records)
            except OSError:
                raise
            except Exception as exc:  # a plotting bug must not cost the run file, history or report
                why = "plotting failed: %s" % exc
            if why is None:
                out.paths["chart"] = os.path.join(results_dir, chart_name)
            else:
                out.notes.append("bench_facts: no chart (%s)" % why)
        if compare:
            try:
                why = render_compare_chart(os.path.join(results_dir, compare_chart_name), compare)
            except OSError:
                raise
            except Exception as exc:  # as above
                why = "plotting failed: %s" % exc
            if why is None:
                out.paths["compare_chart"] = os.path.join(results_dir, compare_chart_name)
            else:
                out.notes.append("bench_facts: no comparison chart (%s)" % why)
        out.report = render_report(out.run, out.records, previous, out.regressions, threshold_pct,
                                   chart_name if "chart" in out.paths else None, compare,
                                   compare_chart_name if "compare_chart" in out.paths else None)
        with open(report_path, "w", encoding="utf-8") as handle:
            handle.write(out.report + "\n")
        out.paths["report"] = report_path
    except OSError as exc:
        out.warnings.append("bench_facts: cannot write results to %s (%s); this run's numbers are only in "
                            "this output" % (results_dir, exc))
    if out.report is None:
        out.report = render_report(out.run, out.records, previous, out.regressions, threshold_pct, compare=compare)
    return out


SUMMARY_KEYS = ("host", "variant", "fingerprint", "concurrency", "completed", "failed", "output_throughput",
                "decode_tps_per_request", "e2e_tps_per_request", "ttft_ms", "tpot_ms", "acceptance_length")


def bench_summary(result, host=None):
    """Compact per-level rows of one throughput_bench result (set_stats / AWX artifacts)."""
    col = RunCollector()
    col.add(host or "", BENCH_ACTION, "", result)
    if col.is_empty():
        return []
    rows = history_records(col, datetime.datetime.now(datetime.timezone.utc), None)
    return [dict((k, row.get(k)) for k in SUMMARY_KEYS if host or k != "host") for row in rows]
