# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/compare.yml on stand-in engines whose speed is known from their flags (tests/support/stream_server.py:
a chunk every STEP ms after TTFT), through real ansible-playbook runs: the verdict's interval holds the true
ratio, a crashing variant is reported and skipped, keep leaves the right variant serving."""

from __future__ import annotations

import json
import math
import os

import pytest

from switchbed import ROOT, fake_engine, fleet, observed, serving, stand_in, switch  # noqa: F401 pylint: disable=unused-import

from ansible_collections.inferops.serving.plugins.filter import compare as compare_filters
from ansible_collections.inferops.serving.plugins.module_utils import _procs

COMPARE = os.path.join(ROOT, "playbooks", "compare.yml")
TTFT_MS, TOKENS = 5.0, 16


def true_throughput(step_ms, concurrency):
    """Output tok/s of the stand-in at concurrency C <= its batch cap: C*n / (ttft + (ceil(n/k) - 1) * step)."""
    return concurrency * TOKENS / ((TTFT_MS + (math.ceil(TOKENS / 1.0) - 1) * step_ms) / 1000.0)


def verdict_of(run):
    found = [r["result"]["msg"] for r in run.results("debug") if "Say which variant" in r["task"]]
    assert found, run.stdout[-3000:]
    return found[-1]


def test_compare_finds_the_true_ratio_skips_a_crash_and_keeps_the_best(switch, fleet):
    fleet.add_variants({"fast4": {"command": stand_in(fleet.port, 4)}, "slow8": {"command": stand_in(fleet.port, 8)}})
    fleet.set_vars(serving_bench={"concurrency": [1, 4], "requests_per_level": 8, "input_tokens": 8,
                                  "output_tokens": TOKENS, "warmup": 1})
    run = switch(playbook=COMPARE, extra={"variants": "slow8,crash,fast4", "repeats": 3, "keep": "best"})
    assert run.rc == 0, run.stdout[-4000:]
    lines = verdict_of(run)
    print("\n" + "\n".join(lines))
    truth = true_throughput(4, 4) / true_throughput(8, 4)
    head = "compare localhost: fast4 vs slow8 at c=4: output \u00d7"
    line = next(item for item in lines if item.startswith(head))
    low, high = [float(x) for x in line.split("[")[1].split("]")[0].split(", ")]
    assert low <= truth * 1.05 and high >= truth * 0.95, (truth, line)  # the client's own overhead: 5 % at most
    assert line.endswith(" significant") and not line.endswith("not significant")
    assert "compare localhost: crash failed: " in "\n".join(lines) and "exited with code 3" in "\n".join(lines)
    assert lines[-1].startswith("compare localhost: winner fast4 (output ")
    record = serving(fleet, "fast4")  # keep=best: the winner serves, alone, on the port
    observed("compare slow8,crash,fast4 keep=best (pid %d)" % record["pid"], run, fleet)


def test_keep_previous_restores_what_served_before(switch, fleet):
    assert switch("fast", extra={"bench": "never"}).rc == 0
    before = serving(fleet, "fast")
    run = switch(playbook=COMPARE, extra={"variants": ["slow", "hang"], "repeats": 1, "keep": "previous"})
    assert run.rc == 0, run.stdout[-4000:]
    lines = verdict_of(run)
    assert lines[0].startswith("compare localhost: hang failed: ") and "ROLLED BACK: slow serves again" in lines[0]
    assert lines[-1].startswith("compare localhost: winner slow (output ")
    after = serving(fleet, "fast")  # what served before the comparison serves again
    assert after["pid"] != before["pid"]


def test_keep_previous_on_a_host_where_nothing_served_stops_what_the_comparison_started(switch, fleet):
    """Nothing served before: keep=previous stops the server the comparison left (its GPUs verified clean), and the
    end-of-run check finds nothing recorded, which is right."""
    assert fleet.record() is None
    run = switch(playbook=COMPARE, extra={"variants": ["fast", "slow"], "repeats": 1, "keep": "previous"})
    assert run.rc == 0, run.stdout[-4000:]
    stops = [r["result"] for r in run.results("inference_server")
             if r["status"] != "skipped" and r["task"].endswith("(what runs) and verify every GPU clean")]
    assert len(stops) == 1 and stops[0]["outcome"] == "stopped" and stops[0]["gpu_check"]["clean"], stops
    assert _procs.listeners(fleet.port) == [] and fleet.record() is None
    said = [r["result"]["msg"] for r in run.results(action="debug") if r["task"].endswith("leaves serving")
            and r["status"] != "skipped"]
    assert said[-1] == ["sv: nothing is recorded for it: nothing should serve"], said


def test_a_variant_whose_benchmark_fails_is_recorded_with_the_benchmarks_reason(switch, fleet):
    """It starts and answers the readiness generation, but drops every stream after 3 chunks: no request of the
    sweep completes, the benchmark fails at once (caught by the benchmark role's first polls) and the
    comparison goes on."""
    fleet.add_variants({"fast4": {"command": stand_in(fleet.port, 4)},
                        "other": {"command": stand_in(fleet.port, 4) + ["--drop-every", "1"]}})
    run = switch(playbook=COMPARE, extra={"variants": "fast4,other", "repeats": 2, "keep": "best"})
    assert run.rc == 0, run.stdout[-4000:]
    lines = verdict_of(run)
    print("\n" + "\n".join(lines))
    assert lines[0].startswith("compare localhost: other failed: no request completed at concurrency 1 against "), lines
    assert lines[-1].startswith("compare localhost: winner fast4 (output ")
    serving(fleet, "fast4")


def test_every_variant_failing_fails_the_run_and_leaves_what_served(switch, fleet):
    """No winner: keep=best has nothing to serve, so the host ends as it began (never stopped for it)."""
    fleet.add_variants({"crash2": {"command": fake_engine(fleet.port, "exit")}})
    assert switch("fast", extra={"bench": "never"}).rc == 0
    run = switch(playbook=COMPARE, extra={"variants": "crash,crash2", "repeats": 1, "keep": "best"})
    observed("compare crash,crash2 keep=best over fast", run, fleet)
    assert run.rc != 0
    said = " ".join(run.stdout.split())
    assert "compare localhost: every variant failed, nothing was measured (fast serves, as before): crash: " in said
    assert "compare localhost: no winner (every variant failed)" in said
    serving(fleet, "fast")  # restored after each failure, and still serving at the end


def test_an_slo_judges_on_goodput_and_disqualifies_who_misses_it(switch, fleet):
    """TPOT of the stand-in is its step: at most 6 ms per token leaves slow8 (8 ms) no request that meets it."""
    fleet.add_variants({"fast4": {"command": stand_in(fleet.port, 4)}, "slow8": {"command": stand_in(fleet.port, 8)}})
    assert switch("fast", extra={"bench": "never"}).rc == 0
    bad = switch(playbook=COMPARE, extra={"variants": "slow8,fast4", "slo": {"tpot": 6}})
    assert bad.rc != 0 and "slo takes targets in milliseconds" in " ".join(bad.stdout.split())
    serving(fleet, "fast")  # refused before anything ran
    run = switch(playbook=COMPARE, extra={"variants": "slow8,fast4", "repeats": 2, "slo": {"tpot_ms": 6}})
    assert run.rc == 0, run.stdout[-4000:]
    lines = verdict_of(run)
    print("\n" + "\n".join(lines))
    assert "compare localhost: slow8 disqualified at c=4: 0 % of requests met the SLO (mean of 2), under the 90 % " \
           "required" in lines
    assert lines[-1].startswith("compare localhost: winner fast4 (goodput ")
    serving(fleet, "fast4")
    # nobody meets 1 ms: no winner, and keep=best leaves what served before the comparison
    none = switch(playbook=COMPARE, extra={"variants": "slow8", "repeats": 1, "slo": {"tpot_ms": 1}})
    assert none.rc == 0, none.stdout[-4000:]
    assert verdict_of(none)[-1] == "compare localhost: no winner (no variant met the SLO)"
    serving(fleet, "fast4")


def test_bad_arguments_are_refused_before_anything_runs(switch, fleet):
    run = switch(playbook=COMPARE, extra={"variants": "fast,nope", "repeats": 0})
    assert run.rc != 0 and fleet.record() is None
    said = " ".join(run.stdout.split())
    assert "compare needs -e variants=A,B,... (distinct variants of serving_variants: crash, fast, hang, slow; got fast, nope)" in said
    assert "-e repeats=N (a whole number, 1 or more; got 0)" in said


TUNE = os.path.join(ROOT, "playbooks", "tune.yml")


def starts(fleet):
    """Engines started for the instance so far (one line in its log per start)."""
    # each start has a log of its own (sv.log, then sv.log.1, ...: serving_log_keep, 50 in the test bed)
    return sum(log.read_text().count(": starting sv") for log in fleet.log_dir.glob("sv.log*"))


def test_tune_finds_the_known_best_and_a_second_run_starts_no_engine(switch, fleet, tmp_path):
    """Candidates of the stand-in's own --step-ms (the engine_args key becomes a flag after its command; the
    last one wins): step 2 is the fastest. A crashing candidate is reported and not retried."""
    fleet.add_variants({"tbase": {"command": stand_in(fleet.port, 6)}})
    results = tmp_path / "results"
    extra = {"base": "tbase", "tune_grid": {"step_ms": [8, 2, "x"]}, "repeats": 2}  # --step-ms x: exits 2
    # the compared level alone, each measurement 16 requests of 32 tokens (0.3-1 s) instead of a c=4 level of 8 of 16
    # (under 0.1 s), which one scheduling hiccup beside the other worker's test could make not significant in 2 repeats
    extra["serving_bench"] = {"concurrency": [4], "requests_per_level": 16, "input_tokens": 8, "output_tokens": 32,
                              "warmup": 0}
    env = {"INFEROPS_RESULTS_DIR": str(results), "ANSIBLE_CALLBACKS_ENABLED": "record,inferops.serving.bench_facts"}
    first = switch(playbook=TUNE, extra=extra, env=env)
    assert first.rc == 0, first.stdout[-4000:]
    lines = verdict_of_tune(first)
    print("\n" + "\n".join(lines))
    assert lines[-1].startswith("compare localhost: winner tbase+step_ms=2 (output ")
    assert any(line.startswith("compare localhost: tbase+step_ms=2 vs tbase at c=4: output \u00d7") and
               line.endswith(" significant") and "not significant" not in line for line in lines)
    assert any(line.startswith("compare localhost: tbase+step_ms=x failed: ") and "exited with code 2" in line
               for line in lines), lines
    serving(fleet, "tbase+step_ms=2")
    entry = (results / "tuned-tbase.yml").read_text()
    assert "tuned-tbase:\n  extends: tbase\n  engine_args:\n    step_ms: 2\n" in entry, entry
    failures = json.loads((results / "tune-failures-localhost.json").read_text())
    assert len(failures) == 1 and "exited with code 2" in list(failures.values())[0], failures
    started = starts(fleet)

    second = switch(playbook=TUNE, extra=extra, env=env)
    assert second.rc == 0, second.stdout[-4000:]
    said = " ".join(second.stdout.split())
    print(said[said.find("tune localhost:"):][:400])
    assert ("measuring none; from the history: tbase, tbase+step_ms=8, tbase+step_ms=2; failed before: "
            "tbase+step_ms=x") in said, said[-3000:]
    assert starts(fleet) == started  # nothing was started again: every candidate was measured, the winner serves
    assert verdict_of_tune(second)[-1] == lines[-1]
    assert any(line.startswith("compare localhost: tbase+step_ms=x failed: failed before, not retried") for line in
               verdict_of_tune(second))

    third = switch(playbook=TUNE, extra=dict(extra, tune_retry_failed=True), env=env)
    assert third.rc == 0, third.stdout[-4000:]
    assert "measuring tbase+step_ms=x;" in " ".join(third.stdout.split())
    assert starts(fleet) == started + 2  # the failed candidate tried again, then the winner restored
    serving(fleet, "tbase+step_ms=2")


def verdict_of_tune(run):
    found = [r["result"]["msg"] for r in run.results("debug") if "Say which candidate" in r["task"]]
    assert found, run.stdout[-3000:]
    return found[-1]


def drifting(port, step_ms, epoch, per_s):
    """The stand-in on a host that slows down by per_s of its speed every second since epoch (thermals, a
    neighbour): every variant alike, whenever it runs."""
    return stand_in(port, step_ms) + ["--drift-epoch", repr(epoch), "--drift-per-s", str(per_s)]


def test_a_drift_reads_as_a_difference_in_blocked_order_and_not_interleaved(switch, fleet):
    """Two variants of the same speed (a and b: 4 ms a token) on a host that drifts 3 % slower a second.
    Blocked (a a a a, then b b b b), b ran later and reads slower; interleaved (a b, b a, a b, b a) the drift
    falls on both alike. Both verdicts report the drift: a's first repeat against its last."""
    import time
    epoch = time.time()
    fleet.add_variants({"a": {"command": drifting(fleet.port, 4, epoch, 0.03)},
                        "b": {"command": drifting(fleet.port, 4, epoch, 0.03), "description": "the same as a"}})
    fleet.set_vars(serving_bench={"concurrency": [2], "requests_per_level": 6, "input_tokens": 8,
                                  "output_tokens": TOKENS, "warmup": 1})
    verdicts = {}
    for order in ("blocked", "interleaved"):
        run = switch(playbook=COMPARE, extra={"variants": "a,b", "repeats": 4, "compare_order": order, "keep": "last"})
        assert run.rc == 0, run.stdout[-4000:]
        verdicts[order] = verdict_of(run)
        print("\n[%s]\n%s" % (order, "\n".join(verdicts[order])))
    blocked = next(line for line in verdicts["blocked"] if " b vs a at c=2: output " in line)
    interleaved = next(line for line in verdicts["interleaved"] if " b vs a at c=2: output " in line)
    assert blocked.endswith(" significant") and not blocked.endswith("not significant"), blocked
    assert float(blocked.split("\u00d7")[1].split()[0]) < 0.95, blocked
    assert interleaved.endswith("not significant"), interleaved
    for order in ("blocked", "interleaved"):
        drift = next(line for line in verdicts[order] if "drift of a over the comparison (%s order)" % order in line)
        assert float(drift.split("(\u00d7")[1].split()[0]) < 1.0, drift  # the host slowed down


