# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A benchmark default is written once, in _bench_args.BENCH_SPEC: the module's argument spec and its
documentation say the same, the benchmark and serve_variant roles pass an unset setting on as omit instead of a
copy of the default, and the bench digest fills an unset warm-up setting with the spec's default."""

from __future__ import annotations

import os
import re

import yaml

from ansible_collections.inferops.serving.plugins.module_utils import _bench, _bench_args
from ansible_collections.inferops.serving.plugins.modules import throughput_bench
from ansible_collections.inferops.serving.plugins.plugin_utils import _tune

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
WITH_DEFAULT = sorted(key for key, spec in _bench_args.BENCH_SPEC.items() if "default" in spec)


def load(*path):
    with open(os.path.join(ROOT, *path)) as handle:
        return handle.read()


def test_the_module_documents_every_setting_of_the_spec_with_its_default():
    documented = yaml.safe_load(throughput_bench.DOCUMENTATION)["options"]
    for key, spec in _bench_args.BENCH_SPEC.items():
        doc = documented[key]
        assert doc["type"] == spec["type"], key
        assert doc.get("choices") == spec.get("choices"), key
        if "default" in spec:
            assert type(spec["default"])(doc["default"]) == spec["default"], key
        else:
            assert "default" not in doc, key
    # the sweep the roles ran before they took the module's default
    assert _bench_args.defaults()["concurrency"] == [1, 32]


def test_the_benchmark_role_passes_every_defaulted_setting_as_omit_and_states_no_default():
    defaults = yaml.safe_load(load("roles", "benchmark", "defaults", "main.yml"))
    specs = yaml.safe_load(load("roles", "benchmark", "meta", "argument_specs.yml"))["argument_specs"]["main"]["options"]
    tasks = load("roles", "benchmark", "tasks", "main.yml")
    for key in WITH_DEFAULT:
        var = "benchmark_" + key
        assert var not in defaults, var
        assert "default" not in specs[var], var
        assert "Unset, the module's default" in " ".join(specs[var]["description"]), var
        assert '    %s: "{{ %s | default(omit) }}"' % (key, var) in tasks, var


def test_the_benchmark_role_accepts_what_the_module_accepts():
    """Each role option benchmark_KEY that feeds the module's KEY has its type and choices: the role once refused
    api=generate, which the module takes (SGLang's native /generate)."""
    documented = yaml.safe_load(throughput_bench.DOCUMENTATION)["options"]
    specs = yaml.safe_load(load("roles", "benchmark", "meta", "argument_specs.yml"))["argument_specs"]["main"]["options"]
    assert specs["benchmark_api"]["choices"] == documented["api"]["choices"] == ["completions", "chat", "generate"]
    fed = [var for var in specs if var[len("benchmark_"):] in documented]
    assert "benchmark_engine" in fed and len(fed) >= 19, fed
    for var in fed:
        doc = documented[var[len("benchmark_"):]]
        assert specs[var]["type"] == doc["type"], var
        assert specs[var].get("choices") == doc.get("choices"), var
    # serve_variant's serving_bench passes its keys on as the benchmark role's benchmark_KEY (tasks/bench.yml)
    serving = yaml.safe_load(load("roles", "serve_variant", "meta", "argument_specs.yml"))["argument_specs"]["main"]
    bench = serving["options"]["serving_bench"]["options"]
    assert "api" in bench and len(bench) >= 10, sorted(bench)
    for key, option in bench.items():
        if key in documented:
            assert option["type"] == documented[key]["type"], key
            assert option.get("choices") == documented[key].get("choices"), key


def test_serve_variant_passes_an_unset_bench_setting_as_omit():
    text = load("roles", "serve_variant", "tasks", "bench.yml")
    for key in WITH_DEFAULT:
        if key == "engine":
            continue  # the variant's own engine, not the bench dict's
        found = re.findall(r"benchmark_%s: \"\{\{ ([^\n]*?) \}\}\"" % key, text)
        assert found, key
        assert found[0].endswith("| default(omit)"), (key, found[0])


def test_the_digest_and_the_client_take_their_defaults_from_the_spec():
    defaults = _bench_args.defaults()
    warm_up = ("warmup", "warmup_tolerance", "warmup_max_s")
    assert dict(_tune._WARMUP_KEYS) == dict((key, float(defaults[key])) for key in warm_up)
    # unset and the default share a digest, an explicit other value does not
    assert _tune.bench_digest({}) == _tune.bench_digest({"warmup": defaults["warmup"],
                                                         "warmup_tolerance": defaults["warmup_tolerance"]})
    assert _tune.bench_digest({}) != _tune.bench_digest({"warmup_tolerance": 0.1})
    bench = _bench.Bench(None, "m")
    assert (bench.input_tokens, bench.output_tokens, bench.timeout, bench.warmup_tolerance) == (
        defaults["input_tokens"], defaults["output_tokens"], defaults["timeout"], defaults["warmup_tolerance"])


def test_spec_hands_out_copies():
    one = _bench_args.spec()
    one["concurrency"]["default"].append(64)
    assert _bench_args.BENCH_SPEC["concurrency"]["default"] == [1, 32]
