# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the variants filters: resolve_variant resolves one variant of the catalog and variant_names
lists them, each refusing a broken catalog or an unknown variant with an AnsibleFilterError that says why."""

from __future__ import annotations

import base64
import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.filter import variants as variants_filter

CATALOG = {
    "baseline": {"engine": "sglang", "model": "Qwen/Qwen3", "env": {"A": 1},
                 "engine_args": {"tp_size": 8, "moe": {"runner": "cutlass"}}},
    "nextn": {"extends": "baseline", "engine_args": {"speculative_algorithm": "NEXTN", "moe": {"gemm": "cudnn"}}},
    "tiny": {"engine": "command", "model": "m", "command": ["srv", "--port", 8000]},
}
# as the shipped inventories write it: engine and model come from serving_engine and serving_model
DEFAULTED = {"baseline": {"engine_args": {"device": "auto"}},
             "batched": {"extends": "baseline", "engine_args": {"continuous_batching": True}}}


def test_the_module_registers_exactly_its_three_filters():
    filters = variants_filter.FilterModule().filters()
    assert filters == {"resolve_variant": variants_filter.resolve_variant,
                       "variant_names": variants_filter.variant_names,
                       "state_record": variants_filter.state_record}
    here = os.path.dirname(os.path.abspath(variants_filter.__file__))
    assert [name for name in filters if not os.path.isfile(os.path.join(here, "%s.yml" % name))] == []


def test_resolve_variant_merges_down_the_chain():
    spec = variants_filter.resolve_variant(CATALOG, "nextn")
    assert spec["name"] == "nextn" and spec["chain"] == ["baseline", "nextn"]
    assert spec["engine"] == "sglang" and spec["model"] == "Qwen/Qwen3"
    assert spec["engine_args"] == {"tp_size": 8, "speculative_algorithm": "NEXTN",
                                   "moe": {"runner": "cutlass", "gemm": "cudnn"}}
    assert spec["env"] == {"A": "1"} and spec["command"] is None and spec["flag_check"] is None
    assert CATALOG["baseline"]["engine_args"] == {"tp_size": 8, "moe": {"runner": "cutlass"}}  # not modified


def test_resolve_variant_fills_engine_and_model_from_the_defaults_only_where_unset():
    spec = variants_filter.resolve_variant(DEFAULTED, "batched", "transformers", "tiny-model")
    assert (spec["engine"], spec["model"]) == ("transformers", "tiny-model")
    assert spec["engine_args"] == {"device": "auto", "continuous_batching": True}
    tiny = variants_filter.resolve_variant(CATALOG, "tiny", engine="vllm", model="other")
    assert (tiny["engine"], tiny["model"]) == ("command", "m")
    assert tiny["command"] == ["srv", "--port", "8000"]  # an argv of strings


def test_variant_names_are_every_variant_sorted():
    catalog = dict(CATALOG, alpha={"extends": "tiny"})
    assert variants_filter.variant_names(catalog) == ["alpha", "baseline", "nextn", "tiny"]


@pytest.mark.parametrize("name, message", [
    ("nope", r"^unknown variant 'nope'; known variants: baseline, nextn, tiny$"),
    ("", r"^no variant given: pass -e variant=NAME; known variants: baseline, nextn, tiny$"),
    (None, r"^no variant given"),
])
def test_resolve_variant_refuses_an_unknown_or_missing_name_listing_the_known_ones(name, message):
    with pytest.raises(AnsibleFilterError, match=message):
        variants_filter.resolve_variant(CATALOG, name)


@pytest.mark.parametrize("catalog, message", [
    ({}, r"^serving_variants must be a non-empty dict of variant name"),
    ("baseline", r"^serving_variants must be a non-empty dict of variant name"),
    ({"a": {"extends": "b"}, "b": {"extends": "a"}}, r"extends forms a cycle: a -> b -> a"),
    ({"a": {"engine": "tgi", "model": "m"}}, r"variant a: engine 'tgi' is not one of sglang, vllm"),
    ({"a": {"engine": "vllm", "model": "m", "engines": {}}}, r"variant a has unknown field\(s\) engines; allowed: "),
])
def test_both_filters_refuse_a_broken_catalog_saying_what_is_wrong(catalog, message):
    with pytest.raises(AnsibleFilterError, match=message):
        variants_filter.variant_names(catalog)
    with pytest.raises(AnsibleFilterError, match=message):
        variants_filter.resolve_variant(catalog, "a")


def test_a_broken_sibling_fails_the_variant_asked_for_too():
    catalog = dict(CATALOG, broken={"extends": "ghost"})
    with pytest.raises(AnsibleFilterError, match=r"variant broken extends unknown variant 'ghost'; known variants: "
                                                 r"baseline, broken, nextn, tiny"):
        variants_filter.resolve_variant(catalog, "baseline")


def test_a_catalog_relying_on_the_defaults_needs_them():
    with pytest.raises(AnsibleFilterError, match=r"variant baseline has no engine \(set engine in the variant or "
                                                 r"serving_engine\).*variant baseline has no model"):
        variants_filter.resolve_variant(DEFAULTED, "baseline")


def test_variant_names_of_a_catalog_relying_on_the_defaults_takes_them():
    assert variants_filter.variant_names(DEFAULTED, "transformers", "/models/tiny") == ["baseline", "batched"]
    with pytest.raises(AnsibleFilterError, match=r"variant baseline has no engine"):
        variants_filter.variant_names(DEFAULTED)


def _b64(text):
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


@pytest.mark.parametrize("content, expected", [
    (None, {}),
    ("", {}),
    (_b64(""), {}),  # an emptied state file
    (_b64('{"varia'), {}),  # half-written
    (_b64("[1, 2]"), {}),  # JSON, not a record
    (_b64('{"corrupt": true}'), {}),
    ("not base64!", {}),
    (_b64('{"variant": "fast", "pid": 42}'), {"variant": "fast", "pid": 42}),
])
def test_state_record_reads_a_record_or_nothing(content, expected):
    assert variants_filter.state_record(content) == expected
