# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark-only callback: the wall time of every task, written as JSON to $INFEROPS_BENCH_PROFILE."""

from __future__ import annotations

DOCUMENTATION = r"""
name: task_wall
type: aggregate
short_description: Wall time of each task, for benchmarks/switch_overhead.py
description:
  - Records the wall-clock time at which the callbacks were loaded, the playbook and each play started,
    each task (handlers and includes too) started, and the statistics were printed.
  - Each task is named as shown and as written (untemplated, with its role), the key that matches it across runs and trees.
  - A task's time runs from its start to the next task's start (the last one's to the statistics), so an
    include task holds the time to load what it includes.
  - At the end writes them as one JSON document to the file named by E(INFEROPS_BENCH_PROFILE).
options: {}
"""

import json
import os
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_wall"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._events = [{"event": "callbacks_loaded", "time": time.time()}]

    def _mark(self, event, task=None):
        entry = {"event": event, "time": time.time()}
        if task is not None:
            # the name as written (before templating) keys the task across trees and runs
            data = task.get_ds()
            raw = data.get("name") if isinstance(data, dict) else None
            role = task._role.get_name() if task._role else None  # pylint: disable=protected-access
            key = "%s : %s" % (role, raw) if role and raw else raw
            entry.update({"name": task.get_name(), "key": key or task.get_name(), "action": task.action,
                          "path": task.get_path()})
        self._events.append(entry)

    def v2_playbook_on_start(self, playbook):
        self._mark("playbook_start")

    def v2_playbook_on_play_start(self, play):
        self._mark("play_start")

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._mark("task_start", task)

    def v2_playbook_on_handler_task_start(self, task):
        self._mark("task_start", task)

    def v2_playbook_on_cleanup_task_start(self, task):
        self._mark("task_start", task)

    def v2_playbook_on_stats(self, stats):
        self._mark("stats")
        path = os.environ.get("INFEROPS_BENCH_PROFILE")
        if path:
            with open(path, "w") as handle:
                json.dump(self._events, handle)
