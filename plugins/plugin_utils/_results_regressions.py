# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The regression gate: this run's figures against a window of the history, and their REGRESSION: lines.

A level is judged against the last ``window`` runs (default 5) of the same gate_key: host, instance, variant,
concurrency, bench digest (the ``bench`` label: the benchmark settings that make two measurements comparable)
and kind (a compare's or tune's repeats with each other, single benchmarks with single benchmarks). The
fingerprint is not part of the key: an engine upgrade is exactly what the gate must judge, and a fingerprint
change inside the window is named on the line.

A run's figure of a level is the geometric mean of its repeats (its single value without repeats), on the
metrics of REGRESSION_METRICS. It is flagged when it lies outside the window's prediction interval on the
logs (_stats.prediction_interval: the same Student t as the compare; a new stable run falls outside it 5 %
of the time) **and** is worse than the window's geometric mean by more than the threshold. The 95 % holds for
the run as a whole: with k figures judged in one run (2 metrics x 3 levels: 6) each interval is the
1 - 0.05 / k one (Bonferroni), so a stable run raises a false line at most 5 % of the time however many
levels it measured (tests/unit/plugins/plugin_utils/test_regression_gate_sim.py measures it, with the power).

With fewer than MIN_RUNS runs in the window there is no spread worth the name: a change beyond the threshold
is still shown, marked unconfirmed with the number of runs it had, and fail_on_regression counts it only
with fail_on_unconfirmed. This replaced one value against the previous run's one value, which flagged a
server whose runs vary by 8 % whenever one run was 13 % slower than the one before.

