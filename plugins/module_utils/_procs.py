# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Process inspection and signalling, from /proc, standard library only.

The one place that decides which processes may be signalled: the protected daemons, the module's
own process and its ancestors, and whole process groups only when every member is in scope.
"""

from __future__ import annotations

import os
import re
import signal

PROC_ROOT = "/proc"

# Daemons that legitimately hold /dev/nvidia* and must never be signalled (killing DCGM has frozen GPUs).
DEFAULT_PROTECTED = (
    "nvidia-persistenced",
    "nv-hostengine",
    "dcgm-exporter",
    "nvidia-fabricmanager",
)

# Command-line patterns of the inference engines whose leftovers a reclaim may terminate.
DEFAULT_RECLAIM_MATCH = (
    r"sglang",
    r"vllm",
    r"VLLM::",
    r"trtllm",
    r"tensorrt_llm",
    r"transformers\s+serve",
    r"text-generation-launcher",
    r"text-generation-server",
)

# /proc/<pid>/comm holds at most 15 characters.
COMM_LEN = 15


class ProcInfo(object):
    """A snapshot of one process, read from /proc."""

    __slots__ = ("pid", "ppid", "pgid", "sid", "state", "starttime", "comm", "argv", "exe")

    def __init__(self, pid, ppid, pgid, sid, state, starttime, comm, argv, exe):
        self.pid = pid
        self.ppid = ppid
        self.pgid = pgid
        self.sid = sid
        self.state = state
        self.starttime = starttime
        self.comm = comm
        self.argv = argv
        self.exe = exe

    @property
    def cmdline(self):
        return " ".join(self.argv) if self.argv else "[%s]" % self.comm

    @property
    def names(self):
        """Every name the process goes by: comm, argv[0]'s basename, the executable's basename."""
        found = set()
        if self.comm:
            found.add(self.comm)
        if self.argv:
            found.add(os.path.basename(self.argv[0]))
        if self.exe:
            found.add(os.path.basename(self.exe))
        return found

    @property
    def name(self):
        if self.argv:
            return os.path.basename(self.argv[0])
        return self.comm


def _read(path, mode="r"):
    with open(path, mode) as handle:
        return handle.read()


def read_proc(pid, root=PROC_ROOT):
    """Return a ProcInfo for pid, or None when it does not exist (or is not visible here)."""
    base = os.path.join(root, str(pid))
    try:
        stat = _read(os.path.join(base, "stat"))
    except (IOError, OSError):
        return None
    # comm is in parentheses and may itself contain spaces or parentheses
    lpar, rpar = stat.find("("), stat.rfind(")")
    comm = stat[lpar + 1:rpar]
    fields = stat[rpar + 2:].split()
    try:
        raw = _read(os.path.join(base, "cmdline"), "rb")
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
    except (IOError, OSError):
        argv = []
    try:
        exe = os.readlink(os.path.join(base, "exe"))
    except (IOError, OSError):
        exe = ""
    return ProcInfo(pid=int(pid), state=fields[0], ppid=int(fields[1]), pgid=int(fields[2]),
                    sid=int(fields[3]), starttime=int(fields[19]), comm=comm, argv=argv, exe=exe)


def alive(pid, root=PROC_ROOT, starttime=None):
    """True while pid exists and is not a zombie (and, if given, is still the same process)."""
    info = read_proc(pid, root)
    if info is None or info.state in ("Z", "X"):
        return False
    return starttime is None or info.starttime == starttime


def started_at(info, root=PROC_ROOT):
    """When a process started, in seconds since the epoch (boot time plus its start time in clock ticks), or
    None when /proc does not say."""
    try:
        for line in _read(os.path.join(root, "stat")).splitlines():
            if line.startswith("btime "):
                return round(int(line.split()[1]) + info.starttime / float(os.sysconf("SC_CLK_TCK")), 3)
    except (IOError, OSError, ValueError):
        pass
    return None


def list_procs(root=PROC_ROOT):
    procs = []
    for entry in os.listdir(root):
        if entry.isdigit():
            info = read_proc(int(entry), root)
            if info is not None:
                procs.append(info)
    return procs


def ancestors(pid=None, root=PROC_ROOT):
    """pid (default: this process) and every ancestor up to PID 1."""
    pid = os.getpid() if pid is None else pid
    chain = set()
    while pid and pid not in chain:
        chain.add(pid)
        info = read_proc(pid, root)
        if info is None:
            break
        pid = info.ppid
    return chain


def _listening_inodes(port, root=PROC_ROOT):
    """Socket inodes listening on TCP port (any address, IPv4 and IPv6), from /proc/net/tcp{,6}."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = _read(os.path.join(root, "net", table)).splitlines()[1:]
        except (IOError, OSError):
            continue
        for line in lines:
            fields = line.split()
            # sl local_address rem_address st ... inode: st 0A is LISTEN
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def _with_fd(matches, root=PROC_ROOT, skip=()):
    """The processes (those this process may inspect), except skip, with a descriptor whose /proc path
    matches(path) accepts."""
    found = []
    for entry in os.listdir(root):
        if not entry.isdigit() or int(entry) in skip:
            continue
        fd_dir = os.path.join(root, entry, "fd")
        try:
            fds = os.listdir(fd_dir)
        except (IOError, OSError):
            continue
        if any(matches(os.path.join(fd_dir, fd)) for fd in fds):
            info = read_proc(int(entry), root)
            if info is not None:
                found.append(info)
    return found


