# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The end of a test: every process its playbook runs left behind, killed, and nothing else.

The test's ansible-playbook runs get SCOPE_KEY=<token> in their environment (tests/conftest.py ansible_env),
and everything they start inherits it: the engines and their watchdogs (the process supervisor passes the
module's environment on), the detached switch, async jobs, benchmark sweeps. At the test's end, reap(token)
kills exactly the processes whose environment holds that token, whatever the state files say: a test that
lost or corrupted a state file on purpose leaves no engine behind, and the cleanup costs no playbook run (a
stop.yml of four replicas took 7 s of each test).

A process that started another test's playbook carries another token; the test runner itself carries none.
"""

from __future__ import annotations

import os
import signal
import time

SCOPE_KEY = "INFEROPS_TEST_SCOPE"


def _scoped(token):
    """The pids whose environment holds SCOPE_KEY=token (this process never)."""
    wanted = ("%s=%s" % (SCOPE_KEY, token)).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as handle:
                if wanted in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:  # gone meanwhile, or a kernel thread
            continue
    return found


def _gone(pid):
    """Exited: no such process, or a zombie nobody has reaped yet (it holds no port and no GPU)."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def reap(token, timeout=10.0):
    """SIGKILL every process of this token's scope, until a scan finds none; returns the pids killed."""
    killed = []
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in _scoped(token) if not _gone(pid)]
        if not alive:
            return killed
        if time.monotonic() > deadline:
            raise RuntimeError("processes of test scope %s still alive after %.0f s: %s" % (token, timeout, alive))
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
            killed.append(pid)
        # a process being killed may have just started another one: wait for these, then scan again
        while any(not _gone(pid) for pid in alive) and time.monotonic() < deadline:
            time.sleep(0.02)
