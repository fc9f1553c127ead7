# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""_recover: the record of what serves rebuilt from the processes when the state file is lost. Real engines
(a sleeping Python) started by the real process supervisor and its watchdog, real markers and launch files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from launch_params import params as launch_params
from run_command import run_command

from ansible_collections.inferops.serving.plugins.module_utils import (
    _engines, _fingerprint, _marker, _procs, _recover, _supervisor, _switch)

SLEEPER = [sys.executable, "-c", "import time, sys; time.sleep(120)"]
PARENT = [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(%r); time.sleep(120)" % (SLEEPER,)]


def version_of(adapter, params):
    return adapter.version(params, run_command)


@pytest.fixture
def instance(tmp_path):
    """An instance's supervisor, and a way to start its engine as inference_server does (marker v2 with the
    launch's fingerprint, through the watchdog); everything it started is killed after."""
    sup = _supervisor.ProcessSupervisor("sv", str(tmp_path / "state"), str(tmp_path / "log"), run=run_command)
    started = []

    def start(command=None, api_key=None, env=None, variant="fast", marker_version=2):
        params = launch_params(name="sv", engine="command", command=command or SLEEPER, api_key=api_key,
                               env=env or {}, variant=variant, state_dir=sup.state_dir, log_dir=sup.log_dir,
                               port=18000)
        launch = _engines.adapter("command").build(params)
        if marker_version == 1:  # an engine an earlier version started: NAME@HASH, no fingerprint
            old = sup.marker_env
            sup.marker_env = lambda fingerprint=None: _marker.make("sv", sup.state_dir).identity
            try:
                info = sup.start(launch.argv, launch.env, launch.fingerprint)
            finally:
                sup.marker_env = old
        else:
            info = sup.start(launch.argv, launch.env, launch.fingerprint)
        started.append(info["pgid"])
        deadline = time.monotonic() + 5
        while not sup.carriers() and time.monotonic() < deadline:
            time.sleep(0.02)
        return params, launch, info

    yield sup, start
    for pgid in started:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


def test_nothing_runs_nothing_is_rebuilt(instance):
    sup, dummy = instance
    assert _recover.rebuild(sup, None, version_of, "missing") == (None, None)


def test_the_launch_file_confirms_the_engine_variant_and_secrets(instance):
    sup, start = instance
    params, launch, info = start(command=SLEEPER + ["--api-key", "s3cret"], api_key="s3cret", env={"HF_TOKEN": "hf_x"})
    record, note = _recover.rebuild(sup, {"current": params}, version_of, "corrupt")
    assert note == "state file was corrupt: rebuilt from pid %d (variant fast)" % info["pid"]
    assert (record["pid"], record["pgid"], record["starttime"]) == (info["pid"], info["pgid"], info["starttime"])
    assert (record["watchdog"], record["watchdog_starttime"]) == (info["watchdog"], info["watchdog_starttime"])
    assert record["fingerprint"] == launch.fingerprint and record["argv"] == launch.public_argv
    assert record["variant"] == "fast" and record["recovered"] == "corrupt" and record["ready_s"] is None
    assert record["url"] == "http://127.0.0.1:18000"
    assert record["secrets_digest"] == _fingerprint.secrets_digest(record["secrets_salt"], _switch.secrets_of(params))
    assert record["secrets_digest"] != _fingerprint.secrets_digest(
        record["secrets_salt"], _switch.secrets_of(dict(params, api_key="other")))
    assert sup.alive(record)  # the supervisor knows it as its own engine again
    assert abs(record["started_at"] - time.time()) < 30


def test_a_relabel_in_the_launch_file_wins(instance):
    sup, start = instance
    params, dummy, info = start()
    record, note = _recover.rebuild(sup, {"current": dict(params, variant="renamed")}, version_of, "missing")
    assert record["variant"] == "renamed" and note.endswith("(variant renamed)")
    assert record["pid"] == info["pid"]


def test_a_launch_file_of_another_launch_confirms_nothing(instance):
    sup, start = instance
    params, dummy, info = start()
    other = dict(params, command=SLEEPER + ["other"])
    record, note = _recover.rebuild(sup, {"current": other}, version_of, "missing")
    assert note == "state file was missing: rebuilt from pid %d (variant unknown: sv.launch.json describes another launch)" \
        % info["pid"]
    assert record["variant"] is None and "secrets_digest" not in record and record["argv"] is None
    assert record["pid"] == info["pid"] and record["fingerprint"]  # the marker's fingerprint still says what runs
    record, note = _recover.rebuild(sup, None, version_of, "missing")
    assert note.endswith("(variant unknown: sv.launch.json is gone)") and record["pid"] == info["pid"]


def test_an_engine_marked_by_an_earlier_version_is_confirmed_by_its_command_line(instance):
    sup, start = instance
    params, launch, info = start(marker_version=1)
    assert _marker.of_process(info["pid"]).fingerprint is None
    record, note = _recover.rebuild(sup, {"current": params}, version_of, "missing")
    assert record["fingerprint"] == launch.fingerprint and record["variant"] == "fast"
    record, note = _recover.rebuild(sup, {"current": dict(params, command=SLEEPER + ["x"])}, version_of, "missing")
    assert record["variant"] is None and record["fingerprint"] is None


def test_the_engine_is_the_group_leader_not_its_children(instance):
    sup, start = instance
    dummy, dummy2, info = start(command=PARENT)
    deadline = time.monotonic() + 5
    while len(sup.carriers()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    carriers = sup.carriers()
    assert len(carriers) == 2 and info["pid"] in carriers
    assert _recover.main_engine(carriers).pid == info["pid"]


def test_a_process_that_is_not_a_watchdog_is_not_taken_for_one(tmp_path):
    """An engine whose watchdog is gone (re-parented) has no watchdog in its rebuilt record."""
    marker = _marker.make("sv", str(tmp_path))
    proc = subprocess.Popen(SLEEPER, env=dict(os.environ, INFEROPS_INSTANCE=marker.value()), start_new_session=True)
    try:
        time.sleep(0.2)
        sup = _supervisor.ProcessSupervisor("sv", str(tmp_path), str(tmp_path))
        record, note = _recover.rebuild(sup, None, version_of, "missing")
        assert record["pid"] == proc.pid and "watchdog" not in record
        assert _recover.watchdog_of(_procs.read_proc(proc.pid)) == (None, None)
        assert note.startswith("state file was missing: rebuilt from pid %d" % proc.pid)
    finally:
        proc.kill()
        proc.wait()
