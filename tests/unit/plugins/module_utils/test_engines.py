# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _engines: each engine's argv and environment, flag spelling, the version and health probes, the served model id, health timeouts."""

from __future__ import annotations

import json
import sys

import pytest

from launch_params import SGLANG_ARGS, build, params
from run_command import run_command

from ansible_collections.inferops.serving.plugins.module_utils import _engines, _fingerprint


def test_sglang_example_argv_exactly():
    launch = build(engine="sglang", python="python", engine_args=SGLANG_ARGS)
    print(" ".join(launch.argv))
    assert launch.argv == [
        "python", "-m", "sglang.launch_server", "--model-path", "M", "--tp-size", "8",
        "--quantization", "modelopt_fp4", "--moe-runner-backend", "flashinfer_cutlass",
        "--fp4-gemm-backend", "flashinfer_cudnn", "--speculative-algorithm", "NEXTN",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--host", "127.0.0.1", "--port", "30000"]


def test_sglang_api_key_served_name_and_override():
    launch = build(engine="sglang", api_key="s3cret", served_model_name="qwen",
                   engine_args={"model-path": "/other", "tensor_parallel_size": 2, "enable_metrics": True,
                                "disable_cuda_graph": False, "watchdog_timeout": None})
    argv = launch.argv
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert argv.count("--model-path") == 1 and argv[argv.index("--model-path") + 1] == "/other"
    assert "--enable-metrics" in argv and "--disable-cuda-graph" not in argv and "--watchdog-timeout" not in argv
    assert argv[-4:] == ["--served-model-name", "qwen", "--api-key", "s3cret"]
    assert launch.public_argv[-1] == _fingerprint.REDACTED
    assert launch.probe_model == "qwen"


def test_vllm_mtp_speculative_config_json():
    launch = build(engine="vllm", model="Qwen/Q", port=8000, api_key="k",
                   engine_args={"tensor_parallel_size": 4,
                                "speculative_config": {"num_speculative_tokens": 2, "method": "mtp"}})
    argv = launch.argv
    assert argv[:3] == ["vllm", "serve", "Qwen/Q"]
    i = argv.index("--speculative-config")
    assert argv[i + 1] == '{"method":"mtp","num_speculative_tokens":2}'
    assert json.loads(argv[i + 1]) == {"method": "mtp", "num_speculative_tokens": 2}
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"
    # the key goes where vLLM reads it without the argv (/proc/PID/cmdline is world-readable)
    assert "--api-key" not in argv and "k" not in argv and launch.env["VLLM_API_KEY"] == "k"
    assert "VLLM_API_KEY" not in json.dumps(launch.fingerprint)


def test_vllm_executable():
    assert build(engine="vllm", executable="/opt/v/bin/vllm").argv[0] == "/opt/v/bin/vllm"


def test_trtllm_snake_case_flags():
    launch = build(engine="trtllm", model="/m", port=8001,
                   engine_args={"backend": "pytorch", "tp_size": 8, "ep-size": 8,
                                "kv_cache_free_gpu_memory_fraction": 0.85, "trust_remote_code": True,
                                "extra_llm_api_options": "/etc/x.yaml"})
    assert launch.argv == ["trtllm-serve", "serve", "/m", "--backend", "pytorch", "--tp_size", "8",
                           "--ep_size", "8", "--kv_cache_free_gpu_memory_fraction", "0.85", "--trust_remote_code",
                           "--extra_llm_api_options", "/etc/x.yaml", "--host", "127.0.0.1", "--port", "8001"]


def test_trtllm_and_transformers_refuse_api_key():
    for engine in ("trtllm", "transformers"):
        with pytest.raises(_engines.EngineError, match="API key"):
            build(engine=engine, api_key="k")
    with pytest.raises(_engines.EngineError, match="served-model-name"):
        build(engine="transformers", served_model_name="x")


def test_transformers_argv_and_offline_env(tmp_path):
    launch = build(engine="transformers", model=str(tmp_path), port=8000, executable="/v/bin/transformers",
                   engine_args={"device": "cpu", "continuous_batching": True})
    assert launch.argv == ["/v/bin/transformers", "serve", str(tmp_path), "--device", "cpu",
                           "--continuous-batching", "--host", "127.0.0.1", "--port", "8000"]
    assert launch.env == {"HF_HUB_OFFLINE": "1"}
    assert build(engine="transformers", model="org/remote").env == {}
    assert build(engine="transformers", model=str(tmp_path), env={"HF_HUB_OFFLINE": "0"}).env["HF_HUB_OFFLINE"] == "0"


def test_command_argv_keeps_shell_characters_in_one_argument():
    cmd = ["/bin/server", "--banner", "a b; rm -rf / && echo $HOME `id` | cat > x"]
    launch = build(engine="command", command=cmd, engine_args={"extra_flag": 1})
    assert launch.argv == cmd + ["--extra-flag", "1"]
    assert len(launch.argv) == 5


def test_command_placeholders_take_the_instance_host_and_port_as_plain_strings():
    cmd = ["/bin/server", "--port", "{port}", "--bind={host}:{port}", "{portx}", "{0}", "$(id) {host}"]
    launch = build(engine="command", command=cmd, host="10.1.2.3", port=8101)
    assert launch.argv == ["/bin/server", "--port", "8101", "--bind=10.1.2.3:8101", "{portx}", "{0}", "$(id) 10.1.2.3"]
    other = build(engine="command", command=cmd, host="10.1.2.3", port=8102)
    assert launch.fingerprint != other.fingerprint  # two replicas of one command are two configurations


def test_engine_args_must_not_move_host_or_port():
    with pytest.raises(_engines.EngineError, match="port parameter"):
        build(engine="vllm", engine_args={"port": 1})


def test_flag_values():
    assert _engines.flag_values("--x", True) == []
    assert _engines.flag_values("--x", False) is None
    assert _engines.flag_values("--x", None) is None
    assert _engines.flag_values("--x", [1, 2, 4]) == ["1", "2", "4"]
    assert _engines.flag_values("--x", {"b": 1, "a": [1]}) == ['{"a":[1],"b":1}']
    assert _engines.flag_name("cuda_graph_max_bs") == "--cuda-graph-max-bs"
    assert _engines.flag_name("--Odd_Flag") == "--Odd_Flag"


def test_version_is_read_with_the_given_python():
    pytest.importorskip("transformers")  # in the dev venv, not in make test-core-latest's
    p = params(engine="transformers", python=sys.executable)
    assert _engines.adapter("transformers").version(p, run_command)
    assert _engines.adapter("command").version(p, run_command) is None
    assert _engines.adapter("sglang").version(params(python=sys.executable), run_command) is None  # not installed


def test_probe_and_port_in_use():
    import socket
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        assert _engines.port_in_use("127.0.0.1", port) is True
    finally:
        sock.close()
    assert _engines.probe("127.0.0.1", port, "m").state == "down"


def test_each_engine_gets_its_own_spelling():
    # vLLM has only --tensor-parallel-size (vllm 0.34.0 vllm/engine/arg_utils.py) and negatable booleans
    argv = build(engine="vllm", engine_args={"tp_size": 4, "enable_prefix_caching": False, "trust_remote_code": True}).argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4" and "--tp-size" not in argv
    assert "--no-enable-prefix-caching" in argv and "--trust-remote-code" in argv
    # a key written as a flag is taken as written
    assert "--tp-size" in build(engine="vllm", engine_args={"--tp-size": 4}).argv
    # SGLang takes both spellings; false leaves its flag out
    sglang = build(engine="sglang", engine_args={"tp_size": 8, "disable_cuda_graph": False}).argv
    assert "--tp-size" in sglang and "--disable-cuda-graph" not in sglang and "--no-disable-cuda-graph" not in sglang


def test_served_model_id_per_engine(tmp_path):
    model_dir = tmp_path / "Qwen3-8B"
    model_dir.mkdir()
    # trtllm-serve serves a local directory under its basename; a hub id as given
    assert build(engine="trtllm", model=str(model_dir) + "/").probe_model == "Qwen3-8B"
    assert build(engine="trtllm", model="Qwen/Qwen3-8B").probe_model == "Qwen/Qwen3-8B"
    assert build(engine="vllm", model=str(model_dir)).probe_model == str(model_dir)
    assert build(engine="sglang", served_model_name="q").probe_model == "q"


def test_health_timeouts_cover_the_engines_own_health_check():
    assert build(engine="sglang").health_timeout >= 20  # SGLANG_HEALTH_CHECK_TIMEOUT, 20 s by default
    assert build(engine="vllm").health_timeout == 10.0
