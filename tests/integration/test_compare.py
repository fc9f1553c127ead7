# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/compare.yml on stand-in engines whose speed is known from their flags (tests/support/stream_server.py:
a chunk every STEP ms after TTFT), through real ansible-playbook runs: the verdict's interval holds the true
ratio, a crashing variant is reported and skipped, keep leaves the right variant serving."""

from __future__ import annotations

import math
import os

from switchbed import ROOT, fleet, observed, serving, stand_in, switch  # noqa: F401 pylint: disable=unused-import

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


def test_bad_arguments_are_refused_before_anything_runs(switch, fleet):
    run = switch(playbook=COMPARE, extra={"variants": "fast,nope", "repeats": 0})
    assert run.rc != 0 and fleet.record() is None
    said = " ".join(run.stdout.split())
    assert "compare needs -e variants=A,B,... (distinct variants of serving_variants: crash, fast, hang, slow; got fast, nope)" in said
    assert "-e repeats=N (a whole number, 1 or more; got 0)" in said
