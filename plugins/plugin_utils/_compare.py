# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare variants on one host: which is faster here, and by how much, with repeats and confidence intervals.

Each variant is benchmarked several times (repeats); a repeat is the list of throughput_bench levels
(or the throughput_bench result itself). Per concurrency and metric:

- a variant's figure is the geometric mean over its repeats, with a 95 % Student-t interval computed on
  the logarithms (n - 1 degrees of freedom) and taken back with exp;
- a variant against the reference (the first variant in run order that did not fail) is the ratio of the
  geometric means, variant / reference, with a 95 % Welch interval on the difference of the mean logs
  (Welch-Satterthwaite degrees of freedom), taken back with exp; significant when it excludes 1.

The figure and its interval estimate the same thing, and a ratio is symmetric on the log scale (x1.10 and
x0.91 are the same distance from 1). Throughputs and latencies are positive and their noise is
multiplicative, which is what logs suit.

Goodput and SLO attainment can be 0 (no request met the SLO), where a log does not exist. They are read on
their own scale: the arithmetic mean with a Student-t interval, and the ratio of the means with Fieller's
interval (Welch degrees of freedom at the estimate), which allows a 0 on the variant's side; a reference
mean within its own noise of 0 makes that interval unbounded, and then no interval and no significance are
claimed (``why`` says so). Any other metric with a value <= 0 falls back to the same arithmetic treatment,
and ``estimate`` says which figure a cell or ratio is.

This replaced a 95 % bootstrap percentile interval of the median: over 2 to 5 values a percentile
bootstrap can only return (roughly) the values' own range, which covered the truth 67 % of the time at 2
repeats and 87 % at 3, and called identical variants different in 34 % and 14 % of pairs.
tests/unit/plugins/plugin_utils/test_compare_coverage.py measures the promise kept now.

Standard library only (the t quantile is computed here: Hill's approximation refined against the exact
distribution function), deterministic (no resampling, so no seed), unit-tested without Ansible; the
compare_variants filter only feeds input in.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

from ansible_collections.inferops.serving.plugins.module_utils import _metrics
from ansible_collections.inferops.serving.plugins.plugin_utils import _resolved_diff, _steady
from ansible_collections.inferops.serving.plugins.plugin_utils._results_common import (
    COMPARED, DISTRIBUTIONS, bench_levels, fmt, md_escape, num)

CONFIDENCE = 0.95
_UPPER = 1.0 - (1.0 - CONFIDENCE) / 2.0  # the t quantile of a two-sided 95 % interval: 0.975

# What variants are compared on: the metric table's COMPARED view (_results_common.Metric rows: key, short
# label (verdict lines), label (tables), unit, digits printed, which way is better, ...), in rank order. A
# distribution (DISTRIBUTIONS) is read at its p50. An absent or null figure is skipped, never taken as 0.
METRICS = COMPARED
METRIC_KEYS = tuple(metric.key for metric in METRICS)
_BY_KEY = dict((metric.key, metric) for metric in METRICS)
# where in a level: (key,) for a number, (key, "p50") for a distribution (a dict of percentiles)
_PLACES = dict((key, (key, "p50") if key in DISTRIBUTIONS else (key,)) for key in METRIC_KEYS)
THROUGHPUT, GOODPUT, ATTAINMENT = "output_throughput", "goodput", "slo_attainment"

# Metrics that can be 0 in a healthy run (no request met the SLO): no logarithm, read on their own scale.
ZERO_ALLOWED = frozenset((GOODPUT, ATTAINMENT))
# what a figure is, as the cells' and rows' "estimate" says it
GEOMETRIC, ARITHMETIC = "geometric mean", "mean"
RATIO_OF = {GEOMETRIC: "ratio of geometric means", ARITHMETIC: "ratio of means"}
# the largest value a metric can take: an interval of a share stops at 1 (and one of values >= 0 at 0)
_CEILING = {ATTAINMENT: 1.0}

_NORMAL = NormalDist()


class CompareError(ValueError):
    """Bad input to the comparison; the message says what was wrong and what is allowed."""


def read_metric(level, key):
    """The figure of one metric in a level dict, or None when it is absent or null.

    A distribution is read at its p50; a plain number where a distribution is expected (a history
    record, which keeps only the p50) is taken as it is.
    """
    place = _PLACES[key]
    value = level.get(place[0]) if isinstance(level, dict) else None
    if isinstance(value, dict):
        value = value.get(place[1]) if len(place) > 1 else None
    value = num(value)
    return None if value is None else float(value)


# ---- Student's t, standard library only -------------------------------------------------------------

def _beta_fraction(a, b, x):
    """The continued fraction of the regularized incomplete beta function (modified Lentz, as in Numerical
    Recipes' betacf; converges in a few dozen terms for x < (a + 1) / (a + b + 2), which _beta_inc
    arranges)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = m + m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        if abs(c) < tiny:
            c = tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        if abs(c) < tiny:
            c = tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 3e-16:
            break
    return h


def _beta_inc(a, b, x, y):
    """I_x(a, b), the regularized incomplete beta function; y = 1 - x, passed apart so that neither is a
    difference that lost its digits."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, y) / b


