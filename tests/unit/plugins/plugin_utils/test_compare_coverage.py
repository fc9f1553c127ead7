# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Do compare's intervals keep their promise at 2 to 10 repeats? A seeded simulation, asserted.

The old verdict (a bootstrap percentile interval of the median) called identical variants different in
34 % of pairs at 2 repeats and 14 % at 3, and its "95 %" interval covered the truth 67 % and 87 % of the
time. Here, per cell (repeats N a side x noise x CV), 10,000 pairs of each kind, and the test asserts what
docs/benchmarking.md promises:

- identical variants read "significant" in at most 6 % of pairs (a 5 % test, plus Monte Carlo room:
  the standard error of a share near 5 % over 10,000 pairs is 0.22 points);
- the ratio's interval covers the true ratio, 1.10, in at least 94 % of pairs;
- a variant's own interval covers its true centre in at least 94 % of its intervals (20,000 a cell: the
  reference's and the variant's of the shifted pairs).

What "true" means, per noise. Both noises are scale families, so the variant is 1.10 times a draw of the
reference's distribution and the true ratio of geometric means (and of means) is exactly 1.10:

- log-normal: value = 100 * exp(sigma * Z), sigma^2 = log(1 + CV^2); its geometric mean is 100, and a
  t-interval on the logs is exact;
- normal: value = 100 * (1 + CV * Z); the logs are only nearly normal, and the geometric mean the figure
  estimates is 100 * exp(E[log(1 + CV * Z)]) (99.98 at CV 2 %, 99.49 at CV 10 %), computed by quadrature
  below. Measuring the cover of 100 (the arithmetic mean) instead would test what the figure does not claim.

The zero-allowed metrics (goodput, SLO attainment: the arithmetic mean with a t-interval, Fieller's
interval for the ratio) are simulated too, under normal noise, where their truth is the mean itself.
Fieller's interval is unbounded (none is given, nor a verdict) when the reference's mean is within its
own noise of 0; the table says how often, and the cover asserted is that of the intervals given.

How it stays fast (about 10 s of CPU for the 24 cells on this 2-core machine): each pair's verdict is _compare's own rule
(Welch on the logs, Fieller on the raw scale, the t-interval of a mean) with the quantile from
_compare.t_quantile, but instead of asking t_quantile at each pair's Welch df, a verdict is first read at
the two neighbouring points of a grid of df (1/64 apart; t's quantile falls as df grows, so a statistic
above the quantile at the lower point, or not above it at the higher one, is decided either way), and
t_quantile is asked at the df itself only for the few statistics between the two.
test_the_verdicts_here_are_compares_own holds these rules equal to _compare.ratio and _compare.centre on
random pairs, the very functions compare() calls.

Run it with ``pytest -s`` (or as a script: ``python tests/unit/plugins/plugin_utils/test_compare_coverage.py``)
to print the table docs/benchmarking.md quotes. Seeded: the same numbers every run.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time

import pytest

if __name__ == "__main__":  # run as a script: the collection through the checkout's link, as conftest does
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "collections"))

from ansible_collections.inferops.serving.plugins.plugin_utils import _compare as cmp, _stats  # noqa: E402

PAIRS = 10000
SHIFT = 1.10
CENTRE = 100.0
SEED = 2024
REPEATS = (2, 3, 5, 10)
CVS = (0.02, 0.10)
# (noise, scale): "log" cells hold for every metric but goodput and SLO attainment, "raw" cells for those two
LOG_CELLS = tuple((n, noise, "log", cv) for n in REPEATS for noise in ("normal", "log-normal") for cv in CVS)
RAW_CELLS = tuple((n, "normal", "raw", cv) for n in REPEATS for cv in CVS)
MAX_FALSE = 0.06
MIN_COVER = 0.94
P = 0.975  # two-sided 95 %


