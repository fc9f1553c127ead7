# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Poll GPUs until every one is clean, reclaiming in-scope holders, with a deadline.

Clean = no compute/graphics process on the GPU (or any of its MIG devices) and used memory at most
max_used_mib. Never a fixed sleep: the state is polled every poll_interval seconds until clean or
the deadline, so the check returns within one poll of the memory being freed.
"""

from __future__ import annotations

import time

from ansible_collections.inferops.serving.plugins.module_utils import _gpu, _health, _instances, _procs


class CheckFailed(Exception):
    """The check cannot succeed; carries the partial result."""

    def __init__(self, msg, result):
        super(CheckFailed, self).__init__(msg)
        self.msg = msg
        self.result = result


_VERDICTS = {
    "reclaim": "in reclaim scope",
    "out_of_scope": "not in reclaim scope",
    "protected": "protected",
    "self": "this check or its ancestor",
    "invisible": "not visible in this PID namespace",
    "instance": "another instance's: never signalled",
}


def _holder_line(proc):
    used = "" if proc.get("used_mib") is None else ", %d MiB" % proc["used_mib"]
    verdict = _VERDICTS.get(proc.get("verdict"), "?")
    return "pid %d %s%s [%s]" % (proc["pid"], proc.get("name") or "?", used, verdict)


class IdleCheck(object):
    """One run of gpu_idle_check. clock/sleep are injectable so the timeout logic is testable."""

    def __init__(self, backend, indices, max_used_mib=0, timeout=60.0, poll_interval=0.1,
                 reclaim=False, kill_grace=10.0, scope=None, check_mode=False,
                 clock=time.monotonic, sleep=time.sleep, proc_root=_procs.PROC_ROOT,
                 health=None, run=None, phase="after"):
        self.backend = backend
        self.health = health  # the health settings (_health.settings), None: the driver's counters only
        self.run_cmd = run
        self.phase = phase
        self.health_report = None
        self.indices = list(indices)
        self.max_used_mib = max_used_mib
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.reclaim = reclaim
        self.kill_grace = kill_grace
        self.scope = scope or _procs.Scope(root=proc_root)
        self.check_mode = check_mode
        self.clock = clock
        self.sleep = sleep
        self.proc_root = proc_root
        self.signalled = {}   # target key -> (Target, time of SIGTERM, killed?)
        self.killed = []
        self.first_holders = None  # {"GPU n": [pids]} at the first read, for diff mode

    # -- evaluation -----------------------------------------------------------------------------

    def _classify(self, gpus):
        """Annotate each GPU and each holder; return {pid: (ProcInfo or None, verdict, reason)}."""
        verdicts = {}
        self.scope.refresh()
        for gpu in gpus:
            for proc in gpu["processes"]:
                if proc["pid"] not in verdicts:
                    info = _procs.read_proc(proc["pid"], self.proc_root)
                    verdicts[proc["pid"]] = (info,) + self.scope.classify(info)
                info, verdict, reason = verdicts[proc["pid"]]
                proc["verdict"] = verdict
                owner = self.scope.ownership(proc["pid"]) if info is not None else None
                if owner is not None:
                    proc["instance"] = owner.name
                    proc["instance_state"] = owner.kind
                if info is not None:
                    proc["cmdline"] = info.cmdline
                    if not proc.get("name"):
                        proc["name"] = info.name
            problems = _gpu.health_problems(gpu)
            gpu["health"]["ok"] = not problems
            gpu["health"]["problems"] = problems
            gpu["clean"] = (not gpu["processes"] and not problems
                            and gpu["memory_used_mib"] is not None
                            and gpu["memory_used_mib"] <= self.max_used_mib
                            and all(m["memory_used_mib"] is None or m["memory_used_mib"] <= self.max_used_mib
                                    for m in gpu["mig_devices"]))
        return verdicts

    def _result(self, gpus, start, backend_name, **extra):
        if extra.get("health") is None:
            extra.pop("health", None)
        result = {
            "clean": bool(gpus is not None and all(g["clean"] for g in gpus)),
            "gpus": gpus or [],
            "killed": sorted(self.killed),
            "waited_s": round(self.clock() - start, 3),
            "backend": backend_name,
        }
        result.update(extra)
        return result

    def _dirty_report(self, gpus):
        parts = []
        for gpu in gpus:
            if gpu["clean"]:
                continue
            detail = ["%s MiB used (limit %d)" % (gpu["memory_used_mib"], self.max_used_mib)]
            detail.extend(_holder_line(p) for p in gpu["processes"])
            detail.extend(gpu["health"]["problems"])
            parts.append("GPU %d (%s): %s" % (gpu["index"], gpu["uuid"], "; ".join(detail)))
        return " | ".join(parts)

    # -- reclaim ----------------------------------------------------------------------------------

    def _reclaimable(self, verdicts):
        return [info for info, verdict, _reason in verdicts.values() if verdict == "reclaim"]

    def _signal_new(self, holders, now):
        fresh = [h for h in holders if not any(h.pid in t.members for t, _s, _k in self.signalled.values())]
        if not fresh:
            return
        for target in self.scope.targets(fresh):
            key = ("g", target.pgid) if target.pgid is not None else ("p", target.pid)
            if key in self.signalled:
                continue
            sent = _procs.send(target, _procs.SIGTERM, self.proc_root)
            self.killed.extend(p for p in sent if p not in self.killed)
            self.signalled[key] = (target, now, False)

    def _escalate(self, now):
        for key, (target, since, killed) in list(self.signalled.items()):
            if not killed and now - since >= self.kill_grace and _procs.target_alive(target, self.proc_root):
                sent = _procs.send(target, _procs.SIGKILL, self.proc_root)
                self.killed.extend(p for p in sent if p not in self.killed)
                self.signalled[key] = (target, since, True)

    # -- the loop ---------------------------------------------------------------------------------

    def run(self):
        start = self.clock()
        deadline = start + self.timeout
        name = self.backend.name
        health = None
        while True:
            began = self.clock()
            gpus = self.backend.snapshot(self.indices, health=health is None)
            if health is None:
                # health (ECC, remapping, MIG mode) is read once; polling reads memory and holders only
                if self.health is not None and self.run_cmd is not None:
                    self.health_report = _health.assess(gpus, self.health, self.run_cmd, phase=self.phase,
                                                        write=not self.check_mode)
                    if self.health_report["errors"]:
                        raise CheckFailed("; ".join(self.health_report["errors"]),
                                          self._result(gpus, start, name, health=self.health_report))
                health = dict((g["index"], (g["health"], g["mig_mode"])) for g in gpus)
            else:
                for gpu in gpus:
                    gpu["health"], gpu["mig_mode"] = health[gpu["index"]]
            verdicts = self._classify(gpus)
            if self.first_holders is None:
                self.first_holders = dict(("GPU %d" % g["index"], sorted(p["pid"] for p in g["processes"]))
                                          for g in gpus)
            unhealthy = [g for g in gpus if not g["health"]["ok"]]
            if unhealthy:
                msg = "; ".join(unhealthy_line(g) for g in unhealthy)
                raise CheckFailed(msg, self._result(gpus, start, name, health=self.health_report))
            kept = never_signalled(gpus, self.scope, "; it is never signalled")
            holders = self._reclaimable(verdicts) if self.reclaim else []
            if kept and (self.check_mode or not holders):
                # the holders in scope are reclaimed first; what is left is a protected process or another
                # live instance's engine, which no wait frees: fail, naming it
                raise CheckFailed("; ".join(kept), self._result(gpus, start, name, changed=bool(self.killed)))
            if all(g["clean"] for g in gpus):
                if self.health is not None and not self.check_mode:
                    _health.Record(self.health.get("state_dir")).mark_clean(gpus)
                return self._result(gpus, start, name, changed=bool(self.killed), health=self.health_report)
            if self.check_mode and holders:
                would = sorted(set(p for t in self.scope.targets(holders) for p in t.pids))
                return self._result(gpus, start, name, changed=True, would_kill=would)
            now = self.clock()
            if holders:
                self._signal_new(holders, now)
            self._escalate(now)
            if now >= deadline:
                msg = "GPUs not clean after %.1fs: %s" % (self.timeout, self._dirty_report(gpus))
                raise CheckFailed(msg, self._result(gpus, start, name, changed=bool(self.killed)))
            # a fixed cadence: the time the read took counts against the interval
            self.sleep(max(0.0, min(self.poll_interval - (now - began), deadline - now)))


def unhealthy_line(gpu):
    """'GPU 3 (GPU-..., PCI 00000000:3B:00.0) is unhealthy: xid: Xid 79 ...': the index, the bus id and each signal."""
    return "GPU %d (%s, PCI %s) is unhealthy: %s" % (
        gpu["index"], gpu["uuid"], gpu.get("pci_bus_id") or "unknown", ", ".join(gpu["health"]["problems"]))


# The parameters of a check, as gpu_idle_check takes them and as inference_server's gpu_check takes them.
ARGUMENT_SPEC = dict(
    gpus=dict(type="list", elements="int"),
    backend=dict(type="str", default="auto", choices=["auto", "nvml", "nvidia_smi"]),
    max_used_mib=dict(type="int", default=0),
    timeout=dict(type="float", default=60.0),
    poll_interval=dict(type="float", default=0.1),
    reclaim=dict(type="bool", default=False),
    kill_grace=dict(type="float", default=10.0),
    reclaim_match=dict(type="list", elements="str"),
    reclaim_all=dict(type="bool", default=False),
    protected=dict(type="list", elements="str"),  # unset: _procs.DEFAULT_PROTECTED, the one list of them
    require_gpus=dict(type="bool", default=True),
    health=dict(type="dict", options=_health.ARGUMENT_SPEC),
)


def validate(p):
    """Messages for bad check parameters (nothing is touched when there is any)."""
    errors = []
    for key in ("timeout", "poll_interval", "kill_grace"):
        if p[key] <= 0:
            errors.append("%s must be a positive number of seconds, got %s" % (key, p[key]))
    if p["max_used_mib"] < 0:
        errors.append("max_used_mib must be 0 or more, got %d" % p["max_used_mib"])
    if p["reclaim"] and p["kill_grace"] >= p["timeout"]:
        errors.append("kill_grace (%s) must be less than timeout (%s), or a holder that ignores "
                      "SIGTERM is never killed" % (p["kill_grace"], p["timeout"]))
    if p["gpus"] is not None and any(i < 0 for i in p["gpus"]):
        errors.append("gpus: indices are 0 or more, got %s" % p["gpus"])
    errors.extend(_health.validate(p.get("health")))
    if not errors:
        try:
            scope(p)
        except ValueError as exc:
            errors.append(str(exc))
    return errors


def never_signalled(gpus, scope_, protected_tail=", which is never signalled"):
    """Messages for the holders no check ever signals: each protected process, and each process of another
    live instance with every GPU it holds."""
    found, instances = [], {}
    for gpu in gpus:
        for proc in gpu["processes"]:
            if proc["verdict"] == "protected":
                found.append("GPU %d is held by protected process %s (pid %d)%s"
                             % (gpu["index"], proc.get("name") or "?", proc["pid"], protected_tail))
            elif proc["verdict"] == "instance":
                instances.setdefault(proc["pid"], []).append(gpu["index"])
    for pid, indices in sorted(instances.items(), key=lambda item: item[1]):
        found.append(scope_.ownership(pid).holds(indices, pid, scope_.owners.own))
    return found


def scope(p, owner=None):
    """The reclaim scope of check parameters p, as instance owner (NAME@HASH; None: a check of no
    instance) sees the host: another live instance's processes are never in it."""
    return _procs.Scope(patterns=p["reclaim_match"] if p["reclaim_match"] is not None else _procs.DEFAULT_RECLAIM_MATCH,
                        reclaim_all=p["reclaim_all"],
                        protected=p["protected"] if p.get("protected") is not None else _procs.DEFAULT_PROTECTED,
                        owners=_instances.Instances(owner))


