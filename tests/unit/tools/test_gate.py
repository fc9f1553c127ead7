# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gate's guards (tests/support/pytest_gate.py) and its table (tools/gate.py): the floor fails a stage
that ran fewer tests, the ceiling fails a hung test by name while the others go on, the table names every
stage and the load average."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap

import pytest

import pytest_gate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import gate  # noqa: E402  pylint: disable=wrong-import-position


def test_the_floor_file_of_the_repo_names_every_stage_the_makefile_passes():
    floor = pytest_gate.read_floor()
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    stages = sorted(set(word.split()[0] for word in makefile.split("--stage ")[1:]))
    assert stages and all(stage in floor for stage in stages), (stages, sorted(floor))
    assert floor["units"] >= 1047 and floor["integration"] + floor["integration-timing"] >= 146


def test_a_malformed_floor_line_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "floor.txt"
    path.write_text("# c\nunits 10\nintegration many\n")
    with pytest.raises(ValueError, match=r"floor.txt:3: expected 'stage count', got 'integration many'"):
        pytest_gate.read_floor(str(path))


@pytest.mark.parametrize("ran, ok, words", [
    (9, False, "FLOOR: stage units ran 9 tests, fewer than its floor of 10"),
    (10, True, "floor: stage units ran 10 tests, its floor is 10"),
    (11, True, "raise it in"),
])
def test_floor_verdict(ran, ok, words):
    got_ok, message = pytest_gate.floor_verdict("units", ran, {"units": 10})
    assert got_ok is ok and words in message


def test_a_stage_without_a_floor_fails_listing_the_stages():
    ok, message = pytest_gate.floor_verdict("nightly", 3, {"units": 1, "awx": 2})
    assert not ok and "stage 'nightly' has no floor" in message and "awx, units" in message


@pytest.mark.parametrize("path, ceiling", [
    ("/x/tests/unit/plugins/test_a.py", 60),
    ("/x/tests/integration/test_b.py", 300),
    ("/x/tests/fleet/test_c.py", 420),
    ("/x/elsewhere/test_d.py", pytest_gate.CEILING_OTHER),
])
def test_ceiling_by_directory(path, ceiling):
    assert pytest_gate.ceiling_for(path) == ceiling


def test_slowest_orders_and_cuts():
    assert pytest_gate.slowest({"a": 1.0, "b": 3.0, "c": 2.0}, 2) == [(3.0, "b"), (2.0, "c")]


def run_stage(tmp_path, floor, extra=()):
    """pytest on a small suite of its own, with the gate's hooks and a floor file of its own."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        import pytest_gate
        from pytest_gate import pytest_addoption, pytest_collection_modifyitems

        def pytest_configure(config):
            pytest_gate.configure(config)
        """ % os.path.dirname(pytest_gate.__file__)))
    (suite / "test_some.py").write_text(textwrap.dedent("""
        import time
        import pytest

        def test_quick():
            assert True

        @pytest.mark.timeout(1)
        def test_hangs():
            time.sleep(30)

        def test_after_the_hang():
            assert True
        """))
    (tmp_path / "floor.txt").write_text("suite %d\n" % floor)
    env = dict(os.environ, GATE_FLOOR_FILE=str(tmp_path / "floor.txt"), GATE_DIR=str(tmp_path / "gate"))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--stage", "suite",
                           str(suite)] + list(extra), capture_output=True, text=True, env=env, timeout=60, check=False)


def test_a_hang_fails_that_test_by_name_within_its_ceiling_and_the_rest_go_on(tmp_path):
    run = run_stage(tmp_path, 3)
    assert run.returncode == 1, run.stdout
    assert "FAILED" in run.stdout and "test_some.py::test_hangs" in run.stdout and "Timeout" in run.stdout
    assert "1 failed, 2 passed" in run.stdout
    assert "floor: stage suite ran 3 tests, its floor is 3" in run.stdout
    assert "slowest tests" in run.stdout


def test_a_stage_that_runs_fewer_tests_than_its_floor_fails(tmp_path):
    run = run_stage(tmp_path, 3, ["-k", "not hangs"])
    assert run.returncode == 1, run.stdout
    assert "2 passed" in run.stdout and "FLOOR: stage suite ran 2 tests, fewer than its floor of 3" in run.stdout
    with open(str(tmp_path / "gate" / "counts.tsv")) as counts:
        assert counts.read() == "suite\t2\t3\n"


