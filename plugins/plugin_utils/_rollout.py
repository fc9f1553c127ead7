# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/rollout.yml on the controller: every decision of the rollout, and its text.

Pure Python, unit-tested without Ansible; the playbook only puts the tasks in order and shows what
these return (through the filters of plugins/filter/rollout.py):
settings (the rollout_* variables checked and normalised before any host changes), progress (whether
a batch is the canary batch, how many hosts remain), host_plan (drain, benchmark before, gate),
canary_check / canary_gate (the gate on the canary's own benchmark), outcome / failure (how a host
ended: status, variant, whether it goes back into the load balancer, the message it fails with),
batch_verdict (whether the rollout goes on) and summary (which host serves what).
The playbook keeps one outcome per host (rollout_outcome: status, variant now serving, previous
variant, drained, detail) and what the survey found before the rollout (rollout_before: reachable,
variant).
"""

from __future__ import annotations

import re

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


# ---- settings ---------------------------------------------------------------------------------

SLOW_CANARY = ("rollback", "keep")
# the playbook's variables and what each defaults to when not given (None: not given)
SETTINGS = {
    "rollout_slow_canary": "rollback",
    "rollout_min_speedup": 0.95,
    "rollout_max_fail_percentage": 0,
    "rollout_drain_cmd": [],
    "rollout_undrain_cmd": [],
    "rollout_hook_host": "localhost",
}
_NUMBER = re.compile(r"[0-9]*\.?[0-9]+")
_PERCENT = re.compile(r"[0-9]*\.?[0-9]+%?")
_ARGV_EXAMPLE = '["lbctl", "disable", "{{ inventory_hostname }}"]'


def _number(value, pattern):
    """A number >= 0 given as a number or as text matching pattern; None when it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        value = float(value)
        return value if 0.0 <= value < float("inf") else None
    if isinstance(value, str) and pattern.fullmatch(value):
        return float(value.rstrip("%"))
    return None


def _argv(name, value, problems):
    if isinstance(value, (list, tuple)):
        if all(isinstance(arg, (str, int, float)) and not isinstance(arg, bool) for arg in value):
            argv = [str(arg) for arg in value]
            if not argv or argv[0].strip():
                return argv
            problems.append("%s must start with the program to run, got %r" % (name, value))
            return []
        got = "a list holding %s" % ", ".join(sorted(set(
            type(arg).__name__ for arg in value if isinstance(arg, bool) or not isinstance(arg, (str, int, float)))))
    elif isinstance(value, str):
        got = "the string %r" % value
    else:
        got = "%s %r" % (type(value).__name__, value)
    problems.append("%s must be an argv list of strings such as %s (run as is, never by a shell), got %s"
                    % (name, _ARGV_EXAMPLE, got))
    return []


def settings(given):
    """The rollout settings checked and normalised, before any host changes.

    given: variable name (rollout_slow_canary, rollout_min_speedup, rollout_max_fail_percentage,
    rollout_drain_cmd, rollout_undrain_cmd, rollout_hook_host) -> value, None or missing where not
    given (then SETTINGS has the default). Returns slow_canary, min_speedup (float),
    max_fail_percentage (float), drain_cmd / undrain_cmd (argv lists of strings, [] for no hook),
    hook_host and gate (whether the canary gate is on: min_speedup > 0). Raises RolloutError naming
    every setting that is wrong and what it may be.
    """
    given = dict(given or {})
    unknown = sorted(set(given) - set(SETTINGS))
    if unknown:
        raise RolloutError("unknown rollout setting(s) %s; known: %s" % (", ".join(unknown), ", ".join(SETTINGS)))
    raw = dict((name, default if given.get(name) is None else given[name]) for name, default in SETTINGS.items())
    problems = []
    slow = raw["rollout_slow_canary"]
    if slow not in SLOW_CANARY:
        problems.append("rollout_slow_canary must be rollback or keep, got %r" % (slow,))
    speedup = _number(raw["rollout_min_speedup"], _NUMBER)
    if speedup is None:
        problems.append("rollout_min_speedup must be a number >= 0 (0.95: the canary may be 5%% slower, "
                        "0 turns the gate off), got %r" % (raw["rollout_min_speedup"],))
    budget = _number(raw["rollout_max_fail_percentage"], _PERCENT)
    if budget is None or budget > 100:
        problems.append("rollout_max_fail_percentage must be a percent from 0 to 100 (a number, '%%' allowed), got %r"
                        % (raw["rollout_max_fail_percentage"],))
    drain = _argv("rollout_drain_cmd", raw["rollout_drain_cmd"], problems)
    undrain = _argv("rollout_undrain_cmd", raw["rollout_undrain_cmd"], problems)
    hook_host = raw["rollout_hook_host"]
    if not isinstance(hook_host, str) or not hook_host.strip():
        problems.append("rollout_hook_host must be a host name (where the drain hooks run), got %r" % (hook_host,))
    if problems:
        raise RolloutError("Bad rollout settings: %s." % "; ".join(problems))
    return {"slow_canary": slow, "min_speedup": speedup, "max_fail_percentage": budget, "drain_cmd": drain,
            "undrain_cmd": undrain, "hook_host": hook_host, "gate": speedup > 0}


