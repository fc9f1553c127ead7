# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""bench_facts in real ansible-playbook runs on localhost.

Two paths bring benchmark results to the callback:
- a recorded throughput_bench result collected with the real ansible.builtin.async_status (the way
  the benchmark role collects an async run): the job file holds the figures a timing-exact server
  gives (tests/support/bench_shapes.py), so the callback's async path, files and exit status are
  tested end to end now;
- the real inferops.serving.throughput_bench module against the timing-exact stand-in server
  (skipped until both are in the tree; see start_standin and BENCH_ARGS below).
"""

from __future__ import annotations

import glob
import importlib
import json
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUPPORT = os.path.join(ROOT, "tests", "support")
sys.path.insert(0, SUPPORT)
from bench_shapes import bench_result, level  # noqa: E402
from collection_meta import galaxy_version  # noqa: E402

CALLBACKS = "record,inferops.serving.bench_facts"

REPLAY_PLAY = """
- name: Bench replay
  hosts: serving
  gather_facts: false
  tasks:
    - name: Check GPUs
      inferops.serving.gpu_idle_check:
        require_gpus: false
    - name: Collect the benchmark job
      ansible.builtin.async_status:
        jid: "{{ jid }}"
      register: bench_job
      until: bench_job.finished
      retries: 3
      delay: 1
"""


@pytest.fixture
def replay(run_playbook, tmp_path):
    """replay(result, **env) -> PlaybookRun: collect `result` as a finished async job."""
    async_dir = tmp_path / "async"
    async_dir.mkdir()
    results = tmp_path / "results"

    def run(result, extra_env=None, results_dir=None, extra_vars=None):
        jid = "bench%d" % time.monotonic_ns()
        (async_dir / jid).write_text(json.dumps(result))
        env = {"ANSIBLE_CALLBACKS_ENABLED": CALLBACKS, "ANSIBLE_ASYNC_DIR": str(async_dir),
               "INFEROPS_RESULTS_DIR": str(results_dir or results)}
        env.update(extra_env or {})
        return run_playbook(REPLAY_PLAY, extra_vars=dict(extra_vars or {}, jid=jid), env=env)
    run.results = results
    return run


def regressions(run):
    return [line for line in run.stdout.splitlines() if line.startswith("REGRESSION:")]


def test_gpu_check_only_run_writes_the_run_file(run_playbook, tmp_path):
    play = """
- name: GPU check
  hosts: serving
  gather_facts: false
  tasks:
    - name: Check GPUs
      inferops.serving.gpu_idle_check:
        require_gpus: false
