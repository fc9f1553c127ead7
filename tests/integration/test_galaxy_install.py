# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection as Galaxy users get it: `ansible-galaxy collection build` of this checkout, the
tarball's contents, `ansible-galaxy collection install` of it (offline: no dependencies), then the main
job `ansible-playbook inferops.serving.switch_variant` from a scratch directory outside the checkout,
with bench_facts enabled the way README.md says, against the timing-exact stand-in on fake GPUs.

Nothing of the checkout may take part in the run: its ansible.cfg, its collections/ link, its roles.
The build runs on a copy of the checkout in which every directory that must stay out of the tarball
(build outputs, caches, results/ at any depth) is planted, so galaxy.yml's build_ignore is tested
whatever this checkout holds at the moment.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import types
import urllib.request

import pytest
import yaml
from switchbed import stand_in

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)

# Not copied from the checkout (large, or links); planted again in the copy with a marker file each.
HEAVY = (".git", ".venv", ".venv-core-latest", "build", "collections", ".whl", ".gl", ".cache", "tests/output")
# Planted in the copy: none of it may reach the tarball.
PLANTED = (".venv", ".venv-core-latest", "build", "collections/ansible_collections/inferops/serving", ".whl", ".gl",
           ".cache", ".pytest_cache", ".ansible", "results", "playbooks/results", "roles/serve_variant/results",
           "extensions/molecule/default/results", "docs/other/results", "tests/output", "plugins/__pycache__",
           "tests/unit/.pytest_cache", "tests/unit/.cache")
# Out of the tarball at the top level, and at any depth.
TOP_LEVEL = {".git", ".venv", ".venv-core-latest", "build", ".ansible"}
ANY_DEPTH = {"results", "__pycache__", ".pytest_cache", ".whl", ".gl", ".cache"}


def clean_env(scratch, collections_path, extra=None):
    """The environment of a Galaxy user: no ANSIBLE_*/INFEROPS_* of this session, a config of our own,
    collections only from `collections_path` (not from sys.path either)."""
    env = dict((k, v) for k, v in os.environ.items()
               if not k.startswith(("ANSIBLE_", "INFEROPS_")) and k not in ("PYTHONPATH",))
    cfg = scratch / "ansible.cfg"
    if not cfg.exists():
        cfg.write_text("[defaults]\ninterpreter_python = auto_silent\nretry_files_enabled = false\n")
    env.update({
        "PATH": BIN + os.pathsep + os.environ.get("PATH", ""),
        "ANSIBLE_CONFIG": str(cfg),
        "ANSIBLE_COLLECTIONS_PATH": str(collections_path),
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
        "ANSIBLE_LOCAL_TEMP": str(scratch / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    })
    env.update(extra or {})
    return env


def run(argv, scratch, env, timeout=300):
    return subprocess.run(argv, cwd=str(scratch), env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def forbidden_entries(names):
    """Tarball entries no Galaxy user should get; docs/results/ (recorded runs, documentation) is kept."""
    bad = []
    for name in names:
        parts = name.rstrip("/").split("/")
        below = parts[2:] if parts[:2] == ["docs", "results"] else parts  # planted deeper down still counts
        if parts[0] in TOP_LEVEL or ANY_DEPTH.intersection(below) or name.endswith((".pyc", ".whl")):
            bad.append(name)
        elif "/".join(parts[:2]) in ("tests/output", "collections/ansible_collections"):
            bad.append(name)
    return bad


@pytest.fixture
def tarball(tmp_path):
    """The collection built from a copy of the checkout with every unwanted directory planted in it."""
    src = tmp_path / "src" / "serving"
    shutil.copytree(ROOT, str(src), symlinks=True, ignore=lambda d, names: [
        n for n in names if os.path.relpath(os.path.join(d, n), ROOT) in HEAVY or n in ("__pycache__", ".pytest_cache")])
    for rel in PLANTED:
        (src / rel).mkdir(parents=True, exist_ok=True)
        (src / rel / "planted.json").write_text("{}\n")
    (src / "tests" / "stray.whl").write_text("not a wheel\n")
    out = tmp_path / "dist"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = clean_env(scratch, scratch / "collections")
    built = run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(out), str(src)],
                scratch, env)
    assert built.returncode == 0, built.stdout + built.stderr
    path, = out.glob("inferops-serving-*.tar.gz")
    return path


