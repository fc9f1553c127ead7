# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU state: the nvidia-smi CSV parser and the NVML wrapper produce one model."""

from __future__ import annotations

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _gpu

import fake_pynvml


class FakeSmi(object):
    """Answers nvidia-smi argv with canned CSV, recording every call."""

    def __init__(self, gpu_rows, apps="", remap="", rc=0, invalid=(), fail_text="", pci="", nvlink=""):
        self.gpu_rows, self.apps, self.remap = gpu_rows, apps, remap
        self.pci, self.nvlink = pci, nvlink
        self.rc, self.invalid, self.fail_text = rc, invalid, fail_text
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        if argv[1:] == ["nvlink", "-e"]:
            return 0, self.nvlink, ""
        assert argv[-1] == "--format=csv,noheader,nounits"
        if self.rc:
            return self.rc, self.fail_text, ""
        query, fields = argv[1].split("=", 1)
        for field in fields.split(","):
            if field in self.invalid:
                return 2, 'Field "%s" is not a valid field to query.\n' % field, ""
        if query == "--query-gpu" and fields.startswith("uuid,pci.bus_id"):
            return 0, self.pci, ""
        if query == "--query-gpu":
            n = len(fields.split(","))
            return 0, "\n".join(", ".join(r.split(", ")[:n]) for r in self.gpu_rows) + "\n", ""
        if query == "--query-compute-apps":
            return 0, self.apps, ""
        if query == "--query-remapped-rows":
            return 0, self.remap, ""
        raise AssertionError(argv)


ROWS = [
    "0, GPU-aaaa, NVIDIA H200, 0, 143771, 0, No, [N/A], [N/A]",
    "1, GPU-bbbb, NVIDIA H200, 8195, 143771, 0, No, [N/A], [N/A]",
]


def test_smi_snapshot_parses_gpus_apps_and_health():
    smi = FakeSmi(ROWS, apps="GPU-bbbb, 4242, /usr/bin/python3, 8192\n",
                  remap="GPU-aaaa, 0, 0\nGPU-bbbb, 1, 0\n")
    backend = _gpu.SmiBackend(smi, "/usr/bin/nvidia-smi")
    gpus = backend.snapshot([0, 1])
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0]["processes"] == []
    assert gpus[1]["memory_used_mib"] == 8195 and gpus[1]["memory_total_mib"] == 143771
    assert gpus[1]["processes"] == [{"pid": 4242, "name": "/usr/bin/python3", "used_mib": 8192,
                                     "type": "compute", "mig_device": None}]
    assert gpus[0]["health"]["ecc_uncorrected_volatile"] == 0
    assert gpus[0]["health"]["retired_pages_pending"] is False
    assert gpus[0]["mig_mode"] is None
    assert gpus[1]["health"]["remapped_rows_pending"] is True
    assert _gpu.health_problems(gpus[1]) == ["row remapping pending (reset the GPU)"]
    assert _gpu.health_problems(gpus[0]) == []
    # the stable CSV interface, and `nvidia-smi nvlink -e` (NVLink counters have no query field)
    assert all(c[1].startswith("--query-") or c[1:] == ["nvlink", "-e"] for c in smi.calls)


def test_smi_snapshot_filters_indices_and_polling_skips_health():
    smi = FakeSmi(ROWS, apps="GPU-bbbb, 4242, python, 8192\n")
    backend = _gpu.SmiBackend(smi, "nvidia-smi")
    gpus = backend.snapshot([1], health=False)
    assert [g["index"] for g in gpus] == [1]
    assert len(smi.calls) == 2  # memory + processes, no health fields, no remapped rows
    assert not any("ecc" in c[1] for c in smi.calls)


