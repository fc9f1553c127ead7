# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the instance filters (converge_action, worker_url, router_type, router_membership): each registered
and documented as its signature, bad input a filter error naming the filter; and instances_plan's on_error=return,
with which the role fails as a plain task in the inventory's words."""

from __future__ import annotations

import inspect
import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.filter import instance as instance_filter
from ansible_collections.inferops.serving.plugins.filter import replicas as replicas_filter

HERE = os.path.dirname(os.path.abspath(instance_filter.__file__))
NAMES = ["bench_now", "converge_action", "converge_result", "converge_words", "gpu_check_params", "name_list",
         "replicas_summary",
         "router_membership", "router_type", "switch_router",
         "worker_url"]


def test_the_module_registers_exactly_its_filters_each_with_its_documentation():
    filters = instance_filter.FilterModule().filters()
    assert sorted(filters) == NAMES
    assert all(filters[name] is getattr(instance_filter, name) for name in filters)


@pytest.mark.parametrize("name", NAMES)
def test_each_documentation_names_the_signature(name):
    with open(os.path.join(HERE, "%s.yml" % name)) as handle:
        doc = yaml.safe_load(handle)["DOCUMENTATION"]
    params = list(inspect.signature(getattr(instance_filter, name)).parameters)
    assert doc["name"] == name
    assert (doc.get("positional") or "").split(", ") == (params[1:] or [""])
    assert sorted(doc["options"]) == sorted(["_input"] + params[1:])


def test_bad_input_is_a_filter_error_naming_the_filter():
    with pytest.raises(AnsibleFilterError, match="^router_membership: the instances must be"):
        instance_filter.router_membership({"workers": []}, "r0")


def test_the_filters_chained_as_the_role_chains_them():
    plan = replicas_filter.instances_plan({"r0": {"gpus": [0], "port": 30000}}, "q", router={"url": "http://r:1"})
    entry = plan["instances"][0]
    assert instance_filter.worker_url(entry, {"url": "http://r:1"}, "", "gpu7") == "http://gpu7:30000"
    listing = {"workers": [{"url": "http://gpu7:30000", "is_healthy": True}]}
    membership = instance_filter.router_membership(listing, plan["instances"], {}, "", "gpu7")
    assert instance_filter.converge_action({"outcome": "unchanged", "healthy": True}, membership["r0"]) == "keep"
    assert instance_filter.router_type({"type": "command"}) == "none"


def test_instances_plan_returns_the_error_for_the_role_to_fail_with():
    out = replicas_filter.instances_plan({"r0": {"gpus": [0], "port": 1}}, "q", router={"url": "ftp://x"},
                                         on_error="return")
    assert out == {"error": "Bad serving_instances or settings: serving_router.url: 'ftp://x' is not an http(s) URL "
                            "(http://HOST:PORT)."}
    with pytest.raises(AnsibleFilterError, match="^instances_plan: Bad serving_instances"):
        replicas_filter.instances_plan({"r0": {"gpus": [0], "port": 1}}, "q", router={"url": "ftp://x"})