def _expected_log(cv, steps=4000, reach=12.0):
    """E[log(1 + cv * Z)], Z standard normal, by Simpson's rule over +-12 standard deviations (cut where
    1 + cv * z would be <= 0, a region whose probability is below 1e-30 for the CVs used)."""
    low = max(-reach, (-1.0 + 1e-9) / cv)
    width = (reach - low) / steps
    total = 0.0
    for i in range(steps + 1):
        z = low + i * width
        weight = 1.0 if i in (0, steps) else (4.0 if i % 2 else 2.0)
        total += weight * math.log1p(cv * z) * math.exp(-0.5 * z * z)
    return total * width / 3.0 / math.sqrt(2.0 * math.pi)


def truth(noise, scale, cv):
    """The centre a variant's figure estimates: the population geometric mean, or the mean on the raw scale."""
    if scale == "raw" or noise == "log-normal":
        return CENTRE
    return CENTRE * math.exp(_expected_log(cv))


class Quantiles(object):
    """Verdicts "statistic > t(0.975, df)" exactly as with _compare.t_quantile(0.975, df), fast.

    t_quantile at the grid points k / 64 around df brackets it (the quantile falls as df grows); only a
    statistic between the two bracketing quantiles asks t_quantile at df itself (``exact`` counts those).
    """

    STEPS = 64

    def __init__(self):
        self.grid = {}
        self.exact = 0

    def _at(self, k):
        if k not in self.grid:
            self.grid[k] = _stats.t_quantile(P, k / float(self.STEPS))
        return self.grid[k]

    def above(self, stat, df):
        k = int(df * self.STEPS)
        if stat > self._at(k):  # above the larger quantile (k / 64 <= df)
            return True
        if stat <= self._at(k + 1):  # not above the smaller one ((k + 1) / 64 > df)
            return False
        self.exact += 1
        return stat > _stats.t_quantile(P, df)


def _welch_df(parts):
    """As _compare's: the Welch-Satterthwaite df of [(variance of a mean, n)]."""
    total = sum(var for var, _n in parts)
    return total * total / sum(var * var / (n - 1) for var, n in parts)


def moments(values):
    """(mean, variance of the mean) of a group, as _compare computes them (sample variance / n)."""
    n = len(values)
    mean = sum(values) / n
    return mean, sum((x - mean) ** 2 for x in values) / (n - 1) / n


def log_verdicts(q, n, base, variant, shift=1.0):
    """(significant, covers log(shift)) of the ratio of geometric means, as _compare.ratio decides it:
    ``base`` and ``variant`` are moments() of the logs; the Welch interval diff +- t * se excludes 0 /
    holds log(shift)."""
    (mb, eb), (mv, ev) = base, variant
    diff, se, df = mv - mb, math.sqrt(eb + ev), _welch_df([(eb, n), (ev, n)])
    return q.above(abs(diff) / se, df), not q.above(abs(diff - math.log(shift)) / se, df)


def fieller_verdicts(q, n, base, variant, shift=1.0):
    """(bounded, significant, covers shift) of the ratio of means, as _compare.ratio decides it for goodput
    (``base`` and ``variant`` are moments() of the values): Fieller's set {rho: (mean_v - rho mean_b)^2 <=
    t^2 (var_v + rho^2 var_b)}, t at the Welch df of the estimate; bounded when mean_b / se_b > t; 1 (shift)
    is outside (inside) it when the Welch statistic at rho = 1 (rho = shift) is above (not above) t."""
    (mb, eb), (mv, ev) = base, variant
    rho = mv / mb
    df = _welch_df([(ev, n), (rho * rho * eb, n)])
    bounded = q.above(abs(mb) / math.sqrt(eb), df)
    significant = bounded and q.above(abs(mv - mb) / math.sqrt(ev + eb), df)
    covers = bounded and not q.above(abs(mv - shift * mb) / math.sqrt(ev + shift * shift * eb), df)
    return bounded, significant, covers


def own_covers(q, n, group, target):
    """Whether a variant's own t-interval (n - 1 df) holds ``target``, as _compare.centre builds it
    (``group``: moments() of the logs, or of the values on the raw scale)."""
    mean, err = group
    return not q.above(abs(mean - target) / math.sqrt(err), n - 1)


