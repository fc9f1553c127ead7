# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The integration tests' cleanup (tests/support/reaper.py): it kills every process of the test's scope, the
detached ones and those they started included, and no process of another scope or of none."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import reaper  # tests/support, on sys.path through tests/conftest.py

from ansible_collections.inferops.serving.plugins.module_utils import _procs

# a detached process (its own session, like an engine under its watchdog) that starts a grandchild and waits
SPAWNER = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"


def start(scope):
    env = dict(os.environ)
    if scope:
        env[reaper.SCOPE_KEY] = scope
    return subprocess.Popen([sys.executable, "-c", SPAWNER], env=env, start_new_session=True)


def descendants(pid):
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False).stdout
    return [int(p) for p in out.split()]


def test_the_scope_is_killed_with_what_it_started_and_nothing_else():
    mine, other, none = start("unit-a"), start("unit-b"), start(None)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(descendants(p.pid) for p in (mine, other, none)):
            time.sleep(0.02)
        grandchild = descendants(mine.pid)[0]
        killed = reaper.reap("unit-a")
        assert sorted(killed) == sorted([mine.pid, grandchild])
        assert mine.wait(5) == -9
        assert not _procs.alive(grandchild)
        assert other.poll() is None and none.poll() is None, "another scope and no scope are left alone"
        assert reaper.reap("unit-a") == [], "a second reap finds nothing"
    finally:
        for proc in (mine, other, none):
            for pid in descendants(proc.pid) + [proc.pid]:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            proc.wait()
