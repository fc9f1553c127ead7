# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the preflight's memory check (_preflight.memory_problem): MemAvailable from a meminfo in the
kernel's format, plus the resident memory of the processes the stop would end, against host_memory_mib; and
the same against this host's real /proc with a real child process."""

from __future__ import annotations

import os
import subprocess
import sys

from ansible_collections.inferops.serving.plugins.module_utils import _preflight, _procs

# the first lines of a real /proc/meminfo (Linux 6.x), HugePages_* counts without a unit
MEMINFO = """MemTotal:       24554380 kB
MemFree:         1204056 kB
MemAvailable:    %d kB
Buffers:          212340 kB
Cached:          9921316 kB
HugePages_Total:       0
HugePages_Free:        0
Hugepagesize:       2048 kB
"""

STATUS = """Name:\tpython3
State:\tS (sleeping)
Pid:\t%d
VmPeak:\t14895312 kB
VmSize:\t14895312 kB
VmHWM:\t14300000 kB
VmRSS:\t%d kB
RssAnon:\t14200000 kB
Threads:\t9
"""


def fake_proc(tmp_path, available_kib, rss_kib_by_pid):
    root = tmp_path / "proc"
    root.mkdir()
    (root / "meminfo").write_text(MEMINFO % available_kib)
    for pid, rss in rss_kib_by_pid.items():
        (root / str(pid)).mkdir()
        (root / str(pid) / "status").write_text(STATUS % (pid, rss))
    return str(root)


def params(need, name="r0", variant="batched"):
    return {"name": name, "variant": variant, "engine": "transformers", "host_memory_mib": need}


def test_meminfo_reads_kib_fields_as_mib_and_skips_counts(tmp_path):
    root = fake_proc(tmp_path, 8 * 1024 * 1024, {})
    found = _preflight.meminfo_mib(root)
    assert found["MemAvailable"] == 8192
    assert found["MemTotal"] == 23978
    assert "HugePages_Total" not in found
    assert _preflight.meminfo_mib(str(tmp_path / "nowhere")) == {}


def test_a_start_that_fits_what_is_available_passes(tmp_path):
    root = fake_proc(tmp_path, 8192 * 1024, {})
    assert _preflight.memory_problem(params(8192), {}, root) is None
    assert _preflight.memory_problem(params(None), {}, root) is None  # unset: not checked
    assert _preflight.memory_problem(params(0), {}, root) is None


def test_what_the_stop_frees_counts_towards_what_is_available(tmp_path):
    # 4 GiB available, the old engine's two processes hold 10 GiB + 2 GiB: a 14000 MiB variant fits
    root = fake_proc(tmp_path, 4096 * 1024, {4242: 10240 * 1024, 4250: 2048 * 1024})
    spared = {4242: 1, 4250: 2}
    assert _preflight.memory_problem(params(16384), spared, root) is None
    why = _preflight.memory_problem(params(16385), spared, root)
    assert why.startswith("host memory: variant batched needs host_memory_mib 16385 MiB, the host has 16384 MiB available")
    assert "MemAvailable 4096 MiB plus 12288 MiB resident in the 2 process(es) of instance r0" in why


def test_a_start_that_does_not_fit_names_needed_and_available(tmp_path):
    root = fake_proc(tmp_path, 3000 * 1024, {})
    why = _preflight.memory_problem(params(13900), {}, root)
    assert "needs host_memory_mib 13900 MiB" in why and "the host has 3000 MiB available" in why
    assert "plus 0 MiB resident in the 0 process(es)" in why


def test_a_pid_gone_since_counts_nothing(tmp_path):
    root = fake_proc(tmp_path, 1024 * 1024, {})
    assert _preflight.rss_mib([999999], root) == 0


def test_a_meminfo_without_memavailable_is_not_judged(tmp_path):
    root = tmp_path / "proc"
    root.mkdir()
    (root / "meminfo").write_text("MemTotal:       24554380 kB\nMemFree:         1204056 kB\n")
    assert _preflight.memory_problem(params(10 ** 9), {}, str(root)) is None


def test_check_puts_the_memory_blocker_with_the_others(tmp_path, monkeypatch):
    monkeypatch.setattr(_preflight, "memory_problem", lambda p, spared, root=None: "host memory: x")
    p = {"name": "r0", "state_dir": str(tmp_path / "s"), "log_dir": str(tmp_path / "l"), "host": "127.0.0.1",
         "port": 1, "engine": "command", "model": "m", "flag_check": False}

    class Adapter(object):
        name = "command"

        def launcher(self, dummy):
            return sys.executable

        def help_argv(self, dummy):
            return None
    blockers, dummy, dummy = _preflight.check(p, Adapter(), None, None, None, False, {})
    assert "host memory: x" in blockers


def test_the_real_proc_of_this_host(tmp_path):
    """A real child holding 64 MiB: its VmRSS counts, and a need far beyond the host is refused."""
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; b = bytearray(64 << 20); "
                              "sys.stdout.write('ok\\n'); sys.stdout.flush(); time.sleep(30)"],
                             stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ok\n"
        assert _preflight.rss_mib([child.pid]) >= 64
        available = _preflight.meminfo_mib()["MemAvailable"]
        why = _preflight.memory_problem(params(available + 10 ** 6), {child.pid: 0})
        assert why and "needs host_memory_mib" in why
        assert _preflight.memory_problem(params(1), {child.pid: 0}) is None
        assert _procs.alive(child.pid)  # read, never signalled
    finally:
        child.kill()
        child.wait()
    assert os.path.exists("/proc/meminfo")
