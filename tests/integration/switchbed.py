# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The test bed of the main job's integration tests: an inventory of this host whose variants are the
timing-exact stand-in (tests/support/stream_server.py) and the failing engines of
tests/support/fake_engine.py (engine: command), on 8 fake GPUs; and helpers to read a run's results.
Test modules import the fixtures by name (pytest puts this directory on sys.path)."""

from __future__ import annotations

import json
import os
import sys
import urllib.request

import pytest
import yaml

from ansible_collections.inferops.serving.plugins.module_utils import _marker, _procs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUPPORT = os.path.join(ROOT, "tests", "support")
PLAY = os.path.join(ROOT, "playbooks", "switch_variant.yml")
STOP = os.path.join(ROOT, "playbooks", "stop.yml")
BENCH = os.path.join(ROOT, "playbooks", "bench.yml")


def stand_in(port, step_ms):
    return [sys.executable, os.path.join(SUPPORT, "stream_server.py"), "--port", str(port),
            "--model", "standin", "--ttft-ms", "5", "--step-ms", str(step_ms)]


def fake_engine(port, mode):
    return [sys.executable, os.path.join(SUPPORT, "fake_engine.py"), "--port", str(port), "--model", "standin",
            "--mode", mode, "--load-s", "0.2"]


def finished(run, key):
    """The last async_status result that carries `key` (results: the benchmark's)."""
    found = [r["result"] for r in run.results("async_status") if key in r["result"]]
    assert found, "no async_status result with %s in:\n%s" % (key, run.stdout[-3000:])
    return found[-1]


def served(run):
    """The server's final result: the direct inference_server call's, or, when the model loaded for
    longer than that call waits, the async_status poll's that saw it ready."""
    found = [r["result"] for r in run.results("inference_server") + run.results("async_status")
             if "argv" in r["result"] and not r["result"].get("loading")]
    assert found, "no ready inference_server result in:\n%s" % run.stdout[-3000:]
    return found[-1]


def levels_of(run):
    return finished(run, "results")["results"]


def benchmarked(run):
    return any("results" in r["result"] for r in run.results("async_status"))


@pytest.fixture
def fleet(tmp_path, port, fake_gpus):
    """An inventory of this host with stand-in variants; returns helpers around it."""
    state = tmp_path / "state"
    inv = tmp_path / "inventory.yml"
    group = {
        "hosts": {"localhost": {"ansible_connection": "local",
                                "ansible_python_interpreter": "{{ ansible_playbook_python }}"}},
        "vars": {
            "serving_engine": "command", "serving_model": "standin", "serving_name": "sv",
            "serving_port": port, "serving_state_dir": str(state), "serving_log_dir": str(tmp_path / "log"),
            "serving_supervisor": "process", "serving_ready_timeout": 20, "serving_stop_timeout": 5,
            "serving_progress_delay": 1, "serving_log_keep": 50,
            "serving_gpu_check": {"backend": "nvidia_smi", "timeout": 10, "kill_grace": 2},
            "serving_bench": {"concurrency": [1, 4], "requests_per_level": 8, "input_tokens": 8,
                              "output_tokens": 16, "warmup": 0},
            "serving_variants": {
                "fast": {"command": stand_in(port, 2)},
                "slow": {"extends": "fast", "command": stand_in(port, 6), "env": {"STANDIN": "slow"}},
                "crash": {"command": fake_engine(port, "exit")},
                "hang": {"command": fake_engine(port, "never-ready"), "ready_timeout": 3},
            },
        },
    }
    inv.write_text(yaml.safe_dump({"serving": group}))

    class Fleet(object):
        inventory = str(inv)
        gpus = fake_gpus
        state_dir = state
        log_dir = tmp_path / "log"
        port = group["vars"]["serving_port"]

        def add_variants(self, variants):
            """More variants in the catalog (the base four stay, so the tests of its listing hold)."""
            group["vars"]["serving_variants"].update(variants)
            inv.write_text(yaml.safe_dump({"serving": group}))

        def set_vars(self, **values):
            group["vars"].update(values)
            inv.write_text(yaml.safe_dump({"serving": group}))

        def record(self):
            """The server's state file: what serves, per inference_server."""
            path = state / "sv.json"
            return json.loads(path.read_text()) if path.exists() else None

        def pid(self):
            return json.loads((state / "sv.json").read_text())["pid"]

        def health(self):
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5) as resp:
                return resp.status

    return Fleet()


@pytest.fixture
def switch(run_playbook, fleet):
    def run(variant=None, playbook=PLAY, extra=None, **kw):
        extra_vars = dict(extra or {})
        if variant is not None:
            extra_vars["variant"] = variant
        env = dict(fleet.gpus.env, **kw.pop("env", {}))
        return run_playbook(playbook, extra_vars=extra_vars, inventory=fleet.inventory, env=env, **kw)
    # what the runs leave running is killed at the test's end (conftest ansible_env, tests/support/reaper.py)
    return run


def gpu_check_of(run):
    """The GPU check that inference_server ran between the stop and the start (None if none ran)."""
    checks = [r["result"]["gpu_check"] for r in run.results("inference_server") if r["result"].get("gpu_check")]
    return checks[-1] if checks else None


# What an operator checks after a run: the state file, the engines alive, the port's owner.
def flat(run):
    return " ".join(run.stdout.split())


def observed(label, run, fleet):
    """One line of what the operator saw and what the host holds (pytest -s shows it)."""
    record = fleet.record() or {}
    out = flat(run)
    said = out[out.find("Variant "):out.find(" Origin:", out.find("Variant "))] if "Variant " in out else out[-200:]
    print("\nOBSERVED %s: rc=%d changed=%d | %s | state: %s pid %s | engines %s | port owner %s"
          % (label, run.rc, run.recap()["changed"], said[-400:], record.get("variant"), record.get("pid"),
             sorted(engines(fleet)), port_owner(fleet.port)))


def engines(fleet):
    """The process groups of the instance's engines that live now (marker carriers): {pgid: [pids]}."""
    carriers = _marker.carriers(_marker.identity("sv", str(fleet.state_dir)))
    groups = {}
    for info in _procs.list_procs():
        if info.pid in carriers:
            groups.setdefault(info.pgid, []).append(info.pid)
    return groups


def port_owner(port):
    owners = _procs.listeners(port)
    return owners[0].pid if owners else None


def serving(fleet, variant, pid=None):
    """The state file names variant, its pid is the one engine of the instance, and it owns the port."""
    record = fleet.record()
    assert record is not None, "nothing recorded"
    assert record["variant"] == variant, record
    assert "loading" not in record and "previous" not in record, record
    if pid is not None:
        assert record["pid"] == pid
    assert list(engines(fleet)) == [record["pid"]], (engines(fleet), record["pid"])
    assert port_owner(fleet.port) == record["pid"]
    assert fleet.health() == 200
    return record


def untouched(fleet, before):
    """The server that ran before a refused switch runs on: same pid, same record, serving."""
    serving(fleet, before["variant"], pid=before["pid"])
    assert fleet.record()["started_at"] == before["started_at"]


def started(switch, fleet, variant="fast"):
    run = switch(variant, extra={"bench": "never"})
    assert run.rc == 0, run.stdout[-3000:]
    return serving(fleet, variant)
