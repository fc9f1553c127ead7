# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Collecting one playbook run's results for bench_facts: which task results count (benchmarks, GPU checks,
servers; loops and async jobs included), grouped by host in a RunCollector, and the variant comparison the
playbook published with set_stats. Plain functions over plain data (task results as dicts), unit-tested
without Ansible.
"""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.plugin_utils._results_common import bench_levels, is_level, repeat_index

BENCH_ACTION = "throughput_bench"
GPU_ACTION = "gpu_idle_check"
SERVER_ACTION = "inference_server"
ASYNC_STATUS = "async_status"

DEFAULT_VARIANT = "default"
# the set_stats key under which playbooks/compare.yml publishes {host: compare_variants verdict}
COMPARE_STAT = "inferops_compare"


def _short(action):
    return (action or "").rsplit(".", 1)[-1]


def classify(action, result):
    """Which kind of result this is: 'bench', 'gpu', 'server' or None.

    Direct calls are known by the action name (short or FQCN). A job started with ``async`` and
    ``poll: 0`` ends in an ``async_status`` result that carries the module's own keys once
    finished, so those are known by their shape.
    """
    if not isinstance(result, dict):
        return None
    name = _short(action)
    if name == BENCH_ACTION:
        return "bench" if bench_levels(result) else None
    if name == GPU_ACTION:
        return "gpu"
    if name == SERVER_ACTION:
        return "server"
    if name == ASYNC_STATUS:
        if not result.get("finished"):
            return None
        if bench_levels(result):
            return "bench"
        if "gpus" in result and "clean" in result:
            return "gpu"
        if "argv" in result and ("fingerprint" in result or "ready_s" in result):
            return "server"
    return None


def loop_items(result):
    """The per-item results of a looped task's final result, or None when it is not a loop."""
    items = result.get("results") if isinstance(result, dict) else None
    if isinstance(items, list) and items and all(
            isinstance(i, dict) and ("ansible_loop_var" in i or "item" in i) and not is_level(i) for i in items):
        return items
    return None


def split_repeats(levels):
    """The levels of one throughput_bench result as one list per repeat (their labels.repeat, in the order
    met); a result without repeat labels is one list."""
    groups, order = {}, []
    for level in levels:
        labels = level.get("labels") if isinstance(level.get("labels"), dict) else {}
        key = repeat_index(labels.get("repeat"))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(level)
    return [groups[key] for key in order]


def _pick(result, keys):
    return dict((k, result[k]) for k in keys if k in result)


class RunCollector(object):
    """Everything one playbook run produced that bench_facts records, grouped by host."""

    def __init__(self):
        self.plays = []
        self.hosts = {}
        self.order = []

    def _host(self, host):
        if host not in self.hosts:
            self.hosts[host] = {"gpu_checks": [], "servers": [], "benchmarks": []}
            self.order.append(host)
        return self.hosts[host]

    def add_play(self, name):
        if name not in self.plays:
            self.plays.append(name)

    def add(self, host, action, task, result, status="ok"):
        """Record one task result; returns the kind recorded or None. Loop results are split."""
        items = loop_items(result)
        if items is not None:
            kinds = [self.add(host, action, task, item, "failed" if item.get("failed") else status) for item in items]
            return next((k for k in kinds if k), None)
        kind = classify(action, result)
        if kind is None:
            return None
        entry = self._host(host)
        if kind == "gpu":
            self._gpu_check(entry, result, task, status)
        elif kind == "server":
            if isinstance(result.get("gpu_check"), dict):  # inference_server's gpu_check, between stop and start
                self._gpu_check(entry, dict(result["gpu_check"], msg=result.get("msg") if status != "ok" else None),
                                "%s (gpu_check)" % task, status)
            if status == "ok" and result.get("pid") is None:
                return None  # a stop, or a plan that would start: no server to record
            server = _pick(result, ("argv", "pid", "url", "fingerprint", "variant", "ready_s", "resolved", "msg",
                                    "log_tail"))
            server.update(task=task, status=status)
            last = entry["servers"][-1] if entry["servers"] else {}
            if server.get("pid") is not None and (last.get("pid"), last.get("fingerprint"), last.get("status")) == (
                    server.get("pid"), server.get("fingerprint"), status):
                # the same engine again: a start's first call (loading) then its wait, or a later no-op call
                for key in ("ready_s", "resolved"):  # what the first call knew, when the later one has none
                    server[key] = last.get(key) if last.get(key) is not None else server.get(key)
                entry["servers"][-1] = dict(last, **server)
            else:
                entry["servers"].append(server)
        else:
            # one benchmark per repeat: a throughput_bench call with repeats returns every repeat's levels
            for levels in split_repeats(bench_levels(result)):
                labels = {}
                for level in levels:
                    if isinstance(level.get("labels"), dict):
                        labels.update(level["labels"])
                entry["benchmarks"].append({"task": task, "status": status, "labels": labels,
                                            "client": result.get("client") or {}, "levels": levels})
        return kind

    @staticmethod
    def _gpu_check(entry, result, task, status):
        gpu = _pick(result, ("clean", "gpus", "killed", "waited_s", "backend", "msg"))
        if gpu.get("msg") is None:
            gpu.pop("msg", None)
        gpu.update(task=task, status=status)
        entry["gpu_checks"].append(gpu)

    def identity(self, host, bench):
        """(variant, fingerprint) of a benchmark: its labels, else the host's last server result."""
        servers = [s for s in self.hosts[host]["servers"] if s.get("status") == "ok"] or self.hosts[host]["servers"]
        server = servers[-1] if servers else {}
        variant = bench["labels"].get("variant") or server.get("variant") or DEFAULT_VARIANT
        fingerprint = bench["labels"].get("fingerprint") or server.get("fingerprint")
        return str(variant), fingerprint

    def is_empty(self):
        return not self.hosts


# ---- variant comparisons: playbooks/compare.yml publishes compare_variants verdicts with set_stats ----

def _is_verdict(value):
    return isinstance(value, dict) and any(k in value for k in ("comparisons", "summaries", "lines"))


def compare_verdicts(custom, order=()):
    """[(host, verdict)] published as the COMPARE_STAT custom stat, the hosts of ``order`` first.

    ``custom`` is the playbook's custom stats (``AggregateStats.custom``): {"_run": {stat: value}}
    for ``set_stats`` with ``per_host: false`` (``aggregate: true`` merges the {host: verdict} dict of
    each host into one), {host: {stat: value}} with ``per_host: true``; both are read. A value that is
    not a compare_variants verdict is skipped.
    """
    if not isinstance(custom, dict):
        return []
    found = {}
    scopes = [custom.get("_run")] + [custom[key] for key in custom if key != "_run"]
    for scope in scopes:
        published = scope.get(COMPARE_STAT) if isinstance(scope, dict) else None
        if not isinstance(published, dict):
            continue
        for host, verdict in published.items():
            if _is_verdict(verdict):
                found[str(host)] = verdict
    order = [str(h) for h in order or ()]
    hosts = [h for h in order if h in found] + [h for h in found if h not in order]
    return [(host, found[host]) for host in hosts]
