# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-request timings -> one concurrency level's aggregates. Pure functions, no I/O.

Definitions (docs: benchmarking.md), per successful streamed request, monotonic seconds:
  ttft = t_first - t_send; e2e = t_last - t_send (the trailing usage chunk does not count);
  tpot = (t_last - t_first) / (n_out - n_first); decode_tps_per_request = 1 / tpot;
  e2e_tps_per_request = n_out / e2e.
Over the level's window W = max(t_last) - min(t_send):
  output_throughput = sum(n_out) / W; request_throughput = completed / W; goodput = requests meeting
  every SLO / W (failed requests are misses).
"""

from __future__ import annotations

import math
import re

# The targets an SLO may set, each in milliseconds: the one list, for throughput_bench's argument spec and
# for compare.yml / tune.yml, which check -e slo before anything runs.
SLO_TARGETS = (("ttft_ms", "time to first token"), ("tpot_ms", "time per output token"),
               ("e2e_ms", "end-to-end latency"))


def slo_problems(slo):
    """Why slo (a mapping of SLO_TARGETS keys to milliseconds) is not a valid SLO: a list of messages,
    empty when it is. A target is a positive number; None means unset."""
    known = [target[0] for target in SLO_TARGETS]
    if not isinstance(slo, dict):
        return ["slo must be a mapping of %s to milliseconds, got %r" % (", ".join(known), slo)]
    problems = ["slo: %r is not a target; the targets are %s" % (k, ", ".join(known)) for k in slo if k not in known]
    for key in known:
        value = slo.get(key)
        if value is None:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = None
        if isinstance(value, bool) or number is None or not math.isfinite(number) or number <= 0:
            problems.append("slo: %s must be a positive number of milliseconds, got %r" % (key, value))
    return problems


def percentile(ordered, q):
    """Linear interpolation between closest ranks (numpy's default) of an ascending list."""
    if not ordered:
        return None
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def distribution(values, scale=1.0, digits=4):
    """{mean, p50, p90, p99, min, max, count} of the values (None entries dropped), times scale."""
    vals = sorted(v * scale for v in values if v is not None)
    if not vals:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "min": None, "max": None, "count": 0}

    def r(x):
        return round(x, digits)
    return {"mean": r(sum(vals) / len(vals)), "p50": r(percentile(vals, 0.5)), "p90": r(percentile(vals, 0.9)),
            "p99": r(percentile(vals, 0.99)), "min": r(vals[0]), "max": r(vals[-1]), "count": len(vals)}


def request_timings(rec):
    """One completed request's figures: n_out, token source, ttft/e2e/tpot (seconds) and rates."""
    usage = rec.usage or {}
    if isinstance(usage.get("completion_tokens"), int):
        n_out, source = usage["completion_tokens"], "usage"
    else:
        n_out, source = rec.n_events, "content_events"
    n_first = rec.n_first if rec.chunk_usage else 1
    n_in = usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else None
    if rec.t_first is None:
        # completed, but its tokens decoded to no text (usage says how many): no latencies to measure
        return {"n_out": n_out, "token_source": source, "n_in": n_in, "ttft": None, "e2e": None, "tpot": None,
                "decode_tps": None, "e2e_tps": None, "tokens_per_chunk": None, "no_text": True}
    ttft = rec.t_first - rec.t_send
    e2e = rec.t_last - rec.t_send
    tpot = None
    if n_out > n_first and rec.n_events > 1 and rec.t_last > rec.t_first:
        tpot = (rec.t_last - rec.t_first) / float(n_out - n_first)
    return {
        "n_out": n_out, "token_source": source, "n_in": n_in,
        "ttft": ttft, "e2e": e2e, "tpot": tpot,
        "decode_tps": (1.0 / tpot) if tpot else None,
        "e2e_tps": (n_out / e2e) if e2e > 0 else None,
        "tokens_per_chunk": (float(n_out) / rec.n_events) if rec.n_events else None,
        "no_text": False,
    }


def meets_slo(timing, slo):
    """Whether a completed request meets every SLO target given (milliseconds)."""
    if not slo:
        return True
    if timing.get("no_text"):
        return False  # nothing shows it met any target
    if slo.get("ttft_ms") is not None and timing["ttft"] * 1000.0 > slo["ttft_ms"]:
        return False
    if slo.get("e2e_ms") is not None and timing["e2e"] * 1000.0 > slo["e2e_ms"]:
        return False
    if slo.get("tpot_ms") is not None and timing["tpot"] is not None and timing["tpot"] * 1000.0 > slo["tpot_ms"]:
        return False
    return True


