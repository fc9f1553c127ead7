# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the results modules share: the record schema (a level, its history record), the one metric table and
its views, and the small formatting helpers. Imports no other module of the collection.
"""

from __future__ import annotations

import collections

# ---- the record schema ------------------------------------------------------------------------

# a level across runs: a history record is one host x variant x concurrency of one benchmark (and one
# instance of the host, a replica of serving_instances, where its labels name one)
RECORD_KEY = ("host", "variant", "concurrency")


def level_key(rec):
    """What a level is compared across runs by: (host, instance, variant, concurrency). instance is None for a
    host's only server, so replica r0 is never compared with r1, nor with the host's former single server."""
    return (rec["host"], rec.get("instance"), rec["variant"], rec["concurrency"])


# a history record's identity (the bench_summary rows lead with it)
IDENTITY_KEYS = ("host", "variant", "fingerprint", "concurrency")
# a level's figures copied into its history record as they are
SCALARS = ("completed", "failed", "duration_s", "output_throughput", "input_throughput",
           "request_throughput", "goodput", "slo_attainment", "tokens_per_chunk", "token_source",
           "acceptance_length")
# what a record says about how it was measured, null until the benchmark reports it: the server instance (a
# replica of a host, from the labels), the settings the engine resolved, the warm-up the level had and whether
# it was measured at steady state (from the level)
CONTEXT_KEYS = ("instance", "resolved", "warmup_s", "steady")
# a level's distributions (dicts of percentiles): the record keeps the p50 under the key, these as KEY_PCT
DISTRIBUTIONS = ("ttft_ms", "tpot_ms", "e2e_ms", "decode_tps_per_request", "e2e_tps_per_request")
PERCENTILES = ("mean", "p90", "p99")


def is_level(item):
    """A throughput_bench level: a dict with a concurrency and an output throughput."""
    return isinstance(item, dict) and "concurrency" in item and "output_throughput" in item


def bench_levels(result):
    """The level dicts of a throughput_bench result, or [] when it carries none."""
    levels = result.get("results") if isinstance(result, dict) else None
    if not isinstance(levels, list):
        return []
    return [level for level in levels if is_level(level)]


def conc_key(conc):
    """A sort key of concurrencies: numbers in order, then anything else by its text."""
    return (not isinstance(conc, (int, float)), conc if isinstance(conc, (int, float)) else str(conc))


def repeat_index(value):
    """The 0-based repeat index of a benchmark's labels: an int, a string of digits read as one, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


# ---- the metric table -------------------------------------------------------------------------

Metric = collections.namedtuple("Metric", "key short label unit digits better column compared regression summary")
Metric.__doc__ = """One figure of a throughput_bench level, the same key in a level and in a history record.

key: the level's key (in DISTRIBUTIONS: read at its p50). short: its name in compare's verdict lines.
label: its name in tables and regression lines. unit, digits: printed after it, decimals printed.
better: "higher" or "lower". column: its column head in compare's Markdown table. compared: its rank among
the metrics variants are compared on (None: not compared). regression: a change for the worse beyond the
threshold is a regression (bench_facts). summary: a column of the bench_summary rows.
"""

# One row per metric, in the order of the bench_summary columns (and of the report's table).
METRICS = (
    Metric("completed", "completed", "completed requests", "", 0, "higher", None, None, False, True),
    Metric("failed", "failed", "failed requests", "", 0, "lower", None, None, False, True),
    Metric("output_throughput", "output", "output throughput", "tok/s", 1, "higher", "output tok/s", 1, True, True),
    Metric("decode_tps_per_request", "decode", "decode tok/s per request p50", "tok/s", 1, "higher", "decode tok/s",
           4, False, True),
    Metric("e2e_tps_per_request", "e2e", "e2e tok/s per request p50", "tok/s", 1, "higher", None, None, False, True),
    Metric("ttft_ms", "TTFT", "TTFT p50", "ms", 1, "lower", "TTFT p50 ms", 3, False, True),
    Metric("tpot_ms", "TPOT", "TPOT p50", "ms", 2, "lower", "TPOT p50 ms", 2, True, True),
    Metric("acceptance_length", "acceptance", "acceptance length", "", 2, "higher", "acceptance", 7, False, True),
    Metric("goodput", "goodput", "goodput", "req/s", 2, "higher", "goodput req/s", 5, False, False),
    Metric("slo_attainment", "SLO met", "SLO attainment", "", 2, "higher", "SLO met", 6, False, False),
)
BY_KEY = dict((metric.key, metric) for metric in METRICS)

# the views: what variants are compared on (compare), in their rank order; what a regression is judged on
# (bench_facts); the columns of a bench_summary row (identity first)
COMPARED = tuple(sorted((m for m in METRICS if m.compared is not None), key=lambda m: m.compared))
REGRESSION_METRICS = tuple(m for m in METRICS if m.regression)
SUMMARY_KEYS = IDENTITY_KEYS + ("repeat",) + tuple(m.key for m in METRICS if m.summary)


# ---- formatting -------------------------------------------------------------------------------

def num(value):
    """A number as it is (an int stays an int), else None; a bool is no number."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def fmt(value, digits=1, fixed=False):
    """"-" for None; a float with ``digits`` decimals, any other value as str(). ``fixed``: every value with
    ``digits`` decimals, an int too (compare's figures)."""
    if value is None:
        return "-"
    if fixed or isinstance(value, float):
        return ("%%.%df" % digits) % value
    return str(value)


def md_escape(text):
    """Text for a Markdown table cell or heading: its pipes escaped."""
    return str(text).replace("|", "\\|")
