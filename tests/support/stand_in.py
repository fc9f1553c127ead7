# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Start the timing-exact stand-in server (stream_server.py) in its own process, for tests and benchmarks."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
COLLECTIONS = os.path.join(ROOT, "collections")


def importable():
    """Make ansible_collections.inferops.serving importable (collections/ is made by make setup)."""
    if COLLECTIONS not in sys.path:
        sys.path.insert(0, COLLECTIONS)


def wait_health(url, timeout=15.0, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("server exited with %s" % proc.returncode)
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s/health not ready within %ss" % (url, timeout))


@contextlib.contextmanager
def stand_in(port, *args, python=None):
    """Run stream_server.py --port PORT ARGS...; yields its base URL; stops it afterwards."""
    proc = subprocess.Popen([python or sys.executable, os.path.join(HERE, "stream_server.py"),
                             "--port", str(port)] + [str(a) for a in args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = "http://127.0.0.1:%d" % port
    try:
        wait_health(url, proc=proc)
        yield url
    finally:
        stop(proc)


def stop(proc, grace=5):
    """SIGTERM, then SIGKILL after grace seconds; reaped either way."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