def _t_upper(t, df):
    """P(T > t) for t >= 0: half of I_{df / (df + t^2)}(df / 2, 1 / 2)."""
    return 0.5 * _beta_inc(0.5 * df, 0.5, df / (df + t * t), t * t / (df + t * t))


def t_cdf(t, df):
    """P(T <= t) for Student's t with df > 0 degrees of freedom (df need not be a whole number)."""
    if not df > 0:
        raise ValueError("degrees of freedom must be above 0, got %r" % (df,))
    if df > 1e10:
        return _NORMAL.cdf(t)
    upper = _t_upper(abs(t), df)
    return 1.0 - upper if t >= 0 else upper


def _t_density(t, df):
    return math.exp(math.lgamma(0.5 * (df + 1.0)) - math.lgamma(0.5 * df) - 0.5 * math.log(df * math.pi)
                    - 0.5 * (df + 1.0) * math.log1p(t * t / df))


def _hill(two_sided, df):
    """G. W. Hill, Algorithm 396: Student's t-quantiles, Comm. ACM 13 (1970) 619-620: t with P(|T| > t)
    = two_sided. Exact for df 1 and 2; only a few digits for 1 < df < 3 that are not whole (3 % off at
    1.3), about 1e-5 from df 3 on. Only the starting point of t_quantile's refinement."""
    if df == 1.0:
        return 1.0 / math.tan(two_sided * math.pi / 2.0)
    if df == 2.0:
        return math.sqrt(2.0 / (two_sided * (2.0 - two_sided)) - 2.0)
    a = 1.0 / (df - 0.5)
    b = 48.0 / (a * a)
    c = ((20700.0 * a / b - 98.0) * a - 16.0) * a + 96.36
    d = ((94.5 / (b + c) - 3.0) / b + 1.0) * math.sqrt(a * math.pi / 2.0) * df
    y = (d * two_sided) ** (2.0 / df)
    if y > 0.05 + a:
        x = _NORMAL.inv_cdf(two_sided * 0.5)
        y = x * x
        if df < 5.0:
            c += 0.3 * (df - 4.5) * (x + 0.6)
        c = (((0.05 * d * x - 5.0) * x - 7.0) * x - 2.0) * x + b + c
        y = (((((0.4 * y + 6.3) * y + 36.0) * y + 94.5) / c - y - 3.0) / b + 1.0) * x
        y = a * y * y
        y = math.expm1(y) if y > 0.002 else 0.5 * y * y + y
    else:
        y = (((1.0 / (((df + 6.0) / (df * y) - 0.089 * d - 0.822) * (df + 2.0) * 3.0) + 0.5 / (df + 4.0)) * y - 1.0)
             * (df + 1.0) / (df + 2.0) + 1.0 / y)
    return math.sqrt(df * y)


@functools.lru_cache(maxsize=1024)  # a summary asks for the same few (0.975, n - 1) again and again
def t_quantile(p, df):
    """The p-quantile of Student's t with df > 0 degrees of freedom, df not necessarily whole (Welch's).

    Hill's approximation is refined with Halley's method against the exact upper tail (_t_upper) until a
    step moves it by less than 1e-5 of itself (Halley's error is about the cube of its last step, so that
    leaves it exact to 1e-13 or better), inside a bracket that never loses the root. Normal quantiles
    past df 1e10, where the t distribution is the normal one to 1e-10.
    """
    if not 0.0 < p < 1.0:
        raise ValueError("p must be between 0 and 1 (both excluded), got %r" % (p,))
    if not df > 0:
        raise ValueError("degrees of freedom must be above 0, got %r" % (df,))
    if p == 0.5:
        return 0.0
    tail = min(p, 1.0 - p)
    sign = 1.0 if p > 0.5 else -1.0
    if df > 1e10:
        return -_NORMAL.inv_cdf(tail) * sign
    t = _hill(2.0 * tail, df) if df >= 1.0 else -_NORMAL.inv_cdf(tail)
    low, high = 0.0, math.inf
    for _step in range(200):
        gap = _t_upper(t, df) - tail  # the upper tail decreases with t: above the target, t is too small
        if gap > 0:
            low = t
        else:
            high = t
        slope = -_t_density(t, df)
        bend = -slope * (df + 1.0) * t / (df + t * t)
        step = 2.0 * gap * slope / (2.0 * slope * slope - gap * bend)
        if abs(step) <= 1e-5 * t:  # Halley's error is about the cube of its step: below the float's digits
            return (t - step) * sign
        t -= step
        if not low < t < high:
            t = 0.5 * (low + high) if high < math.inf else 2.0 * low
    return t * sign


# ---- estimates and intervals ------------------------------------------------------------------------

def _moments(values):
    """(n, mean, sample variance (None below 2 values)) in plain floats. Equal values give exactly their
    value and 0, so a constant repeat reads as itself."""
    n = len(values)
    if min(values) == max(values):
        return n, float(values[0]), (0.0 if n > 1 else None)
    mean = math.fsum(values) / n
    return n, mean, (math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else None)


def _log_moments(values):
    """(n, mean log, variance of the logs, geometric mean) of positive values; equal values give exactly
    their value as the geometric mean."""
    n, mean, var = _moments([math.log(v) for v in values])
    return n, mean, var, (values[0] if min(values) == max(values) else math.exp(mean))