def test_smi_falls_back_when_health_fields_are_not_valid_here():
    smi = FakeSmi(ROWS, invalid=("mig.mode.pending", "remapped_rows.pending"))
    backend = _gpu.SmiBackend(smi, "nvidia-smi")
    gpus = backend.snapshot([0, 1])
    assert gpus[0]["health"]["ecc_uncorrected_volatile"] is None
    assert gpus[0]["health"]["remapped_rows_pending"] is None
    calls = len(smi.calls)
    backend.snapshot([0, 1])
    again = [c[1] for c in smi.calls[calls:]]
    # the refused queries are not retried every poll: the base fields, the processes, and the PCI / NVLink
    # reads (which this nvidia-smi answers)
    assert sorted(again) == sorted(["--query-gpu=index,uuid,name,memory.used,memory.total",
                                    "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                                    "--query-gpu=" + ",".join(_gpu._SMI_PCI), "nvlink"])


@pytest.mark.parametrize("text", [
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    "No devices were found",
])
def test_smi_without_driver_raises_no_driver(text):
    backend = _gpu.SmiBackend(FakeSmi(ROWS, rc=9, fail_text=text), "nvidia-smi")
    with pytest.raises(_gpu.NoDriverError):
        backend.snapshot([0])


def test_smi_other_failure_is_a_gpu_error_with_the_command():
    backend = _gpu.SmiBackend(FakeSmi(ROWS, rc=15, fail_text="Unknown Error"), "nvidia-smi")
    with pytest.raises(_gpu.GpuError, match="--query-(gpu|compute-apps).*rc=15.*Unknown Error"):
        backend.snapshot([0])


def test_smi_missing_gpu_is_an_error():
    backend = _gpu.SmiBackend(FakeSmi(ROWS[:1]), "nvidia-smi")
    with pytest.raises(_gpu.GpuError, match="did not report GPU.*1"):
        backend.snapshot([0, 1])


def test_nvml_uses_v2_memory_excluding_reserved():
    nv = fake_pynvml.FakeNvml([fake_pynvml.gpu(0, used_mib=0, reserved_mib=593)])
    gpus = _gpu.NvmlBackend(nv).snapshot([0])
    assert gpus[0]["memory_used_mib"] == 0
    assert gpus[0]["memory_reserved_mib"] == 593
    assert gpus[0]["uuid"].startswith("GPU-")  # bytes decoded
    assert ("memory", nv.nvmlMemory_v2) in nv.calls


def test_nvml_v1_only_reports_used_including_reserved():
    nv = fake_pynvml.FakeNvml([fake_pynvml.gpu(0, used_mib=0, reserved_mib=593)], v2=False)
    gpus = _gpu.NvmlBackend(nv).snapshot([0])
    assert gpus[0]["memory_used_mib"] == 593 and gpus[0]["memory_reserved_mib"] is None


def test_nvml_processes_names_and_unknown_usage():
    nv = fake_pynvml.FakeNvml([fake_pynvml.gpu(0, used_mib=9000, procs=[(11, 8192), (12, None)])],
                              names={11: b"/usr/bin/python3"})
    procs = _gpu.NvmlBackend(nv).snapshot([0])[0]["processes"]
    assert procs[0] == {"pid": 11, "name": "/usr/bin/python3", "used_mib": 8192, "type": "compute", "mig_device": None}
    assert procs[1]["used_mib"] is None and procs[1]["name"] == ""


def test_nvml_polling_read_skips_health_and_asks_each_name_once():
    nv = fake_pynvml.FakeNvml([fake_pynvml.gpu(0, used_mib=9000, procs=[(11, 8192)])], names={11: b"python3"})
    backend = _gpu.NvmlBackend(nv)
    backend.snapshot([0])
    before = list(nv.calls)
    polled = backend.snapshot([0], health=False)[0]
    new = nv.calls[len(before):]
    assert polled["processes"][0]["name"] == "python3"
    assert sorted(c[0] for c in before if c[0] in ("ecc", "name")) == ["ecc", "name"]
    assert not [c for c in new if c[0] in ("ecc", "name")]  # no health query, the name is cached


def test_nvml_health_unsupported_is_none_not_failure():
    nv = fake_pynvml.FakeNvml([fake_pynvml.gpu(0, ecc=None, remap=None, pages_pending=None, mig=None)])
    g = _gpu.NvmlBackend(nv).snapshot([0])[0]
    assert g["health"]["ecc_uncorrected_volatile"] is None and g["mig_mode"] is None
    assert _gpu.health_problems(g) == []


def test_nvml_bad_health_is_reported():
    nv = fake_pynvml.FakeNvml([fake_pynvml.gpu(0, ecc=3, remap=(0, 1, 0, 1), mig=(0, 1))])
    problems = _gpu.health_problems(_gpu.NvmlBackend(nv).snapshot([0])[0])
    assert problems == ["3 uncorrected volatile ECC errors", "row remapping failed (the GPU needs service)",
                        "MIG mode change pending (disabled -> enabled; reset the GPU)"]


def test_nvml_mig_instances_are_checked_not_only_the_parent():
    instance = fake_pynvml.gpu(90, used_mib=4096, procs=[(77, 4096)])
    parent = fake_pynvml.gpu(0, used_mib=4096, mig=(1, 1), mig_devices=[None, instance], mig_parent_blind=True)
    g = _gpu.NvmlBackend(fake_pynvml.FakeNvml([parent])).snapshot([0])[0]
    assert g["mig_mode"] == "enabled"
    assert [p["pid"] for p in g["processes"]] == [77]
    assert g["processes"][0]["mig_device"] == 1
    assert g["mig_devices"][0]["index"] == 1 and g["mig_devices"][0]["processes"] == [77]


def test_open_backend_auto_prefers_nvml_then_smi():
    nv = fake_pynvml.FakeNvml([fake_pynvml.gpu(0)])
    assert _gpu.open_backend("auto", lambda: nv, None, lambda: "/x/nvidia-smi").name == "nvml"

    def no_pynvml():
        raise ImportError("No module named 'pynvml'")
    assert _gpu.open_backend("auto", no_pynvml, None, lambda: "/x/nvidia-smi").name == "nvidia_smi"
    broken = fake_pynvml.FakeNvml([], driver=False)
    assert _gpu.open_backend("auto", lambda: broken, None, lambda: "/x/nvidia-smi").name == "nvidia_smi"


def test_open_backend_errors_name_the_cause():
    def no_pynvml():
        raise ImportError("No module named 'pynvml'")
    with pytest.raises(_gpu.GpuError, match="backend=nvml needs nvidia-ml-py"):
        _gpu.open_backend("nvml", no_pynvml, None, lambda: None)
    with pytest.raises(_gpu.NoDriverError, match="nvidia-ml-py is not installed; nvidia-smi is not on PATH"):
        _gpu.open_backend("auto", no_pynvml, None, lambda: None)
    with pytest.raises(_gpu.NoDriverError):
        _gpu.open_backend("nvml", lambda: fake_pynvml.FakeNvml([], driver=False), None, lambda: None)
