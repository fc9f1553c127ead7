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
