# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""throughput_bench and the benchmark role through real ansible-playbook runs on localhost.

Against the timing-exact stand-in (tests/support/stream_server.py, its own process on a free
port): first content chunk TTFT after the request, then one chunk every STEP ms with K tokens, so
the figures are known in advance (docs: benchmarking):
  tpot = (ceil(n/k) - 1) * step / (n - 1)    (n_first is 1: the server reports no per-chunk usage)
  e2e = ttft + (ceil(n/k) - 1) * step;  output throughput = C * n / e2e (closed loop, C <= batch cap)
Tolerances allow for a shared 2-core machine; benchmarks/bench_accuracy.py measures the real error.
And against the real `transformers serve` engine with the tiny model: no timing, only integrity.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys

import pytest

from conftest import free_port
import stand_in

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
TTFT_MS = 50.0
STEP_MS = 5.0
SECRET = "sk-inferops-test-4c9f1e"


def truth(n, k, concurrency, ttft_ms=TTFT_MS, step_ms=STEP_MS):
    steps = math.ceil(n / float(k)) - 1
    e2e_ms = ttft_ms + steps * step_ms
    return {"tpot_ms": steps * step_ms / (n - 1), "e2e_ms": e2e_ms,
            "output_throughput": concurrency * n / (e2e_ms / 1000.0), "tokens_per_chunk": n / float(steps + 1)}


@pytest.fixture
def standin():
    """standin(*flags) -> base URL of a stand-in on a free port; all are stopped at the end."""
    with contextlib.ExitStack() as stack:
        def start(*flags):
            return stack.enter_context(stand_in.stand_in(free_port(), "--ttft-ms", TTFT_MS, "--step-ms", STEP_MS,
                                                         *flags))
        yield start


def play(*tasks):
    """Playbook text: one throughput_bench task per (name, args); JSON is YAML, so args go in as given."""
    lines = ["---", "- hosts: localhost", "  gather_facts: false", "  tasks:"]
    for name, args, extra in tasks:
        lines += ["    - name: %s" % name, "      inferops.serving.throughput_bench: %s" % json.dumps(args)]
        lines += ["      %s: %s" % kv for kv in extra.items()]
    return "\n".join(lines) + "\n"


def near(measured, expected, rel):
    return abs(measured - expected) <= rel * expected


@pytest.mark.timing
def test_figures_match_the_known_timing_completions_and_chat(run_playbook, standin):
    plain = standin("--k", "1")
    multi = standin("--k", "3", "--role-chunk", "--utf8")
    n = 64
    run = run_playbook(play(
        ("one token per chunk", dict(url=plain, concurrency=[1, 8], output_tokens=n, input_tokens=32,
                                     labels={"variant": "k1"}), {}),
        ("three tokens per chunk, chat", dict(url=multi + "/v1", api="chat", concurrency=[4], output_tokens=n,
                                              slo={"ttft_ms": 500, "tpot_ms": 50}), {}),
    ))
    assert run.rc == 0, run.stdout[-3000:]
    one = run.result(task="one token per chunk")
    assert one["changed"] is False and one["model"] == "stand-in" and one["api"] == "completions"
    assert [r["concurrency"] for r in one["results"]] == [1, 8]
    for res in one["results"]:
        c = res["concurrency"]
        want = truth(n, 1, c)
        assert res["requests"] == res["completed"] == max(4, 2 * c) and res["failed"] == 0 and res["errors"] == {}
        assert res["token_source"] == "usage" and res["length_mismatch"] == 0
        assert res["output_tokens"] == n * res["completed"] and res["connections_opened"] == c
        assert TTFT_MS <= res["ttft_ms"]["p50"] <= TTFT_MS + 10, res["ttft_ms"]
        assert near(res["tpot_ms"]["p50"], want["tpot_ms"], 0.02), res["tpot_ms"]
        assert near(res["decode_tps_per_request"]["p50"], 1000.0 / want["tpot_ms"], 0.02)
        assert near(res["e2e_ms"]["p50"], want["e2e_ms"], 0.03), res["e2e_ms"]
        assert near(res["output_throughput"], want["output_throughput"], 0.05), (res["output_throughput"], want)
        assert near(res["e2e_tps_per_request"]["p50"], n * 1000.0 / want["e2e_ms"], 0.03)
        assert res["tokens_per_chunk"]["p50"] == 1.0
        assert res["input_tokens_per_request"]["p50"] == 32 and res["input_throughput"] > 0
        assert res["labels"] == {"variant": "k1"} and res["goodput"] is None
        assert res["acceptance_length"] is None
    assert one["client"]["version"] and "saturated" in one["client"]
    assert "c=1: 4/4 ok" in one["msg"]

    chat = run.result(task="three tokens per chunk, chat")
    (res,) = chat["results"]
    want = truth(n, 3, 4)
    assert chat["api"] == "chat" and res["completed"] == 8 and res["failed"] == 0
    assert res["token_source"] == "usage" and res["output_tokens"] == 8 * n  # usage, not chunk count
    assert res["tokens_per_chunk"]["p50"] == pytest.approx(want["tokens_per_chunk"], abs=1e-3)  # 64 / 22
    assert near(res["tpot_ms"]["p50"], want["tpot_ms"], 0.03), res["tpot_ms"]  # 210 / 63 ms, not 10 / 3
    assert near(res["output_throughput"], want["output_throughput"], 0.06), (res["output_throughput"], want)
    assert TTFT_MS <= res["ttft_ms"]["p50"] <= TTFT_MS + 10  # the role-only first chunk does not count
    assert res["slo_met"] == 8 and near(res["goodput"], res["request_throughput"], 1e-6)


