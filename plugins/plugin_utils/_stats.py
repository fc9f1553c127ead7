# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure statistics, standard library only, shared by the compare's verdict and the regression gate: Student's t
(its distribution function through the regularized incomplete beta function, its quantile), means and their
Student-t intervals, Welch's interval of a difference of means and Fieller's of a ratio of means, the
prediction interval of one new observation, and the sequential interval of the compare that runs until it
knows (valid at every look). No knowledge of metrics: the callers say which scale a figure is read on.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

CONFIDENCE = 0.95
_UPPER = 1.0 - (1.0 - CONFIDENCE) / 2.0  # the t quantile of a two-sided 95 % interval: 0.975
_NORMAL = NormalDist()
# what a figure is, as the compare's cells and rows say it
GEOMETRIC, ARITHMETIC = "geometric mean", "mean"
RATIO_OF = {GEOMETRIC: "ratio of geometric means", ARITHMETIC: "ratio of means"}


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

def moments(values):
    """(n, mean, sample variance (None below 2 values)) in plain floats. Equal values give exactly their
    value and 0, so a constant repeat reads as itself."""
    n = len(values)
    if min(values) == max(values):
        return n, float(values[0]), (0.0 if n > 1 else None)
    mean = math.fsum(values) / n
    return n, mean, (math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else None)


def log_moments(values):
    """(n, mean log, variance of the logs, geometric mean) of positive values; equal values give exactly
    their value as the geometric mean."""
    n, mean, var = moments([math.log(v) for v in values])
    return n, mean, var, (values[0] if min(values) == max(values) else math.exp(mean))


def welch_df(parts):
    """Welch-Satterthwaite degrees of freedom of a sum of independent variances of means, parts [(variance
    of the mean, n)]; None when they are all 0."""
    total = sum(var for var, _n in parts)
    spread = sum(var * var / (n - 1) for var, n in parts if var)
    return total * total / spread if spread else None


def _upper(confidence):
    return _UPPER if confidence == CONFIDENCE else 1.0 - (1.0 - confidence) / 2.0


def t_interval(estimate, parts, confidence=CONFIDENCE):
    """(low, high, df): the 95 % (``confidence``) Student-t interval of an estimate that is a sum or difference
    of independent means, ``parts`` [(variance of that mean, n)]: estimate +- t(0.975, df) * the square root
    of the summed variances, df Welch-Satterthwaite's (n - 1 for a single mean). (estimate, estimate,
    None) when every variance is 0: no noise was seen. Below 95 % confidence never; above it (the sequential
    interval), df is rounded down to a whole number: a wider interval, never a narrower one."""
    variance = sum(var for var, _n in parts)
    if variance == 0.0:
        return estimate, estimate, None
    df = welch_df(parts)
    if confidence != CONFIDENCE:
        df = max(math.floor(df), 1)
    half = t_quantile(_upper(confidence), df) * math.sqrt(variance)
    return estimate - half, estimate + half, df


def bounded(value, nonnegative, ceiling=None):
    """value kept within what a figure can be: not below 0 when ``nonnegative``, not above ``ceiling``."""
    if value is None:
        return None
    if nonnegative:
        value = max(value, 0.0)
    return min(value, ceiling) if ceiling is not None else value


def welch_log_ratio(base, variant, out, confidence=CONFIDENCE):
    """The ratio of the geometric means of positive values, variant / base, with a 95 % Welch interval on the
    difference of the mean logs taken back with exp, into ``out`` (base_median, variant_median, ratio, ci_low,
    ci_high, df)."""
    nb, mb, vb, out["base_median"] = log_moments(base)
    nv, mv, vv, out["variant_median"] = log_moments(variant)
    out["ratio"] = out["variant_median"] / out["base_median"]
    if vb is None or vv is None:
        return out
    if vb == 0.0 and vv == 0.0:  # every repeat of each side gave the same value: no noise seen
        out["ci_low"] = out["ci_high"] = out["ratio"]
        return out
    low, high, out["df"] = t_interval(mv - mb, [(vb / nb, nb), (vv / nv, nv)], confidence)
    out["ci_low"], out["ci_high"] = math.exp(low), math.exp(high)
    return out


def fieller_ratio(base, variant, out, confidence=CONFIDENCE):
    """Fieller's interval of mean(variant) / mean(base): every rho for which mean(variant) - rho * mean(base)
    is within t * its standard error of 0. Bounded only when the base mean is clearly away from 0."""
    nb, mb, vb = moments(base)
    nv, mv, vv = moments(variant)
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
    out["df"] = welch_df([(ev, nv), (rho * rho * eb, nb)]) or welch_df([(ev, nv), (eb, nb)])
    q2 = t_quantile(_upper(confidence), out["df"]) ** 2
    a = mb * mb - q2 * eb
    if a <= 0.0:
        out["df"] = None
        out["why"] = "the reference's mean is within its own noise of 0: the ratio's interval is unbounded"
        return out
    b, c = mb * mv, mv * mv - q2 * ev
    root = math.sqrt(max(b * b - a * c, 0.0))
    nonnegative = min(base) >= 0 and min(variant) >= 0
    out["ci_low"] = bounded((b - root) / a, nonnegative)
    out["ci_high"] = (b + root) / a
    return out


# ---- prediction intervals ---------------------------------------------------------------------------

def prediction_interval(values, confidence=CONFIDENCE):
    """(mean, low, high, df) of the ``confidence`` prediction interval of one new observation from the normal
    population ``values`` came from: mean +- t((1 + confidence) / 2, n - 1) * s * sqrt(1 + 1 / n), s the sample
    standard deviation. Not the interval of the mean: it also holds the new observation's own noise, so with
    n runs known a stable new run falls outside it 1 - confidence of the time, for any n from 2 (Student,
    as in Hahn and Meeker, Statistical Intervals, 1991, ch. 4). (mean, None, None, None) below 2 values;
    (mean, mean, mean, None) when they are all equal (no noise seen)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be between 0 and 1 (both excluded), got %r" % (confidence,))
    n, mean, var = moments([float(v) for v in values])
    if var is None:
        return mean, None, None, None
    if var == 0.0:
        return mean, mean, mean, None
    half = t_quantile(1.0 - (1.0 - confidence) / 2.0, n - 1) * math.sqrt(var * (1.0 + 1.0 / n))
    return mean, mean - half, mean + half, n - 1


# ---- the sequential interval: valid at every planned look ---------------------------------------------

def sequential_confidence(looks, confidence=CONFIDENCE):
    """The confidence of each look's interval when a comparison may stop at any of ``looks`` planned looks and
    its intervals must hold at the stop with ``confidence`` overall: 1 - (1 - confidence) / looks.

    A group-sequential boundary with the looks planned (Jennison and Turnbull, Group Sequential Methods with
    Applications to Clinical Trials, 2000, ch. 2), spent evenly as Pocock's constant boundary is, with each
    look's share fixed by the Bonferroni inequality: the chance that any of the looks' intervals misses the
    truth is at most the sum of their shares, whatever the dependence between looks. Conservative (Pocock's
    exact constant for 18 looks at 5 % is about 2.9 sigma where this gives 3.3), and exact to compute with
    the t machinery above: stopping at the first look whose interval excludes 1 cannot inflate the false
    verdicts beyond 1 - confidence (tests/unit/plugins/plugin_utils/test_compare_sequential.py measures it).
    """
    if isinstance(looks, bool) or not isinstance(looks, int) or looks < 1:
        raise ValueError("looks must be a whole number, 1 or more, got %r" % (looks,))
    return 1.0 - (1.0 - confidence) / looks
