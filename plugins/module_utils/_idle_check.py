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

from ansible_collections.inferops.serving.plugins.module_utils import _gpu, _procs


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
}


def _holder_line(proc):
    used = "" if proc.get("used_mib") is None else ", %d MiB" % proc["used_mib"]
    verdict = _VERDICTS.get(proc.get("verdict"), "?")
    return "pid %d %s%s [%s]" % (proc["pid"], proc.get("name") or "?", used, verdict)


class IdleCheck(object):
    """One run of gpu_idle_check. clock/sleep are injectable so the timeout logic is testable."""

    def __init__(self, backend, indices, max_used_mib=0, timeout=60.0, poll_interval=0.1,
                 reclaim=False, kill_grace=10.0, scope=None, check_mode=False,
                 clock=time.monotonic, sleep=time.sleep, proc_root=_procs.PROC_ROOT):
        self.backend = backend
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
        for gpu in gpus:
            for proc in gpu["processes"]:
                if proc["pid"] not in verdicts:
                    info = _procs.read_proc(proc["pid"], self.proc_root)
                    verdicts[proc["pid"]] = (info,) + self.scope.classify(info)
                info, verdict, reason = verdicts[proc["pid"]]
                proc["verdict"] = verdict
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
                msg = "; ".join("GPU %d (%s) is unhealthy: %s" % (g["index"], g["uuid"], ", ".join(g["health"]["problems"]))
                                for g in unhealthy)
                raise CheckFailed(msg, self._result(gpus, start, name))
            protected = [(g, p) for g in gpus for p in g["processes"] if p["verdict"] == "protected"]
            holders = self._reclaimable(verdicts) if self.reclaim else []
            if protected and (self.check_mode or not holders):
                # the holders in scope are reclaimed first; what is left is a protected process: fail
                msg = "; ".join("GPU %d is held by protected process %s (pid %d); it is never signalled"
                                % (g["index"], p["name"], p["pid"]) for g, p in protected)
                raise CheckFailed(msg, self._result(gpus, start, name, changed=bool(self.killed)))
            if all(g["clean"] for g in gpus):
                return self._result(gpus, start, name, changed=bool(self.killed))
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
