# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the inference_server module's parameter validation and its messages."""

from __future__ import annotations

from launch_params import params

from ansible_collections.inferops.serving.plugins.module_utils import _idle_check
from ansible_collections.inferops.serving.plugins.modules import inference_server


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


def test_host_memory_mib_must_not_be_negative():
    assert "host_memory_mib must be 0 (not checked) or more MiB, got -1" in " ".join(
        inference_server.validate(params(host_memory_mib=-1)))
    assert inference_server.validate(params(host_memory_mib=4096)) == []


def test_state_and_log_dirs_must_be_absolute():
    text = " ".join(inference_server.validate(params(state_dir="state", log_dir="./log")))
    assert "state_dir must be an absolute path, got 'state'" in text
    assert "log_dir must be an absolute path, got './log'" in text
    assert inference_server.validate(params(state_dir="/srv/x/state", log_dir="/srv/x/log")) == []


def test_a_bad_router_option_is_refused_naming_it():
    text = " ".join(inference_server.validate(params(router={"type": "sglang", "url": ["ftp://x"], "drain_timeout": -1})))
    assert "router: router_url must be an http:// or https:// URL" in text
    assert "router: drain_timeout must be 0 or more seconds, got -1" in text
    assert "router: router_url is required with router_type sglang" in " ".join(
        inference_server.validate(params(router={"type": "sglang"})))
    assert inference_server.validate(params(router={"type": "sglang", "url": ["http://127.0.0.1:30000"]})) == []
    assert inference_server.validate(params(router={"type": "none"})) == []
