# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of inference_server: adapters' argv, fingerprint, state files, systemd unit, validation."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import types

import pytest

from run_command import run_command

from ansible_collections.inferops.serving.plugins.module_utils import _engines, _fingerprint, _idle_check, _server, _supervisor
from ansible_collections.inferops.serving.plugins.modules import inference_server

SGLANG_ARGS = {"tp_size": 8, "quantization": "modelopt_fp4", "moe_runner_backend": "flashinfer_cutlass",
               "fp4_gemm_backend": "flashinfer_cudnn", "speculative_algorithm": "NEXTN",
               "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}


def params(**kw):
    base = dict(name="t", engine="sglang", model="M", host="127.0.0.1", port=30000, api_key=None,
                served_model_name=None, engine_args={}, command=None, executable=None, python=None, env={},
                variant=None, wait=True, ready_timeout=1800.0, stop_timeout=120.0, state_dir="/nonexistent",
                log_dir="/nonexistent", supervisor="process", state="started", ready_wait=None, gpu_check=None,
                lock_timeout=60.0, switch_id=None, stop_grace=None)
    base.update(kw)
    return base


def build(**kw):
    p = params(**kw)
    return _engines.adapter(p["engine"]).build(p)


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


def test_fingerprint_stable_across_dict_order():
    a = build(engine="sglang", engine_args=dict(SGLANG_ARGS), env={"A": "1", "B": "2"})
    b = build(engine="sglang", engine_args=dict(reversed(list(SGLANG_ARGS.items()))), env={"B": "2", "A": "1"})
    assert a.argv != b.argv
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint.startswith("sha256:") and len(a.fingerprint) == 7 + 64


def test_fingerprint_excludes_secrets_but_sees_changes():
    base = build(engine="vllm", api_key="one", env={"HF_TOKEN": "t1", "NCCL_DEBUG": "INFO"})
    assert build(engine="vllm", api_key="two", env={"HF_TOKEN": "t2", "NCCL_DEBUG": "INFO"}).fingerprint == base.fingerprint
    assert build(engine="vllm", api_key="one", env={"HF_TOKEN": "t1", "NCCL_DEBUG": "WARN"}).fingerprint != base.fingerprint
    assert build(engine="vllm", api_key="one", engine_args={"x": 1},
                 env={"HF_TOKEN": "t1", "NCCL_DEBUG": "INFO"}).fingerprint != base.fingerprint
    assert build(engine="vllm", model="other", api_key="one",
                 env={"HF_TOKEN": "t1", "NCCL_DEBUG": "INFO"}).fingerprint != base.fingerprint
    versioned = _engines.adapter("vllm").build(params(engine="vllm", api_key="one",
                                                      env={"HF_TOKEN": "t1", "NCCL_DEBUG": "INFO"}), "0.11.0")
    assert versioned.fingerprint != base.fingerprint
    assert "one" not in json.dumps(base.public_argv)
    salt = _fingerprint.new_salt()
    assert _fingerprint.secrets_digest(salt, {"k": "one"}) != _fingerprint.secrets_digest(salt, {"k": "two"})
    assert _fingerprint.is_secret_env("OPENAI_API_KEY") and not _fingerprint.is_secret_env("CUDA_VISIBLE_DEVICES")


def test_version_is_read_with_the_given_python():
    pytest.importorskip("transformers")  # in the dev venv, not in make test-core-latest's
    p = params(engine="transformers", python=sys.executable)
    assert _engines.adapter("transformers").version(p, run_command)
    assert _engines.adapter("command").version(p, run_command) is None
    assert _engines.adapter("sglang").version(params(python=sys.executable), run_command) is None  # not installed


def test_state_store_atomic_0600_and_corrupt(tmp_path):
    store = _supervisor.StateStore("x", str(tmp_path / "state"))
    assert store.load() is None
    store.save({"pid": 1, "argv": ["a"]})
    assert store.load() == {"pid": 1, "argv": ["a"]}
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert os.listdir(str(tmp_path / "state")) == ["x.json"]  # no temp file left
    with open(store.path, "w") as handle:
        handle.write("{not json")
    assert store.load() == {"corrupt": True}
    store.clear()
    store.clear()
    assert store.load() is None


def test_marker_is_per_name_and_state_dir(tmp_path):
    assert _supervisor.marker_value("a", "/x") != _supervisor.marker_value("a", "/y")
    assert _supervisor.marker_value("a", "/x") != _supervisor.marker_value("b", "/x")
    assert _supervisor.marker_value("a", "/x").startswith("a@")


def test_auto_supervisor_is_process_without_systemd():
    assert _supervisor.choose("process") == "process"
    if not _supervisor.systemd_usable():
        assert _supervisor.choose("auto") == "process"


def test_systemd_quoting():
    assert _supervisor.systemd_quote("plain") == "plain"
    assert _supervisor.systemd_quote("a b") == '"a b"'
    assert _supervisor.systemd_quote('say "hi"') == '"say \\"hi\\""'
    assert _supervisor.systemd_quote("100%") == "100%%"
    assert _supervisor.systemd_quote("$HOME") == "$$HOME"
    assert _supervisor.systemd_quote('{"method":"mtp"}') == '"{\\"method\\":\\"mtp\\"}"'


def test_systemd_unit_renders_and_verifies(tmp_path):
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "/m dir", "--speculative-config",
            '{"method":"mtp","num_speculative_tokens":2}', "--x", "100%", "$HOME"]
    text = _supervisor.render_unit("qwen", argv, {"A": "x y", "INFEROPS_INSTANCE": "qwen@1"},
                                   str(tmp_path / "qwen.log"), 90.4)
    assert "KillMode=mixed" in text
    assert "TimeoutStopSec=90" in text
    assert 'Environment="A=x y"' in text
    unit = tmp_path / "inferops-qwen.service"
    unit.write_text(text)
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("systemd-analyze is not installed")
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "inferops-qwen.service" not in proc.stderr, proc.stderr
    bad = tmp_path / "inferops-bad.service"
    bad.write_text(text.replace("ExecStart=" + sys.executable, "ExecStart=/nonexistent/engine"))
    proc = subprocess.run([analyze, "verify", str(bad)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0  # the check is not vacuous


def test_validation_messages():
    errors = inference_server.validate(params(engine="command", command=None, port=70000, name="bad name",
                                              stop_timeout=0, env={"1X": "a"}))
    text = " ".join(errors)
    assert "engine=command needs command" in text
    assert "port must be between 1 and 65535" in text
    assert "name 'bad name'" in text
    assert "stop_timeout must be a positive" in text
    assert "'1X'" in text
    assert inference_server.validate(params()) == []
    assert "only for engine=command" in " ".join(inference_server.validate(params(command=["x"])))
    check = dict((k, v.get("default")) for k, v in _idle_check.ARGUMENT_SPEC.items())
    text = " ".join(inference_server.validate(params(ready_wait=-1, gpu_check=dict(check, reclaim=True, kill_grace=60))))
    assert "ready_wait must be 0 or more" in text and "gpu_check: kill_grace (60) must be less than timeout" in text
    assert inference_server.validate(params(ready_wait=0, gpu_check=check)) == []


class _Sup(object):
    def __init__(self, exits_after=None, code=1):
        self.exits_after = exits_after
        self.code = code
        self.calls = 0

    def ending(self, record):
        self.calls += 1
        if self.exits_after is not None and self.calls > self.exits_after:
            return {"code": self.code, "signal": None, "signum": None, "message": "exited with code %d" % self.code}
        return None


def test_wait_ready_limit_elapsed_and_deadline(monkeypatch):
    now = [100.0]
    answers = []

    def probe(*_a, **_k):
        return _engines.Probe(answers.pop(0) if answers else "loading", "503 loading")

    monkeypatch.setattr(_engines, "probe", probe)

    def clock():
        return now[0]

    def sleep(seconds):
        now[0] += seconds

    launch = types.SimpleNamespace(probe_model="m", health_timeout=10.0)
    p = params(ready_timeout=10.0)
    # the limit ends this call's wait: None, the server keeps loading
    assert _server.wait_ready(_Sup(), {}, launch, p, clock=clock, sleep=sleep, limit=1.0) is None
    assert now[0] == 101.0
    # a resumed wait counts from the start: ready 2.5 s later is 8.5 s after a start 6 s ago
    answers[:] = ["loading"] * 10 + ["ready"]
    assert _server.wait_ready(_Sup(), {}, launch, p, clock=clock, sleep=sleep, elapsed=6.0) == 8.5
    # and the deadline counts from the start too: 9 s loaded already, 1 s left
    with pytest.raises(_server.ServerError, match="not ready within ready_timeout=10.0s"):
        _server.wait_ready(_Sup(), {}, launch, p, clock=clock, sleep=sleep, elapsed=9.0, limit=5.0)
    with pytest.raises(_server.ServerError, match="exited with code 1 before it was ready") as known:
        _server.wait_ready(_Sup(exits_after=2), {}, launch, p, clock=clock, sleep=sleep)
    assert known.value.extra["rc"] == 1
    assert known.value.extra["exit"]["code"] == 1


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


def test_systemd_supervisor_drives_systemctl(tmp_path):
    calls = []

    def run(argv, **dummy):
        calls.append(argv[1:])
        if argv[1] == "show":
            return 0, "MainPID=%d\nActiveState=active\nExecMainStatus=0\n" % os.getpid(), ""
        return 0, "", ""

    sup = _supervisor.SystemdSupervisor("q", str(tmp_path / "st"), str(tmp_path / "log"), unit_dir=str(tmp_path),
                                        stop_timeout=30, run=run)
    started = sup.start([os.path.basename(sys.executable), "-c", "pass"], {"A": "1"})
    unit = (tmp_path / "inferops-q.service").read_text()
    assert "ExecStart=%s -c pass" % shutil.which(os.path.basename(sys.executable)) in unit
    assert "Environment=INFEROPS_INSTANCE=%s" % sup.marker in unit and "KillMode=mixed" in unit
    assert ["daemon-reload"] in calls and ["restart", "inferops-q.service"] in calls
    assert started["pid"] == os.getpid() and sup.exit_code(started) is None and sup.alive(started)
    sup.stop(started, 1)
    assert ["stop", "inferops-q.service"] in calls


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
