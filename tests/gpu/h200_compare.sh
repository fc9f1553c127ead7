#!/usr/bin/env bash
# Compare and tune on a real NVIDIA GPU (issue 19), recorded for docs/results/h200-compare/.
#
#   tests/gpu/h200_compare.sh OUTDIR
#   COMPARE_ORDER=interleaved REPEATS=4 REQUESTS=8 WARMUP_TOLERANCE=0.1 WARMUP_MAX_S=30 TUNE=0 tests/gpu/h200_compare.sh OUTDIR
#   COMPARE_UNTIL=decided COMPARE_BUDGET_S=360 REPEATS=2 MAX_REPEATS=10 TUNE=0 tests/gpu/h200_compare.sh OUTDIR
#
# Needs what tests/gpu/h200_e2e.sh needs. Steps: build the ~150M-parameter bf16 model; compare baseline
# and batched, REPEATS repeats each (default 5) in COMPARE_ORDER (blocked, or interleaved), every switch
# proving the GPU clean first, every level warmed up to steady state; unless TUNE=0, tune batched over
# cb_use_cuda_graph (2 candidates, 2 repeats) and run the tune again (it resumes: nothing is measured or
# started again); stop and verify the GPU clean. Everything goes to OUTDIR: run.log, the bench_facts
# results (results/: run files, history.jsonl, tuned-batched.yml).
set -euo pipefail
# shellcheck source=tests/gpu/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
REPEATS=${REPEATS:-5} REQUESTS=${REQUESTS:-16} TUNE=${TUNE:-1}
# COMPARE_UNTIL=decided runs interleaved rounds until every variant is decided or COMPARE_BUDGET_S is spent
COMPARE_UNTIL=${COMPARE_UNTIL:-repeats} COMPARE_BUDGET_S=${COMPARE_BUDGET_S:-1800} MAX_REPEATS=${MAX_REPEATS:-20}
if [ "$COMPARE_UNTIL" = decided ]; then COMPARE_ORDER=${COMPARE_ORDER:-interleaved}; else COMPARE_ORDER=${COMPARE_ORDER:-blocked}; fi
WARMUP_TOLERANCE=${WARMUP_TOLERANCE:-0.05} WARMUP_MAX_S=${WARMUP_MAX_S:-120}
BENCH='{"serving_bench": {"concurrency": [1, 8], "requests_per_level": '$REQUESTS', "input_tokens": 64, "output_tokens": 64, "ignore_eos": false, "warmup": 1, "warmup_tolerance": '$WARMUP_TOLERANCE', "warmup_max_s": '$WARMUP_MAX_S'}}'
play() { echo "### $(date -u +%H:%M:%S) ansible-playbook $*"; ansible-playbook -i tests/gpu/h200_inventory -e "$BENCH" "$@"; }

stamp "the host"
nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total --format=csv

stamp "1. build the model"
"$PY" tools/build_tiny_model.py --out "$H200_MODEL" --size small

if [ "$COMPARE_UNTIL" = decided ]; then
stamp "2. compare baseline and batched until decided: $REPEATS rounds before the first look, at most $MAX_REPEATS, a budget of $COMPARE_BUDGET_S s"
play playbooks/compare.yml -e variants=baseline,batched -e repeats="$REPEATS" -e compare_until=decided \
  -e compare_budget_s="$COMPARE_BUDGET_S" -e compare_max_repeats="$MAX_REPEATS" -e compare_order="$COMPARE_ORDER"
else
stamp "2. compare baseline and batched, $REPEATS repeats each, $COMPARE_ORDER"
play playbooks/compare.yml -e variants=baseline,batched -e repeats="$REPEATS" -e compare_order="$COMPARE_ORDER"
fi

if [ "$TUNE" = 1 ]; then
stamp "3. tune batched over cb_use_cuda_graph, 2 repeats"
play playbooks/tune.yml -e base=batched -e '{"tune_grid": {"cb_use_cuda_graph": [true, false]}}' -e repeats=2
cat "$OUTDIR/results/tuned-batched.yml"

stamp "4. the same tune again: resumed from the history"
starts() { cat "$H200_WORK"/log/h200.log* | grep -c ': starting h200'; }  # one log per start (log_keep)
before=$(starts)
play playbooks/tune.yml -e base=batched -e '{"tune_grid": {"cb_use_cuda_graph": [true, false]}}' -e repeats=2
echo "engine starts in the log: $before before the second tune, $(starts) after"
fi

stamp "5. stop and verify the GPU clean"
play playbooks/stop.yml
stamp "done"
