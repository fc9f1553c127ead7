# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The compare's schedule: which variant runs when, and how many repeats (a pure function the role loops on
through the compare_schedule filter).
"""

from __future__ import annotations


class CompareError(ValueError):
    """Bad input to the comparison; the message says what was wrong and what is allowed."""


ORDERS = ("blocked", "interleaved")


def schedule(variants, repeats, order="blocked"):
    """The runs of a comparison, in turn: [{variant, repeats, round}].

    blocked (the default): each variant served once and benchmarked ``repeats`` times in one call
    (A A A B B B): the fastest, but a slow drift of the host (thermals, other tenants) falls on the later
    variants alone and reads as a difference. interleaved: rounds of one repeat of each variant, the order
    reversed every other round (A B, B A, A B, ...): a drift falls on every variant alike (a steady one
    cancels exactly over an even number of rounds; plain A B A B would leave B one run later in every
    round), at the price of a switch per repeat (fewer: the variant that ends a round starts the next).
    ``round`` is the repeat index of a run's first repeat (its levels' ``labels.repeat``).
    """
    if order not in ORDERS:
        raise CompareError("compare_order must be one of %s, got %r" % (", ".join(ORDERS), order))
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise CompareError("repeats must be a whole number, 1 or more, got %r" % (repeats,))
    variants = list(variants or ())
    if not variants or not all(isinstance(name, str) and name for name in variants):
        raise CompareError("variants must be a non-empty list of variant names, got %r" % (variants,))
    if order == "blocked":
        return [{"variant": name, "repeats": repeats, "round": 0} for name in variants]
    return [{"variant": name, "repeats": 1, "round": turn} for turn in range(repeats)
            for name in (variants if turn % 2 == 0 else variants[::-1])]


# ---- compare_until: decided ---------------------------------------------------------------------------

UNTIL = ("repeats", "decided")
MIN_EFFECT = 0.05  # compare_min_effect's default: a ratio inside [0.95, 1.05] is "no difference that matters"
FASTER, SLOWER, SAME = "faster", "slower", "no difference"
DECIDED, BUDGET, MAXIMUM = "decided", "budget", "maximum"


def until_plan(repeats, max_repeats, budget_s, min_effect=MIN_EFFECT, order="interleaved"):
    """compare_until: decided, checked: {first_look, max_rounds, looks, budget_s, min_effect}.

    ``repeats`` rounds run before the first look, then one look after every round up to ``max_repeats``
    rounds: looks = max_repeats - repeats + 1 planned looks (the sequential interval is built for them).
    Interleaved only: a blocked order has no rounds to stop between."""
    if order != "interleaved":
        raise CompareError("compare_until=decided runs interleaved rounds and stops between them: compare_order must "
                           "be interleaved (or unset), got %r" % (order,))
    for name, value, least in (("repeats", repeats, 2), ("compare_max_repeats", max_repeats, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise CompareError("%s must be a whole number, %d or more, with compare_until=decided, got %r"
                               % (name, least, value))
    if max_repeats < repeats:
        raise CompareError("compare_max_repeats (%d) must be at least repeats (%d), the rounds before the first look"
                           % (max_repeats, repeats))
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or budget_s <= 0:
        raise CompareError("compare_budget_s must be a number of seconds above 0, got %r" % (budget_s,))
    if isinstance(min_effect, bool) or not isinstance(min_effect, (int, float)) or not 0 < min_effect < 1:
        raise CompareError("compare_min_effect must be a share above 0 and below 1 (0.05: a ratio within 5 %% of 1 is "
                           "no difference that matters), got %r" % (min_effect,))
    return {"first_look": repeats, "max_rounds": max_repeats, "looks": max_repeats - repeats + 1,
            "budget_s": float(budget_s), "min_effect": float(min_effect)}


def decision(verdict, min_effect=MIN_EFFECT):
    """{variant: faster | slower | no difference | None} of each measured variant against the reference, at the
    objective's metric and concurrency: decided when the (sequential) interval excludes 1 (faster or slower,
    by the metric's direction: ``improved``), or lies inside [1 - min_effect, 1 + min_effect]; None while neither."""
    metric, conc = verdict["objective"]["metric"], verdict["objective"]["concurrency"]
    out = {}
    failed = set(row["variant"] for row in verdict.get("failed_variants") or ())
    for name in verdict.get("summaries") or {}:
        if name != verdict.get("reference") and name not in failed:
            out[name] = None
    for row in verdict.get("comparisons") or ():
        if row["metric"] != metric or row["concurrency"] != conc or row["ci_low"] is None:
            continue
        if row["significant"]:
            out[row["variant"]] = FASTER if row["improved"] else SLOWER
        elif 1.0 - min_effect <= row["ci_low"] and row["ci_high"] <= 1.0 + min_effect:
            out[row["variant"]] = SAME
    return out


