# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only callback: append every task result to the JSON-lines file $INFEROPS_TEST_RECORD."""

from __future__ import annotations

DOCUMENTATION = r"""
name: record
type: aggregate
short_description: Record task results for the test suite
description: Appends one JSON line per task result to the file named by E(INFEROPS_TEST_RECORD).
options: {}
"""

import json
import os
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "record"
    CALLBACK_NEEDS_ENABLED = True

    def _write(self, result, status):
        path = os.environ.get("INFEROPS_TEST_RECORD")
        if not path:
            return
        task = result.task
        line = {"host": result.host.get_name(), "task": task.get_name(), "action": task.action,
                "status": status, "result": result.result, "time": time.time()}
        with open(path, "a") as handle:
            handle.write(json.dumps(line, default=str) + "\n")

    def v2_runner_on_ok(self, result):
        self._write(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._write(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result):
        self._write(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._write(result, "unreachable")
