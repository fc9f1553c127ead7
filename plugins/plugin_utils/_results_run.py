# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One run's results, put together and written (the bench_facts callback's end-of-play step): its id, the run
file (run_document), then finish(): history records, regressions against history.jsonl, the history appended,
the charts, the report and the summary lines, never raising on I/O.
"""

from __future__ import annotations

import datetime
import json
import os
import re

from ansible_collections.inferops.serving.plugins.plugin_utils._results_charts import render_chart, render_compare_chart
from ansible_collections.inferops.serving.plugins.plugin_utils._results_history import (
    HISTORY_FILE, ack_record, append_history, history_records, previous_levels, read_entries)
from ansible_collections.inferops.serving.plugins.plugin_utils._results_regressions import WINDOW, AckError, find_regressions, parse_ack
from ansible_collections.inferops.serving.plugins.plugin_utils._results_report import render_report, summary_lines


def utc_stamp(now):
    return now.strftime("%Y%m%dT%H%M%SZ")


def run_id(now, playbook):
    name = os.path.splitext(os.path.basename(playbook or "adhoc"))[0] or "adhoc"
    return "%s-%s" % (utc_stamp(now), re.sub(r"[^A-Za-z0-9_.-]+", "_", name))


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


def run_document(collector, rid, now, playbook, ansible_version, threshold_pct, regressions, compare=None, gate=None):
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
    if gate:
        doc["regression_gate"] = gate
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


def finish(collector, results_dir, playbook, ansible_version, threshold_pct, now=None, compare=None, window=WINDOW,
           ack=None):
    """Build, compare and write everything for one run. Never raises on I/O: problems are warnings.

    ``compare`` is the variant comparison the playbook published, [(host, verdict)] (compare_verdicts).
    ``window``: the regression gate's regression_window; ``ack``: its regression_ack (levels whose window
    restarts with this run, recorded in the history).
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
    entries = []
    try:
        entries, skipped = read_entries(history_path)
        if skipped:
            out.warnings.append("bench_facts: skipped %d unreadable line(s) of %s" % (skipped, history_path))
    except OSError as exc:
        out.warnings.append("bench_facts: cannot read %s (%s): regressions are not checked" % (history_path, exc))
    try:
        acks = parse_ack(ack)
    except AckError as exc:
        out.warnings.append("bench_facts: %s; nothing was acknowledged" % exc)
        acks = []
    history = [rec for rec in entries if "host" in rec]
    previous = previous_levels(history)
    out.regressions = find_regressions(out.records, entries, threshold_pct, window, acks)
    gate = {"window": window, "ack": ",".join("/".join(sel) for sel in acks) or None}
    out.run = run_document(collector, rid, now, playbook, ansible_version, threshold_pct, out.regressions, compare, gate)
    out.summary = summary_lines(out.records, previous, out.regressions, window)
    if acks:
        out.notes.append("bench_facts: regression_ack %s: the regression window of the levels it names restarts with "
                         "this run (recorded in %s)" % (gate["ack"], HISTORY_FILE))

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
        if acks:
            append_history(history_path, [ack_record(acks, now, rid)])
            out.paths["history"] = history_path
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
