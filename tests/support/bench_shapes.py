# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Results shaped like inferops.serving.throughput_bench's, with the figures a timing-exact server gives.

For a server that sends its first chunk TTFT after the request, then one chunk of k tokens every
step ms, the truth is known in advance (docs: benchmarking): tpot = step / k, decode tok/s per
request = 1000 k / step, output throughput = C n / (TTFT + (ceil(n / k) - 1) step).
These are test data for the bench_facts callback, not a stand-in for the benchmark module.
"""

from __future__ import annotations

import math

from collection_meta import galaxy_version


def _dist(value):
    return {"mean": value, "p50": value, "p90": value, "p99": value, "min": value, "max": value}


def level(concurrency, step_ms=10.0, ttft_ms=50.0, k=1, n_out=256, n_in=128, requests=None,
          variant="baseline", fingerprint="fp-baseline", host="localhost", acceptance_length=None):
    requests = requests or 2 * concurrency
    e2e_ms = ttft_ms + (math.ceil(n_out / float(k)) - 1) * step_ms
    tpot_ms = step_ms / k
    window_s = (requests / float(concurrency)) * e2e_ms / 1000.0
    return {
        "concurrency": concurrency, "completed": requests, "failed": 0, "errors": {},
        "duration_s": round(window_s, 4),
        "output_throughput": requests * n_out / window_s,
        "input_throughput": requests * n_in / window_s,
        "request_throughput": requests / window_s,
        "goodput": requests / window_s,
        "ttft_ms": _dist(ttft_ms), "tpot_ms": _dist(tpot_ms), "e2e_ms": _dist(e2e_ms),
        "decode_tps_per_request": _dist(1000.0 / tpot_ms),
        "e2e_tps_per_request": _dist(n_out * 1000.0 / e2e_ms),
        "tokens_per_chunk": float(k), "token_source": "usage",
        "acceptance_length": acceptance_length,
        "labels": {"variant": variant, "fingerprint": fingerprint, "host": host},
    }


def bench_result(concurrencies=(1, 4, 16), **kwargs):
    """A whole throughput_bench return value: one level per concurrency, and the client block."""
    return {"changed": False, "results": [level(c, **kwargs) for c in concurrencies],
            "client": {"name": "inferops.serving", "version": galaxy_version()}}