def _welch_df(parts):
    """Welch-Satterthwaite degrees of freedom of a sum of independent variances of means, parts [(variance
    of the mean, n)]; None when they are all 0."""
    total = sum(var for var, _n in parts)
    spread = sum(var * var / (n - 1) for var, n in parts if var)
    return total * total / spread if spread else None


def t_interval(estimate, parts):
    """(low, high, df): the 95 % Student-t interval of an estimate that is a sum or difference of
    independent means, ``parts`` [(variance of that mean, n)]: estimate +- t(0.975, df) * the square root
    of the summed variances, df Welch-Satterthwaite's (n - 1 for a single mean). (estimate, estimate,
    None) when every variance is 0: no noise was seen."""
    variance = sum(var for var, _n in parts)
    if variance == 0.0:
        return estimate, estimate, None
    df = _welch_df(parts)
    half = t_quantile(_UPPER, df) * math.sqrt(variance)
    return estimate - half, estimate + half, df


def _log_scale(values, metric=None):
    """Whether a metric's values are read on the log scale: never for ZERO_ALLOWED, never with a value <= 0."""
    return metric not in ZERO_ALLOWED and all(v > 0 for v in values)


def _bounded(value, metric, nonnegative):
    if value is None:
        return None
    if nonnegative:
        value = max(value, 0.0)
    return min(value, _CEILING[metric]) if metric in _CEILING else value


def centre(values, metric=None):
    """(figure, ci_low, ci_high, estimate) of one variant's values of one metric over its repeats.

    The geometric mean with a 95 % t-interval on the logs (n - 1 degrees of freedom), taken back with exp:
    the interval is multiplicative, as the noise is. For ZERO_ALLOWED metrics, or any value <= 0: the
    arithmetic mean with a 95 % t-interval, kept within what the metric can be (0, and 1 for a share).
    One value: no interval (None, None): there is no spread to measure it with.
    """
    values = [float(v) for v in values]
    if not values:
        return None, None, None, None
    if _log_scale(values, metric):
        n, mean, var, figure = _log_moments(values)
        if var is None:
            return figure, None, None, GEOMETRIC
        if var == 0.0:
            return figure, figure, figure, GEOMETRIC
        low, high, _df = t_interval(mean, [(var / n, n)])
        return figure, math.exp(low), math.exp(high), GEOMETRIC
    n, mean, var = _moments(values)
    if var is None:
        return mean, None, None, ARITHMETIC
    low, high, _df = t_interval(mean, [(var / n, n)])
    nonnegative = min(values) >= 0
    return mean, _bounded(low, metric, nonnegative), _bounded(high, metric, nonnegative), ARITHMETIC


def _log_ratio(base, variant, out):
    nb, mb, vb, out["base_median"] = _log_moments(base)
    nv, mv, vv, out["variant_median"] = _log_moments(variant)
    out["estimate"] = RATIO_OF[GEOMETRIC]
    out["ratio"] = out["variant_median"] / out["base_median"]
    if vb is None or vv is None:
        return out
    if vb == 0.0 and vv == 0.0:  # every repeat of each side gave the same value: no noise seen
        out["ci_low"] = out["ci_high"] = out["ratio"]
        return out
    low, high, out["df"] = t_interval(mv - mb, [(vb / nb, nb), (vv / nv, nv)])
    out["ci_low"], out["ci_high"] = math.exp(low), math.exp(high)
    return out


def _fieller_ratio(base, variant, out):
    """Fieller's interval of mean(variant) / mean(base): every rho for which mean(variant) - rho * mean(base)
    is within t * its standard error of 0. Bounded only when the base mean is clearly away from 0."""
    nb, mb, vb = _moments(base)
    nv, mv, vv = _moments(variant)
    out["estimate"] = RATIO_OF[ARITHMETIC]
    out["base_median"], out["variant_median"] = mb, mv
    if mb == 0.0:
        out["why"] = "the reference's mean is 0"
        return out
    rho = mv / mb
    out["ratio"] = rho
    if vb is None or vv is None:
        return out
    eb, ev = vb / nb, vv / nv  # variances of the two means
    if eb == 0.0 and ev == 0.0:
        out["ci_low"] = out["ci_high"] = rho
        return out
    out["df"] = _welch_df([(ev, nv), (rho * rho * eb, nb)]) or _welch_df([(ev, nv), (eb, nb)])
    q2 = t_quantile(_UPPER, out["df"]) ** 2
    a = mb * mb - q2 * eb
    if a <= 0.0:
        out["df"] = None
        out["why"] = "the reference's mean is within its own noise of 0: the ratio's interval is unbounded"
        return out
    b, c = mb * mv, mv * mv - q2 * ev
    root = math.sqrt(max(b * b - a * c, 0.0))
    nonnegative = min(base) >= 0 and min(variant) >= 0
    out["ci_low"] = _bounded((b - root) / a, None, nonnegative)
    out["ci_high"] = (b + root) / a
    return out


