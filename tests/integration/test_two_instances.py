# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Two servers on one host survive each other: instances `a` and `b` (two serving_names, one state
directory) through the real playbooks, on 8 fake GPUs.

Each instance's engine is the timing-exact stand-in, started as vLLM (`--engine vllm`: its command line
matches the default reclaim_match, as a real vLLM's does) with CUDA_VISIBLE_DEVICES in its variant's env;
the fake nvidia-smi places each engine on the GPUs its own environment names. Every case asserts that the
other instance keeps its pid, still answers and keeps a true state file, from the process table, the
port and the state file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml
from ports import free_port  # tests/support: one port per test of the session, across workers
from switchbed import PLAY, STOP, SUPPORT, flat, port_owner, stand_in

from ansible_collections.inferops.serving.plugins.module_utils import _marker, _procs

GPUS = {"a": [0, 1, 2, 3], "b": [4, 5, 6, 7]}


def vllm_like(port, step_ms):
    return stand_in(port, step_ms) + ["--engine", "vllm"]


class Instance(object):
    """One instance's inventory (this host) and what the host holds of it."""

    def __init__(self, tmp_path, fake_gpus, name, port, gpus, check_gpus=True, engine=vllm_like):
        self.name, self.port, self.gpus = name, port, gpus
        self.state_dir = tmp_path / "state"
        self.fake_gpus = fake_gpus
        self.inventory = tmp_path / ("inventory-%s.yml" % name)
        env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)), "FAKE_GPU_MIB": "4096"}
        check = {"backend": "nvidia_smi", "timeout": 10, "kill_grace": 2}
        if check_gpus:
            check["gpus"] = list(gpus)
        group = {"hosts": {"localhost": {"ansible_connection": "local",
                                         "ansible_python_interpreter": "{{ ansible_playbook_python }}"}},
                 "vars": {"serving_engine": "command", "serving_model": "standin", "serving_name": name,
                          "serving_port": port, "serving_state_dir": str(self.state_dir),
                          "serving_log_dir": str(tmp_path / "log"), "serving_supervisor": "process",
                          "serving_ready_timeout": 20, "serving_stop_timeout": 5, "serving_progress_delay": 1,
                          "serving_gpu_check": check,
                          "serving_variants": {"fast": {"command": engine(port, 2), "env": env},
                                               "slow": {"command": engine(port, 6), "env": env}}}}
        self.inventory.write_text(yaml.safe_dump({"serving": group}))

    def record(self):
        path = self.state_dir / ("%s.json" % self.name)
        return json.loads(path.read_text()) if path.exists() else None

    def engines(self):
        """The live processes carrying this instance's marker (any version)."""
        return sorted(_marker.carriers(_marker.identity(self.name, str(self.state_dir))))

    def gpus_held(self):
        """{pid: [GPU indices]} as the fake nvidia-smi reports the engines of this instance."""
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader,nounits"],
                             env=dict(os.environ, **self.fake_gpus.env), capture_output=True, text=True,
                             check=True).stdout
        index = dict((g["uuid"], g["index"]) for g in self.fake_gpus.state["gpus"])
        held = {}
        for line in out.splitlines():
            uuid, pid = [f.strip() for f in line.split(",")]
            if int(pid) in self.engines():
                held.setdefault(int(pid), []).append(index[uuid])
        return held

    def answers(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % self.port, timeout=5) as resp:
            return resp.status == 200

    def serving(self, variant, pid=None):
        """The state file names variant and a pid that is the one engine of the instance, owns the port,
        answers and holds exactly its GPUs."""
        record = self.record()
        assert record is not None, "%s: nothing recorded" % self.name
        assert record["variant"] == variant and "loading" not in record, record
        if pid is not None:
            assert record["pid"] == pid, (self.name, record["pid"], pid)
        assert _procs.alive(record["pid"], starttime=record["starttime"])
        assert self.engines() == [record["pid"]], (self.name, self.engines(), record["pid"])
        assert port_owner(self.port) == record["pid"]
        assert self.answers()
        assert self.gpus_held() == {record["pid"]: self.gpus}
        return record

    def gone(self):
        assert self.record() is None, self.record()
        assert self.engines() == [], self.engines()
        assert port_owner(self.port) is None


