# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One instance and its router (serving_router), each a pure function of plugin_utils/_replicas:
converge_action, converge_words, worker_url, switch_router, router_type, router_membership, replicas_summary,
converge_result, bench_now and gpu_check_params; and
name_list of plugin_utils/_variants."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.plugin_utils._lazy import LazyModule

# Imported on first use: Ansible loads every filter file to find one filter (plugin_utils/_lazy.py).
_replicas = LazyModule("_replicas")
_variants = LazyModule("_variants")


def _call(name, func, *args):
    try:
        return func(*args)
    except (_replicas.PlanError, AttributeError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("%s: %s" % (name, exc))


def converge_action(result, membership=None):
    """What a converge call does to one server, from its plan or result: switch, relabel, keep (or add)."""
    return _call("converge_action", _replicas.converge_action, result, membership)


def converge_words(result, found=None, wanted="", planning=False):
    """What a converge call did (or its plan would do) to one server, in the words show.yml prints."""
    return _call("converge_words", _replicas.converge_words, result, found, wanted, planning)


def switch_router(router, worker, keep_healthy=0, drain_metric=None, drain_timeout=None,
                  drain_metric_by_variant=None, hook_instance=None):
    """inference_server's router option for one instance's switch or stop ({} without a router)."""
    return _call("switch_router", _replicas.switch_router, router, worker, keep_healthy, drain_metric, drain_timeout,
                 drain_metric_by_variant, hook_instance)


def worker_url(instance, router=None, serving_host="", address=""):
    """The URL under which the router knows one instance."""
    return _call("worker_url", _replicas.worker_url, instance, router, serving_host, address)


def router_type(router):
    """router_worker's router_type for serving_router (none for a command router)."""
    return _call("router_type", _replicas.router_type, router)


def router_membership(listing, instances, router=None, serving_host="", address=""):
    """Instance -> {listed, healthy, worker_url}, from the router's listing (None when none was read)."""
    return _call("router_membership", _replicas.router_membership, listing, instances, router, serving_host, address)


def replicas_summary(switch_plan, results=None, listed=None, failed=None, host=""):
    """How each selected instance ended (the module's outcome and words) and whether its router lists it."""
    return _call("replicas_summary", _replicas.replicas_summary, switch_plan, results, listed, failed, host)


def converge_result(first, job=None, plan=None):
    """One converge's result: the first call joined by the wait of a loading model, else the plan."""
    return _call("converge_result", _replicas.converge_result, first, job, plan)


def bench_now(mode, switching, enabled=True, bench=None, check_mode=False):
    """Whether a run benchmarks what it served (bench=always|never|auto)."""
    return _call("bench_now", _replicas.bench_now, mode, switching, enabled, bench, check_mode)


def gpu_check_params(instance, host_check):
    """The gpu_check of the server in scope: the instance's, else the host's without whole_host."""
    return _call("gpu_check_params", _replicas.gpu_check_params, instance, host_check)


def name_list(value):
    """Variant names from a list or a comma-separated string (-e variants=a,b), trimmed, empty ones left out."""
    return _variants.name_list(value)


class FilterModule(object):
    def filters(self):
        return {"converge_action": converge_action, "converge_words": converge_words, "worker_url": worker_url, "router_type": router_type,
                "switch_router": switch_router, "router_membership": router_membership,
                "replicas_summary": replicas_summary, "converge_result": converge_result, "bench_now": bench_now,
                "gpu_check_params": gpu_check_params,
                "name_list": name_list}
