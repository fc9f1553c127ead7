# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/rollout.yml over real SSH on two test-bed hosts of two replicas each, behind one real
sglang-router (build/router-venv) that runs on the controller, under a closed-loop load through it.

Each replica is the timing-exact stand-in answering as SGLang, started from one command with {host} and
{port} in it, on its instance's two fake GPUs of its own host. The router listens on every address of the
controller: each host's router_worker calls reach it at the controller's end of the host's link, and it
reaches each replica at the host's address (serving_host 0.0.0.0: the worker URL is http://<ansible_host>:<port>). The rollout takes
the first host as the canary batch, with its first instance as the canary: measured, switched alone,
gated, then the host's other instance; then the second host, one instance at a time.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

import sglang_router  # tests/support (on sys.path through tests/conftest.py)
from closed_loop import Load  # tests/support too
from ports import free_port  # tests/support too: one port per gate run, the stages beside it included
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUPPORT = os.path.join(ROOT, "tests", "support")
ROLLOUT = os.path.join(ROOT, "playbooks", "rollout.yml")
SWITCH = os.path.join(ROOT, "playbooks", "switch_variant.yml")
NAMES = ("r0", "r1")


def kill_stand_ins(netns):
    """What the test started inside one host (stand-ins of tests/support), never its sshd."""
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=False).stdout
    for pid in (int(p) for p in out.split()):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as handle:
                if SUPPORT.encode() not in handle.read():
                    continue
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def flat(text):
    return " ".join(text.split())


def replica(step_ms):
    return [sys.executable, os.path.join(SUPPORT, "stream_server.py"), "--host", "{host}", "--port", "{port}",
            "--model", "standin", "--engine", "sglang", "--ttft-ms", "5", "--step-ms", str(step_ms)]


def listed(router_url):
    with urllib.request.urlopen(router_url + "/workers", timeout=5) as resp:
        data = json.loads(resp.read())
    return dict((w["url"].rstrip("/"), w.get("is_healthy")) for w in data.get("workers", []))


class ReplicaFleet(object):
    """The first two test-bed hosts, each with replicas r0 (GPUs 0,1) and r1 (GPUs 2,3) behind `router`."""

    def __init__(self, testbed, tmp_path, run_playbook, router):
        self.run_playbook, self.router = run_playbook, router
        self.hosts = testbed["hosts"][:2]
        self.ports = dict((host["name"], dict((name, free_port()) for name in NAMES)) for host in self.hosts)
        self.state = dict((host["name"], str(tmp_path / host["name"] / "state")) for host in self.hosts)
        self.inventory = str(tmp_path / "replicas.yml")
        env = {"FAKE_GPU_MIB": "4096"}
        metric = "sglang:num_running_reqs"
        hosts = {}
        for host in self.hosts:
            with open(host["gpu_state"]) as handle:
                gpus = json.load(handle)
            gpus["holders"] = []
            with open(host["gpu_state"], "w") as handle:
                json.dump(gpus, handle)
            hosts[host["name"]] = {
                "ansible_host": host["address"], "serving_state_dir": self.state[host["name"]],
                # the router_worker calls run on the host: the router is at the controller's end of its link
                "serving_router": {"type": "sglang", "url": "http://%s:%d" % (host["controller_address"], router.port)},
                "serving_log_dir": str(tmp_path / host["name"] / "log"),
                "serving_instances": dict((name, {"gpus": [2 * i, 2 * i + 1], "port": self.ports[host["name"]][name]})
                                          for i, name in enumerate(NAMES))}
        group = {"hosts": hosts, "vars": {
            "ansible_connection": "ssh", "ansible_user": "root", "ansible_python_interpreter": testbed["python"],
            "ansible_ssh_private_key_file": testbed["key"], "ansible_host_key_checking": True,
            "ansible_ssh_common_args": "-o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes "
                                       "-o ServerAliveInterval=1 -o ServerAliveCountMax=3" % testbed["known_hosts"],
            "ansible_control_path_dir": testbed["control_path_dir"], "ansible_timeout": 5,
            "serving_engine": "command", "serving_model": "standin", "serving_name": "rep", "serving_host": "0.0.0.0",
            "serving_supervisor": "process", "serving_ready_timeout": 20, "serving_stop_timeout": 5,
            "serving_progress_delay": 1, "benchmark_poll_interval": 1, "serving_drain_timeout": 20,
            "serving_gpu_check": {"backend": "nvidia_smi", "timeout": 10, "kill_grace": 2},
            "serving_bench": {"concurrency": [1, 2], "requests_per_level": 6, "input_tokens": 8, "output_tokens": 16,
                              "warmup": 0},
            "serving_variants": {
                "v1": {"command": replica(4), "env": env, "drain_metric": metric},
                "v2": {"command": replica(2), "env": env, "drain_metric": metric, "description": "twice as fast"}}}}
        with open(self.inventory, "w") as handle:
            yaml.safe_dump({"serving": group}, handle)

    def run(self, playbook, **extra):
        return self.run_playbook(playbook, extra_vars=extra, inventory=self.inventory, timeout=600)

    def record(self, host, name):
        path = os.path.join(self.state[host], "rep.%s.json" % name)
        if not os.path.exists(path):
            return {}
        with open(path) as handle:
            return json.load(handle)

    def served(self):
        return dict(((h["name"], n), self.record(h["name"], n).get("variant")) for h in self.hosts for n in NAMES)

    def pids(self):
        return dict(((h["name"], n), self.record(h["name"], n).get("pid")) for h in self.hosts for n in NAMES)

    def urls(self):
        return sorted("http://%s:%d" % (h["address"], self.ports[h["name"]][n]) for h in self.hosts for n in NAMES)


