# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run the gate's stages (make targets) in order and end with their table.

usage: python3 tools/gate.py TARGET...

Each TARGET runs as `make TARGET`; the first that fails stops the gate (as make itself would), and the table
is printed all the same. TARGET may be a group A+B: its stages run at the same time (stages that share no
files, each mostly one process, on a machine of two cores or more); each prints its output when it ends, and
the group is one row of the table, its wall time the group's, each member's own time beside it. A member may be
a chain A>B: its stages run one after the other (B only once A passed) beside the group's other members, so
that a stage that mostly waits (the fleet, on its SSH hosts) runs beside the ones that keep the cores busy.
The table gives each stage's wall time, the machine's load average when the gate
started (a timing is only worth quoting from a quiet machine: load under 1, nothing beside it), the tests each
pytest stage ran against its floor (tests/floor.txt), and every test over 60 s. The pytest stages write those
into GATE_DIR (tests/support/pytest_gate.py). Standard library only: it runs before `.venv` exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_tsv(path):
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [line.rstrip("\n").split("\t") for line in handle if line.strip()]


def table(rows, load, gate_dir):
    """The closing table, as lines."""
    total = sum(row[1] for row in rows)
    lines = ["", "== gate: %d stage(s), %s, load average at start %s" % (
        len(rows), clock(total), " ".join("%.2f" % value for value in load))]
    width = max([len(row[0]) for row in rows] + [5])
    lines.append("%-*s  %9s  %7s  %s" % (width, "stage", "wall", "share", "result"))
    for row in rows:
        name, seconds, rc = row[:3]
        share = 100.0 * seconds / total if total else 0.0
        members = row[3] if len(row) > 3 else None
        result = "ok" if rc == 0 else "FAILED (exit %d)" % rc
        if members:  # a group: each member's own wall and result
            result += " (at once: %s)" % ", ".join("%s %ds%s" % (member, own, "" if own_rc == 0 else " FAILED")
                                                   for member, own, own_rc in members)
        lines.append("%-*s  %9s  %6.1f%%  %s" % (width, name, clock(seconds), share, result))
    lines.append("%-*s  %9s" % (width, "total", clock(total)))
    counts = read_tsv(os.path.join(gate_dir, "counts.tsv"))
    if counts:
        lines.append("tests run against the floor (tests/floor.txt): " + ", ".join(
            "%s %s/%s" % (stage, ran, floor) for stage, ran, floor in counts))
    slow = read_tsv(os.path.join(gate_dir, "slow.tsv"))
    for stage, seconds, nodeid in sorted(slow, key=lambda row: -float(row[1])):
        lines.append("WARNING: [%s] %s took %s s (over 60 s)" % (stage, nodeid, seconds))
    return lines


def clock(seconds):
    return "%d:%02d (%ds)" % (seconds // 60, seconds % 60, seconds)


def run_group(members, env, gate_dir, cwd=ROOT):
    """Run each member at once: a member is a target, or a chain of targets joined by '>' run one after the other
    (stopping at the first that fails). Each target's output (kept in GATE_DIR) is printed when it ends.
    Returns [(target, wall seconds, rc)], one per target started, in the order given."""
    chains = [member.split(">") for member in members]
    everyone = [target for chain in chains for target in chain]
    running, ended = {}, {}

    def start(target):
        out = open(os.path.join(gate_dir, "%s.log" % target), "w+")
        # each member its own /dev/null: the fleet's ssh sets O_NONBLOCK on its stdin, and on an inherited one that
        # is every member's, where ansible-galaxy then refuses to run (Molecule failed the gate of fa3ad41 so)
        proc = subprocess.Popen(["make", "--no-print-directory", target], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT)
        running[target] = (proc, out, time.monotonic())

    for chain in chains:
        start(chain[0])
    while running:
        for target, (proc, out, began) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[target]
            ended[target] = (time.monotonic() - began, proc.returncode)
            out.seek(0)
            beside = ", ".join(t for t in everyone if t != target)
            sys.stdout.write("== %s (ran beside %s)\n%s" % (target, beside, out.read()))
            sys.stdout.flush()
            out.close()
            chain = next(c for c in chains if target in c)
            following = chain[chain.index(target) + 1:]
            if proc.returncode == 0 and following:
                start(following[0])
        time.sleep(0.2)
    return [(target,) + ended[target] for target in everyone if target in ended]


def main(targets):
    if not targets:
        sys.exit(__doc__)
    gate_dir = os.path.join(ROOT, "build", "gate")
    shutil.rmtree(gate_dir, ignore_errors=True)
    os.makedirs(gate_dir)
    load = os.getloadavg()
    print("gate: load average at start %s (%d cores)" % (" ".join("%.2f" % value for value in load), os.cpu_count() or 0),
          flush=True)
    env = dict(os.environ, GATE_DIR=gate_dir)
    rows = []
    rc = 0
    for target in targets:
        start = time.monotonic()
        if "+" in target or ">" in target:
            members = run_group(target.split("+"), env, gate_dir)
            rc = next((own_rc for _name, _own, own_rc in members if own_rc != 0), 0)
            rows.append((target, time.monotonic() - start, rc, members))
        else:
            rc = subprocess.call(["make", "--no-print-directory", target], cwd=ROOT, env=env)
            rows.append((target, time.monotonic() - start, rc))
        if rc != 0:
            break
    text = "\n".join(table(rows, load, gate_dir))
    print(text, flush=True)
    with open(os.path.join(gate_dir, "table.txt"), "w") as out:
        out.write(text + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
