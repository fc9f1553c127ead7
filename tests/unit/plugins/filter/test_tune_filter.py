# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the tune filters (playbooks/tune.yml): tune_candidates (with its AnsibleFilterError on a bad
grid), bench_digest, tune_measured and tune_plan over history.jsonl text, tune_failures and tune_entry, each
called directly."""

from __future__ import annotations

import json
import os
import re

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.filter import tune as tune_filter

CATALOG = {"baseline": {"engine": "sglang", "model": "m"}, "nextn": {"extends": "baseline"}}
BENCH = {"api": "completions", "concurrency": [1, 32], "output_tokens": 256, "input_tokens": 128,
         "labels": {"variant": "nextn"}, "url": "http://h:30000"}


def test_the_module_registers_exactly_its_filters():
    filters = tune_filter.FilterModule().filters()
    assert filters == {"tune_candidates": tune_filter.tune_candidates, "bench_digest": tune_filter.bench_digest,
                       "tune_measured": tune_filter.tune_measured, "tune_entry": tune_filter.tune_entry,
                       "tune_plan": tune_filter.tune_plan, "tune_failures": tune_filter.tune_failures}
    here = os.path.dirname(os.path.abspath(tune_filter.__file__))
    assert [name for name in filters if not os.path.isfile(os.path.join(here, "%s.yml" % name))] == []


def test_tune_candidates_gives_each_combination_extending_the_base():
    out = tune_filter.tune_candidates(CATALOG, "nextn", {"num_steps": [1, 3], "moe": ["a b", {"x": 1}]})
    assert list(out) == ["nextn+num_steps=1+moe=a_b", 'nextn+num_steps=1+moe=x_1',
                         "nextn+num_steps=3+moe=a_b", "nextn+num_steps=3+moe=x_1"]
    assert out["nextn+num_steps=3+moe=x_1"] == {
        "extends": "nextn", "engine_args": {"num_steps": 3, "moe": {"x": 1}},
        "description": 'tune candidate: nextn with {"moe": {"x": 1}, "num_steps": 3}'}
    assert CATALOG == {"baseline": {"engine": "sglang", "model": "m"}, "nextn": {"extends": "baseline"}}


def test_tune_candidates_limit_is_sixteen_unless_raised():
    grid = {"a": list(range(17))}
    with pytest.raises(AnsibleFilterError, match=r"^tune_candidates: tune_grid gives 17 candidates \(17\), more than "
                                                 r"tune_max_candidates=16: narrow the grid or raise"):
        tune_filter.tune_candidates(CATALOG, "nextn", grid)
    assert len(tune_filter.tune_candidates(CATALOG, "nextn", grid, 17)) == 17
    assert len(tune_filter.tune_candidates(CATALOG, "nextn", grid, "17")) == 17  # an extra var comes as text


@pytest.mark.parametrize("catalog, base, grid, message", [
    (CATALOG, "nope", {"a": [1]}, "tune_candidates: base must be a variant of serving_variants (baseline, nextn), "
                                  "got 'nope'"),
    (None, "nextn", {"a": [1]}, "tune_candidates: base must be a variant of serving_variants (), got 'nextn'"),
    (CATALOG, "nextn", [], "tune_candidates: tune_grid must be a non-empty dict of engine_args key -> list of values"),
    (CATALOG, "nextn", {"a": 1}, "tune_candidates: tune_grid[a] must be a non-empty list of values, got 1"),
    (CATALOG, "nextn", {"a": ["x y", "x_y"]}, "tune_candidates: tune_grid[a] repeats a value: ['x y', 'x_y']"),
    (dict(CATALOG, **{"nextn+a=1": {}}), "nextn", {"a": [1]},
     "tune_candidates: candidate nextn+a=1 is already a variant of serving_variants: rename that variant"),
])
def test_tune_candidates_refuses_bad_input_with_a_filter_error(catalog, base, grid, message):
    with pytest.raises(AnsibleFilterError, match="^" + re.escape(message)):
        tune_filter.tune_candidates(catalog, base, grid)


def test_bench_digest_is_stable_and_ignores_labels_and_url():
    digest = tune_filter.bench_digest(BENCH)
    assert re.match(r"^bench:[0-9a-f]{16}$", digest)
    assert tune_filter.bench_digest(dict(BENCH, labels={}, url="http://other:1")) == digest
    assert tune_filter.bench_digest(dict(BENCH, concurrency=[1])) != digest
    assert tune_filter.bench_digest(None) == tune_filter.bench_digest({})


def _record(run, repeat, concurrency, value, **kw):
    rec = {"time": "2026-12-04T10:%02d:00Z" % run, "run": "r%d" % run, "host": "h1", "fingerprint": "sha256:a",
           "concurrency": concurrency, "repeat": repeat, "output_throughput": value,
           "labels": {"bench": "bench:1", "repeat": repeat}}
    rec.update(kw)
    return rec


def test_tune_measured_reads_the_history_text_newest_repeats_first_level_order():
    lines = [_record(1, 0, 8, 80.0), _record(1, 0, 1, 10.0), _record(2, 0, 1, 12.0), _record(2, 0, 8, 90.0),
             _record(3, 0, 1, 99.0, host="h2"), _record(3, 1, 1, 99.0, fingerprint="sha256:b")]
    text = "\n".join(json.dumps(line) for line in lines) + "\n{broken\n[1, 2]\n"
    got = tune_filter.tune_measured(text, "h1", "sha256:a", "bench:1", 1)
    assert [[(lvl["concurrency"], lvl["output_throughput"]) for lvl in rep] for rep in got] == [[(1, 12.0), (8, 90.0)]]
    both = tune_filter.tune_measured(text, "h1", "sha256:a", "bench:1", "2")
    assert [rep[0]["run"] for rep in both] == ["r1", "r2"]
    assert tune_filter.tune_measured(text, "h1", "sha256:a", "bench:1", 3) == []  # too few: measure it
    assert tune_filter.tune_measured(text, "h1", "sha256:a", "bench:2", 1) == []
    assert tune_filter.tune_measured("", "h1", "sha256:a", "bench:1", 1) == []
    assert tune_filter.tune_measured(None, "h1", "sha256:a", "bench:1", 1) == []


HISTORY = "\n".join(json.dumps(line) for line in [_record(1, 0, 1, 10.0), _record(1, 0, 8, 80.0)]) + "\n"
KEY = "h1 sha256:a bench:1"


def test_tune_plan_takes_the_repeats_the_history_holds():
    plan = tune_filter.tune_plan(HISTORY, {}, "h1", "sha256:a", "bench:1", "1")
    assert plan["key"] == KEY and plan["measure"] is False
    assert [[lvl["output_throughput"] for lvl in rep] for rep in plan["result"]["repeats"]] == [[10.0, 80.0]]
    assert tune_filter.tune_plan(HISTORY, {}, "h1", "sha256:a", "bench:1", 1, fresh=True) == {
        "key": KEY, "measure": True, "result": None}
    assert tune_filter.tune_plan(HISTORY, None, "h1", "sha256:a", "bench:1", 2) == {
        "key": KEY, "measure": True, "result": None}  # one repeat is not two


def test_tune_plan_skips_what_failed_here_before_unless_retried():
    failures = {KEY: "sv exited with code 1 before it was ready"}
    plan = tune_filter.tune_plan("", failures, "h1", "sha256:a", "bench:1", 1)
    assert plan == {"key": KEY, "measure": False, "result": {
        "failed": "failed before, not retried (tune_retry_failed=true retries it): sv exited with code 1 before it "
                  "was ready"}}
    assert tune_filter.tune_plan("", failures, "h1", "sha256:a", "bench:1", 1, retry_failed=True)["measure"] is True
    assert tune_filter.tune_plan("", failures, "h2", "sha256:a", "bench:1", 1)["measure"] is True  # another host
    # the history's repeats win over an old failure
    assert tune_filter.tune_plan(HISTORY, failures, "h1", "sha256:a", "bench:1", 1)["result"]["repeats"]


def test_tune_failures_adds_only_the_candidates_measured_now():
    old = {"h1 sha256:old bench:1": "old failure"}
    rows = [{"variant": "a", "reason": "exited 1"}, {"variant": "b", "reason": "from the history"}]
    out = tune_filter.tune_failures(old, rows, ["a"], {"a": "h1 sha256:a bench:1", "b": "h1 sha256:b bench:1"})
    assert out == {"h1 sha256:old bench:1": "old failure", "h1 sha256:a bench:1": "exited 1"}
    assert old == {"h1 sha256:old bench:1": "old failure"}  # a new dict
    assert tune_filter.tune_failures(None, None, [], {}) == {}


def test_tune_entry_is_the_winner_ready_to_paste_or_says_why_not():
    catalog = dict(CATALOG, **tune_filter.tune_candidates(CATALOG, "nextn", {"num_steps": [1, 3]}))
    verdict = {"host": "h1", "winner": "nextn+num_steps=3", "lines": ["compare h1: winner nextn+num_steps=3"],
               "objective": {"metric": "output_throughput", "concurrency": 32},
               "summaries": {"nextn+num_steps=3": {32: {"output_throughput": {
                   "median": 142.0, "n": 3, "ci_low": 140.0, "ci_high": 145.0}}}}}
    assert tune_filter.tune_entry(verdict, "nextn", catalog) == (
        "# tuned from nextn on h1: output_throughput 142.0 at c=32, median of 3 [140.0, 145.0]\n"
        "# compare h1: winner nextn+num_steps=3\n"
        "tuned-nextn:\n  extends: nextn\n  engine_args:\n    num_steps: 3\n")
    assert tune_filter.tune_entry(dict(verdict, winner=None), "nextn", catalog) == "# tune nextn: no candidate won\n"
    assert tune_filter.tune_entry(dict(verdict, winner="baseline"), "nextn", catalog) == (
        "# tune nextn: baseline is not a candidate of nextn\n")
    assert tune_filter.tune_entry(None, "nextn", catalog) == "# tune nextn: no candidate won\n"


@pytest.mark.parametrize("call, named", [
    (lambda: tune_filter.tune_candidates(CATALOG, "nextn", {"a": [1]}, "lots"), "tune_max_candidates"),
    (lambda: tune_filter.tune_candidates(CATALOG, "nextn", {"a": [1]}, None), "tune_max_candidates"),
    (lambda: tune_filter.tune_measured("", "h", "f", "d", "2.5"), "repeats"),
    (lambda: tune_filter.tune_plan("", {}, "h", "f", "d", "three"), "repeats"),
])
def test_a_count_that_is_not_a_whole_number_is_a_filter_error_naming_it(call, named):
    with pytest.raises(AnsibleFilterError, match=r"%s\)? must be a whole number" % named):
        call()


def test_tune_plan_reads_false_as_text_as_false():
    plan = tune_filter.tune_plan("", {"h f d": "exited with code 2"}, "h", "f", "d", "2", "false", "false")
    assert plan["measure"] is False and plan["result"]["failed"].startswith("failed before, not retried")
