# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How many repeats compare.yml needs to see a difference: the power of its verdict, printed as tables.

usage: python benchmarks/compare_power.py [--pairs P] [--seed S] [--max-repeats N]

A comparison calls a variant "significant" when the 95 % Welch interval of the ratio of geometric means
excludes 1 (plugins/plugin_utils/_compare.py). Its power is the share of pairs it calls significant when
the variant really is faster by a given factor. Here, for repeat-to-repeat noise of CV 2 % and 5 % and a
true difference of 5 % and 10 % (ratio 1.05 and 1.10), with the same number of repeats on each side:

- simulated: P pairs (default 5000) of log-normal repeats (the logs normal, sigma^2 = log(1 + CV^2)),
  each judged by _compare.ratio itself, the function compare() calls; the standard error of a power near
  80 % is 0.6 points at 5000 pairs;
- exact for Student's pooled t-test (equal variances, df = 2 (n - 1)), by integrating the noncentral t
  over the chi distribution of the pooled spread: Welch's test with equal repeats and equal noise is
  slightly less powerful (its df is at most 2 (n - 1)), so the simulated figure is the one to act on; the
  two agree within a few points from 5 repeats on.

"Repeats needed" is the least n whose simulated power reaches 80 % (two-sided 5 %, the verdict's own
level). The tables go into docs/benchmarking.md ("How many repeats").
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from statistics import NormalDist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))  # the link `make setup` creates, as the tests use it

from ansible_collections.inferops.serving.plugins.plugin_utils import _compare, _stats  # noqa: E402  pylint: disable=wrong-import-position

CVS = (0.02, 0.05)
DIFFERENCES = (0.05, 0.10)
TARGET = 0.80
_NORMAL = NormalDist()


def simulated_power(n, cv, difference, pairs, rng):
    """The share of ``pairs`` pairs of n log-normal repeats a side, the variant (1 + difference) times the
    reference, that _compare.ratio calls significant (and faster: a significant ratio below 1 is a miss)."""
    sigma = math.sqrt(math.log1p(cv * cv))
    gauss = rng.gauss
    hits = 0
    for _pair in range(pairs):
        base = [math.exp(sigma * gauss(0.0, 1.0)) for _i in range(n)]
        variant = [(1.0 + difference) * math.exp(sigma * gauss(0.0, 1.0)) for _i in range(n)]
        est = _compare.ratio(base, variant)
        hits += est["significant"] and est["ratio"] > 1.0
    return hits / float(pairs)


def _chi2_density(x, df):
    if x <= 0.0:
        return 0.0
    return math.exp((df / 2.0 - 1.0) * math.log(x) - x / 2.0 - (df / 2.0) * math.log(2.0) - math.lgamma(df / 2.0))


def pooled_power(n, cv, difference, steps=2000):
    """Power of the two-sided 5 % pooled t-test on the logs, n a side: P(|Z + delta| > t * sqrt(V / df)) with
    V ~ chi^2(df), df = 2 (n - 1), delta = log(1 + difference) / (sigma * sqrt(2 / n)), integrated over V
    by Simpson's rule (to 60 df beyond the mean, where the density is below 1e-12 of its peak)."""
    sigma = math.sqrt(math.log1p(cv * cv))
    df = 2.0 * (n - 1)
    delta = math.log1p(difference) / (sigma * math.sqrt(2.0 / n))
    crit = _stats.t_quantile(0.975, df)
    top = df + 60.0 * math.sqrt(2.0 * df) + 60.0
    width = top / steps
    total = 0.0
    for i in range(steps + 1):
        v = i * width
        cut = crit * math.sqrt(v / df)
        inner = _NORMAL.cdf(delta - cut) + _NORMAL.cdf(-delta - cut)
        weight = 1.0 if i in (0, steps) else (4.0 if i % 2 else 2.0)
        total += weight * inner * _chi2_density(v, df)
    return total * width / 3.0


def needed(cv, difference, pairs, seed, max_repeats):
    """[(n, simulated, pooled)] from n = 2 up to the first n whose simulated power reaches TARGET (or max_repeats)."""
    rows = []
    for n in range(2, max_repeats + 1):
        rng = random.Random("%s/%s/%s/%d" % (seed, cv, difference, n))
        rows.append((n, simulated_power(n, cv, difference, pairs, rng), pooled_power(n, cv, difference)))
        if rows[-1][1] >= TARGET:
            break
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5000, help="simulated pairs per repeat count (default 5000)")
    parser.add_argument("--seed", default="19", help="the simulation's seed (default 19)")
    parser.add_argument("--max-repeats", type=int, default=40, help="the most repeats tried (default 40)")
    args = parser.parse_args(argv)
    started = time.time()
    results = dict(((cv, diff), needed(cv, diff, args.pairs, args.seed, args.max_repeats))
                   for cv in CVS for diff in DIFFERENCES)

    print("Repeats needed per variant to call a true difference significant with 80 %% power "
          "(two-sided 5 %%, Welch on the logs; %d simulated pairs per repeat count):" % args.pairs)
    print("")
    print("| noise (CV between repeats) | %s |" % " | ".join("%.0f %% difference" % (100 * d) for d in DIFFERENCES))
    print("| --- |%s" % (" ---: |" * len(DIFFERENCES)))
    for cv in CVS:
        cells = []
        for diff in DIFFERENCES:
            n, power, _pooled = results[(cv, diff)][-1]
            cells.append("%d (power %.0f %%)" % (n, 100 * power) if power >= TARGET else "> %d" % n)
        print("| %.0f %% | %s |" % (100 * cv, " | ".join(cells)))
    print("")
    print("Power by repeats (simulated Welch / exact pooled t):")
    print("")
    print("| repeats | %s |" % " | ".join("CV %.0f %%, %.0f %% difference" % (100 * cv, 100 * d)
                                          for cv in CVS for d in DIFFERENCES))
    print("| ---: |%s" % (" ---: |" * (len(CVS) * len(DIFFERENCES))))
    longest = max(len(rows) for rows in results.values())
    for at in range(longest):
        cells = []
        for cv in CVS:
            for diff in DIFFERENCES:
                rows = results[(cv, diff)]
                cells.append("%.0f %% / %.0f %%" % (100 * rows[at][1], 100 * rows[at][2]) if at < len(rows) else "")
        print("| %d | %s |" % (at + 2, " | ".join(cells)))
    print("")
    print("(%.1f s)" % (time.time() - started))


if __name__ == "__main__":
    main()