def rounds_that_fit(budget_s, elapsed_s, round_s):
    """How many more rounds fit in the budget, at round_s seconds a round (engine starts included)."""
    if not round_s or round_s <= 0:
        return None
    return max(int((float(budget_s) - float(elapsed_s)) // float(round_s)), 0)


def next_step(verdict, plan, rounds, elapsed_s):
    """After ``rounds`` rounds and ``elapsed_s`` seconds (engine starts and benchmarks): {stop, why, rounds,
    decisions, round_s, fit, said (the decisions in words)}. Before the first look it only goes on; then it stops when every variant is
    decided (why: decided), when the next round would not fit in the budget at the mean round's time (budget),
    or at max_rounds (maximum)."""
    decisions = (verdict.get("sequential") or {}).get("decisions") or decision(verdict, plan["min_effect"])
    round_s = float(elapsed_s) / rounds if rounds else None
    fit = rounds_that_fit(plan["budget_s"], elapsed_s, round_s)
    why = None
    if rounds >= plan["first_look"] and decisions and all(decisions.values()):
        why = DECIDED
    elif rounds >= plan["max_rounds"]:
        why = MAXIMUM
    elif fit is not None and fit < 1:
        why = BUDGET
    elif not decisions and rounds >= plan["first_look"]:
        why = DECIDED  # nothing left to decide: every variant but the reference failed
    said = ", ".join("%s %s" % (name, verdict or "undecided") for name, verdict in decisions.items())
    return {"stop": why is not None, "why": why, "rounds": rounds, "decisions": decisions, "round_s": round_s, "fit": fit,
            "said": said or "no variant to decide"}


def _last_bench_s(history, host, variant, digest):
    """Seconds the newest measured repeat of variant took here with these benchmark settings (each level's
    duration and warm-up), or None when the history holds none."""
    repeats = {}
    for rec in history or ():
        labels = rec.get("labels") or {}
        if rec.get("host") != host or rec.get("variant") != variant or labels.get("bench") != digest:
            continue
        if rec.get("duration_s") is not None:
            repeats.setdefault((rec.get("run") or "", rec.get("repeat")), []).append(rec)
    if not repeats:
        return None
    newest = max(repeats.values(), key=lambda recs: max(rec.get("time") or "" for rec in recs))
    return sum(float(rec["duration_s"]) + float(rec.get("warmup_s") or 0.0) for rec in newest)


def _last_load_s(runs, host, variant):
    """Seconds the newest start of variant here took to be ready (the run files' servers), or None."""
    found = None
    for run in runs or ():
        for server in ((run.get("hosts") or {}).get(host) or {}).get("servers") or ():
            if server.get("variant") == variant and server.get("ready_s") is not None:
                found = float(server["ready_s"])  # runs in time order: the newest wins
    return found


def expected_rounds(history, runs, host, variants, digest, plan):
    """Before the first round: how many rounds are expected to fit in plan's budget, from what this host
    measured before (the history's benchmarks with the same settings, the run files' engine loads). A round
    serves each variant once: the first round starts every engine, a later one all but the variant that ended
    the round before (schedule's reversal). {round_s, fit, missing (what was never measured), said}."""
    missing, bench_s, load_s = [], 0.0, 0.0
    for name in variants:
        bench, load = _last_bench_s(history, host, name, digest), _last_load_s(runs, host, name)
        if bench is None:
            missing.append("%s's benchmark" % name)
        if load is None:
            missing.append("%s's engine load" % name)
        bench_s += bench or 0.0
        load_s += load or 0.0
    if missing:
        return {"round_s": None, "fit": None, "missing": missing,
                "said": "no earlier measurement here of %s with these settings: how many rounds fit is said once the "
                        "first round has measured them" % ", ".join(missing)}
    later_load = load_s * (len(variants) - 1) / len(variants) if variants else 0.0
    first_s, later_s = bench_s + load_s, bench_s + later_load
    if first_s > plan["budget_s"]:
        fit = 0
    else:
        more = rounds_that_fit(plan["budget_s"], first_s, later_s)
        fit = plan["max_rounds"] if more is None else min(plan["max_rounds"], 1 + more)
    return {"round_s": first_s, "fit": fit, "missing": [],
            "said": "a first round is expected to take %.0f s (engine loads %.0f s, benchmarks %.0f s, as last measured "
                    "here; each switch's own checks come on top), a later one %.0f s: about %d round(s) fit in the "
                    "budget of %.0f s%s"
                    % (first_s, load_s, bench_s, later_s, fit, plan["budget_s"],
                       "" if fit >= plan["first_look"] else
                       " - fewer than the %d before the first look: raise compare_budget_s" % plan["first_look"])}
