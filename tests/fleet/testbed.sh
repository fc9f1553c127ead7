#!/usr/bin/env bash
# A fleet of test hosts on this machine, reached over real SSH: one network namespace per host, a
# veth pair to it, its own sshd on its own address, a key generated for the run. Needs root and the
# Debian packages iproute2 and openssh-server (installed here with apt-get when missing).
#
# usage: tests/fleet/testbed.sh run N -- COMMAND...   bring N hosts up, run COMMAND with
#                                                     INFEROPS_TESTBED=<dir>/testbed.json, tear down
#                                                     (also on failure or interrupt); exits COMMAND's code
#        tests/fleet/testbed.sh up N                  bring up; prints the testbed.json path
#        tests/fleet/testbed.sh down DIR              tear down what `up` made in DIR
#
# What a host is: namespace inferops-t<run><i>, the veth inferops-t<run><i> on this side with
# 10.X.Y.(4i+1)/30 and eth0 inside with 10.X.Y.(4i+2)/30 (X.Y picked free for the run), sshd on
# port 22 of that address. The namespaces share this machine's filesystem and process table, so a
# host needs its own state dir, port and fake-GPU state: sshd sets PATH (a fake nvidia-smi first)
# and FAKE_NVIDIA_SMI_STATE per host (SetEnv). Nothing listens outside the namespaces; the only
# traffic is between this side and the namespaces' addresses.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${INFEROPS_PYTHON:-$(command -v python)}
PYTHON=$(readlink -f "$(command -v "$PYTHON")")
VENV_PYTHON=${INFEROPS_TARGET_PYTHON:-$ROOT/.venv/bin/python}

log() { printf 'testbed: %s\n' "$*" >&2; }
die() { log "$*"; exit 2; }

need_packages() {
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces, sshd)"
    local missing=()
    command -v ip >/dev/null || missing+=(iproute2)
    [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
    command -v ssh-keygen >/dev/null || missing+=(openssh-client)
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]}"
        # policy-rc.d (when the image has one) keeps the package from starting a system-wide sshd
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    mkdir -p /run/sshd && chmod 0755 /run/sshd  # sshd's privilege separation directory
}

free_subnet() {
    local taken x y try
    taken=$(ip -4 -o addr show; ip -4 route show table all)
    for try in $(seq 1 50); do
        x=$((100 + RANDOM % 150)); y=$((RANDOM % 256))
        if ! grep -q "10\.$x\.$y\." <<<"$taken" && ! grep -Eq "10\.$x\.0\.0/(8|9|1[0-6]) |10\.0\.0\.0/8 " <<<"$taken"; then
            echo "10.$x.$y"; return
        fi
    done
    die "no free 10.x.y.0/24 found"
}

new_dir() {
    local run dir
    run=$(od -An -N2 -tx1 /dev/urandom | tr -d ' \n' | cut -c1-3)
    dir=$(mktemp -d "/tmp/inferops-tfleet-$run.XXXXXX")
    echo "$run" >"$dir/.run"
    : >"$dir/namespaces"
    echo "$dir"
}