def test_at_its_floor_a_passing_stage_passes(tmp_path):
    run = run_stage(tmp_path, 2, ["-k", "not hangs"])
    assert run.returncode == 0, run.stdout


def test_the_table_names_each_stage_its_share_the_load_and_the_slow_tests(tmp_path):
    (tmp_path / "counts.tsv").write_text("units\t1047\t1047\n")
    (tmp_path / "slow.tsv").write_text("integration\t75.2\ttests/integration/test_x.py::test_y\n")
    lines = gate.table([("gate-setup", 90.0, 0), ("units", 30.0, 0), ("integration", 0.5, 2)], (0.41, 0.3, 0.2),
                       str(tmp_path))
    text = "\n".join(lines)
    assert "load average at start 0.41 0.30 0.20" in text
    assert "gate-setup" in text and "1:30 (90s)" in text and "74.7%" in text
    assert "FAILED (exit 2)" in text and "total" in text
    assert "units 1047/1047" in text
    assert "WARNING: [integration] tests/integration/test_x.py::test_y took 75.2 s (over 60 s)" in text


def test_a_group_runs_its_stages_at_once_and_is_one_row_with_each_members_time(tmp_path, capsys):
    """a+b: each target waits for the other's mark, so run one after the other the first would fail."""
    (tmp_path / "Makefile").write_text(textwrap.dedent("""\
        a:
        \ttouch a.mark; for i in $$(seq 30); do test -e b.mark && exit 0; sleep 0.1; done; exit 3
        b:
        \ttouch b.mark; for i in $$(seq 30); do test -e a.mark && exit 0; sleep 0.1; done; exit 3
        c:
        \texit 4
        """))
    gate_dir = tmp_path / "gate"
    gate_dir.mkdir()
    rows = gate.run_group(["a", "b"], dict(os.environ), str(gate_dir), cwd=str(tmp_path))
    assert [(name, rc) for name, _wall, rc in rows] == [("a", 0), ("b", 0)]
    out = capsys.readouterr().out
    assert "== a (ran beside b)" in out and "== b (ran beside a)" in out
    for mark in ("a.mark", "b.mark"):
        (tmp_path / mark).unlink()
    failed = gate.run_group(["a", "c"], dict(os.environ), str(gate_dir), cwd=str(tmp_path))
    assert [(name, rc) for name, _wall, rc in failed] == [("a", 2), ("c", 2)], "a waited for b in vain; c failed"
    lines = gate.table([("a+c", 10.0, 2, list(failed))], (0.1, 0.1, 0.1), str(gate_dir))
    assert any(line.startswith("a+c") and "FAILED (exit 2) (at once: a " in line and "c 0s FAILED" in line
               for line in lines), lines


def test_a_chain_in_a_group_runs_its_stages_in_turn_beside_the_others_and_stops_at_a_failure(tmp_path, capsys):
    """x>a+b: x first, then a, while b runs all along (a and b wait for each other's mark); c>a stops after c."""
    (tmp_path / "Makefile").write_text(textwrap.dedent("""\
        x:
        \ttest ! -e a.mark && touch x.mark
        a:
        \ttest -e x.mark; touch a.mark; for i in $$(seq 50); do test -e b.mark && exit 0; sleep 0.1; done; exit 3
        b:
        \ttouch b.mark; for i in $$(seq 50); do test -e a.mark && exit 0; sleep 0.1; done; exit 3
        c:
        \texit 4
        """))
    gate_dir = tmp_path / "gate"
    gate_dir.mkdir()
    rows = gate.run_group(["x>a", "b"], dict(os.environ), str(gate_dir), cwd=str(tmp_path))
    assert [(name, rc) for name, _wall, rc in rows] == [("x", 0), ("a", 0), ("b", 0)]
    assert "== a (ran beside x, b)" in capsys.readouterr().out
    for mark in ("x.mark", "a.mark", "b.mark"):
        (tmp_path / mark).unlink()
    stopped = gate.run_group(["c>a"], dict(os.environ), str(gate_dir), cwd=str(tmp_path))
    assert [(name, rc) for name, _wall, rc in stopped] == [("c", 2)] and not (tmp_path / "a.mark").exists()


