# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _fingerprint: a launch's fingerprint is stable across dict order, blind to secrets, and sees every other change."""

from __future__ import annotations

import json

from launch_params import SGLANG_ARGS, build, params

from ansible_collections.inferops.serving.plugins.module_utils import _engines, _fingerprint


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