def ratio(base_values, variant_values, metric=None):
    """variant / base with a 95 % interval, significant when the interval excludes 1.

    Returns {ratio, ci_low, ci_high, significant, base_median, variant_median, estimate, df, why}:
    ``base_median`` and ``variant_median`` are the figures the ratio divides (the geometric means, or the
    means: ``estimate`` says "ratio of geometric means" or "ratio of means"; the key names stayed from
    when they were medians, so that their readers did not change); ``df`` the Welch-Satterthwaite degrees
    of freedom used; ``why`` says why there is no ratio or no interval (else None).

    Log scale (the default; see centre): exp(diff +- t * se) on the difference of the mean logs, Welch's
    unequal variances. ZERO_ALLOWED metrics or a value <= 0: Fieller's interval of the ratio of means.
    One value on a side: the ratio, but no interval and never significant. Every repeat of each side
    equal: the interval is the ratio itself (no noise was seen), significant unless it is 1.
    """
    base, variant = [float(v) for v in base_values], [float(v) for v in variant_values]
    out = {"ratio": None, "ci_low": None, "ci_high": None, "significant": False, "base_median": None,
           "variant_median": None, "estimate": None, "df": None, "why": None}
    if not base or not variant:
        out["why"] = "no values on %s" % ("either side" if not base and not variant else
                                          "the reference's side" if not base else "the variant's side")
        return out
    if _log_scale(base, metric) and _log_scale(variant, metric):
        _log_ratio(base, variant, out)
    else:
        _fieller_ratio(base, variant, out)
    if out["ratio"] is not None and (len(base) < 2 or len(variant) < 2):
        out["why"] = "one repeat on %s: no spread to measure the noise with" % (
            "each side" if len(base) < 2 and len(variant) < 2 else "the reference's side" if len(base) < 2
            else "the variant's side")
    if out["ci_low"] is not None:
        out["significant"] = out["ci_low"] > 1.0 or out["ci_high"] < 1.0
    return out


def _levels_of(repeat, where):
    """The level dicts of one repeat: a list of levels, or a throughput_bench result (dict with results)."""
    if isinstance(repeat, dict):
        if not isinstance(repeat.get("results"), list):
            raise CompareError("%s is a dict without results: a repeat is a list of throughput_bench levels "
                               "or a throughput_bench result" % where)
        return bench_levels(repeat)
    if not isinstance(repeat, list):
        raise CompareError("%s must be a list of throughput_bench levels or a throughput_bench result, got %s"
                           % (where, type(repeat).__name__))
    for pos, level in enumerate(repeat):
        if not isinstance(level, dict) or "concurrency" not in level:
            raise CompareError("%s, level %d: each level must be a dict with a concurrency, got %r"
                               % (where, pos + 1, level if not isinstance(level, dict) else sorted(level)))
    return repeat


def _conc_key(conc):
    return (not isinstance(conc, (int, float)), conc if isinstance(conc, (int, float)) else str(conc))


def summarize(repeats, where="repeats"):
    """{concurrency: {metric: {median, ci_low, ci_high, n, values, estimate}}} over the repeats.

    ``repeats`` is a list, one entry per repeat, of lists of level dicts. Each level is one
    observation of its concurrency (normally one per repeat); ``values`` keeps them in repeat order.
    Metrics a level does not have (null or absent) are skipped. ``median`` is centre()'s figure, the
    geometric mean (the mean for goodput, SLO attainment or a value <= 0), as ``estimate`` says: the key
    kept its name so that every reader of a summary (reports, charts, tune, rollout) reads it unchanged.
    ``ci_low`` and ``ci_high`` are None with one repeat.
    """
    if not isinstance(repeats, list):
        raise CompareError("%s must be a list of repeats (each a list of levels), got %s"
                           % (where, type(repeats).__name__))
    observed = {}
    for pos, repeat in enumerate(repeats):
        for level in _levels_of(repeat, "%s: repeat %d" % (where, pos + 1)):
            per_metric = observed.setdefault(level["concurrency"], {})
            for key in METRIC_KEYS:
                value = read_metric(level, key)
                if value is not None:
                    per_metric.setdefault(key, []).append(value)
    summary = {}
    for conc in sorted(observed, key=_conc_key):
        summary[conc] = {}
        for key in METRIC_KEYS:
            values = observed[conc].get(key)
            if not values:
                continue
            figure, low, high, estimate = centre(values, key)
            summary[conc][key] = {"median": figure, "ci_low": low, "ci_high": high, "n": len(values),
                                  "values": values, "estimate": estimate}
    return summary


def _as_summary(levels_or_summary):
    if isinstance(levels_or_summary, dict):
        return levels_or_summary
    found = {}
    for level in levels_or_summary or []:
        if isinstance(level, dict) and "concurrency" in level:
            for key in METRIC_KEYS:
                if read_metric(level, key) is not None:
                    found.setdefault(level["concurrency"], {})[key] = True
    return found


def objective(levels_or_summary, slo_set):
    """(metric, concurrency) the winner is judged on.

    Output throughput at the highest concurrency measured; with an SLO set, goodput at the highest
    concurrency that has one (output throughput when no level has a goodput). ``levels_or_summary``
    is a list of levels or a summary from summarize(). (metric, None) when nothing was measured.
    """
    summary = _as_summary(levels_or_summary)
    metric = THROUGHPUT
    if slo_set and any(GOODPUT in summary[conc] for conc in summary):
        metric = GOODPUT
    concs = sorted((c for c in summary if metric in summary[c]), key=_conc_key)
    return metric, (concs[-1] if concs else None)


