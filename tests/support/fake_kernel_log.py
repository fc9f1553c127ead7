# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-ins for `journalctl` and `dmesg` at the hardware boundary (tests only, never in plugins/): the kernel
log of a fake host, from the JSON state file named by $FAKE_NVIDIA_SMI_STATE (the fake nvidia-smi's).

State keys: "kernel_log": [{"at": epoch seconds, "line": "NVRM: Xid (PCI:0000:3a:00): 79, ..."}],
"journal": "ok" | "denied" | "missing", "dmesg": "ok" | "denied".

The shapes are the real tools': `journalctl -k -o short-unix` prints "1733430000.123456 host kernel: MESSAGE"
(systemd 252, journalctl(1), --output=short-unix); without the rights to the system journal it prints nothing
and says on stderr "No journal files were opened due to insufficient permissions."; `dmesg` prints
"[  123.456789] MESSAGE" (seconds since boot; util-linux 2.38 dmesg(1)), or with kernel.dmesg_restrict=1
"dmesg: read kernel buffer failed: Operation not permitted" and exit 1. The Xid lines are the driver's
(NVIDIA, "Xid Errors", docs.nvidia.com/deploy/xid-errors/index.html):
"NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
"""

import json
import os
import sys

import launcher


def _btime():
    with open("/proc/stat") as handle:
        for line in handle:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0


def install(bindir):
    """Write executable `journalctl` and `dmesg` into bindir that run this file (tests/support/launcher.py)."""
    for name in ("journalctl", "dmesg"):
        launcher.install(bindir, name, __file__)


def main(name, argv):
    path = os.environ.get("FAKE_NVIDIA_SMI_STATE")
    state = {}
    if path and os.path.exists(path):
        with open(path) as handle:
            state = json.load(handle)
    entries = state.get("kernel_log", [])
    if name == "journalctl":
        mode = state.get("journal", "ok")
        if mode == "missing":
            sys.stderr.write("journalctl: command not found\n")
            return 127
        if mode == "denied":
            sys.stderr.write("No journal files were opened due to insufficient permissions.\n")
            return 0
        since = 0.0
        if "--since" in argv:
            since = float(argv[argv.index("--since") + 1].lstrip("@"))
        for entry in entries:
            if entry["at"] >= since:
                print("%.6f fakehost kernel: %s" % (entry["at"], entry["line"]))
        return 0
    if state.get("dmesg", "ok") == "denied":
        sys.stderr.write("dmesg: read kernel buffer failed: Operation not permitted\n")
        return 1
    boot = _btime()
    for entry in entries:
        print("[%12.6f] %s" % (entry["at"] - boot, entry["line"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(os.path.basename(sys.argv[0]), sys.argv[1:]))
