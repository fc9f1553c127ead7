# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/rollout.yml on the controller: the canary gate, the batch verdict, the fleet summary.

Pure Python, unit-tested without Ansible. The playbook keeps one outcome per host
(rollout_outcome: status, variant now serving, previous variant, detail) and what the survey found
before the rollout (rollout_before: reachable, variant); these functions turn them into decisions
and text.
"""

from __future__ import annotations

# statuses a host can end the rollout with; the ones in SERVING serve a working variant again, so a
# drained host is put back into the load balancer
SWITCHED, UNCHANGED = "switched", "unchanged"
ROLLED_BACK, FAILED, UNREACHABLE = "rolled_back", "failed", "unreachable"
GATE_ROLLED_BACK, GATE_KEPT = "gate_rolled_back", "gate_kept"
SERVING = (SWITCHED, UNCHANGED, ROLLED_BACK, GATE_ROLLED_BACK, GATE_KEPT)
OK = (SWITCHED, UNCHANGED)
GATE = (GATE_ROLLED_BACK, GATE_KEPT)


class RolloutError(ValueError):
    """Bad input to a rollout helper; the message says what was expected."""


def _fmt(value):
    return "%.1f" % value


def _levels(results, what):
    if results is None:
        return {}
    if not isinstance(results, list):
        raise RolloutError("%s must be the list of levels of a throughput_bench result, got %s"
                           % (what, type(results).__name__))
    out = {}
    for level in results:
        if not isinstance(level, dict) or "concurrency" not in level:
            raise RolloutError("%s: each level needs concurrency and output_throughput, got %r" % (what, level))
        out[int(level["concurrency"])] = level
    return out


def canary_gate(candidate, baseline, min_speedup=0.95, host="?", variant="?", previous=""):
    """Compare the canary's benchmark levels with the previous variant's, level by level.

    candidate, baseline: the `results` lists of two throughput_bench runs (one dict per concurrency
    level with output_throughput). The worst ratio new/old over the levels both measured decides:
    the gate passes when it is >= min_speedup. Without a baseline, or with no level in common, the
    gate is not checked (passed, checked false) and says why.
    """
    min_speedup = float(min_speedup)
    new = _levels(candidate, "candidate")
    old = _levels(baseline, "baseline")
    rows = []
    for conc in sorted(set(new) & set(old)):
        before = float(old[conc].get("output_throughput") or 0.0)
        after = float(new[conc].get("output_throughput") or 0.0)
        if before <= 0.0:
            continue  # nothing to be slower than
        rows.append({"concurrency": conc, "baseline": before, "candidate": after, "ratio": after / before})
    out = {"checked": bool(rows), "passed": True, "min_speedup": min_speedup, "levels": rows, "worst": None,
           "host": host, "variant": variant, "previous": previous}
    if not rows:
        if not previous:
            why = "nothing served before"
        elif not old and not new:
            why = "no benchmarks (serving_bench empty, serving_bench_enabled false or bench=never)"
        elif not old:
            why = "no benchmark of %s to compare with" % previous
        elif not new:
            why = "no benchmark of %s" % variant
        else:
            why = "no concurrency level measured by both"
        out["msg"] = "canary gate on %s not checked: %s" % (host, why)
        return out
    worst = min(rows, key=lambda row: row["ratio"])
    out["worst"] = worst
    out["passed"] = worst["ratio"] >= min_speedup
    figures = ", ".join("c=%d %s -> %s tok/s (%.2fx)"
                        % (r["concurrency"], _fmt(r["baseline"]), _fmt(r["candidate"]), r["ratio"]) for r in rows)
    if out["passed"]:
        out["msg"] = ("canary gate passed on %s: %s vs %s, worst %.2fx >= rollout_min_speedup %s (%s)"
                      % (host, variant, previous, worst["ratio"], min_speedup, figures))
    else:
        out["msg"] = ("CANARY GATE STOPPED THE ROLLOUT on %s: %s gives %s tok/s output throughput at concurrency %d, "
                      "%.2fx the %s tok/s that %s gave on %s just before; rollout_min_speedup is %s (%s)"
                      % (host, variant, _fmt(worst["candidate"]), worst["concurrency"], worst["ratio"],
                         _fmt(worst["baseline"]), previous, host, min_speedup, figures))
    return out


def _percent(value):
    if isinstance(value, str):
        value = value.strip().rstrip("%")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise RolloutError("rollout_max_fail_percentage must be a number (percent), got %r" % (value,))


def batch_verdict(batch, outcomes, max_fail_percentage=0, remaining=0):
    """Whether the rollout goes on after this batch, with Ansible's own rule spelled out.

    batch: the host names of the batch; outcomes: host name -> rollout_outcome (missing: the host
    never got to set one, which counts as failed); remaining: hosts of the play not reached yet.
    Ansible stops a serial play when the failed hosts of a batch exceed max_fail_percentage of it,
    or when every host of the batch failed; the rollout also stops when a canary failed its gate.
    Unlike Ansible, the rollout counts unreachable hosts as failed (rollout.yml turns them into
    failures), so the figure here is the one that decides.
    """
    pct = _percent(max_fail_percentage)
    batch = list(batch)
    failed = []
    gate = []
    for host in batch:
        status = (outcomes.get(host) or {}).get("status")
        if status in GATE:
            gate.append(host)
        if status not in OK:
            failed.append("%s %s" % (host, (status or "no outcome").replace("_", " ")))
    size = len(batch)
    over = size > 0 and (len(failed) / float(size)) > pct / 100.0
    everyone = size > 0 and len(failed) == size
    stop = bool(gate) or over or everyone
    if gate:
        reason = "the canary gate failed on %s" % ", ".join(gate)
    elif failed and stop:
        reason = ("%d of %d hosts of the batch failed (%s)%s" % (
            len(failed), size, ", ".join(failed),
            ": every host of the batch" if everyone and not over else
            ", more than rollout_max_fail_percentage %s%%" % _fmt_pct(pct)))
    elif failed:
        reason = "%d of %d hosts of the batch failed (%s), within rollout_max_fail_percentage %s%%" % (
            len(failed), size, ", ".join(failed), _fmt_pct(pct))
    else:
        reason = "every host of the batch converged"
    last = int(remaining) == 0
    return {"stop": stop, "last": last, "final": stop or last, "failed": failed, "gate": gate, "reason": reason}


def _fmt_pct(pct):
    return ("%d" % pct) if float(pct).is_integer() else ("%s" % pct)


def _now_serving(outcome, before):
    if outcome:
        status = outcome.get("status")
        variant = outcome.get("variant")
        previous = outcome.get("previous")
        if status == SWITCHED:
            return variant, ("switched from %s" % previous) if previous else "started, nothing recorded before"
        if status == UNCHANGED:
            return variant, "served it already"
        if status == ROLLED_BACK:
            return variant, "its switch failed and was rolled back"
        if status == GATE_ROLLED_BACK:
            return variant, "slower canary, rolled back"
        if status == GATE_KEPT:
            return variant, "slower canary, left on it"
        if status == UNREACHABLE:
            return None, "unreachable during the rollout: unknown (was %s)" % (previous or "nothing recorded")
        return variant, "failed: %s" % ("still serves it" if variant else "nothing serves")
    if before and before.get("reachable") is False:
        return None, "not reached; unreachable at the survey"
    return (before or {}).get("variant"), "not reached by the rollout"


def summary(hosts, befores, outcomes, wanted, verdict=None):
    """The fleet after the rollout: one row per host, the counts, and the lines to print."""
    befores = befores or {}
    outcomes = outcomes or {}
    rows = []
    for host in hosts:
        outcome = outcomes.get(host) or {}
        variant, how = _now_serving(outcome, befores.get(host) or {})
        rows.append({"host": host, "variant": variant, "status": outcome.get("status") or "untouched",
                     "how": how, "drained": bool(outcome.get("drained")), "detail": outcome.get("detail") or ""})
    width = max([len(r["host"]) for r in rows] + [4])
    on_wanted = [r["host"] for r in rows if r["variant"] == wanted]
    if verdict and verdict.get("stop") and not verdict.get("last"):
        why = "; stopped: %s" % verdict["reason"]
    elif verdict and (verdict.get("stop") or verdict.get("failed")):
        why = "; %s" % verdict["reason"]
    else:
        why = ""
    lines = ["ROLLOUT of %s: %d of %d hosts serve it%s" % (wanted, len(on_wanted), len(rows), why)]
    for row in rows:
        unknown = "unknown" in row["how"] or "unreachable" in row["how"]
        serving = row["variant"] or ("?" if unknown else "nothing")
        drained = ", left drained" if row["drained"] and row["status"] not in SERVING else ""
        lines.append("%s  serves %s  (%s%s)" % (row["host"].ljust(width), serving, row["how"], drained))
    counts = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return {"rows": rows, "counts": counts, "lines": lines,
            "serving": dict((r["host"], r["variant"]) for r in rows)}
