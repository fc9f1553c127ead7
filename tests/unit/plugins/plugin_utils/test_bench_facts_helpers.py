# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the bench_facts helpers (plugin_utils/_results_*): aggregation, history, regressions, report, chart."""

from __future__ import annotations

import datetime
import json
import os
import sys

import pytest

from ansible_collections.inferops.serving.plugins.plugin_utils import (
    _results_charts, _results_collect, _results_common, _results_history, _results_regressions, _results_report, _results_run)
from ansible_collections.inferops.serving.plugins.plugin_utils import _compare as cmp

from bench_shapes import bench_result, level
from collection_meta import galaxy_version

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
LATER = NOW + datetime.timedelta(hours=1)
GPU = {"changed": False, "clean": True, "backend": "nvidia_smi", "waited_s": 0.2, "killed": [{"pid": 4242}],
       "gpus": [{"index": 0, "uuid": "GPU-0", "name": "NVIDIA H200", "memory_used_mib": 0,
                 "memory_total_mib": 143771, "processes": [], "clean": True, "health": {}}]}
SERVER = {"changed": True, "argv": ["python", "-m", "sglang.launch_server", "--tp", "1"], "pid": 77,
          "url": "http://127.0.0.1:30000", "fingerprint": "fp-srv", "variant": "eagle", "ready_s": 41.5}


def collect(*items):
    col = _results_collect.RunCollector()
    col.add_play("Bench")
    for host, action, result in items:
        col.add(host, action, "task", result)
    return col


# ---- classification and aggregation ---------------------------------------------------------

@pytest.mark.parametrize("action", ["throughput_bench", "inferops.serving.throughput_bench"])
def test_bench_results_are_known_by_action_name(action):
    assert _results_collect.classify(action, bench_result()) == "bench"


def test_async_status_results_are_known_by_shape_once_finished():
    result = dict(bench_result(), finished=True, started=True, ansible_job_id="1.2")
    assert _results_collect.classify("ansible.builtin.async_status", result) == "bench"
    assert _results_collect.classify("async_status", dict(result, finished=False)) is None
    assert _results_collect.classify("async_status", dict(GPU, finished=True)) == "gpu"
    assert _results_collect.classify("async_status", dict(SERVER, finished=True)) == "server"
    assert _results_collect.classify("async_status", {"finished": True, "results": [{"stdout": "x"}]}) is None


def test_other_actions_are_ignored():
    assert _results_collect.classify("ansible.builtin.debug", bench_result()) is None
    assert _results_collect.classify("ansible.builtin.command", {"rc": 0}) is None
    assert _results_collect.classify("throughput_bench", {"failed": True, "msg": "boom"}) is None


def test_collector_groups_by_host_and_takes_variant_from_labels():
    col = collect(("h1", "inferops.serving.gpu_idle_check", GPU),
                  ("h1", "inferops.serving.inference_server", SERVER),
                  ("h1", "inferops.serving.throughput_bench", bench_result(variant="eagle", fingerprint="fp-e")),
                  ("h2", "throughput_bench", bench_result(variant="base", fingerprint="fp-b")))
    assert col.order == ["h1", "h2"]
    assert col.hosts["h1"]["gpu_checks"][0]["killed"] == [{"pid": 4242}]
    assert col.hosts["h1"]["servers"][0]["argv"][2] == "sglang.launch_server"
    assert col.identity("h1", col.hosts["h1"]["benchmarks"][0]) == ("eagle", "fp-e")
    assert col.identity("h2", col.hosts["h2"]["benchmarks"][0]) == ("base", "fp-b")


def test_the_gpu_check_inside_an_inference_server_call_is_a_gpu_check_too():
    col = _results_collect.RunCollector()
    col.add("h", "inferops.serving.inference_server", "Serve eagle", dict(SERVER, gpu_check=GPU))
    col.add("h", "inference_server", "Stop", dict(SERVER, pid=None, gpu_check=dict(GPU, killed=[])))
    failed = dict(SERVER, failed=True, msg="GPUs not clean (sv was not started): GPU 0 is held", gpu_check=dict(GPU, clean=False))
    col.add("h", "inference_server", "Serve broken", failed, "failed")
    checks = col.hosts["h"]["gpu_checks"]
    assert [(c["task"], c["clean"], c["status"]) for c in checks] == [
        ("Serve eagle (gpu_check)", True, "ok"), ("Stop (gpu_check)", True, "ok"), ("Serve broken (gpu_check)", False, "failed")]
    assert checks[0]["killed"] == [{"pid": 4242}] and "msg" not in checks[0]
    assert checks[2]["msg"].startswith("GPUs not clean")
    assert [s["task"] for s in col.hosts["h"]["servers"]] == ["Serve eagle", "Serve broken"]  # a stop is no server


