# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Time from the last GPU holder's exit to gpu_idle_check's success.

usage: python benchmarks/release_latency.py [--backend nvidia_smi|nvml] [--runs N] [--poll S]

A real process holds the GPU (on a CPU host: the fake nvidia-smi of tests/support reports it while
it lives; on a GPU host with --backend nvml or --real-smi: it really allocates memory with torch).
The check polls in a thread; the holder is SIGKILLed and reaped at t0 (its exit; the kill-to-reaped
time, which the kernel spends tearing the process down, is printed apart); the check returns at t1.
Prints t1 - t0 per run and the median. Targets: <= 0.2 s with the CSV backend, <= 0.1 s with NVML.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUPPORT = os.path.join(ROOT, "tests", "support")


def collection_path():
    """A directory holding ansible_collections/inferops/serving -> this checkout."""
    base = tempfile.mkdtemp(prefix="inferops-coll-")
    os.makedirs(os.path.join(base, "ansible_collections", "inferops"))
    os.symlink(ROOT, os.path.join(base, "ansible_collections", "inferops", "serving"))
    return base


sys.path.insert(0, collection_path())
sys.path.insert(0, SUPPORT)
import fake_nvidia_smi  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.inferops.serving.plugins.module_utils import _gpu, _idle_check  # noqa: E402


def run_cmd(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def fake_smi(tmp):
    """Put the fake nvidia-smi on PATH; return (state file, binary)."""
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir)
    binary = fake_nvidia_smi.install(bindir)
    state = os.path.join(tmp, "state.json")
    os.environ["FAKE_NVIDIA_SMI_STATE"] = state
    with open(state, "w") as handle:
        json.dump({"gpus": [{"index": 0, "uuid": "GPU-00000000-bench", "memory_total_mib": 143771}]}, handle)
    return state, binary


def start_holder(args, state):
    ready = os.path.join(tempfile.mkdtemp(prefix="holder-"), "ready")
    if args.backend == "nvml" or args.real_smi:
        code = ("import os, sys, time, torch; x = torch.empty(%d, dtype=torch.uint8, device='cuda:0'); "
                "torch.cuda.synchronize(); open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(3600)"
                % (args.hold_mib * 1024 * 1024))
        child = subprocess.Popen([sys.executable, "-c", code, ready])
    else:
        child = subprocess.Popen([sys.executable, os.path.join(SUPPORT, "gpu_holder.py"), "--ready", ready])
    deadline = time.monotonic() + 120
    while not os.path.exists(ready) and time.monotonic() < deadline:
        time.sleep(0.01)
    if state:
        with open(state, "w") as handle:
            json.dump({"gpus": [{"index": 0, "uuid": "GPU-00000000-bench", "memory_total_mib": 143771}],
                       "holders": [{"pid": child.pid, "gpu": 0, "used_mib": args.hold_mib}]}, handle)
    return child


def one_run(args, backend, state):
    child = start_holder(args, state)
    check = _idle_check.IdleCheck(backend, [0], max_used_mib=args.max_used_mib, timeout=60,
                                  poll_interval=args.poll)
    first = backend.snapshot([0])[0]
    assert first["processes"], "the holder is not seen on GPU 0: %s" % first
    done = {}

    def target():
        done["result"] = check.run()
        done["t1"] = time.monotonic()
    thread = threading.Thread(target=target)
    thread.start()
    time.sleep(0.3)  # the check is polling a dirty GPU
    kill = time.monotonic()
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    t0 = time.monotonic()  # the holder has exited (reaped): its memory is the driver's to free now
    thread.join(60)
    assert done["result"]["clean"]
    return done["t1"] - t0, t0 - kill


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["nvidia_smi", "nvml"], default="nvidia_smi")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--poll", type=float, default=0.1, help="poll_interval (default: the module's 0.1 s)")
    parser.add_argument("--hold-mib", type=int, default=8192)
    parser.add_argument("--max-used-mib", type=int, default=0)
    parser.add_argument("--real-smi", action="store_true", help="use the real nvidia-smi on PATH, not the fake")
    args = parser.parse_args()

    state = None
    if args.backend == "nvml":
        import pynvml  # pylint: disable=import-error
        backend = _gpu.NvmlBackend(pynvml)
    else:
        if args.real_smi:
            binary = "nvidia-smi"
        else:
            state, binary = fake_smi(tempfile.mkdtemp(prefix="inferops-latency-"))
        backend = _gpu.SmiBackend(run_cmd, binary)
    start = time.monotonic()
    backend.snapshot([0], health=False)
    per_snapshot = time.monotonic() - start
    runs = [one_run(args, backend, state) for _run in range(args.runs)]
    times = [after_exit for after_exit, _exit_s in runs]
    target = 0.1 if args.backend == "nvml" else 0.2
    print("backend=%s%s poll_interval=%.3fs one polling read=%.1f ms"
          % (args.backend, "" if args.real_smi or args.backend == "nvml" else " (fake nvidia-smi)", args.poll,
             per_snapshot * 1000))
    print("holder exit (SIGKILL to reaped) per run (s): %s" % " ".join("%.3f" % e for _t, e in runs))
    print("release latency (holder exited to check clean) per run (s): %s" % " ".join("%.3f" % t for t in times))
    print("median %.3f s  max %.3f s  target <= %.1f s  -> %s"
          % (statistics.median(times), max(times), target, "OK" if statistics.median(times) <= target else "MISSED"))
    backend.close()


if __name__ == "__main__":
    main()
