# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gate's guards for every pytest stage, loaded by tests/conftest.py.

- A ceiling per test: each test gets pytest-timeout's `timeout` marker, from the default of its directory
  (CEILINGS) unless the test names its own (`@pytest.mark.timeout(N)`). A hang then fails that test after
  minutes, by name, and the stage goes on; the fixtures' finalizers still run (the signal method).
- The slowest tests: each stage prints its SLOWEST slowest tests (setup + call + teardown, summed per test)
  and a WARNING line for every test over SLOW_S seconds.
- A floor: `--stage NAME` checks the number of tests the stage ran against tests/floor.txt; a stage that ran
  fewer fails (quiet shrinkage: a module that stops being collected, a selection that matches less).
  GATE_DIR (set by tools/gate.py) collects the slow tests and the counts for the gate's closing table.
- The longest modules first: with xdist, the test modules run in the order of their weight in
  tests/weights.tsv (seconds a module took in a gate, heaviest first; a module not listed weighs nothing and
  keeps its place after the listed ones), the tests of a module in their own order. A long module that starts
  last keeps one worker busy while the other idles; started first, the short ones fill in around it.
- A timeline: each stage writes when each test ran and on which worker (GATE_DIR/timeline-STAGE.tsv), and says
  how long each worker stood idle at the end while another still ran. `python tests/support/pytest_gate.py
  weights build/gate > tests/weights.tsv` writes the weights from a gate's timelines.
