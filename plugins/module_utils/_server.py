# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inference_server lifecycle: desired launch vs recorded state → keep, relabel, switch or stop.
Standard library only; the module is a thin wrapper over reconcile().

Every change of an instance happens under its lock (_lock). Before anything is stopped, everything that
can be known is checked (_preflight): a blocker fails with "nothing was stopped". A switch (stop, GPU
check, start, wait, and on failure restore what served) is one transaction that the host carries out
by itself (_switch); this module waits for it (ready_wait) and reports its outcome.
"""

from __future__ import annotations

import os
import socket

from ansible_collections.inferops.serving.plugins.module_utils import (
    _checked, _engines, _fingerprint, _idle_check, _lock, _preflight, _procs, _prom, _recover, _router, _supervisor, _switch)

ServerError = _switch.ServerError
probe_host = _switch.probe_host
url_of = _switch.url_of
wait_ready = _switch.wait_ready

SERVING = "it serves with this configuration and is healthy"
LOADING = "it is loading with this configuration (started by an earlier call)"
RUNS = "it runs with this configuration (not probed: wait=false)"
NOT_ANSWERING = "it runs with this configuration but does not answer"
RELABEL = "it serves with this configuration under another variant label: the label changes, nothing restarts"


def _serves(params, launch):
    """One quick probe of a server that runs with this configuration: does it answer a generation?"""
    return _engines.probe(probe_host(params["host"]), params["port"], launch.probe_model, params.get("api_key"),
                          timeout=launch.health_timeout, generate_timeout=30.0).state == "ready"


def _start_reason(record, running, same, fingerprint):
    """Why a start or restart is due (result's reason)."""
    if not record:
        return "nothing runs"
    if not running:
        return "what was recorded no longer runs"
    if record.get("recovered") and not record.get("fingerprint"):
        return "what runs cannot be confirmed (its marker carries no fingerprint and no launch file describes it)"
    if record.get("fingerprint") != fingerprint:
        return "the configuration changed"
    if _recover.unconfirmed(record):
        return "nothing left confirms the secrets it was started with (api_key, secret env values): it restarts once"
    if not same:
        return "api_key or a credential in env changed"
    return "state=restarted"


def current_of(record, running):
    """What the state file says runs now (before this run), for the caller's rollback; no secrets."""
    if not record:
        return None
    keys = ("variant", "fingerprint", "url", "pid", "engine", "model", "argv", "started_at", "ready_s", "loading")
    current = dict((key, record.get(key)) for key in keys)
    current["running"] = running
    return current


def _before(record):
    if not record:
        return {}
    return {"argv": record.get("argv"), "fingerprint": record.get("fingerprint"), "variant": record.get("variant")}


class Host(object):
    """What the module lends module_utils: its run_command (every command: the watchdog, systemctl, the
    version probe, the engine's --help, nvidia-smi) and the GPU check bound to it."""

    def __init__(self, run_command, find_smi=None):
        self.run_command = run_command
        self.find_smi = find_smi

    def run(self, args, **kwargs):
        """run_command that raises no SystemExit: a switch runs it in a detached process, where fail_json
        (run_command's answer to a command that cannot start) would end the transaction half-way."""
        kwargs.setdefault("handle_exceptions", False)
        try:
            return self.run_command(args, **kwargs)
        except OSError as exc:
            return 127, "", "cannot run %s: %s" % (args[0], exc.strerror or exc)

    def verify(self, check, check_mode=False, owner=None):
        """The GPU check as instance owner (NAME@HASH) makes it: another live instance's engine is never
        reclaimed, and a GPU it holds fails the check, naming it."""
        return _idle_check.verify(check, self.run, self.find_smi, check_mode=check_mode, owner=owner)


class Context(object):
    """One call: its parameters, supervisor, state files and GPU access."""

    def __init__(self, params, check_mode, host):
        self.params = params
        self.check_mode = check_mode
        self.host = host
        self.kind = _supervisor.choose(params["supervisor"])
        self.sup = _supervisor.make(self.kind, params["name"], params["state_dir"], params["log_dir"],
                                    params["stop_timeout"], host.run, params["log_keep"])
        if params.get("metrics_dir"):  # the engine's watchdog writes inferops_serving_up 0 there when it ends
            self.sup.metrics_path = os.path.join(params["metrics_dir"], _prom.file_name(params["name"]))
        self.launches = _switch.launches(params["state_dir"], params["name"])
        self.journal = _switch.journal(params["state_dir"], params["name"])
        self.lock = None
        self.result = {"argv": None, "fingerprint": None, "variant": params.get("variant"),
                       "url": url_of(params["host"], params["port"]), "pid": None, "ready_s": None,
                       "engine_version": None, "supervisor": self.kind, "log": self.sup.log_path,
                       "state_file": self.sup.store.path, "healthy": None, "loading": False, "reason": None,
                       "outcome": None, "served_model": None, "resolved": None,
                       "switch_timeout_s": 2 * params["ready_timeout"] + 2 * params["stop_timeout"] + 300.0}

    def load(self, recover=False):
        """(record, running): the state file's record and whether its engine runs. With recover (under the
        lock), a state file that is missing or corrupt while an engine of this instance runs is rebuilt from
        the processes and NAME.launch.json (_recover), saved, and result.recovered says so."""
        record = self.sup.store.load()
        if record and record.get("corrupt"):
            why, record = "corrupt", None
        else:
            why = "missing"
        if recover and record is None:
            record, note = _recover.rebuild(self.sup, _switch.loaded(self.launches), self._version, why)
            if record is not None:
                self.result["recovered"] = note
                if not self.check_mode:
                    self.sup.store.save(record)
        return record, bool(record) and self.sup.alive(record)

    def _version(self, adapter, params):
        return adapter.version(params, self.host.run)


def reconcile(params, host, check_mode=False):
    """Returns (changed, result, diff). Raises ServerError on failure, its extra carrying the result so far
    and the outcome (nothing_stopped, rolled_back, restore_failed)."""
    ctx = Context(params, check_mode, host)
    try:
        if params.get("switch_id"):
            return _join(ctx, params["switch_id"])
        if params["state"] == "checked":  # reads only: no lock, no state file written
            return _checked.check(ctx, router=membership(ctx))
        if params["state"] == "stopped":
            return _locked(ctx, "stop", None, _stop)
        adapter = _engines.adapter(params["engine"])
        version = adapter.version(params, host.run)
        launch = adapter.build(params, version)
        ctx.result.update(argv=launch.public_argv, fingerprint=launch.fingerprint, engine_version=version,
                          served_model=launch.probe_model)
        return _locked(ctx, _what(params, launch), launch, lambda c: _start(c, adapter, version, launch))
    except (_engines.EngineError, _supervisor.SupervisorError) as exc:
        if params["state"] in ("stopped", "checked"):
            raise ServerError(str(exc), **ctx.result)
        raise _switch.nothing_stopped(str(exc), **ctx.result)
    except ServerError as exc:
        for key, value in ctx.result.items():
            exc.extra.setdefault(key, value)
        raise


def _what(params, launch):
    """What a switch's lock holder says it does: 'switch to nextn (sha256:0123456789ab)'."""
    return "switch to %s (%s)" % (params.get("variant") or params["name"], launch.fingerprint[:19])


def _locked(ctx, what, launch, converge):
    """converge(ctx) under the instance lock. A state=started call that finds a switch to this very
    configuration under way joins it instead of waiting for the lock."""
    params = ctx.params
    lock = _lock.InstanceLock(params["state_dir"], params["name"])
    joining = {}

    def join_if_same(holder):
        data = _switch.loaded(ctx.journal) or {}
        target = data.get("target") or {}
        if launch is None or params["state"] != "started" or data.get("outcome"):
            return False
        if target.get("fingerprint") != launch.fingerprint or target.get("secrets_salt") is None:
            return False
        if target.get("secrets_digest") != _fingerprint.secrets_digest(target["secrets_salt"], _switch.secrets_of(params)):
            return False
        joining.update(data)
        return True

    try:
        taken = lock.acquire(what, params["lock_timeout"], join_if_same, create=not ctx.check_mode)
    except _lock.Busy as exc:
        raise _switch.nothing_stopped(str(exc), lock_holder=exc.holder)
    except OSError as exc:
        raise _switch.nothing_stopped("cannot take the lock %s: %s" % (lock.path, exc.strerror or exc))
    if taken is None:
        return _join(ctx, joining["id"])
    ctx.lock = lock
    try:
        return converge(ctx)
    finally:
        lock.release()  # a no-op once a switch process took the lock over


def _join(ctx, switch_id):
    """Wait for a switch under way (by its id) and report its outcome; starts and stops nothing."""
    params = ctx.params
    record, running = ctx.load()
    ctx.result["current"] = current_of(record, running)
    data = _switch.await_switch(switch_id, params["state_dir"], params["name"],
                                limit=params.get("ready_wait") if params["wait"] else 0.0)
    return _outcome(ctx, data, False, {})


def membership(ctx, serving=None):
    """The instance's router (the router option) as the switch leaves and joins it, a stop leaves it; None without
    one. serving: the variant the instance serves, for the option's drain_metric_by_variant (a stop's)."""
    option = ctx.params.get("router")
    if not option:
        return None
    return _router.Membership(option, url_of(ctx.params["host"], ctx.params["port"]), ctx.sup.store.path,
                              serving=serving)


def _after_preflight(survey, check):
    """The GPU check after the stop, with what the preflight's health read found before it: its warnings (a DCGM
    level-1 warning is only found there) and its DCGM run, so that the call tells them once the switch is done."""
    before = (survey or {}).get("health") or {}
    if not before or not isinstance(check, dict):
        return check
    health = dict(check.get("health") or {})
    earlier = list(before.get("warnings") or [])
    health["warnings"] = earlier + [w for w in health.get("warnings") or [] if w not in earlier]
    if not health.get("dcgm") and before.get("dcgm"):
        health["dcgm"] = before["dcgm"]
    return dict(check, health=health)


def _outcome(ctx, data, starter, diff):
    """(changed, result, diff) from a switch's journal, or the ServerError that says how it failed."""
    result = ctx.result
    result["switch"] = {"id": data.get("id"), "pid": data.get("pid"), "phase": data.get("phase")}
    for key in ("stopped_pids", "stopped_exit", "log_tail", "log_file", "restored", "exit", "listed", "router_steps"):
        if data.get(key) is not None:
            result[key] = data[key]
    if data.get("gpu_check") is not None:
        result["gpu_check"] = _after_preflight(result.get("gpu_check"), data["gpu_check"])
    for key in ("reason", "recovered"):
        if not result.get(key) and data.get(key):
            result[key] = data[key]
    target = data.get("target") or {}
    if not result.get("fingerprint"):
        result.update(fingerprint=target.get("fingerprint"), variant=target.get("variant"))
    outcome = data.get("outcome")
    if outcome is None:  # still under way: the host finishes it; a later call joins it by result.switch.id
        result.update(loading=True, healthy=False, outcome=_switch.LOADING, pid=data.get("server_pid"),
                      reason=result.get("reason") or LOADING)
        return starter, result, diff
    if outcome == _switch.READY:
        record = ctx.sup.store.load() or {}
        result.update(pid=record.get("pid"), ready_s=record.get("ready_s"), started_at=record.get("started_at"),
                      resolved=record.get("resolved"), healthy=True, loading=False, outcome=_switch.READY)
        if not result.get("argv"):  # a join: what serves, as the state file records it
            result.update(argv=record.get("argv"), fingerprint=record.get("fingerprint"),
                          variant=record.get("variant"), engine_version=record.get("engine_version"),
                          served_model=record.get("served_model"))
        if data.get("router_error"):  # it serves, but its router does not list it: the call fails, saying so
            raise ServerError(data.get("msg") or data["router_error"], **dict(result, changed=True, failure=data["router_error"]))
        return starter, result, diff
    extra = dict(result, outcome=outcome, changed=outcome != _switch.NOTHING_STOPPED or bool(data.get("server_pid")))
    for key in ("rc", "failure", "outcome_msg", "restore_error", "timed_out"):
        if data.get(key) is not None:
            extra[key] = data[key]
    if outcome in _switch.FAILURES:
        record = ctx.sup.store.load() or {}
        extra.update(pid=record.get("pid"), healthy=bool(record) and outcome == _switch.ROLLED_BACK)
    msg = data.get("msg") or "switch %s ended: %s" % (data.get("id"), outcome)
    if data.get("recovered"):  # what the switch stopped was known only from the processes: say so
        msg = "%s | %s" % (data["recovered"], msg)
    raise ServerError(msg, **extra)


def _stop(ctx):
    """state=stopped: needs no engine or model, as the state file says what runs."""
    params, sup, result = ctx.params, ctx.sup, ctx.result
    record, running = ctx.load(recover=True)
    result["current"] = current_of(record, running)
    strays = sup.carriers()
    changed = running or bool(strays) or bool(record)
    diff = {"before": _before(record), "after": {}}
    if record:
        result.update(argv=record.get("argv"), fingerprint=record.get("fingerprint"),
                      variant=params.get("variant") or record.get("variant"), url=record.get("url"))
    elif params.get("engine") and params.get("model"):
        launch = _engines.adapter(params["engine"]).build(params)
        result.update(argv=launch.public_argv, fingerprint=launch.fingerprint)
    if changed and not ctx.check_mode:
        problem = _preflight.dir_problem("state_dir", params["state_dir"], create=True)
        if problem:  # the state file must be able to say that nothing runs any more
            raise _switch.nothing_stopped(problem)
    if params.get("router") and not ctx.check_mode:  # out of its router, drained, stopped: the host finishes it
        return _stop_detached(ctx, record, running, changed, diff)
    # a plan reads what its router lists of it: a change of its own when it is listed
    left = _plan_leave(ctx) if params.get("router") else False
    if changed and not ctx.check_mode:
        result["stopped_pids"], ended = _switch.stop_server(sup, record, params)
        if ended:  # how the stop ended it, or, when it had ended by itself, how
            result["stopped_exit" if running else "exit"] = ended
        if result["supervisor"] == "systemd":
            sup.remove()
        sup.store.clear()
        ctx.launches.clear()
    result["outcome"] = _switch.STOPPED if changed else _switch.UNCHANGED
    if ctx.check_mode and params.get("gpu_check"):
        # what the check after the stop would find, once this instance's processes are gone: a blocker
        # (another instance's engine, a protected daemon) fails the plan as it would fail the run
        found, result["gpu_check"] = _preflight.gpu_problems(params, sup.processes(record), ctx.host.run,
                                                             ctx.host.find_smi, owner=sup.marker, write=False)
        if found:
            raise ServerError("GPUs would not be clean after stopping %s: %s" % (params["name"], "; ".join(found)),
                              **result)
    elif params.get("gpu_check"):
        try:
            result["gpu_check"] = ctx.host.verify(dict(params["gpu_check"]), False, owner=sup.marker)
        except _idle_check.CheckFailed as exc:
            result["gpu_check"] = exc.result
            raise ServerError("GPUs not clean after stopping %s: %s" % (params["name"], exc.msg), **result)
    return changed or left, result, diff


def _plan_leave(ctx):
    """A stop's plan behind a router: what the router lists of the instance, read (it would be taken out). True when
    listed."""
    dummy, reading = _read_listing(ctx, "would stop")
    ctx.result["listed"] = bool(reading and reading["listed"]) if reading is not None else None
    return bool(ctx.result["listed"])


def _stop_detached(ctx, record, running, changed, diff):
    """A stop with a router, handed with the lock to a detached process (_switch.Stop) and waited for: out of its
    router (keep_healthy and its re-check as in a switch), drained on the gauge of the variant its state file records,
    then stopped and its GPUs checked. A controller that dies meanwhile leaves the host to finish it. A router that
    cannot be read or refuses, or a drain that does not end, stops nothing (nothing_stopped), the instance put back
    when it had left."""
    params, result = ctx.params, ctx.result
    router = membership(ctx, serving=(record or {}).get("variant"))
    stop = _switch.Stop(ctx.sup, params, record, running=running, stopping=changed, verify_gpus=ctx.host.verify,
                        router=router)
    pid = _switch.detach(stop, ctx.lock)
    data = _switch.await_switch(stop.data["id"], params["state_dir"], params["name"], pid=pid)
    steps = data.get("router_steps") or []
    result["listed"] = data.get("listed") if router.lists else None
    if steps:
        result["router_steps"] = steps
    for key in ("stopped_pids", "stopped_exit", "exit", "gpu_check"):
        if data.get(key) is not None:
            result[key] = data[key]
    outcome = data.get("outcome")
    if outcome == _switch.NOTHING_STOPPED:
        why = data.get("failure") or data.get("msg")
        back = [step for step in steps[1:] if step["step"] == "join"]
        if back and back[-1].get("error"):
            why = "%s; putting it back failed too: %s" % (why, back[-1]["error"])
        elif back:
            why += "; it was put back into its router"
        raise _switch.nothing_stopped("%s could not be taken out of its router: %s" % (params["name"], why), **result)
    if outcome not in (_switch.STOPPED, _switch.UNCHANGED):  # failed while stopping, or the process died
        raise ServerError(data.get("msg") or "stop %s ended: %s" % (data.get("id"), outcome), **result)
    result["outcome"] = outcome
    if data.get("failure"):  # stopped, but its GPUs are not clean
        raise ServerError(data["failure"], **result)
    left = bool(steps and steps[0]["step"] == "leave" and steps[0].get("changed"))
    return changed or left, result, diff


def _restore_target(ctx, record, running):
    """What a failed switch restores: the last server that was ready (public record, its parameters)."""
    stored = _switch.loaded(ctx.launches) or {}
    if record and record.get("previous"):  # a switch that never finished: what served before it
        return record["previous"], stored.get("previous")
    if record and running and not record.get("loading"):
        if _recover.unconfirmed(record):  # rebuilt, and no launch file describes it
            return _switch.public(record), None
        return _switch.public(record), stored.get("current")
    return None, None


def _keep(ctx, record, launch, healthy, diff):
    """A running server of this configuration stays; a different variant label is recorded, no restart."""
    params, result = ctx.params, ctx.result
    result.update(pid=record.get("pid"), ready_s=record.get("ready_s"), started_at=record.get("started_at"),
                  resolved=record.get("resolved"), healthy=healthy, outcome=_switch.UNCHANGED,
                  reason=SERVING if healthy else RUNS)
    if record.get("variant") == params.get("variant") or not params.get("variant"):
        return False, result, diff
    result.update(outcome=_switch.RELABELLED, reason=RELABEL)
    diff = {"before": {"variant": record.get("variant")}, "after": {"variant": params["variant"]}}
    if not ctx.check_mode:
        problem = _preflight.dir_problem("state_dir", params["state_dir"], create=True)
        if problem:
            raise _switch.nothing_stopped(problem)
        record["variant"] = params["variant"]
        ctx.sup.store.save(record)
        stored = _switch.loaded(ctx.launches) or {}
        if stored.get("current"):
            stored["current"]["variant"] = params["variant"]
            ctx.launches.save(stored)
    return True, result, diff


# What a state=started or restarted call does with the server that runs (_decide), then does it (_start).
KEEP = "keep"  # healthy with this configuration: nothing changes (or only the label)
KEEP_UNPROBED = "keep_unprobed"  # wait=false: it runs with this configuration, not probed
REPORT_LOADING = "report_loading"  # wait=false: it loads with this configuration, report that
RESUME = "resume"  # left loading by a switch whose process died: wait for it here
SWITCH = "switch"  # stop what runs (if anything), start this configuration


def interruption(sup, journal, record, running):
    """Why a server left loading no longer loads when nothing of its own failed, or None. Only a live switch
    is resumed: an engine that ended with an exit record (a code or a signal its watchdog saw) crashed, which is
    the variant's failure; one without, whose watchdog is gone too (a power cut, the host's processes killed at
    once), was interrupted from outside, and the wanted variant starts afresh. Called under the instance lock,
    so the switch process that left it is gone."""
    if not record or not record.get("loading") or running:
        return None
    end = sup.ending(record, wait=0.5)
    if end is None or end.get("code") is not None or end.get("signal"):
        return None
    data = _switch.loaded(journal) or {}
    return "the switch to %s was interrupted at %s (switch process %s gone)" % (
        record.get("variant") or record.get("fingerprint"), data.get("phase") or "an unknown phase", data.get("pid") or "?")


def _noted(ctx, reason):
    """A reason, after the note that the state file was rebuilt when it was."""
    note = ctx.result.get("recovered")
    return "%s; %s" % (note, reason) if note else reason


def _decide(params, record, running, same, check_mode, answers, interrupted=None):
    """(action, reason or None). answers() probes the running server (called only when it decides);
    interrupted: interruption()'s answer, which makes a server left loading one to start afresh."""
    if interrupted:
        return SWITCH, interrupted
    if not (same and params["state"] == "started" and (running or record.get("loading"))):
        return SWITCH, None
    loading = bool(record.get("loading")) or (record.get("ready_s") is None and not record.get("recovered"))
    if running and not params["wait"] and not check_mode:
        return (REPORT_LOADING, LOADING) if loading else (KEEP_UNPROBED, RUNS)
    if loading:
        return RESUME, LOADING
    if answers():
        return KEEP, SERVING
    return SWITCH, NOT_ANSWERING  # it served with this configuration and no longer answers: restart it


def _start(ctx, adapter, version, launch):
    """state=started (keep a healthy server of this configuration, else switch to it) and restarted."""
    params, sup, result = ctx.params, ctx.sup, ctx.result
    record, running = ctx.load(recover=True)
    result["current"] = current_of(record, running)
    secrets = _switch.secrets_of(params)
    same = (bool(record) and record.get("fingerprint") == launch.fingerprint and
            record.get("secrets_digest") == _fingerprint.secrets_digest(record.get("secrets_salt", ""), secrets))
    diff = {"before": _before(record),
            "after": {"argv": launch.public_argv, "fingerprint": launch.fingerprint, "variant": params.get("variant")}}
    action, reason = _decide(params, record, running, same, ctx.check_mode, lambda: _serves(params, launch),
                             interruption(sup, ctx.journal, record, running))
    if action == REPORT_LOADING:
        if ctx.check_mode:
            _read_listing(ctx, "is loading")
        result.update(loading=True, outcome=_switch.LOADING, reason=reason, pid=record.get("pid"))
        return False, result, diff
    if action in (KEEP, KEEP_UNPROBED):
        changed, result, diff = _keep(ctx, record, launch, True if action == KEEP else None, diff)
        result["reason"] = _noted(ctx, result["reason"])
        changed = _keep_listed(ctx, record) or changed
        return changed or bool(result.get("recovered")), result, diff  # the rebuilt state file is written
    previous, previous_params = _restore_target(ctx, record, running)
    if action == RESUME:
        result.update(reason=reason, pid=record.get("pid"))
        if ctx.check_mode:
            _read_listing(ctx, "would resume its switch to %s" % (params.get("variant") or "the new variant"))
            result.update(loading=True, outcome=_switch.LOADING)
            return False, result, diff
        switch = _switch.Switch(sup, params, launch, version=version, old=record, stop_old=False, start_new=False,
                                previous=previous, previous_params=previous_params, verify_gpus=ctx.host.verify,
                                what=_what(params, launch), router=membership(ctx))
        return _run(ctx, switch, False, diff)
    result["reason"] = reason or _start_reason(record, running, same, launch.fingerprint)
    if record and record.get("pid") and not running:  # how it ended, as its watchdog recorded it
        result["exit"] = sup.ending(record, wait=0.0)
        result["reason"] += ": pid %s %s" % (record["pid"], result["exit"]["message"])
    result["reason"] = _noted(ctx, result["reason"])
    return _switch_to(ctx, adapter, version, launch, record, running, (previous, previous_params), diff)


def _read_listing(ctx, doing):
    """(router, reading): what the instance's router lists of it (the router option's Membership.read()), the run's
    one reading of it; (None, None) without a router. Sets the result's membership (listed null for router type
    none: there is no list). A router that cannot be read refuses the call here, before anything changes:
    nothing_stopped, "<name> <doing>, and its router could not be read: ..."."""
    router = membership(ctx)
    if router is None:
        return None, None
    try:
        reading = router.read()
    except _router.RouterError as exc:
        raise _switch.nothing_stopped("%s %s, and its router could not be read: %s" % (ctx.params["name"], doing, exc.msg),
                                      **dict(ctx.result, listed=exc.result.get("listed")))
    if reading is None:
        ctx.result["listed"] = None
    else:
        ctx.result["membership"] = reading  # a plan's reading is the run's: the controller does not read it again
    return router, reading


def _keep_listed(ctx, record):
    """A server kept with a router given: one its router does not list (a run cut off after taking it out, a
    router restarted empty) is added back, under the lock, waiting until listed healthy. True when it was (in check
    mode: would be) added."""
    name, variant = ctx.params["name"], record.get("variant") or ctx.params.get("variant") or "it"
    router, reading = _read_listing(ctx, "serves %s" % variant)
    if reading is None:
        return False
    if reading["healthy"]:
        ctx.result["listed"] = True
        return False
    if ctx.check_mode:
        ctx.result.update(listed=False, reason="%s; it is not in its router: it would be added back" % ctx.result["reason"])
        return True
    try:
        ctx.result["listed"] = bool(router.join().get("listed"))
    except _router.RouterError as exc:
        raise _switch.nothing_stopped("%s serves %s, and its router could not be changed: %s" % (name, variant, exc.msg),
                                      **dict(ctx.result, listed=exc.result.get("listed")))
    ctx.result["reason"] = "%s serves %s; it was not in its router: added back" % (name, variant)
    return True


def _switch_to(ctx, adapter, version, launch, record, running, restore, diff):
    """The preflight (any blocker: nothing is stopped), then the switch, carried out by the host."""
    params, sup, result = ctx.params, ctx.sup, ctx.result
    spared = sup.processes(record)
    blockers, survey, flag_check = _preflight.check(params, adapter, launch, version, record, running, spared,
                                                    ctx.host.run, ctx.host.find_smi, create=not ctx.check_mode,
                                                    owner=sup.marker)
    result["blockers"] = blockers
    if flag_check is not None:
        result["flag_check"] = flag_check
    if survey is not None:
        result["gpu_check"] = survey
    if blockers:
        raise _switch.nothing_stopped("; ".join(blockers), **result)
    if ctx.check_mode:  # a plan: what the router lists of the instance, read here, before anything changes
        _read_listing(ctx, "would switch to %s" % (params.get("variant") or "the new variant"))
        return True, result, diff
    switch = _switch.Switch(sup, params, launch, version=version, old=record, stop_old=bool(record) or bool(spared),
                            start_new=True, previous=restore[0], previous_params=restore[1],
                            verify_gpus=ctx.host.verify, what=_what(params, launch), router=membership(ctx))
    return _run(ctx, switch, True, diff)


def _run(ctx, switch, starter, diff):
    """Hand the switch (and the lock) to a detached process, then wait for it as ready_wait and wait say."""
    params = ctx.params
    for key in ("reason", "recovered"):  # a run that joins by the switch's id reports them too
        if ctx.result.get(key):
            switch.data[key] = ctx.result[key]
    pid = _switch.detach(switch, ctx.lock)
    data = _switch.await_switch(switch.data["id"], params["state_dir"], params["name"], pid=pid,
                                limit=params.get("ready_wait") if params["wait"] else None,
                                started_limit=None if params["wait"] else 0.5)
    return _outcome(ctx, data, starter, diff)


def export_metrics(params, result):
    """After a call (not in check mode): write the instance's series to params["metrics_dir"] (_prom), from the
    state file (what serves, and whether its engine lives), the switch journal (outcome, when, how long) and the
    GPU check of result. Returns the file's path, or None without metrics_dir."""
    if not params.get("metrics_dir"):
        return None
    store = _supervisor.StateStore(params["name"], params["state_dir"], "%s.json" % params["name"])
    record = store.load() or {}
    if record.get("corrupt"):
        record = {}
    up = bool(record.get("pid")) and not record.get("loading") and _procs.alive(record["pid"])
    switch_id = (result.get("switch") or {}).get("id")
    journal = _switch.loaded(_switch.journal(params["state_dir"], params["name"], switch_id)) if switch_id else None
    gpus = (result.get("gpu_check") or {}).get("gpus")
    host = params.get("metrics_host") or socket.gethostname()
    return _prom.export_instance(params["metrics_dir"], params["state_dir"], params["name"], host, result.get("outcome"),
                                 record, up, journal=journal, gpus=gpus)
