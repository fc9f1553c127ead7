# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures for the fleet scenarios: the test bed of tests/fleet/testbed.sh, an inventory over SSH.

`make test-fleet` brings the hosts up (network namespaces, one sshd each) and runs these tests with
INFEROPS_TESTBED naming its testbed.json; without it they are skipped. Each test gets its own
state dirs and ports on every host, and leaves no engine running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml
from ports import free_port  # tests/support: one port per gate run, the stages beside it included

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUPPORT = os.path.join(ROOT, "tests", "support")
ROLLOUT = os.path.join(ROOT, "playbooks", "rollout.yml")
SWITCH = os.path.join(ROOT, "playbooks", "switch_variant.yml")


@pytest.fixture(scope="session")
def testbed():
    path = os.environ.get("INFEROPS_TESTBED")
    if not path:
        pytest.skip("needs the multi-host test bed: run `make test-fleet`")
    with open(path) as handle:
        return json.load(handle)


def ns_pids(netns):
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=False).stdout
    return [int(pid) for pid in out.split()]


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def kill_engines(netns):
    """Kill what the tests started inside one host: engines and stand-ins (never its sshd)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        victims = [pid for pid in ns_pids(netns) if SUPPORT in cmdline(pid)]
        for pid in victims:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        if victims and sig == signal.SIGTERM:
            time.sleep(0.5)


def set_link(veth, state):
    subprocess.run(["ip", "link", "set", veth, state], check=True)


class Host(object):
    def __init__(self, spec, base, port):
        self.__dict__.update(spec)
        self.port = port
        self.state_dir = os.path.join(base, self.name, "state")
        self.log_dir = os.path.join(base, self.name, "log")

    def variant(self):
        """The variant the host's server state (inference_server's NAME.json) says serves, or None."""
        srv = self.server()
        return srv.get("variant") if srv else None

    def server(self):
        path = os.path.join(self.state_dir, "sv.json")
        if not os.path.exists(path):
            return None
        with open(path) as handle:
            return json.load(handle)

    def pid(self):
        srv = self.server()
        return srv["pid"] if srv else None

    def engine_alive(self):
        pid = self.pid()
        return pid is not None and pid in ns_pids(self.netns)

    def reset_gpus(self):
        with open(self.gpu_state) as handle:
            state = json.load(handle)
        state["holders"] = []
        with open(self.gpu_state, "w") as handle:
            json.dump(state, handle)


def stand_in(port, step_ms):
    return [sys.executable, os.path.join(SUPPORT, "stream_server.py"), "--port", str(port), "--model", "standin",
            "--ttft-ms", "5", "--step-ms", str(step_ms)]


def crashing(port):
    return [sys.executable, os.path.join(SUPPORT, "fake_engine.py"), "--port", str(port), "--model", "standin",
            "--mode", "exit", "--load-s", "0.2"]


class Fleet(object):
    """Inventory of the test bed's hosts (group `serving`) and helpers to look at them."""

    def __init__(self, testbed, tmp_path, run_playbook, free_port):
        self.bed = testbed
        self.tmp = tmp_path
        self._run = run_playbook
        self.lb_log = str(tmp_path / "lb.jsonl")
        self.hosts = [Host(spec, str(tmp_path / "hosts"), free_port()) for spec in testbed["hosts"]]
        self.inventory = str(tmp_path / "fleet.yml")
        hosts = {}
        for host in self.hosts:
            host.reset_gpus()
            hosts[host.name] = {
                "ansible_host": host.address, "serving_port": host.port,
                "serving_state_dir": host.state_dir, "serving_log_dir": host.log_dir,
                # the argv of each stand-in variant, with this host's port
                "standin_base": stand_in(host.port, 4), "standin_fast": stand_in(host.port, 2),
                "standin_slow": stand_in(host.port, 12), "engine_crash": crashing(host.port),
            }
        group = {
            "hosts": hosts,
            "vars": {
                "ansible_connection": "ssh", "ansible_user": "root",
                "ansible_python_interpreter": testbed["python"],
                "ansible_ssh_private_key_file": testbed["key"],
                "ansible_host_key_checking": True,
                "ansible_ssh_common_args": "-o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes "
                                           "-o ServerAliveInterval=1 -o ServerAliveCountMax=3" % testbed["known_hosts"],
                "ansible_control_path_dir": testbed["control_path_dir"],
                "ansible_timeout": 5,
                "serving_engine": "command", "serving_model": "standin", "serving_name": "sv",
                "serving_supervisor": "process", "serving_ready_timeout": 20, "serving_stop_timeout": 5,
                "serving_progress_delay": 1, "benchmark_poll_interval": 1,
                "serving_gpu_check": {"backend": "nvidia_smi", "timeout": 10, "kill_grace": 2},
                "serving_bench": {"concurrency": [1, 4], "requests_per_level": 8, "input_tokens": 8,
                                  "output_tokens": 32, "warmup": 0},
                "serving_variants": {
                    "v1": {"command": "{{ standin_base }}", "description": "the variant serving now"},
                    "v2": {"command": "{{ standin_fast }}", "description": "twice as fast"},
                    "slow": {"command": "{{ standin_slow }}", "description": "three times slower"},
                    "flaky": {"command": "{{ engine_crash if inventory_hostname in crash_on | default([]) else standin_fast }}",
                              "description": "crashes on the hosts named in crash_on"},
                },
            },
        }
        with open(self.inventory, "w") as handle:
            yaml.safe_dump({"serving": group}, handle)

    def host(self, name):
        return [h for h in self.hosts if h.name == name][0]

    def names(self):
        return [h.name for h in self.hosts]

    def run(self, playbook=ROLLOUT, **extra):
        return self._run(playbook, extra_vars=extra, inventory=self.inventory, timeout=600)

    def rollout(self, variant, **extra):
        return self.run(ROLLOUT, variant=variant, **extra)

    def converge(self, variant):
        """Every host to `variant` at once, without a benchmark (the starting point of a scenario)."""
        run = self.run(SWITCH, variant=variant, bench="never")
        assert run.rc == 0, run.stdout[-4000:]
        assert all(h.variant() == variant for h in self.hosts)
        return run

    def hooks(self):
        if not os.path.exists(self.lb_log):
            return []
        with open(self.lb_log) as handle:
            return [json.loads(line) for line in handle if line.strip()]

    def hook_vars(self):
        lb = [sys.executable, os.path.join(SUPPORT, "lb_hook.py"), self.lb_log]
        return {"rollout_drain_cmd": lb + ["drain", "{{ inventory_hostname }}", "$(touch /tmp/inferops-t-shell)", "a b;c"],
                "rollout_undrain_cmd": lb + ["undrain", "{{ inventory_hostname }}"]}

    def unreachable_when(self, name, predicate, timeout=300):
        """Down host `name`'s link as soon as predicate(host) holds (polled); returns the thread."""
        host = self.host(name)
        done = {"downed": None}

        def watch():
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    if predicate(host):
                        set_link(host.veth, "down")
                        done["downed"] = time.monotonic()
                        return
                except (OSError, ValueError):
                    pass
                time.sleep(0.02)
        thread = threading.Thread(target=watch, daemon=True)
        thread.done = done
        thread.start()
        return thread

    def cleanup(self):
        for host in self.hosts:
            set_link(host.veth, "up")
            kill_engines(host.netns)


@pytest.fixture
def fleet(testbed, tmp_path, run_playbook):
    fl = Fleet(testbed, tmp_path, run_playbook, free_port)
    yield fl
    fl.cleanup()
