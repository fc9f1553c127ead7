# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the real SGLang and vLLM take: every engine variant of inventories/example and every engine example
of the docs, built into an argv by the collection's own adapters, parsed by the engine's real parser
(SGLang 0.5.9 and 0.5.23, vLLM 0.34.0; tests/conformance/parse_argv.py), and inference_server's flag
check (the engine's real --help, run from its side environment) agreeing with that parser.

`pytest -s` prints a PARSED / REFUSED line per argv (what the closing notes quote)."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.inferops.serving.plugins.module_utils import _engines, _preflight
from ansible_collections.inferops.serving.plugins.plugin_utils import _variants
from conftest import ROOT
from run_command import run_command

EXAMPLE = yaml.safe_load(open(os.path.join(ROOT, "inventories", "example", "group_vars", "serving.yml")))
PINNED = {"sglang": "sglang-0.5.9", "vllm": "vllm-0.34.0"}  # what inventories/example says it is for
NEWEST_SGLANG = "sglang-0.5.23"


def params_of(spec, env, state_dir, name="qwen", host="0.0.0.0", port=30000):
    """inference_server's parameters for a resolved variant, as roles/serve_variant passes them; the
    variant's own launcher (/opt/sglang/bin/python, /opt/vllm/bin/vllm) replaced by the side environment's."""
    params = {"name": name, "engine": spec["engine"], "model": spec["model"], "host": host, "port": port,
              "engine_args": spec.get("engine_args") or {}, "env": spec.get("env") or {}, "python": None,
              "executable": None, "command": None, "api_key": spec.get("api_key"),
              "served_model_name": spec.get("served_model_name"), "state_dir": str(state_dir),
              "flag_check": True}
    params.update(env.launcher())
    return params


def launch_of(params):
    adapter = _engines.adapter(params["engine"])
    version = adapter.version(params, run_command)
    return adapter, version, adapter.build(params, version)


def flag_check(params):
    """inference_server's verdict before a stop: the problems its flag check finds (the real --help)."""
    adapter, version, launch = launch_of(params)
    problems, checked = _preflight.flag_problems(adapter, params, launch, version, run_command)
    assert checked and checked["checked"], checked
    return problems


def real_parse(env, params):
    launch = launch_of(params)[2]
    return launch, env.parse([launch.argv[1:]])[0]


def show(label, env, launch, verdict):
    said = "PARSED " if verdict["ok"] else "REFUSED"
    print("\n%s %s | %s\n  argv: %s" % (said, env.profile, label, " ".join(launch.public_argv)))
    if not verdict["ok"]:
        print("  rc %s: %s" % (verdict["rc"], verdict["error"]))


def example_variants(engine):
    resolved = _variants.resolve_all(EXAMPLE["serving_variants"], EXAMPLE["serving_engine"], EXAMPLE["serving_model"])
    return sorted(name for name, spec in resolved.items() if spec["engine"] == engine)


def example_spec(name):
    return _variants.resolve(EXAMPLE["serving_variants"], name, EXAMPLE["serving_engine"], EXAMPLE["serving_model"])


@pytest.mark.parametrize("variant", example_variants("sglang") + example_variants("vllm"))
def test_each_example_variant_is_taken_by_the_engine_release_it_names(variant, engine_envs, tmp_path):
    spec = example_spec(variant)
    env = engine_envs[PINNED[spec["engine"]]]
    params = params_of(spec, env, tmp_path, port=EXAMPLE["serving_port"], host=EXAMPLE["serving_host"])
    launch, verdict = real_parse(env, params)
    show("inventories/example variant %s" % variant, env, launch, verdict)
    assert verdict["ok"], verdict
    args = verdict["args"]
    assert args["port"] == 30000 and args["host"] == "0.0.0.0"
    if spec["engine"] == "sglang":
        # the parser's own destinations (0.5.9 srt/server_args.py: --tensor-parallel-size and --tp-size share one)
        assert args["model_path"] == spec["model"] and args["tensor_parallel_size"] == 8
        assert args["cuda_graph_max_bs"] == 128 and args["quantization"] == "modelopt_fp4"
        assert args["mem_fraction_static"] == pytest.approx(0.80) and args["enable_metrics"] is True
        if variant == "nextn":
            assert args["speculative_algorithm"] == "NEXTN" and args["speculative_num_draft_tokens"] == 6
    else:
        assert args["model_tag"] == spec["model"] and args["tensor_parallel_size"] == 8
        assert args["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 2}
        assert args["trust_remote_code"] is True
    assert flag_check(params) == []


def test_the_newest_sglang_refuses_the_example_and_so_does_the_check_before_the_stop(engine_envs, tmp_path):
    """SGLang 0.5.23 has only --cuda-graph-max-bs-decode/-prefill: argparse calls --cuda-graph-max-bs ambiguous
    and exits 2. The flag check says the same from that release's --help; the spelling the example's comment
    gives for newer releases is taken by both."""
    env = engine_envs[NEWEST_SGLANG]
    for variant in example_variants("sglang"):
        params = params_of(example_spec(variant), env, tmp_path)
        launch, verdict = real_parse(env, params)
        show("inventories/example variant %s" % variant, env, launch, verdict)
        assert not verdict["ok"] and verdict["rc"] == 2
        assert verdict["error"].endswith("error: ambiguous option: --cuda-graph-max-bs could match "
                                         "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"), verdict
        assert flag_check(params) == [
            "engine sglang 0.5.23 does not accept --cuda-graph-max-bs: it is ambiguous (it abbreviates "
            "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill) (set flag_check: false in the variant if "
            "its --help is incomplete)"]

        args = dict(params["engine_args"])
        args["cuda_graph_max_bs_decode"] = args.pop("cuda_graph_max_bs")
        fixed = dict(params, engine_args=args)
        launch, verdict = real_parse(env, fixed)
        show("variant %s with cuda_graph_max_bs_decode" % variant, env, launch, verdict)
        assert verdict["ok"], verdict
        assert verdict["args"]["cuda_graph_max_bs_decode"] == 128
        assert flag_check(fixed) == []


# (engine, engine_args): spellings a user may write; for each the flag check must agree with the parser
SPELLINGS = [
    ("sglang", {"tp_size": 2}),
    ("sglang", {"tensor_parallel_size": 2}),
    ("sglang", {"tp": 2}),  # argparse takes a unique prefix of --tp-size
    ("sglang", {"cuda_graph_max_bs": 64}),  # 0.5.9: a flag; 0.5.23: ambiguous
    ("sglang", {"cuda_graph_max_bs_decode": 64}),  # 0.5.23 only
    ("sglang", {"speculative_algo": "EAGLE"}),  # a unique prefix of --speculative-algorithm
    ("sglang", {"enable_metric": True}),  # prefix of --enable-metrics and --enable-metrics-for-all-schedulers
    ("sglang", {"mem_frac": 0.8}),  # --mem-fraction-static
    ("sglang", {"schedule_conservatism": 0.3}),  # a typo
    ("vllm", {"tp_size": 2}),  # rewritten to --tensor-parallel-size
    ("vllm", {"--tp-size": 2}),  # taken as written: vLLM has no --tp-size
    ("vllm", {"tensor_parallel_size": 2, "enable_prefix_caching": False}),  # --no-enable-prefix-caching
    ("vllm", {"enforce_eager": False}),  # --no-enforce-eager
    ("vllm", {"gpu_memory_util": 0.9}),  # a unique prefix of --gpu-memory-utilization
    ("vllm", {"max_num_seq": 64}),  # --max-num-seqs
    ("vllm", {"speculative_config": {"method": "mtp", "num_speculative_tokens": 1}}),
    ("vllm", {"enable_chunk_prefill": True}),  # a typo
]


@pytest.mark.parametrize("profile", ["sglang-0.5.9", "sglang-0.5.23", "vllm-0.34.0"])
def test_the_flag_check_agrees_with_the_engines_own_parser(profile, engine_envs, tmp_path):
    """Every spelling: refused before the stop exactly when the engine's parser would refuse it (exit 2
    after the old server was stopped)."""
    env = engine_envs[profile]
    cases = [args for engine, args in SPELLINGS if engine == env.engine]
    model = "Qwen/Qwen3-0.6B"
    params = [params_of({"engine": env.engine, "model": model, "engine_args": args}, env, tmp_path) for args in cases]
    launches = [launch_of(p)[2] for p in params]
    verdicts = env.parse([launch.argv[1:] for launch in launches])
    seen = {True: 0, False: 0}
    for args, param, launch, verdict in zip(cases, params, launches, verdicts):
        show("engine_args %s" % args, env, launch, verdict)
        problems = flag_check(param)
        print("  flag check: %s" % ("; ".join(problems) or "accepted"))
        assert (problems == []) == verdict["ok"], (args, problems, verdict)
        if "--tp-size" in args:  # the adapter knows vLLM's own spelling: it comes first
            assert "nearest: --tensor-parallel-size," in problems[0], problems
        seen[verdict["ok"]] += 1
    assert seen[True] and seen[False], seen  # both verdicts occur for every release


def doc_examples():
    """(where, engine, model, engine_args, env) of every SGLang / vLLM example in the docs of
    inference_server (its EXAMPLES and the role's README)."""
    import importlib
    module = importlib.import_module("ansible_collections.inferops.serving.plugins.modules.inference_server")
    found = []
    for task in yaml.safe_load(module.EXAMPLES):
        args = task.get("inferops.serving.inference_server") or {}
        if args.get("engine") in ("sglang", "vllm") and args.get("state", "started") != "stopped":
            found.append(("inference_server EXAMPLES: %s" % task["name"], args["engine"], args["model"],
                          args.get("engine_args") or {}, args.get("env") or {}))
    readme = open(os.path.join(ROOT, "roles", "inference_server", "README.md")).read()
    for block in readme.split("```yaml")[1:]:
        for task in yaml.safe_load(block.split("```")[0]):
            role_vars = task.get("vars") or {}
            if role_vars.get("inference_server_engine") in ("sglang", "vllm"):
                found.append(("roles/inference_server/README.md", role_vars["inference_server_engine"],
                              role_vars["inference_server_model"], role_vars.get("inference_server_engine_args") or {},
                              role_vars.get("inference_server_env") or {}))
    return found


@pytest.mark.parametrize("example", doc_examples(), ids=lambda example: example[0])
def test_every_engine_example_in_the_docs_is_taken_by_every_release(example, engine_envs, tmp_path):
    where, engine, model, engine_args, env_vars = example
    for profile in sorted(p for p in engine_envs if p.startswith(engine + "-")):
        env = engine_envs[profile]
        params = params_of({"engine": engine, "model": model, "engine_args": engine_args, "env": env_vars},
                           env, tmp_path)
        launch, verdict = real_parse(env, params)
        show(where, env, launch, verdict)
        assert verdict["ok"], verdict
        assert flag_check(params) == []