@pytest.mark.timing
def test_repeats_run_the_sweep_again_in_one_call_each_level_labelled(run_playbook, standin):
    url = standin("--k", "1")
    n = 16
    run = run_playbook(play(
        ("three repeats", dict(url=url, concurrency=[1, 2], output_tokens=n, input_tokens=8, repeats=3,
                               labels={"variant": "r", "repeat": 9}, slo={"tpot_ms": 1000, "ttft_ms": 1}), {}),
        ("no repeats", dict(url=url, concurrency=[1], output_tokens=n, input_tokens=8, repeats=0), {"ignore_errors": True}),
    ))
    assert run.rc == 0, run.stdout[-3000:]
    out = run.result(task="three repeats")
    levels = out["results"]
    assert [(r["concurrency"], r["labels"]["repeat"]) for r in levels] == [(1, 0), (2, 0), (1, 1), (2, 1), (1, 2), (2, 2)]
    assert all(r["labels"]["variant"] == "r" and r["completed"] == r["requests"] for r in levels)
    want = truth(n, 1, 2)
    assert all(near(r["output_throughput"], want["output_throughput"], 0.06) for r in levels if r["concurrency"] == 2)
    # the whole call: every level's window, warm-ups and the model lookup; a window is a part of it
    assert out["elapsed_s"] > sum(r["duration_s"] for r in levels)
    assert out["msg"].startswith("3 repeats; repeat 1 c=1: 4/4 ok") and "repeat 3 c=2: 4/4 ok" in out["msg"]
    # TTFT is 50 ms, so no request meets ttft_ms 1: the share is 0, and failed requests would count as misses
    assert all(r["slo_attainment"] == 0.0 and r["slo_met"] == 0 for r in levels)
    refused = run.results(task="no repeats")[0]
    assert refused["status"] == "ignored" and refused["result"]["msg"] == "repeats must be 1 or more, got 0"


def test_failures_are_reported_and_named_and_check_mode_measures(run_playbook, standin):
    dropping = standin("--drop-every", "3", "--model", "stand-in", "--model", "other")
    nothing = "http://127.0.0.1:%d" % free_port()
    run = run_playbook(play(
        ("some requests fail", dict(url=dropping, concurrency=[2], requests_per_level=6, output_tokens=16,
                                    warmup=0), {}),
        ("nothing listens", dict(url=nothing, timeout=5), {"ignore_errors": "true"}),
        ("no such model", dict(url=dropping, model="llama-9000"), {"ignore_errors": "true"}),
        ("in check mode", dict(url=dropping, model="other", concurrency=[1], output_tokens=16, warmup=0,
                               requests_per_level=2), {"check_mode": "true"}),
    ))
    assert run.rc == 0, run.stdout[-3000:]
    partial = run.result(task="some requests fail")
    (res,) = partial["results"]
    assert run.results(task="some requests fail")[0]["status"] == "ok"
    assert res["requests"] == 6 and res["failed"] == 2 and res["completed"] == 4  # requests 3 and 6 drop
    assert res["errors"] == {"dropped": 2} and "closed before" in res["error_samples"]["dropped"]
    assert "FAILED requests: c=2 {'dropped': 2}" in partial["msg"]

    down = run.results(task="nothing listens")[0]
    assert down["status"] == "ignored"
    assert nothing in down["result"]["msg"] and "unreachable" in down["result"]["msg"]
    assert "Connection refused" in down["result"]["msg"] and down["result"]["url"] == nothing

    wrong = run.results(task="no such model")[0]
    assert wrong["status"] == "ignored"
    assert "'llama-9000' is not served" in wrong["result"]["msg"]
    assert "the server offers: stand-in, other" in wrong["result"]["msg"]
    assert wrong["result"]["models"] == ["stand-in", "other"]

    # a read-only module measures in check mode too (streams 7 and 8 of the stand-in: none dropped)
    checked = run.result(task="in check mode")
    assert checked["changed"] is False and checked["model"] == "other"
    assert checked["results"][0]["requests"] == checked["results"][0]["completed"] == 2
    assert run.recap()["changed"] == 0


