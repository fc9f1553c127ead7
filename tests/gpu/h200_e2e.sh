#!/usr/bin/env bash
# The whole switch on a real NVIDIA GPU (issue 7), recorded for docs/results/h200/.
#
#   tests/gpu/h200_e2e.sh OUTDIR
#
# Needs: python3 with torch (CUDA), transformers[serving], nvidia-ml-py and ansible-core (on a host
# without a registry, install the wheels first; docs/results/h200/README.md shows the command).
# Steps: build a ~150M-parameter bf16 model; plant an 8 GiB leftover that looks like an SGLang
# process; switch to baseline (the leftover is reclaimed, every GPU verified, bench at 1 and 32);
# switch to batched (bench); drill a rollback with a variant that fails on the GPU; stop and verify
# the GPU clean, with NVML's used vs reserved figures. Everything goes to OUTDIR: run.log, the
# bench_facts results (results/), the release-latency figures (latency.log).
set -euo pipefail
# shellcheck source=tests/gpu/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
play() { echo "### $(date -u +%H:%M:%S) ansible-playbook $*"; ansible-playbook -i tests/gpu/h200_inventory "$@"; }

stamp "the host"
nvidia-smi
nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total --format=csv
"$PY" -c 'import sys, torch, transformers, ansible; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "ansible-core", ansible.__version__)'

stamp "1. build the model"
"$PY" tools/build_tiny_model.py --out "$H200_MODEL" --size small

stamp "2. plant a leftover: 8 GiB held by a process that looks like an SGLang scheduler"
setsid "$PY" tests/gpu/leftover_holder.py --gib 8 --ready "$H200_WORK/leftover.pid" \
  sglang.launch_server --model-path /models/old-variant </dev/null >"$H200_WORK/leftover.log" 2>&1 &
for _ in $(seq 600); do [ -s "$H200_WORK/leftover.pid" ] && break; sleep 0.1; done
LEFTOVER=$(cat "$H200_WORK/leftover.pid")
echo "leftover pid $LEFTOVER: $(tr '\0' ' ' </proc/"$LEFTOVER"/cmdline)"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv

stamp "3. switch to baseline (reclaim, verify, start, bench at 1 and 32)"
play playbooks/switch_variant.yml -e variant=baseline
if kill -0 "$LEFTOVER" 2>/dev/null; then echo "FAIL: the leftover $LEFTOVER still runs"; exit 1; fi
echo "the leftover $LEFTOVER is gone"

stamp "4. switch to batched (continuous batching)"
play playbooks/switch_variant.yml -e variant=batched

stamp "4b. the same again: nothing changes"
play playbooks/switch_variant.yml -e variant=batched -e bench=never

stamp "5. rollback drill: variant broken asks for cuda:7"
if play playbooks/switch_variant.yml -e variant=broken; then echo "FAIL: broken did not fail"; exit 1; fi
"$PY" -c 'import urllib.request; print("GET /health:", urllib.request.urlopen("http://127.0.0.1:18400/health", timeout=10).read().decode())'
"$PY" -c 'import json, sys; s = json.load(open(sys.argv[1])); print("serving now:", s["variant"], s["fingerprint"], "pid", s["pid"])' "$H200_WORK/state/h200.json"
echo "the broken engine's end, as its watchdog recorded it: $(cat "$H200_WORK/state/h200.exit.json")"
ENGINES=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$H200_WORK/state/h200.exit.json")

stamp "6. stop (main process first) and verify the GPU clean"
play playbooks/stop.yml
echo "the stopped engine's end, as its watchdog recorded it: $(cat "$H200_WORK/state/h200.exit.json")"
for pid in $("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$H200_WORK/state/h200.exit.json") $ENGINES; do
  echo "engine pid $pid: $(if [ -e /proc/"$pid" ]; then echo "still in the process table: $(ps -o pid=,ppid=,stat=,comm= -p "$pid")"; else echo "gone, reaped"; fi)"
done
echo "zombies on the host (pid ppid stat comm): $(ps -eo pid=,ppid=,stat=,comm= | awk '$3 ~ /^Z/' | tr '\n' ';')"
"$PY" - <<'PYEOF'
import pynvml
pynvml.nvmlInit()
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    m = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
    print("GPU %d %s: NVML v2 used %d MiB, reserved %d MiB, total %d MiB; v1 used %d MiB; processes %s" % (
        i, pynvml.nvmlDeviceGetName(h), m.used >> 20, m.reserved >> 20, m.total >> 20, v1.used >> 20,
        [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]))
PYEOF
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader
stamp "done"
