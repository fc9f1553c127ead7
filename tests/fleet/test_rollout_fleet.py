# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/rollout.yml over real SSH on the multi-host test bed (make test-fleet).

Every host serves the stand-in engine as `engine: command` variants: v1 (4 ms per token) is what
serves before each scenario, v2 twice as fast, slow three times slower, flaky crashes on the hosts
named in crash_on. The hosts' state lives on the shared filesystem, so the tests read each host's
server state (inference_server's NAME.json: variant, pid) directly.
"""

from __future__ import annotations

import os
import re

import pytest


def flat(text):
    return " ".join(text.split())


def recap(run, host):
    return run.recap(host)


def show(name, run):
    """Print the run's fleet summary and recap (pytest -rA shows them; make test-fleet passes -rA)."""
    lines = []
    for rec in run.results(task="Say what the gate found"):
        if rec["result"].get("msg"):
            lines.append("  " + str(rec["result"]["msg"]))
    for rec in run.results(task="Summarise the fleet"):
        lines += ["  " + line for line in rec["result"].get("msg") or []]
    lines += ["  recap " + " ".join(line.split()) for line in run.stdout.splitlines() if " : ok=" in line]
    print("[%s] rc=%d\n%s" % (name, run.rc, "\n".join(lines)))


def engine_pids(fleet):
    return dict((h.name, h.pid()) for h in fleet.hosts)


def test_clean_rollout_reaches_every_host_canary_first_with_drain_hooks(fleet):
    assert len(fleet.hosts) >= 3
    fleet.converge("v1")
    before = engine_pids(fleet)
    run = fleet.rollout("v2", **fleet.hook_vars())
    show("clean rollout v1 -> v2", run)
    out = flat(run.stdout)
    assert run.rc == 0, run.stdout[-5000:]
    assert all(h.variant() == "v2" and h.engine_alive() for h in fleet.hosts)
    assert all(h.pid() != before[h.name] for h in fleet.hosts)
    canary = fleet.hosts[0].name
    assert re.search(r"canary gate passed on %s: v2 vs v1, worst [0-9.]+x >= rollout_min_speedup 0.95" % canary, out), out[-3000:]
    assert "ROLLOUT of v2: %d of %d hosts serve it" % (len(fleet.hosts), len(fleet.hosts)) in out
    for host in fleet.hosts:
        assert "%s serves v2 (switched from v1)" % host.name in out
    # the canary was benchmarked on v1 first, then on v2, both labelled with its name
    benched = [r["result"]["results"][0]["labels"] for r in run.results("async_status") if "results" in r["result"]]
    assert [lab["variant"] for lab in benched if lab["host"] == canary] == ["v1", "v2"]

    # hooks: argv as given (no shell), one host at a time, each drained before and put back after its switch
    calls = fleet.hooks()
    assert [(c["action"], c["host"]) for c in calls] == [
        (action, h) for h in fleet.names() for action in ("drain", "undrain")]
    assert calls[0]["args"] == ["$(touch /tmp/inferops-t-shell)", "a b;c"]
    assert not os.path.exists("/tmp/inferops-t-shell")

    again = fleet.rollout("v2", **fleet.hook_vars())
    show("again v2 (nothing to do)", again)
    assert again.rc == 0, again.stdout[-4000:]
    assert all(recap(again, h)["changed"] == 0 for h in fleet.names())
    assert len(fleet.hooks()) == len(calls)  # nobody switches, nobody is drained
    assert all("%s serves v2 (served it already)" % h in flat(again.stdout) for h in fleet.names())


def test_variant_crashing_on_one_host_rolls_it_back_and_stops_the_rollout(fleet):
    fleet.converge("v1")
    before = engine_pids(fleet)
    bad = fleet.hosts[2].name
    later = [h.name for h in fleet.hosts[3:]]
    run = fleet.rollout("flaky", crash_on=[bad], **fleet.hook_vars())
    show("flaky crashes on %s" % bad, run)
    out = flat(run.stdout)
    assert run.rc != 0
    assert "Variant flaky failed on %s" % bad in out and "ROLLED BACK: v1 serves again" in out
    assert [h.variant() for h in fleet.hosts[:2]] == ["flaky", "flaky"]
    bad_host = fleet.host(bad)
    assert bad_host.variant() == "v1" and bad_host.engine_alive()
    assert recap(run, bad)["failed"] == 1
    for name in later:  # untouched: same engine process, nothing changed
        assert fleet.host(name).variant() == "v1" and fleet.host(name).pid() == before[name]
        assert recap(run, name)["changed"] == 0 and recap(run, name)["failed"] == 0
        assert "%s serves v1 (not reached by the rollout)" % name in out
    assert ("ROLLOUT of flaky: 2 of %d hosts serve it; stopped: 1 of 1 hosts of the batch failed (%s rolled back), "
            "more than rollout_max_fail_percentage 0%%" % (len(fleet.hosts), bad)) in out
    assert "%s serves v1 (its switch failed and was rolled back)" % bad in out
    # the rolled-back host serves again, so it went back into the load balancer; later hosts never left it
    assert [(c["action"], c["host"]) for c in fleet.hooks()][-2:] == [("drain", bad), ("undrain", bad)]
    assert not [c for c in fleet.hooks() if c["host"] in later]


@pytest.mark.parametrize("policy, canary_serves", [("rollback", "v1"), ("keep", "slow")])
def test_slower_canary_stops_the_rollout_after_the_canary(fleet, policy, canary_serves):
    fleet.converge("v1")
    before = engine_pids(fleet)
    canary = fleet.hosts[0].name
    run = fleet.rollout("slow", rollout_slow_canary=policy)
    show("slower canary, rollout_slow_canary=%s" % policy, run)
    out = flat(run.stdout)
    assert run.rc != 0
    found = re.search(r"CANARY GATE STOPPED THE ROLLOUT on %s: slow gives ([0-9.]+) tok/s output throughput at "
                      r"concurrency (\d+), ([0-9.]+)x the ([0-9.]+) tok/s that v1 gave on %s just before; "
                      r"rollout_min_speedup is 0.95" % (canary, canary), out)
    assert found, out[-4000:]
    assert float(found.group(3)) < 0.5  # 12 ms per token against 4 ms: about a third
    assert fleet.host(canary).variant() == canary_serves and fleet.host(canary).engine_alive()
    how = "slower canary, rolled back" if policy == "rollback" else "slower canary, left on it"
    assert "%s serves %s (%s)" % (canary, canary_serves, how) in out
    assert "stopped: the canary gate failed on %s" % canary in out
    for host in fleet.hosts[1:]:
        assert host.variant() == "v1" and host.pid() == before[host.name]
        assert recap(run, host.name)["changed"] == 0


def test_host_unreachable_mid_switch_counts_as_failed_and_the_others_converge(fleet):
    fleet.converge("v1")
    victim = fleet.hosts[2].name
    rest = len(fleet.hosts) - 1
    budget = 100 // rest + 1  # one failed host of the second batch stays within it
    # the victim's network goes away once its new engine has been started (mid-switch)
    watcher = fleet.unreachable_when(victim, lambda h: (h.server() or {}).get("variant") == "v2")
    run = fleet.rollout("v2", rollout_batches=[1, rest], rollout_max_fail_percentage=budget)
    watcher.join(1)
    show("%s unreachable mid-switch, batches [1, %d], budget %d%%" % (victim, rest, budget), run)
    out = flat(run.stdout)
    assert watcher.done["downed"], "the victim's link was never taken down"
    assert run.rc != 0
    assert "UNREACHABLE during the rollout: %s stopped answering" % victim in out
    rc = recap(run, victim)
    assert rc["failed"] == 1 and rc["unreachable"] == 0  # counted against the budget like a crash
    for host in fleet.hosts:
        if host.name != victim:
            assert host.variant() == "v2" and host.engine_alive(), host.name
            assert recap(run, host.name)["failed"] == 0
            assert "%s serves v2 (switched from v1)" % host.name in out
    assert "%s serves ? (unreachable during the rollout: unknown (was v1))" % victim in out
    assert ("ROLLOUT of v2: %d of %d hosts serve it; 1 of %d hosts of the batch failed (%s unreachable), within "
            "rollout_max_fail_percentage %d%%" % (rest, rest + 1, rest, victim, budget)) in out