def test_api_key_is_used_and_never_shown(run_playbook, standin):
    url = standin("--api-key", SECRET)
    run = run_playbook(play(
        ("without the key", dict(url=url), {"ignore_errors": "true"}),
        ("with the key", dict(url=url, api_key=SECRET, concurrency=[1], output_tokens=8), {}),
    ), args=("-vvv",))
    assert run.rc == 0, run.stdout[-3000:]
    refused = run.results(task="without the key")[0]["result"]
    assert "HTTP 401" in refused["msg"] and "invalid api key" in refused["msg"]
    res = run.result(task="with the key")
    assert res["results"][0]["completed"] == 4
    if "invocation" in res:  # ansible-core 2.19 hands the module's arguments to callbacks, 2.21 does not
        assert res["invocation"]["module_args"]["api_key"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    assert SECRET not in run.stdout and SECRET not in run.stderr
    assert SECRET not in json.dumps(run.records)


def test_benchmark_role_publishes_set_stats(run_playbook, standin):
    url = standin("--k", "2")
    playbook = ("---\n- hosts: localhost\n  gather_facts: false\n  roles:\n"
                "    - role: inferops.serving.benchmark\n")
    role_vars = dict(benchmark_url=url, benchmark_concurrency=[1, 4], benchmark_output_tokens=32,
                     benchmark_input_tokens=16, benchmark_poll_interval=1, benchmark_async_timeout=120,
                     benchmark_labels={"variant": "role-test", "fingerprint": "fp-1"})
    run = run_playbook(playbook, extra_vars=role_vars, env={"ANSIBLE_SHOW_CUSTOM_STATS": "1"})
    assert run.rc == 0, run.stdout[-3000:]
    assert run.recap()["changed"] == 0 and run.recap()["failed"] == 0
    res = run.result(action="async_status")
    assert res["finished"] and [r["concurrency"] for r in res["results"]] == [1, 4]
    assert all(r["completed"] == r["requests"] and r["labels"]["variant"] == "role-test" for r in res["results"])
    want = truth(32, 2, 4)
    assert near(res["results"][1]["output_throughput"], want["output_throughput"], 0.06)
    stats = run.stdout[run.stdout.index("CUSTOM STATS"):]
    assert "inferops_benchmark" in stats and "inferops_benchmark_results" in stats
    published = run.result(action="set_stats")["ansible_stats"]
    assert published["per_host"] is False and published["aggregate"] is True
    data = published["data"]
    assert data["inferops_benchmark"]["localhost"]["url"] == url
    assert data["inferops_benchmark"]["localhost"]["client"]["version"]
    assert [(r["host"], r["concurrency"]) for r in data["inferops_benchmark_results"]] == [("localhost", 1), ("localhost", 4)]
    assert "c=4: 8/8 ok" in run.result(action="debug")["msg"]


def test_the_benchmark_role_leaves_an_unset_setting_to_the_module(run_playbook, standin):
    """The role states no benchmark default: what it leaves unset reaches the module as omit, and the module's own
    default applies (module_utils/_bench_args.py): the sweep [1, 32], one warm-up request per worker."""
    url = standin("--k", "4")
    playbook = ("---\n- hosts: localhost\n  gather_facts: false\n  roles:\n"
                "    - role: inferops.serving.benchmark\n")
    run = run_playbook(playbook, extra_vars=dict(benchmark_url=url, benchmark_output_tokens=4, benchmark_input_tokens=4,
                                                 benchmark_poll_interval=1, benchmark_async_timeout=120))
    assert run.rc == 0, run.stdout[-3000:]
    res = run.result(action="async_status")
    assert [(r["concurrency"], r["requests"], r["completed"]) for r in res["results"]] == [(1, 4, 4), (32, 64, 64)]
    assert all(r["warmup_end"] != "off" and r["steady"] is not None for r in res["results"])  # warmup 1, not 0
    assert res["api"] == "completions" and res["engine"] == "openai"


def test_real_transformers_engine_integrity(run_playbook, transformers_engine):
    """The tiny model on CPU through `transformers serve`: every request completes and the server's
    usage counts are exactly output_tokens. No timing assertion: its speed is whatever the CPU gives.
    This server rejects ignore_eos/min_tokens (the module says so); greedy decoding of the tiny model
    reaches no EOS within a few tokens, so max_tokens alone fixes the length. Some prompts make it emit
    only tokens that decode to no text: those requests complete, counted in no_text."""
    url, model = transformers_engine
    n = 8
    common = dict(url=url, requests_per_level=4, input_tokens=16, output_tokens=n, timeout=120, ignore_eos=False)
    run = run_playbook(play(
        ("tiny engine completions", dict(common, concurrency=[2]), {}),
        ("tiny engine chat", dict(common, model=model, api="chat", concurrency=[2]), {}),
        ("tiny engine with ignore_eos", dict(common, concurrency=[1], warmup=0, ignore_eos=True),
         {"ignore_errors": "true"}),
    ))
    assert run.rc == 0, run.stdout[-3000:]
    assert run.result(task="tiny engine completions")["model"] == model  # the first one /v1/models lists
    for task in ("tiny engine completions", "tiny engine chat"):
        for res in run.result(task=task)["results"]:
            assert res["completed"] == res["requests"] == 4 and res["failed"] == 0, (task, res["errors"])
            assert res["token_source"] == "usage", (task, res["token_source"])
            assert res["output_tokens"] == 4 * n, (task, res["output_tokens"])
            assert res["e2e_tps_per_request"]["count"] == 4 - res["no_text"] and res["ttft_ms"]["min"] > 0
            assert res["output_throughput"] > 0 and res["input_tokens_per_request"]["min"] > 0
    rejected = run.results(task="tiny engine with ignore_eos")[0]
    assert rejected["status"] == "ignored"
    assert "set ignore_eos to false" in rejected["result"]["msg"], rejected["result"]["msg"]


def test_the_engine_is_identified_and_its_own_acceptance_length_is_read(run_playbook, standin):
    """engine=auto against servers that answer as SGLang and as vLLM (two engine series): each level's
    acceptance length from that engine's shape, exactly k (a chunk of k tokens is one speculative step)."""
    sglang = standin("--k", "3", "--engine", "sglang")
    counters = standin("--k", "3", "--engine", "sglang", "--no-sglext")
    vllm = standin("--k", "2", "--engine", "vllm", "--engines", "2")
    run = run_playbook(play(
        ("sglang", dict(url=sglang, concurrency=[2], output_tokens=24, input_tokens=8), {}),
        ("sglang native", dict(url=sglang, api="generate", concurrency=[2], output_tokens=24, input_tokens=8), {}),
        ("sglang chat", dict(url=sglang, api="chat", concurrency=[2], output_tokens=24, input_tokens=8), {}),
        ("sglang counters", dict(url=counters, concurrency=[2], output_tokens=24, input_tokens=8), {}),
        ("vllm", dict(url=vllm, concurrency=[1, 2], output_tokens=24, input_tokens=8), {}),
    ))
    assert run.rc == 0, run.stdout[-3000:]
    res = run.result(task="sglang")
    assert res["engine"] == "sglang" and res["metrics_url"] == sglang + "/metrics"
    assert res["results"][0]["acceptance_length"] == pytest.approx(3.0)
    assert res["results"][0]["spec_decode"]["source"].startswith("sglang sglext")
    native = run.result(task="sglang native")["results"][0]
    assert native["acceptance_length"] == pytest.approx(3.0) and "native /generate" in native["spec_decode"]["source"]
    chat = run.result(task="sglang chat")["results"][0]
    assert chat["acceptance_length"] == pytest.approx(3.0) and chat["spec_decode"]["source"].startswith("sglang sglext")
    # no sglext chunk: the deltas of generation_tokens_total / spec_verify_calls_total over the level
    counted = run.result(task="sglang counters")["results"][0]
    assert counted["acceptance_length"] == pytest.approx(3.0), counted["spec_decode"]
    assert counted["spec_decode"]["source"].startswith("sglang /metrics counter deltas"), counted["spec_decode"]
    for task in ("sglang", "sglang native", "sglang chat", "sglang counters", "vllm"):
        for level in run.result(task=task)["results"]:
            source = level["spec_decode"]["source"]
            print("\nACCEPTANCE %s c=%d: %s from %s" % (task, level["concurrency"], level["acceptance_length"], source))
    res = run.result(task="vllm")
    assert res["engine"] == "vllm"
    for level in res["results"]:
        assert level["acceptance_length"] == pytest.approx(2.0)
        assert level["spec_decode"]["acceptance_rate_per_position"] == [1.0, 0.0, 0.0]