def _link_in(wanted):
    def matches(path):
        try:
            return os.readlink(path) in wanted
        except (IOError, OSError):
            return False
    return matches


def _same_file(wanted):
    def matches(path):
        try:
            st = os.stat(path)
        except (IOError, OSError):
            return False
        return (st.st_dev, st.st_ino) == (wanted.st_dev, wanted.st_ino)
    return matches


def listeners(port, root=PROC_ROOT):
    """The processes with a socket listening on TCP port (those this process may inspect)."""
    inodes = _listening_inodes(port, root)
    if not inodes:
        return []
    return _with_fd(_link_in(set("socket:[%s]" % inode for inode in inodes)), root)


def openers(path, root=PROC_ROOT, skip=()):
    """The live processes that have path open (a descriptor on the same device and inode), except those in
    skip: who holds an flock, which /proc/locks cannot say once the locking process handed its descriptor on."""
    try:
        wanted = os.stat(path)
    except OSError:
        return []
    return [info for info in _with_fd(_same_file(wanted), root, skip) if info.state not in ("Z", "X")]


def environ_get(pid, key, root=PROC_ROOT):
    """The value of key in the process's initial environment, or None (absent, or not readable here)."""
    try:
        raw = _read(os.path.join(root, str(pid), "environ"), "rb")
    except (IOError, OSError):
        return None
    prefix = ("%s=" % key).encode("utf-8")
    for entry in raw.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode("utf-8", "replace")
    return None


def environ_has(pid, key, value, root=PROC_ROOT):
    """True when the process's initial environment has key=value."""
    return environ_get(pid, key, root) == value


def cwd_of(pid, root=PROC_ROOT):
    """The process's working directory, or None when it cannot be read."""
    try:
        return os.readlink(os.path.join(root, str(pid), "cwd"))
    except (IOError, OSError):
        return None


def is_protected(info, protected):
    """A process is protected when any of its names is on the list (comm is truncated to 15)."""
    names = info.names
    for wanted in protected:
        if wanted in names or (len(wanted) > COMM_LEN and info.comm == wanted[:COMM_LEN]):
            return True
    return False


def compile_patterns(patterns):
    """Compile reclaim regexes; raise ValueError naming the bad one."""
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError("reclaim_match: %r is not a valid regular expression: %s" % (pattern, exc))
    return compiled


def matches(info, compiled):
    text = info.cmdline
    return any(p.search(text) for p in compiled)


class Target(object):
    """What one signal goes to: a whole process group, or a single process."""

    __slots__ = ("pgid", "pid", "members")

    def __init__(self, pid=None, pgid=None, members=()):
        self.pid = pid
        self.pgid = pgid
        self.members = dict(members)  # pid -> starttime, to avoid signalling a reused PID

    @property
    def pids(self):
        return sorted(self.members)

    def describe(self):
        if self.pgid is not None:
            return "process group %d (pids %s)" % (self.pgid, ", ".join(str(p) for p in self.pids))
        return "pid %d" % self.pid


