# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for `nvidia-smi` at the hardware boundary CI lacks (tests only, never in plugins/).

It answers the CSV query interface the collection uses from a JSON state file named by
$FAKE_NVIDIA_SMI_STATE. Holders are real processes the test starts: a holder is reported (and its
memory counted as used) only while its PID is alive and not a zombie, so a reclaim that really
kills it really frees the fake GPU.

Holders come from two places: the "holders" list (a pid and a GPU, for a process the test starts
itself), and the processes themselves: a live process whose environment has FAKE_GPU_MIB=N holds N MiB
on each GPU that its own CUDA_VISIBLE_DEVICES names (indices, or the GPUs' UUIDs), as CUDA would place
it. So an engine started with CUDA_VISIBLE_DEVICES=4,5 shows on GPUs 4 and 5, and only while it lives:
the tie between an engine and its GPUs is whatever its environment says, not a table of the test's.
Only processes whose FAKE_NVIDIA_SMI_STATE is this one's count: they run on this fake host (tests that
run side by side each have theirs).

State file:
  {"driver": true,
   "gpus": [{"index": 0, "uuid": "GPU-...", "name": "NVIDIA H200", "memory_total_mib": 143771,
             "memory_used_mib": 0, "ecc_uncorrected_volatile": 0, "retired_pages_pending": "No",
             "mig_mode": "[N/A]", "mig_mode_pending": "[N/A]",
             "remapped_rows_pending": 0, "remapped_rows_failure": 0}],
   "holders": [{"pid": 1234, "gpu": 7, "used_mib": 8192}],
   "invalid_fields": ["remapped_rows.pending"]}
A GPU may also carry "pci_bus_id" (default: an HGX board's, BUS_IDS), "pcie": [gen_cur, gen_max, width_cur,
width_max] (default [5, 5, 16, 16]) and "nvlink": {"replay": n, "recovery": n, "crc": n} (default: no NVLink).

The shapes are nvidia-smi's own: the --query-gpu field names of `nvidia-smi --help-query-gpu` ("pci.bus_id" is
"00000000:3B:00.0", "pcie.link.gen.current" / ".max", "pcie.link.width.current" / ".max" plain integers in
csv,nounits), and `nvidia-smi nvlink -e` (nvidia-smi(1), "nvlink -e, --errorcounters"): per GPU a line
"GPU 0: NVIDIA H200 (UUID: GPU-...)" followed by "\t Link N: Replay Errors: n", "Recovery Errors", "CRC Errors".
"""

import json
import os
import sys

import launcher

NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.")


# the bus ids of the eight GPUs of an HGX H100/H200 board (lspci on a DGX H100)
BUS_IDS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
           "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]


def bus_id(gpu):
    return gpu.get("pci_bus_id") or (BUS_IDS[gpu["index"]] if gpu["index"] < len(BUS_IDS) else "00000000:%02X:00.0" % (0xe0 + gpu["index"]))


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


def install(bindir):
    """Write an executable `nvidia-smi` into bindir that runs this file (tests/support/launcher.py); returns its
    path. State comes from $FAKE_NVIDIA_SMI_STATE as above."""
    return launcher.install(bindir, "nvidia-smi", __file__)


def fake_host(tmp, count=8, tag="bench"):
    """A host of `count` clean fake H200s under tmp (bin/nvidia-smi and gpus.json), for the benchmarks; returns
    the environment that finds them (PATH first, FAKE_NVIDIA_SMI_STATE)."""
    bindir = os.path.join(str(tmp), "bin")
    os.makedirs(bindir)
    install(bindir)
    state = os.path.join(str(tmp), "gpus.json")
    with open(state, "w") as handle:
        json.dump({"driver": True, "holders": [],
                   "gpus": [{"index": i, "uuid": "GPU-%08x-%s" % (i, tag), "name": "NVIDIA H200",
                             "memory_total_mib": 143771, "memory_used_mib": 0} for i in range(count)]}, handle)
    return {"PATH": bindir + os.pathsep + os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
            "FAKE_NVIDIA_SMI_STATE": state}


def environ(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as handle:
            raw = handle.read()
    except (IOError, OSError):
        return {}
    pairs = (entry.split(b"=", 1) for entry in raw.split(b"\0") if b"=" in entry)
    return dict((k.decode("utf-8", "replace"), v.decode("utf-8", "replace")) for k, v in pairs)


def visible_device_holders(gpus, state_path):
    """[{"pid", "gpu", "used_mib"}] for every live process of this fake host (state_path) with FAKE_GPU_MIB
    and CUDA_VISIBLE_DEVICES."""
    by_key = {}
    for gpu in gpus:
        by_key[str(gpu["index"])] = gpu["index"]
        by_key[gpu["uuid"]] = gpu["index"]
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        env = environ(int(entry))
        if "FAKE_GPU_MIB" not in env or not env.get("CUDA_VISIBLE_DEVICES") or not alive(int(entry)):
            continue
        if env.get("FAKE_NVIDIA_SMI_STATE") != state_path:
            continue
        for device in env["CUDA_VISIBLE_DEVICES"].split(","):
            if device.strip() not in by_key:
                break  # CUDA ignores the devices after the first it does not know
            found.append({"pid": int(entry), "gpu": by_key[device.strip()], "used_mib": int(env["FAKE_GPU_MIB"])})
    return found


class Out(object):
    """Rows as nvidia-smi writes them: fields separated by ", "."""

    @staticmethod
    def writerow(row):
        sys.stdout.write(", ".join(str(v) for v in row) + "\n")


def main(_prog, argv):  # _prog: the name it was launched under (tests/support/launcher.py)
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
    if argv[:2] == ["nvlink", "-e"]:
        for gpu in gpus:
            print("GPU %d: %s (UUID: %s)" % (gpu["index"], gpu.get("name", "NVIDIA H200"), gpu["uuid"]))
            counts = gpu.get("nvlink")
            for link in range(18 if counts else 0):  # an H100/H200 SXM has 18 links; the counts sit on link 0
                for label, key in (("Replay", "replay"), ("Recovery", "recovery"), ("CRC", "crc")):
                    print("\t Link %d: %s Errors: %d" % (link, label, counts.get(key, 0) if link == 0 else 0))
        return 0
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

    live = [h for h in state.get("holders", []) if alive(int(h["pid"]))] + visible_device_holders(gpus, path)
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
                "pci.bus_id": bus_id(gpu),
            }
            pcie = gpu.get("pcie") or [5, 5, 16, 16]
            for key, value in zip(("pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
                                   "pcie.link.width.max"), pcie):
                values[key] = value
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
    sys.exit(main("nvidia-smi", sys.argv[1:]))
