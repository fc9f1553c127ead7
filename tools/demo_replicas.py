# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""make demo-replicas / make demo-replicas-stop: two replicas of the demo model behind the pinned smg router,
switched to the other variant under a closed-loop load through the router.

    python tools/demo_replicas.py run     # router up, both replicas serving, then the switch under load
    python tools/demo_replicas.py stop    # the replicas (out of the router first), then the router

`run` starts smg on loopback (its pid, start time and argv recorded in build/demo-replicas/state/router.json,
its log in build/demo-replicas/log/router.log) unless the recorded one still runs; starts both replicas
(inventories/local-replicas, switch_variant.yml) if they do not serve; then switches both to the other
variant (baseline <-> batched) with switch_variant.yml while 2 clients send streaming chat completions
through the router, one after another. It prints `sent N, failed M`, how long each replica was out of the
router (from the router's own listing, polled every 0.1 s), each variant's peak resident memory, what serves
at the end, and the wall time. It exits 1 if the switch failed or any request failed.

The smg flags, read in smg 1.13.0 (`smg launch --help`, smg/router_args.py of the wheel):
- --backend openai: the workers are OpenAI-compatible servers. Without it smg assumes SGLang (backend
  "sglang"), its detection of a `transformers serve` worker fails and it lists no worker.
- --host 127.0.0.1, --prometheus-host 127.0.0.1 --prometheus-port 18359: everything on loopback (the
  Prometheus listener binds 0.0.0.0:29000 otherwise).
- --policy round_robin: both replicas take requests in turn.
- --disable-retries, --disable-circuit-breaker: a failed request reaches the client and is counted, never
  retried on the other replica behind its back; a replica is never taken out of rotation by the router.
- --health-check-interval-secs 1 --health-check-timeout-secs 5 --health-success-threshold 1: the router
  sees a replica healthy within seconds of its return (default interval 60 s); 5 s because a busy 2-core
  machine can be slow to answer.
- --worker-startup-timeout-secs 120 --worker-startup-check-interval 1: an add waits for a worker that loads.
- --shutdown-grace-period-secs 2: a stop does not wait for streams to end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from closed_loop import Load  # noqa: E402  pylint: disable=wrong-import-position

BIN = os.path.dirname(os.path.abspath(sys.executable))
INVENTORY = os.path.join(ROOT, "inventories", "local-replicas")
BUILD = os.path.join(ROOT, "build", "demo-replicas")
STATE_DIR = os.path.join(BUILD, "state")
LOG_DIR = os.path.join(BUILD, "log")
ROUTER_RECORD = os.path.join(STATE_DIR, "router.json")
SMG = os.environ.get("INFEROPS_SMG") or os.path.join(ROOT, "build", "router-venv-smg", "bin", "smg")
MODEL = os.path.join(ROOT, "build", "tiny-model")
ROUTER_PORT, PROMETHEUS_PORT = 18350, 18359
ROUTER_URL = "http://127.0.0.1:%d" % ROUTER_PORT
NAME = "demo"
REPLICAS = {"r0": 18351, "r1": 18352}  # as inventories/local-replicas says
VARIANTS = ("baseline", "batched")
FLAGS = ["--host", "127.0.0.1", "--port", str(ROUTER_PORT), "--backend", "openai",
         "--prometheus-host", "127.0.0.1", "--prometheus-port", str(PROMETHEUS_PORT),
         "--policy", "round_robin", "--disable-retries", "--disable-circuit-breaker",
         "--health-check-interval-secs", "1", "--health-check-timeout-secs", "5", "--health-success-threshold", "1",
         "--worker-startup-timeout-secs", "120", "--worker-startup-check-interval", "1",
         "--shutdown-grace-period-secs", "2", "--log-level", "info"]
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


def starttime(pid):
    """Field 22 of /proc/PID/stat: with the pid, one process's identity; None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            data = handle.read()
        fields = data[data.rindex(")") + 2:].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (IOError, OSError, ValueError, IndexError):
        return None


def peak_rss_mib(pid):
    """VmHWM (the peak resident memory) of pid in MiB, None when it is gone."""
    try:
        with open("/proc/%d/status" % pid) as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
    except (IOError, OSError, ValueError):
        pass
    return None


def workers():
    """The router's listing: {url: is_healthy}, or None when it does not answer."""
    try:
        with _OPENER.open(ROUTER_URL + "/workers", timeout=3) as resp:
            data = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return dict((w["url"].rstrip("/"), bool(w.get("is_healthy"))) for w in data.get("workers", []))


def router_record():
    try:
        with open(ROUTER_RECORD) as handle:
            record = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    return record if starttime(record["pid"]) == record.get("starttime") else None


def port_taken(port):
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def start_router():
    """The recorded smg if it still runs, else a new one, on loopback, in a session of its own."""
    record = router_record()
    if record:
        print("router: smg already runs (pid %d) on %s" % (record["pid"], record["url"]))
        return record
    if not os.access(SMG, os.X_OK):
        sys.exit("router: %s is missing; make router-env builds it (make demo-replicas does)" % SMG)
    for port in (ROUTER_PORT, PROMETHEUS_PORT):
        if port_taken(port):
            sys.exit("router: port %d on 127.0.0.1 is taken by another process; nothing was started" % port)
    os.makedirs(STATE_DIR, exist_ok=True)
    os.makedirs(LOG_DIR, exist_ok=True)
    argv = [SMG, "launch"] + FLAGS
    log_path = os.path.join(LOG_DIR, "router.log")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=BUILD, start_new_session=True)  # pylint: disable=consider-using-with
    record = {"pid": proc.pid, "starttime": starttime(proc.pid), "url": ROUTER_URL, "argv": argv, "log": log_path,
              "prometheus": "http://127.0.0.1:%d/metrics" % PROMETHEUS_PORT}
    with open(ROUTER_RECORD + ".tmp", "w") as handle:
        json.dump(record, handle, indent=1, sort_keys=True)
    os.replace(ROUTER_RECORD + ".tmp", ROUTER_RECORD)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit("router: smg exited with %s; its log: %s" % (proc.returncode, log_path))
        if workers() is not None:
            print("router: smg 1.13.0 started (pid %d) on %s, --backend openai, Prometheus on 127.0.0.1:%d"
                  % (proc.pid, ROUTER_URL, PROMETHEUS_PORT))
            return record
        time.sleep(0.2)
    stop_router()
    sys.exit("router: smg did not answer GET /workers within 30 s; its log: %s" % log_path)