def test_variant_and_fingerprint_fall_back_to_the_server_result():
    result = bench_result()
    for lvl in result["results"]:
        lvl["labels"] = {}
    col = collect(("h", "inference_server", SERVER), ("h", "throughput_bench", result))
    assert col.identity("h", col.hosts["h"]["benchmarks"][0]) == ("eagle", "fp-srv")
    col = collect(("h", "throughput_bench", result))
    assert col.identity("h", col.hosts["h"]["benchmarks"][0]) == ("default", None)


def test_looped_task_results_are_split_into_items():
    looped = {"changed": False, "msg": "All items completed", "results": [
        dict(bench_result(variant="a"), item="a", ansible_loop_var="item"),
        dict(bench_result(variant="b"), item="b", ansible_loop_var="item")]}
    col = collect(("h", "throughput_bench", looped))
    assert [b["labels"]["variant"] for b in col.hosts["h"]["benchmarks"]] == ["a", "b"]


def test_history_records_one_per_host_variant_concurrency():
    col = collect(("h", "throughput_bench", bench_result((1, 8), variant="v", fingerprint="f",
                                                         acceptance_length=2.5)))
    recs = _results_history.history_records(col, NOW, "rid")
    assert [(r["host"], r["variant"], r["concurrency"]) for r in recs] == [("h", "v", 1), ("h", "v", 8)]
    rec = recs[0]
    assert rec["time"] == "2026-01-02T03:04:05Z" and rec["run"] == "rid" and rec["fingerprint"] == "f"
    assert rec["tpot_ms"] == pytest.approx(10.0)
    assert rec["ttft_ms"] == pytest.approx(50.0)
    assert rec["decode_tps_per_request"] == pytest.approx(100.0)
    assert rec["e2e_tps_per_request"] == pytest.approx(256 / 2.6)
    assert rec["acceptance_length"] == 2.5
    assert rec["output_throughput"] == pytest.approx(256 / 2.6)
    assert rec["tpot_ms_p99"] == pytest.approx(10.0)
    # room for what comes next: null until a benchmark reports them
    assert [rec[key] for key in ("instance", "resolved", "warmup_s", "steady")] == [None] * 4


def test_history_records_carry_the_instance_label_and_the_level_s_context():
    result = bench_result((1,), variant="v", fingerprint="f")
    result["results"][0].update(warmup_s=2.5, steady=True, resolved={"max_num_batched_tokens": 8192})
    for level in result["results"]:
        level.setdefault("labels", {})["instance"] = "r1"
    col = collect(("h", "throughput_bench", result))
    (rec,) = _results_history.history_records(col, NOW, "rid")
    assert (rec["instance"], rec["warmup_s"], rec["steady"]) == ("r1", 2.5, True)
    assert rec["resolved"] == {"max_num_batched_tokens": 8192} and "instance" not in rec.get("labels", {})


# ---- history ------------------------------------------------------------------------------

def test_history_append_and_read_back(tmp_path):
    path = str(tmp_path / "history.jsonl")
    _results_history.append_history(path, [{"host": "h", "variant": "v", "concurrency": 1, "output_throughput": 1.0}])
    _results_history.append_history(path, [{"host": "h", "variant": "v", "concurrency": 1, "output_throughput": 2.0}])
    lines = open(path).read().splitlines()
    assert len(lines) == 2 and all(json.loads(line) for line in lines)
    records, skipped = _results_history.read_history(path)
    assert [r["output_throughput"] for r in records] == [1.0, 2.0] and skipped == 0