def _fmt_interval(low, high, digits):
    return "[%s, %s]" % (fmt(low, digits, fixed=True), fmt(high, digits, fixed=True))


def _with_unit(value, digits, unit):
    return "%s %s" % (fmt(value, digits, fixed=True), unit) if unit else fmt(value, digits, fixed=True)


def _check(host, results, order, objective_metric, slo_attainment=None):
    if not isinstance(results, dict):
        raise CompareError("results must be a dict {variant: {repeats: [[levels...], ...]} or {failed: reason}}, got %s"
                           % type(results).__name__)
    if isinstance(order, str) or not isinstance(order, (list, tuple)) or not order:
        raise CompareError("order must be a non-empty list of the variants in run order, got %r" % (order,))
    if len(set(order)) != len(order):
        raise CompareError("order names a variant twice: %s" % ", ".join(str(v) for v in order))
    missing = [v for v in order if v not in results]
    if missing:
        raise CompareError("order names %s, which results of host %s do not have (they have: %s)"
                           % (", ".join(str(v) for v in missing), host, ", ".join(str(v) for v in results) or "none"))
    extra = [v for v in results if v not in order]
    if extra:
        raise CompareError("results of host %s have %s, which order does not name (order: %s)"
                           % (host, ", ".join(str(v) for v in extra), ", ".join(str(v) for v in order)))
    for variant in order:
        entry = results[variant]
        if not isinstance(entry, dict) or not (entry.get("failed") or "repeats" in entry):
            raise CompareError("variant %s of host %s must be a dict with repeats (a list of repeats, each a list "
                               "of levels) or failed (the reason), got %r"
                               % (variant, host, sorted(entry) if isinstance(entry, dict) else entry))
        if not entry.get("failed") and (not isinstance(entry["repeats"], list) or not entry["repeats"]):
            raise CompareError("variant %s of host %s: repeats must be a non-empty list of repeats (each a list of "
                               "levels), got %r" % (variant, host, entry["repeats"]))
    if objective_metric is not None and objective_metric not in _BY_KEY:
        raise CompareError("objective_metric %r is not one of %s" % (objective_metric, ", ".join(METRIC_KEYS)))
    if slo_attainment is not None and (num(slo_attainment) is None or not 0.0 < float(slo_attainment) <= 1.0):
        raise CompareError("slo_attainment must be a share of requests above 0 and at most 1 (0.9: nine requests "
                           "in ten meet every SLO target), got %r" % (slo_attainment,))


def _objective_concurrency(metric, summaries, reference):
    """The highest concurrency at which every measured variant has the metric, else the reference's highest."""
    measured = [s for s in summaries.values() if s]
    common = None
    for summary in measured:
        concs = set(c for c in summary if metric in summary[c])
        common = concs if common is None else common & concs
    if common:
        return sorted(common, key=_conc_key)[-1]
    concs = sorted((c for c in summaries.get(reference) or {} if metric in summaries[reference][c]), key=_conc_key)
    return concs[-1] if concs else None


def _winner(metric, conc, summaries, measured):
    better = _BY_KEY[metric].better
    best = None
    for variant in measured:  # run order: a tie keeps the earlier variant
        cell = (summaries[variant].get(conc) or {}).get(metric)
        if cell is None:
            continue
        if best is None or (cell["median"] > best[1] if better == "higher" else cell["median"] < best[1]):
            best = (variant, cell["median"], cell["n"])
    return best


def disqualified(summaries, measured, conc, required):
    """The variants that did not meet the SLO at the objective's concurrency: those whose mean share of
    requests meeting every target (over the repeats: the share of all their requests when the repeats sent
    as many) is under ``required`` (or that measured no share at all)."""
    out = []
    for variant in measured:
        cell = (summaries[variant].get(conc) or {}).get(ATTAINMENT)
        if cell is None or cell["median"] < float(required):
            out.append({"variant": variant, "concurrency": conc, "slo_attainment": cell["median"] if cell else None,
                        "n": cell["n"] if cell else 0, "required": float(required)})
    return out


