# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of what the results modules share: the one metric table and its views (pinned to the tables they
replaced, so every line, table and flag reads as before), the formatting helpers, the one history reader, and
the import graph of plugin_utils (no cycle)."""

from __future__ import annotations

import ast
import json
import os

import pytest

from ansible_collections.inferops.serving.plugins.plugin_utils import (
    _compare, _results_common, _results_history, _results_regressions)

PLUGIN_UTILS = "ansible_collections.inferops.serving.plugins.plugin_utils"


# ---- the metric table and its views ---------------------------------------------------------

def test_the_regression_view_is_throughput_and_tpot():
    assert [(m.key, m.label, m.unit, m.digits, m.better) for m in _results_common.REGRESSION_METRICS] == [
        ("output_throughput", "output throughput", "tok/s", 1, "higher"), ("tpot_ms", "TPOT p50", "ms", 2, "lower")]
    assert _results_regressions.threshold_text() == "output throughput drop or TPOT p50 rise"


def test_the_compare_view_keeps_its_rank_order_labels_and_places():
    assert [tuple(m)[:6] for m in _compare.METRICS] == [
        ("output_throughput", "output", "output throughput", "tok/s", 1, "higher"),
        ("tpot_ms", "TPOT", "TPOT p50", "ms", 2, "lower"),
        ("ttft_ms", "TTFT", "TTFT p50", "ms", 1, "lower"),
        ("decode_tps_per_request", "decode", "decode tok/s per request p50", "tok/s", 1, "higher"),
        ("goodput", "goodput", "goodput", "req/s", 2, "higher"),
        ("slo_attainment", "SLO met", "SLO attainment", "", 2, "higher"),
        ("acceptance_length", "acceptance", "acceptance length", "", 2, "higher")]
    assert [m.column for m in _compare.METRICS] == ["output tok/s", "TPOT p50 ms", "TTFT p50 ms", "decode tok/s",
                                                    "goodput req/s", "SLO met", "acceptance"]
    places = _compare._PLACES  # pylint: disable=protected-access
    assert [key for key in _compare.METRIC_KEYS if len(places[key]) > 1] == ["tpot_ms", "ttft_ms", "decode_tps_per_request"]


def test_the_summary_view_is_the_identity_then_the_figures_in_their_order():
    assert _results_common.SUMMARY_KEYS == (
        "host", "variant", "fingerprint", "concurrency", "repeat", "completed", "failed", "output_throughput",
        "decode_tps_per_request", "e2e_tps_per_request", "ttft_ms", "tpot_ms", "acceptance_length")


def test_every_metric_has_one_row_and_a_direction():
    keys = [m.key for m in _results_common.METRICS]
    assert len(keys) == len(set(keys)) and set(_results_common.BY_KEY) == set(keys)
    assert all(m.better in ("higher", "lower") for m in _results_common.METRICS)
    ranks = [m.compared for m in _results_common.METRICS if m.compared is not None]
    assert sorted(ranks) == list(range(1, len(ranks) + 1))
    assert all(m.column for m in _results_common.COMPARED)


# ---- formatting -----------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [(3, 3), (2.5, 2.5), (0, 0), (True, None), ("1", None), (None, None)])
def test_num_keeps_a_number_as_it_is(value, expected):
    got = _results_common.num(value)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("args, kwargs, expected", [
    ((None,), {}, "-"), ((2.25,), {}, "2.2"), ((2.25, 2), {}, "2.25"), ((3, 2), {}, "3"), (("x",), {}, "x"),
    ((None, 2), {"fixed": True}, "-"), ((3, 2), {"fixed": True}, "3.00"), ((0.5, 0), {"fixed": True}, "0")])
def test_fmt_prints_floats_with_digits_and_other_values_as_they_are_unless_fixed(args, kwargs, expected):
    assert _results_common.fmt(*args, **kwargs) == expected


def test_md_escape_escapes_pipes():
    assert _results_common.md_escape("a|b") == "a\\|b" and _results_common.md_escape(4) == "4"


# ---- the one history reader -----------------------------------------------------------------

def test_the_file_reader_is_the_text_reader_less_the_records_without_a_key(tmp_path):
    lines = ['{"host": "h", "variant": "v", "concurrency": 1}', '{"host": "h", "varia', "", "[1, 2]",
             '{"host": "h", "run": "r"}', '{"host": "h", "variant": "v", "concurrency": 2}']
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert [r.get("concurrency") for r in _results_history.parse_history(path.read_text())] == [1, None, 2]
    records, skipped = _results_history.read_history(str(path))
    assert [r["concurrency"] for r in records] == [1, 2] and skipped == 3
    assert _results_history.parse_history(None) == [] and _results_history.parse_history(json.dumps([1])) == []


# ---- the import graph -----------------------------------------------------------------------

def _imports_among_plugin_utils():
    """{module: set of the plugin_utils modules it imports} read from the source."""
    here = os.path.dirname(os.path.abspath(_results_common.__file__))
    names = set(name[:-3] for name in os.listdir(here) if name.endswith(".py") and name != "__init__.py")
    graph = {}
    for name in names:
        with open(os.path.join(here, name + ".py"), encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == PLUGIN_UTILS:
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PLUGIN_UTILS + "."):
                found.add(node.module.rsplit(".", 1)[1])
            elif isinstance(node, ast.Import):
                found.update(a.name.rsplit(".", 1)[1] for a in node.names if a.name.startswith(PLUGIN_UTILS + "."))
        graph[name] = found & names
    return graph


def _reachable(graph, start):
    seen, todo = set(), list(graph[start])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph[name])
    return seen


def test_plugin_utils_has_no_import_cycle():
    graph = _imports_among_plugin_utils()
    assert "_bench_facts" not in graph
    assert graph["_results_common"] == set()
    assert graph["_compare"] == {"_results_common", "_resolved_diff", "_steady", "_stats", "_compare_render", "_compare_schedule"}
    assert graph["_stats"] == set()
    assert [name for name in sorted(graph) if name in _reachable(graph, name)] == []
