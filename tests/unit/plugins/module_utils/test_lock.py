# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the instance lock (_lock): an flock on <state_dir>/<name>.lock that names its holder, a
check-mode shared lock that creates and writes nothing, a joiner that stops waiting, held(), and a holder
that dies (or a child that inherited the lock and ends) releasing it. Real files, real processes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _lock


COLLECTIONS = next(p for p in sys.path if os.path.isdir(os.path.join(p, "ansible_collections", "inferops")))


class FakeTime(object):
    """clock() and sleep(s) of a wait that takes no real time; sleeps records each sleep."""

    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


# -- moved from test_switch.py ----------------------------------------------------------------------

def test_lock_names_its_holder_and_is_released_when_the_holder_dies(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, %r)\n"
        "from ansible_collections.inferops.serving.plugins.module_utils import _lock\n"
        "_lock.InstanceLock(%r, 'x').acquire('switch to nextn (sha256:abc)', 1)\n"
        "print('held', flush=True); time.sleep(60)") % (COLLECTIONS, str(tmp_path))],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        lock = _lock.InstanceLock(str(tmp_path), "x")
        began = time.monotonic()
        with pytest.raises(_lock.Busy) as busy:
            lock.acquire("switch to baseline", 0.5)
        assert time.monotonic() - began >= 0.5
        assert busy.value.holder["pid"] == holder.pid
        text = str(busy.value)
        assert "pid %d (switch to nextn (sha256:abc), since " % holder.pid in text
        assert "waited lock_timeout=0.5s" in text and str(tmp_path / "x.lock") in text
        # a joiner stops waiting at once when on_wait says so
        assert lock.acquire("switch to nextn", 30, on_wait=lambda h: h.get("pid") == holder.pid) is None
    finally:
        holder.kill()  # kill -9: the kernel releases the flock
        holder.wait()
    lock = _lock.InstanceLock(str(tmp_path), "x")
    assert lock.acquire("switch to baseline", 1) is lock
    assert lock.holder()["pid"] == os.getpid() and lock.holder()["what"] == "switch to baseline"
    lock.release()


def test_check_mode_lock_creates_nothing(tmp_path):
    state = tmp_path / "state"
    lock = _lock.InstanceLock(str(state), "x")
    assert lock.acquire("plan", 1, create=False) is lock
    lock.release()
    assert not state.exists()


# -- naming the lock and its holder -----------------------------------------------------------------

def test_the_lock_file_is_named_after_the_instance():
    assert _lock.path_of("/var/lib/inferops", "sv") == "/var/lib/inferops/sv.lock"
    assert _lock.InstanceLock("/var/lib/inferops", "sv").path == "/var/lib/inferops/sv.lock"


def test_describe_says_who_what_and_since_when():
    assert _lock.describe({}) == "an unknown process"
    assert _lock.describe(None) == "an unknown process"
    assert _lock.describe({"pid": 4242, "what": "switch to nextn"}) == "pid 4242 (switch to nextn)"
    assert _lock.describe({"what": "stop"}) == "pid ? (stop)"
    since = time.time() - 73
    text = _lock.describe({"pid": 7, "what": "start", "since": since})
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(since))
    assert text in ("pid 7 (start, since %s, 73s ago)" % stamp, "pid 7 (start, since %s, 74s ago)" % stamp)
    # a clock that went back never says a negative age
    assert _lock.describe({"pid": 7, "what": "start", "since": time.time() + 3600}).endswith(", 0s ago)")


# -- acquire, note, holder, release -----------------------------------------------------------------

def test_acquire_creates_the_directory_and_a_private_lock_file_naming_this_process(tmp_path):
    state = tmp_path / "deep" / "state"
    lock = _lock.InstanceLock(str(state), "sv")
    before = time.time()
    assert lock.acquire("switch to nextn", 1) is lock
    try:
        path = state / "sv.lock"
        assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o600
        record = json.loads(path.read_text())
        assert set(record) == {"pid", "what", "since"}
        assert record["pid"] == os.getpid() and record["what"] == "switch to nextn"
        assert before <= record["since"] <= time.time()
        assert lock.holder() == record
        assert _lock.held(str(state), "sv") is True
    finally:
        lock.release()
    assert lock.fd is None
    assert _lock.held(str(state), "sv") is False
    assert path.exists()  # the file stays: only the flock goes


def test_note_rewrites_the_holder_in_place(tmp_path):
    lock = _lock.InstanceLock(str(tmp_path), "sv").acquire("switch to a much longer description of the change", 1)
    try:
        lock.note("handed over", pid=31337)
        text = (tmp_path / "sv.lock").read_text()
        assert text.endswith("}\n") and text.count("\n") == 1  # truncated: nothing of the longer record remains
        assert lock.holder()["pid"] == 31337 and lock.holder()["what"] == "handed over"
        lock.note("back")
        assert lock.holder()["pid"] == os.getpid() and lock.holder()["what"] == "back"
    finally:
        lock.release()


