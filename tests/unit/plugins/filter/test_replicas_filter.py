# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the replica filters: every filter registered and documented (its doc's options and positional
arguments are its signature's), bad input a filter error naming the filter, and the filters chained as role
serve_variant chains them (instances_plan, then per instance a resolved variant's instance_fit and
instance_engine_args)."""

from __future__ import annotations

import inspect
import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.filter import replicas as replicas_filter
from ansible_collections.inferops.serving.plugins.filter import variants as variants_filter

HERE = os.path.dirname(os.path.abspath(replicas_filter.__file__))
INSTANCES = {"r0": {"gpus": [0, 1], "port": 30000}, "r1": {"gpus": "2,3", "port": 30001, "variant": "wide"}}
CATALOG = {"base": {"engine_args": {"tp_size": 2, "mem_fraction_static": 0.8}},
           "wide": {"extends": "base", "engine_args": {"tp_size": 4}},
           "pinned": {"extends": "base", "env": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}}}


def test_the_module_registers_exactly_its_filters_each_with_its_documentation():
    filters = replicas_filter.FilterModule().filters()
    assert sorted(filters) == ["drain_metric", "drain_metric_by_variant", "hook_argv", "instance_engine_args",
                               "instance_fit", "instances_plan", "replica_switch_plan", "server_spec",
                               "serving_drain_metric"]
    assert all(filters[name] is getattr(replicas_filter, name) for name in filters)
    assert [name for name in filters if not os.path.isfile(os.path.join(HERE, "%s.yml" % name))] == []


@pytest.mark.parametrize("name", ["instances_plan", "instance_fit", "instance_engine_args", "server_spec",
                                  "serving_drain_metric", "drain_metric_by_variant"])
def test_each_documentation_names_the_signature(name):
    with open(os.path.join(HERE, "%s.yml" % name)) as handle:
        doc = yaml.safe_load(handle)["DOCUMENTATION"]
    params = list(inspect.signature(getattr(replicas_filter, name)).parameters)
    assert doc["name"] == name
    assert doc["positional"].split(", ") == params[1:]
    assert sorted(doc["options"]) == sorted(["_input"] + params[1:])


def test_the_filters_chained_as_the_role_chains_them():
    plan = replicas_filter.instances_plan(INSTANCES, "qwen", "all", 8000, {"reclaim": True}, 1, 1, "sglang")
    assert plan["batches"] == [["r0"], ["r1"]]
    r0, r1 = plan["instances"]
    assert r0["gpu_check"] == {"reclaim": True, "gpus": [0, 1]} and r1["nccl_port"] == 40001
    base = variants_filter.resolve_variant(CATALOG, r0["variant"] or "base", "sglang", "m")
    assert replicas_filter.instance_fit(r0, base) == []
    assert replicas_filter.instance_engine_args(r0, base) == {"tp_size": 2, "mem_fraction_static": 0.8,
                                                              "nccl_port": 40000}
    assert replicas_filter.server_spec(base, r0) == {
        "name": "base", "engine": "sglang", "model": "m", "flag_check": True,
        "engine_args": {"tp_size": 2, "mem_fraction_static": 0.8, "nccl_port": 40000},
        "env": {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}}
    wide = variants_filter.resolve_variant(CATALOG, r1["variant"], "sglang", "m")
    assert replicas_filter.instance_fit(r1, wide) == [
        "sglang needs 4 GPUs (tp_size 4), instance qwen.r1 has 2 (GPUs 2,3)"]
    pinned = variants_filter.resolve_variant(CATALOG, "pinned", "sglang", "m")
    assert replicas_filter.instance_fit(r1, pinned) == [
        "variant pinned sets env CUDA_VISIBLE_DEVICES=0,1,2,3, but instance qwen.r1 has CUDA_VISIBLE_DEVICES=2,3 "
        "(drop it from the variant's env: the instance sets it)"]


def test_a_bad_plan_is_a_filter_error_naming_the_filter_and_both_instances():
    with pytest.raises(AnsibleFilterError, match=r"^instances_plan: Bad serving_instances or settings: instances r0 "
                                                 r"and r1 share GPU\(s\) 1: each instance needs GPUs of its own\.$"):
        replicas_filter.instances_plan({"r0": {"gpus": [0, 1], "port": 1}, "r1": {"gpus": [1], "port": 2}}, "qwen")
    with pytest.raises(AnsibleFilterError, match="^instances_plan: instances names r7, not declared on this host; "
                                                 "its serving_instances: r0, r1"):
        replicas_filter.instances_plan(INSTANCES, "qwen", "r7")
    with pytest.raises(AnsibleFilterError, match="^instances_plan: instances=r0 asked, but this host declares no "
                                                 "serving_instances"):
        replicas_filter.instances_plan({}, "qwen", "r0")


def test_fit_and_engine_args_refuse_what_is_not_an_instance_naming_the_filter():
    with pytest.raises(AnsibleFilterError, match="^instance_fit: the instance must be one entry of instances_plan"):
        replicas_filter.instance_fit("r0", {"engine": "sglang"})
    with pytest.raises(AnsibleFilterError, match="^instance_engine_args: the variant must be a resolved variant"):
        replicas_filter.instance_engine_args({"instance": "r0"}, None)
    with pytest.raises(AnsibleFilterError, match="^server_spec: the instance must be one entry of instances_plan"):
        replicas_filter.server_spec({"engine": "sglang"}, "r0")


def test_the_defaults_are_one_implicit_instance_switched_alone():
    plan = replicas_filter.instances_plan(None, "qwen")
    assert plan["replicated"] is False and plan["batches"] == [[None]]
    assert plan["instances"][0]["port"] == 8000 and plan["max_unavailable"] == 1 and plan["min_available"] == 1


def test_drain_metric_by_variant_gives_every_variant_s_gauge_and_leaves_out_those_without():
    catalog = dict(CATALOG, own={"extends": "base", "drain_metric": "my:gauge"}, other={"engine": "vllm"},
                   tiny={"engine": "transformers"})
    gauges = replicas_filter.drain_metric_by_variant(catalog, "sglang", "m")
    assert gauges["own"] == "my:gauge" and gauges["other"] == "vllm:num_requests_running"
    assert gauges["wide"] == "sglang:num_running_reqs" and "tiny" not in gauges
    assert set(gauges) == set(catalog) - {"tiny"}
    assert replicas_filter.drain_metric_by_variant(catalog, "transformers", "m") == {
        "own": "my:gauge", "other": "vllm:num_requests_running"}
    assert replicas_filter.drain_metric_by_variant(None) == {}
    with pytest.raises(AnsibleFilterError, match="^drain_metric_by_variant: "):
        replicas_filter.drain_metric_by_variant({"loop": {"extends": "loop"}}, "sglang", "m")


def test_serving_drain_metric_reads_the_variant_that_serves_now_from_the_catalog():
    catalog = dict(CATALOG, own={"extends": "base", "drain_metric": "my:gauge"}, other={"engine": "vllm"})
    assert replicas_filter.serving_drain_metric({"variant": "wide", "pid": 42}, catalog, "sglang", "m") == (
        "sglang:num_running_reqs")
    assert replicas_filter.serving_drain_metric({"variant": "own"}, catalog, "sglang", "m") == "my:gauge"
    assert replicas_filter.serving_drain_metric({"variant": "other"}, catalog, "sglang", "m") == (
        "vllm:num_requests_running")
    assert replicas_filter.serving_drain_metric({"variant": "base"}, catalog, "transformers", "m") == ""
    # nothing serves, or a variant the catalog no longer holds: no gauge, never an error
    for serving in ({}, None, {"variant": None}, {"variant": "gone"}, "not a record"):
        assert replicas_filter.serving_drain_metric(serving, catalog, "sglang", "m") == ""
    with pytest.raises(AnsibleFilterError, match="^serving_drain_metric: "):
        replicas_filter.serving_drain_metric({"variant": "loop"}, {"loop": {"extends": "loop"}}, "sglang", "m")