"""
    results = tmp_path / "results"
    run = run_playbook(play, env={"ANSIBLE_CALLBACKS_ENABLED": CALLBACKS, "INFEROPS_RESULTS_DIR": str(results)})
    assert run.rc == 0, run.stdout + run.stderr
    (run_file,) = glob.glob(str(results / "*-play-*.json"))
    doc = json.load(open(run_file))
    check = doc["hosts"]["localhost"]["gpu_checks"][0]
    assert check["clean"] is True and check["gpus"] == [] and check["task"] == "Check GPUs"
    assert doc["plays"] == ["GPU check"] and doc["ansible_version"] and doc["collection_version"] == galaxy_version()
    assert not (results / "history.jsonl").exists()  # no benchmark, no history line
    (report,) = glob.glob(str(results / "*.md"))
    assert "GPU check (Check GPUs): clean, 0 GPU(s)" in open(report).read()


def test_second_run_twice_slower_is_flagged(replay):
    pytest.importorskip("matplotlib")
    first = replay(bench_result(step_ms=10.0, ttft_ms=50.0))
    assert first.rc == 0, first.stdout + first.stderr
    assert regressions(first) == []
    assert "bench_facts: no regression" in first.stdout
    second = replay(bench_result(step_ms=20.0, ttft_ms=50.0))
    assert second.rc == 0, second.stdout + second.stderr  # fail_on_regression is off by default
    flagged = regressions(second)
    assert [line.split(":")[1] for line in flagged] == [
        " host localhost, variant baseline, concurrency %d" % c for c in (1, 4, 16)]
    assert "output throughput 98.5 \u2192 49.7 tok/s" in flagged[0]
    assert "TPOT p50 10.00 \u2192 20.00 ms (+100.0 %; window geometric mean of N=1 run(s))" in flagged[0]
    assert all(line.endswith("[unconfirmed: 1 run(s) in the window, 3 needed] [last run of the window %s]"
                             % json.loads((replay.results / "history.jsonl").read_text().splitlines()[0])["run"])
               for line in flagged)
    history = (replay.results / "history.jsonl").read_text().splitlines()
    assert len(history) == 6
    assert [json.loads(h)["tpot_ms"] for h in history] == [10.0] * 3 + [20.0] * 3
    assert len(glob.glob(str(replay.results / "*.json"))) == 2
    charts = sorted(glob.glob(str(replay.results / "*.png")))
    reports = sorted(glob.glob(str(replay.results / "*.md")))
    assert len(charts) == 2 and len(reports) == 2
    assert open(charts[1], "rb").read(4) == b"\x89PNG"
    text = open(reports[1]).read()
    assert "## Regressions" in text and "| 0.50× |" in text and os.path.basename(charts[1]) in text


@pytest.mark.timeout(600)  # nine replays of a playbook: minutes on a loaded 2-core machine
def test_fail_on_regression_counts_confirmed_regressions_and_an_ack_restarts_the_window(replay):
    fail = {"INFEROPS_FAIL_ON_REGRESSION": "true"}
    assert replay(bench_result()).rc == 0
    # one run in the window: unconfirmed, so the run passes, unless fail_on_unconfirmed is set
    unconfirmed = replay(bench_result(step_ms=20.0), extra_env=fail)
    assert unconfirmed.rc == 0, unconfirmed.stdout + unconfirmed.stderr
    assert len(regressions(unconfirmed)) == 3 and all("[unconfirmed: 1 run(s)" in line for line in regressions(unconfirmed))
    strict = replay(bench_result(step_ms=20.0), extra_env=dict(fail, INFEROPS_FAIL_ON_UNCONFIRMED="true"))
    assert strict.rc == 1 and "[unconfirmed: 2 run(s)" in regressions(strict)[0], strict.stdout + strict.stderr
    assert "6 regression(s) and fail_on_regression is set: exiting 1" in strict.stderr  # 3 levels x 2 metrics
    # three steady runs: a window of 3 (INFEROPS_REGRESSION_WINDOW) holds only them, and the slow run is confirmed
    window = {"INFEROPS_REGRESSION_WINDOW": "3"}
    for step in (10.4, 9.6, 10.0):
        assert replay(bench_result(step_ms=step), extra_env=window).rc == 0
    slow = replay(bench_result(step_ms=25.0), extra_env=dict(fail, **window))
    assert slow.rc == 1, slow.stdout + slow.stderr
    flagged = regressions(slow)
    assert len(flagged) == 3 and not any("unconfirmed" in line for line in flagged)
    # 3 levels x 2 metrics judged: each interval is the 1 - 0.05 / 6 one
    assert all("window geometric mean of N=3 run(s), 99.17 % prediction interval [" in line for line in flagged)
    print("\n".join(flagged))
    assert "PLAY RECAP" in slow.stdout and slow.recap()["failed"] == 0
    assert "6 confirmed regression(s) and fail_on_regression is set: exiting 1" in slow.stderr
    # acknowledged (-e regression_ack=all): the window restarts with this run, which passes, and the history says so
    acked = replay(bench_result(step_ms=25.0), extra_env=dict(fail, **window), extra_vars={"regression_ack": "all"})
    assert acked.rc == 0 and regressions(acked) == [], acked.stdout + acked.stderr
    assert "bench_facts: regression_ack all: the regression window" in acked.stdout
    lines = [json.loads(line) for line in (replay.results / "history.jsonl").read_text().splitlines()]
    assert [line["ack"] for line in lines if "ack" in line] == ["all"]
    assert len(lines) == 8 * 3 + 1
    # a run as slow as the acknowledged one passes with the option on
    same = replay(bench_result(step_ms=25.0), extra_env=dict(fail, **window))
    assert same.rc == 0 and regressions(same) == []


def test_threshold_option_from_the_environment(replay):
    replay(bench_result(step_ms=10.0))
    slower = replay(bench_result(step_ms=10.5), extra_env={"INFEROPS_REGRESSION_THRESHOLD": "3"})
    assert len(regressions(slower)) == 3  # +5 % TPOT beyond 3 %
    again = replay(bench_result(step_ms=11.0))
    assert regressions(again) == []  # +4.8 % is within the default 10 %


def test_unwritable_results_dir_warns_once_and_keeps_the_play(replay, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the results directory should be")
    run = replay(bench_result(), results_dir=blocker / "results",
                 extra_env={"INFEROPS_FAIL_ON_REGRESSION": "true"})
    assert run.rc == 0, run.stdout + run.stderr
    both = run.stdout + run.stderr
    assert both.count("bench_facts: cannot write results") == 1
    assert "bench_facts: localhost" in run.stdout  # the summary is still printed
    assert run.recap()["ok"] == 2


def test_default_results_dir_is_beside_the_playbook(run_playbook, tmp_path):
    async_dir = tmp_path / "async"
    async_dir.mkdir()
    (async_dir / "job").write_text(json.dumps(bench_result()))
    book = tmp_path / "books" / "bench.yml"
    book.parent.mkdir()
    book.write_text(REPLAY_PLAY)
    env = {"ANSIBLE_CALLBACKS_ENABLED": CALLBACKS, "ANSIBLE_ASYNC_DIR": str(async_dir)}
    env_clean = dict(env)
    run = run_playbook(str(book), extra_vars={"jid": "job"}, env=env_clean)
    assert run.rc == 0, run.stdout + run.stderr
    assert (tmp_path / "books" / "results" / "history.jsonl").exists()
    assert glob.glob(str(tmp_path / "books" / "results" / "*-bench.json"))


# ---- the real benchmark module against the timing-exact stand-in server ---------------------
# tests/support/stream_server.py (issue 4): first chunk TTFT after the request, then one chunk of k
# tokens every step ms; its own process, so its event loop is not the client's.

THROUGHPUT_BENCH = os.path.join(ROOT, "plugins", "modules", "throughput_bench.py")
STANDIN_MODULES = ("stream_server",)
BENCH_ARGS = {"concurrency": [1, 4], "requests_per_level": 4, "output_tokens": 32, "input_tokens": 32,
              "ignore_eos": True}


def _launch(module, port, step_ms, ttft_ms, k):
    """Start the stand-in as its own process (own event loop): python tests/support/<module>.py --port ..."""
    argv = [sys.executable, os.path.join(SUPPORT, module.replace(".", os.sep) + ".py"), "--port", str(port),
            "--step-ms", str(step_ms), "--ttft-ms", str(ttft_ms), "--k", str(k)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture
def start_standin(port):
    """start_standin(step_ms, ttft_ms, k) -> base URL of a timing-exact stand-in server on a free port."""
    if not os.path.exists(THROUGHPUT_BENCH):
        pytest.skip("plugins/modules/throughput_bench.py is not in this tree yet (issue 3); enable at merge")
    found = [m for m in STANDIN_MODULES if os.path.exists(os.path.join(SUPPORT, m + ".py"))]
    if not found:
        pytest.skip("no timing-exact stand-in server under tests/support yet (issue 4); enable at merge")
    importlib.invalidate_caches()
    procs = []

    def start(step_ms=10.0, ttft_ms=50.0, k=1):
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        procs.append(_launch(found[0], port, step_ms, ttft_ms, k))
        deadline = time.monotonic() + 15
        import socket
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                return "http://127.0.0.1:%d" % port
            except OSError:
                time.sleep(0.05)
        raise AssertionError("stand-in server did not listen on %d" % port)
    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(10)


BENCH_PLAY = """
- name: Bench the stand-in
  hosts: serving
  gather_facts: false
  tasks:
    - name: Measure
      inferops.serving.throughput_bench: "{{ bench_args }}"
