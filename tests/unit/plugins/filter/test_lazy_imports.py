# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Loading the filter files imports none of plugin_utils (Ansible loads them all, in each worker, for every task
that names one filter: plugin_utils/_lazy.py); a filter imports what it uses when it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
PLUGIN_UTILS = "ansible_collections.inferops.serving.plugins.plugin_utils."

# A fresh interpreter: this one has imported plugin_utils for the other tests.
PROBE = r"""
import importlib, json, os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "collections"))
prefix = "ansible_collections.inferops.serving.plugins."
def loaded():
    return sorted(name[len(prefix) + len("plugin_utils."):] for name in sys.modules
                  if name.startswith(prefix + "plugin_utils."))
filters = {}
for file in sorted(os.listdir(os.path.join(sys.argv[1], "plugins", "filter"))):
    if file.endswith(".py"):
        filters.update(importlib.import_module(prefix + "filter." + file[:-3]).FilterModule().filters())
out = {"count": len(filters), "after_load": loaded()}
out["name_list"] = filters["name_list"]("a, b,,c")
out["after_name_list"] = loaded()
out["bench_digest"] = filters["bench_digest"]({"concurrency": [1]})
out["after_bench_digest"] = loaded()
print(json.dumps(out))
"""


def _probe():
    done = subprocess.run([sys.executable, "-c", PROBE, ROOT], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_loading_every_filter_file_imports_only_the_proxy():
    out = _probe()
    assert out["count"] >= 40  # every filter of plugins/filter/*.yml was loaded
    assert out["after_load"] == ["_lazy"]


def test_a_filter_imports_its_module_when_it_runs_and_only_that():
    out = _probe()
    assert out["name_list"] == ["a", "b", "c"]
    assert out["after_name_list"] == ["_lazy", "_variants"]
    assert isinstance(out["bench_digest"], str) and out["bench_digest"]
    # _tune and whatever it imports itself, and still nothing of the replicas, rollout or compare files
    assert "_tune" in out["after_bench_digest"]
    assert not {"_replicas", "_rollout", "_compare", "_run_report"} & set(out["after_bench_digest"])


def test_the_proxy_names_its_module_and_raises_for_a_missing_name():
    from ansible_collections.inferops.serving.plugins.plugin_utils._lazy import LazyModule

    proxy = LazyModule("_variants")
    assert "not imported yet" in repr(proxy)
    assert callable(proxy.name_list)
    assert "_variants, imported" in repr(proxy)
    try:
        getattr(proxy, "no_such_function")
    except AttributeError as exc:
        assert "no_such_function" in str(exc)
    else:
        raise AssertionError("a missing name must raise AttributeError")