def normals(rng, count):
    """``count`` standard normal draws (Box-Muller on rng.random(): the same law as rng.gauss, three times
    faster in bulk)."""
    rand, log, sqrt, cos, sin, tau = rng.random, math.log, math.sqrt, math.cos, math.sin, 2.0 * math.pi
    out = []
    for _i in range((count + 1) // 2):
        radius, angle = sqrt(-2.0 * log(1.0 - rand())), tau * rand()
        out.append(radius * cos(angle))
        out.append(radius * sin(angle))
    return out[:count]


def simulate(n, noise, scale, cv, pairs=PAIRS, seed=SEED, q=None):
    """{false, cover, own, unbounded}: shares over ``pairs`` pairs of n repeats a side; cover is over the
    intervals given (Fieller's may be unbounded), own over 2 * pairs intervals.

    Each pair takes 4 groups of n draws: an identical pair (reference, reference), then a reference and a
    variant that is 1.10 times a draw of the reference's distribution. On the log scale the draws are the
    logs of value / 100 (their truths: log of the geometric mean / 100, and that + log 1.10).
    """
    q = q or Quantiles()
    z = normals(random.Random("%s/%d/%s/%s/%s" % (seed, n, noise, scale, cv)), 4 * n * pairs)
    if scale == "raw":
        draws = [CENTRE * (1.0 + cv * v) for v in z]
        truths = (CENTRE, SHIFT * CENTRE)
    elif noise == "log-normal":
        sigma = math.sqrt(math.log1p(cv * cv))
        draws = [sigma * v for v in z]
        truths = (0.0, math.log(SHIFT))
    else:
        draws = [math.log1p(cv * v) for v in z]
        truths = (math.log(truth(noise, scale, cv) / CENTRE), math.log(truth(noise, scale, cv) * SHIFT / CENTRE))
    groups = [moments(draws[at:at + n]) for at in range(0, len(draws), n)]
    # every fourth group is the variant's: times SHIFT (moments scale exactly), or + log(SHIFT) on the logs
    if scale == "raw":
        groups[3::4] = [(mean * SHIFT, err * SHIFT * SHIFT) for mean, err in groups[3::4]]
    else:
        groups[3::4] = [(mean + math.log(SHIFT), err) for mean, err in groups[3::4]]
    false = cover = own = unbounded = 0
    for at in range(0, len(groups), 4):
        if scale == "raw":
            false += fieller_verdicts(q, n, groups[at], groups[at + 1])[1]
            bounded, _significant, covers = fieller_verdicts(q, n, groups[at + 2], groups[at + 3], SHIFT)
            unbounded += not bounded
        else:
            false += log_verdicts(q, n, groups[at], groups[at + 1])[0]
            covers = log_verdicts(q, n, groups[at + 2], groups[at + 3], SHIFT)[1]
        cover += covers
        own += own_covers(q, n, groups[at + 2], truths[0]) + own_covers(q, n, groups[at + 3], truths[1])
    given = pairs - unbounded
    return {"false": false / pairs, "cover": cover / float(given) if given else 0.0, "own": own / (2.0 * pairs),
            "unbounded": unbounded / pairs}


def table(cells=LOG_CELLS + RAW_CELLS, pairs=PAIRS):
    """The simulation's rows, and the table as Markdown lines."""
    q = Quantiles()
    rows = [((n, noise, scale, cv), simulate(n, noise, scale, cv, pairs, q=q)) for n, noise, scale, cv in cells]
    lines = ["| repeats a side | noise | figure | CV | identical pairs read significant | ratio interval covers "
             "x%.2f | own interval covers its centre |" % SHIFT,
             "| ---: | --- | --- | ---: | ---: | ---: | ---: |"]
    for (n, noise, scale, cv), got in rows:
        figure = "geometric mean" if scale == "log" else "mean (goodput, SLO)"
        extra = " (%.1f %% unbounded: none given)" % (100.0 * got["unbounded"]) if got["unbounded"] else ""
        lines.append("| %d | %s | %s | %.0f %% | %.2f %% | %.2f %%%s | %.2f %% |" % (
            n, noise, figure, 100.0 * cv, 100.0 * got["false"], 100.0 * got["cover"], extra, 100.0 * got["own"]))
    return rows, lines, q


def test_the_true_geometric_mean_of_normal_noise_is_what_the_quadrature_says():
    """The series E[log(1 + cZ)] = -c^2/2 - 3c^4/4 - 15c^6/6 - 105c^8/8 - ... (asymptotic, fine at these CVs),
    and a direct Monte Carlo agrees."""
    for cv in CVS:
        series = -cv ** 2 / 2.0 - 3.0 * cv ** 4 / 4.0 - 15.0 * cv ** 6 / 6.0 - 105.0 * cv ** 8 / 8.0
        assert _expected_log(cv) == pytest.approx(series, abs=2e-8)
    rng = random.Random(1)
    draws = [math.log1p(0.10 * rng.gauss(0.0, 1.0)) for _i in range(200000)]
    assert sum(draws) / len(draws) == pytest.approx(_expected_log(0.10), abs=0.0005)
    assert truth("normal", "log", 0.10) == pytest.approx(99.49, abs=0.01)


@pytest.mark.parametrize("n", REPEATS)
def test_the_verdicts_here_are_compares_own(n):
    """On random pairs (CV 2 % to 40 %, some identical, some 1.10 apart), the rules above with the grid's
    quantiles decide as _compare.ratio and _compare.centre do, on both scales."""
    rng = random.Random(n)
    q = Quantiles()
    for pair in range(300):
        cv = rng.choice((0.02, 0.10, 0.40))
        shift = SHIFT if pair % 2 else 1.0
        base = [CENTRE * math.exp(cv * rng.gauss(0.0, 1.0)) for _i in range(n)]
        variant = [shift * CENTRE * math.exp(cv * rng.gauss(0.0, 1.0)) for _i in range(n)]
        logs = moments([math.log(v) for v in base]), moments([math.log(v) for v in variant])
        est = cmp.ratio(base, variant)
        significant, covers = log_verdicts(q, n, logs[0], logs[1], SHIFT)
        assert est["significant"] == significant and (est["ci_low"] <= SHIFT <= est["ci_high"]) == covers
        assert est["estimate"] == "ratio of geometric means"
        _figure, low, high, estimate = cmp.centre(variant)
        assert estimate == "geometric mean"
        assert (low <= shift * CENTRE <= high) == own_covers(q, n, logs[1], math.log(shift * CENTRE))
        base = [CENTRE * (1.0 + cv * rng.gauss(0.0, 1.0)) for _i in range(n)]
        variant = [shift * CENTRE * (1.0 + cv * rng.gauss(0.0, 1.0)) for _i in range(n)]
        est = cmp.ratio(base, variant, cmp.GOODPUT)
        bounded, significant, covers = fieller_verdicts(q, n, moments(base), moments(variant), SHIFT)
        assert est["estimate"] == "ratio of means" and (est["ci_low"] is not None) == bounded
        assert est["significant"] == significant
        assert bounded is False or (est["ci_low"] <= SHIFT <= est["ci_high"]) == covers
        _figure, low, high, estimate = cmp.centre(variant, cmp.GOODPUT)
        assert estimate == "mean" and (low <= shift * CENTRE <= high) == own_covers(q, n, moments(variant), shift * CENTRE)


@pytest.mark.slow_sim
def test_intervals_keep_their_promise_at_2_to_10_repeats():
    started = time.perf_counter()
    rows, lines, q = table()
    print("\n" + "\n".join(lines))
    print("(%d pairs a cell; %.1f s; t_quantile asked at %d grid points and %d exact df)"
          % (PAIRS, time.perf_counter() - started, len(q.grid), q.exact))
    for (n, noise, scale, cv), got in rows:
        where = "N=%d %s %s CV %.0f %%: %r" % (n, noise, scale, 100.0 * cv, got)
        assert got["false"] <= MAX_FALSE, where
        assert got["cover"] >= MIN_COVER, where
        assert got["own"] >= MIN_COVER, where
        assert got["unbounded"] == 0.0 or scale == "raw", where  # the log scale always gives an interval
        assert got["unbounded"] <= 0.15, where


def test_the_same_seed_gives_the_same_numbers():
    for scale in ("log", "raw"):
        assert simulate(3, "normal", scale, 0.10, pairs=300) == simulate(3, "normal", scale, 0.10, pairs=300)


if __name__ == "__main__":
    print("\n".join(table()[1]))
