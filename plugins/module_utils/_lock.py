# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One change at a time per instance: an flock on <state_dir>/<name>.lock. Standard library only.

The kernel releases an flock when the last descriptor of its open file goes away, so a holder that
dies (kill -9, OOM, a closed laptop taking the module with it) never leaves the instance locked. The
holder writes who it is into the file (pid, what it does, since when) so that a run that gives up
waiting can say who holds the lock. A switch hands the lock to its detached transaction process by
inheritance: the same open file, so the lock is released only when that process ends.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time

from ansible_collections.inferops.serving.plugins.module_utils import _procs


class Busy(RuntimeError):
    """The lock stayed taken for the whole timeout; holder is what the holder wrote (may be {})."""

    def __init__(self, msg, holder):
        RuntimeError.__init__(self, msg)
        self.holder = holder


def path_of(state_dir, name):
    return os.path.join(state_dir, "%s.lock" % name)


def describe(holder):
    """'pid 4242 (switch to nextn, since 2026-12-04T15:02:11+0000, 73s ago)' from a holder record."""
    if not holder:
        return "an unknown process"
    since = holder.get("since")
    when = ""
    if since:
        when = ", since %s, %ds ago" % (time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(since)),
                                        max(0, int(time.time() - since)))
    return "pid %s (%s%s)" % (holder.get("pid", "?"), holder.get("what", "?"), when)


def held(state_dir, name):
    """True while some process holds the instance's lock exclusively (a change of it is under way). A
    shared try, released at once: it never holds up the holder, which polls."""
    try:
        fd = os.open(path_of(state_dir, name), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)
    finally:
        os.close(fd)  # closing the descriptor releases a lock taken through it
    return False


class InstanceLock(object):
    """acquire(what, timeout, on_wait) -> self; release(); holder() reads the current holder's record."""

    def __init__(self, state_dir, name):
        self.path = path_of(state_dir, name)
        self.fd = None
        self.shared = False

    def holder(self):
        try:
            with open(self.path) as handle:
                data = json.loads(handle.read() or "{}")
        except (IOError, OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _try(self):
        try:
            fcntl.flock(self.fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return False
            raise

    def acquire(self, what, timeout, on_wait=None, create=True, sleep=time.sleep, clock=time.monotonic):
        """Wait up to timeout seconds. on_wait(holder) is called on every poll while the lock is taken; a
        true return stops the wait (the caller joins what the holder does) and acquire returns None.
        create=False (check mode) creates nothing: with no lock file nobody holds the lock; with one, a
        shared lock waits for the holder like an exclusive one, and writes nothing."""
        if not create:
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return self
            self.shared = True
        else:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = clock() + timeout
        while not self._try():
            holder = self.holder()
            if on_wait is not None and on_wait(holder):
                self.close()
                return None
            if clock() >= deadline:
                self.close()
                raise Busy("another run is changing this instance: %s; waited lock_timeout=%ss"
                           % (self.who_holds(holder), timeout), holder)
            sleep(0.2)
        if not self.shared:
            self.note(what)
        return self

    def who_holds(self, holder):
        """'pid 42 (switch to nextn, since ..., 73s ago) holds PATH', or, when the process the lock file names
        does not have it open any more, who does: the processes with the file open (matched by inode), since
        /proc/locks names the process that called flock(), which a switch's hand-off leaves dead."""
        real = _procs.openers(self.path, skip={os.getpid()})
        pids = set(p.pid for p in real)
        named = holder.get("pid") if holder else None
        if named in pids or not real:
            return "%s holds %s" % (describe(holder), self.path)
        return "%s is held by %s; the lock file names %s, %s" % (
            self.path, ", ".join("pid %d (%s)" % (p.pid, p.cmdline[:120]) for p in real), describe(holder),
            "which has it open no more" if named and _procs.alive(named) else "which is gone")

    def note(self, what, pid=None):
        """Write who holds the lock (the holder calls it again after handing the lock to another process)."""
        record = {"pid": pid or os.getpid(), "what": what, "since": time.time()}
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, (json.dumps(record, sort_keys=True) + "\n").encode("utf-8"), 0)

    def close(self):
        """Close this process's descriptor: the lock is released unless a child still has the file open."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def release(self):
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                self.close()
