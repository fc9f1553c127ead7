# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a task that names one of this collection's filters costs beside one that names a builtin filter.

usage: python benchmarks/filter_tasks.py [--tasks N] [--runs N]

Ansible finds a collection filter by loading every file of the collection's plugins/filter/ and asking each
FilterModule for its names (Jinja2Loader.get_with_context, ansible-core lib/ansible/plugins/loader.py), in
each forked worker, so once per task. What those files import at load time is paid by every such task
(plugin_utils/_lazy.py keeps it to the proxy).

Three real ansible-playbook runs on localhost, alternating, RUNS times each: N set_fact tasks with
`inferops.serving.name_list` (plugins/filter/instance.py), N with `inferops.serving.compare_schedule`
(plugins/filter/compare.py, whose plugin_utils are the heaviest), and N with the builtin `join`. Prints each
run, the medians, and the cost per task of each collection filter above the builtin one. Quote it from a quiet
machine (load under 1) with the load it prints.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
KINDS = {
    "name_list": "{{ 'a, b,,c' | inferops.serving.name_list }}",
    "compare_schedule": "{{ ['x', 'y'] | inferops.serving.compare_schedule(2) }}",
    "builtin join": "{{ ['a', 'b', 'c'] | join(',') }}",
}


def playbook(tmp, kind, tasks):
    path = os.path.join(tmp, "%s.yml" % kind.replace(" ", "_"))
    play = {"name": "filter tasks: %s" % kind, "hosts": "localhost", "gather_facts": False,
            "tasks": [{"name": "%s %d" % (kind, i), "ansible.builtin.set_fact": {"value_%d" % i: KINDS[kind]}}
                      for i in range(tasks)]}
    with open(path, "w") as handle:
        yaml.safe_dump([play], handle, sort_keys=False)
    return path


def run(path, env):
    start = time.monotonic()
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=%s" % sys.executable, path],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit("%s failed (rc=%d):\n%s" % (path, proc.returncode, proc.stdout[-2000:]))
    return wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20, help="set_fact tasks per playbook (default 20)")
    parser.add_argument("--runs", type=int, default=5, help="runs of each playbook (default 5)")
    args = parser.parse_args()
    if args.tasks < 1 or args.runs < 1:
        parser.error("--tasks and --runs must be at least 1")
    print("load average at the start: %.2f on %d cores" % (os.getloadavg()[0], os.cpu_count() or 0))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    walls = dict((kind, []) for kind in KINDS)
    with tempfile.TemporaryDirectory(prefix="inferops-filter-tasks-") as tmp:
        env["INFEROPS_RESULTS_DIR"] = os.path.join(tmp, "results")  # bench_facts (on in ansible.cfg), never the tree's
        paths = dict((kind, playbook(tmp, kind, args.tasks)) for kind in KINDS)
        for kind in KINDS:  # one unmeasured run each: the page cache, the pycs of the venv
            run(paths[kind], env)
        for index in range(args.runs):
            order = list(KINDS) if index % 2 == 0 else list(reversed(list(KINDS)))
            for kind in order:
                walls[kind].append(run(paths[kind], env))
                print("run %d  %-17s %.2f s" % (index + 1, kind, walls[kind][-1]), flush=True)
    medians = dict((kind, statistics.median(values)) for kind, values in walls.items())
    print()
    print("%-17s %8s %8s %8s   (%d set_fact tasks, %d runs)" % ("filter", "median", "min", "max", args.tasks, args.runs))
    for kind in KINDS:
        print("%-17s %7.2fs %7.2fs %7.2fs" % (kind, medians[kind], min(walls[kind]), max(walls[kind])))
    for kind in ("name_list", "compare_schedule"):
        print("%s: %.1f ms a task above the builtin filter"
              % (kind, 1000.0 * (medians[kind] - medians["builtin join"]) / args.tasks))
    print("load average at the end: %.2f" % os.getloadavg()[0])


if __name__ == "__main__":
    main()
