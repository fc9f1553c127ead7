# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared fixtures: real ansible-playbook runs, free ports, the fake nvidia-smi, GPU holders, the tiny
model and a real `transformers serve` engine running it."""

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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUPPORT = os.path.join(ROOT, "tests", "support")
BIN = os.path.dirname(sys.executable)

# The collection is importable as ansible_collections.inferops.serving through the link `make setup`
# creates; the stand-ins under tests/support import by their own names.
for _path in (os.path.join(ROOT, "collections"), SUPPORT):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import fake_dcgmi  # noqa: E402  pylint: disable=wrong-import-position
import fake_kernel_log  # noqa: E402  pylint: disable=wrong-import-position
import fake_nvidia_smi  # noqa: E402  pylint: disable=wrong-import-position
import ports  # noqa: E402  pylint: disable=wrong-import-position
import pytest_gate  # noqa: E402  pylint: disable=wrong-import-position
import reaper  # noqa: E402  pylint: disable=wrong-import-position
# the gate's ceiling per test, floor and slow-test report, for every stage (tests/support/pytest_gate.py)
from pytest_gate import pytest_addoption, pytest_collection_modifyitems  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import
# one port per test of the session, across the xdist workers (tests/support/ports.py)
free_port = ports.free_port


def _is_check(rec):
    """An inference_server state=checked call (the end-of-run check)."""
    result = rec.get("result") or {}
    args = (result.get("invocation") or {}).get("module_args") or {}
    # ansible-core 2.21 echoes no module arguments: the final check's task name tells it there (final_check_one.yml)
    named = " : Check what " in rec.get("task", "") and rec.get("task", "").endswith(" leaves serving")
    return rec["action"].endswith("inference_server") and (args.get("state") == "checked" or named)


class PlaybookRun(object):
    def __init__(self, proc, records):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.records = records

    def results(self, action=None, task=None, checks=False):
        """Task results, optionally filtered by action (module name, any prefix) or task name. The end-of-run
        check's inference_server calls (state=checked, roles/serve_variant/tasks/final_check.yml) are left out
        unless checks: a test's "last inference_server result" is the converge or stop it asserts on."""
        out = []
        for rec in self.records:
            if action and not (rec["action"] == action or rec["action"].endswith("." + action)):
                continue
            if task and rec["task"] != task:
                continue
            if not checks and _is_check(rec):
                continue
            out.append(rec)
        return out

    def result(self, action=None, task=None, checks=False):
        """The last result that ran (a skipped task has none: a role's branch not taken)."""
        found = [rec for rec in self.results(action, task, checks) if rec["status"] != "skipped"]
        assert found, "no result for action=%s task=%s in:\n%s" % (action, task, self.stdout[-4000:])
        return found[-1]["result"]

    def recap(self, host="localhost"):
        """{'ok': n, 'changed': n, 'failed': n, ...} from the PLAY RECAP line."""
        for line in self.stdout.splitlines():
            if line.startswith(host) and "ok=" in line:
                return dict((k, int(v)) for k, v in (kv.split("=") for kv in line.split()[2:]))
        raise AssertionError("no recap for %s:\n%s" % (host, self.stdout[-4000:]))


def pytest_configure(config):
    config.addinivalue_line("markers", "timing: compares measured times with a server of known timing to a few per cent; "
                            "`make integration` runs these alone, after the others, so that no other test loads the CPU")
    pytest_gate.configure(config)


@pytest.fixture
def ansible_env(tmp_path):
    """Environment for ansible-playbook: this repo's ansible.cfg, the test record callback, and the test's scope.

    Every process the test's playbooks start inherits the scope (tests/support/reaper.py): at the test's end,
    whatever of them still runs is killed, and nothing else. That is the cleanup, instead of a stop.yml run."""
    scope = "%d-%d" % (os.getpid(), time.monotonic_ns())
    env = dict(os.environ)
    env.update({
        "PATH": BIN + os.pathsep + env.get("PATH", ""),
        "ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"),
        "ANSIBLE_CALLBACK_PLUGINS": os.path.join(SUPPORT, "callback"),
        "ANSIBLE_CALLBACKS_ENABLED": "record",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "INFEROPS_TEST_RECORD": str(tmp_path / "record.jsonl"),
        reaper.SCOPE_KEY: scope,
    })
    if os.environ.get("INFEROPS_TEST_PROFILE_DIR"):
        # tools/task_profile.py: the wall time of every task of every playbook run, to find where the gate goes
        env["ANSIBLE_CALLBACK_PLUGINS"] += os.pathsep + os.path.join(ROOT, "benchmarks", "callback")
        env["ANSIBLE_CALLBACKS_ENABLED"] += ",task_wall"
    yield env
    reaper.reap(scope)