def _holders(gpus, without=()):
    return dict(("GPU %d" % g["index"], sorted(p["pid"] for p in g["processes"] if p["pid"] not in without))
                for g in gpus)


def import_pynvml():
    import pynvml  # pylint: disable=import-error
    return pynvml


class _Backend(object):
    """The GPU backend and the GPUs to check, opened as p says; .none holds a no-GPU result instead."""

    def __init__(self, p, run, find_smi, import_pynvml):
        self.backend, self.indices, self.none = None, [], None
        try:
            self.backend = _gpu.open_backend(p["backend"], import_pynvml, run, find_smi)
        except _gpu.NoDriverError as exc:
            self.none = self._no_gpus(p, exc)
            return
        except _gpu.GpuError as exc:
            raise CheckFailed(str(exc), {})
        try:
            present = self.backend.indices()
        except _gpu.NoDriverError as exc:
            present, why = [], exc
        else:
            why = "the NVIDIA driver reports no GPUs"
        if not present:
            self.close()
            self.none = self._no_gpus(p, why)
            return
        self.indices = present if p["gpus"] is None else sorted(set(p["gpus"]))
        unknown = sorted(set(self.indices) - set(present))
        if unknown:
            self.close()
            raise CheckFailed("gpus: no GPU with index %s on this host; it has %s"
                              % (", ".join(map(str, unknown)), ", ".join(map(str, present)) or "none"), {})

    @staticmethod
    def _no_gpus(p, why):
        if p["require_gpus"]:
            raise CheckFailed("no NVIDIA GPU can be seen: %s (set require_gpus=false on hosts without GPUs)" % why,
                              dict(gpus=[], clean=False, killed=[], backend="none"))
        return dict(changed=False, clean=True, gpus=[], killed=[], waited_s=0.0, backend="none",
                    msg="no NVIDIA GPU on this host: %s" % why)

    def close(self):
        if self.backend is not None:
            self.backend.close()
            self.backend = None


