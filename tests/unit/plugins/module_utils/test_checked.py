# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of inference_server state=checked (_checked.check): what an instance's record, its exit record
and the kernel log say, judged; the probe and the host's commands are given."""

from __future__ import annotations

import types

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _checked, _engines, _router, _switch

OOM = ("[ 8120.102468] demo kernel: Out of memory: Killed process 4242 (transformers) total-vm:14895312kB, "
       "anon-rss:13574219kB, file-rss:4096kB, shmem-rss:0kB, UID:0 pgtables:27344kB oom_score_adj:0\n")
KILLED = {"code": None, "signal": "SIGKILL", "signum": 9, "ended_at": "2026-12-05T21:40:01+0000",
          "message": "was killed by SIGKILL at 2026-12-05T21:40:01+0000"}


def ctx(record, running, kernel_log="", end=None):
    host = types.SimpleNamespace(run=lambda argv, **kw: (0, kernel_log, ""))
    sup = types.SimpleNamespace(ending=lambda rec, wait=0: dict(end or KILLED))
    return types.SimpleNamespace(params={"name": "demo.r0", "host": "127.0.0.1", "port": 8001, "api_key": None},
                                 result={}, load=lambda: (record, running), sup=sup, host=host)


RECORD = {"pid": 4242, "starttime": 100, "variant": "batched", "url": "http://127.0.0.1:8001", "host": "127.0.0.1",
          "port": 8001, "served_model": "tiny"}


def never(*args, **kw):
    raise AssertionError("a gone or unrecorded engine is not probed")


def test_nothing_recorded_passes():
    changed, result, dummy = _checked.check(ctx(None, False), probe=never)
    assert not changed and result["serving"] is False and result["reason"] == _checked.NOTHING


def test_a_live_engine_that_answers_passes():
    seen = []

    def probe(host, port, model, api_key, **kw):
        seen.append((host, port, model))
        return _engines.Probe("ready", "POST /v1/completions: 1 token generated")
    changed, result, dummy = _checked.check(ctx(dict(RECORD), True), probe=probe)
    assert not changed and result["serving"] is True and result["healthy"] is True and result["pid"] == 4242
    assert seen == [("127.0.0.1", 8001, "tiny")]


def test_an_engine_gone_names_the_instance_and_how_it_ended():
    with pytest.raises(_switch.ServerError) as caught:
        _checked.check(ctx(dict(RECORD), False), probe=never)
    assert str(caught.value) == ("instance demo.r0 (variant batched, pid 4242) no longer runs: the engine was killed "
                                 "by SIGKILL at 2026-12-05T21:40:01+0000")
    assert caught.value.extra["exit"]["signal"] == "SIGKILL" and caught.value.extra["oom"] is None


def test_an_oom_kill_in_the_kernel_log_is_named():
    with pytest.raises(_switch.ServerError) as caught:
        _checked.check(ctx(dict(RECORD), False, kernel_log=OOM), probe=never)
    assert str(caught.value).endswith("was killed by SIGKILL at 2026-12-05T21:40:01+0000; killed by the kernel's "
                                      "OOM killer (anon-rss 13.9 GB)")
    assert caught.value.extra["oom"]["anon_rss_kib"] == 13574219


def test_an_engine_that_runs_and_does_not_answer_fails():
    with pytest.raises(_switch.ServerError) as caught:
        _checked.check(ctx(dict(RECORD), True), probe=lambda *a, **kw: _engines.Probe("down", "GET /health: refused"))
    assert str(caught.value) == ("instance demo.r0 (variant batched, pid 4242) runs but does not serve on "
                                 "http://127.0.0.1:8001: GET /health: refused")


def test_a_switch_under_way_is_left_to_it():
    changed, result, dummy = _checked.check(ctx(dict(RECORD, loading=True), True), probe=never)
    assert result["reason"] == _checked.UNDER_WAY and result["serving"] is False


class Router(object):
    """A stand-in for _router.Membership (read and describe)."""

    def __init__(self, reading=None, error=None):
        self.reading, self.error, self.reads = reading, error, 0

    def read(self):
        self.reads += 1
        if self.error:
            raise _router.RouterError(self.error)
        return self.reading

    def describe(self):
        return {"url": ["http://127.0.0.1:30080"], "type": "sglang", "worker_url": "http://127.0.0.1:8001"}


def ready(*args, **kw):
    return _engines.Probe("ready", "POST /v1/completions: 1 token generated")


def test_behind_a_router_an_instance_that_serves_carries_what_the_router_lists_of_it():
    listed = {"listed": True, "healthy": True, "router_url": "http://127.0.0.1:30080", "worker_url": "http://127.0.0.1:8001"}
    changed, result, dummy = _checked.check(ctx(dict(RECORD), True), probe=ready, router=Router(listed))
    assert not changed and result["serving"] is True and result["membership"] == listed
    down = Router(error="router http://127.0.0.1:30080 could not be read: connection refused")
    changed, result, dummy = _checked.check(ctx(dict(RECORD), True), probe=ready, router=down)
    assert result["serving"] is True, "a router that cannot be read does not fail the engine's check"
    assert result["membership"] == {"listed": None, "healthy": None, "router_url": "http://127.0.0.1:30080",
                                    "worker_url": "http://127.0.0.1:8001", "error": down.error}
    changed, result, dummy = _checked.check(ctx(dict(RECORD), True), probe=ready, router=Router(None))
    assert "membership" not in result, "router type none: there is no list"


def test_an_instance_gone_or_unrecorded_does_not_ask_its_router():
    router = Router({"listed": True, "healthy": True})
    _checked.check(ctx(None, False), probe=never, router=router)
    with pytest.raises(_switch.ServerError):
        _checked.check(ctx(dict(RECORD), False), probe=never, router=router)
    assert router.reads == 0
