# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Regressions: this run's history records against the previous run of the same level (level_key: host,
instance, variant, concurrency),
judged on the metrics of REGRESSION_METRICS (the metric table's view), and their REGRESSION: lines.
"""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.plugin_utils._results_common import REGRESSION_METRICS, fmt, level_key, num

_BY_KEY = dict((metric.key, metric) for metric in REGRESSION_METRICS)


def threshold_text():
    """What the threshold applies to, in words: "output throughput drop or TPOT p50 rise"."""
    return " or ".join("%s %s" % (m.label, "drop" if m.better == "higher" else "rise") for m in REGRESSION_METRICS)


def find_regressions(records, previous, threshold_pct):
    """Regressions of this run against the previous run of the same host + variant + concurrency.

    A regression is a change for the worse (REGRESSION_METRICS: a drop of output throughput, a rise of
    TPOT p50) by more than threshold_pct.
    """
    found = []
    limit = float(threshold_pct) / 100.0
    for rec in records:
        before = previous.get(level_key(rec))
        if not before:
            continue
        for metric in REGRESSION_METRICS:
            key = metric.key
            worse = -1 if metric.better == "higher" else 1
            old, new = num(before.get(key)), num(rec.get(key))
            if old is None or new is None or old <= 0:
                continue
            change = (new - old) / old
            if change * worse > limit:
                found.append({"host": rec["host"], "instance": rec.get("instance"), "variant": rec["variant"],
                              "concurrency": rec["concurrency"],
                              "metric": key, "before": old, "after": new,
                              "change_pct": round(change * 100.0, 1), "before_run": before.get("run"),
                              "before_fingerprint": before.get("fingerprint"), "fingerprint": rec.get("fingerprint")})
    return found


def regression_lines(regressions):
    """One line per host + variant + concurrency, beginning REGRESSION:, with before -> after."""
    lines, groups = [], {}
    for reg in regressions:
        key = level_key(reg)
        if key not in groups:
            groups[key] = []
            lines.append(key)
        groups[key].append(reg)
    out = []
    for key in lines:
        regs = groups[key]
        parts = []
        for reg in regs:
            metric = _BY_KEY[reg["metric"]]
            parts.append("%s %s \u2192 %s %s (%+.1f %%)" % (metric.label, fmt(reg["before"], metric.digits),
                                                            fmt(reg["after"], metric.digits), metric.unit,
                                                            reg["change_pct"]))
        host = key[0] if key[1] is None else "%s instance %s" % (key[0], key[1])
        line = "REGRESSION: host %s, variant %s, concurrency %s: %s" % (host, key[2], key[3], "; ".join(parts))
        reg = regs[0]
        if reg.get("before_fingerprint") and reg.get("before_fingerprint") != reg.get("fingerprint"):
            line += " [fingerprint %s \u2192 %s]" % (reg["before_fingerprint"], reg["fingerprint"])
        if reg.get("before_run"):
            line += " [previous run %s]" % reg["before_run"]
        out.append(line)
    return out