def compare(host, results, order, objective_metric=None, slo_attainment=None, compare_order=None):
    """Every variant of one host against the reference (the first in order that did not fail).

    ``results`` maps each variant to {"repeats": [[levels...], ...]} or {"failed": reason,
    "log_tail": [...]}; ``order`` lists the variants in run order. The objective is
    ``objective_metric`` (a key of METRICS) or, by default, output throughput (goodput when the
    reference measured one, i.e. an SLO was set) at the highest concurrency every variant measured.
    ``slo_attainment`` (a share, 0 to 1): a variant whose mean share of requests meeting the SLO at
    that concurrency is lower is disqualified; it is still compared, but it cannot win. ``compare_order``
    (blocked or interleaved, None when not told) is how the repeats ran; the reference's first and last
    repeat are in ``drift`` either way.
    """
    _check(host, results, order, objective_metric, slo_attainment)
    if compare_order is not None and compare_order not in ORDERS:
        raise CompareError("compare_order must be one of %s, got %r" % (", ".join(ORDERS), compare_order))
    failed, summaries, measured = [], {}, []
    for variant in order:
        entry = results[variant]
        if entry.get("failed"):
            row = {"host": host, "variant": variant, "reason": str(entry["failed"])}
            if entry.get("log_tail"):
                row["log_tail"] = entry["log_tail"]
            failed.append(row)
            continue
        summaries[variant] = summarize(entry["repeats"], where="variant %s" % variant)
        measured.append(variant)
    reference = measured[0] if measured else None

    if objective_metric is None:
        metric = objective(summaries[reference], True)[0] if reference else THROUGHPUT
    else:
        metric = objective_metric
    conc = _objective_concurrency(metric, summaries, reference) if reference else None

    comparisons = []
    base = summaries.get(reference) or {}
    for variant in measured[1:]:
        mine = summaries[variant]
        for level in sorted(set(base) & set(mine), key=_conc_key):
            for key in METRIC_KEYS:
                if key not in base[level] or key not in mine[level]:
                    continue
                est = ratio(base[level][key]["values"], mine[level][key]["values"], key)
                improved = None
                if est["significant"]:
                    improved = (est["ratio"] > 1.0) == (_BY_KEY[key].better == "higher")
                comparisons.append({"host": host, "baseline": reference, "variant": variant, "concurrency": level,
                                    "metric": key, "ratio": est["ratio"], "ci_low": est["ci_low"],
                                    "ci_high": est["ci_high"],
                                    "repeats": {"baseline": base[level][key]["n"], "variant": mine[level][key]["n"]},
                                    "significant": est["significant"], "improved": improved,
                                    "baseline_median": est["base_median"], "variant_median": est["variant_median"],
                                    "estimate": est["estimate"], "why": est["why"]})

    out = disqualified(summaries, measured, conc, slo_attainment) if slo_attainment is not None and conc is not None else []
    for row in out:
        row["host"] = host
    eligible = [v for v in measured if v not in set(row["variant"] for row in out)]
    best = _winner(metric, conc, summaries, eligible) if conc is not None else None
    result = {"host": host, "reference": reference, "summaries": summaries, "comparisons": comparisons,
              "failed_variants": failed, "disqualified": out, "winner": best[0] if best else None,
              "objective": {"metric": metric, "concurrency": conc}, "order": compare_order}
    result["drift"] = drift(result)
    # a level measured before its server was steady (throughput_bench's warm-up ran out) is named
    result["unsteady"] = _steady.unsteady_levels(results, measured)
    result["resolved"] = resolved_settings(results, reference, measured[1:])
    result["lines"] = _lines(result, order)
    return result


ORDERS = ("blocked", "interleaved")


def schedule(variants, repeats, order="blocked"):
    """The runs of a comparison, in turn: [{variant, repeats, round}].

    blocked (the default): each variant served once and benchmarked ``repeats`` times in one call
    (A A A B B B): the fastest, but a slow drift of the host (thermals, other tenants) falls on the later
    variants alone and reads as a difference. interleaved: rounds of one repeat of each variant, the order
    reversed every other round (A B, B A, A B, ...): a drift falls on every variant alike (a steady one
    cancels exactly over an even number of rounds; plain A B A B would leave B one run later in every
    round), at the price of a switch per repeat (fewer: the variant that ends a round starts the next).
    ``round`` is the repeat index of a run's first repeat (its levels' ``labels.repeat``).
    """
    if order not in ORDERS:
        raise CompareError("compare_order must be one of %s, got %r" % (", ".join(ORDERS), order))
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise CompareError("repeats must be a whole number, 1 or more, got %r" % (repeats,))
    variants = list(variants or ())
    if not variants or not all(isinstance(name, str) and name for name in variants):
        raise CompareError("variants must be a non-empty list of variant names, got %r" % (variants,))
    if order == "blocked":
        return [{"variant": name, "repeats": repeats, "round": 0} for name in variants]
    return [{"variant": name, "repeats": 1, "round": turn} for turn in range(repeats)
            for name in (variants if turn % 2 == 0 else variants[::-1])]


def drift(result):
    """How the reference moved over the comparison: its objective figure at the first repeat against the
    last one, in the order they ran ({variant, metric, concurrency, first, last, ratio, n}), or None with
    fewer than 2 repeats or a first figure of 0. Under the blocked order a drift of the host shows here as
    the reference changing while it alone was measured; interleaved, the others ran between its repeats."""
    reference = result.get("reference")
    metric, conc = result["objective"]["metric"], result["objective"]["concurrency"]
    cell = ((result.get("summaries") or {}).get(reference) or {}).get(conc, {}).get(metric) if reference else None
    values = (cell or {}).get("values") or []
    if len(values) < 2 or not values[0]:
        return None
    return {"variant": reference, "metric": metric, "concurrency": conc, "first": values[0], "last": values[-1],
            "ratio": values[-1] / values[0], "n": len(values)}


def resolved_settings(results, reference, variants):
    """What the engines resolved, the reference against each variant (plugin_utils/_resolved_diff.diff): the
    settings that differ, asked for (in either variant's engine_args) or chosen by the engine itself. Only
    where a side recorded what it resolved (inference_server's resolved; a tune's variant taken from the
    history has none)."""
    out = []
    base = results.get(reference) or {}
    for variant in variants:
        mine = results[variant]
        if base.get("resolved") is None and mine.get("resolved") is None:
            continue
        out.append(_resolved_diff.diff(
            {"name": reference, "engine_args": base.get("engine_args"), "resolved": base.get("resolved")},
            {"name": variant, "engine_args": mine.get("engine_args"), "resolved": mine.get("resolved")}))
    return out