@pytest.fixture
def galaxy_user(tmp_path, tarball, fake_gpus, port):
    """The collection installed from the tarball into a scratch directory, and an inventory of this host
    serving the stand-in; stops the server however the test ends."""
    scratch = tmp_path / "scratch"
    collections_path = scratch / "collections"
    # bench_facts enabled the way README.md ("Installed from Galaxy") tells a user to
    env = clean_env(scratch, collections_path, dict(fake_gpus.env, ANSIBLE_CALLBACKS_ENABLED="inferops.serving.bench_facts",
                                                    XDG_DATA_HOME=str(scratch / "xdg-data")))
    installed = run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline",
                     "-p", str(collections_path), str(tarball)], scratch, env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    state = tmp_path / "state"
    inventory = scratch / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"serving": {
        "hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {
            "serving_engine": "command", "serving_model": "standin", "serving_name": "sv", "serving_port": port,
            "serving_state_dir": str(state), "serving_log_dir": str(tmp_path / "log"), "serving_supervisor": "process",
            "serving_ready_timeout": 20, "serving_stop_timeout": 5, "serving_progress_delay": 1,
            "serving_gpu_check": {"backend": "nvidia_smi", "timeout": 10, "kill_grace": 2},
            "serving_bench": {"concurrency": [1, 2], "requests_per_level": 4, "input_tokens": 8, "output_tokens": 8,
                              "warmup": 0},
            "serving_variants": {"fast": {"command": stand_in(port, 2)}},
        }}}))

    def playbook(name, *args):
        """ansible-playbook inferops.serving.<name>: the installed collection's playbook, run by name."""
        return run([os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), "inferops.serving." + name] + list(args),
                   scratch, env)

    def reinstall():
        """ansible-galaxy collection install --force of the same tarball: what an upgrade does to the installed copy."""
        return run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline", "--force",
                    "-p", str(collections_path), str(tarball)], scratch, env)

    user = types.SimpleNamespace(scratch=scratch, collections=collections_path, env=env, port=port, playbook=playbook,
                                 installed=collections_path / "ansible_collections" / "inferops" / "serving",
                                 reinstall=reinstall, data=scratch / "xdg-data" / "inferops" / "results")
    yield user
    stopped = user.playbook("stop")
    record = state / "sv.json"
    if stopped.returncode != 0 and record.exists():  # leave nothing running, even so
        try:
            os.killpg(json.loads(record.read_text())["pid"], signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass
    assert stopped.returncode == 0, stopped.stdout[-3000:] + stopped.stderr[-2000:]


def test_tarball_ships_no_results_caches_or_build_outputs(tarball):
    with tarfile.open(str(tarball)) as tar:
        names = tar.getnames()
    assert "playbooks/switch_variant.yml" in names and "plugins/callback/bench_facts.py" in names
    assert any(n.startswith("docs/results/") for n in names), "the recorded runs (docs/results/) must ship"
    assert not forbidden_entries(names), forbidden_entries(names)
    assert "tests/stray.whl" not in names


def test_installed_collection_runs_the_main_job_and_records_the_benchmark(galaxy_user):
    listed = run([os.path.join(BIN, "ansible-galaxy"), "collection", "list", "--format", "json"],
                 galaxy_user.scratch, galaxy_user.env)
    assert listed.returncode == 0, listed.stderr
    locations = json.loads(listed.stdout)  # ansible-core's own ansible._protomatter is listed too
    assert [path for path, found in locations.items() if "inferops.serving" in found] == \
        [str(galaxy_user.collections / "ansible_collections")], locations
    assert not [path for path in locations if path.startswith(os.path.join(ROOT, "collections"))], locations

    # an earlier version's history, where it used to go: inside the installed collection
    old = galaxy_user.installed / "playbooks" / "results"
    old.mkdir()
    (old / "history.jsonl").write_text('{"host": "localhost", "variant": "fast", "concurrency": 1, "run": "old"}\n')
    played = galaxy_user.playbook("switch_variant", "-e", "variant=fast", "-vvv")
    out = played.stdout
    assert played.returncode == 0, out[-4000:] + played.stderr[-2000:]
    assert "Using %s as config file" % galaxy_user.env["ANSIBLE_CONFIG"] in out

    # the server answered, and the benchmark ran: its figures are in the play's output
    assert "localhost: variant fast (fast)" in out, out[-4000:]
    with urllib.request.urlopen("http://127.0.0.1:%d/health" % galaxy_user.port, timeout=5) as resp:
        assert resp.status == 200
    assert re.search(r"c=1: 4/4 ok, [0-9.]+ tok/s output.*; c=2: 4/4 ok, [0-9.]+ tok/s output", out), out[-4000:]
    assert re.search(r"^localhost +: ok=\d+ +changed=1 +unreachable=0 +failed=0 ", out, re.M), out[-2000:]
    assert "bench_facts: localhost" in out

    # every playbook, role and task file, and every module of ours, came from the installed copy
    task_paths = [line.split("task path: ", 1)[1] for line in out.splitlines() if line.startswith("task path: ")]
    assert task_paths and all(p.startswith(str(galaxy_user.installed) + os.sep) for p in task_paths), task_paths
    modules = [line.split("Using module file ", 1)[1] for line in out.splitlines() if "Using module file " in line]
    assert any(m.endswith("/inference_server.py") for m in modules), out[-3000:]
    assert any(m.endswith("/throughput_bench.py") for m in modules), out[-3000:]
    ours = [m for m in modules if "/plugins/modules/" in m and "/site-packages/ansible/" not in m]
    assert ours and all(m.startswith(str(galaxy_user.installed) + "/") for m in ours), ours
    assert not [m for m in modules if m.startswith(ROOT + os.sep) and not m.startswith(sys.prefix + os.sep)], modules

    # bench_facts, enabled by ANSIBLE_CALLBACKS_ENABLED, wrote to $XDG_DATA_HOME/inferops/results, outside the
    # installed collection, and named the old history it found inside it, which it left as it was
    results = galaxy_user.data
    run_file, = results.glob("*-switch_variant.json")
    assert "bench_facts: wrote %s" % run_file in out
    both = " ".join((out + played.stderr).split())
    assert "bench_facts: an earlier history is inside the installed collection, at %s; reinstalling the collection " \
           "deletes it. This run writes to %s." % (old, results) in both, both[-3000:]
    assert (old / "history.jsonl").read_text().count("\n") == 1 and not list(old.glob("*-switch_variant.json"))
    recorded = json.loads(run_file.read_text())
    assert recorded["playbook"] == str(galaxy_user.installed / "playbooks" / "switch_variant.yml")
    bench, = recorded["hosts"]["localhost"]["benchmarks"]
    assert bench["variant"] == "fast"
    levels = bench["levels"]
    assert [lvl["concurrency"] for lvl in levels] == [1, 2]
    assert all(lvl["output_throughput"] > 0 for lvl in levels), levels
    assert (results / "history.jsonl").exists()
    assert not (galaxy_user.scratch / "results").exists()
    # the upgrade: install --force replaces the collection, with the old place inside it; the history lives on
    history = (results / "history.jsonl").read_text()
    assert galaxy_user.reinstall().returncode == 0
    assert not old.exists()
    assert (results / "history.jsonl").read_text() == history and len(history.splitlines()) == 2
    assert not os.path.exists(os.path.join(ROOT, "playbooks", "results", run_file.name))