def verify(p, run, find_smi, import_pynvml=import_pynvml, check_mode=False, owner=None, phase="after"):
    """One whole check with validated parameters p: open the backend, choose the GPUs, poll and
    reclaim. Returns the result (with changed, msg and diff); raises CheckFailed when not clean.
    run(argv) -> (rc, out, err) and find_smi() -> path are the module's; owner: the instance the check
    is made for (NAME@HASH), or None."""
    opened = _Backend(p, run, find_smi, import_pynvml)
    if opened.none is not None:
        return opened.none
    try:
        check = IdleCheck(opened.backend, opened.indices, max_used_mib=p["max_used_mib"], timeout=p["timeout"],
                          poll_interval=p["poll_interval"], reclaim=p["reclaim"], kill_grace=p["kill_grace"],
                          scope=scope(p, owner), check_mode=check_mode, health=_health.settings(p.get("health")),
                          run=run, phase=phase)
        try:
            result = check.run()
        except _gpu.GpuError as exc:
            raise CheckFailed(str(exc), {})
    finally:
        opened.close()

    if result.get("changed"):
        after = _holders(result["gpus"], without=result.get("would_kill", ()))
        result["diff"] = {"before": {"holders": check.first_holders}, "after": {"holders": after}}
    result["msg"] = "%d GPU(s) clean%s" % (len(result["gpus"]), ", killed %s" % result["killed"] if result["killed"] else "")
    if check_mode and result.get("would_kill"):
        result["msg"] = "would signal %s to free the GPUs" % result["would_kill"]
    return result


