# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What compare.yml itself costs per candidate, beyond the engine's start and the benchmark's own time.

usage: python benchmarks/compare_overhead.py [--variants N] [--repeats R]

One real ansible-playbook run of playbooks/compare.yml on localhost over N variants of the timing-exact
stand-in engine (tests/support/stream_server.py, ready in well under a second) on 8 fake GPUs, each
benchmarked R times (one level, concurrency 1, 4 requests of 16 tokens), the fastest last so that
keep=best restarts nothing. The overhead per candidate is (wall time of the run - the engines' ready_s
- the benchmark levels' duration_s) / N: resolve, preflight, stop, GPU check, the role's waits, the
benchmark's start and polls, the verdict. The benchmark's warm-up requests count as overhead here (an
upper bound). Target on this 2-core machine: <= 2 s per candidate. Prints the parts and the result.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from switch_overhead import BIN, ROOT, SUPPORT, fake_gpus, free_port  # noqa: E402  pylint: disable=wrong-import-position


def inventory(tmp, port, count):
    def stand_in(step_ms):
        return [sys.executable, os.path.join(SUPPORT, "stream_server.py"), "--port", str(port),
                "--model", "standin", "--ttft-ms", "5", "--step-ms", str(step_ms)]
    variants = dict(("v%d" % i, {"command": stand_in(2 + count - i)}) for i in range(count))  # v{count-1} fastest
    group = {
        "hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"serving_engine": "command", "serving_model": "standin", "serving_name": "cmpoverhead",
                 "serving_port": port, "serving_state_dir": os.path.join(tmp, "state"),
                 "serving_log_dir": os.path.join(tmp, "log"), "serving_supervisor": "process",
                 "serving_ready_timeout": 30, "serving_stop_timeout": 5, "serving_progress_delay": 1,
                 "serving_gpu_check": {"backend": "nvidia_smi", "timeout": 10, "kill_grace": 2},
                 "serving_bench": {"concurrency": [1], "requests_per_level": 4, "input_tokens": 8,
                                   "output_tokens": 16, "warmup": 1},
                 "serving_variants": variants},
    }
    path = os.path.join(tmp, "inventory.yml")
    with open(path, "w") as handle:
        yaml.safe_dump({"serving": group}, handle)
    return path, list(variants)


def run(inv, env, playbook, extra, record):
    run_env = dict(os.environ, **env)
    run_env.update({"ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                    "ANSIBLE_CALLBACK_PLUGINS": os.path.join(SUPPORT, "callback"),
                    "ANSIBLE_CALLBACKS_ENABLED": "record", "INFEROPS_TEST_RECORD": record})
    argv = [os.path.join(BIN, "ansible-playbook"), "-i", inv, os.path.join(ROOT, "playbooks", playbook),
            "-e", json.dumps(extra)]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=run_env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit("%s failed (rc=%d):\n%s" % (" ".join(argv), proc.returncode, proc.stdout[-3000:]))
    return wall, proc.stdout


def parts(record):
    """(Σ ready_s of the engines started, Σ duration_s of the benchmark levels, verdict lines) from the record."""
    ready, bench, lines = 0.0, 0.0, []
    with open(record) as handle:
        for line in handle:
            rec = json.loads(line)
            result, action = rec["result"], rec["action"]
            if action.endswith(("inference_server", "async_status")) and result.get("changed") and result.get("ready_s"):
                ready += result["ready_s"]
            if action.endswith("async_status") and isinstance(result.get("results"), list):
                bench += sum(level.get("duration_s") or 0.0 for level in result["results"])
            if action.endswith("debug") and "Say which variant" in rec["task"]:
                lines = result.get("msg") or []
    return ready, bench, lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="inferops-cmp-overhead-")
    env = fake_gpus(tmp)
    inv, names = inventory(tmp, free_port(), args.variants)
    record = os.path.join(tmp, "record.jsonl")
    try:
        wall, _out = run(inv, env, "compare.yml", {"variants": names, "repeats": args.repeats}, record)
        ready, bench, lines = parts(record)
    finally:
        run(inv, env, "stop.yml", {}, os.path.join(tmp, "stop.jsonl"))
        shutil.rmtree(tmp, ignore_errors=True)
    for line in lines:
        print(line)
    per = (wall - ready - bench) / args.variants
    print("compare of %d variants x %d repeats: %.2f s wall = engines ready %.2f s + benchmark levels %.2f s + overhead %.2f s"
          % (args.variants, args.repeats, wall, ready, bench, wall - ready - bench))
    print("overhead per candidate %.2f s (target <= 2 s) -> %s" % (per, "OK" if per <= 2 else "MISSED"))
    print("load average at the end: %.2f on %d cores" % (os.getloadavg()[0], os.cpu_count() or 0))


if __name__ == "__main__":
    main()
