# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""_tune: a grid's candidates, the benchmark digest, what the history measured already, the winner's entry."""

from __future__ import annotations

import hashlib
import json

import pytest

from ansible_collections.inferops.serving.plugins.plugin_utils import _compare, _results_history, _tune

CATALOG = {"nextn": {"engine_args": {"speculative_num_steps": 5}}, "baseline": {}}


def test_a_grid_gives_every_combination_named_after_what_it_changes():
    out = _tune.candidates(CATALOG, "nextn", {"speculative_num_steps": [1, 3], "speculative_num_draft_tokens": [2, 4]})
    assert list(out) == ["nextn+speculative_num_steps=1+speculative_num_draft_tokens=2",
                         "nextn+speculative_num_steps=1+speculative_num_draft_tokens=4",
                         "nextn+speculative_num_steps=3+speculative_num_draft_tokens=2",
                         "nextn+speculative_num_steps=3+speculative_num_draft_tokens=4"]
    first = out["nextn+speculative_num_steps=1+speculative_num_draft_tokens=2"]
    assert first["extends"] == "nextn" and first["engine_args"] == {"speculative_num_steps": 1, "speculative_num_draft_tokens": 2}


@pytest.mark.parametrize("base, grid, limit, message", [
    ("nope", {"a": [1]}, 16, "base must be a variant of serving_variants (baseline, nextn), got 'nope'"),
    ("nextn", {}, 16, "tune_grid must be a non-empty dict"),
    ("nextn", {"a": []}, 16, "tune_grid[a] must be a non-empty list of values"),
    ("nextn", {"a": [1, 1]}, 16, "tune_grid[a] repeats a value"),
    ("nextn", {"a": [1, 2, 3], "b": [1, 2, 3], "c": [1, 2, 3]}, 16,
     "tune_grid gives 27 candidates (3 x 3 x 3), more than tune_max_candidates=16: narrow the grid or raise tune_max_candidates"),
])
def test_bad_grids_are_refused_saying_what_is_allowed(base, grid, limit, message):
    with pytest.raises(_tune.TuneError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        _tune.candidates(CATALOG, base, grid, limit)


def test_the_digest_ignores_labels_and_url_but_not_the_load():
    bench = {"concurrency": [1, 32], "output_tokens": 256, "labels": {"a": 1}, "url": "http://x"}
    assert _tune.bench_digest(bench) == _tune.bench_digest(dict(bench, labels={}, url="http://y"))
    assert _tune.bench_digest(bench) != _tune.bench_digest(dict(bench, output_tokens=512))


def _digest_before_0_4_0(bench):
    """bench_digest as it was before the warm-up to steady state: its keys only."""
    keys = ("api", "concurrency", "requests_per_level", "input_tokens", "output_tokens", "ignore_eos", "slo", "warmup", "model")
    settings = dict((key, bench.get(key)) for key in keys)
    return "bench:" + hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def _digest_before_0_5_0(bench):
    """bench_digest as it was in 0.4.0: warmup as given (unset differed from 1), the steady-state keys as numbers."""
    keys = ("api", "concurrency", "requests_per_level", "input_tokens", "output_tokens", "ignore_eos", "slo", "warmup", "model")
    settings = dict((key, bench.get(key)) for key in keys)
    settings["warmup_tolerance"], settings["warmup_max_s"] = 0.05, 120.0
    return "bench:" + hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def test_warmup_unset_and_1_share_a_digest_and_the_0_4_0_history_is_not_measured():
    bench = {"concurrency": [1, 32], "output_tokens": 256}
    digest = _tune.bench_digest(bench)
    assert digest == _tune.bench_digest(dict(bench, warmup=1)) == _tune.bench_digest(dict(bench, warmup="1"))
    assert digest != _tune.bench_digest(dict(bench, warmup=0))
    assert digest != _digest_before_0_5_0(bench) and digest != _digest_before_0_5_0(dict(bench, warmup=1))
    history = [record(1, repeat, 8, 100.0, digest=_digest_before_0_5_0(dict(bench, warmup=1))) for repeat in (0, 1)]
    assert _tune.measured(history, "h", "sha256:a", digest, 2) == []


def test_the_digest_counts_the_warm_up_to_steady_state_so_older_history_is_not_measured():
    bench = {"concurrency": [1, 32], "output_tokens": 256, "warmup": 1}
    digest = _tune.bench_digest(bench)
    # unset is throughput_bench's defaults, however written
    assert digest == _tune.bench_digest(dict(bench, warmup_tolerance=0.05, warmup_max_s=120))
    assert digest == _tune.bench_digest(dict(bench, warmup_tolerance="0.05", warmup_max_s=120.0))
    assert digest == _tune.bench_digest(dict(bench, warmup_tolerance=None, warmup_max_s=""))
    assert digest != _tune.bench_digest(dict(bench, warmup_tolerance=0.02))
    assert digest != _tune.bench_digest(dict(bench, warmup_max_s=600))
    assert _tune.bench_digest(dict(bench, warmup_max_s="soon")) != digest  # refused by the module; never equal
    # a history labelled with the digest of before does not count as measured now
    old = _digest_before_0_4_0(bench)
    assert old != digest
    history = [record(1, repeat, 8, 100.0, digest=old) for repeat in (0, 1)]
    assert _tune.measured(history, "h", "sha256:a", old, 2)  # as it was
    assert _tune.measured(history, "h", "sha256:a", digest, 2) == []
    plan = _tune.plan_candidate(history, {}, "h", "sha256:a", digest, 2)
    assert plan["measure"] is True and plan["result"] is None


def record(run, repeat, concurrency, value, fingerprint="sha256:a", host="h", digest="bench:1"):
    return {"time": "2026-12-04T10:%02d:00Z" % run, "run": "r%d" % run, "host": host, "fingerprint": fingerprint,
            "concurrency": concurrency, "repeat": repeat, "output_throughput": value, "tpot_ms": 5.0,
            "labels": {"bench": digest, "repeat": repeat}}


def test_the_history_gives_the_newest_repeats_of_the_same_configuration_and_load():
    lines = [record(1, 0, 1, 10.0), record(1, 0, 8, 80.0), record(1, 1, 1, 11.0), record(1, 1, 8, 81.0),
             record(2, 0, 8, 90.0), record(2, 0, 1, 12.0),
             record(3, 0, 8, 999.0, fingerprint="sha256:other"), record(3, 1, 8, 999.0, digest="bench:2"),
             record(3, 2, 8, 999.0, host="g"), dict(record(3, 0, 8, 999.0), repeat=None)]
    text = "\n".join(json.dumps(line) for line in lines) + "\nnot json\n"
    history = _results_history.parse_history(text)
    assert len(history) == len(lines)
    got = _tune.measured(history, "h", "sha256:a", "bench:1", 2)
    assert [[lvl["output_throughput"] for lvl in repeat] for repeat in got] == [[11.0, 81.0], [12.0, 90.0]]
    assert _tune.measured(history, "h", "sha256:a", "bench:1", 4) == []
    summary = _compare.summarize(got)  # history records read as levels: a p50 kept as a plain number
    # the geometric mean of 81 and 90 (compare reads a variant on the log scale)
    assert summary[8]["output_throughput"]["median"] == pytest.approx((81.0 * 90.0) ** 0.5) and summary[8]["tpot_ms"]["median"] == 5.0


def test_the_winner_becomes_a_catalog_entry_with_its_figures():
    catalog = dict(CATALOG, **_tune.candidates(CATALOG, "nextn", {"speculative_num_steps": [1, 3]}))
    verdict = {"host": "h", "winner": "nextn+speculative_num_steps=3", "lines": ["compare h: winner ..."],
               "objective": {"metric": "output_throughput", "concurrency": 32},
               "summaries": {"nextn+speculative_num_steps=3": {32: {"output_throughput": {
                   "median": 142.0, "n": 3, "ci_low": 140.0, "ci_high": 145.0}}}}}
    text = _tune.tuned_entry("nextn", verdict, catalog)
    assert text.startswith("# tuned from nextn on h: output_throughput 142.0 at c=32, median of 3 [140.0, 145.0]\n")
    assert text.endswith("tuned-nextn:\n  extends: nextn\n  engine_args:\n    speculative_num_steps: 3\n")
    assert _tune.tuned_entry("nextn", dict(verdict, winner="nextn"), catalog) == "# tune nextn: nextn is not a candidate of nextn\n"
    assert _tune.tuned_entry("nextn", dict(verdict, winner=None), catalog) == "# tune nextn: no candidate won\n"


def test_each_candidate_is_measured_taken_from_the_history_or_skipped_as_failed_before():
    history = _results_history.parse_history("\n".join(json.dumps(record(1, r, 8, 80.0 + r)) for r in range(2)))
    key = _tune.failure_key("h", "sha256:a", "bench:1")
    assert key == "h sha256:a bench:1"
    taken = _tune.plan_candidate(history, {}, "h", "sha256:a", "bench:1", 2)
    assert taken["key"] == key and not taken["measure"]
    assert [[lvl["output_throughput"] for lvl in r] for r in taken["result"]["repeats"]] == [[80.0], [81.0]]
    # fresh measures it again, whatever the history holds
    assert _tune.plan_candidate(history, {}, "h", "sha256:a", "bench:1", 2, fresh=True) == {
        "key": key, "measure": True, "result": None}
    # too few repeats: measure; one that failed to start before: skipped with its reason, unless retried
    assert _tune.plan_candidate(history, {}, "h", "sha256:a", "bench:1", 3)["measure"]
    failed = _tune.plan_candidate(history, {key: "exited with code 2"}, "h", "sha256:a", "bench:1", 3)
    assert failed == {"key": key, "measure": False, "result": {
        "failed": "failed before, not retried (tune_retry_failed=true retries it): exited with code 2"}}
    assert _tune.plan_candidate(history, {key: "x"}, "h", "sha256:a", "bench:1", 3, retry_failed=True)["measure"]
    # the history wins over a failure recorded before (it was measured since)
    assert not _tune.plan_candidate(history, {key: "x"}, "h", "sha256:a", "bench:1", 2)["measure"]


def test_only_candidates_measured_now_that_failed_are_remembered():
    old = {"h f0 d": "exited with code 1"}
    rows = [{"variant": "b+x=1", "reason": "exited with code 2"}, {"variant": "b+x=2", "reason": "failed before"},
            {"variant": "b+x=3", "reason": "refused"}]
    keys = {"b+x=1": "h f1 d", "b+x=2": "h f2 d", "b+x=3": "h f3 d"}
    assert _tune.new_failures(old, rows, ["b+x=1", "b+x=3"], keys) == {
        "h f0 d": "exited with code 1", "h f1 d": "exited with code 2", "h f3 d": "refused"}
    assert old == {"h f0 d": "exited with code 1"}  # not changed in place
