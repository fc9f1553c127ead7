# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/switch_variant.yml, stop.yml and bench.yml through real ansible-playbook runs.

The fast cases serve the timing-exact stand-in (tests/support/stream_server.py) and the failing
engines of tests/support/fake_engine.py as `engine: command` variants, on 8 fake GPUs (the fake
nvidia-smi). One case switches the real `transformers serve` engine from baseline to batched.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest
import yaml
from switchbed import (BENCH, PLAY, ROOT, STOP, benchmarked, fleet, gpu_check_of, levels_of,  # noqa: F401 pylint: disable=unused-import
                       served, switch)

from ansible_collections.inferops.serving.plugins.module_utils import _procs


def test_switch_reclaims_leftover_benchmarks_then_rerun_changes_nothing(switch, fleet, tmp_path):
    leftover = fleet.gpus.hold(7, args=["vllm", "serve", "old-model"])
    results = tmp_path / "results"
    first = switch("fast", env={"ANSIBLE_CALLBACKS_ENABLED": "record,inferops.serving.bench_facts",
                                "INFEROPS_RESULTS_DIR": str(results)})
    assert first.rc == 0, first.stdout[-3000:]
    gpu = gpu_check_of(first)
    assert gpu["clean"] and len(gpu["gpus"]) == 8 and gpu["killed"] == [leftover.pid]
    run_file, = results.glob("*-switch_variant.json")
    recorded, = json.loads(run_file.read_text())["hosts"]["localhost"]["gpu_checks"]  # bench_facts has it too
    assert recorded["task"].endswith("(gpu_check)") and recorded["killed"] == [leftover.pid]
    assert leftover.wait(10) is not None  # the leftover on GPU 7 was really terminated
    assert first.recap()["changed"] == 1 and first.recap()["failed"] == 0  # the one converge call
    levels = levels_of(first)
    assert [lvl["concurrency"] for lvl in levels] == [1, 4]
    assert all(lvl["completed"] == 8 and lvl["failed"] == 0 for lvl in levels)
    record = fleet.record()
    assert record["variant"] == "fast" and record["argv"][-1] == "2"
    labels = dict(levels[0]["labels"])
    assert labels.pop("bench").startswith("bench:")  # the benchmark's digest: the regression gate's window key
    assert labels == {"host": "localhost", "variant": "fast", "fingerprint": record["fingerprint"]}
    pid = fleet.pid()

    again = switch("fast")
    assert again.rc == 0, again.stdout[-3000:]
    assert again.recap()["changed"] == 0
    assert "serves it already, healthy: nothing to change" in again.stdout
    assert not benchmarked(again) and gpu_check_of(again) is None
    assert fleet.pid() == pid

    forced = switch("fast", extra={"bench": "always"})
    assert forced.rc == 0 and forced.recap()["changed"] == 0
    assert levels_of(forced)
    assert fleet.pid() == pid


def test_switch_to_another_variant_stops_the_old_one(switch, fleet):
    first = switch("fast", extra={"bench": "never"})
    assert first.rc == 0, first.stdout[-3000:]
    assert "started, nothing recorded before: nothing runs" in first.stdout
    old = fleet.pid()
    run = switch("slow", extra={"bench": "never"})
    assert run.rc == 0, run.stdout[-3000:]
    assert "switched from fast: the configuration changed" in run.stdout
    assert not _procs.alive(old) and fleet.pid() != old
    record = fleet.record()
    assert record["variant"] == "slow" and record["argv"][-1] == "6"
    assert "chain: fast <- slow" not in run.stdout and "variant slow (fast <- slow)" in run.stdout
    assert fleet.health() == 200


ROLE_PLAY = """\
- name: Serve the variant the play names
  hosts: serving
  gather_facts: false
  roles:
    - role: inferops.serving.serve_variant
      %s
"""


def test_the_role_serves_its_argument_not_the_extra_var(switch, fleet):
    # serve_variant_wanted is the role's argument: a play that gives it serves that variant whatever -e variant says
    run = switch("slow", playbook=ROLE_PLAY % "serve_variant_wanted: fast", extra={"bench": "never"})
    assert run.rc == 0, run.stdout[-3000:]
    record = fleet.record()
    assert record["variant"] == "fast" and record["argv"][-1] == "2"
    assert _procs.alive(record["pid"]) and fleet.health() == 200
    # the deprecated argument `variant` still works where serve_variant_wanted is not given
    old = record["pid"]
    run = switch(playbook=ROLE_PLAY % "variant: slow", extra={"bench": "never"})
    assert run.rc == 0, run.stdout[-3000:]
    assert "switched from fast: the configuration changed" in run.stdout
    record = fleet.record()
    assert record["variant"] == "slow" and record["argv"][-1] == "6"
    assert not _procs.alive(old) and _procs.alive(record["pid"]) and fleet.health() == 200