def _token_source(sources):
    kinds = sorted(set(sources))
    if not kinds:
        return None
    if kinds == ["usage"]:
        return "usage"
    if kinds == ["content_events"]:
        return "content_events (no usage from the server: one token counted per content event)"
    return "mixed: " + ", ".join("%s %d" % (k, sources.count(k)) for k in kinds)


def aggregate(records, concurrency, output_tokens=None, ignore_eos=False, slo=None, labels=None):
    """One level's result dict from its StreamRecords (completed and failed)."""
    done = [r for r in records if r.error_kind is None]
    failed = [r for r in records if r.error_kind is not None]
    errors = {}
    samples = {}
    for r in failed:
        kind = r.error_kind or "unknown"
        errors[kind] = errors.get(kind, 0) + 1
        samples.setdefault(kind, r.error)
    timings = [request_timings(r) for r in done]
    sends = [r.t_send for r in records if r.t_send is not None]
    window = None
    if done and sends:
        window = max(r.t_end if r.t_last is None else r.t_last for r in done) - min(sends)
    elif sends:
        window = max(r.t_end for r in records if r.t_end is not None) - min(sends)
    n_out = sum(t["n_out"] for t in timings)
    n_in = [t["n_in"] for t in timings if t["n_in"] is not None]
    good = sum(1 for t in timings if meets_slo(t, slo)) if slo else None

    def rate(x):
        return round(x / window, 4) if (window and x is not None) else None

    mismatch = 0
    if ignore_eos and output_tokens:
        mismatch = sum(1 for t in timings if t["n_out"] != output_tokens)
    return {
        "concurrency": concurrency,
        "requests": len(records),
        "completed": len(done),
        "failed": len(failed),
        "errors": errors,
        "error_samples": samples,
        "duration_s": round(window, 6) if window is not None else None,
        "output_tokens": n_out,
        "input_tokens": sum(n_in) if n_in else None,
        "output_throughput": rate(n_out),
        "input_throughput": rate(sum(n_in)) if len(n_in) == len(timings) and n_in else None,
        "total_throughput": rate(n_out + sum(n_in)) if len(n_in) == len(timings) and n_in else None,
        "request_throughput": rate(len(done)),
        "goodput": rate(good) if slo else None,
        "slo": dict(slo) if slo else None,
        "slo_met": good,
        # the share of the level's requests that met every target (a failed request is a miss)
        "slo_attainment": round(float(good) / len(records), 4) if slo and records else None,
        "ttft_ms": distribution([t["ttft"] for t in timings], 1000.0),
        "tpot_ms": distribution([t["tpot"] for t in timings], 1000.0),
        "e2e_ms": distribution([t["e2e"] for t in timings], 1000.0),
        "decode_tps_per_request": distribution([t["decode_tps"] for t in timings]),
        "e2e_tps_per_request": distribution([t["e2e_tps"] for t in timings]),
        "tokens_per_chunk": distribution([t["tokens_per_chunk"] for t in timings]),
        "input_tokens_per_request": distribution(n_in),
        "token_source": _token_source([t["token_source"] for t in timings]),
        "length_mismatch": mismatch,
        "no_text": sum(1 for t in timings if t["no_text"]),
        "labels": dict(labels or {}),
    }


# ---------------------------------------------------------------------------- speculative decoding
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfINFaN]+)")

# vLLM 0.34.0 vllm/v1/spec_decode/metrics.py: counters with one series per engine (label engine), summed here;
# the per-position counter adds the label position
VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
VLLM_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
# SGLang 0.5.23 srt/observability/metrics_collector.py: both counted when a request finishes
SGLANG_GENERATED = "sglang:generation_tokens_total"
SGLANG_VERIFY = "sglang:spec_verify_calls_total"
# SGLang 0.5.9 and later: a gauge, the mean over recent decode batches (not a figure of one run)
SGLANG_ACCEPT_GAUGE = "sglang:spec_accept_length"
_POSITION = re.compile(r'position="(\d+)"')


def parse_prometheus(text):
    """{metric name: value summed over its label sets} from Prometheus text exposition; the per-position
    acceptance counter also under (name, position)."""
    out = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + value
        if m.group(1) == VLLM_PER_POS:
            pos = _POSITION.search(m.group(2) or "")
            if pos:
                key = (VLLM_PER_POS, int(pos.group(1)))
                out[key] = out.get(key, 0.0) + value
    return out