class Scope(object):
    """Decides which GPU holders may be reclaimed, and how to signal them.

    owners: None, or an object whose ownership(pid) says which instance a process belongs to by its
    marker (_instances.Instances): None for an unmarked process, else an Ownership whose `live` is true
    for another instance that serves or is being changed. Such a process is never in scope, whatever
    reclaim_match or reclaim_all say; this instance's own processes and the leftovers of instances
    without a live record are judged by reclaim_match like unmarked ones."""

    def __init__(self, patterns=DEFAULT_RECLAIM_MATCH, reclaim_all=False,
                 protected=DEFAULT_PROTECTED, root=PROC_ROOT, self_pid=None, owners=None):
        self.compiled = compile_patterns(patterns)
        self.reclaim_all = reclaim_all
        self.protected = tuple(protected)
        self.root = root
        self.untouchable = ancestors(self_pid, root)
        self.owners = owners

    def ownership(self, pid):
        return self.owners.ownership(pid) if self.owners is not None else None

    def refresh(self):
        """Forget what was read of other instances (their liveness may have changed since)."""
        if self.owners is not None:
            self.owners.forget()

    def _foreign(self, info):
        owner = self.ownership(info.pid)
        return owner if owner is not None and owner.live else None

    def classify(self, info):
        """Return (verdict, reason): 'invisible', 'protected', 'self', 'instance' (another live instance's),
        'reclaim' or 'out_of_scope'."""
        if info is None:
            return "invisible", "not visible in this PID namespace (is the check running inside a container?)"
        if is_protected(info, self.protected):
            return "protected", "protected process"
        if info.pid in self.untouchable:
            return "self", "this check or one of its ancestors"
        owner = self.ownership(info.pid)
        if owner is not None and owner.live:
            return "instance", owner.describe()
        whose = "" if owner is None else " (%s)" % owner.describe()
        if matches(info, self.compiled):
            return "reclaim", "matches reclaim_match" + whose
        if self.reclaim_all:
            return "reclaim", "reclaim_all" + whose
        return "out_of_scope", "not matched by reclaim_match" + whose

    def _member_in_scope(self, info, holder_pids):
        if info.pid in self.untouchable or is_protected(info, self.protected) or self._foreign(info):
            return False
        if matches(info, self.compiled):
            return True
        # with reclaim_all, only processes that themselves hold a GPU widen a group signal
        return self.reclaim_all and info.pid in holder_pids

    def targets(self, holders, procs=None):
        """Group reclaimable holders (ProcInfo) into Targets.

        A holder's whole process group is signalled only when every member of the group is itself in
        scope (this never includes our own group: our own process is never in scope); otherwise only
        the holder itself.
        """
        procs = list_procs(self.root) if procs is None else procs
        by_group = {}
        for info in procs:
            by_group.setdefault(info.pgid, []).append(info)
        holder_pids = set(h.pid for h in holders)
        done, result = set(), []
        for holder in sorted(holders, key=lambda h: h.pid):
            if holder.pid in done:
                continue
            members = [m for m in by_group.get(holder.pgid, []) if m.state not in ("Z", "X")]
            if members and all(self._member_in_scope(m, holder_pids) for m in members):
                target = Target(pgid=holder.pgid, members=((m.pid, m.starttime) for m in members))
            else:
                target = Target(pid=holder.pid, members=[(holder.pid, holder.starttime)])
            done.update(target.members)
            result.append(target)
        return result


def send(target, sig, root=PROC_ROOT):
    """Signal a target if its processes are still the ones planned; return the pids signalled."""
    living = [pid for pid, start in target.members.items() if alive(pid, root, start)]
    if not living:
        return []
    try:
        if target.pgid is not None:
            os.killpg(target.pgid, sig)
        else:
            os.kill(target.pid, sig)
    except ProcessLookupError:
        return []
    return living


def target_alive(target, root=PROC_ROOT):
    return any(alive(pid, root, start) for pid, start in target.members.items())


SIGTERM = signal.SIGTERM
SIGKILL = signal.SIGKILL