@pytest.fixture
def host(tmp_path, fake_gpus, run_playbook):
    """Instances on one host: host.instance(name, ...) declares one, host.play(inst, ...) runs a playbook
    for it; everything its runs start is killed at the end."""

    class Host(object):
        def instance(self, name, gpus=None, port=None, **kw):
            return Instance(tmp_path, fake_gpus, name, port or free_port(), gpus or GPUS[name], **kw)

        def play(self, inst, variant=None, playbook=PLAY, **kw):
            extra = {"bench": "never"}
            if variant:
                extra["variant"] = variant
            return run_playbook(playbook, extra_vars=extra, inventory=str(inst.inventory), env=fake_gpus.env, **kw)

        def start(self, inst, variant="fast"):
            run = self.play(inst, variant)
            assert run.rc == 0, run.stdout[-3000:]
            return inst.serving(variant)

    # what the instances leave running is killed at the test's end (conftest ansible_env, tests/support/reaper.py)
    return Host()


def observed(label, **pids):
    print("\nOBSERVED %s: %s" % (label, ", ".join("%s=%s" % kv for kv in sorted(pids.items()))))


def test_b_starts_beside_a_on_its_own_gpus(host):
    a, b = host.instance("a"), host.instance("b")
    a_before = host.start(a)
    b_record = host.start(b)
    a.serving("fast", pid=a_before["pid"])
    assert a.record()["started_at"] == a_before["started_at"]
    observed("b started beside a", a_before=a_before["pid"], a_after=a.record()["pid"], b=b_record["pid"])


@pytest.mark.parametrize("engine", ["vllm_like", "command"])
def test_b_checking_every_gpu_is_refused_naming_a(host, engine):
    """The first row of the issue: b's check of every GPU reclaimed a's engine as a leftover. A plain
    `command` engine (outside reclaim_match) was refused without saying whose it is."""
    make = vllm_like if engine == "vllm_like" else stand_in
    a, b = host.instance("a", engine=make), host.instance("b", check_gpus=False, engine=make)
    a_before = host.start(a)
    run = host.play(b, "fast")
    assert run.rc != 0
    out = flat(run)
    assert ("nothing was stopped: GPUs 0, 1, 2, 3 are held by instance a (pid %d, variant fast): give each instance "
            "its own GPUs (gpu_check.gpus and CUDA_VISIBLE_DEVICES), or stop a" % a_before["pid"]) in out
    assert run.recap()["changed"] == 0
    a.serving("fast", pid=a_before["pid"])
    b.gone()
    observed("b (every GPU checked, %s) refused" % engine, a_before=a_before["pid"], a_after=a.record()["pid"])


def test_switching_a_leaves_b_alone(host):
    a, b = host.instance("a"), host.instance("b")
    a_before, b_before = host.start(a), host.start(b)
    run = host.play(a, "slow")
    assert run.rc == 0, run.stdout[-3000:]
    a_after = a.serving("slow")
    assert a_after["pid"] != a_before["pid"]
    b.serving("fast", pid=b_before["pid"])
    assert b.record()["started_at"] == b_before["started_at"]
    observed("a switched", a_before=a_before["pid"], a_after=a_after["pid"], b_before=b_before["pid"],
             b_after=b.record()["pid"])


def test_stopping_a_leaves_b_alone(host):
    a, b = host.instance("a"), host.instance("b")
    a_before, b_before = host.start(a), host.start(b)
    run = host.play(a, playbook=STOP)
    assert run.rc == 0, run.stdout[-3000:]
    assert "a stopped: the engine was killed by SIGTERM" in flat(run) and "GPUs clean" in flat(run)
    a.gone()
    b.serving("fast", pid=b_before["pid"])
    observed("a stopped", a_before=a_before["pid"], b_before=b_before["pid"], b_after=b.record()["pid"])


def test_stopping_a_that_checks_every_gpu_names_b_and_leaves_it(host):
    """The issue's third row: a's check of every GPU after its stop killed b and said "GPUs clean"."""
    a, b = host.instance("a", check_gpus=False), host.instance("b")
    a_before, b_before = host.start(a), host.start(b)
    plan = host.play(a, playbook=STOP, check=True)
    assert plan.rc != 0
    assert ("GPUs would not be clean after stopping a: GPUs 4, 5, 6, 7 are held by instance b (pid %d, variant "
            "fast): give each instance its own GPUs" % b_before["pid"]) in flat(plan)  # without -v
    a.serving("fast", pid=a_before["pid"])
    b.serving("fast", pid=b_before["pid"])

    run = host.play(a, playbook=STOP)
    assert run.rc != 0
    assert "GPUs not clean after stopping a: GPUs 4, 5, 6, 7 are held by instance b (pid %d" % b_before["pid"] in flat(run)
    check = run.result("inference_server")["gpu_check"]
    assert check["killed"] == [] and not check["clean"]
    a.gone()
    b.serving("fast", pid=b_before["pid"])
    observed("a stopped, every GPU checked", a_before=a_before["pid"], b_before=b_before["pid"],
             b_after=b.record()["pid"])