"""


def test_throughput_bench_twice_slower_is_flagged(run_playbook, start_standin, tmp_path):
    results = tmp_path / "results"
    env = {"ANSIBLE_CALLBACKS_ENABLED": CALLBACKS, "INFEROPS_RESULTS_DIR": str(results)}

    def bench(step_ms):
        url = start_standin(step_ms=step_ms, ttft_ms=50.0, k=1)
        args = dict(BENCH_ARGS, url=url, labels={"variant": "standin", "fingerprint": "fp-standin"})
        return run_playbook(BENCH_PLAY, extra_vars={"bench_args": args}, env=env)
    first = bench(10.0)
    assert first.rc == 0, first.stdout + first.stderr
    assert regressions(first) == []
    second = bench(20.0)
    assert second.rc == 0, second.stdout + second.stderr
    assert len(regressions(second)) == len(BENCH_ARGS["concurrency"])
    assert len(glob.glob(str(results / "*.png"))) == 2 and len(glob.glob(str(results / "*.md"))) == 2


def test_bench_summary_filter_feeds_set_stats(run_playbook, tmp_path):
    async_dir = tmp_path / "async"
    async_dir.mkdir()
    (async_dir / "job").write_text(json.dumps(bench_result((1, 4))))
    play = REPLAY_PLAY + """
    - name: Publish the summary as AWX artifacts
      ansible.builtin.set_stats:
        data:
          inferops_bench: "{{ {inventory_hostname: bench_job | inferops.serving.bench_summary(inventory_hostname)} }}"
    - name: Show it
      ansible.builtin.debug:
        msg: "{{ bench_job | inferops.serving.bench_summary }}"