"""

from __future__ import annotations

import glob
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# GATE_FLOOR_FILE: another floor file (the gate's own tests use one)
FLOOR_FILE = os.environ.get("GATE_FLOOR_FILE") or os.path.join(os.path.dirname(HERE), "floor.txt")
WEIGHTS_FILE = os.path.join(os.path.dirname(HERE), "weights.tsv")

SLOW_S = 60.0
SLOWEST = 25

# Default ceilings (s) by the first directory under tests/; a test that needs more says so with its own
# marker. Each is a few times the slowest test of its kind on a quiet 2-core machine, so that a loaded CI
# run does not fail on time alone, yet a hang costs minutes, not the 900 s of a playbook's own limit.
CEILINGS = {
    "unit": 60,
    "conformance": 180,
    "integration": 300,
    "awx": 180,
    "fleet": 420,
}
CEILING_OTHER = 240
# a seeded statistical simulation (marker slow_sim) runs up to about 30 s quiet, wherever it lives
CEILING_SIM = 300


def read_floor(path=None):
    """{stage: minimum number of tests} from the floor file (`stage count`, # comments)."""
    path = path or FLOOR_FILE
    floor = {}
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                raise ValueError("%s:%d: expected 'stage count', got %r" % (path, number, line))
            floor[parts[0]] = int(parts[1])
    return floor


def ceiling_for(path):
    """The default ceiling for a test file: by its directory under tests/."""
    parts = os.path.normpath(str(path)).split(os.sep)
    if "tests" in parts:
        index = len(parts) - 1 - parts[::-1].index("tests")
        if index + 1 < len(parts):
            return CEILINGS.get(parts[index + 1], CEILING_OTHER)
    return CEILING_OTHER


def slowest(durations, count=SLOWEST):
    """[(seconds, nodeid)] of the `count` slowest tests, slowest first."""
    return sorted(((seconds, nodeid) for nodeid, seconds in durations.items()), reverse=True)[:count]


def floor_verdict(stage, ran, floor):
    """(ok, message) for a stage that ran `ran` tests against the floor file's entry."""
    if stage not in floor:
        return False, "stage %r has no floor in %s (stages there: %s)" % (stage, FLOOR_FILE, ", ".join(sorted(floor)))
    minimum = floor[stage]
    if ran < minimum:
        return False, "FLOOR: stage %s ran %d tests, fewer than its floor of %d (%s): a test was dropped or not collected" % (
            stage, ran, minimum, os.path.relpath(FLOOR_FILE))
    if ran > minimum:
        return True, "floor: stage %s ran %d tests, its floor is %d: raise it in %s" % (
            stage, ran, minimum, os.path.relpath(FLOOR_FILE))
    return True, "floor: stage %s ran %d tests, its floor is %d" % (stage, ran, minimum)


def pytest_addoption(parser):
    group = parser.getgroup("gate", "the gate's floor and slow-test report (tests/support/pytest_gate.py)")
    group.addoption("--stage", default=None, help="check the number of tests run against this stage's floor in tests/floor.txt")


def configure(config):
    """Called from tests/conftest.py's pytest_configure: the markers and the gate's own hooks."""
    config.addinivalue_line("markers", "smoke: the quick loop's end-to-end selection (`make check`): a switch, a rollback, "
                            "a benchmark and a replica roll through the real router")
    config.addinivalue_line("markers", "slow_sim: a long seeded statistical simulation; `make check` leaves it out")
    config.pluginmanager.register(_Gate(config), "inferops_gate")


def read_weights(path=None):
    """{module path relative to the repository (tests/...): seconds} from the weights file; {} without one."""
    path = path or WEIGHTS_FILE
    weights = {}
    if not os.path.exists(path):
        return weights
    with open(path) as handle:
        for line in handle:
            line = line.split("#", 1)[0].strip()
            if line:
                seconds, module = line.split(None, 1)
                weights[module] = float(seconds)
    return weights


def module_of(nodeid):
    return nodeid.split("::", 1)[0]


def heaviest_modules_first(items, weights):
    """items reordered: whole modules by weight, heaviest first (a stable sort: unlisted modules, and modules of
    equal weight, keep their order); each module's tests in their own order."""
    modules, order = {}, []
    for item in items:
        module = module_of(item.nodeid)
        if module not in modules:
            modules[module] = []
            order.append(module)
        modules[module].append(item)
    order.sort(key=lambda module: -weights.get(module, 0.0))
    return [item for module in order for item in modules[module]]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("timeout") is None:
            ceiling = CEILING_SIM if item.get_closest_marker("slow_sim") else ceiling_for(item.fspath)
            item.add_marker(pytest.mark.timeout(ceiling))
    if hasattr(config, "workerinput"):  # an xdist worker: the controller hands its tests out in this order
        items[:] = heaviest_modules_first(items, read_weights())


def idle_at_the_end(timeline):
    """{worker: seconds it stood idle after its last test while another worker still ran}, from timeline rows
    (worker, start, stop, nodeid)."""
    ends = {}
    for row in timeline:
        ends[row[0]] = max(ends.get(row[0], 0.0), row[2])
    last = max(ends.values()) if ends else 0.0
    return dict((worker, last - end) for worker, end in ends.items())


def weights_from(gate_dir):
    """{module: seconds} from the timelines a gate wrote into gate_dir: a module's tests summed within a stage,
    and of two stages that ran the same module (core-latest's selection of the integration tests), the larger."""
    weights = {}
    for path in sorted(glob.glob(os.path.join(gate_dir, "timeline-*.tsv"))):
        stage = {}
        with open(path) as handle:
            for line in handle:
                dummy, start, stop, nodeid = line.rstrip("\n").split("\t")
                module = module_of(nodeid)
                stage[module] = stage.get(module, 0.0) + float(stop) - float(start)
        for module, seconds in stage.items():
            weights[module] = max(weights.get(module, 0.0), seconds)
    return weights


class _Gate(object):
    def __init__(self, config):
        self.config = config
        self.durations = {}
        self.spans = {}  # nodeid -> (worker, first start, last stop) of its setup, call and teardown
        self.worker = hasattr(config, "workerinput")

    def pytest_runtest_logreport(self, report):
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + report.duration
        node = getattr(report, "node", None)  # the xdist worker that ran it, on the controller
        worker = getattr(getattr(node, "gateway", None), "id", None) or "main"
        start, stop = getattr(report, "start", 0.0), getattr(report, "stop", 0.0)
        if start and stop:
            was = self.spans.get(report.nodeid)
            self.spans[report.nodeid] = (worker, min(start, was[1]) if was else start, max(stop, was[2]) if was else stop)

    def pytest_sessionfinish(self, session):
        if self.worker:
            return
        stage = self.config.getoption("stage")
        if not stage:
            return
        ok, message = floor_verdict(stage, len(self.durations), read_floor())
        self.floor_message = message
        if not ok and session.exitstatus == 0:
            session.exitstatus = 1
        gate_dir = os.environ.get("GATE_DIR")
        if gate_dir:
            os.makedirs(gate_dir, exist_ok=True)
            with open(os.path.join(gate_dir, "counts.tsv"), "a") as out:
                out.write("%s\t%d\t%d\n" % (stage, len(self.durations), read_floor().get(stage, -1)))
            with open(os.path.join(gate_dir, "slow.tsv"), "a") as out:
                for seconds, nodeid in slowest(self.durations, len(self.durations)):
                    if seconds > SLOW_S:
                        out.write("%s\t%.1f\t%s\n" % (stage, seconds, nodeid))
            with open(os.path.join(gate_dir, "timeline-%s.tsv" % stage), "w") as out:
                for nodeid, (worker, start, stop) in sorted(self.spans.items(), key=lambda kv: kv[1][1]):
                    out.write("%s\t%.3f\t%.3f\t%s\n" % (worker, start, stop, nodeid))

    def pytest_terminal_summary(self, terminalreporter):
        if self.worker or not self.durations:
            return
        write = terminalreporter.write_line
        terminalreporter.section("%d slowest tests (setup + call + teardown)" % min(SLOWEST, len(self.durations)))
        for seconds, nodeid in slowest(self.durations):
            write("%8.2fs  %s" % (seconds, nodeid))
        over = [(seconds, nodeid) for seconds, nodeid in slowest(self.durations, len(self.durations)) if seconds > SLOW_S]
        for seconds, nodeid in over:
            write("WARNING: %s took %.1f s (over %d s)" % (nodeid, seconds, SLOW_S))
        idle = idle_at_the_end([(worker, start, stop, nodeid) for nodeid, (worker, start, stop) in self.spans.items()])
        if len(idle) > 1:
            write("workers idle at the end while another still ran: %s" % ", ".join(
                "%s %.0f s" % (worker, seconds) for worker, seconds in sorted(idle.items())))
        message = getattr(self, "floor_message", None)
        if message:
            write(message, red=message.startswith("FLOOR"), bold=message.startswith("FLOOR"))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "weights":
        sys.exit("usage: python tests/support/pytest_gate.py weights GATE_DIR > tests/weights.tsv")
    print("# seconds each test module took in a gate (tests/support/pytest_gate.py: with xdist, the heaviest run first);")
    print("# rewrite it from a gate: python tests/support/pytest_gate.py weights build/gate > tests/weights.tsv")
    for module, seconds in sorted(weights_from(sys.argv[2]).items(), key=lambda kv: -kv[1]):
        print("%.0f\t%s" % (seconds, module))