An acknowledgement (regression_ack: ``all`` or HOST[/VARIANT[/CONCURRENCY]], comma-separated) restarts the
window of the levels it names: the history keeps an ``ack`` line, and only runs after it count.
"""

from __future__ import annotations

import math

from ansible_collections.inferops.serving.plugins.plugin_utils._results_common import REGRESSION_METRICS, fmt, level_key, num
from ansible_collections.inferops.serving.plugins.plugin_utils._stats import CONFIDENCE, prediction_interval

_BY_KEY = dict((metric.key, metric) for metric in REGRESSION_METRICS)
WINDOW = 5  # the callback's regression_window default
MIN_RUNS = 3  # fewer runs in the window: unconfirmed
SINGLE, COMPARE = "single", "compare"
ACK_ALL = "all"


class AckError(ValueError):
    """A regression_ack that names no level; the message says what is allowed."""


def threshold_text():
    """What the threshold applies to, in words: "output throughput drop or TPOT p50 rise"."""
    return " or ".join("%s %s" % (m.label, "drop" if m.better == "higher" else "rise") for m in REGRESSION_METRICS)


def kind_of(rec):
    """compare: a repeat of a compare or tune (its labels carry the comparison's id); single: anything else."""
    return COMPARE if (rec.get("labels") or {}).get("compare") else SINGLE


def gate_key(rec):
    """What a level's window is kept by: level_key + (bench digest, kind)."""
    return level_key(rec) + ((rec.get("labels") or {}).get("bench"), kind_of(rec))


def is_ack(entry):
    return isinstance(entry, dict) and "ack" in entry and "host" not in entry


def parse_ack(value):
    """regression_ack as selectors: [] for none; [("all",)] or [(host,), (host, variant), (host, variant, conc)].

    ``value`` is a string (comma-separated) or a list of strings."""
    if value is None or value == "":
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    out = []
    for item in items:
        text = str(item).strip()
        parts = tuple(part.strip() for part in text.split("/"))
        if not text or len(parts) > 3 or not all(parts):
            raise AckError("regression_ack must be 'all' or HOST, HOST/VARIANT or HOST/VARIANT/CONCURRENCY, "
                           "comma-separated, got %r" % (value,))
        out.append((ACK_ALL,) if parts == (ACK_ALL,) else parts)
    return out


def ack_matches(selectors, key):
    """Whether any selector names the level of gate_key ``key`` (host, instance, variant, concurrency, ...)."""
    for sel in selectors:
        if sel == (ACK_ALL,):
            return True
        mine = (str(key[0]), str(key[2]), str(key[3]))
        if mine[:len(sel)] == tuple(sel):
            return True
    return False


def _geomean(values):
    """The geometric mean of positive values; equal values give exactly their value."""
    if min(values) == max(values):
        return values[0]
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


def run_figures(records):
    """{gate_key: {metric: [values of the run's repeats]}, ...} of one run's records (values > 0 only), with the
    fingerprint under ``_fingerprint`` and the run under ``_run``."""
    out = {}
    for rec in records:
        entry = out.setdefault(gate_key(rec), {"_fingerprint": rec.get("fingerprint"), "_run": rec.get("run")})
        for metric in REGRESSION_METRICS:
            value = num(rec.get(metric.key))
            if value is not None and value > 0:
                entry.setdefault(metric.key, []).append(float(value))
    return out


def windows(entries, size, acks=()):
    """{gate_key: [{run, fingerprint, figures: {metric: geometric mean}}, ...]}: the last ``size`` runs of each
    key in the history ``entries`` (records and ack lines, in file order), each window restarted by an ack that
    names its level; ``acks`` are this run's selectors, applied after the history."""
    runs = {}
    for entry in entries:
        if is_ack(entry):
            try:
                selectors = parse_ack(entry["ack"])
            except AckError:
                continue
            for key in [k for k in runs if ack_matches(selectors, k)]:
                del runs[key]
            continue
        if not all(k in entry for k in ("host", "variant", "concurrency")):
            continue
        per_run = runs.setdefault(gate_key(entry), {})
        one = per_run.setdefault(entry.get("run"),
                                 {"run": entry.get("run"), "fingerprint": entry.get("fingerprint"), "values": {}})
        for metric in REGRESSION_METRICS:
            value = num(entry.get(metric.key))
            if value is not None and value > 0:
                one["values"].setdefault(metric.key, []).append(float(value))
    for key in [k for k in runs if ack_matches(acks, k)]:
        del runs[key]
    out = {}
    for key, per_run in runs.items():
        last = list(per_run.values())[-size:]
        out[key] = [{"run": one["run"], "fingerprint": one["fingerprint"],
                     "figures": dict((m, _geomean(v)) for m, v in one["values"].items())} for one in last]
    return out


def judge(window, figure, better, threshold_pct, family=1):
    """One figure against the figures of its window (positive numbers, oldest first); None when it is no
    regression, else {before (the window's geometric mean), low, high (its prediction interval, None below 2
    runs), n, change_pct, confirmed}.

    Worse by more than threshold_pct against the window's geometric mean, and (with MIN_RUNS runs or more)
    outside the window's prediction interval on the logs at 1 - 0.05 / family (``family``: how many figures
    the run has judged, so that the run as a whole keeps 95 %). Below MIN_RUNS runs: the threshold alone,
    unconfirmed."""
    n = len(window)
    if not n or not figure or figure <= 0:
        return None
    logs = [math.log(v) for v in window]
    confidence = 1.0 - (1.0 - CONFIDENCE) / max(int(family), 1)
    mean, low, high, _df = prediction_interval(logs, confidence)
    before = _geomean(window)
    change = figure / before - 1.0
    worse = -change if better == "higher" else change
    if not worse > float(threshold_pct) / 100.0:
        return None
    confirmed = n >= MIN_RUNS
    if confirmed:
        outside = math.log(figure) < low if better == "higher" else math.log(figure) > high
        if not outside:
            return None
    return {"before": before, "low": None if low is None else math.exp(low), "high": None if high is None else math.exp(high),
            "n": n, "change_pct": round(change * 100.0, 1), "confirmed": confirmed, "confidence": confidence}


def find_regressions(records, history, threshold_pct, window=WINDOW, acks=()):
    """This run's regressions against the history (records and ack lines in file order, this run not in it).

    ``acks`` are this run's regression_ack selectors (parse_ack): their levels' windows restart with this run,
    which is then not judged. Returns one dict per level and metric flagged: host, instance, variant,
    concurrency, metric, after (this run's figure), before (the window's geometric mean), low, high, n,
    change_pct, confirmed, confidence, bench, kind, repeats, fingerprint, before_run (the window's last run),
    before_fingerprint and fingerprint_change ([run, old, new] of the first change inside the window and to
    this run, or None)."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError("regression_window must be a whole number, 1 or more, got %r" % (window,))
    past = windows(history, window, acks)
    mine = run_figures(records)
    todo = []
    for key, entry in mine.items():
        runs = past.get(key) or []
        for metric in REGRESSION_METRICS:
            values = entry.get(metric.key)
            window_values = [one["figures"][metric.key] for one in runs if metric.key in one["figures"]]
            if values and window_values:
                todo.append((key, entry, metric, _geomean(values), len(values), runs, window_values))
    family = sum(1 for item in todo if len(item[6]) >= MIN_RUNS) or 1
    found = []
    for key, entry, metric, figure, repeats, runs, window_values in todo:
        verdict = judge(window_values, figure, metric.better, threshold_pct, family)
        if verdict is None:
            continue
        change = None
        fingerprints = [(one["run"], one["fingerprint"]) for one in runs] + [(entry["_run"], entry["_fingerprint"])]
        for (_run, old), (run, new) in zip(fingerprints, fingerprints[1:]):
            if old != new:
                change = [run, old, new]
                break
        verdict.update({"host": key[0], "instance": key[1], "variant": key[2], "concurrency": key[3],
                        "metric": metric.key, "after": figure, "bench": key[4], "kind": key[5], "repeats": repeats,
                        "fingerprint": entry["_fingerprint"], "before_run": runs[-1]["run"],
                        "before_fingerprint": runs[-1]["fingerprint"], "fingerprint_change": change})
        found.append(verdict)
    return found


def confirmed(regressions, with_unconfirmed=False):
    """The regressions fail_on_regression counts: the confirmed ones, or all with fail_on_unconfirmed."""
    return [reg for reg in regressions if with_unconfirmed or reg.get("confirmed")]


def regression_lines(regressions):
    """One line per level (host + instance + variant + concurrency), beginning REGRESSION:, with each metric's
    figure against the window's geometric mean, its interval and N."""
    order, groups = [], {}
    for reg in regressions:
        key = level_key(reg)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(reg)
    out = []
    for key in order:
        regs = groups[key]
        parts = []
        for reg in regs:
            metric = _BY_KEY[reg["metric"]]
            if reg.get("low") is not None:
                interval = ", %s %% prediction interval [%s, %s]" % (
                    ("%.2f" % (100.0 * reg.get("confidence", CONFIDENCE))).rstrip("0").rstrip("."), fmt(reg["low"], metric.digits, fixed=True),
                    fmt(reg["high"], metric.digits, fixed=True))
            else:
                interval = ""
            parts.append("%s %s \u2192 %s %s (%+.1f %%; window geometric mean of N=%d run(s)%s)" % (
                metric.label, fmt(reg["before"], metric.digits, fixed=True), fmt(reg["after"], metric.digits, fixed=True),
                metric.unit, reg["change_pct"], reg["n"], interval))
        host = key[0] if key[1] is None else "%s instance %s" % (key[0], key[1])
        line = "REGRESSION: host %s, variant %s, concurrency %s: %s" % (host, key[2], key[3], "; ".join(parts))
        reg = regs[0]
        if not all(r.get("confirmed") for r in regs):
            line += " [unconfirmed: %d run(s) in the window, %d needed]" % (min(r["n"] for r in regs), MIN_RUNS)
        if reg.get("fingerprint_change"):
            run, old, new = reg["fingerprint_change"]
            line += " [fingerprint %s \u2192 %s from run %s]" % (old, new, run or "this one")
        if reg.get("before_run"):
            line += " [last run of the window %s]" % reg["before_run"]
        out.append(line)
    return out
