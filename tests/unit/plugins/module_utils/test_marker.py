# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The instance marker: its versions, parsed in one place, and the processes that carry it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _marker, _supervisor

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_the_current_version_round_trips_with_a_state_dir_and_fingerprint_of_any_text(tmp_path):
    odd = str(tmp_path / "state; v=9 dir=%20 @x")
    marker = _marker.make("qwen", odd, "sha256:0123abcd")
    parsed = _marker.parse(marker.value())
    assert (parsed.name, parsed.version, parsed.state_dir, parsed.fingerprint) == ("qwen", 2, odd, "sha256:0123abcd")
    assert parsed.identity == marker.identity == _marker.identity("qwen", odd) == _supervisor.marker_value("qwen", odd)
    assert marker.value().startswith(marker.identity + ";v=2;")


def test_version_1_is_the_identity_alone_and_matches_the_same_instance():
    v2 = _marker.make("a", "/var/lib/inferops/serving")
    v1 = _marker.parse(v2.identity)  # what engines started before version 2 carry
    assert (v1.version, v1.state_dir, v1.fingerprint) == (1, None, None)
    assert v1.identity == v2.identity
    assert _marker.parse(_marker.make("a", "/other").value()).identity != v2.identity
    assert _marker.parse(_marker.make("b", "/var/lib/inferops/serving").value()).identity != v2.identity


def test_a_later_version_keeps_its_identity_and_unknown_fields_are_ignored():
    head = _marker.identity("a", "/s")
    parsed = _marker.parse(head + ";v=7;dir=/s;gpus=0,1;fp=x")
    assert (parsed.identity, parsed.version, parsed.state_dir, parsed.fingerprint) == (head, 7, "/s", "x")


def test_a_state_dir_that_is_not_the_hashed_one_is_not_trusted():
    parsed = _marker.parse(_marker.identity("a", "/s") + ";v=2;dir=/elsewhere")
    assert parsed.identity == _marker.identity("a", "/s") and parsed.state_dir is None


@pytest.mark.parametrize("value", [None, "", "a", "@0123456789ab", "a@xyz", "a@0123456789abc", "a@0123456789AB",
                                   "a@0123456789ab;v=two"])
def test_what_is_not_a_marker_parses_to_none(value):
    assert _marker.parse(value) is None


def _spawn(value, cwd):
    proc = subprocess.Popen(SLEEP, env=dict(os.environ, INFEROPS_INSTANCE=value), cwd=cwd)
    time.sleep(0.1)
    return proc


def test_of_process_finds_a_version_1_state_dir_from_the_engines_working_directory(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    ident = _marker.identity("a", str(state))
    inside, outside = _spawn(ident, str(state)), _spawn(ident, str(tmp_path))
    try:
        assert _marker.of_process(inside.pid).state_dir == str(state)
        assert _marker.of_process(outside.pid).state_dir is None  # the hash does not vouch for that directory
    finally:
        for proc in (inside, outside):
            proc.kill()
            proc.wait()


def test_carriers_are_the_instances_processes_of_either_version_and_no_others(tmp_path):
    state = str(tmp_path)
    procs = {
        "v1": _spawn(_marker.identity("a", state), state),
        "v2": _spawn(_marker.make("a", state, "sha256:1").value(), state),
        "other name": _spawn(_marker.make("b", state).value(), state),
        "other dir": _spawn(_marker.make("a", state + "/x").value(), state),
    }
    try:
        found = _marker.carriers(_marker.identity("a", state))
        assert sorted(found) == sorted([procs["v1"].pid, procs["v2"].pid])
        assert _marker.carriers(_marker.identity("a", state), skip={procs["v1"].pid}).keys() == {procs["v2"].pid}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
