# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Replicas: four instances of one host (serving_instances r0-r3, two fake GPUs each) behind the real
sglang-router (build/router-venv, pinned in tests/support/router-requirements.txt), switched by the real
switch_variant.yml while a closed-loop load runs through the router.

Each replica is the timing-exact stand-in answering as SGLang (its in-flight gauge sglang:num_running_reqs
on /metrics, what the drain waits on), started from one command with {port} in it, and placed by the
fake nvidia-smi on the GPUs its own CUDA_VISIBLE_DEVICES names. The assertions read the load's own count
of failed requests, the router's worker list, the process table and the state files.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.request

import pytest
import yaml
from switchbed import PLAY, SUPPORT

import sglang_router  # tests/support (on sys.path through tests/conftest.py)
from closed_loop import Load  # tests/support too

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = ("r0", "r1", "r2", "r3")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def replica_command(step_ms, mode=None):
    """One command for every replica: {port} is each instance's own (inference_server replaces it)."""
    if mode:
        return [sys.executable, os.path.join(SUPPORT, "fake_engine.py"), "--port", "{port}", "--model", "standin",
                "--mode", mode, "--load-s", "0.2"]
    return [sys.executable, os.path.join(SUPPORT, "stream_server.py"), "--port", "{port}", "--model", "standin",
            "--engine", "sglang", "--ttft-ms", "5", "--step-ms", str(step_ms)]


class Host(object):
    """This host with four replicas on fake GPUs 0-7 (r0: 0,1 ... r3: 6,7), optionally behind a router."""

    def __init__(self, tmp_path, run_playbook, router_url=None):
        self.tmp_path, self.run_playbook = tmp_path, run_playbook
        self.state_dir = tmp_path / "state"
        self.ports = dict((name, free_port()) for name in NAMES)
        self.router_url = router_url
        self.inventory = tmp_path / "inventory.yml"
        self.write()

    def write(self, **extra):
        env = {"FAKE_GPU_MIB": "4096"}
        variants = {"v1": {"command": replica_command(2), "env": env, "drain_metric": "sglang:num_running_reqs"},
                    "v2": {"command": replica_command(3), "env": env, "drain_metric": "sglang:num_running_reqs"},
                    "broken": {"command": replica_command(0, "crash"), "env": env}}
        group = {"hosts": {"localhost": {"ansible_connection": "local",
                                         "ansible_python_interpreter": "{{ ansible_playbook_python }}"}},
                 "vars": {"serving_engine": "command", "serving_model": "standin", "serving_name": "rep",
                          "serving_host": "127.0.0.1", "serving_state_dir": str(self.state_dir),
                          "serving_log_dir": str(self.tmp_path / "log"), "serving_supervisor": "process",
                          "serving_ready_timeout": 20, "serving_stop_timeout": 5, "serving_progress_delay": 1,
                          "serving_drain_timeout": 20, "serving_bench_enabled": False,
                          "serving_gpu_check": {"backend": "nvidia_smi", "timeout": 10, "kill_grace": 2},
                          "serving_instances": dict((name, {"gpus": [2 * i, 2 * i + 1], "port": self.ports[name]})
                                                    for i, name in enumerate(NAMES)),
                          "serving_variants": variants}}
        if self.router_url:
            group["vars"]["serving_router"] = {"type": "sglang", "url": self.router_url}
        group["vars"].update(extra)
        self.inventory.write_text(yaml.safe_dump({"serving": group}))

    def play(self, variant, **extra_vars):
        return self.run_playbook(PLAY, dict({"variant": variant}, **extra_vars), inventory=str(self.inventory))

    def record(self, name):
        path = self.state_dir / ("rep.%s.json" % name)
        return json.loads(path.read_text()) if path.exists() else None

    def pids(self):
        return dict((name, (self.record(name) or {}).get("pid")) for name in NAMES)

    def variants(self):
        return dict((name, (self.record(name) or {}).get("variant")) for name in NAMES)

    def urls(self):
        return sorted("http://127.0.0.1:%d" % self.ports[name] for name in NAMES)