def test_a_member_that_makes_its_stdin_non_blocking_leaves_the_others_blocking(tmp_path, capsys):
    """a sets O_NONBLOCK on its stdin (as the fleet's ssh does) and holds it; b, started beside it, must still find
    its own stdin blocking (ansible-galaxy, under Molecule, refuses to run otherwise). With one inherited stdin they
    share one open file description, and b fails."""
    (tmp_path / "nonblock.py").write_text(textwrap.dedent("""\
        import fcntl, os, time
        fcntl.fcntl(0, fcntl.F_SETFL, fcntl.fcntl(0, fcntl.F_GETFL) | os.O_NONBLOCK)
        open("a.mark", "w").close()
        time.sleep(2)
        """))
    (tmp_path / "blocking.py").write_text(textwrap.dedent("""\
        import os, sys, time
        for _ in range(50):
            if os.path.exists("a.mark"):
                break
            time.sleep(0.1)
        sys.exit(0 if os.get_blocking(0) else 5)
        """))
    (tmp_path / "Makefile").write_text("a:\n\t%s nonblock.py\nb:\n\t%s blocking.py\n" % (sys.executable, sys.executable))
    gate_dir = tmp_path / "gate"
    gate_dir.mkdir()
    saved = os.dup(0)
    with open(os.devnull) as shared:
        os.dup2(shared.fileno(), 0)  # the gate's own stdin /dev/null, as the run that failed had it
    try:
        rows = gate.run_group(["a", "b"], dict(os.environ), str(gate_dir), cwd=str(tmp_path))
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    assert [(name, rc) for name, _wall, rc in rows] == [("a", 0), ("b", 0)], capsys.readouterr().out


def test_the_makefile_quotes_each_stage_so_the_shell_never_reads_a_chain_as_a_redirection():
    dry = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    line = next(line for line in dry.splitlines() if "tools/gate.py" in line)
    stages = shlex.split(line)[2:]  # as the shell hands them over: a chain unquoted would be a redirection
    assert stages[0] == "gate-setup" and any(">" in stage for stage in stages), line


class _Item(object):
    def __init__(self, nodeid):
        self.nodeid = nodeid


def test_the_heaviest_modules_run_first_each_in_its_own_order():
    items = [_Item(n) for n in ("tests/a.py::t1", "tests/a.py::t2", "tests/b.py::t1", "tests/c.py::t1", "tests/b.py::t2")]
    got = pytest_gate.heaviest_modules_first(items, {"tests/b.py": 50.0, "tests/c.py": 10.0})
    assert [i.nodeid for i in got] == ["tests/b.py::t1", "tests/b.py::t2", "tests/c.py::t1", "tests/a.py::t1",
                                       "tests/a.py::t2"]
    assert [i.nodeid for i in pytest_gate.heaviest_modules_first(items, {})] == [
        "tests/a.py::t1", "tests/a.py::t2", "tests/b.py::t1", "tests/b.py::t2", "tests/c.py::t1"]


def test_the_weights_come_from_a_gates_timelines_and_the_idle_tail_from_one(tmp_path):
    (tmp_path / "timeline-integration.tsv").write_text(
        "gw0\t100.0\t130.0\ttests/a.py::t1\ngw1\t100.0\t110.0\ttests/b.py::t1\ngw1\t110.0\t115.0\ttests/a.py::t2\n")
    (tmp_path / "timeline-units.tsv").write_text("main\t0.0\t2.5\ttests/c.py::t1\n")
    # a stage that ran a module again (core-latest's selection) does not add to it: the larger counts
    (tmp_path / "timeline-core-latest-integration.tsv").write_text("gw0\t0.0\t20.0\ttests/a.py::t1\n")
    assert pytest_gate.weights_from(str(tmp_path)) == {"tests/a.py": 35.0, "tests/b.py": 10.0, "tests/c.py": 2.5}
    rows = [line.split("\t") for line in (tmp_path / "timeline-integration.tsv").read_text().splitlines()]
    assert pytest_gate.idle_at_the_end([(w, float(a), float(b), n) for w, a, b, n in rows]) == {"gw0": 0.0, "gw1": 15.0}
    weights = tmp_path / "weights.tsv"
    weights.write_text("# comment\n35\ttests/a.py\n10\ttests/b.py\n")
    assert pytest_gate.read_weights(str(weights)) == {"tests/a.py": 35.0, "tests/b.py": 10.0}
    assert pytest_gate.read_weights(str(tmp_path / "none.tsv")) == {}


def test_the_repos_weights_name_only_modules_that_exist():
    weights = pytest_gate.read_weights()
    assert weights and all(os.path.exists(os.path.join(ROOT, module)) for module in weights), sorted(weights)
