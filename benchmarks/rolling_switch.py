# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a rolling switch of replicas behind a router costs its clients: failed requests and latency, with and without the drain.

usage: python benchmarks/rolling_switch.py [--replicas N] [--modes drain,no-drain] [--warm S] [--after S]
                                           [--workers W] [--tokens T] [--keep]

A real run, like tests/integration/test_replicas.py: N instances (serving_instances r0..rN-1, default 4,
two fake GPUs each, the fake nvidia-smi of tests/support) of the timing-exact stand-in engine answering as
SGLang (tests/support/stream_server.py --engine sglang, one command for all with {port} in it; its
in-flight gauge sglang:num_running_reqs on /metrics is each variant's drain_metric) behind the real
sglang-router (build/router-venv, `make router-env`; started on loopback by tests/support/sglang_router.py:
round robin, no retries, no circuit breaker, a health check every second). Variants v1 and v2 differ only
in the stand-in's step time (2 and 3 ms a chunk), so each switch restarts every engine.

v1 is started first (with serving_router set, so each replica is added to the router once ready) and
the run waits until the router lists every replica healthy. Then, for each mode (--modes, default
drain then no-drain), a closed loop (tests/support/closed_loop.py: W clients, one streaming completion
of T tokens after another; a request fails unless it answers 200 and its stream ends with [DONE]) runs
through the router: for the warm period (--warm, default 3 s), then during
`ansible-playbook playbooks/switch_variant.yml -e variant=<the other variant>`, then for --after (default
1 s) more, and stops. `drain`: serving_router set in the inventory, so each replica is taken out of the
router, drained on the engine's own in-flight gauge, switched and added back, one at a time. `no-drain`:
serving_router unset (the router still routes to every replica, but the switch no longer takes them
out), so a replica being restarted drops what it serves and refuses what comes. Between modes, the run
waits until the router lists every replica healthy again.

ansible-playbook runs from the repo root with its ansible.cfg (no ANSIBLE_* variable of the caller's
environment is passed on, ANSIBLE_CONFIG included), the fake nvidia-smi first on PATH, and the
task_wall callback (benchmarks/callback/task_wall.py) on.

Prints per mode: requests sent and failed (all, and per window), p50/p99 latency of the successful
requests that started in the warm window (before the playbook started) and in the roll (from the
playbook's start to its end) and after it; the roll's wall time (the ansible-playbook process) and the
time per replica from the playbook's task timings (task_wall: from the start of the first task naming
the replica to the start of the next replica's first task, the last one's to the start of the task after
its own last; with, for `drain`, the time taken out of the router and drained, and back into it), the
run's set-up before the first replica and its end after the last; then a table of both modes. The
first reasons of failed requests are shown. Nothing is asserted on the figures.

Cleans up even on failure or Ctrl-C: every engine by the pid in its state file, then any process left
of this fake host (whose environment names this run's FAKE_NVIDIA_SMI_STATE, as the fake nvidia-smi
counts them: watchdogs included), then the router by its pid; the temp dir is removed unless --keep
(or the run failed: then its path is printed, logs inside).
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUPPORT = os.path.join(ROOT, "tests", "support")
CALLBACKS = [os.path.join(ROOT, "benchmarks", "callback")]
BIN = os.path.dirname(sys.executable)
PLAY = os.path.join("playbooks", "switch_variant.yml")
NAME = "rolling"
GAUGE = "sglang:num_running_reqs"
sys.path.insert(0, SUPPORT)
import fake_nvidia_smi  # noqa: E402  pylint: disable=wrong-import-position
import sglang_router  # noqa: E402  pylint: disable=wrong-import-position
from closed_loop import Load, percentile  # noqa: E402  pylint: disable=wrong-import-position


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fake_gpus(tmp, count):
    return fake_nvidia_smi.fake_host(tmp, count, "rolling")


def replica_command(step_ms):
    """One command for every replica: {port} is each instance's own (inference_server replaces it)."""
    return [sys.executable, os.path.join(SUPPORT, "stream_server.py"), "--port", "{port}", "--model", "standin",
            "--engine", "sglang", "--ttft-ms", "5", "--step-ms", str(step_ms)]


def router_version():
    proc = subprocess.run([sglang_router.PYTHON, "-c", "import importlib.metadata as m; print(m.version('sglang-router'))"],
                          capture_output=True, text=True, check=False)
    return proc.stdout.strip() or "?"


class Bed(object):
    """This host with N replicas on fake GPUs (r0: 0,1 ... ), an inventory (with or without the router)."""

    def __init__(self, tmp, replicas, router_url):
        self.tmp, self.router_url = tmp, router_url
        self.names = ["r%d" % i for i in range(replicas)]
        self.ports = dict((name, free_port()) for name in self.names)
        self.state_dir = os.path.join(tmp, "state")
        self.inventory = os.path.join(tmp, "inventory.yml")
        self.env = fake_gpus(tmp, 2 * replicas)
        parser = configparser.RawConfigParser()
        parser.read(os.path.join(ROOT, "ansible.cfg"))
        # ANSIBLE_CALLBACKS_ENABLED replaces the ansible.cfg list: keep its own callbacks on it
        own = [c.strip() for c in parser.get("defaults", "callbacks_enabled", fallback="").split(",") if c.strip()]
        self.callbacks = ",".join(own + ["task_wall"])

    def write(self, router):
        env = {"FAKE_GPU_MIB": "4096"}
        variants = {"v1": {"command": replica_command(2), "env": env, "drain_metric": GAUGE},
                    "v2": {"command": replica_command(3), "env": env, "drain_metric": GAUGE}}
        group = {"hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
                 "vars": {"serving_engine": "command", "serving_model": "standin", "serving_name": NAME,
                          "serving_host": "127.0.0.1", "serving_state_dir": self.state_dir,
                          "serving_log_dir": os.path.join(self.tmp, "log"), "serving_supervisor": "process",
                          "serving_ready_timeout": 20, "serving_stop_timeout": 5, "serving_progress_delay": 1,
                          "serving_drain_timeout": 20, "serving_bench_enabled": False,
                          "serving_gpu_check": {"backend": "nvidia_smi", "timeout": 10, "kill_grace": 2},
                          "serving_instances": dict((name, {"gpus": [2 * i, 2 * i + 1], "port": self.ports[name]})
                                                    for i, name in enumerate(self.names)),
                          "serving_variants": variants}}
        if router:
            group["vars"]["serving_router"] = {"type": "sglang", "url": self.router_url}
        with open(self.inventory, "w") as handle:
            yaml.safe_dump({"serving": group}, handle)

    def play(self, variant, router):
        """(rc, stdout, launched, returned, task_wall events) of one switch_variant.yml run; times on time.time()."""
        self.write(router)
        profile = os.path.join(self.tmp, "profile-%d.json" % time.monotonic_ns())
        run_env = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_"))
        run_env.update(self.env)
        run_env.update({"ANSIBLE_NOCOLOR": "1", "ANSIBLE_CALLBACK_PLUGINS": os.pathsep.join(CALLBACKS),
                        "ANSIBLE_CALLBACKS_ENABLED": self.callbacks, "INFEROPS_BENCH_PROFILE": profile,
                        "ANSIBLE_LOCAL_TEMP": os.path.join(self.tmp, "ansible-tmp"),
                        # bench_facts (on in ansible.cfg) writes its run files here, not into playbooks/results
                        "INFEROPS_RESULTS_DIR": os.path.join(self.tmp, "results")})
        argv = [os.path.join(BIN, "ansible-playbook"), "-i", self.inventory, PLAY, "-e", "variant=%s" % variant]
        launched = time.time()
        proc = subprocess.run(argv, cwd=ROOT, env=run_env, capture_output=True, text=True, check=False, timeout=600)
        returned = time.time()
        events = None
        if os.path.exists(profile):
            with open(profile) as handle:
                events = json.load(handle)
        return proc.returncode, proc.stdout, launched, returned, events

    def records(self):
        found = {}
        for name in self.names:
            path = os.path.join(self.state_dir, "%s.%s.json" % (NAME, name))
            try:
                with open(path) as handle:
                    found[name] = json.load(handle)
            except (OSError, ValueError):
                found[name] = None
        return found

    def urls(self):
        return sorted("http://127.0.0.1:%d" % self.ports[name] for name in self.names)

    def ours(self, pid):
        """Whether pid runs on this fake host: its environment names our FAKE_NVIDIA_SMI_STATE."""
        return pid != os.getpid() and fake_nvidia_smi.environ(pid).get("FAKE_NVIDIA_SMI_STATE") == self.env["FAKE_NVIDIA_SMI_STATE"]

    def cleanup(self):
        """Every engine by the pid in its state file, then whatever else of this fake host lives; each by its pid."""
        pids = [(r or {}).get("pid") for r in self.records().values()]
        pids = [pid for pid in pids if isinstance(pid, int) and self.ours(pid)]
        signalled = terminate(pids)
        rest = [int(e) for e in os.listdir("/proc") if e.isdigit() and self.ours(int(e))]
        signalled += terminate(rest)
        return signalled


def terminate(pids, grace=5.0):
    """SIGTERM to each pid, SIGKILL to those alive after grace seconds; the pids signalled."""
    sent = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            sent.append(pid)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(fake_nvidia_smi.alive(pid) for pid in sent):
        time.sleep(0.1)
    for pid in sent:
        if fake_nvidia_smi.alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return sent


def listed(router_url):
    """The router's workers: {url: is_healthy}."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(router_url + "/workers", timeout=5) as resp:
        data = json.loads(resp.read())
    return dict((w["url"].rstrip("/"), w.get("is_healthy")) for w in data.get("workers", []))


def wait_listed(bed, router, timeout=30.0):
    """Seconds until the router lists every replica, healthy (and no other); SystemExit after timeout."""
    want = dict((url, True) for url in bed.urls())
    start = time.monotonic()
    while True:
        try:
            now = listed(router.url)
        except (OSError, ValueError, KeyError) as exc:
            now = "GET /workers: %s" % exc
        if now == want:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise SystemExit("the router does not list every replica healthy after %g s: %s\nrouter log:\n%s"
                             % (timeout, now, router.log_tail()))
        time.sleep(0.2)


def replica_times(events, names, launched, returned):
    """From task_wall's events: ({name: seconds}, {name: {"out": s, "in": s}}, set-up s, end s), or None.

    A replica's time runs from the start of the first task naming it (NAME.rN) to the start of the next
    replica's first task; the last replica's to the start of the task after its own last. set-up: from
    the launch of ansible-playbook to the first replica's first task; end: the rest, to its exit."""
    if not events:
        return None
    tasks = [e for e in events if e["event"] == "task_start"]
    times = [e["time"] for e in events] + [returned]
    index_of = dict((id(e), i) for i, e in enumerate(events))
    patterns = dict((n, re.compile(r"(?<![\w.-])%s\.%s(?![\w-])" % (re.escape(NAME), re.escape(n)))) for n in names)
    first, last, parts = {}, {}, dict((n, {}) for n in names)
    for event in tasks:
        i = index_of[id(event)]
        for name, pattern in patterns.items():
            if pattern.search(event.get("name") or ""):
                first.setdefault(name, i)
                last[name] = i
                spent = times[i + 1] - times[i]
                if " out of router " in event["name"]:
                    parts[name]["out"] = parts[name].get("out", 0.0) + spent
                elif " back into router " in event["name"]:
                    parts[name]["in"] = parts[name].get("in", 0.0) + spent
    if any(n not in first for n in names):
        return None
    order = sorted(names, key=lambda n: first[n])
    per = {}
    for name, following in zip(order, order[1:] + [None]):
        stop = times[first[following]] if following else times[last[name] + 1]
        per[name] = stop - times[first[name]]
    setup = times[first[order[0]]] - launched
    end = returned - times[last[order[-1]] + 1]
    return per, parts, setup, end


def fmt(seconds):
    return "%.3f" % seconds if seconds is not None else "-"


def run_mode(mode, bed, router, variant, args):
    """One rolling switch to `variant` under load; its figures (a dict)."""
    router_on = mode == "drain"
    how = ("serving_router set (each replica out of the router, drained on %s, switched, back in)" % GAUGE
           if router_on else "serving_router unset (the router keeps routing to each replica while it restarts)")
    print("\n== %s: switch to %s, %s" % (mode, variant, how), flush=True)
    before = bed.records()
    with Load(router.url, workers=args.workers, tokens=args.tokens, limit_s=args.warm + args.after + 600) as load:
        time.sleep(args.warm)
        t0 = time.monotonic()
        rc, out, launched, returned, events = bed.play(variant, router_on)
        t1 = time.monotonic()
        time.sleep(args.after)
        t2 = time.monotonic()
    if rc != 0:
        raise SystemExit("%s: switch_variant.yml -e variant=%s failed (rc=%d):\n%s" % (mode, variant, rc, out[-4000:]))
    after = bed.records()
    variants = dict((n, (after[n] or {}).get("variant")) for n in bed.names)
    restarted = sum(1 for n in bed.names if (after[n] or {}).get("pid") != (before[n] or {}).get("pid"))
    windows = {"warm": (load.began, t0), "roll": (t0, t1), "after": (t1, t2)}
    fig = {"mode": mode, "sent": load.sent, "failed": load.failed, "wall": t1 - t0, "replicas": len(bed.names)}
    for key, (begin, end) in windows.items():
        lat = load.latencies(begin, end)
        fig[key] = {"span": end - begin, "counts": load.counts(begin, end),
                    "p50": percentile(lat, 50), "p99": percentile(lat, 99)}
    # launched/returned on time.time(): the playbook's own events are on that clock
    fig["tasks"] = replica_times(events, bed.names, launched, returned)
    print("requests: %d sent, %d failed (all %d clients, %.1f s in all)" % (load.sent, load.failed, args.workers, (load.ended or t2) - load.began))
    for key in ("warm", "roll", "after"):
        win = fig[key]
        print("  %-5s %6.2f s: %5d sent, %4d failed; latency p50 %s s, p99 %s s"
              % (key, win["span"], win["counts"][0], win["counts"][1], fmt(win["p50"]), fmt(win["p99"])))
    if load.failed:
        kinds = []
        for why in load.errors:
            short = re.sub(r"\d+", "N", why)[:140]
            if short not in kinds:
                kinds.append(short)
        print("  failed requests, first kinds: %s" % " | ".join(kinds[:3]))
    print("roll: %.2f s wall (the ansible-playbook process)" % (t1 - t0))
    if fig["tasks"]:
        per, parts, setup, end = fig["tasks"]
        cells = []
        for name in bed.names:
            extra = parts[name]
            detail = ""
            if "out" in extra or "in" in extra:
                detail = " (out+drain %.2f, in %.2f)" % (extra.get("out", 0.0), extra.get("in", 0.0))
            cells.append("%s %.2f s%s" % (name, per[name], detail))
        print("  per replica (task_wall): %s" % "; ".join(cells))
        print("  mean %.2f s a replica; set-up before the first %.2f s, end after the last %.2f s"
              % (sum(per.values()) / len(per), setup, end))
    else:
        print("  per replica: %.2f s (wall / %d replicas: no task timings)" % ((t1 - t0) / len(bed.names), len(bed.names)))
    print("afterwards: %d of %d replicas restarted, variants %s" % (restarted, len(bed.names),
          ",".join("%s=%s" % (n, variants[n]) for n in bed.names)))
    healthy = wait_listed(bed, router)
    print("the router lists every replica healthy %.2f s after the load stopped" % healthy, flush=True)
    return fig


def table(figs):
    heads = ("mode", "sent", "failed", "warm p50", "warm p99", "roll p50", "roll p99", "roll", "per replica")
    print("\n%-9s %6s %6s %9s %9s %9s %9s %8s %12s" % heads)
    for fig in figs:
        if fig["tasks"]:
            per = sum(fig["tasks"][0].values()) / len(fig["tasks"][0])
            how = "task_wall"
        else:
            per, how = fig["wall"] / fig["replicas"], "wall/N"
        print("%-9s %6d %6d %9s %9s %9s %9s %6.2f s %7.2f s (%s)"
              % (fig["mode"], fig["sent"], fig["failed"], fmt(fig["warm"]["p50"]), fmt(fig["warm"]["p99"]),
                 fmt(fig["roll"]["p50"]), fmt(fig["roll"]["p99"]), fig["wall"], per, how))
    print("(latencies in seconds, of the successful requests that started in the window; sent/failed over the whole load)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=4, help="instances r0..rN-1, two fake GPUs each (default 4)")
    parser.add_argument("--modes", default="drain,no-drain", help="comma-separated, of drain and no-drain, in order (default drain,no-drain)")
    parser.add_argument("--warm", type=float, default=3.0, help="seconds of load before the switch (default 3)")
    parser.add_argument("--after", type=float, default=1.0, help="seconds of load after the switch (default 1)")
    parser.add_argument("--workers", type=int, default=4, help="clients of the closed loop (default 4)")
    parser.add_argument("--tokens", type=int, default=24, help="tokens a request (default 24)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (state, logs, inventory, profiles)")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in ("drain", "no-drain") for m in modes):
        parser.error("--modes: a comma-separated list of drain and no-drain")
    if not 1 <= args.replicas <= 32:
        parser.error("--replicas: 1 to 32")
    if args.warm <= 0 or args.after < 0 or args.workers < 1 or args.tokens < 1:
        parser.error("--warm > 0, --after >= 0, --workers >= 1, --tokens >= 1")
    if not sglang_router.available():
        raise SystemExit("no sglang-router in %s: run `make router-env`" % sglang_router.VENV)
    # a SIGTERM ends the run through the cleanup below, as Ctrl-C does
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.mkdtemp(prefix="inferops-rolling-")
    router = bed = None
    ok = False
    figs = []
    try:
        router = sglang_router.start(os.path.join(tmp, "router.log"))
        bed = Bed(tmp, args.replicas, router.url)
        print("%d replicas (stream_server.py --engine sglang, 2 fake GPUs each) behind sglang-router %s at %s "
              "(round robin, no retries); load: %d clients, %d tokens a request; temp dir %s"
              % (args.replicas, router_version(), router.url, args.workers, args.tokens, tmp), flush=True)
        start = time.monotonic()
        rc, out, _l, _r, _e = bed.play("v1", True)
        if rc != 0:
            raise SystemExit("the first start of v1 failed (rc=%d):\n%s" % (rc, out[-4000:]))
        first = time.monotonic() - start
        healthy = wait_listed(bed, router)
        print("first start of v1: %.2f s; every replica listed healthy %.2f s later" % (first, healthy), flush=True)
        variant = "v1"
        for mode in modes:
            variant = "v2" if variant == "v1" else "v1"
            figs.append(run_mode(mode, bed, router, variant, args))
        ok = True
    finally:
        if bed:
            stopped = bed.cleanup()
            print("\ncleanup: %d processes of this fake host stopped by pid" % len(stopped), file=sys.stderr)
        if router:
            router.stop()
        if ok and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("temp dir kept: %s" % tmp, file=sys.stderr)
    table(figs)
    load = os.getloadavg()[0]
    print("\nload average at the end: %.2f on %d cores" % (load, os.cpu_count() or 0))


if __name__ == "__main__":
    main()