KEEP_WORDS = ("best", "previous", "last")


def keep_plan(verdict, keep, order, before=None):
    """What serves once a comparison is over (compare.yml's and tune.yml's keep). verdict: compare()'s; keep:
    best (the winner), previous (what served before), last (the last variant of order that did not fail) or
    a variant's name; before: the variant that served before the comparison, or None.

    Without a winner (every variant failed, or none met the SLO) best falls back to previous, and so does
    last when every variant failed: the host ends as it began. Returns {"serve": variant or None, "stop":
    whether nothing should serve (nothing did before), "fail": why the run fails, or None}."""
    failed = [row["variant"] for row in verdict.get("failed_variants") or ()]
    if keep == "best":
        chosen = verdict.get("winner")
    elif keep == "last":
        chosen = ([v for v in order if v not in failed] or [None])[-1]
    elif keep == "previous":
        chosen = None
    else:
        chosen = keep
    serve = chosen or before or None
    fail = None
    if verdict.get("reference") is None:  # the first variant that did not fail: none did
        fail = "compare %s: every variant failed, nothing was measured (%s serves, as before): %s" % (
            verdict.get("host"), before or "nothing",
            " | ".join("%s: %s" % (row["variant"], row["reason"]) for row in verdict.get("failed_variants") or ()))
    return {"serve": serve, "stop": serve is None, "fail": fail}


def slo_problems(slo, attainment):
    """compare.yml's and tune.yml's -e slo (throughput_bench's targets: _metrics.slo_problems) and
    -e slo_attainment (a share above 0 and at most 1): messages, empty when both are good."""
    problems = _metrics.slo_problems(slo if slo is not None else {})
    try:
        share = float(attainment)
    except (TypeError, ValueError):
        share = None
    if isinstance(attainment, bool) or share is None or not 0 < share <= 1:
        problems.append("slo_attainment is the share of requests that must meet the SLO, above 0 and at most 1, "
                        "got %r" % (attainment,))
    return problems


def _lines(result, order):
    host, reference = result["host"], result["reference"]
    metric, conc = result["objective"]["metric"], result["objective"]["concurrency"]
    short, unit, digits = _BY_KEY[metric].short, _BY_KEY[metric].unit, _BY_KEY[metric].digits
    failed = dict((row["variant"], row) for row in result["failed_variants"])
    rows = dict((row["variant"], row) for row in result["comparisons"]
                if row["concurrency"] == conc and row["metric"] == metric)
    lines = []
    for variant in order:
        if variant in failed:
            lines.append("compare %s: %s failed: %s" % (host, variant, failed[variant]["reason"]))
            continue
        if variant == reference:
            continue
        head = "compare %s: %s vs %s at c=%s: %s" % (host, variant, reference, conc, short)
        row = rows.get(variant)
        if row is None:
            lines.append("%s not measured by both" % head)
        elif row["ratio"] is None:
            lines.append("%s ratio undefined (%s)" % (head, row.get("why") or "%s's figure is 0" % reference))
        elif row["ci_low"] is None:
            lines.append("%s \u00d7%.2f (no interval: %s)" % (head, row["ratio"], row.get("why") or "too few repeats"))
        else:
            verdict = "significant" if row["significant"] else "not significant"
            lines.append("%s \u00d7%.2f [%.2f, %.2f] %s" % (head, row["ratio"], row["ci_low"], row["ci_high"], verdict))
    for row in result["disqualified"]:
        met = ("%.0f %% of requests met the SLO (mean of %d)" % (100.0 * row["slo_attainment"], row["n"])
               if row["slo_attainment"] is not None else "no SLO attainment was measured")
        lines.append("compare %s: %s disqualified at c=%s: %s, under the %.0f %% required"
                     % (host, row["variant"], row["concurrency"], met, 100.0 * row["required"]))
    lines.extend(_steady.lines(result.get("unsteady"), host))
    for diff_ in result.get("resolved") or ():
        chosen = diff_["engine_chosen"]
        if chosen:
            lines.append("compare %s: WARNING %s and %s differ in %d setting(s) the engine chose by itself: %s"
                         % (host, diff_["variants"][0], diff_["variants"][1], len(chosen),
                            ", ".join("%s (%s / %s)" % (row["setting"], row["values"][0], row["values"][1])
                                      for row in chosen[:5]) + (", ..." if len(chosen) > 5 else "")))
    moved = result.get("drift")
    if moved:
        mdigits = _BY_KEY[moved["metric"]].digits
        lines.append("compare %s: drift of %s over the comparison%s: %s at c=%s %s on its first repeat, %s on its last "
                     "(\u00d7%.2f over %d repeats)"
                     % (host, moved["variant"], " (%s order)" % result["order"] if result.get("order") else "",
                        _BY_KEY[moved["metric"]].short, moved["concurrency"],
                        _with_unit(moved["first"], mdigits, _BY_KEY[moved["metric"]].unit),
                        _with_unit(moved["last"], mdigits, _BY_KEY[moved["metric"]].unit), moved["ratio"], moved["n"]))
    winner = result["winner"]
    if winner is None:
        if reference is None:
            why = "every variant failed"
        elif result["disqualified"] and len(result["disqualified"]) == len(result["summaries"]):
            why = "no variant met the SLO"
        else:
            why = "no variant measured %s" % short
        lines.append("compare %s: no winner (%s)" % (host, why))
    else:
        cell = result["summaries"][winner][conc][metric]
        lines.append("compare %s: winner %s (%s %s at c=%s, %s of %d)"
                     % (host, winner, short, _with_unit(cell["median"], digits, unit), conc,
                        cell.get("estimate") or GEOMETRIC, cell["n"]))
    return lines