def test_check_mode_of_a_shows_b_as_the_blocker_and_changes_nothing(host):
    a, b = host.instance("a"), host.instance("b")
    a_before, b_before = host.start(a), host.start(b)
    plan = host.play(a, "slow", check=True)
    assert plan.rc == 0, plan.stdout[-3000:]
    survey = plan.result("inference_server")["gpu_check"]
    assert survey["would_kill"] == [] and [g["index"] for g in survey["gpus"]] == GPUS["a"]

    wide = host.instance("a", check_gpus=False, port=a.port)  # the same instance, its check widened to every GPU
    plan = host.play(wide, "slow", check=True)
    assert plan.rc != 0
    out = flat(plan)
    assert "nothing was stopped: GPUs 4, 5, 6, 7 are held by instance b (pid %d, variant fast)" % b_before["pid"] in out
    assert plan.result("inference_server")["gpu_check"]["would_kill"] == []
    a.serving("fast", pid=a_before["pid"])
    b.serving("fast", pid=b_before["pid"])
    observed("--check of a", a_before=a_before["pid"], a_after=a.record()["pid"], b_before=b_before["pid"],
             b_after=b.record()["pid"])


def test_b_on_gpus_that_overlap_a_is_refused_naming_a(host):
    a, b = host.instance("a"), host.instance("b", gpus=[2, 3, 4, 5])
    a_before = host.start(a)
    run = host.play(b, "fast")
    assert run.rc != 0
    out = flat(run)
    assert ("nothing was stopped: GPUs 2, 3 are held by instance a (pid %d, variant fast): give each instance its "
            "own GPUs (gpu_check.gpus and CUDA_VISIBLE_DEVICES), or stop a" % a_before["pid"]) in out
    a.serving("fast", pid=a_before["pid"])
    b.gone()
    observed("b overlapping a refused", a_before=a_before["pid"], a_after=a.record()["pid"])


def test_b_on_the_port_of_a_is_refused_naming_a(host):
    a = host.instance("a")
    b = host.instance("b", port=a.port)
    a_before = host.start(a)
    run = host.play(b, "fast")
    assert run.rc != 0
    assert ("nothing was stopped: port %d on 127.0.0.1 is taken by instance a (pid %d, variant fast), which is not "
            "instance 'b'" % (a.port, a_before["pid"])) in flat(run)
    a.serving("fast", pid=a_before["pid"])
    assert b.record() is None and b.engines() == []


@pytest.mark.parametrize("version", [1, 2])
def test_a_leftover_of_a_stopped_instance_is_reclaimed(host, tmp_path, version):
    """An engine worker of `a` that outlived a's record (its marker names a, which no longer serves) on
    GPU 1, then b is moved onto a's old GPUs 0-3: b's check reclaims it. Version 1 is the marker of
    engines started before the marker carried its state directory."""
    a = host.instance("a")
    host.start(a)
    assert host.play(a, playbook=STOP).rc == 0
    a.gone()
    marker = _marker.make("a", str(a.state_dir))
    value = marker.value() if version == 2 else marker.identity
    worker = subprocess.Popen(
        [sys.executable, os.path.join(SUPPORT, "gpu_holder.py"), "VLLM::Worker_TP1"],
        env=dict(os.environ, INFEROPS_INSTANCE=value, CUDA_VISIBLE_DEVICES="1", FAKE_GPU_MIB="2048"),
        cwd=str(a.state_dir), start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while a.engines() != [worker.pid] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert a.gpus_held() == {worker.pid: [1]}
        b = host.instance("b", gpus=[0, 1, 2, 3])
        run = host.play(b, "fast")
        assert run.rc == 0, run.stdout[-3000:]
        assert worker.wait(5) == -15  # SIGTERM, from b's reclaim
        checks = [r["result"]["gpu_check"] for r in run.results("inference_server") if r["result"].get("gpu_check")]
        assert checks[-1]["killed"] == [worker.pid]
        b.serving("fast")
        observed("leftover of a (marker v%d) reclaimed" % version, leftover=worker.pid, b=b.record()["pid"])
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
