# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The history: a run's results as history records (one per host x variant x concurrency of each benchmark),
history.jsonl read (the one reader, for text and for the file) and appended, the previous run of each level,
and the compact rows of one throughput_bench result (bench_summary).
"""

from __future__ import annotations

import datetime
import json
import os

from ansible_collections.inferops.serving.plugins.plugin_utils._results_collect import BENCH_ACTION, RunCollector
from ansible_collections.inferops.serving.plugins.plugin_utils._results_common import (
    CONTEXT_KEYS, DISTRIBUTIONS, PERCENTILES, RECORD_KEY, SCALARS, SUMMARY_KEYS, level_key, num, repeat_index)

HISTORY_FILE = "history.jsonl"


def _p50(level, key):
    dist = level.get(key)
    if isinstance(dist, dict):
        return num(dist.get("p50"))
    return num(dist)


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
                for key in SCALARS:
                    rec[key] = level.get(key)
                for key in DISTRIBUTIONS:
                    dist = level.get(key)
                    rec[key] = _p50(level, key)
                    if isinstance(dist, dict):
                        for pct in PERCENTILES:
                            rec["%s_%s" % (key, pct)] = num(dist.get(pct))
                rec["errors"] = level.get("errors")
                for key in CONTEXT_KEYS:
                    rec[key] = bench["labels"].get(key) if key == "instance" else level.get(key)
                extra = dict((k, v) for k, v in bench["labels"].items()
                             if k not in ("variant", "fingerprint", "host", "instance"))
                if extra:
                    rec["labels"] = extra
                records.append(rec)
    return records


def _parse(lines):
    """(records, unreadable) of history.jsonl lines: each line that is a JSON object is a record; a line that
    is not is unreadable, a blank line is neither."""
    records, unreadable = [], 0
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            unreadable += 1
            continue
        if isinstance(rec, dict):
            records.append(rec)
        else:
            unreadable += 1
    return records, unreadable


def parse_history(text):
    """history.jsonl text -> its records (unreadable lines skipped)."""
    return _parse((text or "").splitlines())[0]


def _is_ack(rec):
    return "ack" in rec and "host" not in rec


def read_entries(path):
    """(entries, skipped) from a history.jsonl, in file order: the records and the regression gate's ack lines
    ({"ack", "run", "time"}); a missing file is empty, corrupt lines are skipped, and so are records without
    a host, variant and concurrency (RECORD_KEY: what previous_levels and the regressions look records up by)."""
    if not os.path.exists(path):
        return [], 0
    with open(path, "r", encoding="utf-8", errors="replace") as handle:
        records, skipped = _parse(handle)
    kept = [rec for rec in records if _is_ack(rec) or all(key in rec for key in RECORD_KEY)]
    return kept, skipped + len(records) - len(kept)


def read_history(path):
    """(records, skipped) from a history.jsonl: read_entries' records, without the ack lines."""
    entries, skipped = read_entries(path)
    return [rec for rec in entries if not _is_ack(rec)], skipped


def ack_record(selectors, now, rid):
    """The history line of a regression_ack: the windows of the levels it names restart after it."""
    return {"ack": ",".join("/".join(sel) for sel in selectors), "run": rid, "time": now.isoformat().replace("+00:00", "Z")}


def append_history(path, records):
    """Append one JSON line per record, each with a single write on an O_APPEND file."""
    with open(path, "a", encoding="utf-8") as handle:
        for rec in records:
            handle.write(json.dumps(rec, sort_keys=True, default=str) + "\n")
            handle.flush()


def previous_levels(history, current_run=None):
    """{level_key: last record} over the earlier runs in the history."""
    last = {}
    for rec in history:
        if current_run and rec.get("run") == current_run:
            continue
        last[level_key(rec)] = rec
    return last


def bench_summary(result, host=None):
    """Compact per-level rows of one throughput_bench result (set_stats / AWX artifacts): SUMMARY_KEYS."""
    col = RunCollector()
    col.add(host or "", BENCH_ACTION, "", result)
    if col.is_empty():
        return []
    rows = history_records(col, datetime.datetime.now(datetime.timezone.utc), None)
    return [dict((k, row.get(k)) for k in SUMMARY_KEYS if host or k != "host") for row in rows]
