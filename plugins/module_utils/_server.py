# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inference_server lifecycle: desired launch vs recorded state → keep, start, restart or stop,
then health-gate the new server. Standard library only; the module is a thin wrapper over reconcile().
"""

from __future__ import annotations

import time

from ansible_collections.inferops.serving.plugins.module_utils import _engines, _fingerprint, _supervisor


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


def wait_ready(sup, record, launch, params, clock=time.monotonic, sleep=time.sleep):
    """Poll /health then a 1-token generation until ready; fail at once if the engine exits."""
    start = clock()
    deadline = start + params["ready_timeout"]
    host, port = probe_host(params["host"]), params["port"]
    last = "no answer yet"
    while True:
        code = sup.exit_code(record)
        if code is not None:
            raise ServerError("%s exited with code %s before it was ready (after %.1fs); last probe: %s"
                              % (params["name"], code, clock() - start, last), rc=code)
        left = deadline - clock()
        result = _engines.probe(host, port, launch.probe_model, params.get("api_key"),
                                timeout=max(1.0, min(10.0, left)), generate_timeout=max(1.0, min(300.0, left)))
        last = result.detail
        if result.state == "ready":
            return round(clock() - start, 3)
        if result.state == "refused":
            raise ServerError("%s answers /health but refuses the readiness generation: %s"
                              % (params["name"], result.detail))
        if clock() >= deadline:
            raise ServerError("%s was not ready within ready_timeout=%ss; last probe: %s"
                              % (params["name"], params["ready_timeout"], last), timed_out=True)
        sleep(0.25)


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


def reconcile(params, check_mode=False):
    """Returns (changed, result, diff). Raises ServerError or _engines.EngineError on failure."""
    kind = _supervisor.choose(params["supervisor"])
    sup = _supervisor.make(kind, params["name"], params["state_dir"], params["log_dir"], params["stop_timeout"])
    record = sup.store.load()
    if record and record.get("corrupt"):
        record = None
    before = {"argv": record.get("argv"), "fingerprint": record.get("fingerprint")} if record else {}
    running = bool(record) and sup.alive(record)
    result = {"argv": None, "fingerprint": None, "variant": params.get("variant"),
              "url": url_of(params["host"], params["port"]), "pid": None, "ready_s": None,
              "engine_version": None, "supervisor": kind, "log": sup.log_path, "state_file": sup.store.path,
              "healthy": None, "current": current_of(record, running)}

    if params["state"] == "stopped":  # needs no engine or model: the state file says what runs
        strays = sup.carriers()
        changed = running or bool(strays) or bool(record)
        diff = {"before": before, "after": {}}
        if record:
            result.update(argv=record.get("argv"), fingerprint=record.get("fingerprint"),
                          variant=params.get("variant") or record.get("variant"), url=record.get("url"))
        elif params.get("engine") and params.get("model"):
            launch = _engines.adapter(params["engine"]).build(params)
            result.update(argv=launch.public_argv, fingerprint=launch.fingerprint)
        if changed and not check_mode:
            result["stopped_pids"] = sup.stop(record, params["stop_timeout"])
            if kind == "systemd":
                sup.remove()
            sup.store.clear()
        return changed, result, diff

    adapter = _engines.adapter(params["engine"])
    version = adapter.version(params)
    launch = adapter.build(params, version)
    fingerprint = launch.fingerprint
    result.update(argv=launch.public_argv, fingerprint=fingerprint, engine_version=version)
    secrets = _secrets(params, launch)
    same = (bool(record) and record.get("fingerprint") == fingerprint and
            record.get("secrets_digest") == _fingerprint.secrets_digest(record.get("secrets_salt", ""), secrets))
    after = {"argv": launch.public_argv, "fingerprint": fingerprint}
    if same and running and params["state"] == "started":
        result.update(pid=record.get("pid"), ready_s=record.get("ready_s"), started_at=record.get("started_at"))
        if check_mode:
            # one quick probe, so a plan can tell "same and serving" from "same but not answering"
            result["healthy"] = _engines.probe(probe_host(params["host"]), params["port"], launch.probe_model,
                                               params.get("api_key"), timeout=5.0,
                                               generate_timeout=30.0).state == "ready"
            return False, result, {"before": before, "after": after}
        if not params["wait"]:
            return False, result, {"before": before, "after": after}
        if _engines.probe(probe_host(params["host"]), params["port"], launch.probe_model,
                          params.get("api_key")).state != "ready":
            wait_ready(sup, record, launch, params)  # still loading (started with wait=false): wait, no restart
        result["healthy"] = True
        return False, result, {"before": before, "after": after}

    diff = {"before": before, "after": after}
    if check_mode:
        return True, result, diff

    if record or sup.carriers():
        result["stopped_pids"] = sup.stop(record, params["stop_timeout"])
        sup.store.clear()
        if not _wait_port_free(params["host"], params["port"]):
            raise ServerError("port %d on %s is still taken after stopping the old %s" %
                              (params["port"], params["host"], params["name"]))
    if _engines.port_in_use(params["host"], params["port"]):
        raise ServerError("port %d on %s is already in use by a process that is not instance %r; "
                          "choose another port or stop that process (nothing was started)"
                          % (params["port"], params["host"], params["name"]))

    salt = _fingerprint.new_salt()
    started = sup.start(launch.argv, launch.env)
    record = {"name": params["name"], "engine": params["engine"], "model": params["model"],
              "served_model_name": params.get("served_model_name"),
              "variant": params.get("variant"), "fingerprint": fingerprint, "argv": launch.public_argv,
              "port": params["port"], "host": params["host"], "url": result["url"], "supervisor": kind,
              "marker": sup.marker, "started_at": time.time(), "engine_version": version,
              "secrets_salt": salt, "secrets_digest": _fingerprint.secrets_digest(salt, secrets)}
    record.update(started)
    sup.store.save(record)
    result.update(pid=record["pid"], started_at=record["started_at"])
    try:
        if params["wait"]:
            record["ready_s"] = wait_ready(sup, record, launch, params)
        else:
            time.sleep(0.5)
            code = sup.exit_code(record)
            if code is not None:
                raise ServerError("%s exited with code %s right after start" % (params["name"], code), rc=code)
    except BaseException as exc:
        log_tail = _supervisor.tail(sup.log_path, 40, record.get("log_offset", 0))
        sup.stop(record, params["stop_timeout"])
        sup.store.clear()
        if isinstance(exc, ServerError):
            exc.extra.setdefault("log_tail", log_tail)
            exc.extra.update(result)
            raise
        raise ServerError("%s: %s" % (type(exc).__name__, exc), log_tail=log_tail, **result)
    sup.store.save(record)
    result["ready_s"] = record.get("ready_s")
    result["healthy"] = True if params["wait"] else None
    return True, result, diff