def listed(router_url):
    """The router's workers: {url: is_healthy}."""
    with urllib.request.urlopen(router_url + "/workers", timeout=5) as resp:
        data = json.loads(resp.read())
    return dict((w["url"].rstrip("/"), w.get("is_healthy")) for w in data.get("workers", []))


@pytest.fixture
def router(tmp_path):
    if not sglang_router.available():
        pytest.skip("the real sglang-router is not installed (make router-env builds build/router-venv)")
    handle = sglang_router.start(tmp_path / "router.log")
    yield handle
    handle.stop()


def started_behind(router, tmp_path, run_playbook):
    host = Host(tmp_path, run_playbook, router_url=router.url)
    run = host.play("v1")
    assert run.rc == 0, run.stdout[-4000:]
    assert host.variants() == dict((name, "v1") for name in NAMES)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and listed(router.url) != dict((url, True) for url in host.urls()):
        time.sleep(0.2)
    assert listed(router.url) == dict((url, True) for url in host.urls()), "first start: each replica added once ready"
    return host


def test_switching_four_replicas_behind_the_router_fails_no_request(fake_gpus, router, tmp_path, run_playbook):
    host = started_behind(router, tmp_path, run_playbook)
    before = host.pids()
    with Load(router.url) as load:
        time.sleep(2)
        warm_sent, warm_p99 = load.sent, load.p99()
        run = host.play("v2")
        time.sleep(1)
    print("requests sent %d, failed %d; p99 before the roll %.3f s, over the whole run %.3f s"
          % (load.sent, load.failed, warm_p99 or 0, load.p99() or 0))
    assert run.rc == 0, run.stdout[-4000:]
    assert load.sent > warm_sent + 20, "the load ran through the whole switch"
    assert load.failed == 0, load.errors[:5]
    assert host.variants() == dict((name, "v2") for name in NAMES)
    after = host.pids()
    assert all(after[name] != before[name] for name in NAMES)
    assert listed(router.url) == dict((url, True) for url in host.urls())


def test_without_the_router_integration_the_same_switch_fails_requests(fake_gpus, router, tmp_path, run_playbook):
    host = started_behind(router, tmp_path, run_playbook)
    host.router_url = None
    host.write()  # the router still routes to the replicas, but the switch no longer takes them out
    with Load(router.url) as load:
        time.sleep(1)
        run = host.play("v2")
        time.sleep(1)
    print("without the drain: requests sent %d, failed %d" % (load.sent, load.failed))
    assert run.rc == 0, run.stdout[-4000:]
    assert load.failed > 0, "the load test can fail: without the drain, stopped replicas drop requests"


def test_a_replica_whose_variant_crashes_is_rolled_back_and_readded(fake_gpus, router, tmp_path, run_playbook):
    host = started_behind(router, tmp_path, run_playbook)
    before = host.pids()
    with Load(router.url) as load:
        time.sleep(1)
        run = host.play("broken")
        time.sleep(1)
    assert run.rc != 0
    assert "ROLLED BACK" in run.stdout, run.stdout[-4000:]
    assert load.failed == 0, load.errors[:5]
    # r0 failed and serves v1 again; the others were left alone (the batch after a failure is not started)
    assert host.variants() == dict((name, "v1") for name in NAMES)
    after = host.pids()
    assert after["r0"] != before["r0"]
    assert dict((n, after[n]) for n in NAMES[1:]) == dict((n, before[n]) for n in NAMES[1:])
    assert listed(router.url) == dict((url, True) for url in host.urls()), "r0 is back in the router"


def test_switching_r1_alone_leaves_the_other_replicas_alone(fake_gpus, router, tmp_path, run_playbook):
    host = started_behind(router, tmp_path, run_playbook)
    before = host.pids()
    run = host.play("v2", instances="r1")
    assert run.rc == 0, run.stdout[-4000:]
    after = host.pids()
    assert after["r1"] != before["r1"]
    assert dict((n, after[n]) for n in ("r0", "r2", "r3")) == dict((n, before[n]) for n in ("r0", "r2", "r3"))
    assert host.variants() == {"r0": "v1", "r1": "v2", "r2": "v1", "r3": "v1"}
