# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the kernel log says of a process that ended: the OOM killer's victims. Standard library only; reads,
never changes anything.

The line the OOM killer writes when it kills a process, from Linux mm/oom_kill.c __oom_kill_process (5.x and
6.x; "Memory cgroup out of memory" when a cgroup's limit, not the host, ran out):

    Out of memory: Killed process 4242 (python3) total-vm:14895312kB, anon-rss:14500000kB, file-rss:1024kB,
    shmem-rss:0kB, UID:0 pgtables:28000kB oom_score_adj:0

`journalctl -k -o short-monotonic` and `dmesg` put the seconds since boot first ("[ 1234.567890] ..."), which
tells a victim that had the same pid before this engine started from this engine. Kernels before 5.0 wrote
the kill on a line of its own, "Killed process 4242 (python3) total-vm:...kB, anon-rss:...kB, ...", read too. The oom_reaper's later
line ("oom_reaper: reaped process 4242 (python3), now anon-rss:0kB, ...") is not a kill and is not read.
"""

from __future__ import annotations

import os
import re

# each command that prints the kernel log with the seconds since boot first; the first one that runs is read
READERS = (
    ["journalctl", "-k", "-b", "-o", "short-monotonic", "--no-pager", "-q"],
    ["dmesg"],
)

_KILLED = re.compile(
    r"(?:^\[\s*(?P<at>\d+\.\d+)\].*?)?"
    r"(?:(?P<scope>Memory cgroup out of memory|Out of memory)[^:]*: )?Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)"
    r"(?:.*?anon-rss:\s*(?P<anon>\d+)kB)?")


def oom_kills(text):
    """[{"pid", "comm", "anon_rss_kib" (None when the line has none), "at" (seconds since boot, or None),
    "cgroup" (True for a cgroup's limit)}] for each OOM kill in the kernel log text, in order."""
    kills = []
    for line in (text or "").splitlines():
        found = _KILLED.search(line)
        if not found:
            continue
        kills.append({"pid": int(found.group("pid")), "comm": found.group("comm"),
                      "anon_rss_kib": int(found.group("anon")) if found.group("anon") else None,
                      "at": float(found.group("at")) if found.group("at") else None,
                      "cgroup": (found.group("scope") or "").startswith("Memory cgroup")})
    return kills


def size_text(kib):
    """'13.9 GB' (decimal units, from the kernel's kB, which are KiB)."""
    size = kib * 1024.0
    for unit in ("GB", "MB"):
        scale = 1e9 if unit == "GB" else 1e6
        if size >= scale:
            return "%.1f %s" % (size / scale, unit)
    return "%d kB" % kib


def describe(kill):
    """"killed by the kernel's OOM killer (anon-rss 13.9 GB)"."""
    what = "killed by the kernel's OOM killer%s" % (" (its memory cgroup's limit)" if kill.get("cgroup") else "")
    if kill.get("anon_rss_kib") is not None:
        what += " (anon-rss %s)" % size_text(kill["anon_rss_kib"])
    return what


def victim(text, pid, started_s=None):
    """The last OOM kill of pid in text, not before started_s (seconds since boot the process started), or None."""
    found = None
    for kill in oom_kills(text):
        if kill["pid"] != pid:
            continue
        if started_s is not None and kill["at"] is not None and kill["at"] < started_s:
            continue  # an earlier process with the same pid
        found = kill
    return found


def started_s(starttime):
    """A /proc starttime (clock ticks after boot) in seconds, or None."""
    if starttime is None:
        return None
    try:
        return starttime / float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return None


def oom_of(pid, run, starttime=None, readers=READERS):
    """The OOM kill of pid (see victim) as the host's kernel log tells it, or None: no such line, or no reader
    could run (no journal, dmesg refused to an unprivileged user). run: AnsibleModule.run_command's shape."""
    for argv in readers:
        try:
            rc, out, dummy = run(argv, environ_update={"LANG": "C", "LC_ALL": "C"})
        except OSError:
            continue
        if rc != 0 or not (out or "").strip():
            continue
        kill = victim(out, pid, started_s(starttime))
        if kill is not None:
            return kill
    return None
