# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The settings a benchmark sweep runs with, stated once: throughput_bench's argument spec takes them from here
(as inference_server takes its instance parameters from _instance_args), the benchmark and serve_variant roles
pass their variables through with omit, so that a default lives here and nowhere else, and the bench digest
(plugin_utils/_tune.py) fills a setting left unset with its default from here."""

from __future__ import annotations

import copy

from ansible_collections.inferops.serving.plugins.module_utils import _metrics

# where the acceptance length of speculative decoding is read from (module_utils/_bench.py); auto identifies it
BENCH_ENGINES = ("auto", "sglang", "vllm", "trtllm", "transformers", "openai")

BENCH_SPEC = dict(
    api=dict(type="str", default="completions", choices=["completions", "chat", "generate"]),
    # the sweep every role and playbook of the collection runs: one client alone, then a loaded server
    concurrency=dict(type="list", elements="int", default=[1, 32]),
    requests_per_level=dict(type="int"),
    input_tokens=dict(type="int", default=128, no_log=False),
    output_tokens=dict(type="int", default=256, no_log=False),
    ignore_eos=dict(type="bool", default=True),
    warmup=dict(type="int", default=1),
    warmup_tolerance=dict(type="float", default=0.05),
    warmup_max_s=dict(type="float", default=120.0),
    timeout=dict(type="float", default=600.0),
    slo=dict(type="dict", options=dict((key, dict(type="float")) for key, dummy in _metrics.SLO_TARGETS)),
    metrics_url=dict(type="str"),
    engine=dict(type="str", default="auto", choices=list(BENCH_ENGINES)),
    repeats=dict(type="int", default=1),
)


def spec():
    """A copy of BENCH_SPEC, for an argument spec (AnsibleModule may keep what it is given)."""
    return copy.deepcopy(BENCH_SPEC)


def defaults():
    """{setting: default} of the settings that have one."""
    return dict((key, copy.deepcopy(s["default"])) for key, s in BENCH_SPEC.items() if "default" in s)
