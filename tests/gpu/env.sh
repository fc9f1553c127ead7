# shellcheck shell=bash
# Sourced by the scripts of tests/gpu (after `set -euo pipefail`, with $1 = OUTDIR): the paths and
# environment of a run on a GPU host, the collection link, the log, and `stamp`.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUTDIR=$(mkdir -p "$1" && cd "$1" && pwd)
PY=${PYTHON:-python3}
export H200_WORK=${H200_WORK:-$OUTDIR/work}
export H200_MODEL=$H200_WORK/model
export H200_TRANSFORMERS=${H200_TRANSFORMERS:-$(dirname "$(command -v transformers)")/transformers}
export INFEROPS_RESULTS_DIR=$OUTDIR/results ANSIBLE_CONFIG=$ROOT/ansible.cfg ANSIBLE_NOCOLOR=1 PYTHONUNBUFFERED=1
# never NVLink multicast, on any number of GPUs
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$H200_WORK" "$ROOT/collections/ansible_collections/inferops"
ln -sfn ../../.. "$ROOT/collections/ansible_collections/inferops/serving"
cd "$ROOT"
exec > >(tee -a "$OUTDIR/run.log") 2>&1
stamp() { echo "### $(date -u +%H:%M:%S) $*"; }
