#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: throughput_bench
short_description: Measure an OpenAI-compatible streaming server, saying exactly what was measured
version_added: 0.5.0
description:
  - Runs a closed-loop load against an OpenAI-compatible server, one level per entry of
    O(concurrency), in order. A level has exactly that many workers, each on its own keep-alive
    connection; each worker first sends O(warmup) requests (excluded), then the level warms up to steady
    state (O(warmup_tolerance)), then all start together and each sends its next streamed request as soon
    as the previous one finished.
  - Every server-sent event is timestamped on arrival with a monotonic clock. Token counts come from
    the server's C(usage) (it asks C(stream_options.include_usage)); when a server sends none, the
    content events are counted instead and RV(results[].token_source) says so.
  - "Definitions: C(ttft = t_first - t_send); C(e2e = t_last - t_send); C(tpot = (t_last - t_first) /
    (n_out - n_first)); C(decode_tps_per_request = 1 / tpot) (the per-request decode speed);
    C(e2e_tps_per_request = n_out / e2e) (tokens over end-to-end latency, a different and lower
    figure); C(output_throughput = sum(n_out) / W) with C(W = max(t_last) - min(t_send)) of the level."
  - Reads only; the module never changes the host (C(changed) is always false). Standard library
    only on the target (asyncio), Python 3.8 or later.
author:
  - inferops.serving maintainers (@inferops)
extends_documentation_fragment:
  - inferops.serving.attributes
  - inferops.serving.attributes.INFO_MODULE
