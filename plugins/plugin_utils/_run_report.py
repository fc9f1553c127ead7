# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a run tells its user, decided in Python: the final check of what a run leaves serving (final_check, and
converge_checks: the readings of it that the run's converge call already took), and a replica switch's plan in
words (plan_words). Controller side, pure functions."""

from __future__ import annotations

import posixpath


def _router_problem(name, member, router):
    """Why the router's listing does not show this serving instance listed healthy, or None. member: the
    instance's entry of router_membership, or the membership its own check read (None: not behind a router, or
    nothing was read); router: the one listing read for the host, if any."""
    where = (router or {}).get("router_url") or (member or {}).get("router_url") or "the router"
    if (router or {}).get("failed"):
        return "%s: its router %s could not be read: %s" % (name, where, router.get("msg") or "no reason given")
    if not member:
        return None
    if member.get("error"):
        return "%s: its router %s could not be read: %s" % (name, where, member["error"])
    if not member.get("listed"):
        return "%s serves, but router %s does not list it (%s)" % (name, where, member.get("worker_url"))
    if not member.get("healthy"):
        return "%s serves, but router %s lists %s unhealthy" % (name, where, member.get("worker_url"))
    return None


# a converge call's outcomes that end with its engine proved serving: health-gated after a start, or probed and kept
PROVED_SERVING = ("ready", "unchanged", "relabelled")
CONVERGE_READ = "as this run's converge call read it"
PLAN_READ = "as this run's plan read it"
READ_WORDS = {"converge": CONVERGE_READ, "plan": PLAN_READ}


def converge_checks(plan, converged, name, measured=False, plans=None, switch_plan=None):
    """The final check's readings that this run already took: [{"name", "instance", "checked"}] (what final_check
    reads), or [] where every instance must be read again. Nothing but a benchmark acts on an engine after the
    run's last reading of it, so a reading that proved it serving stands, and the host pays no second module call,
    when measured is false (no benchmark ran after it: a benchmark may end an engine) and:

    - a host's one server (plan, instances_plan's, is one server, not a set): converged, the converge call's result,
      is this server's (its state file is NAME.json on the host) and proved it serving: outcome ready, unchanged or
      relabelled with healthy true and a pid (a server kept without a probe, a loading one or a failed call proves
      nothing);
    - a set of instances (plan replicated) that the run changed nothing on: switch_plan (replica_switch_plan's)
      takes none through the switch and puts none back into its router, and plans (instance -> {result}, the
      check-mode plan of each) proved every instance of the host serving, unchanged, and listed healthy by its
      router where the plan read the router's listing (switch_plan's membership). Each reading then carries its
      membership ("member"). Where one instance switched, every instance is read again: another may have died
      meanwhile."""
    instances = (plan or {}).get("instances") or []
    if measured or not instances:
        return []
    if (plan or {}).get("replicated"):
        return _plans_read(instances, plans, switch_plan)
    if len(instances) != 1 or instances[0].get("name") != name:
        return []
    checked = _proved(converged, name, "converge", CONVERGE_READ)
    return [{"name": name, "instance": instances[0].get("instance"), "checked": checked}] if checked else []


def _plans_read(instances, plans, switch_plan):
    """converge_checks for a set of instances: the readings of this run's plans, where it changed nothing."""
    if not isinstance(plans, dict) or not isinstance(switch_plan, dict):
        return []
    if switch_plan.get("batches") or switch_plan.get("switching") or switch_plan.get("adding"):
        return []
    membership = switch_plan.get("membership") or {}
    readings = []
    for entry in instances:
        key = entry.get("instance")
        checked = _proved((plans.get(key) or {}).get("result"), entry.get("name"), "plan", PLAN_READ)
        member = membership.get(key)
        if checked is None or checked["outcome"] != "unchanged":
            return []
        if membership and not (isinstance(member, dict) and member.get("listed") and member.get("healthy")):
            return []
        readings.append({"name": entry.get("name"), "instance": key, "checked": checked, "member": member})
    return readings


def _proved(result, name, read_by, words):
    """The final check's reading of server `name` in one module result (a converge call's, or a check-mode plan's)
    that proved it serving, else None."""
    result = result if isinstance(result, dict) else {}
    if posixpath.basename(str(result.get("state_file") or "")) != "%s.json" % name:  # another server's result
        return None
    if (result.get("failed") or result.get("skipped") or result.get("loading") or result.get("healthy") is not True
            or result.get("outcome") not in PROVED_SERVING or not result.get("pid")):
        return None
    return {"serving": True, "healthy": True, "problem": None, "pid": result["pid"], "variant": result.get("variant"),
            "url": result.get("url"), "outcome": result["outcome"], "read_by": read_by, "reason": "it serves: %s" % words}


