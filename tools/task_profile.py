# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the test suite's playbook time goes: the task_wall profiles of every ansible-playbook run, summed by task.

usage: INFEROPS_TEST_PROFILE_DIR=build/task-profile python -m pytest ... tests/integration
       python tools/task_profile.py build/task-profile [--top 30]

Each profile (benchmarks/callback/task_wall.py, enabled by tests/conftest.py when INFEROPS_TEST_PROFILE_DIR
is set) holds the start of each task; a task's time runs to the next task's start. Prints the runs, their
total wall, the start-up share (python, ansible, inventory and playbook parsed) and the tasks by total time,
with how often each ran and its median.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys


def spans(events):
    """(key, seconds) of each task of one run, plus the start-up and the end."""
    out = []
    marks = [e for e in events if e["event"] in ("task_start", "stats")]
    if events and marks:
        out.append(("[start-up until the first task]", marks[0]["time"] - events[0]["time"]))
    for here, nxt in zip(marks, marks[1:]):
        out.append((here.get("key") or here.get("name"), nxt["time"] - here["time"]))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    totals, times = collections.Counter(), collections.defaultdict(list)
    runs, wall = 0, 0.0
    for name in sorted(os.listdir(args.directory)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(args.directory, name)) as handle:
            events = json.load(handle)
        runs += 1
        if events:
            wall += events[-1]["time"] - events[0]["time"]
        for key, seconds in spans(events):
            totals[key] += seconds
            times[key].append(seconds)
    if not runs:
        sys.exit("%s: no profiles (run the tests with INFEROPS_TEST_PROFILE_DIR set to it)" % args.directory)
    print("%d ansible-playbook runs, %.0f s of playbook wall in all (%.2f s a run)" % (runs, wall, wall / runs))
    print("%9s %6s %6s %8s  task" % ("total s", "share", "runs", "median"))
    for key, total in totals.most_common(args.top):
        share = 100.0 * total / wall
        print("%9.1f %5.1f%% %6d %8.3f  %s" % (total, share, len(times[key]), statistics.median(times[key]), key[:150]))


if __name__ == "__main__":
    main()
