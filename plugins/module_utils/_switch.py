# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A switch as one transaction that the target carries out by itself: stop what runs, check the GPUs,
start the new server, wait until it generates, and on any failure stop it and restore the server that
served before. Standard library only.

The transaction runs in a process detached from the module (a new session, double fork), which holds
the instance lock until it ends, so a controller that disappears (a closed laptop, a cancelled AWX job,
kill -9) leaves the host with the new variant ready or the previous one serving again. The module
waits for it (ready_wait), and a later call joins it by its id. What it does is written as it happens
to <state_dir>/<name>.switch.json (the journal of the last switch); the module parameters of the
server that runs, and of the last one that was ready while a switch is under way, are kept with their
secrets in <state_dir>/<name>.launch.json (mode 0600), which the roles never read.
"""

from __future__ import annotations

import os
import time
import traceback
import uuid

from ansible_collections.inferops.serving.plugins.module_utils import (
    _engines, _fingerprint, _idle_check, _procs, _resolved, _router, _supervisor, _watchdog)

# The one word every outcome of the module is, and the phrase each failure ends with.
READY, UNCHANGED, RELABELLED, LOADING, STOPPED = "ready", "unchanged", "relabelled", "loading", "stopped"
NOTHING_STOPPED, ROLLED_BACK, RESTORE_FAILED = "nothing_stopped", "rolled_back", "restore_failed"
FAILED = "failed"  # a Stop whose stop raised: the journal's end, never a result's outcome
FAILURES = (NOTHING_STOPPED, ROLLED_BACK, RESTORE_FAILED)

# after /health is 200, generations failing with a 5xx other than 503 this long (and this often) mean a
# broken engine, not a loading one
BROKEN_GRACE_S = 10.0
BROKEN_PROBES = 3


class ServerError(RuntimeError):
    """A failure to report with fail_json; extra holds the result fields (outcome, log_tail, rc, ...)."""

    def __init__(self, msg, **extra):
        RuntimeError.__init__(self, msg)
        self.extra = extra


def nothing_stopped(why, **extra):
    extra.update(outcome=NOTHING_STOPPED, failure=why, outcome_msg="nothing was stopped")
    return ServerError("nothing was stopped: %s" % why, **extra)


def probe_host(host):
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def url_of(host, port):
    host = probe_host(host)
    return "http://%s:%d" % ("[%s]" % host if ":" in host else host, port)


def rc_of(end):
    """The rc return value: the exit code, or -N when signal N ended it (Popen's convention), when known."""
    code = _supervisor.exit_code_of(end)
    return {} if code in (None, _supervisor.EXIT_UNKNOWN) else {"rc": code}


def stop_grace(params, record):
    """Seconds the main process of the server that runs (record) has to end its workers itself."""
    if params.get("stop_grace") is not None:
        return params["stop_grace"]
    engine = (record or {}).get("engine") or params.get("engine")
    return _engines.adapter(engine).stop_grace if engine in _engines.ADAPTERS else _engines.Adapter.stop_grace


def stop_server(sup, record, params):
    """The orderly stop of what runs: (signalled pids, how the engine ended or None)."""
    pids = sup.stop(record, params["stop_timeout"], stop_grace(params, record))
    end = sup.ending(record) if record and record.get("pid") else None
    return pids, end


def wait_ready(sup, record, launch, params, clock=time.monotonic, sleep=time.sleep, elapsed=0.0, limit=None):
    """Poll /health then a 1-token generation until ready; fail at once if the engine exits, and within
    BROKEN_GRACE_S when /health is 200 but every generation fails with a 5xx other than 503.

    elapsed: seconds the server has loaded already (ready_timeout counts from its start). limit: seconds
    this call may wait (None: until ready_timeout). Returns the seconds from start to ready, or None when
    limit ran out first (the server keeps loading)."""
    start = clock() - elapsed
    deadline = start + params["ready_timeout"]
    stop_at = deadline if limit is None else min(deadline, clock() + limit)
    host, port = probe_host(params["host"]), params["port"]
    last = "no answer yet"
    broken_since, broken_count = None, 0
    while True:
        end = sup.ending(record)
        if end is not None:
            raise ServerError("%s %s before it was ready (after %.1fs%s); last probe: %s"
                              % (params["name"], _supervisor.describe(dict(end, ended_at=None)), clock() - start,
                                 ", at %s" % end["ended_at"] if end.get("ended_at") else "", last),
                              exit=end, **rc_of(end))
        left = deadline - clock()
        result = _engines.probe(host, port, launch.probe_model, params.get("api_key"),
                                timeout=max(1.0, min(launch.health_timeout, left)),
                                generate_timeout=max(1.0, min(300.0, left)))
        last = result.detail
        if result.state == "ready":
            return round(clock() - start, 3)
        if result.state == "refused":
            raise ServerError("%s answers /health but refuses the readiness generation: %s"
                              % (params["name"], result.detail))
        now = clock()
        if result.state == "error":
            broken_since = now if broken_since is None else broken_since
            broken_count += 1
            if broken_count >= BROKEN_PROBES and now - broken_since >= BROKEN_GRACE_S:
                raise ServerError("%s answers /health but every generation failed for %.0fs (%d probes): %s"
                                  % (params["name"], now - broken_since, broken_count, result.detail))
        else:
            broken_since, broken_count = None, 0
        if now >= deadline:
            raise ServerError("%s was not ready within ready_timeout=%ss; last probe: %s"
                              % (params["name"], params["ready_timeout"], last), timed_out=True)
        if now >= stop_at:
            return None
        sleep(min(1.0 if broken_since is not None else 0.25, max(0.0, stop_at - now)))


def secrets_of(params):
    return {"api_key": params.get("api_key") or "", "env": _fingerprint.secret_env(params.get("env"))}


def public(record):
    """A record as the state file's "previous" keeps it (what served), without the nested previous."""
    return dict((k, v) for k, v in record.items() if k not in ("previous", "loading"))


def wait_port_free(host, port, timeout=10.0):
    deadline = time.monotonic() + timeout
    while _engines.port_in_use(host, port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def loaded(store):
    """A state file's content, None when it is absent or unreadable."""
    data = store.load()
    return None if not data or data.get("corrupt") else data


KEEP_JOURNALS = 20


def journal(state_dir, name, switch_id=None):
    """<state_dir>/<name>.switch.json: the last switch, as its process carries it out; with switch_id,
    that switch's own journal in <state_dir>/<name>.switches/ (a later switch must not hide how an
    earlier one ended from the run that waits for it)."""
    if switch_id:
        return _supervisor.StateStore(name, os.path.join(state_dir, "%s.switches" % name), "%s.json" % switch_id)
    return _supervisor.StateStore(name, state_dir, "%s.switch.json" % name)


def _prune(directory, keep=KEEP_JOURNALS):
    try:
        names = sorted(os.listdir(directory), key=lambda n: os.path.getmtime(os.path.join(directory, n)))
    except OSError:
        return
    for stale in names[:-keep]:
        try:
            os.unlink(os.path.join(directory, stale))
        except OSError:
            pass


def launches(state_dir, name):
    """<state_dir>/<name>.launch.json (0600): {"current": params, "previous": params}, secrets included."""
    return _supervisor.StateStore(name, state_dir, "%s.launch.json" % name)


def stored_params(params):
    """The parameters a restore needs (the launch file): never the router option, whose key must not be written."""
    return dict((k, v) for k, v in params.items() if k not in ("switch_id", "router"))


class Switch(object):
    """One switch, decided by the module; run() carries it out (in the detached process).

    sup, params, launch: the instance's supervisor, the module parameters and the launch they build. The
    rest by keyword: version (the engine's), old (the record of what runs, stopped first when stop_old, or
    of a server left loading, waited for when start_new is false), previous / previous_params (the last
    server that was ready, its public record and module parameters, restored on failure; None when nothing
    served), verify_gpus (the GPU check, Host.verify), what (what the lock holder says it does) and router
    (_router.Membership, or None: the instance's router, left and drained before the stop and joined once a
    server is ready, all under the instance lock)."""

    def __init__(self, sup, params, launch, *, version=None, old=None, stop_old=False, start_new=True,
                 previous=None, previous_params=None, verify_gpus, what, router=None):
        self.sup = sup
        self.params = params
        self.launch = launch
        self.version = version
        self.old = old
        self.stop_old = stop_old
        self.start_new = start_new
        self.previous = previous
        self.previous_params = previous_params
        self.verify_gpus = verify_gpus
        self.router = router
        self.left = False  # the worker left its router (and nothing has put it back yet)
        self.lock = None  # the instance lock, in the detached process: its note says the phase
        self.journal = journal(params["state_dir"], params["name"])
        self.launches = launches(params["state_dir"], params["name"])
        self.starts = 0  # engines started by this switch: each start moves the logs one place (_supervisor.rotate)
        self.tail_start = None  # self.starts when the failed start's log tail was read
        salt = _fingerprint.new_salt()
        self.data = {
            "id": uuid.uuid4().hex[:16], "name": params["name"], "what": what, "pid": os.getpid(),
            "started_at": time.time(), "phase": "preparing", "phases": [], "outcome": None,
            "target": {"variant": params.get("variant"), "fingerprint": launch.fingerprint if launch is not None else None,
                       "secrets_salt": salt, "secrets_digest": _fingerprint.secrets_digest(salt, secrets_of(params))},
            "previous": {"variant": previous.get("variant"), "fingerprint": previous.get("fingerprint")} if previous else None,
        }
        if router is not None:
            self.data["router"] = router.describe()
            self.data["router_steps"] = []

    # -- the journal

    def phase(self, name, limit=None):
        self.data["phase"] = name
        self.data["phases"].append([name, round(time.time() - self.data["started_at"], 3)])
        self.save()
        if self.lock is not None and name != "done":  # a run that waits for the lock says what the holder does
            try:
                # what it does first (the words a refused run has always quoted), then the phase it is in
                self.lock.note("%s, now %s%s" % (self.data["what"], name.replace("_", " "),
                                                 " (at most %gs)" % limit if limit is not None else ""))
            except OSError:
                pass

    def save(self):
        own = journal(self.params["state_dir"], self.params["name"], self.data["id"])
        own.save(self.data)
        self.journal.save(self.data)
        if self.data["phase"] == "preparing":
            _prune(os.path.dirname(own.path))

    def finish(self, outcome, msg, **fields):
        """The switch's end, in its journal. Log tails and messages may quote the engine, which may print its
        key: every secret of this launch and of the one restored is masked before anything is written."""
        secrets = _fingerprint.secret_values(self.params) + _fingerprint.secret_values(self.previous_params)
        secrets = sorted(set(secrets + (self.router.secrets if self.router is not None else [])), key=len, reverse=True)
        fields = dict((key, _fingerprint.redact(value, secrets)) for key, value in fields.items())
        msg = _fingerprint.redact(msg, secrets)
        for step in self.data.get("router_steps") or []:
            for key in ("error", "drain", "engine_ended"):
                if key in step:
                    step[key] = _fingerprint.redact(step[key], secrets)
        for key in ("log_tail", "error"):
            if key in self.data:
                self.data[key] = _fingerprint.redact(self.data[key], secrets)
        if self.tail_start is not None:  # where the failed start's log is now: NAME.log, or NAME.log.1 after a restore
            moved = self.starts - self.tail_start
            self.data["log_file"] = (_supervisor.log_holding(self.sup.log_path, moved)
                                     if moved < max(1, self.sup.log_keep) else None)
        self.data.update(fields)
        self.data.update(outcome=outcome, msg=msg, finished_at=time.time())
        self.phase("done")

    # -- steps

    def _check_gpus(self, what):
        if not self.params.get("gpu_check"):
            return None
        try:
            return self.verify_gpus(dict(self.params["gpu_check"]), False, owner=self.sup.marker)
        except _idle_check.CheckFailed as exc:
            raise ServerError("GPUs not clean %s: %s" % (what, exc.msg), gpu_check=exc.result)

    def _start(self, params, launch, version, previous):
        """Launch a server and record it as loading (the previous one kept in the record until it is ready)."""
        kind = self.sup.kind
        salt = _fingerprint.new_salt()
        record = {"name": params["name"], "engine": params["engine"], "model": params["model"],
                  "served_model_name": params.get("served_model_name"), "served_model": launch.probe_model,
                  "variant": params.get("variant"),
                  "fingerprint": launch.fingerprint, "argv": launch.public_argv, "port": params["port"],
                  "host": params["host"], "url": url_of(params["host"], params["port"]), "supervisor": kind,
                  "marker": self.sup.marker, "engine_version": version, "secrets_salt": salt,
                  "secrets_digest": _fingerprint.secrets_digest(salt, secrets_of(params)), "loading": True}
        if previous:
            record["previous"] = previous
        record["started_at"] = time.time()
        self.starts += 1
        record.update(self.sup.start(launch.argv, launch.env, launch.fingerprint))
        self.sup.store.save(record)
        stored = loaded(self.launches) or {}
        stored["current"] = stored_params(params)
        self.launches.save(stored)
        return record

    def _keep_previous(self, record):
        self.sup.store.save(dict(record, previous=self.previous))
        stored = loaded(self.launches) or {}
        stored["previous"] = self.previous_params
        self.launches.save(stored)

    def _ready(self, record, params, ready_s, launch):
        record.pop("loading", None)
        record.pop("previous", None)
        record["ready_s"] = ready_s
        record["resolved"] = self._resolved(record, params, launch)
        self.sup.store.save(record)
        self.launches.save({"current": stored_params(params)})

    def _resolved(self, record, params, launch):
        """What the ready engine resolved (_resolved.read), null when nothing is read for it; a read that fails
        is recorded as its error and never fails the switch."""
        try:
            return _resolved.read(params, launch, record, self.sup.log_path, self.sup.run, host=probe_host(params["host"]))
        except Exception as exc:  # pylint: disable=broad-except
            return {"engine": params.get("engine"), "source": None, "error": "%s: %s" % (type(exc).__name__, exc)}

    def _stop_failed(self, record):
        tail = _supervisor.tail(self.sup.log_path, 40, record.get("log_offset", 0)) if record else []
        if record is not None or self.sup.carriers():
            stop_server(self.sup, record, self.params)
        return tail

    def _restore(self):
        """Start the previous server again; returns its record (raises when it does not get ready)."""
        params = self.previous_params
        adapter = _engines.adapter(params["engine"])
        version = adapter.version(params, self.sup.run)
        launch = adapter.build(params, version)
        self._check_gpus("before restoring %s" % self.previous.get("variant"))
        if not wait_port_free(params["host"], params["port"]):
            raise ServerError("port %d on %s is still taken" % (params["port"], params["host"]))
        record = self._start(params, launch, version, None)
        try:
            ready_s = wait_ready(self.sup, record, launch, params)
        except BaseException:
            self._stop_failed(record)
            raise
        self._ready(record, params, ready_s, launch)
        return record

    def run(self):
        """Carry the switch out to one of: ready, rolled_back, restore_failed, nothing_stopped."""
        self.data["pid"] = os.getpid()
        data, params, record = self.data, self.params, None
        stopped_a_server = False
        if self.router is not None and self.stop_old and not self._leave():
            return data
        try:
            if self.previous is not None:
                # from here until the new server is ready, the state files keep what served before, so that
                # a run that takes over from a switch process that died still knows what to restore
                self._keep_previous(self.old)
            if self.stop_old:
                self.phase("stopping")
                stopped_a_server = self.previous is not None  # from here on, what served may be down
                data["stopped_pids"], stopped = stop_server(self.sup, self.old, params)
                if stopped:
                    data["stopped_exit"] = stopped
                if self.sup.kind == "systemd":
                    self.sup.remove()
                if not wait_port_free(params["host"], params["port"]):
                    raise ServerError("port %d on %s is still taken after stopping the old %s"
                                      % (params["port"], params["host"], params["name"]))
            if self.start_new:
                self.phase("checking_gpus")
                data["gpu_check"] = self._check_gpus("(%s was not started)" % params["name"])
                self.phase("starting")
                record = self._start(params, self.launch, self.version, self.previous)
                data["server_pid"] = record["pid"]
                elapsed = 0.0
            else:
                record = self.old
                elapsed = max(0.0, time.time() - record.get("started_at", time.time()))
            self.phase("waiting")
            ready_s = wait_ready(self.sup, record, self.launch, params, elapsed=elapsed)
            self._ready(record, params, ready_s, self.launch)
            joined = self._join()
            msg = "%s serves %s: ready in %ss" % (params["name"], params.get("variant") or "it", ready_s)
            if joined.get("router_error"):
                msg += "; but it is not in its router: %s" % joined["router_error"]
            self.finish(READY, msg, ready_s=ready_s, server_pid=record["pid"], **joined)
        except BaseException as exc:  # SystemExit too: whatever happens, the host ends in a known state
            self._fail(exc, record, stopped_a_server or (self.previous is not None and not self.stop_old))
        return data

    def _fail(self, exc, record, restore):
        data = self.data
        extra = dict(getattr(exc, "extra", {}) or {})
        failure = str(exc) or type(exc).__name__
        if not isinstance(exc, (ServerError, _engines.EngineError, _supervisor.SupervisorError)):
            data["error"] = traceback.format_exc()[-4000:]
            failure = "%s: %s" % (type(exc).__name__, failure)
        data.update(dict((k, v) for k, v in extra.items() if k in ("rc", "exit", "gpu_check", "timed_out")))
        try:
            data["log_tail"] = self._stop_failed(record)
            if record is not None:
                self.tail_start = self.starts
        except BaseException as stop_exc:  # pylint: disable=broad-except
            data["log_tail"] = []
            failure += "; stopping it failed too: %s" % stop_exc
        if not restore and data.get("stopped_pids"):  # what was stopped served nothing known: never "nothing stopped"
            self._failed(RESTORE_FAILED, failure, "RESTORE FAILED: nothing serves (pids %s were stopped, and nothing "
                         "recorded a server to restore)" % ", ".join(str(p) for p in data["stopped_pids"]))
            return
        if not restore:
            self._failed(NOTHING_STOPPED, failure, "nothing was stopped: nothing served before, and the failed "
                         "start was cleaned up", **self._put_back())
            return
        name = self.previous.get("variant") or "the previous server"
        if not self.previous_params:
            why = ("its state file was %s and no launch file describes pid %s" % (self.previous["recovered"], self.previous.get("pid"))
                   if self.previous.get("recovered") else "it was started by an older inferops.serving")
            self._failed(RESTORE_FAILED, failure, "RESTORE FAILED: nothing serves (the launch of %s was not "
                         "recorded: %s)" % (name, why))
            return
        self.phase("restoring")
        try:
            restored = self._restore()
        except BaseException as restore_exc:  # pylint: disable=broad-except
            self._failed(RESTORE_FAILED, failure, "RESTORE FAILED: nothing serves (restoring %s failed: %s)"
                         % (name, restore_exc), restore_error=str(restore_exc))
            return
        joined = self._join()  # the restored server goes back into the router
        self.finish(ROLLED_BACK, "%s | ROLLED BACK: %s serves again at %s (pid %s)"
                    % (failure, name, restored["url"], restored["pid"]), failure=failure,
                    outcome_msg="ROLLED BACK: %s serves again at %s (pid %s)" % (name, restored["url"], restored["pid"]),
                    restored={"variant": restored.get("variant"), "fingerprint": restored["fingerprint"],
                              "pid": restored["pid"], "url": restored["url"]}, **joined)

    # -- the router (issue 34): left and drained before the stop, joined once a server is ready

    def _step(self, step, result, error=None):
        """One router step in the journal: whether the worker is listed after it, and how a drain ended."""
        entry = _router.step_entry(step, result, result.get("listed"))
        entry["at"] = round(time.time() - self.data["started_at"], 3)
        if error:
            entry["error"] = error
        self.data["router_steps"].append(entry)
        self.data["listed"] = result.get("listed")
        self.save()

    def _leave(self):
        """Phases leaving_router then draining. True when the worker is out and drained (or was not listed); else
        the switch ends here, nothing stopped, the worker put back when it had left: False."""
        removed = []

        def on_removed():
            removed.append(True)
            self.left = True
            self.phase("draining", self.router.drain_timeout)

        self.phase("leaving_router")
        try:
            left = self.router.leave(on_removed=on_removed)
        except Exception as exc:  # pylint: disable=broad-except
            failure = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
            result = dict(getattr(exc, "result", {}) or {})
            if not isinstance(exc, _router.RouterError):
                failure = "%s: %s" % (type(exc).__name__, failure)
            self._step("leave", result, error=failure)
            fields = self._put_back() if removed and not result.get("listed") else {"listed": result.get("listed")}
            self.finish(NOTHING_STOPPED, "%s | nothing was stopped" % failure, failure=failure,
                        outcome_msg="nothing was stopped", **fields)
            return False
        self._step("leave", left)
        return True

    def _put_back(self):
        """After a switch that stopped nothing: the old worker back into its router, when it had left it."""
        if self.router is None or not self.left:
            return {}
        return self._join()

    def _join(self):
        """Phase joining_router: the server that serves now into the router, waiting until listed healthy.
        {"listed": ...} (and "router_error" when the router did not take it); {} without a router."""
        if self.router is None:
            return {}
        self.phase("joining_router")
        try:
            joined = self.router.join()
        except Exception as exc:  # pylint: disable=broad-except
            failure = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
            self._step("join", dict(getattr(exc, "result", {}) or {}, listed=False), error=failure)
            return {"listed": False, "router_error": failure}
        self.left = False
        self._step("join", joined)
        return {"listed": joined.get("listed")}

    def _failed(self, outcome, failure, outcome_msg, **fields):
        """Nothing serves (or served): the state files say so."""
        if self.router is not None:
            fields.setdefault("listed", self.data.get("listed"))
        self.sup.store.clear()
        self.launches.clear()
        self.finish(outcome, "%s | %s" % (failure, outcome_msg), failure=failure, outcome_msg=outcome_msg, **fields)


class Stop(Switch):
    """state=stopped behind a router, carried out by the host as a switch is (detach(), the instance lock handed
    over), so that a controller that dies during the drain leaves the host to finish it: out of the router and
    drained (Switch._leave: a router that refuses or a drain that does not end stops nothing, the instance put back
    when it had left), then stopped (when anything runs: stopping) and its GPUs checked. Outcomes: stopped,
    unchanged (nothing ran), nothing_stopped; an error while stopping ends as failed, its message the error's."""

    def __init__(self, sup, params, old, *, running, stopping, verify_gpus, router):
        Switch.__init__(self, sup, params, None, old=old, verify_gpus=verify_gpus, what="stop", router=router)
        self.running = running
        self.stopping = stopping

    def run(self):
        self.data["pid"] = os.getpid()
        data, params = self.data, self.params
        if not self._leave():
            return data
        try:
            if self.stopping:
                self.phase("stopping")
                data["stopped_pids"], ended = stop_server(self.sup, self.old, params)
                if ended:  # how the stop ended it, or, when it had ended by itself, how
                    data["stopped_exit" if self.running else "exit"] = ended
                if self.sup.kind == "systemd":
                    self.sup.remove()
                self.sup.store.clear()
                self.launches.clear()
            outcome = STOPPED if self.stopping else UNCHANGED
            if params.get("gpu_check"):
                self.phase("checking_gpus")
                try:
                    data["gpu_check"] = self._check_gpus("after stopping %s" % params["name"])
                except ServerError as exc:
                    data["gpu_check"] = exc.extra.get("gpu_check")
                    self.finish(outcome, str(exc), failure=str(exc))
                    return data
            self.finish(outcome, "%s was taken out of its router, drained%s" % (
                params["name"], " and stopped" if self.stopping else ": nothing ran"))
        except BaseException as exc:  # pylint: disable=broad-except  # SystemExit too: the journal says how it ended
            failure = str(exc) or type(exc).__name__
            if not isinstance(exc, (ServerError, _supervisor.SupervisorError)):
                data["error"] = traceback.format_exc()[-4000:]
                failure = "%s: %s" % (type(exc).__name__, failure)
            self.finish(FAILED, failure, failure=failure)
        return data


# ---------------------------------------------------------------------------------------------------
# detaching, and waiting for the outcome

def _quiet(keep):
    """The detached process: stdio on /dev/null (an SSH session or the module's pipe must not wait for
    it), every other descriptor closed but the lock's, cwd /."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        if fd > 2 and fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass
    os.chdir("/")


def detach(switch, lock):
    """Run switch.run() in a new session, detached from this process (double fork); return its pid. The
    lock's descriptor is inherited, so the detached process holds the instance lock until it ends."""
    switch.save()
    read_fd, write_fd = os.pipe()
    first = os.fork()
    if first == 0:  # pragma: no cover - the children never return here
        status = 1
        try:
            os.close(read_fd)
            os.setsid()
            second = os.fork()
            if second:
                os.write(write_fd, str(second).encode("ascii"))
                status = 0
            else:
                os.close(write_fd)
                _quiet(lock.fd)
                lock.note(switch.data["what"])
                switch.lock = lock  # each phase says itself in the lock's note
                try:
                    switch.run()
                finally:
                    os._exit(0)
        finally:
            os._exit(status)
    os.close(write_fd)
    pid = _watchdog.read_all(read_fd).decode("ascii")
    os.waitpid(first, 0)
    lock.close()  # the detached process has it now
    if not pid:
        raise ServerError("could not start the switch process", outcome=NOTHING_STOPPED)
    return int(pid)


def await_switch(switch_id, state_dir, name, pid=None, limit=None, started_limit=None,
                 clock=time.monotonic, sleep=time.sleep):
    """Wait for a switch's outcome. limit: seconds to wait once the new server is waited for (phase
    waiting; None: until done); started_limit: return once it is waited for, plus this many seconds.
    Returns the journal (outcome None while it runs). A process that died without an outcome gives
    outcome 'died'."""
    book = journal(state_dir, name, switch_id)
    began, waiting_since = clock(), None
    while True:
        data = loaded(book)
        if data is None:
            return {"id": switch_id, "outcome": "unknown",
                    "msg": "no switch %s is known on this host (%s)" % (switch_id, book.path)}
        if data.get("outcome"):
            return data
        runner = pid or data.get("pid")
        if runner and not _procs.alive(runner) and clock() - began > 1.0:
            data = loaded(book) or data  # it may have finished between the two reads
            if not data.get("outcome"):
                data["outcome"] = "died"
                data["msg"] = ("the switch process %s ended without an outcome in phase %s; the next run takes over "
                               "what it left" % (runner, data.get("phase")))
            return data
        if data.get("phase") in ("waiting", "restoring") and waiting_since is None:
            waiting_since = clock()
        if waiting_since is not None:
            if started_limit is not None and clock() - waiting_since >= started_limit:
                return data
            if limit is not None and clock() - waiting_since >= limit:
                return data
        sleep(0.02)  # a small JSON file read: cheap, and the caller learns the outcome within 20 ms