up() {
    local n=$1 dir=$2 run net i ns veth here there hdir
    [ "$n" -ge 1 ] && [ "$n" -le 60 ] || die "N must be 1..60"
    need_packages
    run=$(cat "$dir/.run")
    net=$(free_subnet)
    ssh-keygen -q -t ed25519 -N '' -C "inferops-testbed-$run" -f "$dir/id_ed25519"
    cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
    : >"$dir/known_hosts"
    mkdir -p "$dir/cp"
    local hosts_json=""
    for i in $(seq 1 "$n"); do
        ns=$(printf 'inferops-t%s%02d' "$run" "$i")
        veth=$ns  # 15 characters, the limit for an interface name
        here="$net.$((4 * i + 1))"; there="$net.$((4 * i + 2))"
        hdir="$dir/fleet$i"
        mkdir -p "$hdir/bin"
        echo "$ns" >>"$dir/namespaces"
        ip netns add "$ns"
        ip link add "$veth" type veth peer name eth0 netns "$ns"
        ip addr add "$here/30" dev "$veth"
        ip link set "$veth" up
        ip -n "$ns" addr add "$there/30" dev eth0
        ip -n "$ns" link set lo up
        ip -n "$ns" link set eth0 up
        # the host's nvidia-smi: the stand-in of tests/support with this host's GPU state
        "$PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); import fake_nvidia_smi; fake_nvidia_smi.install(sys.argv[2])' \
            "$ROOT/tests/support" "$hdir/bin" >/dev/null
        "$PYTHON" - "$hdir/gpus.json" <<'PY'
import json, sys
json.dump({"driver": True, "holders": [], "gpus": [
    {"index": i, "uuid": "GPU-%08x-1111-2222-3333-444444444444" % i, "name": "NVIDIA H200",
     "memory_total_mib": 143771, "memory_used_mib": 0} for i in range(8)]}, open(sys.argv[1], "w"))
PY
        ssh-keygen -q -t ed25519 -N '' -C "fleet$i" -f "$hdir/host_key"
        echo "$there $(cut -d' ' -f1,2 "$hdir/host_key.pub")" >>"$dir/known_hosts"
        # SetEnv: the host's PATH (its nvidia-smi first) and GPU state. SHLVL=1: the hosts share this
        # machine's root home, whose ~/.bashrc (pyenv init, ~0.5 s) bash would run for every SSH
        # command; a shell that is not top-level skips it. A real host has a home of its own.
        cat >"$hdir/sshd_config" <<EOF
ListenAddress $there
Port 22
HostKey $hdir/host_key
PidFile $hdir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
MaxSessions 50
MaxStartups 50:30:100
SetEnv SHLVL=1 PATH=$hdir/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin FAKE_NVIDIA_SMI_STATE=$hdir/gpus.json INFEROPS_TESTBED_HOST=fleet$i
Subsystem sftp internal-sftp
LogLevel VERBOSE
EOF
        ip netns exec "$ns" /usr/sbin/sshd -f "$hdir/sshd_config" -E "$hdir/sshd.log"
        hosts_json+="${hosts_json:+,}{\"name\": \"fleet$i\", \"address\": \"$there\", \"controller_address\": \"$here\", \"netns\": \"$ns\", \"veth\": \"$veth\", \"dir\": \"$hdir\", \"sshd_pid_file\": \"$hdir/sshd.pid\", \"gpu_state\": \"$hdir/gpus.json\", \"bin\": \"$hdir/bin\"}"
    done
    cat >"$dir/testbed.json" <<EOF
{"dir": "$dir", "run": "$run", "key": "$dir/id_ed25519", "known_hosts": "$dir/known_hosts", "control_path_dir": "$dir/cp",
 "python": "$VENV_PYTHON", "hosts": [$hosts_json]}
EOF
    # every sshd answers (and its host key is the one in known_hosts) before anyone uses the bed
    for i in $(seq 1 "$n"); do
        there="$net.$((4 * i + 2))"
        local ok=""
        for _try in $(seq 1 50); do
            if ssh -q -i "$dir/id_ed25519" -o IdentitiesOnly=yes -o BatchMode=yes -o ConnectTimeout=2 \
                   -o UserKnownHostsFile="$dir/known_hosts" -o StrictHostKeyChecking=yes -o ControlMaster=no \
                   "root@$there" true 2>/dev/null; then ok=1; break; fi
            sleep 0.1
        done
        [ -n "$ok" ] || { log "fleet$i ($there) does not answer ssh; sshd log:"; cat "$dir/fleet$i/sshd.log" >&2 || true; return 1; }
    done
    log "$n hosts up in $dir (addresses ${net}.x, namespaces inferops-t${run}NN)"
    echo "$dir/testbed.json"
}

down() {
    local dir=$1 ns pids sock
    [ -f "$dir/.run" ] || { log "not a testbed dir: $dir"; return 0; }
    # ssh control masters of the run (ansible's, under control_path_dir)
    for sock in "$dir"/cp/*; do
        [ -S "$sock" ] && ssh -o ControlPath="$sock" -O exit placeholder >/dev/null 2>&1 || true
    done
    if [ -f "$dir/namespaces" ]; then
        while read -r ns; do
            [ -n "$ns" ] || continue
            # everything running inside the host (its sshd, sessions, engines) was started for the bed
            pids=$(ip netns pids "$ns" 2>/dev/null || true)
            [ -n "$pids" ] && kill -TERM $pids 2>/dev/null || true
        done <"$dir/namespaces"
        sleep 0.5
        while read -r ns; do
            [ -n "$ns" ] || continue
            pids=$(ip netns pids "$ns" 2>/dev/null || true)
            [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
            ip netns del "$ns" 2>/dev/null || true  # takes its end of the veth, and so the pair, along
            ip link del "$ns" 2>/dev/null || true
        done <"$dir/namespaces"
    fi
    rm -rf "$dir"
    log "torn down $dir"
}

case "${1:-}" in
    up)
        dir=$(new_dir)
        up "${2:?usage: $0 up N}" "$dir" || { down "$dir"; exit 2; }
        ;;
    down) down "${2:?usage: $0 down DIR}" ;;
    run)
        n=${2:?usage: $0 run N -- COMMAND...}
        shift 2
        [ "${1:-}" = "--" ] && shift
        [ $# -gt 0 ] || die "usage: $0 run N -- COMMAND..."
        dir=$(new_dir)
        cleanup() {
            local rc=$?
            trap - EXIT INT TERM
            down "$dir"
            exit "$rc"
        }
        trap cleanup EXIT
        trap 'exit 130' INT
        trap 'exit 143' TERM
        up "$n" "$dir" >/dev/null
        rc=0
        INFEROPS_TESTBED=$dir/testbed.json "$@" || rc=$?
        exit "$rc"
        ;;
    *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