@pytest.fixture
def replica_fleet(testbed, tmp_path, run_playbook):
    if not sglang_router.available():
        pytest.skip("the real sglang-router is not installed (make router-env builds build/router-venv)")
    router = sglang_router.start(tmp_path / "router.log", host="0.0.0.0")  # each host reaches it at its peer address
    fleet = ReplicaFleet(testbed, tmp_path, run_playbook, router)
    try:
        yield fleet
    finally:
        router.stop()
        for host in fleet.hosts:
            kill_stand_ins(host["netns"])


def test_rollout_over_two_hosts_of_two_replicas_behind_one_router_fails_no_request(replica_fleet):
    fleet = replica_fleet
    start = fleet.run(SWITCH, variant="v1", bench="never")
    assert start.rc == 0, start.stdout[-4000:]
    assert set(fleet.served().values()) == {"v1"}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and listed(fleet.router.url) != dict((u, True) for u in fleet.urls()):
        time.sleep(0.2)
    assert listed(fleet.router.url) == dict((u, True) for u in fleet.urls()), "each replica was added once ready"
    before = fleet.pids()

    with Load(fleet.router.url) as load:
        time.sleep(2)
        warm_sent, warm_p99 = load.sent, load.p99()
        run = fleet.run(ROLLOUT, variant="v2")
        time.sleep(1)
    out = flat(run.stdout)
    print("rollout over 2 hosts x 2 replicas: requests sent %d, failed %d; p99 before %.3f s, whole run %.3f s"
          % (load.sent, load.failed, warm_p99 or 0, load.p99() or 0))
    for rec in run.results(task="Summarise the fleet"):
        print("\n".join("  " + line for line in rec["result"].get("msg") or []))
    assert run.rc == 0, run.stdout[-5000:]
    assert load.sent > warm_sent + 20, "the load ran through the whole rollout"
    assert load.failed == 0, load.errors[:5]
    assert set(fleet.served().values()) == {"v2"}
    after = fleet.pids()
    assert all(after[key] != before[key] for key in before)
    canary = fleet.hosts[0]["name"]
    assert re.search(r"canary gate passed on %s: v2 vs v1, worst [0-9.]+x >= rollout_min_speedup 0.95" % canary, out), out[-3000:]
    labels = [level["labels"] for rec in run.results("async_status") if "results" in rec["result"]
              for level in rec["result"]["results"][:1]]
    assert [(lab["host"], lab["instance"], lab["variant"]) for lab in labels][:3] == [
        (canary, "r0", "v1"), (canary, "r0", "v2"), (canary, "r1", "v2")], labels
    assert "ROLLOUT of v2: 2 of 2 hosts serve it" in out
    assert listed(fleet.router.url) == dict((u, True) for u in fleet.urls())
