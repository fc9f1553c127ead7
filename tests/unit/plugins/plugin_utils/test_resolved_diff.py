# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _resolved_diff: the settings two variants' engines resolved differently, split into those a
variant asked for and those the engine chose, with the real field names of SGLang 0.5.23 (tests/support/
resolved/sglang-0.5.23.json, its /server_info as its own code builds it) and vLLM 0.34.0 (its non-default args
and vllm:cache_config_info labels)."""

from __future__ import annotations

import copy
import json
import os

from ansible_collections.inferops.serving.plugins.module_utils import _resolved
from ansible_collections.inferops.serving.plugins.plugin_utils import _resolved_diff as rd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def sglang(**changes):
    with open(os.path.join(ROOT, "tests", "support", "resolved", "sglang-0.5.23.json")) as handle:
        info = json.load(handle)
    info.update(changes)
    return _resolved.kept("sglang", "GET /server_info", info)


BASELINE = {"tensor_parallel_size": 8, "quantization": "modelopt_fp4", "attention_backend": "triton",
            "cuda_graph_max_bs_decode": 128, "mem_fraction_static": 0.8}
NEXTN = dict(BASELINE, speculative_algorithm="NEXTN", speculative_num_steps=5, speculative_eagle_topk=1,
             speculative_num_draft_tokens=6)


def test_asked_and_engine_chosen_differences_with_sglang_names():
    a = {"name": "baseline", "engine_args": BASELINE,
         "resolved": sglang(speculative_algorithm=None, speculative_num_steps=None, speculative_eagle_topk=None,
                            speculative_num_draft_tokens=None, chunked_prefill_size=16384, random_seed=11, port=30000)}
    b = {"name": "nextn", "engine_args": NEXTN,
         "resolved": sglang(speculative_algorithm="EAGLE", chunked_prefill_size=8192, max_running_requests=48,
                            random_seed=12, port=30001)}
    out = rd.diff(a, b)
    assert out["variants"] == ["baseline", "nextn"] and out["engine"] == "sglang" and not out["unavailable"]
    asked = dict((row["setting"], row) for row in out["asked"])
    assert sorted(asked) == ["speculative_algorithm", "speculative_eagle_topk", "speculative_num_draft_tokens",
                             "speculative_num_steps"]
    # NEXTN asked, EAGLE resolved: SGLang runs NEXTN as EAGLE
    assert asked["speculative_algorithm"]["values"] == [None, "EAGLE"]
    assert asked["speculative_algorithm"]["asked"] == [None, "NEXTN"]
    chosen = [(row["setting"], row["values"]) for row in out["engine_chosen"]]
    assert chosen == [("chunked_prefill_size", [16384, 8192]), ("max_running_requests", [128, 48])]
    assert out["not_compared"] == ["port", "random_seed"]
    lines = rd.markdown_lines(out)
    text = "\n".join(lines)
    assert lines[0] == "## Resolved settings" and "### Asked for" in text and "### Chosen by the engine" in text
    assert "| speculative_algorithm | `null` | `EAGLE` | - / `NEXTN` |" in text
    assert "| chunked_prefill_size | `16384` | `8192` |" in text
    assert "**Warning**: 2 settings differ although neither variant asked for them" in text
    assert "Not compared (they differ between any two launches): port, random_seed." in text


def test_aliases_map_what_was_asked_to_the_name_reported():
    # tensor_parallel_size is SGLang's tp_size (--tp-size and --tensor-parallel-size are one option)
    a = {"name": "tp8", "engine_args": {"tensor_parallel_size": 8}, "resolved": sglang()}
    b = {"name": "tp4", "engine_args": {"--tensor-parallel-size": 4}, "resolved": sglang(tp_size=4)}
    out = rd.diff(a, b)
    assert [row["setting"] for row in out["asked"]] == ["tp_size"] and out["engine_chosen"] == []
    assert rd.asked_name("tp-size", "vllm") == "tensor_parallel_size"
    assert rd.asked_name("--no-enable-prefix-caching", "vllm", {"enable_prefix_caching"}) == "enable_prefix_caching"
    assert rd.asked_name("disable_prefix_caching", "vllm", {"enable_prefix_caching"}) == "enable_prefix_caching"
    assert rd.asked_name("Max-Num-Seqs", "vllm") == "max_num_seqs"


def vllm(args, cache):
    settings = dict(args)
    settings.update(cache)
    return _resolved.kept("vllm", "log + metrics", settings, given=args)


def test_vllm_non_default_args_and_cache_config_labels():
    cache = {"block_size": 16, "cache_dtype": "auto", "enable_prefix_caching": True, "gpu_memory_utilization": 0.85,
             "num_gpu_blocks": 9000}
    base_args = {"model_tag": "Q", "tensor_parallel_size": 8, "gpu_memory_utilization": 0.85}
    mtp_args = dict(base_args, speculative_config={"method": "mtp", "num_speculative_tokens": 2})
    a = {"name": "vllm", "engine_args": {"tp_size": 8, "gpu_memory_utilization": 0.85},
         "resolved": vllm(base_args, cache)}
    b = {"name": "vllm_mtp", "engine_args": {"tp_size": 8, "gpu_memory_utilization": 0.85,
                                             "speculative_config": {"method": "mtp", "num_speculative_tokens": 2}},
         "resolved": vllm(mtp_args, dict(cache, num_gpu_blocks=7400))}
    out = rd.diff(a, b)
    assert [(row["setting"], row["values"][0]) for row in out["asked"]] == [("speculative_config", rd.ABSENT)]
    assert [(row["setting"], row["values"]) for row in out["engine_chosen"]] == [("num_gpu_blocks", [9000, 7400])]
    text = "\n".join(rd.markdown_lines(out))
    assert "*(not reported)*" in text and '`{"method": "mtp", "num_speculative_tokens": 2}`' in text


def test_asked_differently_but_reported_by_neither():
    cache = {"block_size": 16}
    a = {"name": "a", "engine_args": {"max_num_seqs": 256}, "resolved": vllm({}, cache)}  # 256: vLLM's default
    b = {"name": "b", "engine_args": {}, "resolved": vllm({}, cache)}
    out = rd.diff(a, b)
    assert out["asked"] == [{"setting": "max_num_seqs", "values": [rd.ABSENT, rd.ABSENT], "asked": [256, None]}]


def test_the_same_resolution_and_the_cases_not_compared():
    same = rd.diff({"name": "a", "engine_args": {}, "resolved": sglang()},
                   {"name": "b", "engine_args": {}, "resolved": sglang(random_seed=5)})
    assert same["asked"] == same["engine_chosen"] == [] and same["not_compared"] == ["random_seed"]
    assert "Every compared setting resolved the same." in rd.markdown_lines(same)

    failed = rd.diff({"name": "a", "resolved": {"engine": "sglang", "source": "GET /server_info", "error": "HTTP 401"}},
                     {"name": "b", "resolved": None})
    assert failed["unavailable"] == {"a": "HTTP 401", "b": "nothing was read"}
    assert "- a: no resolved settings (HTTP 401)." in rd.markdown_lines(failed)

    engines = rd.diff({"name": "s", "resolved": sglang()}, {"name": "v", "resolved": vllm({"x": 1}, {})})
    assert engines["engine"] == ["sglang", "vllm"] and engines["asked"] == engines["engine_chosen"] == []
    assert "runs on sglang and v on vllm" in "\n".join(rd.markdown_lines(engines))


def test_values_are_shortened_and_pipes_escaped():
    a = {"name": "a|1", "resolved": sglang(json_model_override_args="x" * 200)}
    b = {"name": "b", "resolved": sglang(json_model_override_args="a|b")}
    text = "\n".join(rd.markdown_lines(rd.diff(a, b)))
    assert "a\\|1" in text and "`a\\|b`" in text and "x" * (rd.VALUE_CHARS - 3) + "...`" in text


def test_inputs_are_not_changed():
    a = {"name": "a", "engine_args": {"tp_size": 8}, "resolved": sglang()}
    b = {"name": "b", "engine_args": {"tp_size": 4}, "resolved": sglang(tp_size=4)}
    before = copy.deepcopy((a, b))
    rd.diff(a, b)
    assert (a, b) == before
