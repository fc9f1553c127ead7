# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _server.wait_ready: this call's limit, a resumed wait, the ready_timeout deadline and an engine exiting while it loads."""

from __future__ import annotations

import types

import pytest

from launch_params import params

from ansible_collections.inferops.serving.plugins.module_utils import _engines, _server


class _Sup(object):
    def __init__(self, exits_after=None, code=1):
        self.exits_after = exits_after
        self.code = code
        self.calls = 0

    def ending(self, record):
        self.calls += 1
        if self.exits_after is not None and self.calls > self.exits_after:
            return {"code": self.code, "signal": None, "signum": None, "message": "exited with code %d" % self.code}
        return None


def test_wait_ready_limit_elapsed_and_deadline(monkeypatch):
    now = [100.0]
    answers = []

    def probe(*_a, **_k):
        return _engines.Probe(answers.pop(0) if answers else "loading", "503 loading")

    monkeypatch.setattr(_engines, "probe", probe)

    def clock():
        return now[0]

    def sleep(seconds):
        now[0] += seconds

    launch = types.SimpleNamespace(probe_model="m", health_timeout=10.0)
    p = params(ready_timeout=10.0)
    # the limit ends this call's wait: None, the server keeps loading
    assert _server.wait_ready(_Sup(), {}, launch, p, clock=clock, sleep=sleep, limit=1.0) is None
    assert now[0] == 101.0
    # a resumed wait counts from the start: ready 2.5 s later is 8.5 s after a start 6 s ago
    answers[:] = ["loading"] * 10 + ["ready"]
    assert _server.wait_ready(_Sup(), {}, launch, p, clock=clock, sleep=sleep, elapsed=6.0) == 8.5
    # and the deadline counts from the start too: 9 s loaded already, 1 s left
    with pytest.raises(_server.ServerError, match="not ready within ready_timeout=10.0s"):
        _server.wait_ready(_Sup(), {}, launch, p, clock=clock, sleep=sleep, elapsed=9.0, limit=5.0)
    with pytest.raises(_server.ServerError, match="exited with code 1 before it was ready") as known:
        _server.wait_ready(_Sup(exits_after=2), {}, launch, p, clock=clock, sleep=sleep)
    assert known.value.extra["rc"] == 1
    assert known.value.extra["exit"]["code"] == 1
