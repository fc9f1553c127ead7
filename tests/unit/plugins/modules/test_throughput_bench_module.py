# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""throughput_bench's main() run in-process (ansible.module_utils.testing.patch_module_args, its JSON read from
stdout): bad input refused with a message naming the parameter before anything is sent, check mode, and small
real runs against the timing-exact stand-in (tests/support/stream_server.py in its own process, a free port)."""

from __future__ import annotations

import json

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.inferops.serving.plugins.modules import throughput_bench

import stand_in

TTFT_MS = 20.0
STEP_MS = 2.0
SECRET = "sk-inferops-unit-7d21a0"
SMALL = dict(concurrency=[1], requests_per_level=2, warmup=0, input_tokens=8, output_tokens=4, timeout=10)


def run_module(capsys, **args):
    """(exit code, the module's JSON result) of one main() call with these arguments."""
    capsys.readouterr()  # drop what came before
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exited:
            throughput_bench.main()
    out = capsys.readouterr().out
    return exited.value.code, json.loads(out), out


@pytest.fixture
def server(port):
    """The stand-in on a free port, serving model tiny-m behind an API key: its base URL."""
    with stand_in.stand_in(port, "--ttft-ms", TTFT_MS, "--step-ms", STEP_MS, "--model", "tiny-m",
                           "--api-key", SECRET) as url:
        yield url


@pytest.mark.parametrize("args, msg", [
    (dict(concurrency=[]), "concurrency: give at least one level, for example [1, 32]"),
    (dict(concurrency=[1, 0, 4]), "concurrency: every level must be 1 or more, got [1, 0, 4]"),
    (dict(input_tokens=0), "input_tokens must be 1 or more, got 0"),
    (dict(output_tokens=-3), "output_tokens must be 1 or more, got -3"),
    (dict(warmup=-1), "warmup must be 0 or more, got -1"),
    (dict(requests_per_level=0), "requests_per_level must be 1 or more, got 0"),
    (dict(repeats=0), "repeats must be 1 or more, got 0"),
    (dict(timeout=0), "timeout must be a positive number of seconds, got 0.0"),
    (dict(warmup_tolerance=-0.1), "warmup_tolerance must be a relative difference of 0 or more (0.05 is 5 %), got -0.1"),
    (dict(warmup_tolerance="nan"), "warmup_tolerance must be a relative difference of 0 or more (0.05 is 5 %), got nan"),
    (dict(warmup_max_s=0), "warmup_max_s must be a positive number of seconds, got 0.0"),
    (dict(warmup_max_s=-5), "warmup_max_s must be a positive number of seconds, got -5.0"),
    (dict(warmup_max_s="inf"), "warmup_max_s must be a positive number of seconds, got inf"),
    (dict(url="ftp://127.0.0.1:1"), "url: url must be http:// or https://, got 'ftp://127.0.0.1:1'"),
    (dict(url="http://"), "url: url has no host: 'http://'"),
    (dict(api="grpc"), "value of api must be one of: completions, chat, generate, got: grpc"),
    (dict(engine="tgi"), "value of engine must be one of: auto, sglang, vllm, trtllm, transformers, openai, got: tgi"),
])
def test_bad_input_is_refused_naming_the_parameter(capsys, args, msg):
    # the URL is a port nothing listens on: a refusal must come before any request is sent
    code, result, dummy = run_module(capsys, **dict(dict(url="http://127.0.0.1:9"), **args))
    assert code == 1 and result["failed"] is True
    assert msg in result["msg"], result["msg"]
    assert "results" not in result


@pytest.mark.parametrize("slo", [{"ttft_ms": -5}, {"tpot_ms": 0}])
def test_a_target_that_is_not_positive_is_refused(capsys, slo):
    code, result, dummy = run_module(capsys, url="http://127.0.0.1:9", slo=slo)
    key, value = next(iter(slo.items()))
    assert code == 1 and result["msg"].startswith("slo") and key in result["msg"]
    assert str(float(value)) in result["msg"]


def test_a_required_url_is_asked_for(capsys):
    code, result, dummy = run_module(capsys)
    assert code == 1 and result["msg"] == "missing required arguments: url"


def test_a_server_that_is_not_there_is_named(capsys, port):
    url = "http://127.0.0.1:%d" % port
    code, result, dummy = run_module(capsys, url=url, timeout=2)
    assert code == 1 and result["url"] == url
    assert result["msg"].startswith("server at %s is unreachable or not OpenAI-compatible: " % url)


def test_a_wrong_key_and_an_unknown_model_are_refused_saying_why(capsys, server):
    code, result, out = run_module(capsys, url=server, api_key="sk-wrong")
    assert code == 1 and "HTTP 401" in result["msg"] and "invalid api key" in result["msg"]
    code, result, out = run_module(capsys, url=server, api_key=SECRET, model="llama-9000")
    assert code == 1 and result["models"] == ["tiny-m"]
    assert result["msg"] == "model 'llama-9000' is not served at %s; the server offers: tiny-m" % server
    assert SECRET not in out


def test_a_small_run_measures_every_request(capsys, server):
    code, result, out = run_module(capsys, url=server + "/v1", api_key=SECRET, labels={"variant": "k1"}, **SMALL)
    assert code == 0 and not result.get("failed"), result
    assert result["changed"] is False and result["url"] == server + "/v1"
    assert (result["model"], result["api"], result["engine"], result["metrics_url"]) == (
        "tiny-m", "completions", "openai", None)
    assert result["elapsed_s"] > 0
    [level] = result["results"]
    assert (level["concurrency"], level["requests"], level["completed"], level["failed"]) == (1, 2, 2, 0)
    assert level["errors"] == {} and level["token_source"] == "usage" and level["length_mismatch"] == 0
    assert level["labels"] == {"variant": "k1"} and level["goodput"] is None
    assert level["ttft_ms"]["count"] == 2 and level["ttft_ms"]["min"] >= TTFT_MS * 0.9
    assert level["e2e_ms"]["min"] >= (TTFT_MS + 3 * STEP_MS) * 0.9  # 4 tokens: the first, then 3 steps
    assert level["output_throughput"] > 0 and level["connections_opened"] == 1
    assert result["msg"].startswith("c=1: 2/2 ok, ")
    assert set(result["client"]) >= {"version", "loop_lag_ms", "saturated", "warnings"}
    assert SECRET not in out  # api_key is no_log


def test_check_mode_measures_too_and_changes_nothing(capsys, server):
    code, result, dummy = run_module(capsys, url=server, api_key=SECRET, _ansible_check_mode=True,
                                     slo={"ttft_ms": 10000}, **SMALL)
    assert code == 0 and result["changed"] is False
    [level] = result["results"]
    assert level["completed"] == 2 and level["goodput"] > 0 and level["slo_attainment"] == 1.0


def test_repeats_run_the_sweep_again_labelled(capsys, server):
    args = dict(SMALL)
    args.update(concurrency=[1, 2], url=server, api_key=SECRET, repeats=2, labels={"repeat": 9, "v": "x"})
    code, result, dummy = run_module(capsys, **args)
    assert code == 0
    assert [(r["concurrency"], r["labels"]) for r in result["results"]] == [
        (1, {"repeat": 0, "v": "x"}), (2, {"repeat": 0, "v": "x"}),
        (1, {"repeat": 1, "v": "x"}), (2, {"repeat": 1, "v": "x"})]
    assert result["msg"].startswith("2 repeats; repeat 1 c=1: 2/2 ok")


def test_nothing_completing_fails_with_the_results(capsys, port):
    with stand_in.stand_in(port, "--ttft-ms", TTFT_MS, "--step-ms", STEP_MS, "--drop-every", "1") as url:
        args = dict(SMALL)
        args.update(output_tokens=16, url=url)
        code, result, dummy = run_module(capsys, **args)
    assert code == 1 and result["failed"] is True
    assert result["msg"].startswith("no request completed at concurrency 1 against %s: dropped x2: " % url)
    [level] = result["results"]
    assert level["completed"] == 0 and level["failed"] == 2 and level["errors"] == {"dropped": 2}
