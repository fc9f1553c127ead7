# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The warm-up to steady state of throughput_bench, without sockets: steady(), warmup_step(), the WarmUp state
machine (time passed in) and a window's throughput from hand-made records."""

from __future__ import annotations

import pytest

import stand_in

stand_in.importable()
from ansible_collections.inferops.serving.plugins.module_utils import _bench, _openai_stream as s  # noqa: E402


@pytest.mark.parametrize("previous, this, tolerance, want", [
    (1000.0, 1000.0, 0.05, True),
    (1000.0, 1049.9, 0.05, True),
    (1000.0, 950.1, 0.05, True),
    (1000.0, 1050.0, 0.05, True),        # exactly the tolerance agrees
    (1000.0, 1051.0, 0.05, False),
    (1000.0, 949.0, 0.05, False),
    (500.0, 1000.0, 0.05, False),        # a server getting faster
    (1000.0, 1000.0, 0.0, True),         # tolerance 0: only equal windows agree
    (1000.0, 1000.1, 0.0, False),
    (None, 1000.0, 0.05, False),         # a window that completed nothing never agrees
    (1000.0, None, 0.05, False),
    (0.0, 0.0, 0.05, False),             # nor do two windows of nothing
])
def test_two_windows_agree_within_the_tolerance_relative_to_the_earlier_one(previous, this, tolerance, want):
    assert _bench.steady(previous, this, tolerance) is want


@pytest.mark.parametrize("windows, elapsed, want", [
    ([], 0.0, _bench.WINDOW),                          # the first window always goes when there is time
    ([800.0], 1.0, _bench.WINDOW),                     # one window: nothing to compare yet
    ([800.0, 1600.0], 2.0, _bench.WINDOW),             # getting faster: another window
    ([800.0, 1600.0, 1620.0], 3.0, _bench.STEADY),     # the last two agree
    ([800.0, 1600.0, 1620.0], 999.0, _bench.STEADY),   # steady wins over the time limit
    ([800.0, 1600.0], 120.0, _bench.OUT_OF_TIME),      # the limit is reached: no new window
    ([], 120.5, _bench.OUT_OF_TIME),                   # out of time before any window
    ([800.0, None], 5.0, _bench.NOTHING_COMPLETED),    # a window that completed no request ends it
    ([None], 200.0, _bench.NOTHING_COMPLETED),
])
def test_warmup_step_decides_from_the_windows_and_the_time(windows, elapsed, want):
    assert _bench.warmup_step(windows, 0.05, elapsed, 120.0) == want


def test_the_state_machine_runs_windows_until_two_agree():
    state = _bench.WarmUp(0.05, 120.0, began=100.0)
    seen = []
    now = 100.5  # after the fixed warm-up
    for tps in (400.0, 900.0, 1500.0, 1560.0, 9999.0):
        step = state.next(now)
        seen.append(step)
        if step != _bench.WINDOW:
            break
        state.add(tps)
        now += 2.0
    assert seen == [_bench.WINDOW] * 4 + [_bench.STEADY]
    assert state.result() == {"warmup_s": 8.5, "steady": True, "warmup_end": "steady",
                              "warmup_windows": [400.0, 900.0, 1500.0, 1560.0]}
    assert state.next(1000.0) == _bench.STEADY and state.result()["warmup_s"] == 8.5  # over is over
    with pytest.raises(ValueError, match="the warm-up is over"):
        state.add(1.0)


def test_the_state_machine_stops_when_the_time_runs_out():
    state = _bench.WarmUp(0.05, 3.0, began=0.0)
    assert state.next(0.2) == _bench.WINDOW
    state.add(100.0)
    assert state.next(1.7) == _bench.WINDOW
    state.add(300.0)
    assert state.next(3.2) == _bench.OUT_OF_TIME
    assert state.result() == {"warmup_s": 3.2, "steady": False, "warmup_end": "out_of_time",
                              "warmup_windows": [100.0, 300.0]}
    tiny = _bench.WarmUp(0.05, 0.001, began=0.0)
    assert tiny.next(0.05) == _bench.OUT_OF_TIME  # the fixed warm-up alone took longer: no window at all
    assert tiny.result() == {"warmup_s": 0.05, "steady": False, "warmup_end": "out_of_time", "warmup_windows": []}


def record(t_send, t_first, t_last, tokens, error=None):
    rec = s.StreamRecord()
    rec.t_send, rec.t_first, rec.t_last, rec.t_end = t_send, t_first, t_last, t_last
    rec.n_events = tokens
    rec.usage = {"prompt_tokens": 8, "completion_tokens": tokens}
    if error:
        rec.t_first = rec.t_last = rec.usage = None
        rec.n_events, rec.error_kind, rec.error, rec.t_end = 0, error, "connection closed", t_send + 0.1
    return rec


def test_a_window_s_throughput_is_a_level_s_output_throughput():
    # 2 workers x 2 rounds: 4 requests of 100 tokens over the window 10.0 .. 12.0
    recs = [record(10.0, 10.1, 11.0, 100), record(11.0, 11.1, 12.0, 100),
            record(10.0, 10.1, 10.9, 100), record(10.9, 11.0, 11.8, 100)]
    assert _bench.window_throughput(recs, 2) == pytest.approx(400 / 2.0)
    assert _bench.window_throughput(recs[:3] + [record(10.9, None, None, 0, error="dropped")], 2) == pytest.approx(300 / 2.0)
    assert _bench.window_throughput([record(10.0, None, None, 0, error="dropped")], 1) is None
    assert _bench.window_throughput([], 1) is None


def test_an_unsteady_level_is_a_client_warning():
    bench = _bench.Bench(s.Target("http://127.0.0.1:9"), "m")
    lag = {"p99": 0.1}
    results = [{"concurrency": 1, "client_loop_lag_ms": lag, "steady": True, "warmup_s": 1.0, "labels": {}},
               {"concurrency": 8, "client_loop_lag_ms": lag, "steady": False, "warmup_s": 120.4, "labels": {"repeat": 1},
                "warmup_end": "out_of_time", "warmup_windows": [10.0, 20.0]},
               {"concurrency": 16, "client_loop_lag_ms": lag, "steady": False, "warmup_s": 0.3, "labels": {},
                "warmup_end": "nothing_completed", "warmup_windows": [None]},
               {"concurrency": 32, "client_loop_lag_ms": lag, "steady": None, "warmup_s": 0.0, "labels": {}}]
    (warning,) = bench.client_info(results)["warnings"]
    assert warning == ("measured before the server was steady: c=8 (repeat 1), warmup_max_s ran out after 120.4 s of "
                       "warm-up (windows [10.0, 20.0] tok/s; raise warmup_max_s or warmup_tolerance); c=16, a warm-up "
                       "window completed no request")
    assert bench.client_info(results[:1] + results[3:])["warnings"] == []