def stop_router():
    """The recorded smg, by its pid and start time (never by name): SIGTERM, then SIGKILL after 10 s."""
    record = router_record()
    if not record:
        print("router: not running")
        return
    os.kill(record["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and starttime(record["pid"]) == record["starttime"]:
        time.sleep(0.1)
    if starttime(record["pid"]) == record["starttime"]:
        os.kill(record["pid"], signal.SIGKILL)
    os.unlink(ROUTER_RECORD)
    print("router: smg (pid %d) stopped" % record["pid"])


def playbook(name, extra=None, log_name=None):
    """ansible-playbook playbooks/NAME on the demo inventory, its output in build/demo-replicas/log; (rc, lines)."""
    argv = [os.path.join(BIN, "ansible-playbook"), "-i", INVENTORY, os.path.join(ROOT, "playbooks", name)]
    if extra:
        argv += ["-e", json.dumps(extra)]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    os.makedirs(LOG_DIR, exist_ok=True)
    path = os.path.join(LOG_DIR, log_name or name.replace(".yml", ".log"))
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    with open(path, "w") as handle:
        handle.write(proc.stdout + proc.stderr)
    lines = (proc.stdout + proc.stderr).splitlines()
    if proc.returncode != 0:
        print("\n".join(lines[-40:]))
        print("(the whole output: %s)" % path)
    return proc.returncode, lines


def record_of(replica):
    try:
        with open(os.path.join(STATE_DIR, "%s.%s.json" % (NAME, replica))) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return {}


def serving():
    """{replica: (variant, pid)} of each replica whose recorded engine runs."""
    found = {}
    for replica in REPLICAS:
        record = record_of(replica)
        if record.get("pid") and starttime(record["pid"]) == record.get("starttime") and not record.get("loading"):
            found[replica] = (record.get("variant"), record["pid"])
    return found


class RouterWatch(object):
    """Polls the router's listing every 0.1 s: for each replica, when it was out (not listed, or unhealthy)."""

    def __init__(self):
        self.out = dict((replica, []) for replica in REPLICAS)  # [start, end or None]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            listing = workers() or {}
            now = time.monotonic()
            for replica, port in REPLICAS.items():
                healthy = listing.get("http://127.0.0.1:%d" % port, False)
                spans = self.out[replica]
                if not healthy and (not spans or spans[-1][1] is not None):
                    spans.append([now, None])
                elif healthy and spans and spans[-1][1] is None:
                    spans[-1][1] = now
            time.sleep(0.1)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def seconds_out(self, replica):
        end = time.monotonic()
        return sum((stop or end) - start for start, stop in self.out[replica])


def run():
    began = time.monotonic()
    start_router()
    now = serving()
    if len(now) != len(REPLICAS) or len(set(variant for variant, dummy in now.values())) != 1:
        first = VARIANTS[0]
        print("replicas: starting both on %s (nothing to switch yet) ..." % first)
        rc, dummy = playbook("switch_variant.yml", {"variant": first}, "start.log")
        if rc != 0:
            sys.exit("replicas: the start of %s failed" % first)
        now = serving()
    current = sorted(set(variant for variant, dummy in now.values()))[0]
    target = VARIANTS[1] if current == VARIANTS[0] else VARIANTS[0]
    before = dict((replica, pid) for replica, (dummy, pid) in now.items())
    print("replicas: %s; switching both to %s under load through %s ..." % (
        ", ".join("%s.%s %s (pid %d)" % (NAME, r, v, p) for r, (v, p) in sorted(now.items())), target, ROUTER_URL))
    peak_before = dict((replica, peak_rss_mib(pid)) for replica, pid in before.items())
    with RouterWatch() as watch, Load(ROUTER_URL, workers=2, tokens=16, model=MODEL, chat=True, timeout=60,
                                      limit_s=600) as load:
        time.sleep(3)
        switch_began = time.monotonic()
        rc, dummy = playbook("switch_variant.yml", {"variant": target}, "switch.log")
        switch_s = time.monotonic() - switch_began
        after = serving()
        time.sleep(3)  # the load goes on a little on what serves now
        peak_after = dict((replica, peak_rss_mib(pid)) for replica, (dummy, pid) in after.items())
    print()
    print("sent %d, failed %d (2 clients, streaming chat completions through smg)" % (load.sent, load.failed))
    for why in load.errors[:5]:
        print("  failed: %s" % why)
    for replica in sorted(REPLICAS):
        variant, pid = after.get(replica, (None, None))
        print("%s.%s: %s (pid %s) -> %s (pid %s), out of the router %.1f s" % (
            NAME, replica, current, before.get(replica), variant or "NOTHING", pid, watch.seconds_out(replica)))
    print("peak resident memory (VmHWM) under the load: %s %s MiB, %s %s MiB" % (
        current, "/".join(str(v) for v in peak_before.values()), target, "/".join(str(v) for v in peak_after.values())))
    listing = workers() or {}
    print("serving at the end: %s; router %s lists %s" % (
        ", ".join("%s.%s %s (pid %d)" % (NAME, r, v, p) for r, (v, p) in sorted(after.items())) or "nothing",
        ROUTER_URL, ", ".join("%s %s" % (url, "healthy" if ok else "UNHEALTHY") for url, ok in sorted(listing.items()))
        or "no worker"))
    print("switch %.1f s; wall time %.1f s (router, start and switch)" % (switch_s, time.monotonic() - began))
    if rc != 0 or load.failed:
        sys.exit(1)


def stop():
    rc, dummy = playbook("stop.yml", None if router_record() else {"serving_router": {}}, "stop.log")
    stop_router()
    if rc != 0:
        sys.exit("replicas: the stop failed")
    print("replicas: stopped; nothing of the demo runs")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("action", choices=["run", "stop"])
    args = parser.parse_args()
    run() if args.action == "run" else stop()  # pylint: disable=expression-not-assigned


if __name__ == "__main__":
    main()
