# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What switch_variant.yml itself costs: a switch minus the engine's own time to ready, and a no-op re-run.

usage: python benchmarks/switch_overhead.py [--runs N]

Real ansible-playbook runs of playbooks/switch_variant.yml on localhost, switching between two
variants of the timing-exact stand-in engine (tests/support/stream_server.py, ready in well under
a second) on 8 fake GPUs (the fake nvidia-smi of tests/support), benchmark off. For each switch:
wall time of the whole ansible-playbook process minus the `ready_s` the engine took (as measured
by inference_server), i.e. validate + plan + stop + GPU check + start + the readiness wait of the
role. Then the idempotent re-run (nothing to change). Targets on this 2-core machine: switch
overhead <= 2 s, re-run <= 3 s. Prints each run and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUPPORT = os.path.join(ROOT, "tests", "support")
BIN = os.path.dirname(sys.executable)
sys.path.insert(0, SUPPORT)
import fake_nvidia_smi  # noqa: E402  pylint: disable=wrong-import-position


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fake_gpus(tmp):
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir)
    fake_nvidia_smi.install(bindir)
    state = os.path.join(tmp, "gpus.json")
    with open(state, "w") as handle:
        json.dump({"driver": True, "holders": [],
                   "gpus": [{"index": i, "uuid": "GPU-%08x-bench" % i, "name": "NVIDIA H200",
                             "memory_total_mib": 143771, "memory_used_mib": 0} for i in range(8)]}, handle)
    return {"PATH": bindir + os.pathsep + BIN + os.pathsep + os.environ.get("PATH", ""),
            "FAKE_NVIDIA_SMI_STATE": state}


def inventory(tmp, port):
    def stand_in(step_ms):
        return [sys.executable, os.path.join(SUPPORT, "stream_server.py"), "--port", str(port),
                "--model", "standin", "--ttft-ms", "5", "--step-ms", str(step_ms)]
    group = {
        "hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"serving_engine": "command", "serving_model": "standin", "serving_name": "overhead",
                 "serving_port": port, "serving_state_dir": os.path.join(tmp, "state"),
                 "serving_log_dir": os.path.join(tmp, "log"), "serving_supervisor": "process",
                 "serving_ready_timeout": 30, "serving_stop_timeout": 5,
                 "serving_gpu_check": {"backend": "nvidia_smi", "timeout": 10, "kill_grace": 2},
                 "serving_bench_enabled": False,
                 "serving_variants": {"a": {"command": stand_in(2)}, "b": {"command": stand_in(3)}}},
    }
    path = os.path.join(tmp, "inventory.yml")
    with open(path, "w") as handle:
        yaml.safe_dump({"serving": group}, handle)
    return path


def play(inv, env, variant, playbook="switch_variant.yml"):
    """(wall seconds, ready_s of a start or None, stdout) of one ansible-playbook run."""
    record = os.path.join(os.path.dirname(inv), "record-%d.jsonl" % time.monotonic_ns())
    run_env = dict(os.environ, **env)
    run_env.update({"ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                    "ANSIBLE_CALLBACK_PLUGINS": os.path.join(SUPPORT, "callback"),
                    "ANSIBLE_CALLBACKS_ENABLED": "record", "INFEROPS_TEST_RECORD": record})
    argv = [os.path.join(BIN, "ansible-playbook"), "-i", inv, os.path.join(ROOT, "playbooks", playbook),
            "-e", "variant=%s" % variant]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=run_env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit("%s failed (rc=%d):\n%s" % (" ".join(argv), proc.returncode, proc.stdout[-3000:]))
    ready = None
    if os.path.exists(record):
        with open(record) as handle:
            for line in handle:
                rec = json.loads(line)
                # the start (or, for a long load, the async_status poll that saw it ready) reports ready_s
                if (rec["action"].endswith(("inference_server", "async_status")) and rec["status"] == "ok"
                        and rec["result"].get("healthy") and rec["result"].get("ready_s") is not None):
                    ready = rec["result"]["ready_s"]
    return wall, ready, proc.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="inferops-overhead-")
    env = fake_gpus(tmp)
    inv = inventory(tmp, free_port())
    switches, reruns = [], []
    try:
        play(inv, env, "a")  # the first start (nothing to stop), not counted
        for run in range(args.runs):
            variant = "b" if run % 2 == 0 else "a"
            wall, ready, _out = play(inv, env, variant)
            switches.append((wall, ready))
            wall_again, _ready, out = play(inv, env, variant)
            assert "changed=0" in out, out[-2000:]
            reruns.append(wall_again)
            print("switch to %s: %.2f s wall, engine ready in %.2f s -> overhead %.2f s; re-run %.2f s"
                  % (variant, wall, ready, wall - ready, wall_again), flush=True)
    finally:
        play(inv, env, "a", playbook="stop.yml")
        shutil.rmtree(tmp, ignore_errors=True)
    overhead = statistics.median(w - r for w, r in switches)
    rerun = statistics.median(reruns)
    load = os.getloadavg()[0]
    print("median switch overhead %.2f s (target <= 2 s) -> %s" % (overhead, "OK" if overhead <= 2 else "MISSED"))
    print("median idempotent re-run %.2f s (target <= 3 s) -> %s" % (rerun, "OK" if rerun <= 3 else "MISSED"))
    print("load average at the end: %.2f on %d cores" % (load, os.cpu_count() or 0))


if __name__ == "__main__":
    main()
