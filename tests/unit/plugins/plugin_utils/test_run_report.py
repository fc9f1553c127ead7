# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _run_report: the final check's verdict over a host's instances, and a replica switch's plan in
words."""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.plugin_utils import _run_report

DEAD = ("instance demo.r0 (variant batched, pid 4242) no longer runs: the engine was killed by SIGKILL at "
        "2026-12-05T21:40:01+0000; killed by the kernel's OOM killer (anon-rss 13.9 GB)")


def serving(name, pid, variant="batched"):
    return {"name": name, "instance": name.split(".")[-1],
            "checked": {"serving": True, "pid": pid, "variant": variant, "problem": None,
                        "url": "http://127.0.0.1:%d" % (8000 + pid % 10), "failed": False}}


def test_every_instance_serving_passes_and_says_so():
    verdict = _run_report.final_check([serving("demo.r0", 4241), serving("demo.r1", 4242)])
    assert verdict["ok"] and verdict["problems"] == []
    assert verdict["msg"] == "2 of 2 instance(s) serve, each alive and answering"
    assert verdict["lines"][0] == "demo.r0: batched serves (pid 4241) on http://127.0.0.1:8001"


def test_an_instance_that_died_fails_the_run_naming_it():
    dead = {"name": "demo.r0", "checked": {"serving": False, "problem": DEAD, "failed": False}}
    verdict = _run_report.final_check([dead, serving("demo.r1", 4242)])
    assert not verdict["ok"] and verdict["problems"] == [DEAD]
    assert verdict["msg"] == "what this run leaves serving is not right: " + DEAD
    assert verdict["lines"][0] == "demo.r0: FAILED - " + DEAD


def test_nothing_recorded_is_not_a_problem():
    verdict = _run_report.final_check([{"name": "demo", "checked": {"serving": False, "problem": None,
                                                                    "reason": "nothing is recorded for it"}}])
    assert verdict["ok"] and verdict["lines"] == ["demo: nothing is recorded for it"]
    assert verdict["msg"] == "0 of 1 instance(s) serve, each alive and answering"


READ = {"changed": False, "router_url": "http://127.0.0.1:30080", "workers": []}


def test_a_router_that_lists_it_unhealthy_or_not_at_all():
    """One read of the listing for the whole host: each instance found in it (router_membership's map)."""
    membership = {"r0": {"listed": True, "healthy": False, "worker_url": "http://127.0.0.1:8001"},
                  "r1": {"listed": False, "healthy": False, "worker_url": "http://127.0.0.1:8002"},
                  "r2": {"listed": True, "healthy": True, "worker_url": "http://127.0.0.1:8003"}}
    checks = [serving("demo.r0", 4241), serving("demo.r1", 4242), serving("demo.r2", 4243)]
    verdict = _run_report.final_check(checks, membership, READ)
    assert verdict["problems"] == [
        "demo.r0 serves, but router http://127.0.0.1:30080 lists http://127.0.0.1:8001 unhealthy",
        "demo.r1 serves, but router http://127.0.0.1:30080 does not list it (http://127.0.0.1:8002)"]
    assert verdict["lines"][2].endswith(", listed healthy by router http://127.0.0.1:30080")
    assert not verdict["lines"][0].endswith("healthy by router http://127.0.0.1:30080")


def test_an_instance_that_serves_nothing_is_not_asked_of_its_router():
    stopped = {"name": "demo.r0", "instance": "r0", "checked": {"serving": False, "problem": None,
                                                                "reason": "nothing is recorded for it"}}
    membership = {"r0": {"listed": False, "healthy": False, "worker_url": "http://127.0.0.1:8001"}}
    verdict = _run_report.final_check([stopped], membership, READ)
    assert verdict["ok"] and verdict["lines"] == ["demo.r0: nothing is recorded for it"]


def test_a_router_read_that_was_skipped_or_failed():
    membership = {"r0": {"listed": False, "healthy": False, "worker_url": "http://127.0.0.1:8001"}}
    skipped = _run_report.final_check([serving("demo.r0", 4241)], membership, {"skipped": True})
    assert skipped["ok"], "no router read: nothing to hold against the listing"
    failed = _run_report.final_check([serving("demo.r0", 4241)], None,
                                     {"failed": True, "router_url": "http://127.0.0.1:30080", "msg": "connection refused"})
    assert failed["problems"] == ["demo.r0: its router http://127.0.0.1:30080 could not be read: connection refused"]


def test_each_check_that_read_its_router_is_judged_by_its_own_reading():
    """Behind a router, inference_server state=checked reads the router too (its membership): no listing of the
    host is read, and each instance is judged by what its own check read."""
    router = "http://127.0.0.1:30080"

    def read(name, pid, **membership):
        check = serving(name, pid)
        check["checked"]["membership"] = dict(membership, router_url=router, worker_url="http://127.0.0.1:%d" % (8000 + pid % 10))
        return check
    checks = [read("demo.r0", 4241, listed=True, healthy=False), read("demo.r1", 4242, listed=False, healthy=False),
              read("demo.r2", 4243, listed=True, healthy=True),
              read("demo.r3", 4244, listed=None, healthy=None, error="connection refused")]
    verdict = _run_report.final_check(checks)
    assert verdict["problems"] == [
        "demo.r0 serves, but router http://127.0.0.1:30080 lists http://127.0.0.1:8001 unhealthy",
        "demo.r1 serves, but router http://127.0.0.1:30080 does not list it (http://127.0.0.1:8002)",
        "demo.r3: its router http://127.0.0.1:30080 could not be read: connection refused"]
    assert verdict["lines"][2] == "demo.r2: batched serves (pid 4243) on http://127.0.0.1:8003, listed healthy by router " + router
    listing = {"r0": {"listed": True, "healthy": True, "worker_url": "http://127.0.0.1:8001"}}
    assert _run_report.final_check(checks[:1], listing, READ)["ok"], "one listing read for the host stands instead"


def plan_result(now, now_pid, wanted, running=True):
    return {"variant": wanted, "current": {"variant": now, "pid": now_pid, "running": running} if now_pid else None}


def test_plan_words_say_each_instance_in_order():
    switch_plan = {"actions": {"r1": "switch", "r0": "switch", "r2": "keep", "r3": "relabel"},
                   "batches": [["r0"], ["r1"], ["r3"]], "canary": None}
    plans = {"r0": {"result": plan_result("baseline", 4241, "batched"), "bench": True},
             "r1": {"result": plan_result(None, None, "batched"), "bench": False},
             "r2": {"result": plan_result("batched", 4243, "batched"), "bench": False},
             "r3": {"result": plan_result("old-name", 4244, "batched"), "bench": False}}
    assert _run_report.plan_words(switch_plan, plans, behind_router=True) == [
        "r0: out of the router and drained first, back in once ready; stop baseline (pid 4241), start batched "
        "(batch 1 of 3); then benchmarked",
        "r1: start batched (nothing serves there now), into the router once ready (batch 2 of 3)",
        "r2: keeps batched (pid 4243), healthy; stays in the router, nothing restarts",
        "r3: serves this configuration already as old-name (pid 4244); only its label becomes batched, nothing "
        "restarts (batch 3 of 3)",
    ]


def test_plan_words_without_a_router_and_with_a_canary():
    switch_plan = {"actions": {"r0": "switch"}, "batches": [["r0"]], "canary": "r0"}
    plans = {"r0": {"result": plan_result("baseline", 7, "batched", running=False)}}
    assert _run_report.plan_words(switch_plan, plans) == [
        "r0: stop baseline (pid 7, no longer running), start batched (batch 1 of 1, the canary)"]
    assert _run_report.plan_words({}, {}) == []


def test_plan_words_say_an_instance_that_goes_back_into_its_router():
    switch_plan = {"actions": {"r0": "add", "r1": "keep"}, "batches": [], "canary": None}
    plans = {"r0": {"result": plan_result("v1", 11, "v1")}, "r1": {"result": plan_result("v1", 12, "v1")}}
    assert _run_report.plan_words(switch_plan, plans, behind_router=True) == [
        "r0: keeps v1 (pid 11), healthy; not in its router: put back first, nothing restarts",
        "r1: keeps v1 (pid 12), healthy; stays in the router, nothing restarts"]


ONE = {"replicated": False, "instances": [{"instance": None, "name": "demo", "port": 8000}]}
SET = {"replicated": True, "instances": [{"instance": "r0", "name": "demo.r0", "port": 8001}]}


def converged(**fields):
    result = {"outcome": "ready", "healthy": True, "loading": False, "pid": 4242, "variant": "batched",
              "url": "http://127.0.0.1:8000", "changed": True, "failed": False,
              "state_file": "/var/lib/inferops/serving/demo.json"}
    result.update(fields)
    return result


def test_a_converge_that_proved_a_hosts_one_server_serving_stands_for_its_final_check():
    for outcome in ("ready", "unchanged", "relabelled"):
        checks = _run_report.converge_checks(ONE, converged(outcome=outcome), "demo")
        assert [(c["name"], c["instance"]) for c in checks] == [("demo", None)]
        assert checks[0]["checked"]["serving"] and checks[0]["checked"]["pid"] == 4242
    verdict = _run_report.final_check(checks)
    assert verdict["ok"] and verdict["msg"] == "1 of 1 instance(s) serve, each alive and answering"
    assert verdict["lines"] == ["demo: batched serves (pid 4242) on http://127.0.0.1:8000 "
                                "(as this run's converge call read it)"]


def test_every_other_case_reads_the_instance_again():
    assert _run_report.converge_checks(ONE, converged(), "demo", measured=True) == []  # a benchmark ran after it
    assert _run_report.converge_checks(SET, converged(), "demo.r0") == []  # a set: another may have died meanwhile
    assert _run_report.converge_checks(ONE, converged(), "other") == []  # not this server's result
    assert _run_report.converge_checks(ONE, None, "demo") == []
    assert _run_report.converge_checks({"replicated": False, "instances": []}, converged(), "demo") == []
    for fields in ({"healthy": None, "outcome": "unchanged"},  # kept without a probe
                   {"loading": True, "outcome": "loading", "healthy": False},
                   {"failed": True}, {"skipped": True}, {"outcome": "rolled_back"}, {"outcome": "stopped"},
                   {"pid": None}, {"state_file": "/var/lib/inferops/serving/other.json"}, {"state_file": None}):
        assert _run_report.converge_checks(ONE, converged(**fields), "demo") == [], fields


PAIR = {"replicated": True, "instances": [{"instance": "r0", "name": "rep.r0", "port": 8001},
                                          {"instance": "r1", "name": "rep.r1", "port": 8002}]}


def kept(name, pid, port):
    """inference_server's check-mode plan of a server it keeps: probed, healthy, unchanged."""
    return {"result": converged(outcome="unchanged", changed=False, pid=pid, variant="v1", url="http://127.0.0.1:%d" % port,
                                state_file="/var/lib/inferops/serving/%s.json" % name)}


def member(port, listed=True, healthy=True):
    return {"listed": listed, "healthy": healthy, "worker_url": "http://127.0.0.1:%d" % port,
            "router_url": "http://127.0.0.1:30080"}


NOTHING_TO_DO = {"batches": [], "switching": [], "adding": [], "membership": {"r0": member(8001), "r1": member(8002)}}


def test_a_set_of_instances_the_run_changed_nothing_on_is_told_as_its_plans_read_it():
    plans = {"r0": kept("rep.r0", 11, 8001), "r1": kept("rep.r1", 12, 8002)}
    checks = _run_report.converge_checks(PAIR, None, "rep", plans=plans, switch_plan=NOTHING_TO_DO)
    assert [(c["name"], c["instance"], c["checked"]["pid"], c["checked"]["read_by"]) for c in checks] == [
        ("rep.r0", "r0", 11, "plan"), ("rep.r1", "r1", 12, "plan")]
    verdict = _run_report.final_check(checks)
    assert verdict["ok"] and verdict["msg"] == "2 of 2 instance(s) serve, each alive and answering"
    assert verdict["lines"] == [
        "rep.r0: v1 serves (pid 11) on http://127.0.0.1:8001, listed healthy by router http://127.0.0.1:30080 "
        "(as this run's plan read it)",
        "rep.r1: v1 serves (pid 12) on http://127.0.0.1:8002, listed healthy by router http://127.0.0.1:30080 "
        "(as this run's plan read it)"]
    # no router read (none declared, or a command router's): the plans alone
    alone = _run_report.converge_checks(PAIR, None, "rep", plans=plans, switch_plan=dict(NOTHING_TO_DO, membership={}))
    assert [c["member"] for c in alone] == [None, None]
    assert _run_report.final_check(alone)["lines"][0] == (
        "rep.r0: v1 serves (pid 11) on http://127.0.0.1:8001 (as this run's plan read it)")


def test_a_set_of_instances_is_read_again_after_any_change_or_without_a_plan_that_proved_each_serving():
    plans = {"r0": kept("rep.r0", 11, 8001), "r1": kept("rep.r1", 12, 8002)}
    read_again = [
        ({}, NOTHING_TO_DO),  # no plans at all
        ({"r0": plans["r0"]}, NOTHING_TO_DO),  # r1 was not planned (not selected): it must be read
        (plans, dict(NOTHING_TO_DO, batches=[["r1"]], switching=["r1"])),  # r1 switched: r0 may have died meanwhile
        (plans, dict(NOTHING_TO_DO, adding=["r0"])),  # r0 went back into its router: a change
        (plans, dict(NOTHING_TO_DO, membership={"r0": member(8001), "r1": member(8002, healthy=False)})),
        (plans, dict(NOTHING_TO_DO, membership={"r0": member(8001)})),  # the listing did not cover r1
        (dict(plans, r1={"result": dict(plans["r1"]["result"], outcome="relabelled")}), NOTHING_TO_DO),
        (dict(plans, r1={"result": dict(plans["r1"]["result"], healthy=None)}), NOTHING_TO_DO),  # kept unprobed
        (dict(plans, r1={"result": dict(plans["r1"]["result"], state_file="/x/rep.r0.json")}), NOTHING_TO_DO),
        (plans, None), ("text", NOTHING_TO_DO)]
    for plans_given, switch_plan in read_again:
        assert _run_report.converge_checks(PAIR, None, "rep", plans=plans_given, switch_plan=switch_plan) == [], (
            plans_given, switch_plan)
    # a benchmark after the plans: read again
    assert _run_report.converge_checks(PAIR, None, "rep", True, plans, NOTHING_TO_DO) == []
