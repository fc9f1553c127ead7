# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which instance a process belongs to, and whether that instance is live. Standard library only.

Two servers on one host must survive each other: a process that carries another instance's marker
(_marker) belongs to that instance, and while that instance is live nothing of this one (a stop, a
reclaim, a marker sweep, a preflight) may signal it. An instance is live while its state file names a
process that still runs (the same pid and start time), or while its lock is held (a change of it is under
way), or when that cannot be known (its state file is unreadable, or its marker does not say where its
state is). A process whose marker names an instance with none of these is a leftover: what a dead
instance left behind, which a reclaim may end like an unmarked engine.
"""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.module_utils import _lock, _marker, _procs, _supervisor

OWN, INSTANCE, LEFTOVER = "own", "instance", "leftover"


class Ownership(object):
    """Whose a process is: kind OWN (this instance's), INSTANCE (another live one's) or LEFTOVER."""

    __slots__ = ("kind", "marker", "pid", "variant", "why")

    def __init__(self, kind, marker, pid=None, variant=None, why=None):
        self.kind = kind
        self.marker = marker
        self.pid = pid  # the other instance's recorded engine pid, when it serves
        self.variant = variant
        self.why = why

    @property
    def live(self):
        return self.kind == INSTANCE

    @property
    def name(self):
        return self.marker.name

    def describe(self):
        if self.kind == OWN:
            return "this instance's"
        if self.kind == LEFTOVER:
            return "a leftover of instance %s, %s" % (self.name, self.why)
        return "instance %s, %s" % (self.name, self.why)

    def holds(self, gpus, pid, own=None):
        """The blocker: 'GPU 4 is held by instance b (pid N, variant X): give each instance its own GPUs
        ..., or stop b'. own: this instance's identity (its state directory is named only when b's differs)."""
        where = ""
        if self.marker.state_dir and (own is None or own.rpartition("@")[2] != self.marker.digest):
            where = " of %s" % self.marker.state_dir
        facts = ["pid %d" % pid]
        if self.variant:
            facts.append("variant %s" % self.variant)
        if self.pid is None or self.pid != pid:
            facts.append(self.why)
        held = "GPU %d is" % gpus[0] if len(gpus) == 1 else "GPUs %s are" % ", ".join(str(g) for g in gpus)
        return ("%s held by instance %s%s (%s): give each instance its own GPUs (gpu_check.gpus and "
                "CUDA_VISIBLE_DEVICES), or stop %s" % (held, self.name, where, ", ".join(facts), self.name))


class Instances(object):
    """ownership(pid) for the processes of one host, as seen by instance own (NAME@HASH, or None for a
    check that belongs to no instance: then every live instance is another). Each other instance's
    liveness is read once per Instances object."""

    def __init__(self, own=None, root=_procs.PROC_ROOT):
        self.own = own
        self.root = root
        self._seen = {}
        self._pids = {}

    def forget(self):
        """Read every process's marker and every other instance's liveness afresh (a check that polls calls
        it before each read)."""
        self._seen = {}
        self._pids = {}

    def ownership(self, pid):
        """Whose pid is (None: nobody's), as read once until forget(): a process that ends meanwhile keeps
        the answer it had."""
        if pid not in self._pids:
            self._pids[pid] = self._ownership(pid)
        return self._pids[pid]

    def _ownership(self, pid):
        marker = _marker.of_process(pid, self.root)
        if marker is None:
            return None
        if self.own is not None and marker.identity == self.own:
            return Ownership(OWN, marker)
        key = (marker.identity, marker.state_dir)
        if key not in self._seen:
            self._seen[key] = self._judge(marker)
        return self._seen[key]

    def _judge(self, marker):
        if marker.state_dir is None:
            return Ownership(INSTANCE, marker, why="its marker does not say where its state is, so it counts as live")
        store = _supervisor.StateStore(marker.name, marker.state_dir)
        record = store.load()
        if record and record.get("corrupt"):
            return Ownership(INSTANCE, marker, why="its state file %s is unreadable, so it counts as live" % store.path)
        if record and record.get("pid") and _procs.alive(record["pid"], self.root, record.get("starttime")):
            what = "loading" if record.get("loading") else "serving"
            return Ownership(INSTANCE, marker, pid=record["pid"], variant=record.get("variant"),
                             why="%s as pid %s" % (what, record["pid"]))
        if _lock.held(marker.state_dir, marker.name):
            holder = _lock.InstanceLock(marker.state_dir, marker.name).holder()
            return Ownership(INSTANCE, marker, why="being changed by %s" % _lock.describe(holder))
        why = "whose recorded engine pid %s is gone" % record["pid"] if record and record.get("pid") else \
            "which has no state file in %s" % marker.state_dir
        return Ownership(LEFTOVER, marker, why=why)
