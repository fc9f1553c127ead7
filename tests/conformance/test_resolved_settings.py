# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the engines report as their resolved settings, made by their own code (tests/conformance/
resolved_dict.py in each side environment) from the launch argv of an example variant, read by
plugins/module_utils/_resolved.py as inference_server reads a ready server: SGLang 0.5.9 and 0.5.23 the dict
/server_info answers, vLLM 0.34.0 its `non-default args: {...}` log line.

The first run writes them as tests/support/resolved/sglang-0.5.9.json, sglang-0.5.23.json and
vllm-0.34.0.txt (committed; the stand-in serves them: tests/support/stream_server.py --server-info); later
runs check that the engine still makes exactly what the fixture holds."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from ansible_collections.inferops.serving.plugins.module_utils import _engines, _resolved
from conftest import HERE, PROFILES, ROOT

EXAMPLE = yaml.safe_load(open(os.path.join(ROOT, "inventories", "example", "group_vars", "serving.yml")))
FIXTURES = os.path.join(ROOT, "tests", "support", "resolved")
API_KEY = "sk-resolved-fixture-0123456789"
ADMIN_KEY = "admin-resolved-fixture-0123456789"
HF_TOKEN = "hf_resolvedfixture0123456789"
VARIANT = {"sglang": "nextn", "vllm": "vllm_mtp"}


def variant_args(name):
    """The example variant's engine_args, those of what it extends under its own."""
    spec = EXAMPLE["serving_variants"][name]
    args = dict(variant_args(spec["extends"])) if spec.get("extends") else {}
    args.update(spec.get("engine_args") or {})
    return args


def launch_argv(env):
    """The example variant's argv as inference_server launches it in this environment (less the executable), with
    an API key (SGLang: --api-key and --admin-api-key on the argv; vLLM: VLLM_API_KEY, off the argv, and an
    --hf-token that vLLM itself shows as ***)."""
    engine_args = variant_args(VARIANT[env.engine])
    if env.profile == "sglang-0.5.23":  # 0.5.23 split it: --cuda-graph-max-bs is an ambiguous prefix there
        engine_args["cuda_graph_max_bs_decode"] = engine_args.pop("cuda_graph_max_bs")
    if env.engine == "sglang":
        engine_args["admin_api_key"] = ADMIN_KEY
    else:
        engine_args["hf_token"] = HF_TOKEN
    params = {"name": "qwen", "engine": env.engine, "model": EXAMPLE["serving_model"], "host": "0.0.0.0",
              "port": 30000 if env.engine == "sglang" else 8000, "engine_args": engine_args, "env": {},
              "python": None, "executable": None, "command": None, "api_key": API_KEY, "served_model_name": None}
    params.update(env.launcher())
    launch = _engines.adapter(env.engine).build(params)
    return params, launch, launch.argv[1:]


def engine_made(env, argv):
    proc = subprocess.run([env.python, "-W", "ignore", os.path.join(HERE, "resolved_dict.py"), env.engine],
                          input=json.dumps(argv), capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, "resolved_dict.py in %s failed:\n%s" % (env.profile, proc.stderr[-3000:])
    lines = proc.stdout.splitlines()
    return json.loads(lines[-1]), lines


def fixture(name, content):
    """The committed fixture; written when absent (the first run), else returned as committed."""
    path = os.path.join(FIXTURES, name)
    if not os.path.exists(path):
        os.makedirs(FIXTURES, exist_ok=True)
        with open(path, "w") as handle:
            handle.write(content)
        print("wrote %s" % os.path.relpath(path, ROOT))
    with open(path) as handle:
        return handle.read()


def _assert_no_secret(kept):
    text = json.dumps(kept)
    for secret in (API_KEY, ADMIN_KEY, HF_TOKEN):
        assert secret not in text


@pytest.mark.parametrize("profile", [p for p in PROFILES if p.startswith("sglang-")])
def test_sglang_server_info_is_read_as_the_engine_makes_it(profile, engine_envs):
    env = engine_envs[profile]
    params, launch, argv = launch_argv(env)
    made, dummy = engine_made(env, argv)
    info = made["server_info"]
    committed = json.loads(fixture("%s.json" % profile, json.dumps(info, indent=1, sort_keys=True) + "\n"))
    assert committed == info, "%s no longer makes what tests/support/resolved/%s.json holds" % (profile, profile)

    # the real dict, with the key in clear as SGLang serves it (0.5.23 also in launch_command)
    assert info["api_key"] == API_KEY and info["admin_api_key"] == ADMIN_KEY
    assert info["version"] == env.version
    parsed = _resolved.parse_server_info(json.dumps(info))
    kept = _resolved.kept("sglang", "GET /server_info", parsed, secrets=_resolved._fingerprint.secret_values(params))
    settings = kept["settings"]
    assert settings["api_key"] == settings["admin_api_key"] == _resolved.MASK
    _assert_no_secret(kept)
    assert settings["tp_size"] == 8 and settings["speculative_algorithm"] == "NEXTN"
    assert settings["speculative_num_draft_tokens"] == 6 and settings["max_prefill_tokens"] == 16384  # not masked
    assert settings["mem_fraction_static"] == 0.8 and settings["attention_backend"] == "triton"
    assert settings.get("ssl_keyfile_password", None) is None  # unset: stays null (0.5.23; 0.5.9 has no such field)
    assert "dropped" not in kept and len(json.dumps(kept)) < _resolved.TOTAL_MAX + 1000
    if env.version == "0.5.23":
        assert API_KEY in info["launch_command"] and "--api-key %s" % _resolved.MASK in settings["launch_command"]
    masked = sorted(k for k, v in settings.items() if v == _resolved.MASK)
    print("\n%s /server_info: %d fields, digest %s; masked: %s"
          % (profile, len(settings), kept["digest"], ", ".join(masked)))
    # the same digest whatever launch-specific fields say
    assert _resolved.digest(dict(settings, port=1, random_seed=7, launch_command="x")) == kept["digest"]


@pytest.mark.parametrize("profile", [p for p in PROFILES if p.startswith("vllm-")])
def test_vllm_non_default_args_line_is_read_as_the_engine_logs_it(profile, engine_envs):
    env = engine_envs[profile]
    params, launch, argv = launch_argv(env)
    assert API_KEY not in argv and launch.env["VLLM_API_KEY"] == API_KEY  # vLLM's key stays off the argv
    dummy, lines = engine_made(env, argv)
    logged = [line for line in lines if _resolved.NON_DEFAULT in line]
    assert len(logged) == 1, lines[-20:]
    committed = fixture("%s.txt" % profile, logged[0] + "\n")
    args = _resolved.find_non_default_args(logged)
    assert _resolved.find_non_default_args(committed.splitlines()) == args, (
        "%s no longer logs what tests/support/resolved/%s.txt holds" % (profile, profile))
    assert args["tensor_parallel_size"] == 8 and args["gpu_memory_utilization"] == 0.85
    assert args["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 2}
    assert args["trust_remote_code"] is True and args["model_tag"] == EXAMPLE["serving_model"]
    assert args["hf_token"] == "***"  # vLLM's own redaction (vllm/entrypoints/common/startup.py)
    kept = _resolved.kept("vllm", "log", args, secrets=_resolved._fingerprint.secret_values(params), given=args)
    assert kept["settings"]["hf_token"] == _resolved.MASK and kept["given"] == sorted(args)
    _assert_no_secret(kept)
    print("\n%s non-default args: %s" % (profile, json.dumps(kept["settings"], sort_keys=True)))
