#!/usr/bin/env bash
# Every GPU verified, the leftover on the last GPU caught (issue 10), on however many GPUs the host has.
#
#   tests/gpu/multi_gpu.sh OUTDIR
#
# Needs what tests/gpu/h200_e2e.sh needs. On 8 GPUs: pass 1 plants a leftover engine on GPU 7 only
# and a protected process (named nv-hostengine) on GPU 0, pass 2 leftovers on GPUs 3 and 7; each
# time it prints what `nvidia-smi ... | head -2` (the scenario's manual check) would have said,
# then runs playbooks/gpu_check.yml (NVML, reclaim). On fewer GPUs the same passes use the GPUs
# that exist (the last one for "GPU 7"). Then switches variants (tests/gpu/h200_inventory) and
# benchmarks at concurrency 1 and 32. Results and run.log go to OUTDIR.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUTDIR=$(mkdir -p "$1" && cd "$1" && pwd)
PY=${PYTHON:-python3}
export H200_WORK=${H200_WORK:-$OUTDIR/work}
export H200_MODEL=$H200_WORK/model
export H200_TRANSFORMERS=${H200_TRANSFORMERS:-$(dirname "$(command -v transformers)")/transformers}
export INFEROPS_RESULTS_DIR=$OUTDIR/results ANSIBLE_CONFIG=$ROOT/ansible.cfg ANSIBLE_NOCOLOR=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$H200_WORK" "$ROOT/collections/ansible_collections/inferops"
ln -sfn ../../.. "$ROOT/collections/ansible_collections/inferops/serving"
cd "$ROOT"
exec > >(tee -a "$OUTDIR/run.log") 2>&1
stamp() { echo "### $(date -u +%H:%M:%S) $*"; }
COUNT=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
LAST=$((COUNT - 1))
gpu() { if [ "$1" -lt "$COUNT" ]; then echo "$1"; else echo "$LAST"; fi; }
PIDS=()
# a holder runs with another argv[0], so python cannot find its venv from it: name its site-packages
HOLDER_PATH=$("$PY" -c 'import os, site, sys; print(os.pathsep.join(sys.path[1:]))')
hold() {  # hold GPU GIB NAME LABEL... : a real holder; NAME is its argv[0]
  local dev=$1 gib=$2 name=$3; shift 3
  local ready="$H200_WORK/ready-$RANDOM"
  # its own session, like a leftover whose launcher died; argv[0] is NAME
  PYTHONPATH=$HOLDER_PATH setsid bash -c 'name=$1; shift; exec -a "$name" "$@"' holder "$name" "$PY" tests/gpu/leftover_holder.py \
    --gib "$gib" --device "cuda:$dev" --ready "$ready" "$@" </dev/null >>"$H200_WORK/holders.log" 2>&1 &
  for _ in $(seq 600); do [ -s "$ready" ] && break; sleep 0.1; done
  [ -s "$ready" ] || { echo "FAIL: holder on GPU $dev never became ready:"; cat "$H200_WORK/holders.log"; exit 1; }
  PIDS+=("$(cat "$ready")")
  echo "holder pid $(cat "$ready") on GPU $dev ($gib GiB): $(tr '\0' ' ' </proc/"$(cat "$ready")"/cmdline)"
}
alive() { local st; st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1); [ -n "$st" ] && [ "$st" != Z ]; }
manual() {
  echo "the manual check, nvidia-smi --query-gpu=index,memory.used --format=csv,noheader | head -2:"
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader | head -2
  echo "every GPU:"
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader
}
check() { stamp "ansible-playbook playbooks/gpu_check.yml"; ansible-playbook -i tests/gpu/h200_inventory playbooks/gpu_check.yml -e '{"serving_gpu_check": {"backend": "nvml"}}' "$@"; }

stamp "the host: $COUNT GPU(s)"
nvidia-smi -L

stamp "pass 1: a leftover on GPU $(gpu 7) only, a protected nv-hostengine on GPU 0"
hold "$(gpu 7)" 8 python3 sglang.launch_server --model-path /models/old --tp-size 8
LEFT=${PIDS[-1]}
hold 0 1 nv-hostengine
PROT=${PIDS[-1]}
manual
if check; then echo "FAIL: the protected holder did not fail the check"; exit 1; fi
if alive "$LEFT"; then echo "FAIL: leftover $LEFT still runs"; exit 1; fi
alive "$PROT" || { echo "FAIL: protected $PROT was signalled"; exit 1; }
echo "leftover $LEFT reclaimed; protected $PROT untouched and reported"
kill "$PROT"; for _ in $(seq 100); do alive "$PROT" || break; sleep 0.1; done

stamp "pass 2: leftovers on GPUs $(gpu 3) and $(gpu 7)"
hold "$(gpu 3)" 4 python3 vllm serve /models/old
hold "$(gpu 7)" 4 VLLM::EngineCore
manual
check
manual

stamp "switch variants and benchmark"
"$PY" tools/build_tiny_model.py --out "$H200_MODEL" --size small
ansible-playbook -i tests/gpu/h200_inventory playbooks/switch_variant.yml -e variant=baseline
ansible-playbook -i tests/gpu/h200_inventory playbooks/switch_variant.yml -e variant=batched
ansible-playbook -i tests/gpu/h200_inventory playbooks/stop.yml
manual
stamp "done"
