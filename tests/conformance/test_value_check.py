# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The value check of inference_server's flag check (a choice its --help does not list, refused before the
stop) against the real SGLang 0.5.9 / 0.5.23 and vLLM 0.34.0: what each engine's --help says of the values is
what its parser holds (tests/conformance/parser_choices.py), bad values are refused by both, values at the
edges (a case, a separator, "08" for 8, "" for None, a metavar that merely looks like a list) are taken by
both, no value the parser takes is refused, and every variant of inventories/example passes.

`pytest -s` prints a PARSED / REFUSED line per argv and what the check said (what the closing notes quote)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _preflight
from conftest import HERE
from run_command import run_command
from test_engine_parsers import (EXAMPLE, PINNED, example_spec, example_variants, launch_of, params_of,
                                 show)

PROFILES = ["sglang-0.5.9", "sglang-0.5.23", "vllm-0.34.0"]
MODEL = "Qwen/Qwen3-0.6B"

# (profile, engine_args): a value outside the choices that release's parser holds
BAD = [
    ("sglang-0.5.9", {"quantization": "modelopt_fp5"}),
    ("sglang-0.5.9", {"dtype": "bf16"}),  # bf16 is a kv_cache_dtype; dtype says bfloat16
    ("sglang-0.5.9", {"kv_cache_dtype": "fp8"}),  # vLLM's spelling; SGLang wants fp8_e4m3 or fp8_e5m2
    ("sglang-0.5.9", {"speculative_algorithm": "MTP"}),
    ("sglang-0.5.9", {"log_requests_level": 4}),
    ("sglang-0.5.9", {"reasoning_parser": "deepseek_r1"}),  # deepseek-r1
    ("sglang-0.5.9", {"attention_backend": "flash_attn"}),
    ("sglang-0.5.23", {"quantization": "modelopt_fp5"}),
    ("sglang-0.5.23", {"kv_cache_dtype": "fp4_e2m1"}),  # 0.5.9 had it; 0.5.23 has nvfp4, fp4_mx_block16
    ("sglang-0.5.23", {"cuda_graph_backend_decode": "piecewise"}),
    ("sglang-0.5.23", {"moe_runner_backend": "flashinfer_cutlas"}),
    ("sglang-0.5.23", {"max_lora_chunk_size": 48}),
    ("sglang-0.5.23", {"load_format": "safetensor"}),
    ("vllm-0.34.0", {"dtype": "bf16"}),
    ("vllm-0.34.0", {"max_lora_rank": 7}),
    ("vllm-0.34.0", {"collect_detailed_traces": ["model", "gpu"]}),  # nargs=+: each value is a choice
    ("vllm-0.34.0", {"tool_strict_level": "strict"}),
    ("vllm-0.34.0", {"uvicorn_log_level": "verbose"}),
    ("vllm-0.34.0", {"convert": "embedding"}),
    ("vllm-0.34.0", {"prefix_caching_hash_algo": "md5"}),
    ("vllm-0.34.0", {"moe_backend": "flashinfer_cutlas"}),
]

# (profile, engine_args): values the parser takes that a literal look at its --help could refuse
GOOD = [
    ("sglang-0.5.9", {"quantization": "modelopt_fp4", "kv_cache_dtype": "fp4_e2m1"}),
    ("sglang-0.5.9", {"log_requests_level": "03"}),  # type=int choices: 3
    ("sglang-0.5.23", {"speculative_algorithm": "MTP"}),  # 0.5.23 lists no choices: a plugin may register one
    ("sglang-0.5.23", {"sampling_backend": "intel_xpu", "cuda_graph_backend_decode": "breakable"}),
    ("vllm-0.34.0", {"max_lora_rank": "08"}),  # type=int choices: 8
    ("vllm-0.34.0", {"tool_strict_level": ""}),  # optional_type: "" is None, a choice
    ("vllm-0.34.0", {"moe_backend": "FLASHINFER-CUTLASS"}),  # lowered, - to _, then checked
    ("vllm-0.34.0", {"kv_cache_dtype": "fp8_e4m3"}),  # "['auto', ...]" is a metavar: any string
    ("vllm-0.34.0", {"tool_call_parser": "my_plugin_parser"}),  # "{...} or name registered in ..."
    ("vllm-0.34.0", {"collect_detailed_traces": ["model", "worker"]}),
    ("vllm-0.34.0", {"quantization": "modelopt_fp5"}),  # no choices in its parser: refused later, by the engine
]


def _cases(env, cases, tmp_path):
    """(engine_args, launch, verdict of the real parser, problems of the flag check) for each case, with one
    state dir (the help read once)."""
    params = [params_of({"engine": env.engine, "model": MODEL, "engine_args": args}, env, tmp_path) for args in cases]
    adapter, version, dummy = launch_of(params[0])
    launches = [adapter.build(p, version) for p in params]
    verdicts = env.parse([launch.argv[1:] for launch in launches])
    out = []
    for args, param, launch, verdict in zip(cases, params, launches, verdicts):
        problems, checked = _preflight.flag_problems(adapter, param, launch, version, run_command)
        assert checked and checked["checked"], checked
        out.append((args, launch, verdict, problems))
    return out


