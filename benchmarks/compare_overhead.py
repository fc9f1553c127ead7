# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What compare.yml itself costs per candidate, beyond the engine's start and the benchmark's own time.

usage: python benchmarks/compare_overhead.py [--variants N] [--more M] [--repeats R]

Real ansible-playbook runs of playbooks/compare.yml on localhost over variants of the timing-exact stand-in
engine (tests/support/stream_server.py, ready in well under a second) on 8 fake GPUs, each benchmarked R
times in one throughput_bench call (one level, concurrency 1, 4 requests of 16 tokens), the fastest last
so that keep=best restarts nothing. Two runs, of N and of N + M variants, so that the cost of one more
candidate is told apart from what any run pays once (ansible-playbook's own start, reading the state,
the verdict). For each run: wall time = the engines' ready_s + the benchmark + overhead, where the
benchmark is counted two ways:
  - levels: the levels' measured windows (duration_s) only; the warm-up requests, the model lookup and the
    benchmark module's own start count as overhead (the strictest reading);
  - module: throughput_bench's elapsed_s, the whole call on the target (warm-ups included).
What remains is the comparison's own cost: the switch around each engine (stop, GPU check, launch), the
role's tasks, the async start and polls of the benchmark, the verdict. Per candidate: the difference of the
two runs' overheads / M. Target on this 2-core machine: <= 2 s per candidate, judged on the module reading.
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
    """(Σ ready_s of the engines started, Σ level duration_s, Σ throughput_bench elapsed_s, verdict lines)."""
    ready, levels, module, lines = 0.0, 0.0, 0.0, []
    with open(record) as handle:
        for line in handle:
            rec = json.loads(line)
            result, action = rec["result"], rec["action"]
            if action.endswith(("inference_server", "async_status")) and result.get("changed") and result.get("ready_s"):
                ready += result["ready_s"]
            if action.endswith("async_status") and isinstance(result.get("results"), list):
                levels += sum(level.get("duration_s") or 0.0 for level in result["results"])
                module += result.get("elapsed_s") or 0.0
            if action.endswith("debug") and "Say which variant" in rec["task"]:
                lines = result.get("msg") or []
    return ready, levels, module, lines


def measure(count, repeats):
    """One compare.yml run over count variants: (wall, ready, levels, module, verdict lines)."""
    tmp = tempfile.mkdtemp(prefix="inferops-cmp-overhead-")
    env = fake_gpus(tmp)
    inv, names = inventory(tmp, free_port(), count)
    record = os.path.join(tmp, "record.jsonl")
    try:
        wall, _out = run(inv, env, "compare.yml", {"variants": names, "repeats": repeats}, record)
        return (wall,) + parts(record)
    finally:
        run(inv, env, "stop.yml", {}, os.path.join(tmp, "stop.jsonl"))
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=2)
    parser.add_argument("--more", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    runs = {}
    for count in (args.variants, args.variants + args.more):
        wall, ready, levels, module, lines = measure(count, args.repeats)
        runs[count] = (wall - ready - levels, wall - ready - module)
        for line in lines:
            print(line)
        print("compare of %d variants x %d repeats: %.2f s wall = engines ready %.2f s + benchmark %.2f s (levels; "
              "module %.2f s) + overhead %.2f s (levels; module %.2f s)"
              % (count, args.repeats, wall, ready, levels, module, runs[count][0], runs[count][1]))
    small, large = runs[args.variants], runs[args.variants + args.more]
    strict, per = (large[0] - small[0]) / args.more, (large[1] - small[1]) / args.more
    fixed = small[1] - per * args.variants
    print("overhead per candidate %.2f s beyond the engine's start and the benchmark module (%.2f s beyond the levels' "
          "windows alone); once per run %.2f s (target <= 2 s per candidate) -> %s"
          % (per, strict, fixed, "OK" if per <= 2 else "MISSED"))
    print("load average at the end: %.2f on %d cores" % (os.getloadavg()[0], os.cpu_count() or 0))


if __name__ == "__main__":
    main()
