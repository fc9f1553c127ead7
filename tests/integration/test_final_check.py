# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every run re-checks what it leaves serving (roles/serve_variant/tasks/final_check.yml): a switch of one
replica, behind the real sglang-router, during which another replica is killed with SIGKILL, fails, naming
the dead replica and how it ended (its watchdog's exit record); the replica switched serves the new variant.
The hosts, stand-in engines and router are those of test_replicas.py. A one-server host gets the same check:
a benchmark of what serves, during which its engine is killed, fails naming it (switchbed's host)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request

from switchbed import BENCH, STOP, fleet, serving, started, switch  # noqa: F401 pylint: disable=unused-import

from test_replicas import listed, replicas, router, unlist  # noqa: F401 (the fixtures) pylint: disable=unused-import

from ansible_collections.inferops.serving.plugins.module_utils import _procs

BENCH_MODULE = "AnsiballZ_throughput_bench"


def kill_when(ready, victim, done, delay=0.0):
    """SIGKILL the pid victim() names, delay seconds after ready() first holds (polled until done is set, or for
    120 s); returns what was killed ({"pid"}, in a dict the caller reads after the run) and the watching thread."""
    killed = {}

    def watch():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not done.is_set():
            if ready():
                time.sleep(delay)
                killed["pid"] = victim()
                os.kill(killed["pid"], signal.SIGKILL)
                return
            time.sleep(0.02)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return killed, thread


def kill_when_switched(host, victim, switched, before, done):
    """SIGKILL victim's engine once switched's new engine is recorded (the run is then in switched's start
    or its return into the router)."""
    return kill_when(lambda: (host.record(switched) or {}).get("pid") not in (None, before),
                     lambda: host.record(victim)["pid"], done)


def two_behind(router, replicas, names=("r0", "r1")):
    """Replicas r0 and r1 (or names) on v1, all listed healthy by the router."""
    host = replicas(router_url=router.url, names=names)
    run = host.play("v1")
    assert run.rc == 0, run.stdout[-4000:]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and listed(router.url) != dict((url, True) for url in host.urls()):
        time.sleep(0.2)
    assert listed(router.url) == dict((url, True) for url in host.urls())
    return host


def said(run):
    """What the final check said each instance leaves serving (its debug task's lines)."""
    found = [r["result"]["msg"] for r in run.results(action="debug")
             if r["task"].endswith("leaves serving") and r["status"] != "skipped"]
    assert found, run.stdout[-3000:]
    return found[-1]


def test_a_switch_fails_when_another_replica_died_during_it_naming_it(router, replicas):
    host = two_behind(router, replicas)
    before = host.pids()
    done = threading.Event()
    killed, thread = kill_when_switched(host, "r0", "r1", before["r1"], done)
    started = time.monotonic()
    try:
        run = host.play("v2", instances="r1")
    finally:
        done.set()
        thread.join()
    print("the run took %.1f s; its end:\n%s" % (time.monotonic() - started, run.stdout[-2500:]))
    assert killed.get("pid") == before["r0"], "r0 was killed during the run"
    assert run.rc != 0, "a run that leaves a dead replica fails"
    record = host.record("r0")
    assert record["pid"] == before["r0"] and not _procs.alive(before["r0"])  # dead, as its state file still says
    exit_record = json.loads((host.state_dir / "rep.r0.exit.json").read_text())
    assert exit_record["signal"] == "SIGKILL" and exit_record["pid"] == before["r0"]
    expected = "instance rep.r0 (variant v1, pid %d) no longer runs: the engine was killed by SIGKILL at %s" % (
        before["r0"], exit_record["ended_at"])
    assert expected in run.stdout
    failed = [r["result"] for r in run.records if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["msg"] == "what this run leaves serving is not right: " + expected, failed
    checked = [r["result"] for r in run.results("inference_server", checks=True) if r["result"].get("problem")]
    assert [c["exit"]["signal"] for c in checked] == ["SIGKILL"] and checked[0]["pid"] == before["r0"]
    # the replica the run switched serves the new variant, back in the router; the other is named, not touched
    assert host.variants() == {"r0": "v1", "r1": "v2"}
    after = host.pids()
    assert after["r1"] != before["r1"] and _procs.alive(after["r1"])
    assert said(run)[0] == "rep.r0: FAILED - " + expected
    assert listed(router.url)["http://127.0.0.1:%d" % host.ports["r1"]] is True


def test_a_run_that_leaves_every_replica_serving_passes_and_says_so(router, replicas):
    host = two_behind(router, replicas)
    # every replica keeps v1: nothing changes, and what the plans read (each engine probed, the router's listing)
    # is what the run says, with no module call after them (filter converge_checks)
    run = host.play("v1")
    assert run.rc == 0, run.stdout[-3000:]
    assert said(run) == ["rep.%s: v1 serves (pid %d) on http://127.0.0.1:%d, listed healthy by router %s (as this run's "
                         "plan read it)" % (name, host.pids()[name], host.ports[name], router.url) for name in ("r0", "r1")]
    assert [r for r in run.results("inference_server", checks=True) if r not in run.results("inference_server")] == []
    # r1 switches: then the final check reads each one again (r0 might have died meanwhile)
    run = host.play("v2", instances="r1")
    assert run.rc == 0, run.stdout[-3000:]
    pids = host.pids()
    assert said(run) == ["rep.r0: v1 serves (pid %d) on http://127.0.0.1:%d, listed healthy by router %s" % (
        pids["r0"], host.ports["r0"], router.url), "rep.r1: v2 serves (pid %d) on http://127.0.0.1:%d, listed healthy "
        "by router %s" % (pids["r1"], host.ports["r1"], router.url)]
    checks = [r for r in run.results("inference_server", checks=True) if r not in run.results("inference_server")]
    assert [r["result"]["pid"] for r in checks] == [pids["r0"], pids["r1"]] and all(map(_procs.alive, pids.values()))
    run = host.play(None, playbook=STOP)  # a stop leaves nothing recorded: nothing should serve, which passes
    assert run.rc == 0, run.stdout[-3000:]
    assert said(run) == ["rep.%s: nothing is recorded for it: nothing should serve" % name for name in ("r0", "r1")]


def test_a_replica_left_out_of_its_router_fails_the_final_check_of_a_run_that_did_not_touch_it(router, replicas):
    """r0 serves but its router no longer lists it (taken out behind the run's back); a run that switches r1 alone
    (r2 keeps the router's one healthy worker for keep_healthy) does not touch r0, and its final check, which looks
    each serving instance up in the router's listing in the same module call (inference_server state=checked with the
    router: membership), fails naming r0."""
    host = two_behind(router, replicas, names=("r0", "r1", "r2"))
    before = host.pids()
    r0 = "http://127.0.0.1:%d" % host.ports["r0"]
    unlist(router.url, r0)
    run = host.play("v2", instances="r1")
    assert run.rc != 0, run.stdout[-3000:]
    expected = "rep.r0 serves, but router %s does not list it (%s)" % (router.url, r0)
    failed = [r["result"] for r in run.records if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["msg"] == "what this run leaves serving is not right: " + expected, failed
    checks = dict((r["result"]["pid"], r["result"]["membership"]) for r in run.results("inference_server", checks=True)
                  if r["result"].get("serving"))
    after = host.pids()
    assert checks == {before["r0"]: {"listed": False, "healthy": False, "router_url": router.url, "worker_url": r0},
                      after["r1"]: {"listed": True, "healthy": True, "router_url": router.url,
                                    "worker_url": "http://127.0.0.1:%d" % host.ports["r1"]},
                      before["r2"]: {"listed": True, "healthy": True, "router_url": router.url,
                                     "worker_url": "http://127.0.0.1:%d" % host.ports["r2"]}}, checks
    assert not [r for r in run.results("router_worker") if r["status"] != "skipped" and "once for every" in r["task"]]
    assert host.variants() == {"r0": "v1", "r1": "v2", "r2": "v1"}
    assert after["r0"] == before["r0"] and after["r2"] == before["r2"] and _procs.alive(after["r0"])
    assert r0 not in listed(router.url), "a run that did not select r0 leaves it as it found it"


def requests_seen(port):
    """How many generation requests the stand-in engine on port has taken since it started (its /stats)."""
    with urllib.request.urlopen("http://127.0.0.1:%d/stats" % port, timeout=5) as answer:
        return json.load(answer)["requests"]


def kill_during_bench(pid, port, done):
    """SIGKILL pid once the benchmark module runs (its async wrapper names it on its command line) and the
    engine has taken 5 more requests than before the run: the probes a run may send before it, and at least
    3 of the benchmark's, one at a time, so some were served and more are to come whatever the machine's load
    (a fixed delay after the module appeared left none served on a loaded CI machine)."""
    before = requests_seen(port)
    return kill_when(lambda: any(BENCH_MODULE in p.cmdline for p in _procs.list_procs())
                     and requests_seen(port) >= before + 5, lambda: pid, done)


def test_a_bench_on_a_one_server_host_fails_when_its_engine_died_during_it(switch, fleet):  # noqa: F811 pylint: disable=redefined-outer-name
    # one level of 24 requests of 64 tokens, 6 ms a token: about 10 s, and the engine dies a few requests into it
    fleet.set_vars(serving_bench={"concurrency": [1], "requests_per_level": 24, "input_tokens": 8,
                                  "output_tokens": 64, "warmup": 0})
    record = started(switch, fleet, "slow")
    done = threading.Event()
    killed, thread = kill_during_bench(record["pid"], fleet.port, done)
    try:
        run = switch(playbook=BENCH)
    finally:
        done.set()
        thread.join()
    print("its end:\n%s" % run.stdout[-2500:])
    assert killed, "the engine was killed during the benchmark"
    assert run.rc != 0, "a run that leaves a dead engine fails"
    bench = [r["result"] for r in run.results("async_status") if "results" in r["result"]][-1]
    level = bench["results"][0]
    assert 0 < level["completed"] < 24 and level["failed"] > 0, level  # it died during the benchmark
    assert not _procs.alive(record["pid"]) and fleet.record()["pid"] == record["pid"]  # dead, as recorded
    exit_record = json.loads((fleet.state_dir / "sv.exit.json").read_text())
    assert exit_record["signal"] == "SIGKILL" and exit_record["pid"] == record["pid"]
    expected = "instance sv (variant slow, pid %d) no longer runs: the engine was killed by SIGKILL at %s" % (
        record["pid"], exit_record["ended_at"])
    failed = [r["result"] for r in run.records if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["msg"] == "what this run leaves serving is not right: " + expected, failed
    assert said(run) == ["sv: FAILED - " + expected]
    assert _procs.listeners(fleet.port) == []  # nothing was started in its place: a check changes nothing


def test_a_one_server_switch_is_read_once_by_its_converge_call_and_again_after_a_benchmark(switch, fleet):  # noqa: F811 pylint: disable=redefined-outer-name
    """A host's one server: the converge call's own reading (a new engine health-gated, a kept one probed) is what
    the run says it leaves serving, with no second module call; after a benchmark it is read again."""
    first = started(switch, fleet, "fast")
    for variant, kept in (("slow", False), ("slow", True)):  # a switch, then a re-run that keeps it
        run = switch(variant, extra={"bench": "never"})
        assert run.rc == 0, run.stdout[-3000:]
        record = serving(fleet, variant)
        assert (record["pid"] == first["pid"]) is False and (not kept or record["pid"] == pid), record
        pid = record["pid"]
        calls = [c for c in run.results("inference_server", checks=True) if c["status"] != "skipped"]
        assert len(calls) == 1 and "state=checked" not in calls[0]["task"] and not [c for c in calls if c not in run.results(
            "inference_server")], [c["task"] for c in calls]
        url = calls[0]["result"]["url"]
        assert said(run) == ["sv: %s serves (pid %d) on %s (as this run's converge call read it)" % (variant, pid, url)]
    fleet.set_vars(serving_bench={"concurrency": [1], "requests_per_level": 2, "input_tokens": 8,
                                  "output_tokens": 4, "warmup": 0})
    run = switch("slow", extra={"bench": "always"})  # a benchmark may end an engine: the server is read again
    assert run.rc == 0, run.stdout[-3000:]
    serving(fleet, "slow", pid=pid)
    checks = [r for r in run.results("inference_server", checks=True) if r not in run.results("inference_server")]  # state=checked
    assert len(checks) == 1 and checks[0]["result"]["pid"] == pid, checks
    assert said(run) == ["sv: slow serves (pid %d) on %s" % (pid, url)]