"""
    run = run_playbook(play, extra_vars={"jid": "job"},
                       env={"ANSIBLE_ASYNC_DIR": str(async_dir), "ANSIBLE_SHOW_CUSTOM_STATS": "1",
                            "INFEROPS_RESULTS_DIR": str(tmp_path / "results")})
    assert run.rc == 0, run.stdout + run.stderr
    rows = run.result(task="Show it")["msg"]
    assert [r["concurrency"] for r in rows] == [1, 4] and rows[0]["variant"] == "baseline"
    assert "CUSTOM STATS" in run.stdout and "inferops_bench" in run.stdout


# ---- a variant comparison published with set_stats (playbooks/compare.yml) -------------------

COMPARE_PLAY = """
- name: Compare variants
  hosts: serving
  gather_facts: false
  tasks:
    - name: Measure each repeat
      inferops.serving.throughput_bench: "{{ bench_args | combine({'labels': bench_args.labels | combine({'repeat': item})}) }}"
      loop: [0, 1]
      register: runs
    - name: Publish the comparison
      ansible.builtin.set_stats:
        data:
          inferops_compare: "{{ {inventory_hostname: compare_input | inferops.serving.compare_variants(inventory_hostname, order)} }}"
        per_host: false
        aggregate: true
"""


def _compare_input():
    """Synthetic repeats from a timing-exact server: nextn about twice as fast as baseline, broken failed."""
    def repeats(steps):
        return [[dict(level(c, step_ms=step, variant=None, fingerprint=None), goodput=None) for c in (1, 4)]
                for step in steps]
    return {"baseline": {"repeats": repeats((10.0, 10.2, 9.9))}, "nextn": {"repeats": repeats((5.0, 5.1, 4.9))},
            "broken": {"failed": "engine exited 1 before ready", "log_tail": ["CUDA out of memory"]}}


def test_a_published_comparison_goes_into_the_run_file_report_and_chart(run_playbook, start_standin, tmp_path):
    results = tmp_path / "results"
    url = start_standin(step_ms=10.0, ttft_ms=50.0, k=1)
    args = dict(BENCH_ARGS, url=url, labels={"variant": "standin", "fingerprint": "fp-standin", "compare": "cmp-1"})
    run = run_playbook(COMPARE_PLAY, extra_vars={"bench_args": args, "compare_input": _compare_input(),
                                                 "order": ["baseline", "nextn", "broken"]},
                       env={"ANSIBLE_CALLBACKS_ENABLED": CALLBACKS, "INFEROPS_RESULTS_DIR": str(results)})
    assert run.rc == 0, run.stdout + run.stderr
    # each repeat is its own benchmark: its own history lines, with its index
    history = [json.loads(line) for line in (results / "history.jsonl").read_text().splitlines()]
    assert [(h["variant"], h["concurrency"], h["repeat"]) for h in history] == [
        ("standin", 1, 0), ("standin", 4, 0), ("standin", 1, 1), ("standin", 4, 1)]
    assert all(h["labels"]["compare"] == "cmp-1" for h in history)
    (run_file,) = glob.glob(str(results / "*-play-*.json"))
    doc = json.load(open(run_file))
    verdict = doc["compare"]["localhost"]
    assert verdict["reference"] == "baseline" and verdict["winner"] == "nextn"
    assert verdict["objective"] == {"metric": "output_throughput", "concurrency": 4}
    assert verdict["lines"][0].startswith("compare localhost: nextn vs baseline at c=4: output \u00d71.97 [")
    assert verdict["lines"][0].endswith(" significant")
    assert [(f["host"], f["variant"], f["reason"]) for f in doc["failed_variants"]] == [
        ("localhost", "broken", "engine exited 1 before ready")]
    rows = dict(((r["concurrency"], r["metric"]), r) for r in doc["comparisons"])
    assert sorted(set(c for c, _m in rows)) == [1, 4] and len(doc["comparisons"]) == 8  # 2 levels x 4 metrics measured
    out = rows[(4, "output_throughput")]
    assert out["host"] == "localhost" and out["baseline"] == "baseline" and out["variant"] == "nextn"
    assert out["ci_low"] <= out["ratio"] <= out["ci_high"] and out["significant"] is True
    assert out["repeats"] == {"baseline": 3, "variant": 3}
    assert rows[(4, "tpot_ms")]["ratio"] == pytest.approx(0.5, rel=0.05)
    (report,) = glob.glob(str(results / "*-play-*.md"))
    text = open(report).read()
    section = text[text.index("## Comparison"):text.index("\n## localhost\n")]
    assert "### localhost" in section and "- compare localhost: winner nextn (output " in section
    assert "- compare localhost: broken failed: engine exited 1 before ready" in section
    assert "| 4 | nextn |" in section and "| reference |" in section
    if glob.glob(str(results / "*.png")):  # matplotlib on the controller: both charts, the comparison linked
        (chart,) = glob.glob(str(results / "*-compare.png"))
        assert open(chart, "rb").read(4) == b"\x89PNG" and "(%s)" % os.path.basename(chart) in section
