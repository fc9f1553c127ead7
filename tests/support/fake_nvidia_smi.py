# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for `nvidia-smi` at the hardware boundary CI lacks (tests only, never in plugins/).

It answers the CSV query interface the collection uses from a JSON state file named by
$FAKE_NVIDIA_SMI_STATE. Holders are real processes the test starts: a holder is reported (and its
memory counted as used) only while its PID is alive and not a zombie, so a reclaim that really
kills it really frees the fake GPU.

State file:
  {"driver": true,
   "gpus": [{"index": 0, "uuid": "GPU-...", "name": "NVIDIA H200", "memory_total_mib": 143771,
             "memory_used_mib": 0, "ecc_uncorrected_volatile": 0, "retired_pages_pending": "No",
             "mig_mode": "[N/A]", "mig_mode_pending": "[N/A]",
             "remapped_rows_pending": 0, "remapped_rows_failure": 0}],
   "holders": [{"pid": 1234, "gpu": 7, "used_mib": 8192}],
   "invalid_fields": ["remapped_rows.pending"]}
"""

import json
import os
import sys

NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.")


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            stat = handle.read()
    except (IOError, OSError):
        return False
    return stat[stat.rfind(")") + 2:].split()[0] not in ("Z", "X")


def process_name(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return handle.read().split(b"\0")[0].decode() or "?"
    except (IOError, OSError):
        return "?"


class Out(object):
    """Rows as nvidia-smi writes them: fields separated by ", "."""

    @staticmethod
    def writerow(row):
        sys.stdout.write(", ".join(str(v) for v in row) + "\n")


def main(argv):
    path = os.environ.get("FAKE_NVIDIA_SMI_STATE")
    state = {"driver": False}
    if path and os.path.exists(path):
        with open(path) as handle:
            state = json.load(handle)
    if not state.get("driver", True):
        print(NO_DRIVER)
        return 9
    gpus = state.get("gpus", [])
    if not gpus:
        print("No devices were found")
        return 6
    query = fmt = None
    for arg in argv:
        if arg.startswith("--query-"):
            query = arg
        elif arg.startswith("--format="):
            fmt = arg.split("=", 1)[1]
    if query is None or fmt not in ("csv,noheader,nounits", "csv,noheader"):
        sys.stderr.write("fake nvidia-smi only answers --query-*=... --format=csv,noheader[,nounits]\n")
        return 2
    units = fmt == "csv,noheader"  # the manual check of the scenario reads "0 MiB"
    kind, fields = query[2:].split("=", 1)
    fields = fields.split(",")
    for field in fields:
        if field in state.get("invalid_fields", []):
            print('Field "%s" is not a valid field to query.' % field)
            return 2

    live = [h for h in state.get("holders", []) if alive(int(h["pid"]))]
    by_index = dict((g["index"], g) for g in gpus)
    out = Out()
    if kind == "query-gpu":
        for gpu in gpus:
            used = gpu.get("memory_used_mib", 0) + sum(h.get("used_mib", 0) for h in live if h["gpu"] == gpu["index"])
            values = {
                "index": gpu["index"], "uuid": gpu["uuid"], "name": gpu.get("name", "NVIDIA H200"),
                "memory.used": used, "memory.total": gpu.get("memory_total_mib", 143771),
                "ecc.errors.uncorrected.volatile.total": gpu.get("ecc_uncorrected_volatile", 0),
                "retired_pages.pending": gpu.get("retired_pages_pending", "No"),
                "mig.mode.current": gpu.get("mig_mode", "[N/A]"),
                "mig.mode.pending": gpu.get("mig_mode_pending", "[N/A]"),
            }
            if units:
                for key in ("memory.used", "memory.total"):
                    values[key] = "%d MiB" % values[key]
            out.writerow([values.get(f, "[N/A]") for f in fields])
    elif kind == "query-compute-apps":
        for holder in live:
            gpu = by_index[holder["gpu"]]
            values = {"gpu_uuid": gpu["uuid"], "pid": holder["pid"],
                      "process_name": holder.get("name") or process_name(int(holder["pid"])),
                      "used_memory": holder.get("used_mib", 0)}
            out.writerow([values.get(f, "[N/A]") for f in fields])
    elif kind == "query-remapped-rows":
        for gpu in gpus:
            values = {"gpu_uuid": gpu["uuid"],
                      "remapped_rows.pending": gpu.get("remapped_rows_pending", 0),
                      "remapped_rows.failure": gpu.get("remapped_rows_failure", 0)}
            out.writerow([values.get(f, "[N/A]") for f in fields])
    else:
        sys.stderr.write("fake nvidia-smi: unsupported %s\n" % kind)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
