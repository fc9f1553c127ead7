# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The decisions of replicas (serving_instances), each a pure function of plugin_utils/_replicas:
instances_plan, instance_fit, instance_engine_args, server_spec, replica_switch_plan, drain_metric,
serving_drain_metric, drain_metric_by_variant and hook_argv."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.plugin_utils._lazy import LazyModule

# Imported on first use: Ansible loads every filter file to find one filter (plugin_utils/_lazy.py).
_replicas = LazyModule("_replicas")


def _call(name, func, *args):
    try:
        return func(*args)
    except (_replicas.PlanError, AttributeError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("%s: %s" % (name, exc))


def instances_plan(instances, serving_name, selected="all", port=8000, gpu_check=None, max_unavailable=1,
                   min_available=1, engine=None, router=None, drain_timeout=None, on_error="raise"):
    """serving_instances checked: every instance, the selected ones and their batches. on_error=return gives
    {error: the message} instead of a filter error, for the role to fail with as a plain task."""
    try:
        return _replicas.instances_plan(instances, serving_name, selected, port, gpu_check, max_unavailable,
                                        min_available, engine, router, drain_timeout)
    except (_replicas.PlanError, AttributeError, TypeError, ValueError) as exc:
        if on_error == "return":
            return {"error": str(exc)}
        raise AnsibleFilterError("instances_plan: %s" % exc)


def instance_fit(instance, spec):
    """Why a resolved variant does not fit one instance of instances_plan ([] when it does)."""
    return _call("instance_fit", _replicas.instance_fit, instance, spec)


def instance_engine_args(instance, spec):
    """The variant's engine_args for one instance (SGLang: with the instance's nccl_port)."""
    return _call("instance_engine_args", _replicas.instance_engine_args, instance, spec)


def server_spec(spec, instance=None):
    """A resolved variant as inference_server's spec, for the host's one server or one instance."""
    return _call("server_spec", _replicas.server_spec, spec, instance)


def replica_switch_plan(plan, plans, canary=False, bench_always=False, pick=None, membership=None):
    """Which selected instances a run takes through the switch, in which batches, and the canary; which are
    put back into their router (membership: what the router lists; unset, what each plan read of it)."""
    return _call("replica_switch_plan", _replicas.switch_plan, plan, plans, canary, bench_always, pick, membership)


def drain_metric(spec):
    """The in-flight gauge a drain of this variant waits on ('' for none)."""
    return _call("drain_metric", _replicas.drain_metric, spec)


def serving_drain_metric(serving, catalog, engine=None, model=None):
    """The in-flight gauge a drain of an instance waits on, from the variant it serves now ('' for none)."""
    return _call("serving_drain_metric", _replicas.serving_drain_metric, serving, catalog, engine, model)


def drain_metric_by_variant(catalog, engine=None, model=None):
    """The drain gauge of every variant of the catalog that has one, {variant: gauge}."""
    return _call("drain_metric_by_variant", _replicas.drain_metric_by_variant, catalog, engine, model)


def hook_argv(argv, instance, url, host=""):
    """A router hook's argv for one instance, its placeholders replaced."""
    return _call("hook_argv", _replicas.hook_argv, argv, instance, url, host)


class FilterModule(object):
    def filters(self):
        return {"instances_plan": instances_plan, "instance_fit": instance_fit,
                "instance_engine_args": instance_engine_args, "server_spec": server_spec,
                "replica_switch_plan": replica_switch_plan, "drain_metric": drain_metric,
                "serving_drain_metric": serving_drain_metric, "drain_metric_by_variant": drain_metric_by_variant,
                "hook_argv": hook_argv}
