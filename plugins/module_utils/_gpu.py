# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU state from NVML (nvidia-ml-py) or the nvidia-smi CSV interface, as one model.

Each backend returns, per GPU, a plain dict:
  index, uuid, name, memory_used_mib, memory_total_mib, memory_reserved_mib (NVML v2 only),
  processes [{pid, name, used_mib, type, mig_device}], mig_mode, health {...}, problems [...]
so everything above this file (the idle check, the callback) sees one shape.
"""

from __future__ import annotations

import csv
import re
import threading

from ansible_collections.inferops.serving.plugins.module_utils import _health

MIB = 1024 * 1024

# nvidia-smi writes these for values a GPU does not support or cannot report
_NA = ("", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]")

# The fields of each nvidia-smi query; a row is read by these names (SmiBackend._query).
_SMI_BASE = ("index", "uuid", "name", "memory.used", "memory.total")
_SMI_HEALTH = ("ecc.errors.uncorrected.volatile.total", "retired_pages.pending",
               "mig.mode.current", "mig.mode.pending")
_SMI_GPU = _SMI_BASE + _SMI_HEALTH  # --query-gpu with health; _SMI_BASE alone where nvidia-smi refuses those
_SMI_APPS = ("gpu_uuid", "pid", "process_name", "used_memory")
_SMI_REMAP = ("gpu_uuid", "remapped_rows.pending", "remapped_rows.failure")
# The PCI bus id and the PCIe link (nvidia-smi --help-query-gpu: "pci.bus_id", "pcie.link.gen.current",
# "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max"), a query of their own so that an
# nvidia-smi refusing one of them keeps the health fields above
_SMI_PCI = ("uuid", "pci.bus_id", "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
            "pcie.link.width.max")
# `nvidia-smi nvlink -e` (nvidia-smi(1), "nvlink -e, --errorcounters"): per GPU a header line
# "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)" then "\t Link 0: Replay Errors: 0", "Recovery Errors", "CRC Errors"
# (older drivers: "CRC Flit Errors" / "CRC Data Errors"); a GPU without NVLink lists no link
_NVLINK_GPU = re.compile(r"^GPU (\d+): .*\(UUID: ([^)]+)\)")
_NVLINK_COUNTER = re.compile(r"Link \d+: (Replay|Recovery|CRC[A-Za-z ]*) Errors: (\d+)")

_NO_DRIVER_HINTS = ("couldn't communicate with the nvidia driver", "no devices were found",
                    "driver not loaded", "nvml: driver/library version mismatch")


class GpuError(Exception):
    """The GPU state could not be read."""


class NoDriverError(GpuError):
    """There is no NVIDIA driver or GPU on this host."""


def _na(value):
    return value is None or str(value).strip().lower() in _NA


def _int(value):
    if _na(value):
        return None
    try:
        return int(float(str(value).strip()))
    except ValueError:
        return None


def _flag(value):
    """nvidia-smi yes/no/0/1 → bool, None when unsupported."""
    if _na(value):
        return None
    text = str(value).strip().lower()
    if text in ("yes", "1", "true", "pending"):
        return True
    if text in ("no", "0", "false"):
        return False
    return None


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def new_gpu(index, uuid, name, used, total, reserved=None):
    return {
        "index": index, "uuid": uuid, "name": name,
        "memory_used_mib": used, "memory_total_mib": total, "memory_reserved_mib": reserved,
        "processes": [], "mig_mode": None, "mig_devices": [],
        "pci_bus_id": None, "pcie": {"gen_current": None, "gen_max": None, "width_current": None, "width_max": None},
        "nvlink": None,
        "health": {"ecc_uncorrected_volatile": None, "retired_pages_pending": None,
                   "remapped_rows_pending": None, "remapped_rows_failure": None,
                   "mig_mode_pending": None},
    }


def health_problems(gpu):
    """Human-readable reasons this GPU is unhealthy; empty when healthy or unknown."""
    health, problems = gpu["health"], []
    if health.get("ecc_uncorrected_volatile"):
        problems.append("%d uncorrected volatile ECC errors" % health["ecc_uncorrected_volatile"])
    if health.get("remapped_rows_pending"):
        problems.append("row remapping pending (reset the GPU)")
    if health.get("remapped_rows_failure"):
        problems.append("row remapping failed (the GPU needs service)")
    if health.get("retired_pages_pending"):
        problems.append("page retirement pending (reset the GPU)")
    pending = health.get("mig_mode_pending")
    if pending is not None and gpu.get("mig_mode") is not None and pending != gpu["mig_mode"]:
        problems.append("MIG mode change pending (%s -> %s; reset the GPU)" % (gpu["mig_mode"], pending))
    problems.extend(_health.problems(gpu))
    return problems


def parse_nvlink_errors(text):
    """{uuid: {"replay", "recovery", "crc"} summed over the links} from `nvidia-smi nvlink -e`; a GPU with no
    link is left out."""
    found, uuid = {}, None
    for line in (text or "").splitlines():
        header = _NVLINK_GPU.match(line.strip())
        if header:
            uuid = header.group(2).strip()
            continue
        counter = _NVLINK_COUNTER.search(line)
        if counter and uuid:
            kind = counter.group(1).split()[0].lower()
            counts = found.setdefault(uuid, {"replay": 0, "recovery": 0, "crc": 0})
            counts[kind] += int(counter.group(2))
    return found


class NvmlBackend(object):
    """NVML through nvidia-ml-py (`import pynvml`): microseconds per query."""

    name = "nvml"

    def __init__(self, pynvml):
        self.nv = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NoDriverError("NVML could not be initialised: %s" % exc)
        self._handles, self._uuids, self._names = {}, {}, {}
        self._mig_parents = set()
        self._pid_names = {}

    def close(self):
        try:
            self.nv.nvmlShutdown()
        except self.nv.NVMLError:
            pass

    def indices(self):
        return list(range(self.nv.nvmlDeviceGetCount()))

    def _handle(self, index):
        if index not in self._handles:
            self._handles[index] = self.nv.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def _optional(self, func, *args):
        """Call an NVML query that some GPUs do not support; None when unsupported."""
        try:
            return func(*args)
        except self.nv.NVMLError:
            return None

    def _memory(self, handle):
        nv = self.nv
        version = getattr(nv, "nvmlMemory_v2", None)
        if version is not None:
            try:
                info = nv.nvmlDeviceGetMemoryInfo(handle, version=version)
                return info.used // MIB, info.total // MIB, getattr(info, "reserved", 0) // MIB
            except (TypeError, nv.NVMLError):
                pass
        info = nv.nvmlDeviceGetMemoryInfo(handle)
        return info.used // MIB, info.total // MIB, None

    def _process_name(self, pid):
        """Asked once per PID (the query costs milliseconds on a busy host, polling must not pay it)."""
        if pid not in self._pid_names:
            name = self._optional(self.nv.nvmlSystemGetProcessName, pid)
            self._pid_names[pid] = _text(name) if name else ""
        return self._pid_names[pid]

    def _processes(self, handle, mig_device=None):
        found = []
        for kind, func in (("compute", self.nv.nvmlDeviceGetComputeRunningProcesses),
                           ("graphics", self.nv.nvmlDeviceGetGraphicsRunningProcesses)):
            for proc in self._optional(func, handle) or []:
                used = getattr(proc, "usedGpuMemory", None)
                found.append({"pid": int(proc.pid), "name": self._process_name(int(proc.pid)),
                              "used_mib": None if used is None else used // MIB,
                              "type": kind, "mig_device": mig_device})
        return found

    def snapshot(self, indices, health=True):
        """Memory and holders; with health, also names, ECC, remapping, retired pages and MIG mode.

        A polling read (health=False) skips the health queries and walks MIG instances only on GPUs
        seen in MIG mode by the last full read; UUIDs, names and process names are asked once.
        """
        nv, gpus = self.nv, []
        for index in indices:
            handle = self._handle(index)
            used, total, reserved = self._memory(handle)
            gpu = new_gpu(index, self._uuid(index), self._name(index), used, total, reserved)
            gpu["processes"] = self._processes(handle)
            if not health:
                if index in self._mig_parents:
                    self._mig_devices(handle, gpu)
                gpus.append(gpu)
                continue
            checks = gpu["health"]
            checks["ecc_uncorrected_volatile"] = self._optional(
                nv.nvmlDeviceGetTotalEccErrors, handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nv.NVML_VOLATILE_ECC)
            rows = self._optional(nv.nvmlDeviceGetRemappedRows, handle)
            if rows is not None:
                checks["remapped_rows_pending"] = bool(rows[2])
                checks["remapped_rows_failure"] = bool(rows[3])
            pages = self._optional(nv.nvmlDeviceGetRetiredPagesPendingStatus, handle)
            if pages is not None:
                checks["retired_pages_pending"] = bool(pages)
            self._pci(handle, gpu)
            mig = self._optional(nv.nvmlDeviceGetMigMode, handle)
            self._mig_parents.discard(index)
            if mig is not None:
                current, pending = mig
                gpu["mig_mode"] = "enabled" if current else "disabled"
                checks["mig_mode_pending"] = "enabled" if pending else "disabled"
                if current:
                    self._mig_parents.add(index)
                    self._mig_devices(handle, gpu)
            gpus.append(gpu)
        return gpus

    def _pci(self, handle, gpu):
        """The bus id, the PCIe link and the NVLink error counters (NVML API reference, "Device Queries":
        nvmlDeviceGetPciInfo .busId, nvmlDeviceGetCurrPcieLinkGeneration / MaxPcieLinkGeneration /
        CurrPcieLinkWidth / MaxPcieLinkWidth, nvmlDeviceGetNvLinkErrorCounter with NVML_NVLINK_ERROR_DL_REPLAY 0,
        _RECOVERY 1, _CRC_FLIT 2, _CRC_DATA 3 per link up to NVML_NVLINK_MAX_LINKS)."""
        nv = self.nv
        info = self._optional(nv.nvmlDeviceGetPciInfo, handle) if hasattr(nv, "nvmlDeviceGetPciInfo") else None
        if info is not None:
            gpu["pci_bus_id"] = _text(getattr(info, "busId", None) or getattr(info, "busIdLegacy", None))
        pcie = gpu["pcie"]
        for key, func in (("gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"), ("gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                          ("width_current", "nvmlDeviceGetCurrPcieLinkWidth"), ("width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
            if hasattr(nv, func):
                pcie[key] = self._optional(getattr(nv, func), handle)
        counter = getattr(nv, "nvmlDeviceGetNvLinkErrorCounter", None)
        if counter is None:
            return
        counts, links = {"replay": 0, "recovery": 0, "crc": 0}, 0
        for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
            values = [self._optional(counter, handle, link, kind) for kind in (0, 1, 2, 3)]
            if all(v is None for v in values):
                continue
            links += 1
            counts["replay"] += values[0] or 0
            counts["recovery"] += values[1] or 0
            counts["crc"] += (values[2] or 0) + (values[3] or 0)
        gpu["nvlink"] = counts if links else None

    def _uuid(self, index):
        if index not in self._uuids:
            self._uuids[index] = _text(self.nv.nvmlDeviceGetUUID(self._handle(index)))
        return self._uuids[index]

    def _name(self, index):
        if index not in self._names:
            self._names[index] = _text(self.nv.nvmlDeviceGetName(self._handle(index)))
        return self._names[index]

    def _mig_devices(self, handle, gpu):
        """Under MIG, processes live on the MIG devices, not on the parent: look at each instance."""
        nv = self.nv
        count = self._optional(nv.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
        for slot in range(count):
            mig = self._optional(nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
            if mig is None:
                continue
            used, total, _reserved = self._memory(mig)
            procs = self._processes(mig, mig_device=slot)
            gpu["mig_devices"].append({"index": slot, "uuid": _text(nv.nvmlDeviceGetUUID(mig)),
                                       "memory_used_mib": used, "memory_total_mib": total,
                                       "processes": [p["pid"] for p in procs]})
            gpu["processes"].extend(procs)


class SmiBackend(object):
    """nvidia-smi, through its stable CSV query interface only (tens of ms a call)."""

    name = "nvidia_smi"

    def __init__(self, run, binary):
        """run(argv) -> (rc, stdout, stderr); binary: the nvidia-smi path."""
        self.run = run
        self.binary = binary
        self._health = True   # drop the health fields once this nvidia-smi refuses them
        self._remap = True
        self._pci = True      # the PCI / PCIe fields, and `nvlink -e`, dropped once refused
        self._nvlink = True
        self._first = None    # the full read that indices() took, for the check's first snapshot

    def close(self):
        pass

    def _query(self, option, fields, allow_fail=False):
        argv = [self.binary, "%s=%s" % (option, ",".join(fields)), "--format=csv,noheader,nounits"]
        rc, out, err = self.run(argv)
        if rc != 0:
            text = ("%s %s" % (out, err)).strip()
            if any(hint in text.lower() for hint in _NO_DRIVER_HINTS):
                raise NoDriverError("nvidia-smi: %s" % text)
            if allow_fail:
                return None
            raise GpuError("%s failed (rc=%d): %s" % (" ".join(argv), rc, text))
        # one dict per row, by field name; a short row lacks the fields past its last cell
        return [dict(zip(fields, (cell.strip() for cell in row))) for row in csv.reader(out.splitlines()) if row]

    def _concurrently(self, queries):
        """Run the queries (option, fields, allow_fail) at once: a poll costs one call's time, not three.

        Each query is its own nvidia-smi process; the results keep the order of the queries and the
        first error raised by any of them is raised here.
        """
        results = [None] * len(queries)

        def one(slot):
            try:
                results[slot] = (self._query(*queries[slot]), None)
            except Exception as exc:  # pylint: disable=broad-except  # re-raised in the caller's thread
                results[slot] = (None, exc)
        threads = [threading.Thread(target=one, args=(slot,)) for slot in range(1, len(queries))]
        for thread in threads:
            thread.start()
        one(0)
        for thread in threads:
            thread.join()
        for _rows, error in results:
            if error is not None:
                raise error
        return [rows for rows, _error in results]

    def indices(self):
        """The GPUs present. It takes a whole first snapshot (one round of concurrent calls) that the
        next snapshot with health reuses, so a check costs no separate round for the list."""
        self._first = self._read(None, health=True)
        return [gpu["index"] for gpu in self._first]

    def snapshot(self, indices, health=True):
        """health=False reads only memory and processes (two concurrent calls), for fast polling."""
        first, self._first = self._first, None
        if first is not None and health:
            wanted = set(indices)
            return [gpu for gpu in first if gpu["index"] in wanted]
        return self._read(set(indices), health)

    def _read(self, wanted, health):
        with_health = health and self._health
        with_remap = health and self._remap
        queries = [("--query-gpu", _SMI_GPU if with_health else _SMI_BASE, with_health),
                   ("--query-compute-apps", _SMI_APPS, False)]
        if with_remap:
            queries.append(("--query-remapped-rows", _SMI_REMAP, True))
        with_pci = health and self._pci
        if with_pci:
            queries.append(("--query-gpu", _SMI_PCI, True))
        answers = self._concurrently(queries)
        pci_rows = answers[-1] if with_pci else None
        if with_pci and pci_rows is None:
            self._pci = False
        gpu_rows, app_rows = answers[0], answers[1]
        if gpu_rows is None:  # this nvidia-smi refuses a health field: read without them from now on
            self._health = False
            gpu_rows = self._query("--query-gpu", _SMI_BASE)
        gpus, by_uuid = [], {}
        for row in gpu_rows:
            index = int(row["index"])
            if wanted is not None and index not in wanted:
                continue
            gpu = new_gpu(index, row["uuid"], row["name"], _int(row["memory.used"]), _int(row["memory.total"]))
            if len(row) == len(_SMI_GPU):
                mig, mig_pending = row["mig.mode.current"], row["mig.mode.pending"]
                gpu["health"]["ecc_uncorrected_volatile"] = _int(row["ecc.errors.uncorrected.volatile.total"])
                gpu["health"]["retired_pages_pending"] = _flag(row["retired_pages.pending"])
                gpu["mig_mode"] = None if _na(mig) else mig.strip().lower()
                gpu["health"]["mig_mode_pending"] = None if _na(mig_pending) else mig_pending.strip().lower()
            gpus.append(gpu)
            by_uuid[gpu["uuid"]] = gpu
        if with_remap:
            if answers[2] is None:
                self._remap = False
            for row in answers[2] or []:
                if len(row) == len(_SMI_REMAP) and row["gpu_uuid"] in by_uuid:
                    health = by_uuid[row["gpu_uuid"]]["health"]
                    health["remapped_rows_pending"] = _flag(row["remapped_rows.pending"])
                    health["remapped_rows_failure"] = _flag(row["remapped_rows.failure"])
        for row in pci_rows or []:
            gpu = by_uuid.get(row.get("uuid"))
            if gpu is None or len(row) != len(_SMI_PCI):
                continue
            gpu["pci_bus_id"] = None if _na(row["pci.bus_id"]) else row["pci.bus_id"]
            gpu["pcie"] = {"gen_current": _int(row["pcie.link.gen.current"]), "gen_max": _int(row["pcie.link.gen.max"]),
                           "width_current": _int(row["pcie.link.width.current"]), "width_max": _int(row["pcie.link.width.max"])}
        if health and self._nvlink and by_uuid:
            rc, out, _err = self.run([self.binary, "nvlink", "-e"])
            counts = parse_nvlink_errors(out) if rc == 0 else {}
            self._nvlink = rc == 0
            for uuid, gpu in by_uuid.items():
                gpu["nvlink"] = counts.get(uuid)
        for row in app_rows:
            if len(row) < len(_SMI_APPS):
                continue
            gpu = by_uuid.get(row["gpu_uuid"])
            if gpu is None:
                continue
            gpu["processes"].append({"pid": int(row["pid"]), "name": row["process_name"],
                                     "used_mib": _int(row["used_memory"]), "type": "compute", "mig_device": None})
        missing = (wanted or set()) - set(by_uuid[u]["index"] for u in by_uuid)
        if missing:
            raise GpuError("nvidia-smi did not report GPU(s) %s" % ", ".join(str(i) for i in sorted(missing)))
        return gpus


def open_backend(choice, import_pynvml, run, find_binary):
    """Pick a backend.

    choice: 'auto' | 'nvml' | 'nvidia_smi'. import_pynvml() returns the module or raises ImportError;
    find_binary() returns the nvidia-smi path or None. Raises NoDriverError when no GPU can be seen.
    """
    errors = []
    if choice in ("auto", "nvml"):
        try:
            return NvmlBackend(import_pynvml())
        except ImportError as exc:
            if choice == "nvml":
                raise GpuError("backend=nvml needs nvidia-ml-py (import pynvml) on the target: %s" % exc)
            errors.append("nvidia-ml-py is not installed")
        except NoDriverError as exc:
            if choice == "nvml":
                raise
            errors.append(str(exc))
    binary = find_binary()
    if binary is None:
        errors.append("nvidia-smi is not on PATH")
        raise NoDriverError("; ".join(errors))
    return SmiBackend(run, binary)
