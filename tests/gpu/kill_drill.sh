#!/usr/bin/env bash
# The controller dies mid-switch on a real GPU (issue 16): kill -9 of ansible-playbook, its workers and
# the module, while the new variant loads; the host must finish alone.
#
#   tests/gpu/kill_drill.sh OUTDIR        (after tests/gpu/h200_e2e.sh OUTDIR: the same model and paths)
#
# 1. batched serves; a switch to baseline is killed while baseline loads: baseline must end ready.
# 2. a switch to broken (cuda:7) is killed while it loads: baseline must serve again.
# Each step prints the switch's journal (outcome, phases), the state file, /health and the GPU's holders.
set -euo pipefail
# shellcheck source=tests/gpu/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
STATE=$H200_WORK/state
play() { echo "### $(date -u +%H:%M:%S) ansible-playbook $*"; ansible-playbook -i tests/gpu/h200_inventory "$@"; }

journal() { "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(json.dumps(d.get(sys.argv[2])) if len(sys.argv) > 2 else "")' "$STATE/h200.switch.json" "$@" 2>/dev/null || true; }

killed_switch() {  # killed_switch VARIANT: start the switch, kill -9 its whole controller while the engine loads
  local before
  before=$(journal id)
  setsid ansible-playbook -i tests/gpu/h200_inventory playbooks/switch_variant.yml -e "variant=$1" -e bench=never \
    -e serving_progress_delay=60 >"$OUTDIR/killed-$1.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do
    [ "$(journal id)" != "$before" ] && [ "$(journal phase)" = '"waiting"' ] && break
    sleep 0.1
  done
  kill -9 -- "-$pid"
  sleep 0.5
  echo "killed the controller (process group $pid) in phase $(journal phase); left of it: $(pgrep -g "$pid" | wc -l) processes"
  for _ in $(seq 300); do [ "$(journal outcome)" != "null" ] && [ -n "$(journal outcome)" ] && break; sleep 1; done
  "$PY" - "$STATE" <<'PYEOF'
import json, os, sys, urllib.request
state = sys.argv[1]
j = json.load(open(os.path.join(state, "h200.switch.json")))
print("switch %s by pid %s: outcome %s; phases %s" % (j["id"], j["pid"], j["outcome"], j["phases"]))
print("message:", j.get("msg"))
s = json.load(open(os.path.join(state, "h200.json")))
print("state file: variant %s, pid %s, ready_s %s, loading %s, previous %s" % (
    s["variant"], s["pid"], s.get("ready_s"), s.get("loading", False), (s.get("previous") or {}).get("variant")))
print("GET /health:", urllib.request.urlopen("http://127.0.0.1:18400/health", timeout=30).status)
PYEOF
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
}

stamp "1. batched serves"
play playbooks/switch_variant.yml -e variant=batched -e bench=never

stamp "2. kill -9 of the controller while baseline loads: the host finishes the switch"
killed_switch baseline

stamp "3. kill -9 of the controller while broken (cuda:7) loads: the host restores baseline"
killed_switch broken

stamp "4. the next run knows what serves"
play playbooks/switch_variant.yml -e variant=baseline -e bench=never

stamp "5. stop"
play playbooks/stop.yml
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader
stamp "done"
