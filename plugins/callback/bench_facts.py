# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: bench_facts
type: aggregate
short_description: Record every benchmark with its exact configuration, compare it with the last run, chart it
version_added: 0.5.0
description:
  - Collects every C(inferops.serving.throughput_bench) result of the playbook, called directly or
    through C(ansible.builtin.async_status), with the C(inferops.serving.gpu_idle_check) and
    C(inferops.serving.inference_server) results of the same hosts (GPUs seen, processes killed,
    argv, fingerprint, ready time).
  - At the end of the playbook writes into O(results_dir) a run file C(<timestamp>-<playbook>.json),
    one line per host, variant and concurrency of each benchmark appended to C(history.jsonl) (with
    C(repeat), the benchmark's C(repeat) label, so the repeats of a comparison can be grouped), a
    Markdown report C(<timestamp>-<playbook>.md) and a chart C(<timestamp>-<playbook>.png) of output
    throughput and per-request decode speed against concurrency, one line per variant.
  - When the playbook publishes a variant comparison with C(ansible.builtin.set_stats) as
    C(inferops_compare) (a dict of host to verdict, each from the C(inferops.serving.compare_variants)
    filter, as C(playbooks/compare.yml) does), the run file also gets C(comparisons) and
    C(failed_variants) (the rows of every host) and C(compare) (per host the reference, winner,
    objective, the variants an SLO disqualified and the verdict lines), the report a Comparison
    section, and a chart C(<timestamp>-<playbook>-compare.png) of each variant's output throughput
    against concurrency and TPOT p50 against output throughput, geometric means over the repeats with their
    95% intervals.
  - Prints a compact summary table and one line beginning C(REGRESSION:) per level (host, instance,
    variant, concurrency) whose output throughput dropped or TPOT p50 rose against the window of the last
    O(regression_window) runs of the same level, bench settings (the C(bench) digest label) and kind
    (compare and tune repeats with each other, single benchmarks with single benchmarks). A run's figure
    is the geometric mean of its repeats; it is flagged when it lies outside the window's 95% prediction
    interval on the logs (95% for all the figures of the run together) and is worse than the window's
    geometric mean by more than O(regression_threshold). The line gives the figure, the window's
    geometric mean with its interval and N, and names a fingerprint change inside the window.
  - With fewer than 3 runs in the window a change beyond the threshold is shown as unconfirmed, with the
    number of runs. A first run, with no history, flags nothing.
  - An aggregate callback, not a stdout callback, so it also runs under AWX, whose own stdout
    callback is forced. Enable it with C(callbacks_enabled = inferops.serving.bench_facts).
  - A results directory that cannot be written gives one warning; the play goes on and its result
    is unchanged.
  - Before the first play that runs a role of this collection, or that comes from one of its playbooks, it
    imports the Python code the roles' filters use into the controller's main process. Each task's worker
    is forked from that process and inherits the code compiled, instead of compiling it again in every task.
author:
  - inferops.serving maintainers (@inferops)
requirements:
  - Enabled with C(callbacks_enabled) in C(ansible.cfg) or E(ANSIBLE_CALLBACKS_ENABLED).
  - The chart needs C(matplotlib) on the controller; without it the chart is skipped with one note.
options:
  results_dir:
    description:
      - Directory for the run files, the history and the reports. Created when missing.
      - Default is C(results/) beside the (first) playbook; for a playbook of an installed collection
        (C(ansible-playbook inferops.serving.X)), whose files C(ansible-galaxy collection install --force)
        deletes, C($XDG_DATA_HOME/inferops/results), else C(~/.local/share/inferops/results). A history left
        inside the installed collection by an earlier version is named with how to move it, never deleted.
    type: path
    env:
      - name: INFEROPS_RESULTS_DIR
    ini:
      - section: callback_bench_facts
        key: results_dir
  regression_threshold:
    description:
      - Percentage by which output throughput may drop, or TPOT p50 may rise, against the previous run
        of the same host, variant and concurrency before it is flagged as a regression.
    type: float
    default: 10
    env:
      - name: INFEROPS_REGRESSION_THRESHOLD
    ini:
      - section: callback_bench_facts
        key: regression_threshold
  fail_on_regression:
    description:
      - With V(true), a run with at least one confirmed regression exits with status 1 once everything is
        written and printed (unless the play itself already failed, whose status then stands).
      - Unconfirmed regressions (fewer than 3 runs in the window) count only with O(fail_on_unconfirmed).
    type: bool
    default: false
    env:
      - name: INFEROPS_FAIL_ON_REGRESSION
    ini:
      - section: callback_bench_facts
        key: fail_on_regression
  fail_on_unconfirmed:
    description:
      - With V(true), O(fail_on_regression) also counts the unconfirmed regressions, judged on the
        threshold alone against a window of fewer than 3 runs.
    type: bool
    default: false
    env:
      - name: INFEROPS_FAIL_ON_UNCONFIRMED
    ini:
      - section: callback_bench_facts
        key: fail_on_unconfirmed
  regression_window:
    description:
      - How many earlier runs of the same level, bench settings and kind a run is judged against.
    type: int
    default: 5
    env:
      - name: INFEROPS_REGRESSION_WINDOW
    ini:
      - section: callback_bench_facts
        key: regression_window
  regression_ack:
    description:
      - Acknowledges a known change. The window of the levels named restarts with this run, and the
        history records it. V(all), or C(HOST), C(HOST/VARIANT) or C(HOST/VARIANT/CONCURRENCY),
        comma-separated.
      - C(-e regression_ack=...) on the command line sets it too, and wins over the environment and ini.
    type: str
    env:
      - name: INFEROPS_REGRESSION_ACK
    ini:
      - section: callback_bench_facts
        key: regression_ack
"""

EXAMPLES = r"""
# ansible.cfg
# [defaults]
# callbacks_enabled = inferops.serving.bench_facts
# [callback_bench_facts]
# results_dir = /srv/bench/results
# regression_threshold = 5
# fail_on_regression = true
# regression_window = 10

# acknowledge a known change of one host's variant (the window restarts with this run):
#   ansible-playbook inferops.serving.bench -e regression_ack=gpu01/llama-fp8
"""

import os

from ansible import __version__ as ANSIBLE_VERSION
from ansible.plugins.callback import CallbackBase

from ansible_collections.inferops.serving.plugins.plugin_utils import _lazy, _results_collect, _results_dir

# the exit status of a run whose only problem is a regression (ansible's generic error)
REGRESSION_EXIT = 1
COLLECTION = "inferops.serving"
# this collection's root: plugins/callback/bench_facts.py, two levels up from its folder
COLLECTION_ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def runs_collection(play, playbook):
    """Whether PLAY runs a role of this collection, or PLAYBOOK (a path, or None) is one of its playbooks."""
    if playbook and os.path.realpath(playbook).startswith(os.path.join(COLLECTION_ROOT, "")):
        return True
    try:
        roles = play.get_roles()
    except Exception:  # pylint: disable=broad-except  # a play object without roles (tests)
        return False
    return any(role.get_name(include_role_fqcn=True).startswith(COLLECTION + ".") for role in roles)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "inferops.serving.bench_facts"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self.collector = _results_collect.RunCollector()
        self.playbook = None
        self.outcome = None
        self.extra_ack = None
        self.warmed = False

    def v2_playbook_on_start(self, playbook):
        if self.playbook is None:
            self.playbook = getattr(playbook, "_file_name", None)

    def v2_playbook_on_play_start(self, play):
        self.collector.add_play(play.get_name())
        # before the play's first task is forked: its workers inherit what the roles' filters import
        if not self.warmed and runs_collection(play, self.playbook):
            _lazy.warm()
            self.warmed = True
        try:  # -e regression_ack=...: the extra vars the play was started with
            ack = play.get_variable_manager().extra_vars.get("regression_ack")
        except Exception:  # pylint: disable=broad-except  # a play without a variable manager (tests)
            ack = None
        if ack not in (None, ""):
            self.extra_ack = ack

    def _add(self, result, status):
        try:
            self.collector.add(result.host.get_name(), result.task.action, result.task.get_name(),
                               result.result, status)
        except Exception as exc:  # recording must never cost the play
            self._display.warning("bench_facts: could not record a result of %s: %s" % (result.task.get_name(), exc))

    def v2_runner_on_ok(self, result):
        self._add(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._add(result, "ignored" if ignore_errors else "failed")

    def _results_dir(self):
        return _results_dir.resolve(self.get_option("results_dir"),
                                    os.path.dirname(os.path.abspath(self.playbook)) if self.playbook else None)

    def _comparison(self, stats):
        """The variant comparison the playbook published with set_stats, [(host, verdict)]."""
        try:
            return _results_collect.compare_verdicts(getattr(stats, "custom", None), self.collector.order)
        except Exception as exc:  # as _add
            self._display.warning("bench_facts: could not read the %s stats: %s" % (_results_collect.COMPARE_STAT, exc))
            return []

    def v2_playbook_on_stats(self, stats):
        compare = self._comparison(stats)
        if self.collector.is_empty() and not compare:
            return
        # imported here, not at the top: this callback loads with every playbook, and the report's code (the
        # compare's statistics and the resolved-config diff, which reads module_utils._resolved) costs about
        # 0.1 s to import, paid only by a run that has results to record
        from ansible_collections.inferops.serving.plugins.plugin_utils import _results_regressions, _results_run
        try:
            threshold = float(self.get_option("regression_threshold"))
            results_dir = self._results_dir()
            window = self.get_option("regression_window")
            ack = self.extra_ack if self.extra_ack is not None else self.get_option("regression_ack")
            self.outcome = _results_run.finish(self.collector, results_dir, self.playbook, ANSIBLE_VERSION, threshold,
                                               compare=compare, window=int(window), ack=ack)
        except Exception as exc:  # never fail or lose the play over our bookkeeping
            self._display.warning("bench_facts: results not recorded: %s" % exc)
            return
        try:
            old = _results_dir.stranded(results_dir, os.path.dirname(os.path.abspath(self.playbook)) if self.playbook else None)
        except OSError:
            old = None
        if old:
            self.outcome.warnings.append(old)
        for warning in self.outcome.warnings:
            self._display.warning(warning)
        self._display.display("")
        for line in self.outcome.summary:
            self._display.display(line, color="red" if line.startswith("REGRESSION:") else None)
        for note in self.outcome.notes:
            self._display.display(note)
        if self.outcome.paths:
            self._display.display("bench_facts: wrote %s" % ", ".join(
                self.outcome.paths[k] for k in ("run", "history", "report", "chart", "compare_chart") if k in self.outcome.paths))
        counted = _results_regressions.confirmed(self.outcome.regressions, self.get_option("fail_on_unconfirmed"))
        if counted and self.get_option("fail_on_regression"):
            summary = stats.summarize
            already_failed = any(summary(h).get("failures") or summary(h).get("unreachable") for h in stats.processed)
            self._display.display("bench_facts: %d %sregression(s) and fail_on_regression is set: exiting %d"
                                  % (len(counted), "" if self.get_option("fail_on_unconfirmed") else "confirmed ",
                                     REGRESSION_EXIT), stderr=True)
            if not already_failed:
                # Neither a callback's return value nor an exception it raises (reported as a
                # warning by the task queue manager) changes ansible-playbook's status. SystemExit is
                # not an Exception: it passes the dispatcher, the executor's cleanup runs in its
                # `finally`, and the interpreter exits with this status. The stdout callback has
                # already printed the recap; callbacks after this one miss v2_playbook_on_stats.
                raise SystemExit(REGRESSION_EXIT)