@pytest.mark.parametrize("content", ["", "not json", "[1, 2]", "\"a string\""])
def test_an_unreadable_holder_record_reads_as_unknown(tmp_path, content):
    (tmp_path / "sv.lock").write_text(content)
    assert _lock.InstanceLock(str(tmp_path), "sv").holder() == {}


def test_no_lock_file_has_no_holder_and_is_not_held(tmp_path):
    assert _lock.InstanceLock(str(tmp_path), "sv").holder() == {}
    assert _lock.held(str(tmp_path), "sv") is False
    assert _lock.held(str(tmp_path / "absent"), "sv") is False
    assert not (tmp_path / "sv.lock").exists()  # held() creates nothing


def test_release_and_close_twice_are_harmless(tmp_path):
    lock = _lock.InstanceLock(str(tmp_path), "sv").acquire("x", 1)
    lock.release()
    lock.release()
    lock.close()
    assert lock.fd is None
    again = _lock.InstanceLock(str(tmp_path), "sv")
    assert again.acquire("y", 0) is again  # free at once
    again.release()


# -- Busy, with the holder named ---------------------------------------------------------------------

def test_a_second_lock_is_busy_naming_the_holder_even_in_the_same_process(tmp_path):
    # flock is per open file, not per process: the second InstanceLock opens its own
    first = _lock.InstanceLock(str(tmp_path), "sv").acquire("switch to nextn", 1)
    try:
        second = _lock.InstanceLock(str(tmp_path), "sv")
        with pytest.raises(_lock.Busy) as busy:
            second.acquire("switch to baseline", 0)
        assert isinstance(busy.value, RuntimeError)
        assert busy.value.holder["pid"] == os.getpid() and busy.value.holder["what"] == "switch to nextn"
        assert str(busy.value).startswith("another run is changing this instance: pid %d (switch to nextn, since "
                                          % os.getpid())
        assert str(busy.value).endswith("holds %s; waited lock_timeout=0s" % first.path)
        assert second.fd is None  # the waiter closed its descriptor
        assert first.holder()["what"] == "switch to nextn"  # the waiter wrote nothing
    finally:
        first.release()


def test_busy_polls_every_200ms_until_the_timeout_and_asks_on_wait_each_time(tmp_path):
    first = _lock.InstanceLock(str(tmp_path), "sv").acquire("switch to nextn", 1)
    fake = FakeTime()
    seen = []
    try:
        with pytest.raises(_lock.Busy) as busy:
            _lock.InstanceLock(str(tmp_path), "sv").acquire(
                "switch to baseline", 1.0, on_wait=lambda holder: seen.append(holder) and False,
                sleep=fake.sleep, clock=fake.clock)
    finally:
        first.release()
    assert fake.sleeps == [0.2] * 5 and fake.now == pytest.approx(101.0)
    assert len(seen) == 6 and all(h["what"] == "switch to nextn" and h["pid"] == os.getpid() for h in seen)
    assert "waited lock_timeout=1.0s" in str(busy.value)


def test_a_lock_freed_during_the_wait_is_taken(tmp_path):
    first = _lock.InstanceLock(str(tmp_path), "sv").acquire("switch to nextn", 1)
    fake = FakeTime()

    def sleep(seconds):
        fake.sleep(seconds)
        if len(fake.sleeps) == 2:
            first.release()

    second = _lock.InstanceLock(str(tmp_path), "sv")
    assert second.acquire("switch to baseline", 10, sleep=sleep, clock=fake.clock) is second
    try:
        assert len(fake.sleeps) == 2
        assert second.holder()["what"] == "switch to baseline"
    finally:
        second.release()


def test_on_wait_joins_the_holder_and_acquire_returns_none(tmp_path):
    first = _lock.InstanceLock(str(tmp_path), "sv").acquire("switch to nextn", 1)
    try:
        joiner = _lock.InstanceLock(str(tmp_path), "sv")
        seen = []
        fake = FakeTime()
        assert joiner.acquire("switch to nextn", 30, on_wait=lambda h: seen.append(h) or True,
                              sleep=fake.sleep, clock=fake.clock) is None
        assert [h["what"] for h in seen] == ["switch to nextn"] and fake.sleeps == []
        assert joiner.fd is None  # it closed its descriptor and holds nothing
        assert _lock.held(str(tmp_path), "sv") is True  # the holder still does
        assert first.holder()["what"] == "switch to nextn"
    finally:
        first.release()


# -- check mode: a shared lock that creates and writes nothing ----------------------------------------

def test_check_mode_without_a_lock_file_holds_nothing(tmp_path):
    lock = _lock.InstanceLock(str(tmp_path), "sv")
    assert lock.acquire("plan", 1, create=False) is lock
    assert lock.fd is None and not (tmp_path / "sv.lock").exists()


