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


def _procs():
    """The collection's /proc reader (alive, environ_has), imported at first use: imported while conftest loads,
    it broke the collection loader ("collection metadata was not loaded for collection inferops.serving")."""
    from ansible_collections.inferops.serving.plugins.module_utils import _procs as procs  # pylint: disable=import-outside-toplevel
    return procs


def _scoped(token):
    """The live pids whose environment holds SCOPE_KEY=token (this process never); a zombie holds no port or GPU."""
    procs = _procs()
    return [pid for pid in (int(entry) for entry in os.listdir("/proc") if entry.isdigit())
            if pid != os.getpid() and procs.environ_has(pid, SCOPE_KEY, token) and procs.alive(pid)]


def reap(token, timeout=10.0):
    """SIGKILL every process of this token's scope, until a scan finds none; returns the pids killed."""
    killed = []
    deadline = time.monotonic() + timeout
    while True:
        alive = _scoped(token)
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
        while any(_procs().alive(pid) for pid in alive) and time.monotonic() < deadline:
            time.sleep(0.02)