def _line(name, checked, member, router):
    if checked.get("problem") or checked.get("failed"):
        return "%s: FAILED - %s" % (name, checked.get("problem") or checked.get("msg") or "the check failed")
    if not checked.get("serving"):
        return "%s: %s" % (name, checked.get("reason") or "nothing serves")
    variant = checked.get("variant") or "(no variant label)"
    text = "%s: %s serves (pid %s) on %s" % (name, variant, checked.get("pid"), checked.get("url"))
    if member and member.get("listed") and member.get("healthy"):
        text += ", listed healthy by router %s" % ((router or {}).get("router_url") or member.get("router_url") or "")
    if checked.get("read_by") in READ_WORDS:
        text += " (%s)" % READ_WORDS[checked["read_by"]]
    return text


def final_check(checks, membership=None, router=None):
    """checks: [{"name": the instance's server name, "instance": its instance key, "checked": inference_server
    state=checked's registered result}, or a reading converge_checks returned, which may carry its own router
    "member"]. A failed check carries its message in "problem" (the role registers it
    with failed_when, so that every instance is checked first). Behind a router, each check that found its instance
    serving carries what the router lists of it (inference_server's membership, read in the same call; its error
    when the router could not be read). membership: instance -> {listed, healthy, worker_url} (router_membership of
    one listing read for the whole host, which then stands instead; None: none was read); router: that read's
    registered result (router_worker state=present in check mode), for its URL and, when it failed, its message.

    Returns {"ok": no problem, "problems": [one message per thing wrong, naming the instance], "lines": [what each
    instance leaves serving, in words], "msg": the problems joined, or a one-line summary}."""
    problems, lines = [], []
    membership = membership if isinstance(membership, dict) else {}
    read = router if isinstance(router, dict) and not router.get("skipped") else None
    for check in checks or []:
        name = check.get("name") or "?"
        checked = check.get("checked") or {}
        # a reading this run took before (converge_checks) carries the router membership it was taken with
        if "member" in check:
            member = check["member"]
        else:  # the host's one listing, where one was read, else what the check itself read of the router
            member = membership.get(check.get("instance")) if read else checked.get("membership")
        if checked.get("problem") or checked.get("failed"):
            problems.append(checked.get("problem") or checked.get("msg") or "%s: the check failed without a message" % name)
        else:
            found = _router_problem(name, member, read) if checked.get("serving") and (read or member) else None
            if found:
                problems.append(found)
        lines.append(_line(name, checked, member, read))
    serving = sum(1 for check in checks or [] if (check.get("checked") or {}).get("serving"))
    if problems:
        msg = "what this run leaves serving is not right: %s" % "; ".join(problems)
    else:
        msg = "%d of %d instance(s) serve, each alive and answering" % (serving, len(checks or []))
    return {"ok": not problems, "problems": problems, "lines": lines, "msg": msg}


def _serving_now(result):
    current = (result or {}).get("current") or {}
    if current.get("pid") and current.get("running"):
        return "%s (pid %s)" % (current.get("variant") or "an unlabelled server", current["pid"])
    if current.get("pid"):
        return "%s (pid %s, no longer running)" % (current.get("variant") or "an unlabelled server", current["pid"])
    return None


def plan_words(switch_plan, plans, behind_router=False):
    """A replica switch's plan (replica_switch_plan's dict) in words, one line per selected instance, in name
    order: what it serves now, what it will serve, whether it leaves the router, its batch. plans: instance ->
    {result (its inference_server plan), bench}, as replica_switch_plan took them."""
    switch_plan, plans = switch_plan or {}, plans or {}
    batch_of = {}
    batches = switch_plan.get("batches") or []
    for number, batch in enumerate(batches, 1):
        for name in batch:
            batch_of[name] = number
    lines = []
    for name in sorted(switch_plan.get("actions") or {}):
        action = switch_plan["actions"][name]
        entry = plans.get(name) or {}
        result = entry.get("result") or {}
        now, wanted = _serving_now(result), result.get("variant") or "the variant"
        out = " out of the router and drained first, back in once ready;" if behind_router else ""
        canary = ", the canary" if switch_plan.get("canary") == name else ""
        where = " (batch %d of %d%s)" % (batch_of[name], len(batches), canary) if name in batch_of else ""
        if action == "switch" and now:
            text = "%s:%s stop %s, start %s%s" % (name, out, now, wanted, where)
        elif action == "switch":
            text = "%s: start %s (nothing serves there now)%s%s" % (
                name, wanted, ", into the router once ready" if behind_router else "", where)
        elif action == "relabel":
            text = "%s: serves this configuration already as %s; only its label becomes %s, nothing restarts%s" % (
                name, now or "an unlabelled server", wanted, where)
        elif action == "add":  # kept, but its router does not list it healthy (replica_switch_plan's membership)
            text = "%s: keeps %s, healthy; not in its router: put back first, nothing restarts" % (name, now or wanted)
        elif name in batch_of:  # kept, but measured: out of the router meanwhile
            text = "%s: keeps %s, taken out to be benchmarked%s" % (name, now or wanted, where)
        else:
            text = "%s: keeps %s, healthy; stays in the router, nothing restarts" % (name, now or wanted)
        if entry.get("bench") and action != "keep":
            text += "; then benchmarked"
        lines.append(" ".join(text.split()))
    return lines
