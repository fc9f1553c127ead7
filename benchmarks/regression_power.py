#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The regression gate's power table (docs/benchmarking.md): the share of slowdowns of 10, 15, 20 and 30 % that
raise a confirmed REGRESSION: line, by CV and window, through the gate's own judge() as
tests/unit/plugins/plugin_utils/test_regression_gate_sim.py does (2 metrics x 3 levels, threshold 10 %).

    python benchmarks/regression_power.py [SERIES]
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "plugins", "plugin_utils"))

from test_regression_gate_sim import CVS, WINDOWS, share_flagged  # noqa: E402  pylint: disable=wrong-import-position

DROPS = (0.10, 0.15, 0.20, 0.30)


def main(series):
    print("| CV | window | %s |" % " | ".join("%.0f %% slower" % (100 * d) for d in DROPS))
    print("| ---: | ---: |%s" % (" ---: |" * len(DROPS)))
    for i, cv in enumerate(CVS):
        for j, window in enumerate(WINDOWS):
            cells = [share_flagged(cv, window, 1.0 - drop, series, 3000 + 100 * i + 10 * j + k) for k, drop in enumerate(DROPS)]
            print("| %.0f %% | %d | %s |" % (100 * cv, window, " | ".join("%.1f %%" % (100 * c) for c in cells)))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
