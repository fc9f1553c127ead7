# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The variant catalog: extends, deep merge, validation of every variant, clear errors."""

from __future__ import annotations

import pytest

from ansible_collections.inferops.serving.plugins.plugin_utils import _variants

CATALOG = {
    "baseline": {"engine_args": {"tp_size": 8, "moe": {"runner": "cutlass", "gemm": "cudnn"}},
                 "env": {"A": 1}, "python": "/opt/sglang/bin/python"},
    "nextn": {"extends": "baseline", "env": {"SPEC": "True"},
              "engine_args": {"speculative_algorithm": "NEXTN", "moe": {"runner": "trtllm"}}},
    "deep": {"extends": "nextn", "engine_args": {"tp_size": 4}},
}


def test_extends_deep_merges_dicts_and_child_wins():
    spec = _variants.resolve(CATALOG, "deep", engine="sglang", model="m")
    assert spec["chain"] == ["baseline", "nextn", "deep"]
    assert spec["engine_args"] == {"tp_size": 4, "speculative_algorithm": "NEXTN",
                                   "moe": {"runner": "trtllm", "gemm": "cudnn"}}
    assert spec["env"] == {"A": "1", "SPEC": "True"}
    assert spec["python"] == "/opt/sglang/bin/python" and spec["engine"] == "sglang" and spec["model"] == "m"
    assert CATALOG["baseline"]["engine_args"]["tp_size"] == 8  # the catalog itself is not modified


def test_a_resolved_spec_shares_no_container_with_the_catalog():
    spec = _variants.resolve(CATALOG, "nextn", engine="sglang", model="m")
    spec["engine_args"]["moe"]["gemm"] = "changed"
    spec["engine_args"]["tp_size"] = 1
    assert CATALOG["baseline"]["engine_args"] == {"tp_size": 8, "moe": {"runner": "cutlass", "gemm": "cudnn"}}
    base = {"a": ({"x": 1},)}
    merged = _variants.merge(base, {"b": [1]})
    merged["a"][0]["x"] = 2  # tuples become lists, and their dicts are copies too
    assert merged == {"a": [{"x": 2}], "b": [1]} and base == {"a": ({"x": 1},)}


def test_lists_are_replaced_not_appended():
    catalog = {"a": {"engine": "command", "model": "m", "command": ["x", "--one"]},
               "b": {"extends": "a", "command": ["y"]}}
    assert _variants.resolve(catalog, "b")["command"] == ["y"]


@pytest.mark.parametrize("name, message", [
    ("nope", "unknown variant 'nope'; known variants: baseline, deep, nextn"),
    ("", "no variant given: pass -e variant=NAME; known variants: baseline, deep, nextn"),
    (None, "no variant given"),
])
def test_unknown_or_missing_variant_lists_the_known_ones(name, message):
    with pytest.raises(_variants.VariantError, match=message):
        _variants.resolve(CATALOG, name, engine="sglang", model="m")


@pytest.mark.parametrize("catalog, message", [
    ({"a": {"extends": "b"}, "b": {"extends": "a"}}, r"extends forms a cycle: a -> b -> a"),
    ({"a": {"extends": "a"}}, r"extends forms a cycle: a -> a"),
    ({"a": {"extends": "ghost"}}, r"variant a extends unknown variant 'ghost'; known variants: a"),
    ({"a": {"engine": "tgi", "model": "m"}}, r"engine 'tgi' is not one of sglang, vllm, trtllm, transformers, command"),
    ({"a": {"engine": "vllm"}}, r"variant a has no model"),
    ({"a": {"model": "m"}}, r"variant a has no engine"),
    ({"a": {"engine": "command", "model": "m"}}, r"engine command needs command"),
    ({"a": {"engine": "vllm", "model": "m", "command": ["x"]}}, r"command is only for engine command"),
    ({"a": {"engine": "vllm", "model": "m", "engine_arg": {}}}, r"unknown field\(s\) engine_arg; allowed: command"),
    ({"a": {"engine": "vllm", "model": "m", "engine_args": [1]}}, r"engine_args must be a dict"),
    ({"a": {"engine": "vllm", "model": "m", "ready_timeout": -1}}, r"ready_timeout must be a positive number"),
    ({"a": {"engine": "vllm", "model": "m", "env": {"X": {"y": 1}}}}, r"env X must be a string or number"),
    ({"a": "vllm"}, r"variant a must be a dict"),
    ({}, r"serving_variants must be a non-empty dict"),
])
def test_broken_catalog_is_refused_with_what_is_wrong(catalog, message):
    with pytest.raises(_variants.VariantError, match=message):
        _variants.resolve_all(catalog)


def test_a_broken_sibling_fails_the_whole_catalog():
    catalog = {"good": {"engine": "vllm", "model": "m"}, "bad": {"engine": "vllm"}}
    with pytest.raises(_variants.VariantError, match="variant bad has no model"):
        _variants.resolve(catalog, "good")


@pytest.mark.parametrize("value, names", [
    ("a, b,,c ", ["a", "b", "c"]), (["a", " b", ""], ["a", "b"]), ("", []), (None, []), ([], []), (3, ["3"]),
])
def test_name_list_takes_a_list_or_a_comma_separated_string(value, names):
    from ansible_collections.inferops.serving.plugins.plugin_utils import _variants
    assert _variants.name_list(value) == names
