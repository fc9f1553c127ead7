# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""inference_server state=checked: what one instance leaves serving, read and judged; nothing is started,
stopped, locked or written. Standard library only.

The instance's state file says what should serve. Nothing recorded: nothing should serve, which passes. A
recorded engine must be alive (its pid with its start time) and answer (GET /health, then a 1-token
generation). One that is gone fails the check, naming the instance and how it ended: its watchdog's exit
record (_supervisor.ending), and the kernel's OOM kill of that pid where the kernel log has one (_kernel_log).
A switch under way (the record says loading) is left to that switch and passes, said so. Behind a router (the
router option), an instance that serves is looked up in the router's listing too (result membership).
"""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.module_utils import _engines, _kernel_log, _router, _switch

SERVES = "it serves: pid alive, /health and a 1-token generation answered"
NOTHING = "nothing is recorded for it: nothing should serve"
UNDER_WAY = "a switch of it is under way (the state file says loading): that switch reports how it ends"


def problem_of_end(name, record, end, oom):
    """The message for a recorded engine that is gone: 'instance demo.r0 (variant batched, pid 4242) no longer
    runs: the engine was killed by SIGKILL at T; killed by the kernel's OOM killer (anon-rss 13.9 GB)'."""
    what = "instance %s (%spid %s) no longer runs: the engine %s" % (
        name, "variant %s, " % record["variant"] if record.get("variant") else "", record.get("pid"),
        (end or {}).get("message") or "ended, how is not known")
    if oom:
        what += "; %s" % _kernel_log.describe(oom)
    return what


def membership_of(router):
    """What the router lists of a serving instance (router: _router.Membership; its read()), None for router type
    none. A router that cannot be read is said in the reading (its ``error``), for the final check to judge: the
    engine was still read."""
    try:
        return router.read()
    except _router.RouterError as exc:
        where = router.describe()
        return {"listed": None, "healthy": None, "router_url": (where.get("url") or [None])[0],
                "worker_url": where.get("worker_url"), "error": exc.msg}


def check(ctx, probe=_engines.probe, router=None):
    """(changed=False, result, diff={}) for one instance (ctx: _server.Context), or ServerError naming what is
    wrong: an engine gone (result exit, oom) or one that does not answer (result probe). With router (the
    router option as a _router.Membership), an instance that serves also carries what its router lists of it
    (result membership), read in this call, so that the run does not read the router again."""
    params, result = ctx.params, ctx.result
    record, running = ctx.load()
    result.update(outcome=_switch.UNCHANGED, serving=False, healthy=None, exit=None, oom=None, problem=None)
    if not record:
        result["reason"] = NOTHING
        return False, result, {}
    result.update(pid=record.get("pid"), variant=record.get("variant"), url=record.get("url"),
                  argv=record.get("argv"), fingerprint=record.get("fingerprint"),
                  served_model=record.get("served_model"), started_at=record.get("started_at"))
    if not running:
        end = ctx.sup.ending(record, wait=0.5)
        oom = _kernel_log.oom_of(record["pid"], ctx.host.run, record.get("starttime")) if record.get("pid") else None
        result.update(exit=end, oom=oom, healthy=False, problem=problem_of_end(params["name"], record, end, oom))
        raise _switch.ServerError(result["problem"], **result)
    if record.get("loading"):
        result["reason"] = UNDER_WAY
        return False, result, {}
    host = _switch.probe_host(record.get("host") or params["host"])
    port = record.get("port") or params["port"]
    answer = probe(host, port, record.get("served_model"), params.get("api_key"), timeout=10.0, generate_timeout=30.0)
    result["probe"] = answer.detail
    if answer.state != "ready":
        result.update(healthy=False, problem="instance %s (%spid %s) runs but does not serve on %s: %s" % (
            params["name"], "variant %s, " % record["variant"] if record.get("variant") else "", record.get("pid"),
            _switch.url_of(host, port), answer.detail))
        raise _switch.ServerError(result["problem"], **result)
    result.update(serving=True, healthy=True, reason=SERVES)
    if router is not None:
        reading = membership_of(router)
        if reading is not None:
            result["membership"] = reading
    return False, result, {}