def _cell(summary, conc, key):
    cell = (summary.get(conc) or {}).get(key)
    if cell is None:
        return "-"
    digits = _BY_KEY[key].digits
    if cell.get("ci_low") is None:
        return fmt(cell["median"], digits, fixed=True)
    return "%s %s" % (fmt(cell["median"], digits, fixed=True), _fmt_interval(cell["ci_low"], cell["ci_high"], digits))


_TABLE_COLUMNS = tuple((metric.key, metric.column) for metric in METRICS)


def markdown_table(result):
    """Side-by-side Markdown: per host, a row per concurrency x variant, figure [95 % CI] per metric.

    ``result`` is what compare() returns, or a list of them (one per host).
    """
    results = result if isinstance(result, list) else [result]
    out = []
    for res in results:
        host, reference, summaries = res["host"], res["reference"], res["summaries"]
        out.append("## %s" % md_escape(host))
        out.append("")
        if reference is None:
            out.append("No variant was measured.")
        else:
            rows = dict(((row["variant"], row["concurrency"]), row) for row in res["comparisons"]
                        if row["metric"] == THROUGHPUT)
            out.append("| concurrency | variant | %s | output vs %s |"
                       % (" | ".join(title for _key, title in _TABLE_COLUMNS), md_escape(reference)))
            out.append("| ---: | --- |%s ---: |" % (" ---: |" * len(_TABLE_COLUMNS)))
            concs = set()
            for summary in summaries.values():
                concs.update(summary)
            for conc in sorted(concs, key=_conc_key):
                for variant, summary in summaries.items():
                    if conc not in summary:
                        continue
                    if variant == reference:
                        vs_ref = "reference"
                    else:
                        row = rows.get((variant, conc))
                        if row is None or row["ratio"] is None:
                            vs_ref = "-"
                        elif row["ci_low"] is None:
                            vs_ref = "\u00d7%.2f" % row["ratio"]
                        else:
                            vs_ref = "\u00d7%.2f %s%s" % (row["ratio"], _fmt_interval(row["ci_low"], row["ci_high"], 2),
                                                          " *" if row["significant"] else "")
                    out.append("| %s | %s | %s | %s |" % (
                        conc, md_escape(variant), " | ".join(_cell(summary, conc, key) for key, _title in _TABLE_COLUMNS),
                        vs_ref))
            out.append("")
            out.append("Geometric mean over the repeats [95 %% t-interval on the logs]; goodput and SLO met: mean "
                       "[95 %% t-interval]; no interval from one repeat. Output vs %s: ratio of the geometric means "
                       "[95 %% Welch interval]; * the interval excludes 1. Objective: %s at c=%s; winner: %s."
                       % (md_escape(reference), _BY_KEY[res["objective"]["metric"]].label,
                          res["objective"]["concurrency"], res["winner"]))
        if res.get("drift"):
            moved = res["drift"]
            out.append("")
            out.append("Drift%s: %s's %s at c=%s went from %s on its first repeat to %s on its last (\u00d7%.2f)."
                       % (" (%s order)" % res["order"] if res.get("order") else "", md_escape(moved["variant"]),
                          _BY_KEY[moved["metric"]].label, moved["concurrency"],
                          fmt(moved["first"], _BY_KEY[moved["metric"]].digits, fixed=True),
                          fmt(moved["last"], _BY_KEY[moved["metric"]].digits, fixed=True), moved["ratio"]))
        for diff_ in res.get("resolved") or ():
            out.append("")
            out.extend(_resolved_diff.markdown_lines(
                diff_, heading="### Resolved settings: %s against %s" % (md_escape(diff_["variants"][0]),
                                                                         md_escape(diff_["variants"][1])))[:-1])
        if res.get("unsteady"):
            out.append("")
            out.extend("- %s" % md_escape(line) for line in _steady.lines(res["unsteady"]))
        if res.get("disqualified"):
            out.append("")
            out.extend("- %s disqualified at c=%s: SLO attainment %s, under the %.2f required"
                       % (md_escape(row["variant"]), row["concurrency"], fmt(row["slo_attainment"], 2, fixed=True), row["required"])
                       for row in res["disqualified"])
        if res["failed_variants"]:
            out.append("")
            out.extend("- %s failed: %s" % (md_escape(row["variant"]), md_escape(row["reason"]))
                       for row in res["failed_variants"])
        out.append("")
    return "\n".join(out)