def test_check_mode_takes_a_shared_lock_and_writes_nothing(tmp_path):
    path = tmp_path / "sv.lock"
    path.write_text(json.dumps({"pid": 1, "what": "an old switch", "since": 5.0}) + "\n")
    before = path.read_bytes()
    plan = _lock.InstanceLock(str(tmp_path), "sv")
    assert plan.acquire("plan", 1, create=False) is plan
    try:
        assert plan.shared is True and plan.fd is not None
        assert path.read_bytes() == before  # the last holder's record is left as it was
        other = _lock.InstanceLock(str(tmp_path), "sv")
        assert other.acquire("another plan", 0, create=False) is other  # shared locks coexist
        other.release()
        assert _lock.held(str(tmp_path), "sv") is False  # a plan is not a change under way
        with pytest.raises(_lock.Busy):
            _lock.InstanceLock(str(tmp_path), "sv").acquire("switch", 0)  # but a change waits for it
    finally:
        plan.release()
    change = _lock.InstanceLock(str(tmp_path), "sv")
    assert change.acquire("switch", 0) is change
    change.release()


def test_check_mode_waits_for_a_change_under_way_like_a_change_does(tmp_path):
    first = _lock.InstanceLock(str(tmp_path), "sv").acquire("switch to nextn", 1)
    try:
        written = (tmp_path / "sv.lock").read_bytes()
        with pytest.raises(_lock.Busy) as busy:
            _lock.InstanceLock(str(tmp_path), "sv").acquire("plan", 0, create=False)
        assert busy.value.holder["what"] == "switch to nextn"
        assert (tmp_path / "sv.lock").read_bytes() == written
        joined = _lock.InstanceLock(str(tmp_path), "sv").acquire("plan", 5, on_wait=lambda h: True, create=False)
        assert joined is None
    finally:
        first.release()


# -- held() and holders that end ---------------------------------------------------------------------

def test_held_never_holds_up_the_holder(tmp_path):
    lock = _lock.InstanceLock(str(tmp_path), "sv").acquire("switch", 1)
    try:
        assert _lock.held(str(tmp_path), "sv") is True
        assert _lock.held(str(tmp_path), "sv") is True  # its shared try was released: still the holder's
        lock.note("still here")
        assert lock.holder()["what"] == "still here"
    finally:
        lock.release()
    assert _lock.held(str(tmp_path), "sv") is False
    assert _lock.held(str(tmp_path), "other") is False  # another instance's lock is its own


def test_a_holder_killed_with_sigkill_releases_the_lock(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, %r)\n"
        "from ansible_collections.inferops.serving.plugins.module_utils import _lock\n"
        "_lock.InstanceLock(%r, 'sv').acquire('switch to nextn', 1)\n"
        "print('held', flush=True); time.sleep(60)") % (COLLECTIONS, str(tmp_path))],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert _lock.held(str(tmp_path), "sv") is True
        assert _lock.InstanceLock(str(tmp_path), "sv").holder()["pid"] == holder.pid
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert holder.returncode == -9
    assert _lock.held(str(tmp_path), "sv") is False
    # the dead holder's record is still there to read, but the lock is free
    lock = _lock.InstanceLock(str(tmp_path), "sv")
    assert lock.holder()["pid"] == holder.pid
    assert lock.acquire("switch to baseline", 0) is lock
    lock.release()


def test_a_child_that_inherited_the_lock_keeps_it_until_it_ends(tmp_path):
    # how a switch hands its lock to its detached transaction: the same open file, closed here
    lock = _lock.InstanceLock(str(tmp_path), "sv").acquire("switch to nextn", 1)
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; print('up', flush=True); time.sleep(60)"],
                             pass_fds=(lock.fd,), stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "up"
        lock.note("switch to nextn (transaction)", pid=child.pid)
        lock.close()  # not release(): an unlock would free it for the child too
        assert lock.fd is None
        assert _lock.held(str(tmp_path), "sv") is True
        with pytest.raises(_lock.Busy) as busy:
            _lock.InstanceLock(str(tmp_path), "sv").acquire("switch to baseline", 0)
        assert busy.value.holder["pid"] == child.pid
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert _lock.held(str(tmp_path), "sv") is False


def test_busy_names_the_real_holder_when_the_lock_file_names_a_dead_one(tmp_path):
    """A foreign flock holder, while the file still names the earlier holder, a process that is gone: the
    message says so and names the process that has the file open (found by inode under /proc/*/fd)."""
    path = tmp_path / "x.lock"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path.write_text(json.dumps({"pid": dead.pid, "what": "switch to old (sha256:1)", "since": time.time() - 60}))
    code = ("import fcntl, sys, time; f = open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(60)")
    foreign = subprocess.Popen([sys.executable, "-c", code, str(path), "foreign-holder"], stdout=subprocess.PIPE,
                               text=True)
    try:
        assert foreign.stdout.readline().strip() == "held"
        with pytest.raises(_lock.Busy) as busy:
            _lock.InstanceLock(str(tmp_path), "x").acquire("switch to new", 0.3)
        text = str(busy.value)
        assert "%s is held by pid %d (%s -c import fcntl" % (path, foreign.pid, sys.executable) in text
        assert "the lock file names pid %d (switch to old (sha256:1)" % dead.pid in text and "which is gone" in text
    finally:
        foreign.kill()
        foreign.wait()
