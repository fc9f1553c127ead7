# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _resolved: reading what an engine resolved (SGLang's /server_info, vLLM's non-default args log
line and vllm:cache_config_info labels, `transformers serve --help` defaults with the argv), redacting its
credentials, bounding its size; on the real texts (tests/support/resolved/, made by the engines' own code in
tests/conformance/test_resolved_settings.py; fixtures/transformers-5.24-serve-help.txt), and against the
stand-in and small HTTP servers for the reads."""

from __future__ import annotations

import http.server
import json
import os
import socket
import threading

import pytest

import stand_in

stand_in.importable()
from ansible_collections.inferops.serving.plugins.module_utils import _engines, _preflight, _resolved  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
RESOLVED = os.path.join(ROOT, "tests", "support", "resolved")
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
API_KEY = "sk-resolved-fixture-0123456789"
ADMIN_KEY = "admin-resolved-fixture-0123456789"
MASK = _resolved.MASK


def sglang_info(version="0.5.23"):
    with open(os.path.join(RESOLVED, "sglang-%s.json" % version)) as handle:
        return json.load(handle)


def vllm_line():
    with open(os.path.join(RESOLVED, "vllm-0.34.0.txt")) as handle:
        return handle.read().splitlines()[0]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---- redaction

@pytest.mark.parametrize("name", ["api_key", "admin_api_key", "hf_token", "ssl_keyfile_password", "watermark_key",
                                  "watermark_key_b", "API_KEY", "apiKey", "client_secret", "secret_access_key_id",
                                  "key_2", "--api-key", "--hf-token", "db_passwd"])
def test_credential_names(name):
    assert _resolved.secret_name(name)


@pytest.mark.parametrize("name", ["max_prefill_tokens", "speculative_num_draft_tokens", "max_total_num_tokens",
                                  "tokenizer_path", "tokenizer_mode", "speculative_token_map", "stop_token_ids",
                                  "ssl_keyfile", "kv_cache_dtype", "keyfile", "monkey", "tokens",
                                  "tokenizer_metrics_custom_labels_header", "skip_tokenizer_init"])
def test_setting_names_that_only_contain_key_or_token_are_kept(name):
    assert not _resolved.secret_name(name)


def test_redact_masks_credentials_at_any_depth_texts_and_argvs():
    value = {"api_key": "sk-1", "admin_api_key": None, "hf_token": "", "nested": {"deep": [{"Password": "p"}]},
             "launch_command": "--model-path M --api-key sk-1 --port 1 --hf-token=hf_x --ssl-keyfile /k.pem",
             "argv": ["serve", "M", "--api-key", "sk-1", "--tp", "2"], "note": "the key sk-other is here",
             "max_prefill_tokens": 16384}
    out = _resolved.redact(value, ["sk-other"])
    assert out["api_key"] == MASK and out["nested"]["deep"][0]["Password"] == MASK
    assert out["admin_api_key"] is None and out["hf_token"] == ""  # unset stays unset
    assert out["launch_command"] == "--model-path M --api-key %s --port 1 --hf-token=%s --ssl-keyfile /k.pem" % (MASK, MASK)
    assert out["argv"] == ["serve", "M", "--api-key", MASK, "--tp", "2"]
    assert out["note"] == "the key %s is here" % MASK and out["max_prefill_tokens"] == 16384
    # named like a credential, but a flag or a number: a setting (vLLM's allow_credentials, SGLang's buckets)
    settings = {"allow_credentials": True, "bucket_time_to_first_token": [0.1, 0.5], "kt_max_deferred_experts_per_token": 2,
                "api_key": ["k1", "k2"], "watermark_key": {"k": 1}}
    assert _resolved.redact(settings) == dict(settings, api_key=MASK, watermark_key=MASK)
    # a bare flag just before the credential flag does not hide it
    assert _resolved.redact("--enable-metrics --api-key k1 --admin-api-key=k2 --trust-remote-code") == (
        "--enable-metrics --api-key %s --admin-api-key=%s --trust-remote-code" % (MASK, MASK))


def test_sglang_0_5_23_server_info_is_kept_without_any_secret():
    info = sglang_info("0.5.23")
    assert info["api_key"] == API_KEY and API_KEY in info["launch_command"]  # as SGLang serves it
    kept = _resolved.kept("sglang", "GET /server_info", _resolved.parse_server_info(json.dumps(info)))
    text = json.dumps(kept)
    assert API_KEY not in text and ADMIN_KEY not in text
    settings = kept["settings"]
    assert settings["api_key"] == settings["admin_api_key"] == MASK
    assert settings["tp_size"] == 8 and settings["max_prefill_tokens"] == 16384
    assert settings["speculative_num_draft_tokens"] == 6 and settings["attention_backend"] == "triton"
    assert len(kept["digest"]) == 12 and "dropped" not in kept


def test_sglang_0_5_9_server_info():
    info = sglang_info("0.5.9")
    kept = _resolved.kept("sglang", "GET /server_info", _resolved.parse_server_info(json.dumps(info)))
    assert kept["settings"]["api_key"] == MASK and kept["settings"]["version"] == "0.5.9"
    assert kept["settings"]["tp_size"] == 8 and API_KEY not in json.dumps(kept)


def test_server_info_must_be_an_object():
    with pytest.raises(ValueError):
        _resolved.parse_server_info("[1, 2]")


# ---- bounds and digest

def test_bound_drops_scheduler_state_huge_values_then_the_largest():
    settings = {"tp_size": 8, "internal_states": [{"memory_usage": {"kv": 1.0}}],
                "cuda_graph_bs": list(range(2000)), "a": "x" * 3000, "b": "y" * 3500}
    kept, dropped = _resolved.bound(settings, total_max=4000)
    assert kept == {"tp_size": 8, "a": "x" * 3000}
    assert dropped["internal_states"].startswith("scheduler state")
    assert set(dropped) == {"internal_states", "cuda_graph_bs", "b"}


def test_digest_leaves_out_what_changes_with_every_launch():
    base = {"tp_size": 8, "attention_backend": "fa3"}
    assert _resolved.digest(base) == _resolved.digest(dict(base, random_seed=12, port=30001, launch_command="x"))
    assert _resolved.digest(base) != _resolved.digest(dict(base, attention_backend="triton"))


def test_kept_with_an_error_only():
    out = _resolved.kept("vllm", "log", error="no line with sk-1", secrets=["sk-1"])
    assert out == {"engine": "vllm", "source": "log", "error": "no line with %s" % MASK}


# ---- vLLM

def test_vllm_non_default_args_line_as_vllm_logs_it():
    args = _resolved.parse_vllm_log_line(vllm_line())
    assert args["tensor_parallel_size"] == 8 and args["gpu_memory_utilization"] == 0.85
    assert args["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 2}
    assert args["hf_token"] == "***" and args["trust_remote_code"] is True
    colored = "\x1b[32mINFO\x1b[0m 12-05 [startup.py:96] non-default args: {'max_num_seqs': 64}"
    assert _resolved.parse_vllm_log_line(colored) == {"max_num_seqs": 64}
    assert _resolved.parse_vllm_log_line("INFO Starting vLLM API server") is None


def test_vllm_values_that_are_no_literals():
    # vLLM 0.34.0 prints a parsed --compilation-config with an enum inside (DynamicShapesType.BACKED)
    line = ("non-default args: {'model_tag': 'Q', 'compilation_config': {'mode': None, 'dynamic_shapes_config': "
            "{'type': <DynamicShapesType.BACKED: 'backed'>, 'evaluate_guards': False}, 'cudagraph_capture_sizes': "
            "[1, 2, 4]}, 'kv_transfer_config': KVTransferConfig(kv_connector='X', kv_role='kv_both'), 'seed': 3}")
    args = _resolved.parse_vllm_log_line(line)
    assert args["compilation_config"]["dynamic_shapes_config"]["type"] == "backed"
    assert args["kv_transfer_config"] == "KVTransferConfig(kv_connector='X', kv_role='kv_both')"
    assert args["seed"] == 3 and args["compilation_config"]["cudagraph_capture_sizes"] == [1, 2, 4]


CACHE_INFO = """# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="1",\
gpu_memory_utilization="0.85",num_gpu_blocks="9000",sliding_window="None",_block_size_resolved="True"} 1.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",\
gpu_memory_utilization="0.85",num_gpu_blocks="8192",sliding_window="None",prefix_caching_hash_algo="sha256",\
mamba_note="a \\"quoted\\" text",_block_size_resolved="True"} 1.0
vllm:num_requests_running{engine="0",model_name="Q"} 0.0
"""


def test_cache_config_info_labels_engine_0():
    labels = _resolved.info_labels(CACHE_INFO)
    assert labels == {"block_size": 16, "cache_dtype": "auto", "enable_prefix_caching": True,
                      "gpu_memory_utilization": 0.85, "num_gpu_blocks": 8192, "sliding_window": None,
                      "prefix_caching_hash_algo": "sha256", "mamba_note": 'a "quoted" text'}
    assert _resolved.info_labels("vllm:num_requests_running 1\n") is None


class _Metrics(http.server.BaseHTTPRequestHandler):
    body = CACHE_INFO

    def do_GET(self):  # noqa: N802
        data = self.body.encode() if self.path == "/metrics" else b"{}"
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def metrics_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_read_vllm_from_this_start_of_the_log_and_metrics(tmp_path, metrics_server):
    log = tmp_path / "qwen.log"
    earlier = "old start non-default args: {'max_num_seqs': 1}\n"
    log.write_text(earlier + "=== inferops.serving: starting qwen\n" + vllm_line() + "\nINFO ready\n")
    params = {"engine": "vllm", "port": metrics_server, "host": "0.0.0.0", "api_key": API_KEY}
    out = _resolved.read(params, None, {"log_offset": len(earlier)}, str(log), host="127.0.0.1")
    settings = out["settings"]
    assert out["engine"] == "vllm" and "error" not in out
    assert settings["tensor_parallel_size"] == 8 and "max_num_seqs" not in settings  # not the earlier start's
    assert settings["num_gpu_blocks"] == 8192 and settings["hf_token"] == MASK
    assert out["given"] == sorted(_resolved.parse_vllm_log_line(vllm_line()))


def test_read_vllm_says_what_is_missing_and_keeps_what_it_has(tmp_path):
    log = tmp_path / "qwen.log"
    log.write_text(vllm_line() + "\n")
    params = {"engine": "vllm", "port": free_port(), "host": "127.0.0.1"}
    out = _resolved.read(params, None, {}, str(log))
    assert out["settings"]["tensor_parallel_size"] == 8 and out["error"].startswith("GET /metrics")
    out = _resolved.read(params, None, {}, str(tmp_path / "missing.log"))
    assert "settings" not in out and "missing.log" in out["error"]


# ---- SGLang and command engines, against the stand-in

def test_read_sglang_server_info_from_the_stand_in(tmp_path):
    port = free_port()
    with stand_in.stand_in(port, "--engine", "sglang", "--server-info", os.path.join(RESOLVED, "sglang-0.5.23.json")):
        params = {"engine": "sglang", "port": port, "host": "127.0.0.1"}
        out = _resolved.read(params, None, {}, str(tmp_path / "log"))
        assert out["source"] == "GET /server_info" and out["settings"]["api_key"] == MASK
        assert out["settings"]["port"] == port and out["settings"]["speculative_algorithm"] == "NEXTN"
        assert API_KEY not in json.dumps(out)
        # a command engine, auto: asked once, kept in SGLang's names
        command = _resolved.read(dict(params, engine="command"), None, {}, str(tmp_path / "log"))
        assert command["engine"] == "sglang" and command["settings"] == out["settings"]


def test_read_a_command_without_server_info(tmp_path):
    port = free_port()
    with stand_in.stand_in(port):
        params = {"engine": "command", "port": port, "host": "127.0.0.1"}
        assert _resolved.read(params, None, {}, str(tmp_path / "log")) is None
        told = _resolved.read(dict(params, resolved_from="sglang"), None, {}, str(tmp_path / "log"))
        assert "HTTP 404" in told["error"] and "settings" not in told
    assert _resolved.read(dict(params, resolved_from="none"), None, {}, "") is None
    assert _resolved.read(dict(params, engine="trtllm"), None, {}, "") is None


def test_fallback_to_get_server_info(monkeypatch):
    asked = []

    def request(host, port, method, path, **kw):
        asked.append(path)
        return (404, "not found") if path == "/server_info" else (200, json.dumps({"tp_size": 2}))
    monkeypatch.setattr(_resolved._http, "request", request)
    assert _resolved.read_sglang("h", 1) == ({"tp_size": 2}, "GET /get_server_info")
    assert asked == ["/server_info", "/get_server_info"]


@pytest.mark.parametrize("params,kind", [({"engine": "sglang"}, "sglang"), ({"engine": "vllm"}, "vllm"),
                                         ({"engine": "transformers"}, "transformers"), ({"engine": "trtllm"}, None),
                                         ({"engine": "command"}, "probe"),
                                         ({"engine": "command", "resolved_from": "vllm"}, "vllm"),
                                         ({"engine": "sglang", "resolved_from": "none"}, None)])
def test_kind_of(params, kind):
    assert _resolved.kind_of(params) == kind


# ---- transformers serve

def transformers_help():
    with open(os.path.join(FIXTURES, "transformers-5.24-serve-help.txt")) as handle:
        return handle.read()


def test_transformers_help_defaults():
    spec = _preflight.help_defaults(transformers_help())
    defaults = dict((k, v["default"]) for k, v in spec.items())
    assert defaults["device"] == "auto" and defaults["dtype"] == "auto" and defaults["port"] == 8000
    assert defaults["model_timeout"] == 300  # its default wrapped onto the next line
    assert defaults["compile"] is False and defaults["continuous_batching"] is False
    assert defaults["enable_cors"] is False  # [default: no-\n enable-cors] at a narrower width
    assert defaults["cb_use_cuda_graph"] is None and defaults["attn_implementation"] is None
    assert spec["compile"]["options"] == ["--compile", "--no-compile"] and spec["port"]["type"] == "int"
    assert "help" not in spec and "format" not in spec and "json" not in spec  # the CLI's own output options


def test_transformers_help_wrapped_and_in_a_rich_panel():
    narrow = ("Options:\n  --enable-cors / --no-enable-cors\n                                  Enable permissive "
              "CORS.  [default: no-\n                                  enable-cors]\n  --port INTEGER  Port.  "
              "[default:\n                  8000]\n  --x FLOAT  X.  [default: 0.5]\n")
    spec = _preflight.help_defaults(narrow)
    assert spec["enable_cors"]["default"] is False and spec["port"]["default"] == 8000 and spec["x"]["default"] == 0.5
    rich = ("\u256d\u2500 Options \u2500\u2500\u256e\n\u2502 --device   TEXT  Device.  [default: auto] \u2502\n"
            "\u2502 --compile / --no-compile  Compile.  [default: compile] \u2502\n\u2570\u2500\u2500\u256f\n")
    spec = _preflight.help_defaults(rich)
    assert spec["device"]["default"] == "auto" and spec["compile"]["default"] is True


def test_transformers_settings_are_the_defaults_with_the_argv_over_them():
    spec = _preflight.help_defaults(transformers_help())
    settings, given = _resolved.transformers_settings(
        spec, ["--device", "cpu", "--no-compile", "--continuous-batching", "--port=8001", "--cb-max-memory-percent",
               "0.5", "--new-flag", "v"], model="/models/tiny")
    assert settings["device"] == "cpu" and settings["compile"] is False and settings["continuous_batching"] is True
    assert settings["port"] == 8001 and settings["cb_max_memory_percent"] == 0.5 and settings["dtype"] == "auto"
    assert settings["new_flag"] == "v" and settings["force_model"] == "/models/tiny"
    assert given == ["device", "compile", "continuous_batching", "port", "cb_max_memory_percent", "new_flag", "force_model"]


def test_read_transformers_runs_its_help_once_per_launcher_and_version(tmp_path):
    calls = []

    def run(argv, **kw):
        calls.append((argv, kw.get("environ_update")))
        return 0, transformers_help(), ""
    params = {"engine": "transformers", "model": "/m", "host": "127.0.0.1", "port": 8000, "engine_args": {"device": "cpu"},
              "executable": "/opt/venv/bin/transformers", "state_dir": str(tmp_path), "env": {}}
    launch = _engines.adapter("transformers").build(params)
    first = _resolved.read(params, launch, {"engine_version": "5.24.0"}, "", run=run)
    again = _resolved.read(params, launch, {"engine_version": "5.24.0"}, "", run=run)
    assert first == again and len(calls) == 1
    assert calls[0][0][-3:] == ["/opt/venv/bin/transformers", "serve", "--help"] and calls[0][1]["COLUMNS"] == "400"
    assert first["settings"]["device"] == "cpu" and first["settings"]["host"] == "127.0.0.1"
    assert first["settings"]["force_model"] == "/m" and "device" in first["given"]
    failing = _resolved.read(dict(params, state_dir=str(tmp_path / "other")), launch, {}, "",
                             run=lambda argv, **kw: (1, "", "boom"))
    assert "exited 1" in failing["error"] and "settings" not in failing


def test_the_preflight_and_the_resolved_settings_share_one_run_of_the_help(tmp_path):
    """A switch's flag check (preflight) and its report of what transformers resolved (_resolved) read one
    cached help record: the engine's --help runs once per launcher and version, not once for each."""
    calls = []

    def run(argv, **kw):
        calls.append(argv)
        return 0, transformers_help(), ""
    params = {"engine": "transformers", "model": "/m", "host": "127.0.0.1", "port": 8000, "engine_args": {"device": "cpu"},
              "executable": "/opt/venv/bin/transformers", "state_dir": str(tmp_path), "env": {}}
    adapter = _engines.adapter("transformers")
    launch = adapter.build(params)
    problems, how = _preflight.flag_problems(adapter, params, launch, "5.24.0", run)
    assert problems == [] and how["checked"] and len(calls) == 1
    resolved = _resolved.read(params, launch, {"engine_version": "5.24.0"}, "", run=run)
    assert len(calls) == 1, calls  # the record the preflight cached
    assert resolved["settings"]["device"] == "cpu" and resolved["settings"]["port"] == 8000
    [name] = os.listdir(str(tmp_path / "engine-flags"))
    assert json.loads((tmp_path / "engine-flags" / name).read_text())["defaults"]["dtype"]["default"] == "auto"
