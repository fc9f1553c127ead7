# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Start and stop a real router on loopback, for tests: sglang-router (build/router-venv, `make router-env`: the
version pinned in tests/support/router-requirements.txt), and beside it smg 1.13.0 (build/router-venv-smg,
`smg launch`) and vllm-router 0.1.17 (build/router-venv-vllm, `vllm-router`), each pinned in its own
tests/support/router-requirements-KIND.txt. start(..., kind=KIND) picks one; each takes the flags below
(vllm-router has no --shutdown-grace-period-secs), each read in its own `--help` of that version.

The flags, each read in sglang-router 0.3.2 (`python -m sglang_router.launch_router --help`, its
sglang_router/router_args.py, and the Rust source of that release, commit c7f9bf9f563c "[smg] release 0.3.2"
in lightseekorg/smg, which carries sgl-router's history):

- --disable-retries: one attempt per request (config/types.rs effective_retry_config sets max_retries to 1;
  core/retry.rs counts max_retries as attempts, not re-tries), so a request that failed is seen failed
  by the client, never hidden by a retry on another worker. --retry-max-retries 1 says the same twice.
- --disable-circuit-breaker: a worker whose requests fail is not quietly taken out of rotation.
- --health-check-interval-secs 1, --health-check-timeout-secs 1, --health-success-threshold 1: the
  router's runtime health check of each worker every second (default 60 s), so that a test sees a
  worker marked unhealthy or healthy again within seconds, not minutes.
- --worker-startup-timeout-secs 10, --worker-startup-check-interval 1: the bound of an add's health
  probe of the worker (core/steps/worker/local/mod.rs: its detect_connection step retries within it;
  default 1800 s), so an add of a worker that never answers fails in seconds.
- --prometheus-host 127.0.0.1 --prometheus-port FREE: else every router binds 0.0.0.0:29000 and two
  routers (two tests at once) collide.
- --shutdown-grace-period-secs 2: a stop does not wait 180 s for streams still open.
- --policy round_robin: every worker gets requests in turn, so a test knows each one is in use.

The router renames its process (setproctitle `sglang::router`): it is stopped by its pid, never by name.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request

from ports import free_port  # noqa: F401 (tests/support: one port per test of the session, across workers)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV = os.environ.get("INFEROPS_ROUTER_VENV") or os.path.join(ROOT, "build", "router-venv")
PYTHON = os.path.join(VENV, "bin", "python")

FLAGS = ["--policy", "round_robin",
         "--disable-retries", "--retry-max-retries", "1",
         "--disable-circuit-breaker",
         "--health-check-interval-secs", "1", "--health-check-timeout-secs", "1",
         "--health-success-threshold", "1",
         "--worker-startup-timeout-secs", "10", "--worker-startup-check-interval", "1",
         "--shutdown-grace-period-secs", "2",
         "--log-level", "info"]


KINDS = ("sglang", "smg", "vllm")
VENVS = {"sglang": VENV, "smg": os.path.join(ROOT, "build", "router-venv-smg"),
         "vllm": os.path.join(ROOT, "build", "router-venv-vllm")}
NAMES = {"sglang": "sglang-router 0.3.2", "smg": "smg 1.13.0", "vllm": "vllm-router 0.1.17"}


def command(kind):
    """The router's own launcher in its environment."""
    venv = VENVS[kind]
    if kind == "sglang":
        return [os.path.join(venv, "bin", "python"), "-m", "sglang_router.launch_router"]
    if kind == "smg":
        return [os.path.join(venv, "bin", "smg"), "launch"]
    return [os.path.join(venv, "bin", "vllm-router")]


def flags(kind):
    if kind == "vllm":  # no --shutdown-grace-period-secs in vllm-router 0.1.17
        i = FLAGS.index("--shutdown-grace-period-secs")
        return FLAGS[:i] + FLAGS[i + 2:]
    return list(FLAGS)


def available(kind="sglang"):
    """Whether build/router-venv(-KIND) holds the router (make router-env)."""
    return os.access(command(kind)[0], os.X_OK) and os.path.isfile(os.path.join(VENVS[kind], ".installed"))


class Router(object):
    """A running router: url, its pid, the log; workers() reads its listing; stop() ends it by pid."""

    def __init__(self, proc, port, prometheus_port, log, api_key=None):
        self.proc = proc
        self.pid = proc.pid
        self.port = port
        self.prometheus_port = prometheus_port
        self.url = "http://127.0.0.1:%d" % port
        self.log = str(log)
        self.api_key = api_key

    def workers(self):
        """The router's GET /workers listing (its "workers" list)."""
        req = urllib.request.Request(self.url + "/workers")
        if self.api_key:
            req.add_header("Authorization", "Bearer " + self.api_key)
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())["workers"]

    def log_tail(self, n=4000):
        try:
            with open(self.log, "rb") as fh:
                return fh.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, grace=5.0):
        """SIGTERM to its pid, SIGKILL after grace seconds; reaped either way."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start(log, worker_urls=(), api_key=None, extra=(), timeout=30.0, host="127.0.0.1", kind="sglang", port=None):
    """Start the router (kind: sglang, smg or vllm) on a free port of host (loopback by default; 0.0.0.0 for
    hosts in other network namespaces), or on ``port`` (a restart where a stopped router served), with
    worker_urls (none by default), and wait until it answers GET /workers on loopback. Returns a Router;
    raises RuntimeError (with its log's tail) when it does not come up."""
    if not available(kind):
        raise RuntimeError("no %s in %s: run `make router-env`" % (NAMES[kind], VENVS[kind]))
    port, prometheus_port = port or free_port(), free_port()
    argv = command(kind) + ["--host", host, "--port", str(port),
                            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prometheus_port)] + flags(kind)
    if worker_urls:
        argv += ["--worker-urls"] + list(worker_urls)
    if api_key:
        argv += ["--api-key", api_key]
    argv += list(extra)
    with open(str(log), "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    router = Router(proc, port, prometheus_port, log, api_key)
    router.kind = kind
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s:\n%s" % (NAMES[kind], proc.returncode, router.log_tail()))
        try:
            router.workers()
            return router
        except (OSError, ValueError, KeyError):
            if time.monotonic() > deadline:
                router.stop()
                raise RuntimeError("%s did not answer GET /workers within %gs:\n%s"
                                   % (NAMES[kind], timeout, router.log_tail()))
            time.sleep(0.1)