@pytest.fixture
def run_playbook(ansible_env, tmp_path, request):
    """run_playbook(playbook, extra_vars=None, check=False, inventory=None, args=()) -> PlaybookRun.

    playbook: a path, or YAML text written to a temp file. Extra vars go as JSON.
    """
    def run(playbook, extra_vars=None, check=False, diff=False, inventory=None, args=(), env=None, timeout=900):
        if "\n" in playbook:
            path = tmp_path / ("play-%d.yml" % time.monotonic_ns())
            path.write_text(playbook)
            playbook = str(path)
        record = tmp_path / ("record-%d.jsonl" % time.monotonic_ns())
        run_env = dict(ansible_env, INFEROPS_TEST_RECORD=str(record))
        if os.environ.get("INFEROPS_TEST_PROFILE_DIR"):
            run_env["INFEROPS_BENCH_PROFILE"] = os.path.join(
                os.environ["INFEROPS_TEST_PROFILE_DIR"],
                "%s.%d.json" % (re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid), time.monotonic_ns()))
        run_env.update(env or {})
        argv = [os.path.join(BIN, "ansible-playbook"), "-i",
                inventory or os.path.join(ROOT, "inventories", "local"), playbook]
        if extra_vars:
            argv += ["-e", json.dumps(extra_vars)]
        if check:
            argv.append("--check")
        if diff:
            argv.append("--diff")
        argv += list(args)
        proc = subprocess.run(argv, cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=timeout,
                              check=False)
        records = []
        if record.exists():
            records = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
        return PlaybookRun(proc, records)
    return run


@pytest.fixture
def port():
    return free_port()


MODEL_DIR = os.path.join(ROOT, "build", "tiny-model")


@pytest.fixture(scope="session")
def tiny_model():
    """The tiny random Qwen3 (tools/build_tiny_model.py: local, no download, idempotent); its path."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "build_tiny_model.py"), "--out", MODEL_DIR],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def transformers_engine(tiny_model, tmp_path_factory):
    """`transformers serve` with the tiny model on CPU, on a free port, for the session: (url, model id)."""
    port = free_port()
    log = tmp_path_factory.mktemp("transformers-engine") / "engine.log"
    argv = [os.path.join(BIN, "transformers"), "serve", tiny_model, "--host", "127.0.0.1", "--port", str(port),
            "--device", "cpu"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = "http://127.0.0.1:%d" % port
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError("transformers serve exited with %s:\n%s" % (proc.returncode, log.read_text()[-3000:]))
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=5) as resp:
                    models = [m["id"] for m in json.loads(resp.read())["data"]]
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("transformers serve not ready in 300 s:\n%s" % log.read_text()[-3000:])
                time.sleep(0.5)
        yield url, models[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


class FakeGpus(object):
    """A fake nvidia-smi first on PATH, its state in a JSON file; holders are real processes."""

    def __init__(self, tmp_path, count=8):
        self.dir = tmp_path / "fake-gpu"
        bindir = self.dir / "bin"
        bindir.mkdir(parents=True)
        self.state_file = self.dir / "state.json"
        fake_nvidia_smi.install(bindir)
        fake_kernel_log.install(bindir)  # the fake host's own kernel log: journalctl and dmesg
        self.bindir = str(bindir)
        self.children = []
        self.state = {"driver": True, "holders": [],
                      "gpus": [{"index": i, "uuid": "GPU-%08x-1111-2222-3333-444444444444" % i,
                                "name": "NVIDIA H200", "memory_total_mib": 143771, "memory_used_mib": 0}
                               for i in range(count)]}
        self.save()

    @property
    def env(self):
        return {"PATH": self.bindir + os.pathsep + BIN + os.pathsep + os.environ.get("PATH", ""),
                "FAKE_NVIDIA_SMI_STATE": str(self.state_file)}

    def save(self):
        self.state_file.write_text(json.dumps(self.state))

    def install_dcgmi(self):
        """Put the fake `dcgmi` on this host's PATH (a host without it has no DCGM)."""
        fake_dcgmi.install(self.bindir)

    def dcgmi_calls(self):
        path = self.dir / "dcgmi-calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def xid(self, gpu, code, text="", at=None):
        """Log an Xid for GPU index gpu in the fake kernel log, as the driver words it."""
        bus = fake_nvidia_smi.bus_id(self.state["gpus"][gpu])
        kernel = "PCI:0000:%s" % bus.split(":", 1)[1][:5].lower()
        self.state.setdefault("kernel_log", []).append(
            {"at": time.time() if at is None else at,
             "line": "NVRM: Xid (%s): %d, pid='<unknown>', name=<unknown>, %s" % (kernel, code, text or "fake event")})
        self.save()

    def hold(self, gpu, used_mib=8192, args=(), argv=None, name=None):
        """Start a real process and report it as holding `used_mib` on `gpu` while it lives."""
        ready = self.dir / ("ready-%d" % len(self.children))
        argv = argv or [sys.executable, os.path.join(SUPPORT, "gpu_holder.py")]
        child = subprocess.Popen(list(argv) + ["--ready", str(ready)] + list(args), start_new_session=True)
        self.children.append(child)
        deadline = time.monotonic() + 10
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        holder = {"pid": child.pid, "gpu": gpu, "used_mib": used_mib}
        if name:
            holder["name"] = name
        self.state["holders"].append(holder)
        self.save()
        return child

    def cleanup(self):
        for child in self.children:
            if child.poll() is None:
                child.kill()
                child.wait()


@pytest.fixture
def fake_gpus(tmp_path, monkeypatch):
    """8 fake H200s; also exported into os.environ for in-process (pytest-ansible) module runs."""
    gpus = FakeGpus(tmp_path)
    for key, value in gpus.env.items():
        monkeypatch.setenv(key, value)
    yield gpus
    gpus.cleanup()
