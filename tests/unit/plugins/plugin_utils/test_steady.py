# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""_steady: the levels of a comparison measured before the server was steady, and the warning lines."""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.plugin_utils import _steady


def level(concurrency, steady=True, warmup_s=2.0, repeat=None, end=None, windows=None):
    out = {"concurrency": concurrency, "output_throughput": 100.0 * concurrency, "labels": {"variant": "x"}}
    if steady != "absent":
        out.update(steady=steady, warmup_s=warmup_s, warmup_end=end or ("steady" if steady else "out_of_time"),
                   warmup_windows=windows if windows is not None else [1.0, 1.0])
    if repeat is not None:
        out["labels"]["repeat"] = repeat
    return out


RESULTS = {
    "base": {"repeats": [[level(1), level(8)], [level(1), level(8, steady=False, warmup_s=120.3, windows=[50.0, 90.0])]]},
    "nextn": {"repeats": [{"results": [level(1, steady=False, warmup_s=121.0, repeat=0), level(8, repeat=0)]},
                          {"results": [level(1, steady=False, warmup_s=122.5, repeat=1), level(8, repeat=1)]}]},
    "crash": {"failed": "exited with code 3", "log_tail": ["boom"]},
    "old": {"repeats": [[level(1, steady="absent"), level(8, steady=None)]]},  # history from before; warm-up off
}


def test_every_level_not_steady_is_listed_variant_by_variant_repeat_by_repeat():
    got = _steady.unsteady_levels(RESULTS, order=["base", "nextn", "crash", "old"])
    assert got == [
        {"variant": "base", "concurrency": 8, "repeat": 1, "warmup_s": 120.3, "warmup_end": "out_of_time",
         "warmup_windows": [50.0, 90.0]},
        {"variant": "nextn", "concurrency": 1, "repeat": 0, "warmup_s": 121.0, "warmup_end": "out_of_time",
         "warmup_windows": [1.0, 1.0]},
        {"variant": "nextn", "concurrency": 1, "repeat": 1, "warmup_s": 122.5, "warmup_end": "out_of_time",
         "warmup_windows": [1.0, 1.0]},
    ]
    # the order decides; without one, the dict's
    assert [row["variant"] for row in _steady.unsteady_levels(RESULTS, order=["nextn", "base"])] == ["nextn", "nextn", "base"]
    assert len(_steady.unsteady_levels(RESULTS)) == 3


def test_only_the_levels_a_comparison_uses_when_asked():
    assert [(r["variant"], r["concurrency"]) for r in _steady.unsteady_levels(RESULTS, concurrencies=[8])] == [("base", 8)]
    assert _steady.unsteady_levels(RESULTS, concurrencies=[32]) == []


def test_nothing_to_say_about_steady_levels_or_bad_input():
    assert _steady.unsteady_levels({"a": {"repeats": [[level(1), level(8)]]}}) == []
    assert _steady.unsteady_levels({"a": [[level(1, steady=False)]]})[0]["variant"] == "a"  # a bare list of repeats
    assert _steady.unsteady_levels(None) == [] and _steady.unsteady_levels({"a": {"repeats": "x"}}) == []
    assert _steady.unsteady_levels({"a": {"repeats": [["junk", {"no": "concurrency"}]]}}) == []
    assert _steady.lines([]) == [] and _steady.lines(None) == []


def test_the_warning_lines_name_variant_level_and_repeats():
    rows = _steady.unsteady_levels(RESULTS, order=["base", "nextn"])
    rows.append({"variant": "other", "concurrency": 4, "repeat": 0, "warmup_s": 0.4, "warmup_end": "nothing_completed",
                 "warmup_windows": [None]})
    got = _steady.lines(rows, host="gpu-1")
    assert got == [
        "compare gpu-1: WARNING base at c=8 was measured before the server was steady (repeat 1 not steady after "
        "120.3 s of warm-up): its figures there may be a cold server's; raise warmup_max_s or warmup_tolerance",
        "compare gpu-1: WARNING nextn at c=1 was measured before the server was steady (repeat 0 not steady after "
        "121.0 s of warm-up; repeat 1 not steady after 122.5 s of warm-up): its figures there may be a cold "
        "server's; raise warmup_max_s or warmup_tolerance",
        "compare gpu-1: WARNING other at c=4 was measured before the server was steady (repeat 0 a warm-up window "
        "completed no request): its figures there may be a cold server's",
    ]
    assert _steady.lines(rows[:1])[0].startswith("WARNING base at c=8 ")  # no host, no prefix
    assert "? s of warm-up" in _steady.lines([dict(rows[0], warmup_s=None)])[0]