def test_history_tolerates_corrupt_lines(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text('{"host": "h", "variant": "v", "concurrency": 1}\n{"host": "h", "varia\n\n[1, 2]\n'
                    '{"host": "h", "variant": "v", "concurrency": 2}\n')
    records, skipped = _results_history.read_history(str(path))
    assert [r["concurrency"] for r in records] == [1, 2] and skipped == 2


def test_missing_history_is_empty(tmp_path):
    assert _results_history.read_history(str(tmp_path / "none.jsonl")) == ([], 0)


def test_previous_levels_is_the_last_run_per_key():
    history = [{"host": "h", "variant": "v", "concurrency": 1, "run": "r1", "output_throughput": 1.0},
               {"host": "h", "variant": "v", "concurrency": 1, "run": "r2", "output_throughput": 2.0},
               {"host": "h", "variant": "w", "concurrency": 1, "run": "r2", "output_throughput": 9.0}]
    prev = _results_history.previous_levels(history)
    assert prev[("h", None, "v", 1)]["run"] == "r2" and prev[("h", None, "w", 1)]["output_throughput"] == 9.0


# ---- regressions --------------------------------------------------------------------------

def rec(tput, tpot, conc=1, variant="v", host="h", fp="f"):
    return {"host": host, "variant": variant, "concurrency": conc, "output_throughput": tput, "tpot_ms": tpot,
            "fingerprint": fp, "run": "r"}


def test_no_history_flags_nothing():
    assert _results_regressions.find_regressions([rec(100.0, 10.0)], [], 10) == []


def test_drop_in_throughput_beyond_threshold_is_flagged():
    prev = [dict(rec(100.0, 10.0), run="r0")]
    found = _results_regressions.find_regressions([rec(89.0, 10.0)], prev, 10)
    assert [(r["metric"], r["before"], r["after"]) for r in found] == [("output_throughput", 100.0, 89.0)]
    assert found[0]["confirmed"] is False and found[0]["n"] == 1  # one run before: unconfirmed
    assert _results_regressions.find_regressions([rec(91.0, 10.0)], prev, 10) == []
    assert _results_regressions.find_regressions([rec(150.0, 5.0)], prev, 10) == []  # faster is not a regression


def test_rise_in_tpot_beyond_threshold_is_flagged():
    prev = [dict(rec(100.0, 10.0), run="r0")]
    found = _results_regressions.find_regressions([rec(100.0, 11.5)], prev, 10)
    assert [r["metric"] for r in found] == ["tpot_ms"] and found[0]["change_pct"] == 15.0
    assert _results_regressions.find_regressions([rec(100.0, 10.9)], prev, 10) == []


def test_regressions_compare_only_the_same_host_variant_concurrency():
    prev = [dict(rec(100.0, 10.0), run="r0")]
    assert _results_regressions.find_regressions([rec(10.0, 99.0, conc=2), rec(10.0, 99.0, variant="w"),
                                                  rec(10.0, 99.0, host="g")], prev, 10) == []


def test_regression_lines_one_per_level_with_before_and_after():
    prev = [dict(rec(100.0, 10.0, conc=4), fingerprint="old", run="r0")]
    lines = _results_regressions.regression_lines(_results_regressions.find_regressions([rec(50.0, 20.0, conc=4, fp="new")], prev, 10))
    assert len(lines) == 1
    line = lines[0]
    assert line.startswith("REGRESSION: host h, variant v, concurrency 4: ")
    assert "output throughput 100.0 \u2192 50.0 tok/s (-50.0 %; window geometric mean of N=1 run(s))" in line
    assert "TPOT p50 10.00 \u2192 20.00 ms (+100.0 %; window geometric mean of N=1 run(s))" in line
    assert "[unconfirmed: 1 run(s) in the window, 3 needed]" in line
    assert "[fingerprint old \u2192 new from run r]" in line and "[last run of the window r0]" in line


# ---- summary, report, chart ----------------------------------------------------------------

def two_variant_run():
    return collect(("h", "gpu_idle_check", GPU), ("h", "inference_server", SERVER),
                   ("h", "throughput_bench", bench_result((1, 4), variant="base", fingerprint="fb")),
                   ("h", "throughput_bench", bench_result((1, 4), variant="eagle", fingerprint="fe", step_ms=5.0,
                                                          acceptance_length=2.0)))


def test_summary_shows_speedup_against_the_previous_variant():
    col = two_variant_run()
    recs = _results_history.history_records(col, NOW, "r")
    lines = _results_report.summary_lines(recs, {}, [])
    eagle = [line for line in lines if line.strip().startswith("eagle")]
    # half the step, same TTFT: (50 + 255 * 10) / (50 + 255 * 5) = 1.96x
    assert len(eagle) == 2 and all(line.split()[-2] == "1.96×" for line in eagle)
    assert lines[-1].startswith("bench_facts: no regression")


def test_report_has_a_table_per_host_speedups_and_gpu_check():
    col = two_variant_run()
    recs = _results_history.history_records(col, NOW, "r")
    run = _results_run.run_document(col, "r", NOW, "/p/bench.yml", "2.19.14", 10.0, [])
    report = _results_report.render_report(run, recs, {}, [], 10.0, chart="r.png")
    assert "## h" in report
    assert "| eagle | `fe` | 1 |" in report and "| 1.96× | first run |" in report
    assert "| eagle | base |" in report and "| base | eagle |" in report
    assert "GPU check (task): clean, 1 GPU(s): 0 NVIDIA H200, killed 1 (4242)" in report
    assert "fingerprint `fp-srv`, ready in 41.50 s" in report
    assert "![output throughput" in report and "(r.png)" in report


def test_report_shows_the_previous_run_and_regressions():
    col = collect(("h", "throughput_bench", bench_result((1,), variant="v", fingerprint="f", step_ms=20.0)))
    recs = _results_history.history_records(col, LATER, "r2")
    history = [dict(rec(98.46, 10.0), run="r1")]
    prev = _results_history.previous_levels(history)
    regs = _results_regressions.find_regressions(recs, history, 10)
    run = _results_run.run_document(col, "r2", LATER, "bench.yml", "2.19.14", 10.0, regs)
    report = _results_report.render_report(run, recs, prev, regs, 10.0)
    assert "## Regressions" in report and "- REGRESSION: host h, variant v, concurrency 1" in report
    assert "| 0.50× |" in report


def test_run_document_carries_everything():
    col = two_variant_run()
    run = _results_run.run_document(col, "r", NOW, "/p/bench.yml", "2.19.14", 10.0, [])
    assert run["variants"] == ["base", "eagle"] and run["fingerprints"] == {"base": ["fb"], "eagle": ["fe"]}
    assert run["plays"] == ["Bench"] and run["ansible_version"] == "2.19.14"
    assert run["collection_version"] == _results_run.collection_version() == galaxy_version()
    host = run["hosts"]["h"]
    assert host["gpu_checks"][0]["gpus"][0]["name"] == "NVIDIA H200"
    assert host["servers"][0]["ready_s"] == 41.5
    assert [len(b["levels"]) for b in host["benchmarks"]] == [2, 2]
    json.dumps(run)


def test_chart_is_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    recs = _results_history.history_records(two_variant_run(), NOW, "r")
    path = str(tmp_path / "c.png")
    assert _results_charts.render_chart(path, recs) is None
    with open(path, "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"


def test_chart_without_matplotlib_says_why(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    recs = _results_history.history_records(two_variant_run(), NOW, "r")
    assert "matplotlib" in _results_charts.render_chart(str(tmp_path / "c.png"), recs)
    assert not os.path.exists(str(tmp_path / "c.png"))


# ---- finish: the whole end-of-play step ----------------------------------------------------

def test_finish_writes_run_history_report_chart_then_flags_a_slower_second_run(tmp_path):
    pytest.importorskip("matplotlib")
    out_dir = str(tmp_path / "results")
    first = _results_run.finish(collect(("h", "throughput_bench", bench_result())), out_dir, "/x/bench.yml", "2.19", 10, NOW)
    assert first.regressions == [] and first.warnings == []
    assert sorted(first.paths) == ["chart", "history", "report", "run"]
    assert os.path.basename(first.paths["run"]) == "20260102T030405Z-bench.json"
    second = _results_run.finish(collect(("h", "throughput_bench", bench_result(step_ms=20.0))), out_dir, "/x/bench.yml",
                                 "2.19", 10, LATER)
    assert len(second.regressions) == 6  # 3 levels x (throughput, TPOT)
    assert sum(1 for line in second.summary if line.startswith("REGRESSION:")) == 3
    assert len(open(os.path.join(out_dir, "history.jsonl")).read().splitlines()) == 6
    with open(second.paths["run"]) as handle:
        assert len(json.load(handle)["regressions"]) == 6


def test_finish_in_the_same_second_does_not_overwrite(tmp_path):
    out_dir = str(tmp_path)
    a = _results_run.finish(collect(("h", "throughput_bench", bench_result())), out_dir, "b.yml", "2.19", 10, NOW)
    b = _results_run.finish(collect(("h", "throughput_bench", bench_result())), out_dir, "b.yml", "2.19", 10, NOW)
    assert a.paths["run"] != b.paths["run"] and b.run["run"].endswith("-2")


def test_finish_with_an_unwritable_dir_warns_once_and_still_summarises(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = _results_run.finish(collect(("h", "throughput_bench", bench_result())), str(blocker / "results"), "b.yml",
                              "2.19", 10, NOW)
    assert len(out.warnings) == 1 and "cannot write results" in out.warnings[0]
    assert out.paths == {} and out.summary and "# Benchmark run" in out.report


def test_bench_summary_rows_for_set_stats():
    rows = _results_history.bench_summary(dict(bench_result((1, 4), variant="v", fingerprint="f"), finished=True), "h")
    assert [(r["host"], r["variant"], r["concurrency"]) for r in rows] == [("h", "v", 1), ("h", "v", 4)]
    assert rows[0]["tpot_ms"] == pytest.approx(10.0) and "time" not in rows[0]
    assert "host" not in _results_history.bench_summary(bench_result((1,)))[0]
    assert _results_history.bench_summary({"rc": 0}) == []


def test_stops_and_plans_that_would_start_are_not_servers():
    stop = {"changed": True, "argv": ["x"], "pid": None, "ready_s": None, "fingerprint": "sha256:old", "variant": "a"}
    plan = {"changed": True, "argv": ["y"], "pid": None, "ready_s": None, "fingerprint": "sha256:new", "variant": "b"}
    col = collect(("h", "inference_server", stop), ("h", "inference_server", plan), ("h", "inference_server", SERVER))
    assert [s["fingerprint"] for s in col.hosts["h"]["servers"]] == [SERVER["fingerprint"]]


# ---- repeats and variant comparisons (playbooks/compare.yml) --------------------------------

def repeat_result(repeat, variant="base", compare="cmp-1", **kwargs):
    """A throughput_bench result of one repeat of a comparison: its labels carry repeat and compare."""
    result = bench_result((1, 4), variant=variant, fingerprint="fp-" + variant, **kwargs)
    for item in result["results"]:
        item["labels"].update(repeat=repeat, compare=compare)
    return result


def test_history_gives_each_repeat_its_own_lines_with_its_index():
    col = collect(("h", "throughput_bench", repeat_result(0)), ("h", "throughput_bench", repeat_result(1)),
                  ("h", "throughput_bench", bench_result((1,), variant="plain")))
    recs = _results_history.history_records(col, NOW, "r")
    assert [(r["variant"], r["concurrency"], r["repeat"]) for r in recs] == [
        ("base", 1, 0), ("base", 4, 0), ("base", 1, 1), ("base", 4, 1), ("plain", 1, None)]
    assert recs[2]["labels"] == {"repeat": 1, "compare": "cmp-1"}  # the labels stay as they were
    assert "labels" not in recs[4]
    assert [json.loads(json.dumps(r))["repeat"] for r in recs] == [0, 0, 1, 1, None]


def test_one_call_with_repeats_is_one_benchmark_per_repeat_and_ratios_take_the_geometric_means():
    # throughput_bench repeats=3 returns every repeat's levels in one result, each labelled with its repeat
    result = bench_result((1, 4), variant="base", fingerprint="fp-base")
    levels = []
    for repeat, scale in enumerate((1.0, 3.0, 2.0)):
        for item in json.loads(json.dumps(result["results"])):
            item["labels"]["repeat"] = repeat
            item["output_throughput"] *= scale
            levels.append(item)
    col = collect(("h", "throughput_bench", dict(result, results=levels)),
                  ("h", "throughput_bench", bench_result((1, 4), variant="other", fingerprint="fp-o")))
    benches = col.hosts["h"]["benchmarks"]
    assert [(b["labels"].get("variant"), b["labels"].get("repeat"), len(b["levels"])) for b in benches] == [
        ("base", 0, 2), ("base", 1, 2), ("base", 2, 2), ("other", None, 2)]
    recs = _results_history.history_records(col, NOW, "r")
    assert [r["repeat"] for r in recs] == [0, 0, 1, 1, 2, 2, None, None]
    index = _results_report._index(recs)  # pylint: disable=protected-access
    one = result["results"][0]["output_throughput"]
    # the verdict's figure: the geometric mean of x1, x3, x2 (the median, x2, it was before)
    assert index[("base", 1)]["output_throughput"] == pytest.approx(6.0 ** (1.0 / 3.0) * one)


def test_the_same_engine_reported_twice_is_one_server():
    loading = dict(SERVER, ready_s=None)  # the start's first call, while the model loads
    kept = dict(SERVER, changed=False, ready_s=0.01)  # a later call that found it serving
    other = dict(SERVER, pid=78, ready_s=12.0)
    col = collect(("h", "inference_server", loading), ("h", "async_status", dict(SERVER, finished=1)),
                  ("h", "inference_server", kept), ("h", "inference_server", other))
    assert [(s["pid"], s["ready_s"]) for s in col.hosts["h"]["servers"]] == [(77, 41.5), (78, 12.0)]


@pytest.mark.parametrize("value, index", [(0, 0), (3, 3), ("2", 2), (" 1 ", 1), (None, None), ("x", None),
                                          (True, None), (1.5, None), ("-1", None)])
def test_repeat_index_from_a_label(value, index):
    assert _results_common.repeat_index(value) == index


def _repeats(step_ms_list, concs=(1, 4), ttft_ms=50.0):
    """A repeat per step: throughput_bench levels without an SLO (goodput null), so the objective is throughput."""
    return [[dict(level(c, step_ms=step, ttft_ms=ttft_ms), goodput=None) for c in concs] for step in step_ms_list]


def verdict(host, faster=True):
    """A compare_variants verdict: base, nextn (about twice as fast when faster), broken (failed)."""
    results = {"base": {"repeats": _repeats((10.0, 10.2, 9.9))},
               "nextn": {"repeats": _repeats((5.0, 5.1, 4.9) if faster else (10.1, 9.8, 10.0))},
               "broken": {"failed": "engine exited 1 before ready", "log_tail": ["CUDA out of memory"]}}
    return cmp.compare(host, results, ["base", "nextn", "broken"])


def fake_custom(*hosts):
    """AggregateStats.custom after set_stats(data={inferops_compare: {host: verdict}}, per_host=false,
    aggregate=true) on each host: the dicts merged under _run, beside another published stat."""
    return {"_run": {_results_collect.COMPARE_STAT: dict((h, verdict(h, faster=(h == hosts[0]))) for h in hosts),
                     "inferops_benchmark_results": [{"host": hosts[0]}]}}


def test_compare_verdicts_reads_the_published_stat_in_host_order():
    custom = fake_custom("h1", "h2")
    assert [h for h, _v in _results_collect.compare_verdicts(custom, ["h2", "h1"])] == ["h2", "h1"]
    assert [h for h, _v in _results_collect.compare_verdicts(custom)] == ["h1", "h2"]
    per_host = {"h3": {_results_collect.COMPARE_STAT: {"h3": verdict("h3")}}}
    assert [h for h, _v in _results_collect.compare_verdicts(per_host, ["h1"])] == ["h3"]
    assert _results_collect.compare_verdicts({}) == [] and _results_collect.compare_verdicts(None) == []
    assert _results_collect.compare_verdicts({"_run": {_results_collect.COMPARE_STAT: {"h": "not a verdict", "g": {"x": 1}}}}) == []


def test_run_document_gains_the_comparison_of_every_host():
    col = collect(("h1", "throughput_bench", repeat_result(0)), ("h2", "throughput_bench", repeat_result(0)))
    verdicts = _results_collect.compare_verdicts(fake_custom("h1", "h2"), col.order)
    run = _results_run.run_document(col, "r", NOW, "/p/compare.yml", "2.19.14", 10.0, [], verdicts)
    assert set(run["compare"]) == {"h1", "h2"}
    assert run["compare"]["h1"]["reference"] == "base" and run["compare"]["h1"]["winner"] == "nextn"
    assert run["compare"]["h1"]["objective"] == {"metric": "output_throughput", "concurrency": 4}
    # the ratio of the geometric means of 1 / (50 + 255 * step): 1.97 (of the medians it was 1.96)
    assert run["compare"]["h1"]["lines"][0].startswith("compare h1: nextn vs base at c=4: output \u00d71.97 [")
    assert run["compare"]["h2"]["lines"][-1].startswith("compare h2: winner ")
    rows = [(r["host"], r["variant"], r["concurrency"], r["metric"]) for r in run["comparisons"]]
    assert rows[0] == ("h1", "nextn", 1, "output_throughput")
    assert set(r[0] for r in rows) == {"h1", "h2"} and len(rows) == 2 * 2 * 4  # hosts x levels x metrics measured
    fast = [r for r in run["comparisons"] if r["host"] == "h1" and r["metric"] == "output_throughput"]
    assert all(r["significant"] and r["ci_low"] <= r["ratio"] <= r["ci_high"] and r["ratio"] > 1.8 for r in fast)
    assert all(r["repeats"] == {"baseline": 3, "variant": 3} and r["baseline"] == "base" for r in run["comparisons"])
    same = [r for r in run["comparisons"] if r["host"] == "h2" and r["metric"] == "output_throughput"]
    assert not any(r["significant"] for r in same)
    assert [(f["host"], f["variant"], f["reason"]) for f in run["failed_variants"]] == [
        ("h1", "broken", "engine exited 1 before ready"), ("h2", "broken", "engine exited 1 before ready")]
    json.loads(json.dumps(run))
    plain = _results_run.run_document(col, "r", NOW, "/p/bench.yml", "2.19.14", 10.0, [])
    assert not set(plain) & {"comparisons", "failed_variants", "compare"}


def test_report_has_a_comparison_section_with_the_verdicts_and_the_tables():
    col = collect(("h1", "throughput_bench", repeat_result(0)))
    verdicts = _results_collect.compare_verdicts(fake_custom("h1", "h2"), col.order)
    recs = _results_history.history_records(col, NOW, "r")
    run = _results_run.run_document(col, "r", NOW, "/p/compare.yml", "2.19.14", 10.0, [], verdicts)
    report = _results_report.render_report(run, recs, {}, [], 10.0, compare=verdicts, compare_chart="r-compare.png")
    section = report[report.index("## Comparison"):report.index("\n## h1\n")]
    assert section.index("### h1") < section.index("### h2")
    h1 = section[section.index("### h1"):section.index("### h2")]
    assert "\n- compare h1: nextn vs base at c=4: output \u00d71.97 [" in h1 and "significant\n" in h1
    assert "- compare h1: broken failed: engine exited 1 before ready" in h1
    assert "- compare h1: winner nextn (output " in h1
    assert "| concurrency | variant | output tok/s |" in h1 and "| 4 | nextn |" in h1 and " *" in h1
    assert "- broken failed: engine exited 1 before ready" in h1  # markdown_table's list of failures
    assert [line for line in section.splitlines() if line.startswith("#")] == ["## Comparison", "### h1", "### h2"]
    assert "(r-compare.png)" in section
    without = _results_report.render_report(_results_run.run_document(col, "r", NOW, "b.yml", "2.19", 10.0, []), recs, {}, [], 10.0)
    assert "Comparison" not in without


def test_a_malformed_verdict_costs_only_its_table():
    lines = _results_report.comparison_section([("h", {"lines": ["compare h: no winner (every variant failed)"]})])
    assert lines[:4] == ["## Comparison", "", "### h", ""] and "- compare h: no winner (every variant failed)" in lines
    assert any(line.startswith("(no table for this verdict") for line in lines)


def test_compare_series_reads_the_summaries_and_skips_what_is_missing():
    one = verdict("h1")
    series = _results_charts.compare_series([("h1", one)])
    assert [label for label, _points in series] == ["base", "nextn"]  # the failed variant has no summary
    base = series[0][1]
    assert [p["concurrency"] for p in base] == [1, 4]
    median, low, high = base[1]["output_throughput"]
    assert low <= median <= high and median == one["summaries"]["base"][4]["output_throughput"]["median"]
    assert base[0]["tpot_ms"][0] == pytest.approx((10.0 * 10.2 * 9.9) ** (1.0 / 3.0))  # the steps' geometric mean
    # keys that went through JSON, a missing TPOT, a level that is not a number
    mangled = {"host": "h2", "summaries": {"v": {"8": {"output_throughput": {"median": 80.0}}, "2": {},
                                                 "x": {"output_throughput": {"median": 1.0}}}}}
    (label, points), = _results_charts.compare_series([("h2", mangled)])
    assert label == "v" and [(p["concurrency"], p["output_throughput"], p["tpot_ms"]) for p in points] == [
        (2, None, None), (8, (80.0, 80.0, 80.0), None)]
    labels = [label for label, _points in _results_charts.compare_series([("h1", one), ("h2", mangled)])]
    assert labels == ["h1/base", "h1/nextn", "h2/v"]


def test_compare_chart_is_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = str(tmp_path / "c.png")
    assert _results_charts.render_compare_chart(path, _results_collect.compare_verdicts(fake_custom("h1", "h2"))) is None
    with open(path, "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    assert _results_charts.render_compare_chart(str(tmp_path / "none.png"), [("h", {"summaries": {}})]) == \
        "no compared output throughput to plot"
    assert not os.path.exists(str(tmp_path / "none.png"))


def test_finish_with_a_comparison_writes_it_even_without_benchmarks(tmp_path):
    pytest.importorskip("matplotlib")
    verdicts = _results_collect.compare_verdicts(fake_custom("h1"))
    out = _results_run.finish(_results_collect.RunCollector(), str(tmp_path), "/x/compare.yml", "2.19", 10, NOW, compare=verdicts)
    assert sorted(out.paths) == ["compare_chart", "report", "run"] and out.warnings == []
    assert os.path.basename(out.paths["compare_chart"]) == "20260102T030405Z-compare-compare.png"
    with open(out.paths["run"]) as handle:
        doc = json.load(handle)
    assert doc["compare"]["h1"]["winner"] == "nextn" and doc["failed_variants"][0]["log_tail"] == ["CUDA out of memory"]
    assert doc["comparisons"][0]["concurrency"] == 1
    assert "## Comparison" in out.report and "20260102T030405Z-compare-compare.png" in out.report


def test_replicas_are_compared_each_with_itself_never_with_another():
    r0 = dict(rec(100.0, 10.0), instance="r0")
    history = [dict(r0, run="r1"), dict(rec(10.0, 50.0), instance="r1", run="r1")]
    prev = _results_history.previous_levels(history)
    assert sorted(prev) == [("h", "r0", "v", 1), ("h", "r1", "v", 1)]
    prev = history
    # r0 as fast as before: no regression, although r1 was slower before and r0 is slower than r1 was
    assert _results_regressions.find_regressions([dict(r0, run="r2")], prev, 10) == []
    slow = _results_regressions.find_regressions([dict(rec(50.0, 10.0), instance="r1", run="r2")], prev, 10)
    assert slow == []  # r1 got faster (10 -> 50 tok/s)
    worse = _results_regressions.find_regressions([dict(rec(80.0, 10.0), instance="r0", run="r2")], prev, 10)
    assert [(r["instance"], r["before"], r["after"]) for r in worse] == [("r0", 100.0, 80.0)]
    assert _results_regressions.regression_lines(worse)[0].startswith("REGRESSION: host h instance r0, variant v,")
    # a host's single server (no instance) is not the replica r0
    assert _results_regressions.find_regressions([rec(1.0, 99.0)], prev, 10) == []


def test_replicas_of_one_host_each_get_their_own_rows():
    def replica(instance, step_ms):
        result = bench_result((1,), variant="v", fingerprint="f" + instance, step_ms=step_ms)
        for lvl in result["results"]:
            lvl["labels"] = dict(lvl["labels"], instance=instance)
        return result
    col = collect(("h", "throughput_bench", replica("r0", 10.0)), ("h", "throughput_bench", replica("r1", 20.0)))
    recs = _results_history.history_records(col, NOW, "r")
    assert sorted((r["instance"], r["fingerprint"]) for r in recs) == [("r0", "fr0"), ("r1", "fr1")]
    lines = _results_report.summary_lines(recs, {}, [])
    assert "bench_facts: h instance r0" in lines and "bench_facts: h instance r1" in lines
    run = _results_run.run_document(col, "r", NOW, "/p/bench.yml", "2.19.14", 10.0, [])
    report = _results_report.render_report(run, recs, {}, [], 10.0)
    r0, r1 = report.index("### instance r0"), report.index("### instance r1")
    assert "`fr0`" in report[r0:r1] and "`fr1`" not in report[r0:r1] and "`fr1`" in report[r1:]