def blockers(p, run, find_smi, spared=(), import_pynvml=import_pynvml, owner=None, write=True):
    """Before a stop: what would keep the GPUs from being clean once the processes in spared (the old
    server's) are gone. One read, signals nothing. Returns (blockers, survey): blockers are messages
    (an unhealthy GPU, a protected holder, another live instance's engine, a holder outside the reclaim
    scope, no GPU at all, an unknown index); survey has the shape of a check's result plus would_kill
    (what the check would reclaim), unknown_holders (holders this PID namespace cannot see: maybe ours, from outside a
    container) and health (_health.assess: warnings, notes, the DCGM level 1 run). write=False records no ack."""
    try:
        opened = _Backend(p, run, find_smi, import_pynvml)
    except CheckFailed as exc:
        return [exc.msg], dict(exc.result, msg=exc.msg)
    if opened.none is not None:
        return [], opened.none
    try:
        check = IdleCheck(opened.backend, opened.indices, max_used_mib=p["max_used_mib"], reclaim=p["reclaim"],
                          scope=scope(p, owner), check_mode=True)
        try:
            gpus = opened.backend.snapshot(opened.indices, health=True)
        except _gpu.GpuError as exc:
            return [str(exc)], {"gpus": [], "clean": False, "backend": opened.backend.name}
        report = _health.assess(gpus, _health.settings(p.get("health")), run, phase="before", write=write)
        check._classify(gpus)
    finally:
        opened.close()
    found, would_kill, unknown = list(report["errors"]), set(), set()
    for gpu in gpus:
        if gpu["health"]["problems"]:
            found.append(unhealthy_line(gpu))
        for proc in gpu["processes"]:
            if proc["pid"] in spared or proc["verdict"] == "self":
                continue
            if proc["verdict"] == "invisible":
                unknown.add(proc["pid"])
            elif proc["verdict"] == "reclaim" and p["reclaim"]:
                would_kill.add(proc["pid"])
            elif proc["verdict"] in ("protected", "instance"):
                continue  # named below, once per process
            else:
                used = "" if proc.get("used_mib") is None else ", %d MiB" % proc["used_mib"]
                found.append("GPU %d is held by pid %d %s%s, which the stop does not end and gpu_check does not "
                             "reclaim (%s)" % (gpu["index"], proc["pid"], proc.get("name") or "?", used,
                                               "not matched by reclaim_match" if p["reclaim"] else "reclaim=false"))
    left = [dict(gpu, processes=[proc for proc in gpu["processes"] if proc["pid"] not in spared]) for gpu in gpus]
    found.extend(never_signalled(left, check.scope))
    survey = {"gpus": gpus, "clean": not found and all(g["clean"] for g in gpus), "backend": check.backend.name,
              "would_kill": sorted(would_kill), "unknown_holders": sorted(unknown), "killed": [], "health": report}
    return found, survey
