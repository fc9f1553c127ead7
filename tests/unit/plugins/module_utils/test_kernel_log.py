# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _kernel_log: the OOM killer's lines as the kernel writes them (mm/oom_kill.c), through
`journalctl -k -o short-monotonic` and `dmesg`, and which victim is the engine that ended."""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.module_utils import _kernel_log

# journalctl -k -b -o short-monotonic (systemd 252), a host OOM on a 24 GB machine: the whole report as it comes
JOURNAL = "".join(line + "\n" for line in (
    "[ 8120.101412] demo kernel: python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, "
    "oom_score_adj=0",
    "[ 8120.101455] demo kernel: CPU: 1 PID: 5120 Comm: python3 Not tainted 6.1.0-18-amd64 #1  Debian 6.1.76-1",
    "[ 8120.101990] demo kernel: Mem-Info:",
    "[ 8120.102310] demo kernel: [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
    "[ 8120.102350] demo kernel: [   4242]     0  4242  3723828  3393554 28000256        0             0 transformers",
    "[ 8120.102401] demo kernel: oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
    "task_memcg=/user.slice/user-0.slice/session-3.scope,task=transformers,pid=4242,uid=0",
    "[ 8120.102468] demo kernel: Out of memory: Killed process 4242 (transformers) total-vm:14895312kB, anon-rss:13574219kB, "
    "file-rss:4096kB, shmem-rss:0kB, UID:0 pgtables:27344kB oom_score_adj:0",
    "[ 8120.391071] demo kernel: oom_reaper: reaped process 4242 (transformers), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
))

# dmesg (util-linux 2.38), a memory cgroup's limit
DMESG = ("[ 9001.000001] Memory cgroup out of memory: Killed process 5300 (python3) total-vm:9015312kB, anon-rss:8388608kB, "
         "file-rss:1024kB, shmem-rss:0kB, UID:1000 pgtables:17000kB oom_score_adj:0\n"
         "[ 9001.200000] oom_reaper: reaped process 5300 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB\n")

# a kernel before 5.0: the kill on its own line after "Out of memory: Kill process ... or sacrifice child"
OLD = """[  612.100000] Out of memory: Kill process 777 (python) score 901 or sacrifice child
[  612.100100] Killed process 777 (python) total-vm:2097152kB, anon-rss:1048576kB, file-rss:0kB, shmem-rss:0kB
"""


def test_the_oom_kill_line_is_read_and_the_reaper_line_is_not():
    kills = _kernel_log.oom_kills(JOURNAL)
    assert kills == [{"pid": 4242, "comm": "transformers", "anon_rss_kib": 13574219, "at": 8120.102468, "cgroup": False}]


def test_a_cgroup_kill_and_an_old_kernels_line():
    assert _kernel_log.oom_kills(DMESG) == [
        {"pid": 5300, "comm": "python3", "anon_rss_kib": 8388608, "at": 9001.000001, "cgroup": True}]
    assert _kernel_log.oom_kills(OLD) == [
        {"pid": 777, "comm": "python", "anon_rss_kib": 1048576, "at": 612.1001, "cgroup": False}]


def test_a_line_without_the_monotonic_stamp():
    line = "Dec 05 21:40:01 demo kernel: Out of memory: Killed process 4242 (transformers) total-vm:1kB, anon-rss:2048kB, file-rss:0kB"
    assert _kernel_log.oom_kills(line) == [{"pid": 4242, "comm": "transformers", "anon_rss_kib": 2048, "at": None, "cgroup": False}]


def test_described_as_the_issue_tells_it():
    kill = _kernel_log.oom_kills(JOURNAL)[0]
    assert _kernel_log.describe(kill) == "killed by the kernel's OOM killer (anon-rss 13.9 GB)"
    assert _kernel_log.describe(_kernel_log.oom_kills(DMESG)[0]) == (
        "killed by the kernel's OOM killer (its memory cgroup's limit) (anon-rss 8.6 GB)")
    assert _kernel_log.size_text(2048) == "2.1 MB" and _kernel_log.size_text(12) == "12 kB"


def test_the_victim_is_that_pid_killed_after_it_started():
    assert _kernel_log.victim(JOURNAL, 4242)["anon_rss_kib"] == 13574219
    assert _kernel_log.victim(JOURNAL, 4242, started_s=8000.0)["pid"] == 4242
    assert _kernel_log.victim(JOURNAL, 4242, started_s=8200.0) is None  # an earlier process with that pid
    assert _kernel_log.victim(JOURNAL, 5120) is None  # the one that invoked the killer is not its victim
    assert _kernel_log.victim("", 4242) is None


def test_oom_of_reads_journalctl_then_dmesg():
    calls = []

    def run(argv, **kw):
        calls.append(argv[0])
        if argv[0] == "journalctl":
            return 1, "", "No journal files were found."
        return 0, DMESG, ""
    assert _kernel_log.oom_of(5300, run)["cgroup"] is True
    assert calls == ["journalctl", "dmesg"]

    def nothing(argv, **kw):
        raise OSError(2, "No such file or directory")
    assert _kernel_log.oom_of(5300, nothing) is None


def test_started_s_from_clock_ticks():
    assert _kernel_log.started_s(None) is None
    assert _kernel_log.started_s(100 * 300) > 0
