# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What switch_variant.yml itself costs: a switch minus the engine's own time to ready, and a no-op re-run.

usage: python benchmarks/switch_overhead.py [--runs N] [--baseline REF] [--trees main,baseline]

Real ansible-playbook runs of playbooks/switch_variant.yml on localhost, switching between two
variants of the timing-exact stand-in engine (tests/support/stream_server.py, ready in well under
a second) on 8 fake GPUs (the fake nvidia-smi of tests/support), benchmark off. For each switch:
wall time of the whole ansible-playbook process minus the `ready_s` the engine took (as measured
by inference_server), i.e. validate + plan + stop + GPU check + start + the readiness wait of the
role. Then the idempotent re-run (nothing to change), and the floor: a one-task playbook (one debug
task on the same inventory, with the same environment), what any ansible-playbook run costs here; and
the module floor: a one-task playbook whose task is ansible.builtin.ping, one module round trip, the
least that anything acting on the host costs.

Two trees, alternating in one run: `main` (this working tree, local changes included) and the
baseline, a git worktree of REF (default 27928f9) at build/bench-trees/REF, created on the first run
and reused after (checked out at REF again if it is elsewhere and clean; nothing is removed), with
its collections/ link as `make setup` makes it. Each tree runs from its own directory with its own
ansible.cfg (its callbacks_enabled kept, bench_facts writing into a temp dir) and its own playbooks
and roles (no ANSIBLE_* variable of the caller's environment is passed on, ANSIBLE_CONFIG included;
a task run from another tree's files is an error); the ansible-playbook of this venv, the
stand-in engine and the fake GPUs of this tree serve both, each tree with its own state directory,
port and inventory. Per round, one tree's switch, re-run and floor, then the other's; the order
swaps each round (drift cancels out).

Prints each run; per tree the medians of switch overhead, re-run and floor (and the first two
above the floor); the ratios main/baseline; main against its targets (switch overhead <= 1.0 s,
re-run <= 0.9 s: OK or MISSED); then a per-task profile of main's last switch and last re-run
(benchmarks/callback/task_wall.py): start-up and end, then the 15 slowest tasks with their share
of the whole run and the baseline's time for the same task (its name as written, with its role),
and the engine's start task cut at the engine's spawn and ready.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUPPORT = os.path.join(ROOT, "tests", "support")
CALLBACKS = [os.path.join(SUPPORT, "callback"), os.path.join(ROOT, "benchmarks", "callback")]
BIN = os.path.dirname(sys.executable)
TREES_DIR = os.path.join(ROOT, "build", "bench-trees")
LINK = os.path.join("collections", "ansible_collections", "inferops", "serving")
TARGET_SWITCH = 1.0
TARGET_RERUN = 0.9
TOP = 15
FLOOR_PLAYBOOK = [{"name": "Floor", "hosts": "serving", "gather_facts": False,
                   "tasks": [{"name": "One task", "ansible.builtin.debug": {"msg": "floor"}}]}]
# the floor of anything that acts on the host: one module round trip (AnsiballZ built, sent, run by the
# target's Python), the least a switch or a re-run can cost
MODULE_FLOOR_PLAYBOOK = [{"name": "Module floor", "hosts": "serving", "gather_facts": False,
                          "tasks": [{"name": "One module call", "ansible.builtin.ping": {}}]}]
sys.path.insert(0, SUPPORT)
import fake_nvidia_smi  # noqa: E402  pylint: disable=wrong-import-position


def git(*args, cwd=ROOT):
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit("git %s (in %s) failed: %s" % (" ".join(args), cwd, proc.stderr.strip()))
    return proc.stdout.strip()


def worktrees():
    """{real path: its HEAD (None if missing)} of the worktrees git knows, missing ones included."""
    found, path = {}, None
    for line in git("worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            path = os.path.realpath(line[len("worktree "):])
            found[path] = None
        elif line.startswith("HEAD ") and path:
            found[path] = line[len("HEAD "):]
    return found


def collection_link(tree):
    """The link through which the tree's ansible.cfg (collections_path = ./collections) finds the tree."""
    link = os.path.join(tree, LINK)
    if os.path.islink(link) and os.readlink(link) == "../../..":
        return
    if os.path.lexists(link):
        raise SystemExit("%s exists and is not a link to ../../..: leaving it alone" % link)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink("../../..", link)


def baseline_tree(ref):
    """The root of a git worktree of REF under build/bench-trees, made or reused (nothing of the user's removed)."""
    proc = subprocess.run(["git", "rev-parse", "--verify", "--quiet", ref + "^{commit}"], cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit("--baseline %s: no such commit in %s" % (ref, ROOT))
    commit = proc.stdout.strip()
    path = os.path.join(TREES_DIR, re.sub(r"[^A-Za-z0-9._-]", "_", ref))
    known = worktrees()
    if os.path.exists(path):
        if os.path.realpath(path) not in known:
            raise SystemExit("%s exists and is not a worktree of this repository: move it away or choose another --baseline" % path)
        head = git("rev-parse", "HEAD", cwd=path)
        if head != commit:
            if git("status", "--porcelain", cwd=path):
                raise SystemExit("%s is at %s with local changes, not at %s (%s): leaving it alone" % (path, head[:9], ref, commit[:9]))
            print("worktree %s: %s -> %s (%s)" % (path, head[:9], commit[:9], ref), flush=True)
            git("checkout", "--quiet", "--detach", commit, cwd=path)
    else:
        os.makedirs(TREES_DIR, exist_ok=True)
        # a worktree deleted by hand stays registered until pruned: -f re-adds that one path only
        force = ["-f"] if os.path.realpath(path) in known else []
        print("worktree %s: adding %s (%s)" % (path, commit[:9], ref), flush=True)
        git("worktree", "add", "--quiet", "--detach", *force, path, commit)
    collection_link(path)
    return path


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fake_gpus(tmp):
    return fake_nvidia_smi.fake_host(tmp, 8, "bench")


def inventory(tmp, port, name):
    def stand_in(step_ms):
        return [sys.executable, os.path.join(SUPPORT, "stream_server.py"), "--port", str(port),
                "--model", "standin", "--ttft-ms", "5", "--step-ms", str(step_ms)]
    group = {
        "hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"serving_engine": "command", "serving_model": "standin", "serving_name": name,
                 "serving_port": port, "serving_state_dir": os.path.join(tmp, "state"),
                 "serving_log_dir": os.path.join(tmp, "log"), "serving_supervisor": "process",
                 "serving_ready_timeout": 30, "serving_stop_timeout": 5,
                 "serving_gpu_check": {"backend": "nvidia_smi", "timeout": 10, "kill_grace": 2},
                 "serving_bench_enabled": False,
                 "serving_variants": {"a": {"command": stand_in(2)}, "b": {"command": stand_in(3)}}},
    }
    path = os.path.join(tmp, "inventory.yml")
    with open(path, "w") as handle:
        yaml.safe_dump({"serving": group}, handle)
    return path


class Tree:
    """One tree under test: its root, and its own temp dir, fake GPUs, port, inventory and figures."""

    def __init__(self, label, root, about):
        self.label, self.root, self.about = label, root, about
        self.tmp = tempfile.mkdtemp(prefix="inferops-overhead-%s-" % re.sub(r"[^A-Za-z0-9]", "", label))
        self.env = fake_gpus(self.tmp)
        self.inv = inventory(self.tmp, free_port(), "overhead-" + re.sub(r"[^a-z0-9]", "", label.lower()))
        self.floor_playbook = os.path.join(self.tmp, "floor.yml")
        with open(self.floor_playbook, "w") as handle:
            yaml.safe_dump(FLOOR_PLAYBOOK, handle, sort_keys=False)
        self.module_floor_playbook = os.path.join(self.tmp, "module-floor.yml")
        with open(self.module_floor_playbook, "w") as handle:
            yaml.safe_dump(MODULE_FLOOR_PLAYBOOK, handle, sort_keys=False)
        parser = configparser.RawConfigParser()
        parser.read(os.path.join(root, "ansible.cfg"))
        # ANSIBLE_CALLBACKS_ENABLED replaces the ansible.cfg list: keep the tree's own callbacks on it
        own = [c.strip() for c in parser.get("defaults", "callbacks_enabled", fallback="").split(",") if c.strip()]
        self.callbacks = ",".join(own + ["record", "task_wall"])
        self.switches, self.reruns, self.floors, self.module_floors = [], [], [], []
        self.switch_cpus, self.rerun_cpus = [], []
        self.profiles = {}

    def play(self, playbook, variant=None):
        """(wall seconds, ready_s of a start or None, stdout, profile) of one ansible-playbook run in this tree;
        self.cpu is then the CPU seconds (user + system) of the run and every process it waited for: its forked
        workers, modules and their commands, not the engine it starts (which outlives the run)."""
        tag = time.monotonic_ns()
        record = os.path.join(self.tmp, "record-%d.jsonl" % tag)
        profile = os.path.join(self.tmp, "profile-%d.json" % tag)
        run_env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
        run_env.update(self.env)
        run_env.update({"ANSIBLE_NOCOLOR": "1", "ANSIBLE_CALLBACK_PLUGINS": os.pathsep.join(CALLBACKS),
                        "ANSIBLE_CALLBACKS_ENABLED": self.callbacks,
                        "INFEROPS_TEST_RECORD": record, "INFEROPS_BENCH_PROFILE": profile,
                        # bench_facts (on in ansible.cfg) writes its run files here, not into the tree's playbooks/results
                        "INFEROPS_RESULTS_DIR": os.path.join(self.tmp, "results")})
        argv = [os.path.join(BIN, "ansible-playbook"), "-i", self.inv, playbook]
        if variant:
            argv += ["-e", "variant=%s" % variant]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        launched, start = time.time(), time.monotonic()
        proc = subprocess.run(argv, cwd=self.root, env=run_env, capture_output=True, text=True, check=False)
        wall, ended = time.monotonic() - start, time.time()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise SystemExit("%s: %s failed (rc=%d):\n%s" % (self.label, " ".join(argv), proc.returncode, proc.stdout[-3000:]))
        ready, start_rec = None, None
        if os.path.exists(record):
            with open(record) as handle:
                for line in handle:
                    rec = json.loads(line)
                    # the start (or, for a long load, the async_status poll that saw it ready) reports ready_s
                    if (rec["action"].endswith(("inference_server", "async_status")) and rec["status"] == "ok"
                            and rec["result"].get("healthy") and rec["result"].get("ready_s") is not None):
                        ready = rec["result"]["ready_s"]
                        start_rec = rec if rec["result"].get("started_at") else start_rec
        events = None
        if os.path.exists(profile):
            with open(profile) as handle:
                events = {"launched": launched, "ended": ended, "wall": wall, "events": json.load(handle),
                          "start": start_rec and {"task": start_rec["task"], "started_at": start_rec["result"]["started_at"],
                                                  "ready_s": start_rec["result"]["ready_s"]}}
        return wall, ready, proc.stdout, events

    def switch(self, variant):
        return self.play(os.path.join("playbooks", "switch_variant.yml"), variant)

    def stop(self):
        try:
            self.play(os.path.join("playbooks", "stop.yml"), "a")
        except SystemExit as exc:
            print("warning: stopping %s's engine: %s" % (self.label, exc), file=sys.stderr)

    def round(self, variant):
        wall, ready, _out, profile = self.switch(variant)
        if ready is None:
            raise SystemExit("%s: the switch to %s reported no ready_s (the record callback saw no healthy start)" % (self.label, variant))
        self.switches.append((wall, ready))
        self.switch_cpus.append(self.cpu)
        self.profiles["switch"] = profile
        wall_again, _ready, out, profile = self.switch(variant)
        if "changed=0" not in out:
            raise SystemExit("%s: the re-run of %s changed something:\n%s" % (self.label, variant, out[-2000:]))
        self.reruns.append(wall_again)
        self.rerun_cpus.append(self.cpu)
        self.profiles["re-run"] = profile
        floor = self.play(self.floor_playbook)[0]
        self.floors.append(floor)
        module_floor = self.play(self.module_floor_playbook)[0]
        self.module_floors.append(module_floor)
        print("%-9s switch to %s: %.2f s wall, engine ready in %.2f s -> overhead %.2f s; re-run %.2f s; floor %.2f s; "
              "module floor %.2f s; CPU switch %.2f s, re-run %.2f s"
              % (self.label, variant, wall, ready, wall - ready, wall_again, floor, module_floor, self.switch_cpus[-1],
                 self.rerun_cpus[-1]), flush=True)

    def medians(self):
        return (statistics.median(w - r for w, r in self.switches), statistics.median(self.reruns),
                statistics.median(self.floors))


def check_paths(tree, trees, profile):
    """Fail when a task ran from another tree's files (a collection found elsewhere than through the tree's own link)."""
    roots = sorted(((os.path.realpath(t.root), t) for t in trees), key=lambda rt: -len(rt[0]))
    for event in profile["events"]:
        path = (event.get("path") or "").rsplit(":", 1)[0]
        if not path:
            continue
        real = os.path.realpath(path)
        owner = next((t for root, t in roots if real == root or real.startswith(root + os.sep)), None)
        if owner is not tree:
            raise SystemExit("%s ran %s from %s, not from its own tree %s" % (tree.label, event.get("name"), path, tree.root))


def profile_rows(profile):
    """({phase: seconds}, {task key: [seconds, runs, name as shown]}): each interval between events goes to the earlier one."""
    events = profile["events"]
    phases = {"start-up": events[0]["time"] - profile["launched"]}
    tasks = {}
    labels = {"callbacks_loaded": "set-up", "playbook_start": "set-up", "play_start": "set-up", "stats": "end"}
    for event, following in zip(events, events[1:] + [{"time": profile["ended"]}]):
        spent = following["time"] - event["time"]
        if event["event"] == "task_start":
            row = tasks.setdefault(event.get("key") or event["name"], [0.0, 0, event["name"]])
            row[0] += spent
            row[1] += 1
            row[2] = event["name"]
        else:
            phases[labels[event["event"]]] = phases.get(labels[event["event"]], 0.0) + spent
    return phases, tasks


def start_split(profile):
    """The task that started the engine, cut at the engine's spawn and ready: (name, before, ready_s, after) or None."""
    start = profile.get("start")
    if not start:
        return None
    events = profile["events"]
    ends = [e["time"] for e in events[1:]] + [profile["ended"]]
    spans = [(e["time"], end) for e, end in zip(events, ends) if e["event"] == "task_start" and e["name"] == start["task"]]
    span = next(((b, e) for b, e in reversed(spans) if b <= start["started_at"] <= e), None)
    if span is None:
        return None
    return (start["task"], start["started_at"] - span[0], start["ready_s"],
            span[1] - start["started_at"] - start["ready_s"])


PHASES = [("start-up", "[start-up: python, ansible, config, inventory, playbook and roles parsed, callbacks]"),
          ("set-up", "[playbook and play start until the first task]"),
          ("end", "[after the last task: stats, exit]")]


def print_profile(tree, kind, other):
    profile = tree.profiles.get(kind)
    if not profile:
        print("\nno profile of %s's %s (task_wall wrote nothing)" % (tree.label, kind))
        return
    total = profile["wall"]
    phases, tasks = profile_rows(profile)
    other_tasks = profile_rows(other.profiles[kind])[1] if other and other.profiles.get(kind) else None
    ready = "; engine ready_s %.2f s" % tree.switches[-1][1] if kind == "switch" else ""
    print("\nprofile of %s's last %s: %.2f s wall, %d tasks%s" % (tree.label, kind, total, sum(row[1] for row in tasks.values()), ready))
    head = "%8s %6s %s" % ("s", "share", "task (runs)")
    if other_tasks is not None:
        head = "%8s %6s %9s %s" % ("s", "share", other.label, "task (runs)")
    print(head)

    def line(seconds, name, baseline=None):
        if other_tasks is None:
            print("%8.3f %5.1f%% %s" % (seconds, 100 * seconds / total, name))
        else:
            print("%8.3f %5.1f%% %9s %s" % (seconds, 100 * seconds / total, "-" if baseline is None else "%.3f" % baseline, name))
    for key, label in PHASES:
        line(phases.get(key, 0.0), label)
    ranked = sorted(tasks.items(), key=lambda item: -item[1][0])
    for key, (seconds, count, name) in ranked[:TOP]:
        line(seconds, "%s (%d)" % (name, count) if count > 1 else name,
             other_tasks[key][0] if other_tasks and key in other_tasks else None)
    rest = sum(row[0] for _k, row in ranked[TOP:])
    all_tasks = sum(row[0] for row in tasks.values())
    print("%8.3f %5.1f%% the other %d tasks; all tasks %.3f s (%.1f%%)"
          % (rest, 100 * rest / total, max(0, len(ranked) - TOP), all_tasks, 100 * all_tasks / total))
    split = start_split(profile)
    if split:
        print("inside '%s': %.3f s until the engine was spawned (module start-up, lock, stop of the old engine, GPU check),"
              " %.3f s engine ready_s, %.3f s after it was ready (result back to the controller)" % split)


def describe_main():
    head = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return "this working tree %s, HEAD %s%s" % (ROOT, head, " + local changes" if dirty else "")


def summary(trees):
    print("\n%-9s %16s %8s %7s %22s %20s" % ("tree", "switch overhead", "re-run", "floor", "overhead above floor", "re-run above floor"))
    figures = {}
    for tree in trees:
        overhead, rerun, floor = figures[tree.label] = tree.medians()
        print("%-9s %14.2f s %6.2f s %5.2f s %20.2f s %18.2f s   (medians of %d; %s)"
              % (tree.label, overhead, rerun, floor, overhead - floor, rerun - floor, len(tree.reruns), tree.about))
    labels = [t.label for t in trees]
    if len(labels) == 2 and "main" in labels:
        base = labels[1] if labels[0] == "main" else labels[0]
        ratios = [m / b if b else float("nan") for m, b in zip(figures["main"], figures[base])]
        print("%-9s %15.2fx %7.2fx %6.2fx   (main / %s)" % ("ratio", ratios[0], ratios[1], ratios[2], base))
        main, other = [t for t in trees if t.label == "main"][0], [t for t in trees if t.label == base][0]
        # CPU moves less than wall with what else the machine does; the rounds alternate, so each round is a pair
        print("CPU seconds (the run and every process it waited for, the engine excepted), medians: switch %.2f s / "
              "%.2f s, re-run %.2f s / %.2f s (main / %s); median of the paired ratios: switch %.2fx, re-run %.2fx"
              % (statistics.median(main.switch_cpus), statistics.median(other.switch_cpus),
                 statistics.median(main.rerun_cpus), statistics.median(other.rerun_cpus), base,
                 statistics.median(m / b for m, b in zip(main.switch_cpus, other.switch_cpus) if b),
                 statistics.median(m / b for m, b in zip(main.rerun_cpus, other.rerun_cpus) if b)))
    module_floor = statistics.median(f for tree in trees for f in tree.module_floors)
    floor = statistics.median(f for tree in trees for f in tree.floors)
    print("this machine: a one-task playbook %.2f s, one module call (ansible.builtin.ping) %.2f s (medians over both "
          "trees): a module call costs %.2f s above the floor, and a switch or a re-run makes at least one"
          % (floor, module_floor, module_floor - floor))
    if "main" in figures:
        overhead, rerun, _floor = figures["main"]
        print("main: median switch overhead %.2f s (target <= %.1f s) -> %s"
              % (overhead, TARGET_SWITCH, "OK" if overhead <= TARGET_SWITCH else "MISSED"))
        print("main: median idempotent re-run %.2f s (target <= %.1f s) -> %s"
              % (rerun, TARGET_RERUN, "OK" if rerun <= TARGET_RERUN else "MISSED"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds (default 5); each tree switches, re-runs and runs the floor once a round")
    parser.add_argument("--baseline", default="27928f9", help="git ref of the baseline tree (default 27928f9), a worktree at build/bench-trees/REF")
    parser.add_argument("--trees", default="main,baseline",
                        help="comma-separated, of main and baseline (default main,baseline); the first goes first in round 1")
    args = parser.parse_args()
    names = [n.strip() for n in args.trees.split(",") if n.strip()]
    if not names or any(n not in ("main", "baseline") for n in names) or len(set(names)) != len(names):
        parser.error("--trees: a comma-separated list of main and baseline, each at most once")
    if args.runs < 1:
        parser.error("--runs: at least 1")
    base_root = baseline_tree(args.baseline) if "baseline" in names else None
    trees = []
    try:
        for name in names:
            if name == "main":
                trees.append(Tree("main", ROOT, describe_main()))
            else:
                about = "worktree %s at %s" % (os.path.relpath(base_root, ROOT), git("rev-parse", "--short", "HEAD", cwd=base_root))
                trees.append(Tree(args.baseline if args.baseline != "main" else "ref:main", base_root, about))
        for tree in trees:
            print("%-9s %s" % (tree.label, tree.about), flush=True)
        for tree in trees:
            tree.switch("a")  # the first start (nothing to stop), not counted
        for run in range(args.runs):
            variant = "b" if run % 2 == 0 else "a"
            for tree in (trees if run % 2 == 0 else trees[::-1]):
                tree.round(variant)
                check_paths(tree, trees, tree.profiles["switch"])
    finally:
        for tree in trees:
            tree.stop()
            shutil.rmtree(tree.tmp, ignore_errors=True)
    summary(trees)
    profiled = next((t for t in trees if t.label == "main"), trees[0])
    other = next((t for t in trees if t is not profiled), None)
    for kind in ("switch", "re-run"):
        print_profile(profiled, kind, other)
    load = os.getloadavg()[0]
    print("\nload average at the end: %.2f on %d cores" % (load, os.cpu_count() or 0))


if __name__ == "__main__":
    main()