@pytest.mark.timeout(600)  # a long flow: several minutes on a loaded 2-core machine
def test_compare_until_decided_stops_when_it_knows_and_says_why(switch, fleet, tmp_path):
    """compare_until=decided: interleaved rounds of fast4 and slow8 (twice as fast, known from their flags), the
    first look after 2 rounds, at most 6; it stops at the first look whose sequential interval decides, and the
    verdict says the rounds and why. A blocked order with it is refused before any engine starts. Before its
    first round, a run says how many rounds it expects to fit, from what the host measured before: nothing, on
    a first run; what this run left in the history and run files (bench_facts), on the next."""
    fleet.add_variants({"fast4": {"command": stand_in(fleet.port, 4)}, "slow8": {"command": stand_in(fleet.port, 8)}})
    fleet.set_vars(serving_bench={"concurrency": [2], "requests_per_level": 4, "input_tokens": 8,
                                  "output_tokens": TOKENS, "warmup": 1})
    refused = switch(playbook=COMPARE, extra={"variants": "slow8,fast4", "repeats": 2, "compare_until": "decided",
                                              "compare_order": "blocked"})
    assert refused.rc != 0
    assert "compare_until=decided runs interleaved rounds and stops between them: compare_order must be interleaved" \
        in refused.stdout
    assert refused.results("inference_server") == []  # refused before any engine started
    results = tmp_path / "results"
    env = {"INFEROPS_RESULTS_DIR": str(results), "ANSIBLE_CALLBACKS_ENABLED": "record,inferops.serving.bench_facts"}
    run = switch(playbook=COMPARE, extra={"variants": "slow8,fast4", "repeats": 2, "compare_until": "decided",
                                          "compare_max_repeats": 6, "compare_budget_s": 600, "keep": "best"}, env=env)
    assert run.rc == 0, run.stdout[-4000:]
    lines = verdict_of(run)
    print("\n" + "\n".join(lines))
    said = [r["result"]["msg"] for r in run.results("debug")
            if ("Say the plan" in r["task"] or "Say where" in r["task"]) and "msg" in r["result"]]
    print("\n".join(said))
    assert said[0].startswith("compare localhost: until decided: the first look after 2 round(s), at most 6 (5 planned looks)")
    assert said[0].endswith("no earlier measurement here of slow8's benchmark, slow8's engine load, fast4's benchmark, "
                            "fast4's engine load with these settings: how many rounds fit is said once the first round "
                            "has measured them"), said[0]
    stop = next(line for line in lines if "round(s), stopped:" in line)
    rounds = int(stop.split("ran ")[1].split()[0])
    assert 2 <= rounds <= 6 and "stopped: decided (every variant decided); fast4 faster;" in stop, stop
    assert "intervals valid at any of 5 planned looks (each at 99 %" in stop
    line = next(item for item in lines if item.startswith("compare localhost: fast4 vs slow8 at c=2: output \u00d7"))
    assert line.endswith(" significant") and not line.endswith("not significant")
    assert len(said) == 1 + rounds and "a round takes " in said[1] and said[-1].endswith("; stops: decided")
    verdict = [r for r in run.results("set_fact") if "serve_variant_compare_sequential" in (r["result"].get("ansible_facts") or {})]
    assert verdict and verdict[-1]["result"]["ansible_facts"]["serve_variant_compare_sequential"]["rounds"] in (rounds, str(rounds))
    serving(fleet, "fast4")  # keep=best: the winner serves
    # what the next run would expect, from what this one left: the real history and run files
    history = (results / "history.jsonl").read_text()
    digests = set(json.loads(line)["labels"]["bench"] for line in history.splitlines())
    runs = [path.read_text() for path in sorted(results.glob("*.json"))]
    plan = {"first_look": 2, "max_rounds": 6, "budget_s": 600.0}
    expect = compare_filters.compare_expect(history, runs, "localhost", ["slow8", "fast4"], digests.pop(), plan)
    print(expect["said"])
    assert expect["missing"] == [] and not digests, expect
    assert 0 < expect["round_s"] < 600 and 1 <= expect["fit"] <= 6, expect
