# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the value check of the preflight (_preflight.value_specs, judge_value, flag_problems): what an
engine's --help says of an option's value, read from real help texts, and a value the engine's parser would
refuse found before anything is stopped.

The fixtures are excerpts, line for line, of the real help as the flag check runs it (COLUMNS=400 TERM=dumb):
  fixtures/sglang-0.5.9-help.txt   `python -m sglang.launch_server --help`, sglang 0.5.9
  fixtures/sglang-0.5.23-help.txt  `python -m sglang.launch_server --help`, sglang 0.5.23
  fixtures/vllm-0.34.0-help.txt    `vllm serve --help=all`, vllm 0.34.0
  fixtures/transformers-5.24-serve-help.txt  `transformers serve --help`, transformers 5.24 (typer/click), whole
(the SGLang and vLLM ones from the side environments of `make engine-envs`)."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _engines, _preflight

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def help_text(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


SGLANG_059 = help_text("sglang-0.5.9-help.txt")
SGLANG_0523 = help_text("sglang-0.5.23-help.txt")
VLLM_0340 = help_text("vllm-0.34.0-help.txt")
TRANSFORMERS_524 = help_text("transformers-5.24-serve-help.txt")


class HelpRun(object):
    """run_command answering the engine's --help with a fixed text; counts the calls."""

    def __init__(self, text):
        self.text = text
        self.calls = 0

    def __call__(self, argv, environ_update=None, expand_user_and_vars=True):
        self.calls += 1
        return 0, self.text, ""


# -- what each help says of the values ---------------------------------------------------------------

def test_sglang_0_5_9_lists_choices_and_metavars():
    specs = _preflight.value_specs(SGLANG_059)
    assert specs["--quantization"]["nargs"] == 1
    assert specs["--quantization"]["choices"][:3] == ["awq", "fp8", "mxfp8"]
    assert "modelopt_fp4" in specs["--quantization"]["choices"]
    assert specs["--dtype"] == {"choices": ["auto", "half", "float16", "bfloat16", "float", "float32"], "nargs": 1}
    assert specs["--log-requests-level"] == {"choices": ["0", "1", "2", "3"], "nargs": 1}
    assert specs["--speculative-algorithm"]["choices"] == ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
    # a metavar says nothing of the value; a flag takes none; the usage line is not an option's own line
    for option in ("--model-path", "--model", "--tensor-parallel-size", "--tp-size", "--mem-fraction-static",
                   "--log-requests-target", "--uvicorn-access-log-exclude-prefixes", "--model-checksum",
                   "--enable-metrics", "--cuda-graph-max-bs", "--host", "--port", "--tokenizer-mode"):
        assert option not in specs, option


def test_sglang_0_5_23_lists_new_choices_and_drops_some():
    specs = _preflight.value_specs(SGLANG_0523)
    assert specs["--cuda-graph-backend-decode"] == {"choices": ["full", "breakable", "disabled"], "nargs": 1}
    assert specs["--max-lora-chunk-size"]["choices"] == ["16", "32", "64", "128"]
    assert specs["--sampling-backend"]["choices"] == ["intel_xpu", "ascend", "flashinfer", "pytorch"]
    assert "nvfp4_online" in specs["--quantization"]["choices"]
    # 0.5.23 takes any registered name: SPECULATIVE_ALGORITHM, no choices any more
    assert "--speculative-algorithm" not in specs
    assert "--enable-tf32-matmul" not in specs and "--no-enable-tf32-matmul" not in specs
    assert "--numa-node" not in specs and "--tp-size" not in specs


def test_vllm_0_34_0_lists_choices_but_not_its_metavars_that_look_like_them():
    specs = _preflight.value_specs(VLLM_0340)
    assert specs["--dtype"]["choices"] == ["auto", "bfloat16", "float", "float16", "float32", "half"]
    assert specs["--tool-strict-level"]["choices"] == ["auto", "function", "parameter", "None"]
    assert specs["--collect-detailed-traces"] == {"choices": ["all", "model", "worker", "None"], "nargs": "+"}
    assert specs["--max-lora-rank"]["choices"][:3] == ["1", "8", "16"]
    assert "flashinfer_cutlass" in specs["--moe-backend"]["choices"]
    # its help text goes on with "--mamba-cache-mode is deprecated ...": help, not the option's own line
    assert specs["--mamba-cache-mode"] == {"choices": ["align", "none"], "nargs": 1}
    # "{...} or name registered in --tool-parser-plugin" and "['auto', 'hf', 'mistral']" are metavars: any
    # string parses (entrypoints/common/cli_args.py, engine/arg_utils.py literal_to_kwargs)
    for option in ("--tool-call-parser", "--config-format", "--kv-cache-dtype", "--quantization", "--load-format",
                   "--hf-token", "--api-key", "--tensor-parallel-size", "--enforce-eager", "--no-enforce-eager",
                   "--enable-expert-parallel", "--speculative-config", "--json-arg", "--json-arg.key1"):
        assert option not in specs, option


def test_transformers_click_help_states_types_and_choices():
    specs = _preflight.value_specs(TRANSFORMERS_524)
    assert specs["--port"] == {"type": "int", "nargs": 1}
    assert specs["--cb-max-memory-percent"] == {"type": "float", "nargs": 1}
    assert specs["--reasoning"] == {"choices": ["on", "off", "auto"], "nargs": 1}
    for option in ("--host", "--device", "--compile", "--no-compile", "--continuous-batching", "--json", "--help"):
        assert option not in specs, option


@pytest.mark.parametrize("text", [
    "usage: x\n  --a {p,q}  one\n  --b B\n  --a {p,r}  the same option printed otherwise\n",
    "usage: x\n  --a {p,q} or anything  hand-written metavar\n  --b B\n  --c C\n",
    "usage: x\n  --a {p,q} {p,r}  two lists\n  --b B\n  --c C\n",
    "usage: x\n  --b B\n                        --a {p,q} is deprecated: help text, indented\n",
])
def test_a_spec_that_cannot_be_told_is_left_out(text):
    assert "--a" not in _preflight.value_specs(text)


def test_argparse_nargs_shapes():
    text = ("usage: x\n  --one {p,q}\n  --opt [{p,q}]\n  --many {p,q} [{p,q} ...]\n  --any [{p,q} ...]\n"
            "  --old [{p,q} [{p,q} ...]]\n  --two {p,q} {p,q}\n  --alias {p,q}, -a {p,q}\n")
    specs = _preflight.value_specs(text)
    assert dict((o, s["nargs"]) for o, s in specs.items()) == {
        "--one": 1, "--opt": "?", "--many": "+", "--any": "*", "--old": "*", "--two": 2, "--alias": 1}


def test_a_click_choice_list_is_read_only_from_a_click_help():
    assert _preflight.value_specs("usage: x\n  --a [p|q]\n  --port INTEGER\n") == {}
    assert _preflight.value_specs("Usage: x\n  --a [p|q]\n  --port INTEGER\n  --name [TEXT]\n") == {
        "--a": {"choices": ["p", "q"], "nargs": 1}, "--port": {"type": "int", "nargs": 1}}
    assert _preflight.value_specs("Usage: x\n\u2502 --level [a|b]  the level  \u2502\n") == {
        "--level": {"choices": ["a", "b"], "nargs": 1}}


# -- judging one value --------------------------------------------------------------------------------

def test_judge_value_names_the_flag_the_value_and_the_choices():
    spec = _preflight.value_specs(SGLANG_059)["--quantization"]
    verdict = _preflight.judge_value("--quantization", "modelopt_fp5", spec)
    assert verdict.startswith("--quantization modelopt_fp5 is not among the choices its --help lists: awq, fp8, "
                              "mxfp8, gptq, marlin,")
    assert verdict.endswith(", quark_int4fp8_moe (nearest: modelopt_fp8, modelopt_fp4)")
    assert _preflight.judge_value("--quantization", "modelopt_fp4", spec) is None
    assert _preflight.judge_value("--quantization", "FP8", spec).startswith("--quantization FP8 is not")  # SGLang
    assert _preflight.judge_value("--quantization", "", spec).startswith('--quantization "" is not among')
    assert _preflight.judge_value("--quantization", "two words", spec).startswith('--quantization "two words" is')


def test_judge_value_errs_towards_what_the_parser_takes():
    vllm = _preflight.value_specs(VLLM_0340)
    # type=int choices: "08" is 8 (vLLM --max-lora-rank, SGLang --log-requests-level)
    assert _preflight.judge_value("--max-lora-rank", "08", vllm["--max-lora-rank"]) is None
    assert _preflight.judge_value("--max-lora-rank", "7", vllm["--max-lora-rank"]).startswith(
        "--max-lora-rank 7 is not among the choices its --help lists: 1, 8, 16")
    # optional_type: "" and "None" are None, which is a choice
    assert _preflight.judge_value("--tool-strict-level", "", vllm["--tool-strict-level"]) is None
    assert _preflight.judge_value("--tool-strict-level", "None", vllm["--tool-strict-level"]) is None
    assert _preflight.judge_value("--tool-strict-level", "strict", vllm["--tool-strict-level"]) is not None
    # --moe-backend lowercases and maps - to _ before it looks (engine/arg_utils.py): fold the value
    spec = vllm["--moe-backend"]
    assert _preflight.judge_value("--moe-backend", "FLASHINFER-CUTLASS", spec, fold="value") is None
    assert _preflight.judge_value("--moe-backend", "FLASHINFER-CUTLASS", spec) is not None  # exact
    assert _preflight.judge_value("--moe-backend", "flashinfer_cutlas", spec, fold="value").endswith(
        "(nearest: flashinfer_cutlass, flashinfer_cutedsl)")
    # vLLM's normaliser lowers the value only: --log-level's choices are upper case, "info" is refused
    levels = {"choices": ["CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG", "NOTSET"], "nargs": 1}
    assert _preflight.judge_value("--log-level", "info", levels, fold="value") is not None
    assert _preflight.judge_value("--log-level", "info", levels, fold="both") is None  # click, case_sensitive=False
    assert _preflight.judge_value("--log-level", "INFO", levels, fold="value") is None
    assert _preflight.judge_value("--anything", "x", None) is None and _preflight.judge_value("--a", "x", {}) is None


def test_judge_value_of_a_stated_type():
    port, share = {"type": "int", "nargs": 1}, {"type": "float", "nargs": 1}
    for good in ("8000", " 8000 ", "+1", "-1", "1_000"):  # int() as click's INTEGER does
        assert _preflight.judge_value("--port", good, port) is None, good
    assert _preflight.judge_value("--port", "80a", port) == "--port 80a is not an integer, the type its --help gives it"
    assert _preflight.judge_value("--port", "1.0", port) is not None
    for good in ("0.9", "1", "1e-3", "nan", "inf"):
        assert _preflight.judge_value("--cb-max-memory-percent", good, share) is None, good
    assert _preflight.judge_value("--cb-max-memory-percent", "90%", share) == (
        "--cb-max-memory-percent 90% is not a number, the type its --help gives it")
    assert _preflight.judge_value("--x", "y", {"type": "path", "nargs": 1}) is None  # a type not known here


def test_a_long_list_of_choices_is_cut():
    spec = {"choices": ["c%02d" % n for n in range(60)], "nargs": 1}
    verdict = _preflight.judge_value("--backend", "zz", spec)
    assert verdict.endswith(", c39, ... (60 in all)") and "c40" not in verdict


# -- the value check in flag_problems ---------------------------------------------------------------

def _problems(engine, text, engine_args, tmp_path, version, **params):
    base = dict(name="t", engine=engine, model="Qwen/Qwen3-0.6B", host="127.0.0.1", port=30000, api_key=None,
                served_model_name=None, python="/opt/sglang/bin/python", executable="/opt/e/bin/" + engine, env={},
                engine_args=engine_args, state_dir=str(tmp_path))
    base.update(params)
    adapter = _engines.adapter(engine)
    launch = adapter.build(base, version)
    return _preflight.flag_problems(adapter, base, launch, version, HelpRun(text))


def test_a_bad_sglang_value_is_refused_before_the_stop(tmp_path):
    problems, how = _problems("sglang", SGLANG_0523, {
        "quantization": "modelopt_fp5", "tp": 2, "kv_cache_dt": "fp8", "log_requests_level": 2,
        "numa_node": [0, 1], "enable_metrics": True, "cuda_graph_backend_decode": "full", "dtype": "bfloat16",
        "mem_fraction_static": 0.8}, tmp_path, "0.5.23")
    assert how["checked"] and how["values"] == 7
    assert len(problems) == 2, problems
    assert problems[0].startswith("engine sglang 0.5.23 would refuse a value: --quantization modelopt_fp5 is not "
                                  "among the choices its --help lists: awq, fp8, ")
    assert problems[0].endswith(" (nearest: modelopt_fp8, modelopt_fp4) (set flag_check: false in the variant if "
                                "its --help is incomplete)")
    # --kv-cache-dt abbreviates --kv-cache-dtype, which argparse then checks
    assert problems[1].startswith("engine sglang 0.5.23 would refuse a value: --kv-cache-dt fp8 is not among the "
                                  "choices its --help lists: auto, fp8_e5m2, fp8_e4m3, mxfp8")


def test_an_unknown_flag_is_judged_by_name_only(tmp_path):
    problems, dummy = _problems("sglang", SGLANG_0523, {"quant": "modelopt_fp5", "log_requests_level": 4},
                                tmp_path, "0.5.23")
    assert problems == [
        "engine sglang 0.5.23 does not accept --quant: it is ambiguous (it abbreviates --quantization, "
        "--quantization-param-path) (set flag_check: false in the variant if its --help is incomplete)",
        "engine sglang 0.5.23 would refuse a value: --log-requests-level 4 is not among the choices its --help "
        "lists: 0, 1, 2, 3 (set flag_check: false in the variant if its --help is incomplete)"]


def test_the_same_values_against_each_release(tmp_path):
    args = {"speculative_algorithm": "MTP", "kv_cache_dtype": "fp8_e4m3", "sampling_backend": "intel_xpu"}
    old, dummy = _problems("sglang", SGLANG_059, args, tmp_path / "old", "0.5.9")
    new, dummy = _problems("sglang", SGLANG_0523, args, tmp_path / "new", "0.5.23")
    assert [p.split(" is not among")[0] for p in old] == [
        "engine sglang 0.5.9 would refuse a value: --speculative-algorithm MTP",
        "engine sglang 0.5.9 would refuse a value: --sampling-backend intel_xpu"]
    assert new == []  # 0.5.23 takes any speculative algorithm a plugin registers, and has intel_xpu


def test_vllm_values(tmp_path):
    problems, how = _problems("vllm", VLLM_0340, {
        "dtype": "bf16", "kv_cache_dtype": "fp8_e4m3fn", "tool_call_parser": "my_plugin_parser",
        "max_lora_rank": 8, "collect_detailed_traces": ["model", "gpu"], "moe_backend": "FLASHINFER-CUTLASS",
        "enable_prefix_caching": False, "tool_strict_level": "", "speculative_config": {"method": "mtp"},
        "quantization": "modelopt_fp5"}, tmp_path, "0.34.0", api_key="sk-secret")
    assert how["checked"]
    assert [p.split(" (set flag_check")[0] for p in problems] == [
        "engine vllm 0.34.0 would refuse a value: --dtype bf16 is not among the choices its --help lists: auto, "
        "bfloat16, float, float16, float32, half (nearest: bfloat16)",
        "engine vllm 0.34.0 would refuse a value: --collect-detailed-traces gpu is not among the choices its --help "
        "lists: all, model, worker, None"]


def test_click_types_and_choices_of_transformers(tmp_path):
    problems, dummy = _problems("transformers", TRANSFORMERS_524, {
        "model_timeout": "5m", "reasoning": "ON", "cb_max_memory_percent": 0.8, "format": "yaml"},
        tmp_path, "5.24.0", model=str(tmp_path))
    assert [p.split(" (set flag_check")[0] for p in problems] == [
        "engine transformers 5.24.0 would refuse a value: --model-timeout 5m is not an integer, the type its --help "
        "gives it",
        "engine transformers 5.24.0 would refuse a value: --format yaml is not among the choices its --help lists: "
        "auto, human, agent, json, quiet"]


def test_only_the_values_an_option_takes_are_judged(tmp_path):
    # --dtype takes one value: a second one is another argument (which argparse refuses on its own)
    problems, dummy = _problems("vllm", VLLM_0340, {"dtype": ["half", "whatever"]}, tmp_path, "0.34.0")
    assert problems == []
    assert _preflight._taken(["a", "b", "c"], "+") == ["a", "b", "c"]
    assert _preflight._taken(["a", "b", "c"], "*") == ["a", "b", "c"]
    assert _preflight._taken(["a", "b"], "?") == ["a"] and _preflight._taken([], "?") == []
    assert _preflight._taken(["a", "b", "c"], 2) == ["a", "b"] and _preflight._taken(["a", "b"], 1) == ["a"]


def test_a_secret_is_never_judged_nor_shown(tmp_path):
    text = "usage: x\n  --api-key {one,two}\n  --host HOST\n  --port PORT\n  --model-path M\n"
    problems, dummy = _problems("sglang", text, {}, tmp_path, "0.5.23", api_key="sk-not-a-choice")
    assert problems == []


# -- the cache ----------------------------------------------------------------------------------------

def test_the_cache_holds_the_values_and_an_older_format_is_read_again(tmp_path, monkeypatch):
    run = HelpRun(SGLANG_0523)
    cache = tmp_path / "engine-flags"
    record, why = _preflight.read_help(["python3", "--help"], {}, "0.5.23", run, str(cache))
    assert why is None and record["format"] == _preflight.HELP_FORMAT == 3
    [name] = os.listdir(str(cache))
    stored = json.loads((cache / name).read_text())
    assert stored["values"]["--quantization"]["choices"][0] == "awq" and "--tp-size" in stored["flags"]
    assert _preflight.read_help(["python3", "--help"], {}, "0.5.23", run, str(cache))[0] == record
    assert run.calls == 1
    # a record without values (format 1, as 0.3.0 wrote them) where this format's is looked for: read again
    (cache / name).write_text(json.dumps({"argv": ["python3", "--help"], "version": "0.5.23",
                                          "flags": stored["flags"]}))
    assert _preflight.read_help(["python3", "--help"], {}, "0.5.23", run, str(cache))[0] == record
    assert run.calls == 2 and json.loads((cache / name).read_text())["format"] == 3
    # and format 1's own file is another file: never found, never misread
    monkeypatch.setattr(_preflight, "HELP_FORMAT", 1)
    assert _preflight._help_cache_key(["python3", "--help"], "0.5.23", {}) + ".json" != name
    assert _preflight.accepted_flags(["python3", "--help"], {}, "0.5.23", run, str(cache))[0] == stored["flags"]
