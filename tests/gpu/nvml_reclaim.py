# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""On a real NVIDIA host: the NVML backend sees a process that really holds GPU memory, then reclaims it.

usage: python tests/gpu/nvml_reclaim.py   (needs torch with CUDA and nvidia-ml-py)
Prints NVML's view before and after (used v2 vs reserved), what was killed and how long it took.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
base = tempfile.mkdtemp(prefix="inferops-coll-")
os.makedirs(os.path.join(base, "ansible_collections", "inferops"))
os.symlink(ROOT, os.path.join(base, "ansible_collections", "inferops", "serving"))
sys.path.insert(0, base)
from ansible_collections.inferops.serving.plugins.module_utils import _gpu, _idle_check  # noqa: E402

import pynvml  # noqa: E402  pylint: disable=import-error


def show(label, gpus):
    for g in gpus:
        print("%s GPU %d %s %s: used(v2)=%s MiB reserved=%s MiB total=%s MiB processes=%s clean=%s health=%s"
              % (label, g["index"], g["name"], g["uuid"], g["memory_used_mib"], g["memory_reserved_mib"],
                 g["memory_total_mib"], [(p["pid"], p["name"], p["used_mib"], p.get("verdict")) for p in g["processes"]],
                 g.get("clean"), g["health"].get("problems", g["health"])))


def main():
    backend = _gpu.NvmlBackend(pynvml)
    indices = backend.indices()
    show("idle", backend.snapshot(indices))
    ready = os.path.join(tempfile.mkdtemp(), "ready")
    code = ("import os, sys, time, torch; x = torch.empty(8 << 30, dtype=torch.uint8, device='cuda:0'); "
            "torch.cuda.synchronize(); open(sys.argv[1], 'w').write('1'); time.sleep(3600)")
    # argv carries 'vllm' so the default reclaim_match puts it in scope, like a leftover engine
    holder = subprocess.Popen([sys.executable, "-c", code, ready, "vllm", "serve", "leftover"], start_new_session=True)
    while not os.path.exists(ready):
        time.sleep(0.05)
    check = _idle_check.IdleCheck(backend, indices, timeout=2, poll_interval=0.01)
    try:
        check.run()
        print("UNEXPECTED: clean while the holder lives")
    except _idle_check.CheckFailed as exc:
        print("without reclaim: FAILED as expected:", exc.msg)
    check = _idle_check.IdleCheck(backend, indices, reclaim=True, timeout=30, poll_interval=0.01, kill_grace=5)
    start = time.monotonic()
    result = check.run()
    print("reclaim: clean=%s killed=%s holder pid=%d exit=%s waited_s=%s wall=%.3fs"
          % (result["clean"], result["killed"], holder.pid, holder.wait(10), result["waited_s"], time.monotonic() - start))
    show("after", result["gpus"])
    backend.close()


if __name__ == "__main__":
    main()
