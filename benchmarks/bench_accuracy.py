# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How exactly throughput_bench's client measures a server whose timing is known, beside AIPerf and GuideLLM.

usage: python benchmarks/bench_accuracy.py [--levels 1,32,128] [--k 1,3] [--peers [--peers-venv DIR]]
                                           [--wait-load 0.5] [--json FILE]

The timing-exact stand-in (tests/support/stream_server.py, its own process, sharing this machine with
the client) sends the first content chunk TTFT after admitting a request, then one chunk of k tokens
every STEP ms, on absolute deadlines. The expected figures come from that configuration alone, never
from a measurement (docs: benchmarking.md):
  e2e = TTFT + (ceil(n/k) - 1) * STEP                output throughput = C * n / e2e   (closed loop)
  TPOT = (ceil(n/k) - 1) * STEP / (n - 1)            (n_first = 1: no per-chunk usage; 10/3 ms at k=3)
Ours runs in this process (the module's own code: a closed loop of exactly C workers, one warm-up
request each, then max(4, 2C) measured requests, the module's default). With --peers, AIPerf and
GuideLLM (each in its own venv under --peers-venv: aiperf/ and guidellm/, made by `make bench-peers`)
run against the same server at --peer-levels with the same request counts and one warm-up request per
worker (AIPerf: a warm-up phase; GuideLLM: its warm-up exclusion by request count), counting tokens
from the server's usage. For them TPOT is their inter-token latency, (e2e - ttft) / (n - 1), the same
definition; GuideLLM's "TPOT" (e2e / n) is not used.

Columns: the 1-minute load average when the row started; the output throughput and TPOT each client
reports and their errors against the expected values; TTFT p50 (true: TTFT plus loopback); and the
stand-in's own view of that run: p99 of how late its chunk writes were, and the throughput it
delivered by its own clock (its measured streams' tokens over first arrival to last write) against
the expected. When a client's error equals that last one, the client measured what happened and the
shortfall is the closed loop's turnaround and the server's drift on this machine, not the client's
clock. Ours runs first, for every k; the peers after. The machine is shared: a loaded one inflates
every error; re-run when it is quiet (--wait-load waits before each of our rows).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import stand_in  # noqa: E402

stand_in.importable()
from ansible_collections.inferops.serving.plugins.module_utils import _bench, _openai_stream  # noqa: E402

MODEL = "stand-in"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def expected(cfg, k, concurrency):
    steps = math.ceil(cfg.output_tokens / float(k)) - 1
    e2e_ms = cfg.ttft_ms + steps * cfg.step_ms
    return {"output_throughput": concurrency * cfg.output_tokens / (e2e_ms / 1000.0),
            "tpot_ms": steps * cfg.step_ms / (cfg.output_tokens - 1), "e2e_ms": e2e_ms}


def requests_for(concurrency):
    return max(4, 2 * concurrency)  # throughput_bench's default requests_per_level


def err(measured, want):
    return None if measured is None else (measured / want - 1.0) * 100.0


def get_json(url):
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def server_side(url, cfg, requests):
    """The stand-in's own view of the run just made (its last `requests` streams, the measured ones):
    how late its chunk writes were, and the throughput it delivered by its own clock."""
    stats = get_json(url + "/stats?trace=1&reset=1")
    trace = sorted(stats.pop("trace"), key=lambda t: t["t_admitted"])[-requests:]
    out = {"late_p99_ms": stats["late_ms"]["p99"], "late_max_ms": stats["late_ms"]["max"], "streams": len(trace)}
    if trace:
        window = max(t["t_last_write"] for t in trace) - min(t["t_admitted"] for t in trace)
        out["delivered_throughput"] = sum(t["tokens"] for t in trace) / window
    return out


# ------------------------------------------------------------------------------------------ ours
def run_ours(url, cfg, k, concurrency):
    requests = requests_for(concurrency)
    marks = []

    def scrape():
        # called once the warm-up is over and once the level is done: only measured streams are kept
        if not marks:
            get_json(url + "/stats?reset=1")
        marks.append(time.monotonic())
    bench = _bench.Bench(_openai_stream.Target(url), MODEL, input_tokens=cfg.input_tokens,
                         output_tokens=cfg.output_tokens, timeout=600, scrape=scrape)
    results, client = _bench.run(bench, [(concurrency, requests, 1)])
    res = results[0]
    return {"client": "ours", "requests": res["requests"], "completed": res["completed"],
            "output_throughput": res["output_throughput"], "tpot_ms": res["tpot_ms"]["mean"],
            "ttft_p50_ms": res["ttft_ms"]["p50"], "loop_lag_p99_ms": res["client_loop_lag_ms"]["p99"],
            "saturated": client["saturated"]}


# ------------------------------------------------------------------------------------------ peers
def run_aiperf(venv, url, cfg, concurrency, tokenizer, workdir):
    out = os.path.join(workdir, "aiperf-%d" % concurrency)
    argv = [os.path.join(venv, "aiperf", "bin", "aiperf"), "profile", "--model", MODEL, "--url", url,
            "--endpoint-type", "completions", "--streaming", "--concurrency", str(concurrency),
            "--request-count", str(requests_for(concurrency)), "--warmup-request-count", str(concurrency),
            "--prompt-input-tokens-mean", str(cfg.input_tokens), "--prompt-input-tokens-stddev", "0",
            "--prompt-output-tokens-mean", str(cfg.output_tokens), "--prompt-output-tokens-stddev", "0",
            "--extra-inputs", "ignore_eos:true", "--extra-inputs", "min_tokens:%d" % cfg.output_tokens,
            "--use-server-token-count", "--use-legacy-max-tokens", "--tokenizer", tokenizer,
            "--output-artifact-dir", out, "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry"]
    log = peer_call(argv, workdir)
    with open(os.path.join(out, "profile_export_aiperf.json")) as handle:
        doc = json.load(handle)
    return {"client": "AIPerf " + str(doc.get("aiperf_version", "")), "requests": int(doc["request_count"]["avg"]),
            "completed": int(doc["request_count"]["avg"]) - int((doc.get("error_request_count") or {}).get("avg", 0)),
            "output_throughput": doc["output_token_throughput"]["avg"],
            "tpot_ms": doc["inter_token_latency"]["avg"], "ttft_p50_ms": doc["time_to_first_token"]["p50"], "log": log}


def run_guidellm(venv, url, cfg, concurrency, tokenizer, workdir):
    out = os.path.join(workdir, "guidellm-%d.json" % concurrency)
    scenario = os.path.join(workdir, "guidellm-%d-scenario.json" % concurrency)
    spec = {"spec": {
        "backend": {"kind": "openai_http", "target": url, "model": MODEL, "request_format": "/v1/completions"},
        "profile": {"kind": "concurrent", "streams": concurrency,
                    "warmup": {"mode": "requests", "value": concurrency}},
        "data": [{"kind": "synthetic_text", "prompt_tokens": cfg.input_tokens, "output_tokens": cfg.output_tokens}],
        "tokenizer": {"kind": "huggingface_auto", "model": tokenizer},
        "constraints": [{"kind": "max_requests", "count": concurrency + requests_for(concurrency)}],
        "outputs": [{"kind": "json", "path": out}]}}
    with open(scenario, "w") as handle:
        json.dump(spec, handle)
    argv = [os.path.join(venv, "guidellm", "bin", "guidellm"), "run", "--scenario", scenario,
            "--disable-console-interactive"]
    log = peer_call(argv, workdir, HF_HUB_OFFLINE="1")  # (AIPerf 0.13 refuses a local tokenizer path under it)
    with open(out) as handle:
        doc = json.load(handle)
    bench = doc["benchmarks"][0]
    metrics = bench["metrics"]
    version = (doc.get("metadata") or {}).get("guidellm_version") or ""
    totals = metrics["request_totals"]
    return {"client": ("GuideLLM " + str(version)).strip(), "requests": totals["total"], "completed": totals["successful"],
            "output_throughput": metrics["output_tokens_per_second"]["successful"]["mean"],
            "tpot_ms": metrics["inter_token_latency_ms"]["successful"]["mean"],
            "ttft_p50_ms": metrics["time_to_first_token_ms"]["successful"]["median"], "log": log}


def peer_call(argv, workdir, **env_extra):
    env = dict(os.environ, **env_extra)
    proc = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (os.path.basename(argv[0]), proc.returncode,
                                                  (proc.stdout + proc.stderr)[-2000:]))
    return proc.stdout[-400:]


# ------------------------------------------------------------------------------------------ report
def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def wait_for_quiet(threshold, patience_s):
    deadline = time.monotonic() + patience_s
    while os.getloadavg()[0] > threshold:
        if time.monotonic() > deadline:
            print("load average %s still above %.2f: measuring anyway (see the load column)" % (loadavg(), threshold))
            return
        print("load average %s above %.2f, waiting" % (loadavg(), threshold), flush=True)
        time.sleep(15)


def fmt(value, spec):
    return "-" if value is None else spec % value


def table(rows):
    head = ("client", "k", "C", "load 1m", "reqs", "expected tok/s", "measured tok/s", "error", "expected TPOT ms",
            "measured TPOT ms", "error", "TTFT p50 ms", "server late p99 ms", "server self error")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.get("failure"):
            lines.append("| %s | %d | %d | failed: %s |" % (r["client"], r["k"], r["concurrency"], r["failure"]))
            continue
        srv = r.get("server") or {}
        lines.append("| " + " | ".join([
            r["client"], str(r["k"]), str(r["concurrency"]), fmt(r.get("load"), "%.2f"),
            "%s/%s" % (r["completed"], r["requests"]),
            "%.1f" % r["expected"]["output_throughput"], fmt(r["output_throughput"], "%.1f"),
            fmt(r["throughput_error"], "%+.2f %%"), "%.4f" % r["expected"]["tpot_ms"], fmt(r["tpot_ms"], "%.4f"),
            fmt(r["tpot_error"], "%+.2f %%"), fmt(r["ttft_p50_ms"], "%.1f"), fmt(srv.get("late_p99_ms"), "%.2f"),
            fmt(err(srv.get("delivered_throughput"), r["expected"]["output_throughput"]), "%+.2f %%"),
        ]) + " |")
    return "\n".join(lines)


def worst(rows, client_prefix):
    best = None
    for r in rows:
        if r.get("failure") or not r["client"].startswith(client_prefix):
            continue
        for metric in ("throughput_error", "tpot_error"):
            value = r[metric]
            if value is not None and (best is None or abs(value) > abs(best[0])):
                best = (value, metric.replace("_error", ""), r["k"], r["concurrency"])
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="1,32,128", help="concurrency levels for ours")
    ap.add_argument("--k", default="1,3", help="tokens per chunk, one stand-in each")
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--peers", action="store_true", help="also run AIPerf and GuideLLM")
    ap.add_argument("--peers-venv", default=os.path.join(ROOT, "build", "peers-venv"),
                    help="directory holding the aiperf/ and guidellm/ venvs (make bench-peers)")
    ap.add_argument("--peer-levels", default="32,128")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "build", "tiny-model"),
                    help="a local tokenizer for the peers' prompt synthesis (built by tools/build_tiny_model.py)")
    ap.add_argument("--wait-load", type=float, default=0.0,
                    help="first wait (up to 10 min) until the 1-minute load average is below this")
    ap.add_argument("--json", help="also write the rows to this file")
    cfg = ap.parse_args(argv)
    # the peers run in a scratch directory: relative paths (make passes build/peers-venv) would miss
    cfg.peers_venv, cfg.tokenizer = os.path.abspath(cfg.peers_venv), os.path.abspath(cfg.tokenizer)
    levels = [int(x) for x in cfg.levels.split(",") if x]
    ks = [int(x) for x in cfg.k.split(",") if x]
    peer_levels = [int(x) for x in cfg.peer_levels.split(",") if x]
    if cfg.wait_load:
        wait_for_quiet(cfg.wait_load, 600)
    if cfg.peers:
        for name in ("aiperf", "guidellm"):
            if not os.path.exists(os.path.join(cfg.peers_venv, name, "bin", name)):
                sys.exit("%s is not installed under %s: run make bench-peers" % (name, cfg.peers_venv))
        if not os.path.exists(os.path.join(cfg.tokenizer, "tokenizer.json")):
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "build_tiny_model.py"), "--out", cfg.tokenizer],
                           check=True, stdout=subprocess.DEVNULL)
    started = loadavg()
    print("machine: %d CPUs, load average %s (1, 5, 15 min) at start" % (os.cpu_count(), started), flush=True)
    print("stand-in: TTFT %.0f ms, one chunk every %.0f ms, %d output tokens, prompts of ~%d tokens" % (
        cfg.ttft_ms, cfg.step_ms, cfg.output_tokens, cfg.input_tokens), flush=True)
    rows = []
    workdir = tempfile.mkdtemp(prefix="bench-accuracy-")
    try:
        # ours first, for every k, then the peers: their clients load the machine for a while after
        for k in ks:
            with stand_in.stand_in(free_port(), "--ttft-ms", cfg.ttft_ms, "--step-ms", cfg.step_ms, "--k", k) as url:
                for concurrency in levels:
                    if cfg.wait_load:
                        wait_for_quiet(cfg.wait_load, 600)
                    load = os.getloadavg()[0]
                    row = dict(run_ours(url, cfg, k, concurrency), k=k, concurrency=concurrency, load=load)
                    row["server"] = server_side(url, cfg, requests_for(concurrency))
                    rows.append(finish(row, cfg))
                    print(table(rows[-1:]).splitlines()[-1], flush=True)
        for k in ks if cfg.peers else ():
            with stand_in.stand_in(free_port(), "--ttft-ms", cfg.ttft_ms, "--step-ms", cfg.step_ms, "--k", k) as url:
                for runner in (run_aiperf, run_guidellm):
                    for concurrency in peer_levels:
                        get_json(url + "/stats?reset=1")
                        load = os.getloadavg()[0]
                        try:
                            row = dict(runner(cfg.peers_venv, url, cfg, concurrency, cfg.tokenizer, workdir),
                                       k=k, concurrency=concurrency, load=load)
                            row.pop("log", None)
                            row["server"] = server_side(url, cfg, requests_for(concurrency))
                            rows.append(finish(row, cfg))
                        except (RuntimeError, OSError, KeyError, ValueError, subprocess.TimeoutExpired) as exc:
                            lines = [x for x in str(exc).splitlines() if "rror" in x] or str(exc).splitlines()
                            rows.append({"client": runner.__name__[4:], "k": k, "concurrency": concurrency,
                                         "failure": lines[-1].strip()[:200]})
                        print(table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(table(rows))
    print()
    for prefix in ("ours", "AIPerf", "GuideLLM"):
        w = worst(rows, prefix)
        if w:
            print("worst error, %s: %+.2f %% (%s, k=%d, C=%d)" % (prefix, w[0], w[1], w[2], w[3]))
    print("load average at start %s, at end %s (1, 5, 15 min)" % (started, loadavg()))
    w = worst(rows, "ours")
    print("target, worst |error| of ours <= 1 %%: %s" % ("met" if w is None or abs(w[0]) <= 1.0 else "MISSED"))
    if cfg.json:
        with open(cfg.json, "w") as handle:
            json.dump({"load_start": started, "load_end": loadavg(), "rows": rows}, handle, indent=1)
    return 0


def finish(row, cfg):
    row["expected"] = expected(cfg, row["k"], row["concurrency"])
    row["throughput_error"] = err(row["output_throughput"], row["expected"]["output_throughput"])
    row["tpot_error"] = err(row["tpot_ms"], row["expected"]["tpot_ms"])
    return row


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
