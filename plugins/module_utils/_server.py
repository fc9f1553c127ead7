# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inference_server lifecycle: desired launch vs recorded state → keep, start, restart or stop,
then health-gate the new server. Standard library only; the module is a thin wrapper over reconcile().
"""

from __future__ import annotations

import time

from ansible_collections.inferops.serving.plugins.module_utils import _engines, _fingerprint, _idle_check, _supervisor


class ServerError(RuntimeError):
    """A failure to report with fail_json; extra holds the result fields (log_tail, rc, ...)."""

    def __init__(self, msg, **extra):
        RuntimeError.__init__(self, msg)
        self.extra = extra


def probe_host(host):
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def url_of(host, port):
    host = probe_host(host)
    return "http://%s:%d" % ("[%s]" % host if ":" in host else host, port)


def _secrets(params, launch):
    return {"api_key": params.get("api_key") or "",
            "env": _fingerprint.secret_env(params.get("env"))}


def wait_ready(sup, record, launch, params, clock=time.monotonic, sleep=time.sleep, elapsed=0.0, limit=None):
    """Poll /health then a 1-token generation until ready; fail at once if the engine exits.

    elapsed: seconds the server has loaded already (a resumed wait; ready_timeout counts from its
    start). limit: seconds this call may wait (None: until ready_timeout). Returns the seconds from
    start to ready, or None when limit ran out first (the server keeps loading)."""
    start = clock() - elapsed
    deadline = start + params["ready_timeout"]
    stop_at = deadline if limit is None else min(deadline, clock() + limit)
    host, port = probe_host(params["host"]), params["port"]
    last = "no answer yet"
    while True:
        code = sup.exit_code(record)
        if code is not None:
            raise ServerError("%s exited %s before it was ready (after %.1fs); last probe: %s"
                              % (params["name"], _how(code), clock() - start, last), **_rc(code))
        left = deadline - clock()
        result = _engines.probe(host, port, launch.probe_model, params.get("api_key"),
                                timeout=max(1.0, min(10.0, left)), generate_timeout=max(1.0, min(300.0, left)))
        last = result.detail
        if result.state == "ready":
            return round(clock() - start, 3)
        if result.state == "refused":
            raise ServerError("%s answers /health but refuses the readiness generation: %s"
                              % (params["name"], result.detail))
        now = clock()
        if now >= deadline:
            raise ServerError("%s was not ready within ready_timeout=%ss; last probe: %s"
                              % (params["name"], params["ready_timeout"], last), timed_out=True)
        if now >= stop_at:
            return None
        sleep(min(0.25, max(0.0, stop_at - now)))


SERVING = "it serves with this configuration and is healthy"
LOADING = "it is loading with this configuration (started by an earlier call)"
RUNS = "it runs with this configuration (not probed: wait=false)"
NOT_ANSWERING = "it runs with this configuration but does not answer"


def _serves(params, launch):
    """One quick probe of a server that runs with this configuration: does it answer a generation?"""
    return _engines.probe(probe_host(params["host"]), params["port"], launch.probe_model, params.get("api_key"),
                          timeout=5.0, generate_timeout=30.0).state == "ready"


def _start_reason(record, running, same, fingerprint):
    """Why a start or restart is due (result's reason)."""
    if not record:
        return "nothing runs"
    if not running:
        return "what was recorded no longer runs"
    if record.get("fingerprint") != fingerprint:
        return "the configuration changed"
    if not same:
        return "api_key or a credential in env changed"
    return "state=restarted"


def _how(code):
    """How an engine exited, for a message."""
    if code == _supervisor.EXIT_UNKNOWN:
        return "(its exit status went to the earlier call that started it)"
    return "with code %s" % code


def _rc(code):
    """The rc return value: the exit status when it is known."""
    return {} if code in (None, _supervisor.EXIT_UNKNOWN) else {"rc": code}


def _failed_start(sup, record, params, result, exc):
    """Stop a start that failed (nothing is left running), and the ServerError that says why."""
    log_tail = _supervisor.tail(sup.log_path, 40, record.get("log_offset", 0))
    sup.stop(record, params["stop_timeout"])
    sup.store.clear()
    if not isinstance(exc, ServerError):
        exc = ServerError("%s: %s" % (type(exc).__name__, exc))
    exc.extra.setdefault("log_tail", log_tail)
    for key, value in result.items():
        exc.extra.setdefault(key, value)
    return exc


def _await_start(sup, record, launch, params, result, elapsed=0.0):
    """Wait (up to ready_wait in this call) for a server this module started; record the outcome.
    A failure stops it. Fills result's ready_s, healthy and loading."""
    try:
        ready_s = wait_ready(sup, record, launch, params, elapsed=elapsed, limit=params.get("ready_wait"))
    except BaseException as exc:
        raise _failed_start(sup, record, params, result, exc)
    if ready_s is None:
        record["loading"] = True
    else:
        record.pop("loading", None)
        record["ready_s"] = ready_s
    sup.store.save(record)
    result.update(ready_s=record.get("ready_s"), healthy=ready_s is not None, loading=ready_s is None)


def _check_gpus(verify_gpus, params, result, what, preview=False):
    """gpu_check after the stop (before the start: a failure starts nothing). preview (check mode): one
    read of the GPUs, reported and never failed, since the old server still holds them then."""
    if not params.get("gpu_check"):
        return
    check = dict(params["gpu_check"])
    if preview:
        check.update(timeout=check["poll_interval"], kill_grace=check["poll_interval"] / 2.0)
    try:
        result["gpu_check"] = verify_gpus(check, preview)
    except _idle_check.CheckFailed as exc:
        if preview:
            result["gpu_check"] = dict(exc.result, msg=exc.msg)
            return
        result["gpu_check"] = exc.result
        raise ServerError("GPUs not clean %s: %s" % (what, exc.msg), **result)


def _wait_port_free(host, port, timeout=10.0):
    deadline = time.monotonic() + timeout
    while _engines.port_in_use(host, port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def current_of(record, running):
    """What the state file says runs now (before this run), for the caller's rollback; no secrets."""
    if not record:
        return None
    keys = ("variant", "fingerprint", "url", "pid", "engine", "model", "argv", "started_at", "ready_s")
    current = dict((key, record.get(key)) for key in keys)
    current["running"] = running
    return current


def reconcile(params, check_mode=False, verify_gpus=None):
    """Returns (changed, result, diff). Raises ServerError on failure, its extra carrying the result so far
    (current: what ran before this call, for the caller's rollback).
    verify_gpus(check_params, check_mode) runs params["gpu_check"] (_idle_check.verify, bound to the module)."""
    kind = _supervisor.choose(params["supervisor"])
    sup = _supervisor.make(kind, params["name"], params["state_dir"], params["log_dir"], params["stop_timeout"])
    record = sup.store.load()
    if record and record.get("corrupt"):
        record = None
    running = bool(record) and sup.alive(record)
    result = {"argv": None, "fingerprint": None, "variant": params.get("variant"),
              "url": url_of(params["host"], params["port"]), "pid": None, "ready_s": None,
              "engine_version": None, "supervisor": kind, "log": sup.log_path, "state_file": sup.store.path,
              "healthy": None, "loading": False, "reason": None, "current": current_of(record, running)}
    converge = _stop if params["state"] == "stopped" else _start
    try:
        return converge(params, check_mode, verify_gpus, sup, record, running, result)
    except (_engines.EngineError, _supervisor.SupervisorError) as exc:
        raise ServerError(str(exc), **result)
    except ServerError as exc:
        for key, value in result.items():
            exc.extra.setdefault(key, value)
        raise


def _before(record):
    return {"argv": record.get("argv"), "fingerprint": record.get("fingerprint")} if record else {}


def _stop(params, check_mode, verify_gpus, sup, record, running, result):
    """state=stopped: needs no engine or model, as the state file says what runs."""
    strays = sup.carriers()
    changed = running or bool(strays) or bool(record)
    diff = {"before": _before(record), "after": {}}
    if record:
        result.update(argv=record.get("argv"), fingerprint=record.get("fingerprint"),
                      variant=params.get("variant") or record.get("variant"), url=record.get("url"))
    elif params.get("engine") and params.get("model"):
        launch = _engines.adapter(params["engine"]).build(params)
        result.update(argv=launch.public_argv, fingerprint=launch.fingerprint)
    if changed and not check_mode:
        result["stopped_pids"] = sup.stop(record, params["stop_timeout"])
        if result["supervisor"] == "systemd":
            sup.remove()
        sup.store.clear()
    if not check_mode:
        _check_gpus(verify_gpus, params, result, "after stopping %s" % params["name"])
    return changed, result, diff


def _start(params, check_mode, verify_gpus, sup, record, running, result):
    """state=started (keep a healthy server of this configuration, else replace or start it) and restarted."""
    adapter = _engines.adapter(params["engine"])
    version = adapter.version(params)
    launch = adapter.build(params, version)
    fingerprint = launch.fingerprint
    result.update(argv=launch.public_argv, fingerprint=fingerprint, engine_version=version)
    secrets = _secrets(params, launch)
    same = (bool(record) and record.get("fingerprint") == fingerprint and
            record.get("secrets_digest") == _fingerprint.secrets_digest(record.get("secrets_salt", ""), secrets))
    after = {"argv": launch.public_argv, "fingerprint": fingerprint}
    diff = {"before": _before(record), "after": after}
    if same and running and params["state"] == "started":
        result.update(pid=record.get("pid"), ready_s=record.get("ready_s"), started_at=record.get("started_at"))
        # never ready yet: left loading by an earlier call (wait=false, ready_wait), or by a run that was cut short
        loading = bool(record.get("loading")) or record.get("ready_s") is None
        if not params["wait"] and not check_mode:
            result.update(loading=loading, reason=LOADING if loading else RUNS)
            return False, result, diff
        if loading and not check_mode:  # wait for it, no restart; fails with the log tail if it exited
            result["reason"] = LOADING
            _await_start(sup, record, launch, params, result, elapsed=max(0.0, time.time() - record["started_at"]))
            return False, result, diff
        result["healthy"] = _serves(params, launch)
        if result["healthy"] or loading:
            result.update(loading=loading and not result["healthy"], reason=SERVING if result["healthy"] else LOADING)
            return False, result, diff
        result["reason"] = NOT_ANSWERING  # it served with this configuration and no longer answers: restart it
    elif same and params["state"] == "started" and record.get("loading") and not check_mode:
        # a start that an earlier call left loading has exited: report it, don't start it again silently
        raise _failed_start(sup, record, params, result, ServerError(
            "%s exited before it was ready (started %.1fs ago and left loading by an earlier call); "
            "the next run starts it again" % (params["name"], time.time() - record["started_at"]),
            **_rc(sup.exit_code(record))))
    else:
        result["reason"] = _start_reason(record, running, same, fingerprint)

    if check_mode:
        _check_gpus(verify_gpus, params, result, "", preview=True)
        return True, result, diff

    if record or sup.carriers():
        result["stopped_pids"] = sup.stop(record, params["stop_timeout"])
        sup.store.clear()
        if not _wait_port_free(params["host"], params["port"]):
            raise ServerError("port %d on %s is still taken after stopping the old %s" %
                              (params["port"], params["host"], params["name"]))
    _check_gpus(verify_gpus, params, result, "(%s was not started)" % params["name"])
    if _engines.port_in_use(params["host"], params["port"]):
        raise ServerError("port %d on %s is already in use by a process that is not instance %r; "
                          "choose another port or stop that process (nothing was started)"
                          % (params["port"], params["host"], params["name"]))

    salt = _fingerprint.new_salt()
    started = sup.start(launch.argv, launch.env)
    record = {"name": params["name"], "engine": params["engine"], "model": params["model"],
              "served_model_name": params.get("served_model_name"),
              "variant": params.get("variant"), "fingerprint": fingerprint, "argv": launch.public_argv,
              "port": params["port"], "host": params["host"], "url": result["url"],
              "supervisor": result["supervisor"], "marker": sup.marker, "started_at": time.time(),
              "engine_version": version, "secrets_salt": salt, "secrets_digest": _fingerprint.secrets_digest(salt, secrets)}
    record.update(started)
    sup.store.save(record)
    result.update(pid=record["pid"], started_at=record["started_at"])
    if params["wait"]:
        _await_start(sup, record, launch, params, result)
        return True, result, diff
    time.sleep(0.5)
    code = sup.exit_code(record)
    if code is not None:
        raise _failed_start(sup, record, params, result, ServerError(
            "%s exited with code %s right after start" % (params["name"], code), rc=code))
    record["loading"] = True
    sup.store.save(record)
    result["loading"] = True
    return True, result, diff