# ---- per host: canary, plan, gate -------------------------------------------------------------

def _flag(value):
    """A boolean as Ansible may hand it over (True, 'true', 'True', 'yes', 1)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1", "y")
    return bool(value)


def progress(hosts, batches):
    """Where the rollout is: hosts whose batch has started (batches: host -> rollout_batch_hosts, None
    before its batch) and those not reached yet. Before a batch notes itself, canary says whether it
    is the first one."""
    hosts = list(hosts)
    started = [host for host in hosts if batches.get(host) is not None]
    return {"canary": not started, "started": len(started), "remaining": len(hosts) - len(started)}


def host_plan(variant, settings_, serving=None, fingerprint=None, switches=False, bench=False, canary=False):
    """What the rollout does on one host, from the role's plan (changes nothing).

    serving: what serves now (serve_variant_found_serving: variant, fingerprint); fingerprint: the
    new variant's; switches / bench: whether apply.yml switches and benchmarks; canary: whether the
    host is in the first batch. Returns previous (the variant serving now, or None), fingerprint,
    switches, drain (run the drain hook: it switches and a hook is set), bench_before (benchmark
    what serves now, for the gate) and gate (check the canary gate after the switch).
    """
    gate_on, hook = bool(settings_["gate"]), bool(settings_["drain_cmd"])
    previous = (serving or {}).get("variant") or None
    switches = _flag(switches)
    gate = _flag(canary) and switches and gate_on
    return {"previous": previous, "fingerprint": fingerprint, "switches": switches,
            "drain": switches and hook,
            "bench_before": gate and _flag(bench) and previous not in (None, variant),
            "gate": gate}


def scope(switch_plan, selected="all"):
    """The instances that the rollout's first switch of a host acts on, and its verify and a slower canary's roll
    back after it. On a host of instances (switch_plan: the serve_variant role's plan of them, replicated) that
    is the plan's first: the canary instance alone on a canary host, else every selected instance that switches
    (the rest, if any, follow once the canary passed). On a one-server host it is the run's own selection
    (-e instances; 'all' when none is given, and the role refuses one that names instances)."""
    plan = switch_plan if hasattr(switch_plan, "get") else {}
    if _flag(plan.get("replicated")):
        return list(plan.get("first") or [])
    return "all" if selected in (None, "") else selected


def new_levels(result, variant, fingerprint):
    """The levels of a throughput_bench result when it measured `variant` at `fingerprint` (its labels
    say so), else []: the result left over from benchmarking the previous variant is not the canary's."""
    levels = (result or {}).get("results") or []
    if not isinstance(levels, list):
        raise RolloutError("the benchmark result's results must be the list of its levels, got %s"
                           % type(levels).__name__)
    if not levels or not isinstance(levels[0], dict):
        return []
    labels = levels[0].get("labels") or {}
    if (labels.get("variant") or "") == (variant or "") and (labels.get("fingerprint") or "") == (fingerprint or ""):
        return levels
    return []


def canary_check(result, baseline, settings_, plan, host="?", variant="?", baseline_error=None):
    """The canary gate on the canary's benchmark result: canary_gate's dict, plus roll_back (the gate
    failed and rollout_slow_canary is rollback) and report (msg, and why the baseline is missing)."""
    gate = canary_gate(new_levels(result, variant, plan.get("fingerprint")), baseline, settings_["min_speedup"], host,
                       variant, plan.get("previous") or "")
    gate["roll_back"] = not gate["passed"] and settings_["slow_canary"] == "rollback"
    gate["report"] = gate["msg"] + ((": %s" % baseline_error) if baseline_error is not None else "")
    return gate


# ---- how a host's rollout ends ----------------------------------------------------------------

def _ending(outcome_, fail=False, msg=""):
    """outcome_ is what the playbook publishes (inferops_rollout); undrain: the host was drained and
    serves a working variant again, so it goes back into the load balancer; fail and msg: whether to
    fail the host, and with what."""
    return {"outcome": outcome_, "undrain": bool(outcome_["drained"]) and outcome_["status"] in SERVING,
            "fail": fail, "msg": msg if fail else ""}


def outcome(host, variant, plan, gate=None, drained=False, settings_=None):
    """How the host ended when its block ran through: switched or unchanged, or, on a canary that
    failed its gate, gate_rolled_back / gate_kept (per rollout_slow_canary), failed with the message
    that stops the rollout."""
    gate = gate or {}
    previous = plan.get("previous")
    if gate.get("passed", True):
        status, now = (SWITCHED if _flag(plan.get("switches")) else UNCHANGED), variant
    elif (settings_ or {}).get("slow_canary", "rollback") == "rollback":
        status, now = GATE_ROLLED_BACK, previous
    else:
        status, now = GATE_KEPT, variant
    ended = {"status": status, "variant": now, "previous": previous, "drained": _flag(drained),
             "detail": gate.get("msg") or ""}
    if status not in GATE:
        return _ending(ended)
    where = ("was rolled back to %s" % previous) if status == GATE_ROLLED_BACK else (
        "was left on %s (rollout_slow_canary=keep)" % variant)
    return _ending(ended, True, "%s. %s %s." % (gate.get("msg"), host, where))


def failure(host, error, ended=None, alive=None, switch="", now=None, plan=None, before=None, drained=False):
    """How the host ended when its block failed (the rescue).

    error: ansible_failed_result; ended: what the block had decided (outcome's dict, or {} when the
    failure came first); alive: the rescue's ping result; switch: serve_variant_outcome (the role's
    rescue says rolled_back when the previous variant serves again); now: the variant serving after
    the failure; plan / before: the host's plan and what the survey found (previous variant when the
    plan never ran). Statuses: the gate's own (the block stopped the host on purpose), unreachable,
    rolled_back or failed. Always fails the host; an unreachable one with a message that says so.
    """
    error = error or {}
    ended_status = ((ended or {}).get("outcome") or {}).get("status")
    detail = error.get("msg")
    detail = "no message" if detail is None else str(detail)
    alive = alive or {}
    plan = plan or {}
    previous = plan["previous"] if "previous" in plan else (before or {}).get("variant")
    if ended_status in GATE:
        status, now = ended_status, ended["outcome"].get("variant")
    elif _flag(alive.get("unreachable")) or _flag(error.get("unreachable")):
        status, now = UNREACHABLE, None
    elif switch == ROLLED_BACK:
        status = ROLLED_BACK
    else:
        status = FAILED
    msg = detail
    if status == UNREACHABLE:
        msg = ("UNREACHABLE during the rollout: %s stopped answering (%s); counted as failed, its state is unknown. "
               "Last error: %s" % (host, alive.get("msg") or "", detail))
    return _ending({"status": status, "variant": now, "previous": previous, "drained": _flag(drained),
                    "detail": detail}, True, msg)
