# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""make demo-replicas' flow, as `make demo-replicas` runs it (tools/demo_replicas.py run, then stop): the pinned
smg (build/router-venv-smg, make router-env) on loopback, two real `transformers serve` replicas of the tiny model
(inventories/local-replicas, CPU), a switch of both to the other variant under a closed-loop load through the
router. Asserts 0 failed requests, the process table, the state files and the router's listing.

Slow (two engine starts and two switches of a real engine on the CPU); it uses the demo's own ports and
build/demo-replicas, so it is skipped while a demo runs there."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "demo_replicas.py")
SMG = os.path.join(ROOT, "build", "router-venv-smg", "bin", "smg")
STATE = os.path.join(ROOT, "build", "demo-replicas", "state")
PORTS = {"router": 18350, "prometheus": 18359, "r0": 18351, "r1": 18352}


def taken(port):
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def record(name):
    path = os.path.join(STATE, name)
    return json.load(open(path)) if os.path.exists(path) else None


def tool(action, timeout):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run([sys.executable, TOOL, action], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture
def demo(tiny_model):
    if not os.access(SMG, os.X_OK):
        pytest.skip("smg is not installed (make router-env builds build/router-venv-smg)")
    if any(taken(port) for port in PORTS.values()):
        pytest.skip("a demo (or something else) holds the demo's ports %s" % sorted(PORTS.values()))
    assert os.path.realpath(tiny_model) == os.path.realpath(os.path.join(ROOT, "build", "tiny-model"))
    yield
    tool("stop", 300)


@pytest.mark.timeout(600)  # a long flow: several minutes on a loaded 2-core machine
def test_demo_replicas_switches_both_under_load_with_no_failed_request(demo):
    started = time.monotonic()
    run = tool("run", 900)
    took = time.monotonic() - started
    print(run.stdout[-3000:], run.stderr[-2000:])
    print("make demo-replicas' flow took %.1f s" % took)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    sent, failed = map(int, re.search(r"^sent (\d+), failed (\d+)", run.stdout, re.M).groups())
    assert failed == 0 and sent > 10
    router = record("router.json")
    assert alive(router["pid"]) and "--backend" in router["argv"] and "openai" in router["argv"]
    assert router["argv"][router["argv"].index("--prometheus-host") + 1] == "127.0.0.1"
    variants = dict((r, record("demo.%s.json" % r)) for r in ("r0", "r1"))
    assert set(v["variant"] for v in variants.values()) == {"batched"}, variants  # baseline first, then batched
    assert all(alive(v["pid"]) for v in variants.values())
    for line in ("demo.r0: baseline (pid", "demo.r1: baseline (pid"):
        assert line in run.stdout
    with urllib.request.urlopen("http://127.0.0.1:18350/workers", timeout=5) as resp:
        listing = dict((w["url"].rstrip("/"), w["is_healthy"]) for w in json.loads(resp.read())["workers"])
    assert listing == {"http://127.0.0.1:18351": True, "http://127.0.0.1:18352": True}

    stop = tool("stop", 300)
    assert stop.returncode == 0, stop.stdout[-3000:] + stop.stderr[-2000:]
    assert not alive(router["pid"]) and not any(alive(v["pid"]) for v in variants.values())
    assert not any(taken(port) for port in PORTS.values())
    assert record("router.json") is None and record("demo.r0.json") is None