@pytest.mark.parametrize("profile", PROFILES)
def test_bad_values_are_refused_by_the_parser_and_before_the_stop(profile, engine_envs, tmp_path):
    env = engine_envs[profile]
    cases = [args for where, args in BAD if where == profile]
    for args, launch, verdict, problems in _cases(env, cases, tmp_path):
        show("bad value %s" % json.dumps(args), env, launch, verdict)
        print("  flag check: %s" % ("; ".join(problems) or "accepted"))
        assert not verdict["ok"] and verdict["rc"] == 2 and "invalid choice" in verdict["error"], verdict
        assert len(problems) == 1 and " would refuse a value: " in problems[0], problems
        flag, value = [(f, v) for f, v in launch.flags if f != "--model-path"][0]
        assert "%s %s is not among the choices its --help lists: " % (flag, value[-1]) in problems[0], problems
    assert len([p for p, dummy in BAD]) >= 10


@pytest.mark.parametrize("profile", PROFILES)
def test_values_at_the_edges_are_taken_by_both(profile, engine_envs, tmp_path):
    env = engine_envs[profile]
    cases = [args for where, args in GOOD if where == profile]
    for args, launch, verdict, problems in _cases(env, cases, tmp_path):
        show("good value %s" % json.dumps(args), env, launch, verdict)
        print("  flag check: %s" % ("; ".join(problems) or "accepted"))
        assert verdict["ok"], verdict
        assert problems == [], problems


def parser_choices(env):
    proc = subprocess.run([env.python, "-W", "ignore", os.path.join(HERE, "parser_choices.py"), env.engine],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, "parser_choices.py in %s failed:\n%s" % (env.profile, proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def real_help(env, tmp_path, params=None):
    """What the flag check reads from the engine's real --help (cached where flag_problems looks for it)."""
    params = params or params_of({"engine": env.engine, "model": MODEL}, env, tmp_path)
    adapter, version, launch = launch_of(params)
    record, why = _preflight.read_help(adapter.help_argv(params), launch.env, version, run_command,
                                       os.path.join(params["state_dir"], "engine-flags"))
    assert record, why
    return record


def _variants(choices):
    """Values to try on an option with these choices: ones it lists, the same in another case or with the
    other separator, "0"-padded numbers, "" where None is a choice, and one it never lists."""
    first = choices[0]
    values = [first, choices[-1], first.upper(), "inferops-no-such-choice"]
    values += [first.replace("_", "-"), first.replace("-", "_")]
    values += ["0" + c for c in choices if c.isdigit()][:1]
    values += [""] if "None" in choices else []
    return sorted(set(values))


@pytest.mark.parametrize("profile", PROFILES)
def test_the_help_says_what_the_parser_holds_and_no_value_it_takes_is_refused(profile, engine_envs, tmp_path):
    """Every choice list the check reads from the real --help is the parser's own (and it finds every one), and
    over every option with choices, a sweep of values: never a value the parser takes refused before the stop."""
    env = engine_envs[profile]
    specs = real_help(env, tmp_path)["values"]
    held = parser_choices(env)
    choices = dict((option, spec) for option, spec in specs.items() if "choices" in spec)

    def ordered(found):  # a set of choices (SGLang --sampling-backend) prints in its process's hash order
        return dict((option, dict(spec, choices=sorted(spec["choices"]))) for option, spec in found.items())
    assert ordered(choices) == ordered(held)
    cases = [{option: value} for option in sorted(choices) for value in _variants(choices[option]["choices"])]
    results = _cases(env, cases, tmp_path)
    tally = {"refused by both": 0, "taken by both": 0, "refused by the parser only": 0}
    for args, launch, verdict, problems in results:
        assert verdict["ok"] is False or problems == [], (args, problems)  # never refuse what it takes
        if not verdict["ok"] and not problems:
            tally["refused by the parser only"] += 1
            print("  parser only: %s | %s" % (json.dumps(args), verdict["error"][-150:]))
        else:
            tally["refused by both" if problems else "taken by both"] += 1
        option, value = list(args.items())[0]
        if value == "inferops-no-such-choice":
            assert problems and not verdict["ok"], (args, verdict)
    print("\nSWEEP %s: %d options with choices in --help (= its parser's), %d values: %s"
          % (profile, len(choices), len(results), ", ".join("%d %s" % (n, what) for what, n in tally.items())))


@pytest.mark.parametrize("variant", example_variants("sglang") + example_variants("vllm"))
def test_each_example_variant_passes_the_value_check(variant, engine_envs, tmp_path):
    spec = example_spec(variant)
    env = engine_envs[PINNED[spec["engine"]]]
    params = params_of(spec, env, tmp_path, port=EXAMPLE["serving_port"], host=EXAMPLE["serving_host"])
    adapter, version, launch = launch_of(params)
    record = real_help(env, tmp_path, params)
    fold = _preflight.FOLD.get(adapter.name, "both")
    checked = []
    for flag, values in launch.flags:
        spec_of = record["values"].get(_preflight._option_of(flag, set(record["flags"]), adapter.abbrev))
        for value in _preflight._taken(values, spec_of["nargs"]) if spec_of else []:
            assert _preflight.judge_value(flag, value, spec_of, fold) is None
            checked.append("%s %s" % (flag, value))
    print("\nVALUES %s on %s: %s" % (variant, env.profile, ", ".join(checked) or "none has choices in its --help"))
    problems, how = _preflight.flag_problems(adapter, params, launch, version, run_command)
    assert problems == [] and how["checked"], (problems, how)
    if spec["engine"] == "sglang":
        assert len(checked) >= 5  # quantization, kv_cache_dtype, the attention, MoE runner and FP4 GEMM backends
