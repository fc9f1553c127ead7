# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Replicas (serving_instances): several engines on one host, each on its own GPUs and port.

Pure Python on the controller, unit-tested without Ansible; role serve_variant shows and applies what
these return (through the filters of plugins/filter/replicas.py):
instances_plan (the host's instances checked, the ones a run switches and in which batches),
instance_fit (whether a resolved variant fits one instance: its parallel sizes against the instance's
GPU count, its env and its NCCL port) and instance_engine_args (the variant's engine_args with the
instance's NCCL port added for SGLang).

serving_instances maps an instance name to {gpus: [int, ...], port: int} with optional variant (str),
nccl_port (int) and router (dict, passed through). A host without it is one instance on every GPU,
exactly as before: the plan then holds one implicit entry (instance None).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from ansible_collections.inferops.serving.plugins.module_utils import _router
from ansible_collections.inferops.serving.plugins.plugin_utils import _variants

# an instance becomes server <serving_name>.<instance>: no dot in the name, so no two can collide
NAME = re.compile(r"[A-Za-z0-9_-]+")
KEYS = ("gpus", "nccl_port", "port", "router", "variant")
# SGLang's NCCL rendezvous port, when the instance sets none and the host's engine is sglang: the
# instance's port + NCCL_OFFSET. SGLang itself picks a free port at start when --nccl-port is unset
# (0.5.23 srt/server_args.py PortArgs.init_new: get_free_port_below_ephemeral(), a random free port of
# 22000-29999; 0.5.9: get_free_port()), so instances started together race for one, and during a roll a
# stopped instance's declared port is free for another to take. Pinned and derived from the port, the
# port is the same on every run and checked against every port the host declares.
NCCL_OFFSET = 10000
# CUDA numbers devices fastest first unless told otherwise; NVML and nvidia-smi (the GPU check) number
# them by PCI bus. The instance's GPU indices mean the same to both only with this order.
DEVICE_ORDER = "PCI_BUS_ID"
TRUE = ("true", "yes", "on", "1", "y")


class PlanError(ValueError):
    """Bad serving_instances, selection or setting; the message says what and what is allowed."""


def _flag(value):
    """A boolean as Ansible may hand it over (True, 'true', 'yes', 1)."""
    if isinstance(value, str):
        return value.strip().lower() in TRUE
    return bool(value)


def _int(value):
    """An int given as an int or as digits; None for anything else (booleans included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _plain(value):
    """A copy with dicts and lists rebuilt (not the templating state of Ansible's lazy containers)."""
    if isinstance(value, Mapping):
        return dict((key, _plain(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _join(values):
    return ", ".join(str(value) for value in values)


def _gpus(name, value, problems):
    """The instance's GPU indices, sorted; a list of ints >= 0 or a string '0,1'. None when wrong."""
    shape = "a non-empty list of distinct GPU indices (integers >= 0, such as [0, 1], or the string '0,1')"
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        problems.append("instance %s: gpus must be %s, got %r" % (name, shape, value))
        return None
    gpus = [_int(item) for item in items]
    bad = [item for item, gpu in zip(items, gpus) if gpu is None or gpu < 0]
    if bad:
        problems.append("instance %s: gpus must be %s, got %r (not a GPU index: %s)"
                        % (name, shape, value, _join(repr(item) for item in bad)))
        return None
    twice = sorted(set(gpu for gpu in gpus if gpus.count(gpu) > 1))
    if twice:
        problems.append("instance %s: gpus must be %s, got %r (listed twice: %s)" % (name, shape, value, _join(twice)))
        return None
    return sorted(gpus)


def _port(name, key, value, problems):
    port = _int(value)
    if port is None or not 1 <= port <= 65535:
        problems.append("instance %s: %s must be an integer from 1 to 65535, got %r" % (name, key, value))
        return None
    return port


def _setting(what, variable, value, least, problems):
    number = _int(value)
    if number is None or number < least:
        problems.append("%s (%s) must be an integer >= %d, got %r" % (what, variable, least, value))
    return number


def _entry(name, raw, engine, problems):
    """One declared instance checked: {gpus, port, variant, nccl_port, nccl_derived, router}, or None."""
    if not isinstance(raw, Mapping):
        problems.append("instance %s must be a dict with gpus and port (optional: variant, nccl_port, router), "
                        "got %s" % (name, type(raw).__name__))
        return None
    count = len(problems)
    unknown = sorted(str(key) for key in raw if key not in KEYS)
    if unknown:
        problems.append("instance %s has unknown key(s) %s; allowed: %s" % (name, _join(unknown), _join(KEYS)))
    gpus = port = nccl = None
    if raw.get("gpus") is None:
        problems.append("instance %s has no gpus: the list of its GPU indices, such as [0, 1]" % name)
    else:
        gpus = _gpus(name, raw["gpus"], problems)
    if raw.get("port") is None:
        problems.append("instance %s has no port: each instance serves on its own, 1-65535" % name)
    else:
        port = _port(name, "port", raw["port"], problems)
    derived = False
    if raw.get("nccl_port") is not None:
        nccl = _port(name, "nccl_port", raw["nccl_port"], problems)
    elif engine in ("sglang", None, "") and port is not None and (engine == "sglang" or port + NCCL_OFFSET <= 65535):
        # the host's engine unknown: a variant may be SGLang, so derive one where it can be
        nccl, derived = port + NCCL_OFFSET, True
        if nccl > 65535:
            problems.append("instance %s: its NCCL port would be port + %d = %d, above 65535: set nccl_port on %s "
                            "(a port no other instance of the host declares)" % (name, NCCL_OFFSET, nccl, name))
            nccl = None
    variant = raw.get("variant")
    if variant is not None and not isinstance(variant, str):
        problems.append("instance %s: variant must be the name of a variant of serving_variants, got %r"
                        % (name, variant))
    router = raw.get("router")
    if router is not None and not isinstance(router, Mapping):
        problems.append("instance %s: router must be a dict (this instance's router settings, such as worker_url), "
                        "got %r" % (name, router))
    if len(problems) > count:
        return None
    return {"gpus": gpus, "port": port, "variant": variant or None, "nccl_port": nccl, "nccl_derived": derived,
            "router": _plain(router) if router is not None else None}


def _clashes(entries, problems):
    """Overlapping GPU sets, and any port declared twice on the host: every instance's port and nccl_port."""
    names = sorted(entries)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            shared = sorted(set(entries[first]["gpus"]) & set(entries[second]["gpus"]))
            if shared:
                problems.append("instances %s and %s share GPU(s) %s: each instance needs GPUs of its own"
                                % (first, second, _join(shared)))
    owners = {}
    for name in names:
        entry = entries[name]
        owners.setdefault(entry["port"], []).append((name, "port"))
        if entry["nccl_port"] is not None:
            owners.setdefault(entry["nccl_port"], []).append(
                (name, "nccl_port (port + %d)" % NCCL_OFFSET if entry["nccl_derived"] else "nccl_port"))
    for port in sorted(owners):
        holders = owners[port]
        if len(holders) < 2 or all(what.startswith("nccl_port (") for dummy, what in holders):
            continue  # derived NCCL ports clash only where the ports they come from do, said once
        if all(what == "port" for dummy, what in holders):
            problems.append("instances %s %s use port %d: each instance needs a port of its own"
                            % (" and ".join(name for name, dummy in holders), "both" if len(holders) == 2 else "all",
                               port))
            continue
        nccl = [name for name, what in holders if what != "port"]
        problems.append("port %d is declared twice on this host: %s; every port and NCCL port of the host's "
                        "instances must differ (set nccl_port on %s to another)"
                        % (port, " and ".join("instance %s's %s" % (name, what) for name, what in holders),
                           _join(sorted(set(nccl)))))


def _selection(selected, declared):
    """The selected instance names, in name order. 'all', empty or None: every declared instance."""
    if selected is None:
        return list(declared)
    if isinstance(selected, str):
        asked = [part.strip() for part in selected.split(",")]
    elif isinstance(selected, (list, tuple)):
        if not all(isinstance(item, str) for item in selected):
            raise PlanError("instances must be 'all', a comma-separated string or a list of instance names, got %r"
                            % (selected,))
        asked = [item.strip() for item in selected]
    else:
        raise PlanError("instances must be 'all', a comma-separated string or a list of instance names, got %r"
                        % (selected,))
    asked = [name for name in asked if name]
    if not asked or asked == ["all"]:
        return list(declared)
    if not declared:
        raise PlanError("instances=%s asked, but this host declares no serving_instances: it is one instance on "
                        "every GPU (leave instances unset, or 'all')" % ",".join(asked))
    unknown = [name for name in asked if name not in declared]
    if unknown:
        raise PlanError("instances names %s, not declared on this host; its serving_instances: %s (or all)"
                        % (_join(unknown), _join(declared)))
    return [name for name in declared if name in asked]


def _batches(selected, declared, max_unavailable, min_available):
    """The selected instances in batches of at most max_unavailable; with two or more declared
    instances, a batch never leaves fewer than min_available of them (those not in it) in service."""
    size = max_unavailable
    if len(declared) >= 2:
        room = len(declared) - min_available
        if room < 1:
            raise PlanError("serving_min_available %d with %d instances (%s): taking even one out would leave %d "
                            "in service; lower serving_min_available to at most %d, or declare more instances"
                            % (min_available, len(declared), _join(declared), len(declared) - 1,
                               len(declared) - 1))
        size = min(size, room)
    return [selected[i:i + size] for i in range(0, len(selected), size)]


def _gpu_check(gpu_check, gpus):
    """The gpu_idle_check parameters of one instance: its GPUs, or every GPU with whole_host (the key
    itself is never passed on)."""
    check = _plain(gpu_check or {})
    whole = _flag(check.pop("whole_host", False))
    if whole:
        check.pop("gpus", None)
    else:
        check["gpus"] = list(gpus)
    return check


def instances_plan(instances, serving_name, selected="all", port=8000, gpu_check=None, max_unavailable=1,
                   min_available=1, engine=None, router=None, drain_timeout=None):
    """The host's instances checked, and which of them a run switches, in which batches.

    instances: serving_instances (None or empty: one implicit instance on every GPU, as before);
    serving_name: the host's server name (an instance serves as <serving_name>.<instance>); selected:
    'all', a comma-separated string or a list of instance names; port and gpu_check: the host's own
    (serving_port, the gpu_idle_check parameters); max_unavailable / min_available: at most that many
    instances out at once, never fewer than min_available of the host's instances in service (with two
    or more); engine: the host's engine (serving_engine): for sglang, an instance without nccl_port gets
    port + NCCL_OFFSET; router and drain_timeout: serving_router and serving_drain_timeout, checked by
    router_problems (None: not checked).

    Returns replicated (whether the host declares instances), instances (every one in name order:
    instance, name, port, gpus (sorted; None for the implicit one: every GPU), variant, nccl_port,
    router, env (CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER; {} for the implicit one), gpu_check (the
    host's with the instance's gpus, or without gpus under whole_host; the implicit one's unchanged but
    for whole_host, which is never passed on) and selected), selected (the instance keys a run switches,
    [None] for the implicit one), batches (selected, in batches) and the two settings as ints. Raises
    PlanError naming everything wrong and what is allowed.
    """
    problems = []
    max_unavailable = _setting("max_unavailable", "serving_max_unavailable", max_unavailable, 1, problems)
    min_available = _setting("min_available", "serving_min_available", min_available, 0, problems)
    if gpu_check is not None and not isinstance(gpu_check, Mapping):
        problems.append("gpu_check (serving_gpu_check) must be a dict of gpu_idle_check parameters, got %s"
                        % type(gpu_check).__name__)
    problems.extend(router_problems(router, drain_timeout))
    if engine is not None and not isinstance(engine, str):
        problems.append("engine (serving_engine) must be an engine name, got %r" % (engine,))
    if instances is not None and not isinstance(instances, Mapping):
        problems.append("serving_instances must be a dict of instance name -> {gpus, port} (optional: variant, "
                        "nccl_port, router), got %s" % type(instances).__name__)
        instances = None
    entries = {}
    for raw_name in sorted(instances or {}, key=str):
        if not isinstance(raw_name, str) or not NAME.fullmatch(raw_name):
            problems.append("instance name %r must be letters, digits, '_' and '-' only (it becomes "
                            "<serving_name>.<instance>, so no dot)" % (raw_name,))
            continue
        entry = _entry(raw_name, instances[raw_name], engine, problems)
        if entry is not None:
            entries[raw_name] = entry
    _clashes(entries, problems)  # among the instances that are right by themselves
    if problems:
        raise PlanError("Bad serving_instances or settings: %s." % "; ".join(problems))
    declared = sorted(entries)
    chosen = _selection(selected, declared)
    settings = {"min_available": min_available, "max_unavailable": max_unavailable}
    if not declared:
        check = gpu_check
        if isinstance(gpu_check, Mapping) and "whole_host" in gpu_check:
            check = dict((key, value) for key, value in _plain(gpu_check).items() if key != "whole_host")
        only = {"instance": None, "name": serving_name, "port": port, "gpus": None, "variant": None,
                "nccl_port": None, "router": None, "env": {}, "gpu_check": check, "selected": True}
        return dict(settings, replicated=False, instances=[only], selected=[None], batches=[[None]], keep_healthy=0)
    out = []
    for name in declared:
        entry = entries[name]
        out.append({"instance": name, "name": "%s.%s" % (serving_name, name), "port": entry["port"],
                    "gpus": entry["gpus"], "variant": entry["variant"], "nccl_port": entry["nccl_port"],
                    "router": entry["router"],
                    "env": {"CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in entry["gpus"]),
                            "CUDA_DEVICE_ORDER": DEVICE_ORDER},
                    "gpu_check": _gpu_check(gpu_check, entry["gpus"]), "selected": name in chosen})
    # the router must keep this many other healthy workers when one is taken out: the last healthy replica
    # is never taken out, on a host of two or more instances (one instance switches as it always has)
    return dict(settings, replicated=True, instances=out, selected=chosen,
                batches=_batches(chosen, declared, max_unavailable, min_available),
                keep_healthy=min_available if len(declared) > 1 else 0)


# ---- the router before the instances (serving_router) ------------------------------------------

# The router types an inventory may name: _router.ROLE_ROUTER_TYPES, router_worker's own (ROUTER_TYPES: sglang,
# smg, vllm, auto, and none, its mode without a router API) and command (argv hooks drive any other load balancer,
# run by inference_server's router option). A router type added there needs no edit here.
COMMAND = _router.COMMAND
# no router API: router_worker only waits for the drain (a load balancer the operator drives otherwise)
NO_ROUTER = "none"
DEFAULT_ROUTER = "sglang"
ROUTER_TYPES = _router.ROLE_ROUTER_TYPES
# serving_host values that name no one address a router could reach the instance at
ANY_ADDRESS = ("", "0.0.0.0", "::")


def router_problems(router, drain_timeout=None):
    """What is wrong with serving_router and serving_drain_timeout, each in the inventory's words ([] when
    nothing is). None or {} is no router. A key is never echoed."""
    problems = []
    if drain_timeout is not None and drain_timeout != "":
        try:
            seconds = float(drain_timeout)
        except (TypeError, ValueError):
            seconds = None
        if isinstance(drain_timeout, bool) or seconds is None or math.isnan(seconds) or seconds <= 0:
            problems.append("serving_drain_timeout: %s must be a number of seconds above 0 (how long an instance "
                            "out of its router may take to finish its requests)" % (drain_timeout,))
    if router is None or (isinstance(router, Mapping) and not router):
        return problems
    if not isinstance(router, Mapping):
        return problems + ["serving_router must be a dict (type, url, api_key, worker_host; or type command with "
                           "remove and add), got %s" % type(router).__name__]
    kind = router.get("type") or DEFAULT_ROUTER
    if kind not in ROUTER_TYPES:
        problems.append("serving_router.type: %r is not a router type; allowed: %s" % (kind, _join(ROUTER_TYPES)))
        return problems
    if kind == COMMAND:
        for key in ("remove", "add"):
            argv = router.get(key)
            if not isinstance(argv, (list, tuple)) or not argv or not all(
                    isinstance(arg, (str, int, float)) for arg in argv):
                problems.append("serving_router.%s: type command needs the argv of the hook that %s an instance "
                                "(a non-empty list of strings, run without a shell), got %r"
                                % (key, "takes out" if key == "remove" else "puts back", argv))
    url = router.get("url")
    if kind != COMMAND and (url or kind != NO_ROUTER):
        # one router, or a list of them (routers run in pairs: membership is converged on each)
        urls = url if isinstance(url, (list, tuple)) else [url]
        if not url:
            problems.append("serving_router.url: type %s needs the router's URL (http://HOST:PORT), or a list of them" % kind)
        for one in urls if url else []:
            if not isinstance(one, str) or (urlsplit(one.strip()).scheme or "").lower() not in ("http", "https"):
                problems.append("serving_router.url: %r is not an http(s) URL (http://HOST:PORT)" % (one,))
                continue
            try:
                _router.Url(one, "serving_router.url")
            except ValueError as exc:
                problems.append(str(exc))
    key = router.get("api_key")
    if key is not None and key != "" and not isinstance(key, str):
        problems.append("serving_router.api_key must be a string, the key the router was started with "
                        "(--api-key), got a %s" % type(key).__name__)
    host = router.get("worker_host")
    if host is not None and (not isinstance(host, str) or not host.strip() or "/" in host):
        problems.append("serving_router.worker_host: %r is not a host name or address (how the router reaches "
                        "this host)" % (host,))
    return problems


def router_type(router):
    """router_worker's router_type for serving_router: its type (sglang when unset), none for command (its
    hooks take the instance out; router_worker only waits for the drain)."""
    kind = (router.get("type") if isinstance(router, Mapping) else None) or DEFAULT_ROUTER
    return "none" if kind == COMMAND else kind


def switch_router(router, worker, keep_healthy=0, drain_metric=None, drain_timeout=None,
                  drain_metric_by_variant=None, hook_instance=None):
    """inference_server's router option for one instance's switch (issue 34: out of the router, drained, switched
    and back in, one unit under the instance lock that the host finishes) or stop (out and drained, then stopped):
    serving_router's url, type and key, the instance's worker URL, keep_healthy, the drain gauge of what it serves
    now and serving_drain_timeout. drain_metric_by_variant, the gauge per variant (drain_metric_by_variant()), is
    for a call that does not know what serves: the module drains on the gauge of the variant its state file records.
    A command router's remove and add hooks go with it, each filled in for ``hook_instance`` (hook_argv()): the module
    runs them inside the unit. {} for no router."""
    if not isinstance(router, Mapping) or not router:
        return {}
    kind = router.get("type") or DEFAULT_ROUTER
    option = {"type": kind, "worker_url": worker}
    if kind == COMMAND:  # no keep_healthy: a load balancer that hooks drive has no list to count healthy workers in
        option.update(remove=hook_argv(router.get("remove"), hook_instance, worker),
                      add=hook_argv(router.get("add"), hook_instance, worker))
    else:
        option["keep_healthy"] = int(keep_healthy or 0)
    if router.get("url"):
        option["url"] = router["url"] if isinstance(router["url"], list) else [router["url"]]
    if router.get("api_key"):
        option["api_key"] = router["api_key"]
    if drain_metric:
        option["drain_metric"] = drain_metric
    if drain_timeout not in (None, ""):
        option["drain_timeout"] = float(drain_timeout)
    if drain_metric_by_variant:
        option["drain_metric_by_variant"] = dict(drain_metric_by_variant)
    return option


def worker_url(instance, router=None, serving_host="", address=""):
    """The URL under which the router knows an instance: its own router.worker_url, else http://HOST:PORT with
    HOST serving_router.worker_host, else serving_host when it names one address, else the inventory's
    address (ansible_host, else the inventory name)."""
    instance = instance if isinstance(instance, Mapping) else {}
    own = (instance.get("router") or {}).get("worker_url") if isinstance(instance.get("router"), Mapping) else None
    if own:
        return str(own)
    router = router if isinstance(router, Mapping) else {}
    host = router.get("worker_host") or (serving_host if (serving_host or "") not in ANY_ADDRESS else "") or address
    host = str(host or "")
    if ":" in host and not host.startswith("["):
        host = "[%s]" % host  # an IPv6 address in a URL
    return "http://%s:%s" % (host, instance.get("port"))


def router_membership(listing, instances, router=None, serving_host="", address=""):
    """Whether the router lists each instance of the host, and healthy: listing is router_worker's result
    (its ``workers``: url and is_healthy of each), instances instances_plan's instances (each matched under
    worker_url). Returns instance -> {listed, healthy, worker_url, router_url (the listing's)}; None when no listing
    was read (no router, a command router, or the read was skipped)."""
    if not isinstance(listing, Mapping) or not isinstance(listing.get("workers"), (list, tuple)):
        return None
    if not isinstance(instances, (list, tuple)):
        raise PlanError("the instances must be instances_plan's instances (a list), got %s"
                        % type(instances).__name__)
    workers = [w for w in listing["workers"] if isinstance(w, Mapping)]
    out = {}
    for entry in instances:
        if not isinstance(entry, Mapping) or entry.get("instance") is None:
            continue
        url = worker_url(entry, router, serving_host, address)
        try:
            found = _router.find_worker(url, workers)  # router_worker's own rule
        except ValueError:
            found = []
        out[entry["instance"]] = {"listed": bool(found), "healthy": any(w.get("is_healthy") is True for w in found),
                                  "worker_url": url, "router_url": listing.get("router_url")}
    return out


# ---- which instances a run takes through the switch ------------------------------------------

SWITCH, RELABEL, KEEP, ADD = "switch", "relabel", "keep", "add"


def converge_action(result, membership=None):
    """What inference_server's plan (check mode) says a converge call would do to one server: switch
    (stop what serves and start the variant, or start it where nothing serves), relabel (a server of
    this very configuration only takes the variant's name) or keep (it serves the variant, healthy).
    The same rule as the role's serve_variant_switching / serve_variant_relabel.
    With membership ({listed, healthy}: what its router lists, None when no router is read), a server kept
    that the router does not list healthy is add: put back into its router, nothing else changes."""
    result = result or {}
    outcome = result.get("outcome")
    if outcome == "relabelled":
        return RELABEL
    # a check-mode plan's outcome is null when it plans a switch (inference_server's RETURN): read so, the plan
    # reports no change of its own (changed_when false) and still says what the switch would do
    planned = "outcome" in result and outcome is None
    if planned or result.get("healthy") is False or (_flag(result.get("changed")) and outcome != "unchanged"):
        return SWITCH
    if isinstance(membership, Mapping) and not (membership.get("listed") and membership.get("healthy")):
        return ADD
    return KEEP


def converge_words(result, found=None, wanted="", planning=False):
    """What one converge call did, or its plan (planning) would do, to one server, in words: the line show.yml
    prints under the variant and its argv. result: inference_server's result or check-mode plan; found: what it
    found serving before (result's current, {} when nothing was recorded); wanted: the variant's name.

    'serves it already as A: relabelled A -> B, nothing restarts'; 'serves it already, healthy: nothing to change'
    (with ' (<how its state file was rebuilt>, and written again)'); 'switched from A: <reason>' ('switched from
    pid N, variant unknown' when the recorded server had no label); 'started, nothing recorded before: <reason>'.
    A plan says relabelling, switching from, starting."""
    result = result if isinstance(result, Mapping) else {}
    found = found if isinstance(found, Mapping) else {}
    planning = _flag(planning)
    action = converge_action(result)
    if action == RELABEL:
        return "serves it already as %s: %s %s -> %s, nothing restarts" % (
            found.get("variant"), "relabelling" if planning else "relabelled", found.get("variant"), wanted)
    if action != SWITCH:
        return "serves it already, healthy: nothing to change" + (
            " (%s, and written again)" % result["recovered"] if "recovered" in result else "")
    if "variant" in found:
        what = "%s %s" % ("switching from" if planning else "switched from",
                          found["variant"] or "pid %s, variant unknown" % found.get("pid"))
    else:
        what = "%s, nothing recorded before" % ("starting" if planning else "started")
    return "%s: %s" % (what, result.get("reason"))


def _absence(membership):
    return "it was listed unhealthy" if (membership or {}).get("listed") else "it was not in its router"


def _says(name, action, membership):
    """One line of the plan for an instance, as the run shows it."""
    if action == ADD:
        return "%s: keep, %s: would add it back" % (name, _absence(membership)[7:])
    return "%s: %s" % (name, action)


def _serves(result):
    """The variant a plan found serving (its current record), else the one it plans."""
    result = result or {}
    return (result.get("current") or {}).get("variant") or result.get("variant")


def _added(name, membership, result):
    """The line a run shows once it put an instance back into its router."""
    return "%s serves %s; %s: added back" % (name, _serves(result) or "?", _absence(membership))


def plans_membership(plans):
    """instance -> {listed, healthy, worker_url, router_url}, what each plan read of its router (inference_server's
    ``membership``, returned where the module keeps a server behind its router), for the plans that read one."""
    out = {}
    for name, entry in (plans or {}).items():
        reading = ((entry or {}).get("result") or {}).get("membership") if isinstance(entry, Mapping) else None
        if isinstance(reading, Mapping):
            out[name] = dict((key, reading.get(key)) for key in ("listed", "healthy", "worker_url", "router_url"))
    return out


def switch_plan(plan, plans, canary=False, bench_always=False, pick=None, membership=None):
    """Which of the selected instances a run takes through the switch (out of the router, drained,
    switched, back in), in which batches, and, in a rollout's canary batch, which one is the canary.

    plan: instances_plan's dict; plans: instance -> {result (inference_server's check-mode result for it),
    bench (whether it would be benchmarked)}, for every selected instance; canary: the host is in a
    rollout's canary batch; bench_always: serving_bench_mode always (an instance that keeps its server is
    taken out to be measured too); pick: the instance whose plan stands for the host, when a caller fixed
    it earlier (a rollout's verify reads the same instance as its plan did).

    An instance that keeps its server, healthy, stays in the router: a run that changes nothing takes
    nothing out. The canary is the first selected instance (name order) that switches; on a canary host
    only it goes before the gate (first), the others after it passes (rest). Returns replicated, actions
    (instance -> switch | relabel | keep), switching (in name order), batches (switching, in batches of
    serving_max_unavailable that keep serving_min_available in service), canary, first, rest, switches
    (whether any instance switches or is relabelled), pick and pick_entry (the instance entry of pick),
    result and bench (pick's), so that the rollout's host plan reads one instance as it reads one server.
    membership: instance -> {listed, healthy} (router_membership); None: each plan's own reading, the
    ``membership`` inference_server returns in every plan behind a router (a command router's plan reads none: it
    cannot be asked). An instance that keeps its server but is not listed healthy is add: it goes back into its
    router before any batch (adding), and is not taken out. says: one line per selected instance; added: instance
    -> the line once it is back ("r0 serves v1; it was not in its router: added back").
    """
    if not isinstance(plan, Mapping) or "instances" not in plan:
        raise PlanError("switch_plan needs instances_plan's result, got %r" % (plan,))
    plans = plans or {}
    if not isinstance(plans, Mapping):
        raise PlanError("the instances' plans must be a dict of instance -> {result, bench}, got %s"
                        % type(plans).__name__)
    selected = [name for name in plan["selected"] if name is not None]
    missing = [name for name in selected if name not in plans]
    if missing:
        raise PlanError("no plan for instance(s) %s: plan every selected instance first" % _join(missing))
    if membership is None:
        membership = plans_membership(dict((name, plans[name]) for name in selected))
    membership = membership if isinstance(membership, Mapping) else {}
    actions = dict((name, converge_action(plans[name].get("result"), membership.get(name))) for name in selected)
    changing = [name for name in selected if actions[name] not in (KEEP, ADD)]
    switching = selected if _flag(bench_always) else changing
    adding = [name for name in selected if actions[name] == ADD and name not in switching]
    declared = [entry["instance"] for entry in plan["instances"]]
    batches = _batches(switching, declared, plan["max_unavailable"], plan["min_available"])
    first_switch = next((name for name in selected if actions[name] == SWITCH), None)
    the_canary = first_switch if _flag(canary) else None
    first = [the_canary] if the_canary else list(switching)
    if pick not in selected:
        pick = the_canary or first_switch or (changing[0] if changing else None) or (selected[0] if selected else None)
    entries = dict((entry["instance"], entry) for entry in plan["instances"])
    chosen = plans.get(pick) or {}
    return {"replicated": bool(plan.get("replicated")), "actions": actions, "switching": switching,
            "batches": batches, "canary": the_canary, "first": first,
            "rest": [name for name in switching if name not in first], "switches": bool(changing),
            "pick": pick, "pick_entry": entries.get(pick), "result": chosen.get("result") or {},
            "bench": _flag(chosen.get("bench")), "adding": adding,
            "added": dict((name, _added(name, membership.get(name), plans[name].get("result"))) for name in adding),
            "membership": dict((name, dict(membership[name], variant=_serves(plans[name].get("result"))))
                               for name in selected if name in membership),
            "says": [_says(name, actions[name], membership.get(name)) for name in selected]}


# ---- does a variant fit an instance -----------------------------------------------------------

def _norm(key):
    """engine_args key -> its name: snake_case or kebab-case, with or without leading dashes."""
    return str(key).lstrip("-").replace("-", "_")


# The engine_args spellings of each parallel size, as each engine's own parser takes them (after the
# adapter of module_utils/_engines.py turns a key into a flag: kebab-case, --snake_case for trtllm).
# SGLang: `python -m sglang.launch_server --help` and argparse run on the real ServerArgs.add_cli_args of
#   sglang 0.5.23 and 0.5.9 (build/engine-envs/sglang-*): --tp-size / --tensor-parallel-size,
#   --pp-size / --pipeline-parallel-size, --dp-size / --data-parallel-size; its parser allows
#   abbreviations, so --tp and --dp are taken as the only flags they start (--pp is refused as ambiguous:
#   --pp-size, --pp-max-micro-batch-size, --pp-async-batch-depth). With --enable-dp-attention, dp runs
#   inside the tp group and takes no GPUs of its own (0.5.9 srt/managers/data_parallel_controller.py:
#   launch_dp_attention_schedulers; 0.5.23 srt/arg_groups/parallel_hook.py turns it into attn_dp_size
#   with dp_size 1); without it each of the dp replicas takes tp x pp GPUs (launch_dp_schedulers:
#   base_gpu_id += tp_size * pp_size).
# vLLM: `vllm serve --help=all` and its parser (vllm 0.34.0, build/engine-envs/vllm-0.34.0):
#   --tensor-parallel-size / -tp, --pipeline-parallel-size / -pp, --data-parallel-size / -dp,
#   --data-parallel-size-local / -dpl (--tp and --pp are refused, --dp is ambiguous: only the one-dash
#   short forms work); the adapter also rewrites tp_size to --tensor-parallel-size. One server runs its
#   local dp ranks, tp x pp GPUs each: data_parallel_size_local, else 1 with an external data-parallel
#   rank (--data-parallel-rank / -dpn, --data-parallel-external-lb / -dpe), else data_parallel_size
#   (vllm/engine/arg_utils.py, create_engine_config).
# TensorRT-LLM: trtllm-serve's click options (NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py; not run
#   here, no TensorRT-LLM environment): --tensor_parallel_size / --tp_size, --pipeline_parallel_size /
#   --pp_size, --context_parallel_size / --cp_size (world size tp x pp x cp); click takes no abbreviations.
SIZES = {
    "sglang": (("tp", ("tp_size", "tensor_parallel_size", "tp")),
               ("pp", ("pp_size", "pipeline_parallel_size")),
               ("dp", ("dp_size", "data_parallel_size", "dp"))),
    "vllm": (("tp", ("tensor_parallel_size", "tp", "tp_size")),
             ("pp", ("pipeline_parallel_size", "pp")),
             ("dp", ("data_parallel_size", "dp")),
             ("dp_local", ("data_parallel_size_local", "dpl"))),
    "trtllm": (("tp", ("tp_size", "tensor_parallel_size")),
               ("pp", ("pp_size", "pipeline_parallel_size")),
               ("cp", ("cp_size", "context_parallel_size"))),
}
SGLANG_DP_ATTENTION = ("enable_dp_attention",)
VLLM_EXTERNAL_DP = ("data_parallel_rank", "dpn", "data_parallel_external_lb", "dpe")
# SGLang --nccl-port (0.5.23 and 0.5.9 launch_server --help; --nccl alone is ambiguous with --nccl-init-addr)
NCCL_KEYS = ("nccl_port",)


def _given(engine_args, spellings):
    """[(key as written, value)] of the keys that spell one setting; None and false leave a flag out."""
    return [(key, value) for key, value in engine_args.items()
            if _norm(key) in spellings and value is not None and value is not False]


def _size(engine_args, spellings, problems):
    """(key, int) of a parallel size set in engine_args, or None when unset."""
    given = _given(engine_args, spellings)
    sizes = []
    for key, value in given:
        number = _int(value)
        if number is None or number < 1:
            problems.append("engine_args %s must be a positive integer, got %r" % (key, value))
            return None
        sizes.append((key, number))
    if len(set(number for dummy, number in sizes)) > 1:
        problems.append("engine_args set one size twice, differently: %s"
                        % " and ".join("%s %d" % pair for pair in sizes))
        return None
    return sizes[-1] if sizes else None


def _mappings(instance, spec):
    if not isinstance(instance, Mapping):
        raise PlanError("the instance must be one entry of instances_plan's instances (a dict), got %s"
                        % type(instance).__name__)
    if not isinstance(spec, Mapping):
        raise PlanError("the variant must be a resolved variant (a dict from resolve_variant), got %s"
                        % type(spec).__name__)
    engine_args = spec.get("engine_args") or {}
    if not isinstance(engine_args, Mapping):
        raise PlanError("the variant's engine_args must be a dict, got %s" % type(engine_args).__name__)
    return engine_args


def gpus_needed(engine, engine_args):
    """(GPUs one server of this engine takes, the sizes that made it, problems); (None, [], []) for an
    engine whose sizes are not known here (transformers, command)."""
    if engine not in SIZES:
        return None, [], []
    problems = []
    sizes = dict((what, _size(engine_args, spellings, problems)) for what, spellings in SIZES[engine])
    counted = [sizes["tp"], sizes["pp"]]
    if engine == "sglang":
        if not any(_flag(value) for dummy, value in _given(engine_args, SGLANG_DP_ATTENTION)):
            counted.append(sizes["dp"])
    elif engine == "vllm":
        if sizes["dp_local"] is not None:
            counted.append(sizes["dp_local"])
        elif not _given(engine_args, VLLM_EXTERNAL_DP):
            counted.append(sizes["dp"])
    else:
        counted.append(sizes["cp"])
    counted = [pair for pair in counted if pair is not None]
    needed = 1
    for dummy, number in counted:
        needed *= number
    return needed, counted, problems


def _spec_nccl(engine_args, problems):
    given = _given(engine_args, NCCL_KEYS)
    if not given:
        return None
    key, value = given[-1]
    port = _int(value)
    if port is None or not 1 <= port <= 65535:
        problems.append("engine_args %s must be a port, 1-65535, got %r" % (key, value))
        return None
    return port


def _devices(value):
    return str(value).replace(" ", "")


def instance_fit(instance, spec):
    """What keeps a resolved variant (spec) from serving on one instance of instances_plan; [] when it fits.

    Its parallel sizes (tensor x pipeline, x data-parallel where one server runs its dp ranks) must fit
    the instance's GPU count; its env must not set CUDA_VISIBLE_DEVICES or CUDA_DEVICE_ORDER otherwise
    than the instance does; on a host with serving_instances, an SGLang variant's NCCL port is the
    instance's own (engine_args may not set another, and the instance must have one).
    """
    engine_args = _mappings(instance, spec)
    engine = spec.get("engine")
    variant = spec.get("name") or "?"
    name = instance.get("name") or instance.get("instance") or "?"
    gpus = instance.get("gpus")
    needed, counted, problems = gpus_needed(engine, engine_args)
    if gpus is not None and needed is not None and needed > len(gpus):
        problems.append("%s needs %d GPUs (%s), instance %s has %d (GPUs %s)"
                        % (engine, needed, " x ".join("%s %d" % pair for pair in counted), name, len(gpus),
                           ",".join(str(gpu) for gpu in gpus)))
    env = spec.get("env") or {}
    for key, wanted in sorted((instance.get("env") or {}).items()):
        if env.get(key) is not None and _devices(env[key]) != _devices(wanted):
            problems.append("variant %s sets env %s=%s, but instance %s has %s=%s (drop it from the variant's env: "
                            "the instance sets it)" % (variant, key, env[key], name, key, wanted))
    if engine == "sglang" and instance.get("instance") is not None:
        own = instance.get("nccl_port")
        theirs = _spec_nccl(engine_args, problems)
        if own is None:
            problems.append("instance %s has no nccl_port, and SGLang would pick a free port at start, which "
                            "instances started together race for%s: set nccl_port on the instance, or "
                            "serving_engine: sglang so that instances_plan derives it (port + %d)"
                            % (name, "; the variant's nccl_port %d would be every instance's" % theirs
                               if theirs is not None else "", NCCL_OFFSET))
        elif theirs is not None and theirs != own:
            problems.append("variant %s sets nccl_port %d, but instance %s's is %d: on a host with serving_instances "
                            "each instance has its own (drop nccl_port from the variant's engine_args)"
                            % (variant, theirs, name, own))
    return problems


def instance_engine_args(instance, spec):
    """The variant's engine_args for one instance: with nccl_port set to the instance's for an SGLang
    variant that sets none (one that sets another is instance_fit's problem, left as it is here)."""
    engine_args = _plain(_mappings(instance, spec))
    nccl = instance.get("nccl_port")
    if spec.get("engine") == "sglang" and nccl is not None and not _given(engine_args, NCCL_KEYS):
        engine_args["nccl_port"] = nccl
    return engine_args


# The keys of inference_server's spec (module_utils/_instance_args.VARIANT_SPEC, which tests/unit checks this
# against), written out: importing _instance_args would also import the supervisor on the controller, 9-14 ms in
# each forked task that calls a filter of this file (measured after _replicas' own imports).
SERVER_SPEC_KEYS = ("name", "engine", "model", "served_model_name", "engine_args", "command", "executable", "python",
                    "env", "ready_timeout", "flag_check", "host_memory_mib")


def server_spec(spec, instance=None):
    """A resolved variant as inference_server's `spec` for one server: the keys the module takes
    (SERVER_SPEC_KEYS; not the catalog's description, extends, chain or drain_metric),
    with an instance's engine_args (instance_engine_args: SGLang's nccl_port) and env laid over the variant's.
    No instance (None or {}): the host's one server, the variant as it is. flag_check unset is true, the
    module's own default; an empty key is left out, so the module's default stands."""
    instance = {} if instance is None else instance
    engine_args = instance_engine_args(instance, spec)  # checks that both are mappings
    env = dict(_plain(spec.get("env") or {}))
    env.update(_plain(instance.get("env") or {}))
    out = {"engine_args": engine_args, "env": env,
           "flag_check": True if spec.get("flag_check") is None else bool(spec["flag_check"])}
    for key in SERVER_SPEC_KEYS:
        if key not in out and spec.get(key) not in (None, "", [], {}):
            out[key] = _plain(spec[key])
    return out


# The in-flight gauge each engine keeps on its /metrics (docs/replicas.md): what a drain waits to reach 0,
# one table with router_worker's (module_utils/_router). Other engines keep none.
DRAIN_METRICS = _router.DRAIN_METRICS
HOOK_FIELDS = ("{instance}", "{host}", "{port}", "{url}")


def drain_metric(spec):
    """The gauge a drain of this resolved variant waits on: its drain_metric, else its engine's ('' when the
    engine keeps none: the drain then waits the whole drain timeout)."""
    spec = spec if isinstance(spec, Mapping) else {}
    own = spec.get("drain_metric")
    if own:
        return str(own)
    return DRAIN_METRICS.get(spec.get("engine") or "", "")


def serving_drain_metric(serving, catalog, engine=None, model=None):
    """The gauge to drain an instance on: that of the variant it serves now (serving: its state record, or its
    plan's `current`; {} when nothing serves), resolved from the catalog. '' when nothing serves, or when it serves
    a variant the catalog no longer holds: the drain then reads the router's count, else waits its timeout."""
    variant = serving.get("variant") if isinstance(serving, Mapping) else None
    if not variant or not isinstance(catalog, Mapping) or variant not in catalog:
        return ""
    try:
        spec = _variants.resolve(catalog, variant, engine=engine, model=model)
    except _variants.VariantError as exc:
        raise PlanError(str(exc))
    return drain_metric(spec)


def drain_metric_by_variant(catalog, engine=None, model=None):
    """The drain gauge of every variant of the catalog that has one, {variant: gauge} (drain_metric() of each
    resolved variant): what a stop, which does not know what serves until the host reads its state file, drains
    on."""
    if not isinstance(catalog, Mapping):
        return {}
    gauges = {}
    for name in sorted(catalog):
        try:
            gauge = drain_metric(_variants.resolve(catalog, name, engine=engine, model=model))
        except _variants.VariantError as exc:
            raise PlanError(str(exc))
        if gauge:
            gauges[name] = gauge
    return gauges


def hook_argv(argv, instance, url, host=""):
    """A router hook (serving_router.remove / add, type command) for one instance: each literal {instance},
    {host}, {port} and {url} replaced inside every element by plain string replacement (never a shell, never
    str.format, so any other brace stays)."""
    if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, (str, int, float)) for a in argv):
        raise PlanError("a router hook (serving_router.remove / add) must be a non-empty list of strings, the argv "
                        "of a program run without a shell, got %r" % (argv,))
    instance = instance if isinstance(instance, Mapping) else {}
    if not host and url:
        host = urlsplit(str(url)).hostname or ""  # the host the router knows the instance by
    values = {"{instance}": str(instance.get("instance") or instance.get("name") or ""),
              "{host}": str(host or ""), "{port}": str(instance.get("port") or ""), "{url}": str(url or "")}
    out = []
    for arg in argv:
        arg = str(arg)
        for field in HOOK_FIELDS:
            if field in arg:
                arg = arg.replace(field, values[field])
        out.append(arg)
    return out


# ---- how each instance ended: one vocabulary with the module's ------------------------------------------

# inference_server's failure outcomes and their words (its RETURN: outcome, outcome_msg), used when a result
# carries the outcome but not the phrase (a failure before the module ran is nothing_stopped)
OUTCOME_WORDS = {"nothing_stopped": "nothing was stopped", "rolled_back": "ROLLED BACK: %s serves again",
                 "restore_failed": "RESTORE FAILED: nothing serves"}


def _words(outcome, msg, previous):
    if msg:
        return str(msg)
    if outcome == "rolled_back":
        return OUTCOME_WORDS[outcome] % (previous or "what served before")
    return OUTCOME_WORDS.get(outcome, "")


def _router_words(listed):
    if listed is None:
        return "its router was not read"
    return "listed in its router" if listed else "NOT in its router"


def replicas_summary(switch_plan, results=None, listed=None, failed=None, host=""):
    """How each selected instance ended, in the module's own words, and whether its router lists it.

    switch_plan: replica_switch_plan's dict (actions, adding, and the plans' membership in says); results:
    instance -> what replica.yml kept of its converge result (outcome, variant, pid; outcome_msg and previous
    on failure); listed: instance -> whether its router listed it after it was put back; failed: {instance,
    outcome, outcome_msg, previous} of the instance whose step failed (nothing_stopped when no module outcome
    tells, as a failure before the switch stops nothing). Returns {lines: one per instance, instances:
    instance -> {outcome, words, variant, listed}}."""
    switch_plan = switch_plan if isinstance(switch_plan, Mapping) else {}
    results = results if isinstance(results, Mapping) else {}
    listed = listed if isinstance(listed, Mapping) else {}
    failed = failed if isinstance(failed, Mapping) else {}
    actions = switch_plan.get("actions") or {}
    membership = switch_plan.get("membership") or {}
    lines, out = [], {}
    for name in sorted(actions):
        result = dict(results.get(name) or {})
        if failed.get("instance") == name:
            result.update((key, value) for key, value in failed.items() if value is not None)
            result["outcome"] = result.get("outcome") if result.get("outcome") in OUTCOME_WORDS else "nothing_stopped"
        if result.get("outcome"):
            outcome = result["outcome"]
        elif actions[name] in (KEEP, ADD):
            outcome = "unchanged"
        else:
            outcome = None  # a batch before it failed: never touched
        if name in listed:
            is_listed = listed[name]
        elif name in membership:
            is_listed = bool(membership[name].get("listed") and membership[name].get("healthy")) or (
                name in (switch_plan.get("adding") or []) and not failed)
        else:
            is_listed = None
        variant = result.get("variant") or membership.get(name, {}).get("variant")
        words = _words(outcome, result.get("outcome_msg"), result.get("previous"))
        if outcome is None and name in results:
            line = "%s: would switch to %s; %s" % (name, variant or "?", _router_words(is_listed))  # check mode
        elif outcome is None:
            line = "%s: not switched (a batch before it failed); %s" % (name, _router_words(is_listed))
        else:
            line = "%s: %s%s%s; %s" % (name, outcome, (": " + words) if words else "",
                                       (", serves %s" % variant) if variant and outcome not in OUTCOME_WORDS else "",
                                       _router_words(is_listed))
        lines.append(("%s %s" % (host, line)) if host else line)
        out[name] = {"outcome": outcome, "words": words, "variant": variant, "listed": is_listed}
    return {"lines": lines, "instances": out}


# ---- one server's converge: its result and whether it is measured ------------------------------------------

def _ran(result):
    """A registered result that ran (not undefined, not skipped)."""
    return isinstance(result, Mapping) and bool(result) and not _flag(result.get("skipped"))


def converge_result(first, job=None, plan=None):
    """The result of one converge through the inference_server role: its first module call (first), joined by
    the background wait (job, async_status's) when the model was still loading, else the check-mode plan.

    A first call that left the model loading takes what the wait found, once it finished and did not fail:
    healthy, loading, ready_s and what the engine resolved. A first call that did not run gives the plan
    ({} when neither ran)."""
    if not _ran(first):
        return dict(plan) if _ran(plan) else {}
    out = dict(first)
    if _flag(first.get("loading")) and _ran(job) and _flag(job.get("finished")) and not _flag(job.get("failed")):
        out.update(healthy=job.get("healthy"), loading=job.get("loading"), ready_s=job.get("ready_s"),
                   resolved=job.get("resolved"))
    return out


def bench_now(mode, switching, enabled=True, bench=None, check_mode=False):
    """Whether a run benchmarks what it served: never in check mode, nor with serving_bench_enabled false or no
    serving_bench settings; bench=never never, always always, auto (any other) only after a switch."""
    if _flag(check_mode) or not _flag(enabled) or not bench or mode == "never":
        return False
    return mode == "always" or _flag(switching)


def gpu_check_params(instance, host_check):
    """inference_server's gpu_check for the server in scope: an instance's own (instances_plan made it from the
    host's), else the host's serving_gpu_check without whole_host (a setting of instances_plan, never passed on:
    a host's only server checks every GPU anyway)."""
    if isinstance(instance, Mapping) and instance.get("gpu_check") is not None:
        return _plain(instance["gpu_check"])
    return dict((key, value) for key, value in _plain(host_check or {}).items() if key != "whole_host")
