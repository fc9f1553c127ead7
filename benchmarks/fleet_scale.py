# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wall time of converging a fleet of 16, 32 and 64 hosts to one variant, with forks 16.

usage: python benchmarks/fleet_scale.py [--sizes 16 32 64] [--forks 16] [--playbook switch|rollout]
                                        [--bench] [--keep]

Each host is an inventory entry over the local connection with its own port, state dir and log
dir, serving the timing-exact stand-in engine (tests/support/stream_server.py) as an
`engine: command` variant, GPUs checked with the fake nvidia-smi. Per size: converge from nothing
(stop -> clean GPUs -> start -> ready -> record on every host), then converge again (every host
already serves it: the no-op path), then the engines are stopped. Prints wall time per fleet size
and per host. With --playbook rollout the fleet goes through playbooks/rollout.yml (canary, then
batches of 25%) instead of switch_variant.yml; --bench adds the benchmark to each switch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUPPORT = os.path.join(ROOT, "tests", "support")
sys.path.insert(0, SUPPORT)

import fake_nvidia_smi  # noqa: E402  pylint: disable=wrong-import-position

PLAYBOOKS = {"switch": os.path.join(ROOT, "playbooks", "switch_variant.yml"),
             "rollout": os.path.join(ROOT, "playbooks", "rollout.yml")}


def free_ports(count):
    socks = []
    try:
        for _index in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def fake_gpus(tmp):
    """A fake nvidia-smi (tests/support) with 8 clean GPUs; returns the environment that finds it."""
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir)
    fake_nvidia_smi.install(bindir)
    state = os.path.join(tmp, "gpus.json")
    with open(state, "w") as handle:
        json.dump({"driver": True, "holders": [], "gpus": [
            {"index": i, "uuid": "GPU-%08x-1111-2222-3333-444444444444" % i, "name": "NVIDIA H200",
             "memory_total_mib": 143771, "memory_used_mib": 0} for i in range(8)]}, handle)
    return {"PATH": bindir + os.pathsep + os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
            "FAKE_NVIDIA_SMI_STATE": state}


def inventory(tmp, size, bench):
    hosts = {}
    for index, port in enumerate(free_ports(size)):
        name = "node%03d" % (index + 1)
        hosts[name] = {"serving_port": port, "serving_state_dir": os.path.join(tmp, name, "state"),
                       "serving_log_dir": os.path.join(tmp, name, "log")}
    stand_in = [sys.executable, os.path.join(SUPPORT, "stream_server.py"), "--port", "{{ serving_port }}",
                "--model", "standin", "--ttft-ms", "5", "--step-ms", "2"]
    group = {"hosts": hosts, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "serving_engine": "command", "serving_model": "standin", "serving_name": "scale",
        "serving_supervisor": "process", "serving_ready_timeout": 60, "serving_stop_timeout": 5,
        "serving_progress_delay": 1, "benchmark_poll_interval": 1,
        "serving_gpu_check": {"backend": "nvidia_smi", "timeout": 30, "kill_grace": 2},
        "serving_bench": {"concurrency": [1, 4], "requests_per_level": 8, "input_tokens": 8, "output_tokens": 16,
                          "warmup": 0} if bench else {},
        "serving_variants": {"v1": {"command": stand_in}},
    }}
    path = os.path.join(tmp, "inventory.yml")
    with open(path, "w") as handle:
        yaml.safe_dump({"serving": group}, handle)
    return path, hosts


def playbook(path, inv, env, forks, extra):
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inv, "-f", str(forks), path,
            "-e", json.dumps(extra)]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    return time.monotonic() - start, proc


def recap_ok(stdout, hosts):
    """Hosts whose PLAY RECAP shows failed=0 and unreachable=0."""
    good = 0
    for line in stdout.splitlines():
        parts = line.split()
        if parts and parts[0] in hosts and "failed=0" in parts and "unreachable=0" in parts:
            good += 1
    return good


def stop_engines(hosts):
    for spec in hosts.values():
        path = os.path.join(spec["serving_state_dir"], "scale.json")
        try:
            with open(path) as handle:
                pgid = json.load(handle).get("pgid")
            if pgid:
                os.killpg(int(pgid), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def measure(size, args, env):
    tmp = tempfile.mkdtemp(prefix="inferops-fleet-scale-%d-" % size)
    inv, hosts = inventory(tmp, size, args.bench)
    extra = {"variant": "v1"}
    if args.playbook == "switch" and not args.bench:
        extra["bench"] = "never"
    try:
        first, proc = playbook(PLAYBOOKS[args.playbook], inv, env, args.forks, extra)
        ok_first = recap_ok(proc.stdout, hosts)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-2000:])
        again, proc2 = playbook(PLAYBOOKS[args.playbook], inv, env, args.forks, extra)
        ok_again = recap_ok(proc2.stdout, hosts)
        return {"hosts": size, "converge_s": first, "noop_s": again, "ok": min(ok_first, ok_again),
                "rc": proc.returncode or proc2.returncode}
    finally:
        stop_engines(hosts)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--forks", type=int, default=16)
    parser.add_argument("--playbook", choices=sorted(PLAYBOOKS), default="switch")
    parser.add_argument("--bench", action="store_true", help="benchmark each host after its switch")
    parser.add_argument("--keep", action="store_true", help="keep the state dirs and logs")
    args = parser.parse_args()

    env = dict(os.environ)
    scratch = tempfile.mkdtemp(prefix="inferops-fleet-scale-")
    env.update({"ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                # bench_facts (enabled in ansible.cfg) writes there, not into the checkout
                "INFEROPS_RESULTS_DIR": os.path.join(scratch, "results")})
    env.update(fake_gpus(scratch))
    print("fleet_scale: playbooks/%s.yml, forks %d, local connections, stand-in engine, %s; %d CPUs"
          % ("switch_variant" if args.playbook == "switch" else "rollout", args.forks,
             "benchmark after each switch" if args.bench else "no benchmark", os.cpu_count()))
    print("| hosts | converge wall s | per host s | no-op re-run wall s | per host s | hosts ok |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    failed = False
    try:
        for size in args.sizes:
            row = measure(size, args, env)
            failed = failed or row["rc"] != 0 or row["ok"] != size
            print("| %d | %.1f | %.2f | %.1f | %.2f | %d/%d |" % (
                size, row["converge_s"], row["converge_s"] / size, row["noop_s"], row["noop_s"] / size, row["ok"], size))
            sys.stdout.flush()
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