def acceptance_from_counters(before, after):
    """Spec-decode figures over one window from two /metrics scrapes (never since start): vLLM's
    (acceptance_length = 1 + d(accepted) / d(drafts), summed over every engine series, with the
    acceptance rate per draft position) or SGLang's (d(generated tokens) / d(verify calls)).
    Returns None when the counters are absent or did not move.
    """
    if not before or not after:
        return None
    if SGLANG_VERIFY in after and SGLANG_VERIFY in before and SGLANG_GENERATED in after and SGLANG_GENERATED in before:
        verify = after[SGLANG_VERIFY] - before[SGLANG_VERIFY]
        generated = after[SGLANG_GENERATED] - before[SGLANG_GENERATED]
        if verify > 0:
            return {"source": "sglang /metrics counter deltas over the level (generation_tokens / spec_verify_calls)",
                    "acceptance_length": round(generated / verify, 4), "verify_steps": verify,
                    "generated_tokens": generated}
    if VLLM_ACCEPTED not in after or VLLM_ACCEPTED not in before:
        return None
    accepted = after[VLLM_ACCEPTED] - before[VLLM_ACCEPTED]
    out = {"source": "vllm /metrics counter deltas over the level", "accepted_tokens": accepted}
    if VLLM_DRAFTS in after and VLLM_DRAFTS in before:
        drafts = after[VLLM_DRAFTS] - before[VLLM_DRAFTS]
        out["drafts"] = drafts
        out["acceptance_length"] = round(1.0 + accepted / drafts, 4) if drafts > 0 else None
    if VLLM_DRAFT_TOKENS in after and VLLM_DRAFT_TOKENS in before:
        draft_tokens = after[VLLM_DRAFT_TOKENS] - before[VLLM_DRAFT_TOKENS]
        out["draft_tokens"] = draft_tokens
        out["acceptance_rate"] = round(accepted / draft_tokens, 4) if draft_tokens > 0 else None
    if out.get("acceptance_length") is None and out.get("acceptance_rate") is None:
        return None
    positions = sorted(k[1] for k in after if isinstance(k, tuple) and k[0] == VLLM_PER_POS and k in before)
    if positions and out.get("drafts"):
        out["acceptance_rate_per_position"] = [round((after[(VLLM_PER_POS, p)] - before[(VLLM_PER_POS, p)]) / out["drafts"], 4)
                                               for p in positions]
    return out


def acceptance_from_gauge(after):
    """SGLang's gauge, when nothing per level exists (0.5.9 on its OpenAI endpoints): labelled as rolling."""
    if not after or SGLANG_ACCEPT_GAUGE not in after:
        return None
    return {"source": "sglang /metrics gauge spec_accept_length: a rolling mean over recent decode batches, "
                      "not this level's figure", "acceptance_length": round(after[SGLANG_ACCEPT_GAUGE], 4),
            "rolling": True}


def acceptance_from_sglext(records):
    """SGLang's per-request sglext.spec_tokens_details: sum(completion_tokens) / sum(spec_verify_ct)."""
    tokens = verify = 0
    for r in records:
        details = getattr(r, "spec_details", None)
        if r.error_kind is not None or not details:
            continue
        items = details if isinstance(details, list) else [details]
        steps = sum(d.get("spec_verify_ct") or 0 for d in items if isinstance(d, dict))
        done = (r.usage or {}).get("completion_tokens")
        if steps > 0 and done:
            tokens += done
            verify += steps
    if not verify:
        return None
    return {"source": "sglang sglext.spec_tokens_details (completion_tokens / spec_verify_ct)",
            "acceptance_length": round(float(tokens) / verify, 4), "verify_steps": verify}


def acceptance_from_meta(records):
    """SGLang per-request meta_info: sum(completion_tokens) / sum(spec_verify_ct) over the level."""
    tokens = verify = 0
    for r in records:
        meta = getattr(r, "meta_info", None) or {}
        if r.error_kind is None and isinstance(meta.get("spec_verify_ct"), (int, float)) and meta["spec_verify_ct"] > 0:
            tokens += meta.get("completion_tokens") or 0
            verify += meta["spec_verify_ct"]
    if not verify:
        return None
    return {"source": "sglang native /generate meta_info (completion_tokens / spec_verify_ct)",
            "acceptance_length": round(float(tokens) / verify, 4), "verify_steps": verify}
