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


def test_secret_values_are_the_key_and_the_credential_env_values():
    params = {"api_key": "k3y", "env": {"HF_TOKEN": "hf_abcdef", "AUTH_ENABLED": "1", "CUDA_VISIBLE_DEVICES": "0,1",
                                        "AWS_SECRET_ACCESS_KEY": "hf_abcdef-and-more"}}
    values = _fingerprint.secret_values(params)
    assert values == ["hf_abcdef-and-more", "hf_abcdef", "k3y"]  # the longest first; a short flag is no secret
    assert _fingerprint.secret_values(None) == [] and _fingerprint.secret_values({"env": {}}) == []


def test_redact_masks_every_secret_in_text_and_lists():
    secrets = _fingerprint.secret_values({"api_key": "sk-1", "env": {"HF_TOKEN": "hf_abcdef", "X_KEY": "hf_abcdef-xyz"}})
    line = "server_args=ServerArgs(api_key='sk-1', token=hf_abcdef-xyz, other=hf_abcdef)"
    assert _fingerprint.redact(line, secrets) == "server_args=ServerArgs(api_key='********', token=********, other=********)"
    assert _fingerprint.redact([line, "plain"], secrets)[1] == "plain"
    assert _fingerprint.redact(None, secrets) is None and _fingerprint.redact(3, secrets) == 3