def test_same_variant_that_stopped_answering_is_restarted(switch, fleet):
    assert switch("fast", extra={"bench": "never"}).rc == 0
    old = fleet.pid()
    os.killpg(old, signal.SIGSTOP)  # hung: alive, but it answers nothing (the process supervisor's pgid is its pid)
    try:
        run = switch("fast", extra={"bench": "never"})
    finally:
        if _procs.alive(old):
            os.killpg(old, signal.SIGCONT)
    assert run.rc == 0, run.stdout[-3000:]
    assert run.recap()["changed"] == 1
    assert "switched from fast: it runs with this configuration but does not answer" in " ".join(run.stdout.split())
    assert not _procs.alive(old) and fleet.pid() != old and fleet.health() == 200
    assert fleet.record()["variant"] == "fast"


def test_input_the_module_refuses_leaves_the_running_server_alone(switch, fleet):
    assert switch("fast", extra={"bench": "never"}).rc == 0
    pid = fleet.pid()
    run = switch("slow", extra={"serving_port": 70000})
    assert run.rc != 0
    out = " ".join(run.stdout.split())
    assert "port must be between 1 and 65535, got 70000" in out
    assert out.endswith("| nothing was stopped") or "| nothing was stopped " in out
    assert "ROLLED BACK" not in out
    assert run.recap()["changed"] == 0
    assert fleet.pid() == pid and fleet.health() == 200 and fleet.record()["variant"] == "fast"


@pytest.mark.parametrize("variant, expect", [
    ("nope", "unknown variant 'nope'; known variants: crash, fast, hang, slow"),
    (None, "no variant given: pass -e variant=NAME; known variants: crash, fast, hang, slow"),
])
def test_bad_variant_fails_listing_variants_and_leaves_the_server_alone(switch, fleet, variant, expect):
    assert switch("fast", extra={"bench": "never"}).rc == 0
    pid = fleet.pid()
    run = switch(variant)
    assert run.rc != 0
    assert expect in run.stdout
    assert run.recap()["changed"] == 0
    assert fleet.pid() == pid and _procs.alive(pid) and fleet.health() == 200
    assert fleet.record()["variant"] == "fast"


def test_broken_catalog_is_refused_before_anything_runs(switch, fleet):
    broken = {"serving_variants": {"a": {"extends": "b", "command": ["x"]}, "b": {"extends": "a"},
                                   "c": {"engine": "tgi", "model": "m"}}}
    run = switch("a", extra=broken)
    assert run.rc != 0
    assert "extends forms a cycle: a -> b -> a" in run.stdout
    assert "engine 'tgi' is not one of sglang, vllm, trtllm, transformers, command" in run.stdout
    assert not run.results("inference_server") and fleet.record() is None


@pytest.mark.parametrize("variant, reason", [
    pytest.param("crash", "exited with code 3 before it was ready", marks=pytest.mark.smoke),
    ("hang", "was not ready within ready_timeout=3.0s"),
])
def test_failing_variant_is_rolled_back_to_the_previous_one(switch, fleet, variant, reason):
    assert switch("fast", extra={"bench": "never"}).rc == 0
    before = fleet.record()
    run = switch(variant)
    assert run.rc != 0
    out = " ".join(run.stdout.split())
    assert "Variant %s failed on localhost" % variant in out
    assert reason in out
    assert "ROLLED BACK: fast serves again" in out
    assert run.recap()["changed"] >= 1  # something was stopped and started: the recap says so
    if variant == "crash":
        assert "engine log tail:" in out and "RuntimeError: fake engine cannot load standin" in out
    after = fleet.record()
    assert (after["variant"], after["fingerprint"]) == (before["variant"], before["fingerprint"])
    assert after["pid"] != before["pid"]  # the previous variant was started again
    assert fleet.health() == 200
    assert not benchmarked(run)


def test_stop_verifies_gpus_and_bench_needs_something_serving(switch, fleet):
    assert switch("fast", extra={"bench": "never"}).rc == 0
    pid = fleet.pid()
    bench = switch(playbook=BENCH)
    assert bench.rc == 0, bench.stdout[-3000:]
    labels = levels_of(bench)[0]["labels"]
    assert labels["variant"] == "fast"
    stop = switch(playbook=STOP)
    assert stop.rc == 0 and stop.recap()["changed"] >= 1
    assert not _procs.alive(pid) and fleet.record() is None
    gpu = stop.result("inference_server")["gpu_check"]
    assert gpu["clean"] and len(gpu["gpus"]) == 8
    ended = stop.result("inference_server")["stopped_exit"]  # the stand-in has no SIGTERM handler
    assert ended["signal"] == "SIGTERM", ended
    said = " ".join(stop.stdout.split())
    assert "sv stopped: the engine was killed by SIGTERM at %s; GPUs clean" % ended["ended_at"] in said, said[-2000:]
    again = switch(playbook=STOP)
    assert again.rc == 0 and "sv was not running; GPUs clean" in " ".join(again.stdout.split())
    nothing = switch(playbook=BENCH)
    assert nothing.rc != 0 and "Nothing serves on localhost" in nothing.stdout