options:
  url:
    description:
      - Base URL of the server, for example V(http://127.0.0.1:8000) (a trailing C(/v1) is accepted).
    type: str
    required: true
  model:
    description:
      - Model id to request. Default is the first id the server lists at C(/v1/models).
      - A model the server does not offer is an error that lists the models it offers.
    type: str
  api:
    description:
      - Which endpoint to stream from, C(/v1/completions), C(/v1/chat/completions), or V(generate), SGLang's
        native C(POST /generate), whose stream carries C(meta_info.spec_verify_ct), the acceptance length of
        speculative decoding on SGLang before 0.5.23 (its OpenAI endpoints carry none there).
    type: str
    choices: [completions, chat, generate]
    default: completions
  concurrency:
    description: Concurrency levels, one level each, run in this order. Each is 1 or more.
    type: list
    elements: int
    default: [1, 32]
  requests_per_level:
    description:
      - Measured requests per level (warm-up excluded).
      - Default is twice the level's concurrency, at least 4.
    type: int
  input_tokens:
    description:
      - Approximate prompt length in tokens (common words, one token each in usual vocabularies).
        The server's own count, C(usage.prompt_tokens), is what is reported.
    type: int
    default: 128
  output_tokens:
    description: Tokens to generate per request (C(max_tokens)).
    type: int
    default: 256
  ignore_eos:
    description:
      - Ask the server to generate exactly O(output_tokens) by sending C(ignore_eos=true) and
        C(min_tokens=output_tokens). Requests that still return another length are counted in
        RV(results[].length_mismatch).
      - Set V(false) for servers that reject these fields.
    type: bool
    default: true
  warmup:
    description:
      - Requests each worker sends before each level, excluded from the figures; the least warm-up a level gets.
      - V(0) turns the warm-up off, the warm-up to steady state (O(warmup_tolerance)) included.
    type: int
    default: 1
  warmup_tolerance:
    description:
      - After the O(warmup) requests, each level keeps warming up, at its own concurrency, in windows of 2
        requests per worker (all workers together, excluded from the figures), until the output throughputs
        (tokens/s, defined as a level's) of two successive windows differ by at most this share of the earlier
        one, or O(warmup_max_s) has passed. A server that compiles, captures CUDA graphs or fills caches on its
        first requests is thus measured once steady; RV(results[].steady) says whether it was.
      - A relative difference, 0 or more; V(0.05) is 5 %.
      - A window that completes no request ends the warm-up (not steady); the measured requests show why.
    type: float
    default: 0.05
  warmup_max_s:
    description:
      - Most seconds a level's warm-up may take, from its first warm-up request; no warm-up window starts after
        that (one in flight runs to its end) and the level is measured anyway, with RV(results[].steady) false.
      - A positive number of seconds.
    type: float
    default: 120
  api_key:
    description: Sent as C(Authorization Bearer) to the API endpoints.
    type: str
  timeout:
    description:
      - Seconds one request may take in all, from connecting to its last byte (a server that drips its answer
        slowly ends there too, as a failure of kind C(timeout)).
      - It also bounds, each as a whole, the C(/v1/models) lookup (at most 30 s), the engine identification of
        V(auto) (at most 5 s for both of its requests) and each metrics scrape (at most 10 s, read and parsed).
      - Answers are bounded in size as well; past a cap a request fails with kind C(oversized) (a response head
        over 64 KiB, one server-sent event over 8 MiB, a chunk-size line over 64 KiB, a C(/v1/models) answer
        over 4 MiB; a metrics scrape over 16 MiB is a warning). An error answer's body is read up to 1 MiB, then
        cut, its status being the failure.
    type: float
    default: 600
  slo:
    description:
      - Targets for goodput, in milliseconds; a request is good when it meets every target given.
        Failed requests are misses. Without targets RV(results[].goodput) is null.
    type: dict
    suboptions:
      ttft_ms:
        description: Most time to first token.
        type: float
      tpot_ms:
        description: Most time per output token (decode).
        type: float
      e2e_ms:
        description: Most end-to-end latency.
        type: float
  metrics_url:
    description:
      - Prometheus endpoint (for example vLLM's V(http://127.0.0.1:8000/metrics)) scraped before and after
        each level; the spec-decode counter deltas give RV(results[].acceptance_length) over that level,
        never a since-start figure. Unset, V(URL/metrics) for SGLang and vLLM (SGLang serves it with
        C(--enable-metrics)).
    type: str
  engine:
    description:
      - The engine that serves O(url), which decides where the acceptance length of speculative decoding comes
        from (C(source) in RV(results[].spec_decode)). V(auto) identifies it from what it answers (SGLang its
        C(/get_model_info), vLLM its C(/version)), else V(openai); RV(engine) says what was identified.
      - V(sglang) asks every completions and chat request for C(return_spec_tokens_details) and reads SGLang 0.5.23's
        C(sglext) chunk (completion tokens / verify steps over the level); without it, the deltas of
        C(sglang:generation_tokens_total) and C(sglang:spec_verify_calls_total) over the level; failing
        both (SGLang 0.5.9 on its OpenAI endpoints), its gauge C(sglang:spec_accept_length), labelled
        C(rolling) since it is a mean over recent batches, not this level's figure.
      - V(vllm) takes the deltas of its C(vllm:spec_decode_*) counters summed over every engine series
        (data parallel), with the acceptance rate per draft position.
    type: str
    choices: [auto, sglang, vllm, trtllm, transformers, openai]
    default: auto
  labels:
    description: Copied into every level's result (variant, configuration fingerprint, anything).
    type: dict
    default: {}
  repeats:
    description:
      - Run the whole sweep (every level of O(concurrency), in order) this many times, back to back, in this
        one call. RV(results) then holds each level once per repeat, repeat by repeat; with 2 or more, each
        one's C(labels.repeat) is its 0-based repeat index (replacing any O(labels) C(repeat)).
      - One call for all the repeats of a comparison spares a module start and an C(async_status) wait per
        repeat (the M(inferops.serving.serve_variant) role's C(compare) and C(tune) entry points use it).
    type: int
    default: 1
  metrics:
    description:
      - Write the benchmark's figures to an instance's metrics file for node_exporter's textfile collector
        (the file M(inferops.serving.inference_server) writes with its O(inferops.serving.inference_server#module:metrics_dir)),
        per concurrency C(inferops_bench_output_throughput_tokens_per_second), C(inferops_bench_ttft_p50_seconds),
        C(inferops_bench_tpot_p50_seconds), and C(inferops_bench_last_timestamp_seconds) (docs/metrics.md).
      - The file's other series are kept; it is replaced atomically, mode 0644, with no secret. With O(repeats),
        the last repeat of each level is written. Not in check mode.
    type: dict
    suboptions:
      file:
        description: The metrics file (C(METRICS_DIR/inferops_NAME.prom)).
        type: path
        required: true
      instance:
        description: The C(instance) label (the server's name); O(labels) give C(host), C(variant), C(engine), C(fingerprint).
        type: str
notes:
  - Run the benchmark client on a host with spare CPU. RV(client.loop_lag_ms) shows how late its own
    event loop ran (it includes up to 1 ms of timer granularity); RV(client.saturated) is true when the
    worst p99 passes 5 ms, when timestamps may be late by as much.
  - Long sweeps outlive an SSH connection's patience; run them with C(async) and C(async_status)
    (the M(inferops.serving.benchmark) role does).
seealso:
  - name: The inferops.serving.benchmark role
    description: Runs this module asynchronously and publishes the results as AWX job artifacts.
    link: https://example.invalid/inferops/serving/blob/main/roles/benchmark/README.md
"""

EXAMPLES = r"""
- name: Decode speed at concurrency 1 and aggregate throughput at 32
  inferops.serving.throughput_bench:
    url: http://127.0.0.1:30000
    concurrency: [1, 32]
    input_tokens: 1024
    output_tokens: 256
    labels:
      variant: nextn
      fingerprint: "{{ server_fingerprint }}"
  register: bench

- name: Through the chat API, with goodput targets and vLLM acceptance length
  inferops.serving.throughput_bench:
    url: http://gpu-host-1:8000/v1
    api: chat
    api_key: "{{ vault_api_key }}"
    concurrency: [8, 64]
    requests_per_level: 256
    slo: {ttft_ms: 2000, tpot_ms: 50}
    metrics_url: http://gpu-host-1:8000/metrics

- name: The same sweep five times in one call, for a median and its spread
  inferops.serving.throughput_bench:
    url: http://127.0.0.1:30000
    concurrency: [1, 32]
    repeats: 5
  register: bench5  # bench5.results | groupby('labels.repeat') gives the repeats
"""

RETURN = r"""
metrics_file:
  description: The metrics file the figures were written to (O(metrics)).
  returned: when O(metrics) is set, but not in check mode
  type: str
  sample: /var/lib/node_exporter/textfile_collector/inferops_sv.prom
engine:
  description: The engine the benchmark took the server for (O(engine), or what V(auto) identified).
  returned: always
  type: str
  sample: sglang
metrics_url:
  description: The Prometheus endpoint scraped around each level, null when none.
  returned: always
  type: str
  sample: http://127.0.0.1:30000/metrics
elapsed_s:
  description:
    - Seconds the whole call took on the target, from the model lookup to the last level's end, warm-up
      requests and every repeat included (each level's C(duration_s) is its measured window only).
    - Also when the call fails, up to the failure (the model lookup, a level where no request completed).
  returned: always
  type: float
  sample: 93.4
error_kind:
  description:
    - Why the C(/v1/models) lookup failed, when it did; C(timeout) (no whole answer within its time),
      C(oversized) (an answer past a size cap), C(bad_response) (not HTTP, or not a model list),
      C(unreachable), or C(http_N) for an HTTP status.
  returned: when the model lookup failed
  type: str
  sample: timeout
url:
  description: The base URL benchmarked.
  returned: always
  type: str
  sample: http://127.0.0.1:30000
model:
  description: The model id requested.
  returned: success
  type: str
  sample: Qwen3.5-397B-A17B-NVFP4
api:
  description: C(completions) or C(chat).
  returned: success
  type: str
  sample: completions
results:
  description:
    - One dict per concurrency level, in order (with O(repeats), each level once per repeat, repeat by repeat;
      C(labels.repeat) says which). Distributions are dicts with C(mean), C(p50), C(p90), C(p99), C(min),
      C(max) and C(count).
  returned: success
  type: list
  elements: dict
  contains:
    concurrency:
      description: Workers of this level.
      type: int
      sample: 32
    requests:
      description: Measured requests sent.
      type: int
      sample: 64
    completed:
      description: Requests that streamed to the end.
      type: int
      sample: 64
    failed:
      description: Requests that failed (they are never dropped from the counts).
      type: int
      sample: 0
    errors:
      description: Failure kinds and their counts (C(http_404), C(dropped), C(timeout), C(connection_refused), ...).
      type: dict
      sample: {dropped: 2}
    error_samples:
      description: One message per failure kind.
      type: dict
      sample: {dropped: connection closed before the response was complete}
    duration_s:
      description: The window C(W = max(t_last) - min(t_send)) of the level, in seconds.
      type: float
      sample: 7.6
    output_throughput:
      description: Output tokens per second over the window, all requests together.
      type: float
      sample: 2156.4
    input_throughput:
      description: Prompt tokens (as the server counted them) per second over the window.
      type: float
      sample: 8625.6
    request_throughput:
      description: Completed requests per second over the window.
      type: float
      sample: 8.42
    goodput:
      description: Requests meeting every O(slo) target per second over the window; null without O(slo).
      type: float
      sample: 8.1
    slo_attainment:
      description:
        - The share of the level's requests that met every O(slo) target, from 0 to 1 (a failed request is a
          miss); null without O(slo).
      type: float
      sample: 0.94
    ttft_ms:
      description: Time to first generated text, ms.
      type: dict
      sample: {mean: 50.6, p50: 50.4, p90: 51.2, p99: 52.0, min: 50.1, max: 52.3, count: 64}
    tpot_ms:
      description: Time per output token after the first, ms.
      type: dict
      sample: {mean: 10.01, p50: 10.0, p90: 10.02, p99: 10.05, min: 9.99, max: 10.06, count: 64}
    e2e_ms:
      description: Send to last generated text, ms (a trailing usage-only chunk does not count).
      type: dict
      sample: {mean: 2600.2, p50: 2600.0, p90: 2601.0, p99: 2603.0, min: 2599.0, max: 2604.0, count: 64}
    decode_tps_per_request:
      description: 1 / tpot, the per-request decode speed (the "172.2 tok/s at concurrency 1" figure).
      type: dict
      sample: {mean: 172.2, p50: 172.3, p90: 173.0, p99: 173.4, min: 170.9, max: 173.5, count: 64}
    e2e_tps_per_request:
      description: n_out / e2e per request, which includes the wait for the first token (a smaller figure).
      type: dict
      sample: {mean: 98.4, p50: 98.5, p90: 99.0, p99: 99.2, min: 97.0, max: 99.3, count: 64}
    tokens_per_chunk:
      description: n_out / content events per request; above 1 when chunks carry several tokens (speculative decoding).
      type: dict
      sample: {mean: 2.9, p50: 2.9, p90: 2.9, p99: 2.9, min: 2.9, max: 2.9, count: 64}
    token_source:
      description: C(usage) when every count came from the server's usage, else how tokens were counted.
      type: str
      sample: usage
    length_mismatch:
      description: Completed requests whose output length differs from O(output_tokens) under O(ignore_eos).
      type: int
      sample: 0
    no_text:
      description:
        - Completed requests whose tokens (counted by the server's usage) decoded to no text at all, special
          tokens for example. Their tokens count in the throughputs; having no arrival time of any text,
          they are left out of the latency distributions (whose C(count) shows it) and never meet an O(slo).
        - A stream with neither text nor usage is a failure of kind C(no_content).
      type: int
      sample: 0
    acceptance_length:
      description: Speculative-decoding acceptance length over this level, or null when no counters are available.
      type: float
      sample: 2.9
    spec_decode:
      description: Where RV(results[].acceptance_length) came from, with the counter deltas.
      type: dict
      sample: {source: vllm /metrics counter deltas over the level, acceptance_length: 2.9, drafts: 1200,
               acceptance_rate_per_position: [0.82, 0.61]}
    connections_opened:
      description: TCP connections opened by the level's workers (equal to concurrency when keep-alive held).
      type: int
      sample: 32
    client_loop_lag_ms:
      description: The client's event-loop lag during the level.
      type: dict
      sample: {mean: 0.5, p50: 0.4, p90: 0.9, p99: 1.4, min: 0.1, max: 2.0, count: 1500}
    warmup_s:
      description:
        - Seconds the level's warm-up took, from its first warm-up request to the end of its last warm-up window
          (the connections included).
      type: float
      sample: 4.2
    steady:
      description:
        - Whether the level was measured at steady state, two successive warm-up windows agreeing within
          O(warmup_tolerance). False when O(warmup_max_s) ran out first or a window completed no request
          (RV(results[].warmup_end) says which); null when the warm-up was off (O(warmup=0)).
      type: bool
      sample: true
    warmup_end:
      description:
        - How the warm-up ended, V(steady), V(out_of_time) (O(warmup_max_s) ran out), V(nothing_completed) (a
          window completed no request) or V(off) (O(warmup=0)).
      type: str
      sample: steady
    warmup_windows:
      description:
        - The output throughput (tokens/s) of each warm-up window, in order; null for a window that completed no
          request.
      type: list
      elements: float
      sample: [812.4, 1630.2, 1641.0]
    labels:
      description: O(labels), as given, with C(repeat) (the 0-based repeat index) when O(repeats) is 2 or more.
      type: dict
      sample: {variant: baseline, fingerprint: 3f9a}
client:
  description: The benchmark client itself, with a self-check of its event-loop lag.
  returned: success
  type: dict
  contains:
    version:
      description: Client version.
      type: str
      sample: 0.5.0
    loop_lag_ms:
      description: Per level, the distribution of the event loop's scheduling lag.
      type: list
      elements: dict
      sample: [{concurrency: 1, lag: {mean: 0.5, p99: 1.2}}]
    saturated:
      description: Whether the worst p99 loop lag passed 5 ms.
      type: bool
      sample: false
    warnings:
      description: Anything that makes the figures less trustworthy.
      type: list
      elements: str
      sample: []
"""

import math
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inferops.serving.plugins.module_utils import _bench, _bench_args, _metrics, _openai_stream as _stream, _prom

MODELS_TIMEOUT = 30.0    # seconds the /v1/models lookup may take in all (at most timeout)
IDENTIFY_TIMEOUT = 5.0   # seconds the engine identification may take in all, both its requests (at most timeout)


def _summary(result):
    text = "c=%d: %s/%s ok, %s tok/s output, %s tok/s decode per request (p50), ttft p50 %s ms" % (
        result["concurrency"], result["completed"], result["requests"], result["output_throughput"],
        result["decode_tps_per_request"]["p50"], result["ttft_ms"]["p50"])
    if result.get("steady") is False:
        text += ", NOT steady after %s s of warm-up" % result.get("warmup_s")
    return text


def _seconds(ms):
    return None if ms is None else ms / 1000.0


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            model=dict(type="str"),
            api_key=dict(type="str", no_log=True),
            labels=dict(type="dict", default={}),
            metrics=dict(type="dict", options=dict(file=dict(type="path", required=True), instance=dict(type="str"))),
            **_bench_args.spec()
        ),
        supports_check_mode=True,
    )
    p = module.params
    began = time.monotonic()

    def fail(msg, **kwargs):
        module.fail_json(msg=msg, elapsed_s=round(time.monotonic() - began, 3), **kwargs)

    if not p["concurrency"]:
        fail("concurrency: give at least one level, for example [1, 32]")
    if any(c < 1 for c in p["concurrency"]):
        fail("concurrency: every level must be 1 or more, got %s" % p["concurrency"])
    for key, low in (("input_tokens", 1), ("output_tokens", 1), ("warmup", 0), ("requests_per_level", 1),
                     ("repeats", 1)):
        if p[key] is not None and p[key] < low:
            fail("%s must be %d or more, got %d" % (key, low, p[key]))
    if p["timeout"] <= 0:
        fail("timeout must be a positive number of seconds, got %s" % p["timeout"])
    if not math.isfinite(p["warmup_tolerance"]) or p["warmup_tolerance"] < 0:
        fail("warmup_tolerance must be a relative difference of 0 or more (0.05 is 5 %%), got %s" % p["warmup_tolerance"])
    if not math.isfinite(p["warmup_max_s"]) or p["warmup_max_s"] <= 0:
        fail("warmup_max_s must be a positive number of seconds, got %s" % p["warmup_max_s"])
    slo = dict((k, v) for k, v in (p["slo"] or {}).items() if v is not None)
    if _metrics.slo_problems(slo):
        fail("; ".join(_metrics.slo_problems(slo)))
    try:
        target = _stream.Target(p["url"])
    except ValueError as exc:
        fail("url: %s" % exc)

    try:
        models = _stream.list_models(target, p["api_key"], min(p["timeout"], MODELS_TIMEOUT))
    except _stream.RequestError as exc:
        fail("server at %s is unreachable or not OpenAI-compatible: %s" % (p["url"], exc), url=p["url"], error_kind=exc.kind)
    model = p["model"]
    if model is None:
        if not models:
            fail("%s lists no models at /v1/models; set model" % target.full("/v1/models"), url=p["url"])
        model = models[0]
    elif models and model not in models:
        fail("model %r is not served at %s; the server offers: %s" % (model, p["url"], ", ".join(models)),
             url=p["url"], models=models)

    engine = p["engine"]
    if engine == "auto":
        engine = _bench.identify(target, p["api_key"], min(p["timeout"], IDENTIFY_TIMEOUT))
    metrics_url = p["metrics_url"]
    if metrics_url is None and engine in ("sglang", "vllm"):
        metrics_url = target.full("/metrics")  # where both serve their counters (SGLang with --enable-metrics)

    levels = []
    for repeat in range(p["repeats"]):
        for c in p["concurrency"]:
            levels.append((c, p["requests_per_level"] or max(4, 2 * c), p["warmup"],
                           repeat if p["repeats"] > 1 else None))
    bench = _bench.Bench(target, model, api=p["api"], input_tokens=p["input_tokens"],
                         output_tokens=p["output_tokens"], ignore_eos=p["ignore_eos"], api_key=p["api_key"],
                         timeout=p["timeout"], slo=slo, labels=p["labels"], metrics_url=metrics_url, engine=engine,
                         warmup_tolerance=p["warmup_tolerance"], warmup_max_s=p["warmup_max_s"])
    results, client = _bench.run(bench, levels)
    out = dict(changed=False, url=p["url"], model=model, api=p["api"], results=results, client=client, engine=engine,
               metrics_url=metrics_url, elapsed_s=round(time.monotonic() - began, 3))
    empty = [r for r in results if r["completed"] == 0]
    if empty:
        r = empty[0]
        msg = "no request completed at concurrency %d against %s: %s" % (
            r["concurrency"], p["url"], "; ".join("%s x%d: %s" % (k, n, r["error_samples"].get(k))
                                                  for k, n in sorted(r["errors"].items())))
        if p["ignore_eos"] and any("ignore_eos" in str(v) or "min_tokens" in str(v) for v in r["error_samples"].values()):
            msg += " (this server rejects ignore_eos/min_tokens: set ignore_eos to false)"
        module.fail_json(msg=msg, **out)
    if p["metrics"] and not module.check_mode:
        last = dict((r["concurrency"], r) for r in results)  # the last repeat of each level
        labels = dict(p["labels"], engine=engine, instance=p["metrics"]["instance"] or p["labels"].get("instance"))
        levels = [{"concurrency": c, "output_throughput": r["output_throughput"],
                   "ttft_p50_s": _seconds(r["ttft_ms"]["p50"]), "tpot_p50_s": _seconds(r["tpot_ms"]["p50"])}
                  for c, r in sorted(last.items())]
        try:
            out["metrics_file"] = _prom.export_bench(p["metrics"]["file"], labels, levels)
        except (IOError, OSError) as exc:
            module.warn("metrics.file %s was not written: %s" % (p["metrics"]["file"], exc))
    out["msg"] = "; ".join(_summary(r) for r in results)
    if p["repeats"] > 1:
        each = ["repeat %d %s" % (r["labels"]["repeat"] + 1, _summary(r)) for r in results]
        out["msg"] = "%d repeats; %s" % (p["repeats"], "; ".join(each))
    if any(r["failed"] for r in results):
        out["msg"] += " (FAILED requests: %s)" % ", ".join("c=%d %s" % (r["concurrency"], r["errors"])
                                                           for r in results if r["failed"])
    module.exit_json(**out)


if __name__ == "__main__":
    main()
