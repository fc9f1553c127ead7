# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""inference_server parameters, every option at its default unless given, and the launch an engine adapter builds from them."""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.module_utils import _engines

SGLANG_ARGS = {"tp_size": 8, "quantization": "modelopt_fp4", "moe_runner_backend": "flashinfer_cutlass",
               "fp4_gemm_backend": "flashinfer_cudnn", "speculative_algorithm": "NEXTN",
               "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}


def params(**kw):
    base = dict(name="t", engine="sglang", model="M", host="127.0.0.1", port=30000, api_key=None,
                served_model_name=None, engine_args={}, command=None, executable=None, python=None, env={},
                variant=None, wait=True, ready_timeout=1800.0, stop_timeout=120.0, state_dir="/nonexistent",
                log_dir="/nonexistent", supervisor="process", state="started", ready_wait=None, gpu_check=None,
                lock_timeout=60.0, switch_id=None, stop_grace=None, log_keep=5, host_memory_mib=None, spec=None)
    base.update(kw)
    return base


def build(**kw):
    p = params(**kw)
    return _engines.adapter(p["engine"]).build(p)