def test_check_mode_on_the_example_inventory_shows_the_nextn_argv(run_playbook, fake_gpus, tmp_path):
    run = run_playbook(PLAY, check=True, diff=True, inventory=os.path.join(ROOT, "inventories", "example"),
                       extra_vars={"variant": "nextn", "ansible_connection": "local",
                                   "ansible_python_interpreter": sys.executable,
                                   "serving_state_dir": str(tmp_path / "state"),
                                   "serving_log_dir": str(tmp_path / "log")},
                       env=fake_gpus.env)
    # this machine has no /opt/sglang: the plan names that blocker (a real run would stop nothing) and the argv
    assert run.rc != 0
    plan = run.results("inference_server")[0]["result"]
    assert plan["outcome"] == "nothing_stopped"
    assert plan["blockers"] == ["the engine's launcher /opt/sglang/bin/python does not exist"]
    assert "nothing was stopped: the engine's launcher /opt/sglang/bin/python does not exist" in run.stdout
    argv = plan["argv"]
    assert argv[:4] == ["/opt/sglang/bin/python", "-m", "sglang.launch_server", "--model-path"]
    for flag, value in (("--tensor-parallel-size", "8"), ("--speculative-algorithm", "NEXTN"), ("--speculative-num-steps", "5"),
                        ("--speculative-num-draft-tokens", "6"), ("--moe-runner-backend", "flashinfer_cutlass"),
                        ("--fp4-gemm-backend", "flashinfer_cudnn")):
        assert argv[argv.index(flag) + 1] == value, (flag, argv)
    assert len(gpu_check_of(run)["gpus"]) == 8
    assert not (tmp_path / "state").exists() or not os.listdir(str(tmp_path / "state"))


LOCAL_CATALOG = yaml.safe_load(open(os.path.join(ROOT, "inventories", "local", "group_vars", "serving.yml")))["serving_variants"]


@pytest.mark.smoke
@pytest.mark.timeout(600)  # a long flow: several minutes on a loaded 2-core machine
def test_real_transformers_engine_baseline_to_batched(run_playbook, tiny_model, tmp_path, port):
    extra = {"serving_model": tiny_model, "serving_port": port,
             "serving_state_dir": str(tmp_path / "state"), "serving_log_dir": str(tmp_path / "log"),
             "serving_bench": {"concurrency": [1, 4], "requests_per_level": 4, "input_tokens": 16,
                               "output_tokens": 16, "ignore_eos": False, "warmup": 0}}
    try:
        base = run_playbook(PLAY, extra_vars=dict(extra, variant="baseline"))
        assert base.rc == 0, base.stdout[-3000:]
        batched = run_playbook(PLAY, extra_vars=dict(extra, variant="batched"))
        assert batched.rc == 0, batched.stdout[-3000:]
        server = served(batched)
        assert "--continuous-batching" in server["argv"] and server["ready_s"] > 0
        levels = levels_of(batched)
        assert all(lvl["completed"] == 4 and lvl["failed"] == 0 for lvl in levels)
        assert all(lvl["labels"]["variant"] == "batched" for lvl in levels)
        print("real engine: batched ready in %.1fs; %s" % (server["ready_s"], ", ".join(
            "c=%d %.1f tok/s" % (lvl["concurrency"], lvl["output_throughput"]) for lvl in levels)))
        again = run_playbook(PLAY, extra_vars=dict(extra, variant="batched"))
        assert again.rc == 0 and again.recap()["changed"] == 0
        # a flag the real engine does not take is found in its own --help before the stop: batched keeps serving
        pid = served(batched)["pid"]
        catalog = dict(LOCAL_CATALOG, typo={"extends": "batched", "engine_args": {"continous_batching": True}})
        typo = run_playbook(PLAY, extra_vars=dict(extra, variant="typo", serving_variants=catalog))
        assert typo.rc != 0
        out = " ".join(typo.stdout.split())
        assert "nothing was stopped: engine transformers %s does not accept --continous-batching: it is not among " \
               "the flags its --help lists; nearest: --continuous-batching" % server["engine_version"] in out, out[-3000:]
        assert _procs.alive(pid) and typo.recap()["changed"] == 0
        state = json.load(open(os.path.join(extra["serving_state_dir"], "demo.json")))
        assert state["pid"] == pid and state["variant"] == "batched"
    finally:
        run_playbook(STOP, extra_vars=extra)
