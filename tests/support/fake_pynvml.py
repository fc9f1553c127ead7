# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for the `pynvml` module (nvidia-ml-py) for unit tests: the NVML surface we use.

FakeNvml(gpus) behaves like the imported module. Each GPU is a dict:
  {"uuid", "name", "used", "total", "reserved" (bytes), "procs": [(pid, used_bytes or None)],
   "graphics": [...], "ecc": int or None (None = NotSupported), "remap": (c, u, pending, failure) or None,
   "pages_pending": bool or None, "mig": (current, pending) or None, "mig_devices": [gpu-like dicts],
   "bus_id": "00000000:3B:00.0", "pcie": (gen_current, gen_max, width_current, width_max) or None,
   "nvlink": {link: (replay, recovery, crc_flit, crc_data)} or None}

The PCI and NVLink calls follow the NVML API reference ("Device Queries", nvml.h of the driver): nvmlDeviceGetPciInfo
returns nvmlPciInfo_t whose busId is "domain:bus:device.function" with an 8-digit domain ("00000000:3B:00.0");
nvmlDeviceGetCurrPcieLinkGeneration / MaxPcieLinkGeneration / CurrPcieLinkWidth / MaxPcieLinkWidth return ints;
nvmlDeviceGetNvLinkErrorCounter(device, link, counter) returns one counter (NVML_NVLINK_ERROR_DL_REPLAY 0,
_DL_RECOVERY 1, _DL_CRC_FLIT 2, _DL_CRC_DATA 3) and NVML_ERROR_NOT_SUPPORTED for a link that does not exist.
"""

from __future__ import annotations

import types


class NVMLError(Exception):
    def __init__(self, value=0):
        super(NVMLError, self).__init__(value)
        self.value = value


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_NotFound(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


class FakeNvml(object):
    NVMLError = NVMLError
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    nvmlMemory_v2 = 0x02000028

    def __init__(self, gpus, driver=True, v2=True, names=None):
        self.gpus = gpus
        self.driver = driver
        self.names = names or {}
        self.calls = []
        self.initialised = False
        if not v2:
            self.nvmlMemory_v2 = None

    def nvmlInit(self):
        if not self.driver:
            raise NVMLError_DriverNotLoaded(9)
        self.initialised = True

    def nvmlShutdown(self):
        self.initialised = False

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if index >= len(self.gpus):
            raise NVMLError(2)
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, h):
        return h["uuid"].encode()  # older bindings return bytes

    def nvmlDeviceGetName(self, h):
        return h.get("name", "NVIDIA H200")

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        self.calls.append(("memory", version))
        if version is not None:
            return types.SimpleNamespace(used=h["used"], total=h["total"], reserved=h.get("reserved", 0),
                                         free=h["total"] - h["used"])
        # v1: used includes the reserved memory
        return types.SimpleNamespace(used=h["used"] + h.get("reserved", 0), total=h["total"],
                                     free=h["total"] - h["used"] - h.get("reserved", 0))

    def _procs(self, items):
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in items]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        if h.get("mig_parent_blind") and h.get("mig", (0, 0))[0]:
            return []
        return self._procs(h.get("procs", []))

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        return self._procs(h.get("graphics", []))

    def nvmlSystemGetProcessName(self, pid):
        self.calls.append(("name", pid))
        if pid not in self.names:
            raise NVMLError_NotFound(6)
        return self.names[pid]

    def _opt(self, h, key):
        if h.get(key) is None:
            raise NVMLError_NotSupported(3)
        return h[key]

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        assert (kind, counter) == (1, 0)
        self.calls.append(("ecc", h["uuid"]))
        return self._opt(h, "ecc")

    def nvmlDeviceGetRemappedRows(self, h):
        return self._opt(h, "remap")

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return self._opt(h, "pages_pending")

    def nvmlDeviceGetMigMode(self, h):
        return self._opt(h, "mig")

    NVML_NVLINK_MAX_LINKS = 18

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(busId=h.get("bus_id", "00000000:%02X:00.0" % (0x18 + self.gpus.index(h))).encode())

    def _pcie(self, h, slot):
        return self._opt(h, "pcie")[slot]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._pcie(h, 0)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._pcie(h, 1)

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._pcie(h, 2)

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._pcie(h, 3)

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        links = h.get("nvlink") or {}
        if link not in links:
            raise NVMLError_NotSupported(3)
        return links[link][counter]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return len(h.get("mig_devices", []))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, slot):
        device = h.get("mig_devices", [])[slot]
        if device is None:
            raise NVMLError_NotFound(6)
        return device


def gpu(index, used_mib=0, total_mib=143771, reserved_mib=593, procs=(), **extra):
    """A healthy H200-like GPU dict for FakeNvml."""
    mib = 1024 * 1024
    data = {"uuid": "GPU-%08d-aaaa-bbbb-cccc-dddddddddddd" % index, "name": "NVIDIA H200",
            "used": used_mib * mib, "total": total_mib * mib, "reserved": reserved_mib * mib,
            "procs": [(pid, None if m is None else m * mib) for pid, m in procs],
            "ecc": 0, "remap": (0, 0, 0, 0), "pages_pending": False, "mig": (0, 0)}
    data.update(extra)
    return data
