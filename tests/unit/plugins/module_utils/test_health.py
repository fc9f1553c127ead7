# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health signals: Xid lines matched by bus id in a window, NVLink growth, the PCIe link, dcgmi's diagnostic."""

from __future__ import annotations

import json

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _gpu, _health

import fake_pynvml

BOOT = 1_700_000_000.0


def gpu(index, bus, **extra):
    data = _gpu.new_gpu(index, "GPU-%d" % index, "NVIDIA H200", 0, 143771)
    data["pci_bus_id"] = bus
    data.update(extra)
    return data


class Run(object):
    """journalctl / dmesg / dcgmi answers by the argv's first word."""

    def __init__(self, **answers):
        self.answers, self.calls = answers, []

    def __call__(self, argv, **kwargs):
        self.calls.append(argv)
        return self.answers.get(argv[0].rsplit("/", 1)[-1], (127, "", "not found"))


@pytest.mark.parametrize("text, key", [
    ("00000000:3B:00.0", "0000:3b:00"), ("PCI:0000:3b:00", "0000:3b:00"), ("0000:3B:00", "0000:3b:00"),
    ("00000001:DB:00.0", "0001:db:00"), ("GPU-1234", None), ("", None)])
def test_kernel_and_nvml_bus_ids_meet(text, key):
    assert _health.bus_key(text) == key


def test_xid_lines_of_journalctl_and_dmesg():
    journal = ("1700000100.500000 host kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
               "GPU has fallen off the bus.\n1700000101.0 host kernel: usb 1-1: new device\n")
    events = _health.parse_xids(journal)
    assert events == [{"at": 1700000100.5, "bus": "0000:3b:00", "code": 79,
                       "line": "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."}]
    dmesg = "[   12.250000] NVRM: Xid (PCI:0000:18:00): 48, pid=1234, name=python, An uncorrectable double bit error\n"
    assert _health.parse_xids(dmesg, boot=BOOT)[0]["at"] == BOOT + 12.25


def test_a_fatal_xid_blocks_a_restart_app_one_warns_and_an_old_one_is_outside_the_window(tmp_path):
    journal = "\n".join([
        "%.1f h kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus." % (BOOT + 50),
        "%.1f h kernel: NVRM: Xid (PCI:0000:18:00): 94, Contained ECC error." % (BOOT + 60),
        "%.1f h kernel: NVRM: Xid (PCI:0000:db:00): 48, DBE." % (BOOT + 5)])
    run = Run(journalctl=(0, journal, ""))
    (tmp_path / "gpu-health.json").write_text(json.dumps({"0000:db:00": {"clean_at": BOOT + 10}}))
    gpus = [gpu(0, "00000000:18:00.0"), gpu(1, "00000000:3B:00.0"), gpu(2, "00000000:DB:00.0")]
    report = _health.assess(gpus, {"state_dir": str(tmp_path)}, run, boot=BOOT, now=BOOT + 100)
    assert run.calls[0][:2] == ["journalctl", "-k"] and run.calls[0][-1] == "@%d" % BOOT
    assert _health.problems(gpus[0]) == [] and "Xid 94" in report["warnings"][0]
    assert _gpu.health_problems(gpus[1])[0].startswith("xid: Xid 79 at ")
    assert _health.problems(gpus[2]) == []  # before its last clean check
    assert report["xid_source"] == "journalctl -k"


def test_an_unreadable_log_warns_or_with_require_is_an_error():
    run = Run(journalctl=(0, "", "No journal files were opened due to insufficient permissions."),
              dmesg=(1, "", "dmesg: read kernel buffer failed: Operation not permitted"))
    gpus = [gpu(0, "00000000:18:00.0")]
    report = _health.assess(gpus, {}, run, boot=BOOT)
    assert report["errors"] == [] and "insufficient permissions" in report["warnings"][0]
    assert "Operation not permitted" in report["warnings"][0]
    report = _health.assess(gpus, {"xid": "require"}, run, boot=BOOT)
    assert report["errors"] and "health.xid is require" in report["errors"][0]
    assert _health.assess(gpus, {"xid": "skip"}, Run(), boot=BOOT)["warnings"] == []


def test_dmesg_answers_when_journalctl_is_missing():
    run = Run(dmesg=(0, "[   40.000000] NVRM: Xid (PCI:0000:18:00): 119, Timeout waiting for RPC from GSP\n", ""))
    gpus = [gpu(0, "00000000:18:00.0")]
    report = _health.assess(gpus, {}, run, boot=BOOT)
    assert report["xid_source"] == "dmesg" and "Xid 119" in _health.problems(gpus[0])[0]


def test_an_ack_moves_the_window_and_is_recorded_with_the_time(tmp_path):
    journal = "%.1f h kernel: NVRM: Xid (PCI:0000:3b:00): 79, off the bus." % (BOOT + 50)
    gpus = [gpu(3, "00000000:3B:00.0")]
    report = _health.assess(gpus, {"state_dir": str(tmp_path), "ack": ["00000000:3b:00.0"]},
                            Run(journalctl=(0, journal, "")), boot=BOOT, now=BOOT + 100)
    assert report["acked"] == [{"index": 3, "pci_bus_id": "00000000:3B:00.0", "at": BOOT + 100}]
    assert _health.problems(gpus[0]) == []
    recorded = json.loads((tmp_path / "gpu-health.json").read_text())["0000:3b:00"]["ack"]
    assert recorded == {"at": BOOT + 100, "by": "00000000:3b:00.0"}
    bad = _health.assess([gpu(3, "00000000:3B:00.0")], {"ack": ["7"]}, Run(journalctl=(0, "", "")), boot=BOOT)
    assert "gpu_health_ack '7' names no GPU" in bad["errors"][0]


def test_nvlink_growth_above_the_maximum_blocks(tmp_path):
    first = gpu(0, "00000000:18:00.0", nvlink={"replay": 1, "recovery": 0, "crc": 10})
    _health.Record(str(tmp_path)).mark_clean([first], now=BOOT + 1)
    grown = gpu(0, "00000000:18:00.0", nvlink={"replay": 2, "recovery": 0, "crc": 13})
    _health.assess([grown], {"state_dir": str(tmp_path), "xid": "skip", "nvlink_errors_max": 4}, Run(), boot=BOOT)
    assert _health.problems(grown) == []
    _health.assess([grown], {"state_dir": str(tmp_path), "xid": "skip", "nvlink_errors_max": 3}, Run(), boot=BOOT)
    assert _health.problems(grown) == ["nvlink: NVLink errors grew by 4 since the last clean check (crc +3, "
                                       "recovery +0, replay +1; health.nvlink_errors_max 3)"]


@pytest.mark.parametrize("setting, level", [("warn", "warn"), ("fail", "block"), ("ignore", None)])
def test_a_narrow_pcie_link_warns_by_default_and_a_lower_generation_is_a_note(setting, level):
    narrow = gpu(0, "00000000:18:00.0", pcie={"gen_current": 3, "gen_max": 5, "width_current": 8, "width_max": 16})
    report = _health.assess([narrow], {"xid": "skip", "pcie_downgrade": setting}, Run(), boot=BOOT)
    levels = dict((s["signal"], s["level"]) for s in narrow["health"]["signals"])
    assert levels.get("pcie_width") == level and levels["pcie_gen"] == "note"
    assert any("trains its generation down" in note for note in report["notes"])


# DCGM 4.6.0's `dcgmi diag -r 2 -j` (dcgmi/Diag.cpp 1056-1303, testing/python3/dcgm_diag_schema.json): the
# memory test failed on GPU 1 and set both GPUs' status to Fail; persistence mode off on GPU 0 (severity CONFIG)
DIAG_4 = {"DCGM Diagnostic": {"test_categories": [
    {"category": "Deployment", "tests": [{"name": "software", "results": [
        {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Fail", "warnings": [
            {"error_category": 8, "error_id": 29, "error_severity": 5,
             "warning": "Persistence Mode: Persistence mode for GPU 0 is disabled."}]},
        {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Fail"}],
        "test_summary": {"status": "Fail"}}]},
    {"category": "Hardware", "tests": [{"name": "memory", "results": [
        {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Fail"},
        {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Fail", "warnings": [
            {"error_category": 10, "error_id": 58, "error_severity": 2,
             "warning": "A memory mismatch was detected on GPU 1, but no error was reported by CUDA or NVML."}]}],
        "test_summary": {"status": "Fail"}}]},
    {"category": "Integration", "tests": [{"name": "pcie", "results": [
        {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
        {"entity_group": "CPU", "entity_group_id": 7, "entity_id": 1, "status": "Fail", "warnings": [
            {"error_severity": 2, "warning": "a CPU's, not a GPU's"}]}]}]}]}}
# DCGM 3.3.9's (dcgmi/Diag.cpp HelperJsonAddResult, HelperJsonAddBasicTests): "gpu_id" a string; a level-1 test
# names its GPU only beside an error and writes the message under "warnings"
DIAG_3 = {"DCGM GPU Diagnostic": {"test_categories": [
    {"category": "Deployment", "tests": [
        {"name": "Denylist", "results": [{"status": "Pass"}]},
        {"name": "Inforom", "results": [{"status": "Fail", "gpu_id": 1, "warnings": [
            {"warnings": "inforom corrupted on GPU 1", "error_id": 12, "error_category": 15, "error_severity": 2}]}]}]},
    {"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [
        {"gpu_id": "0", "status": "Pass"}, {"gpu_id": "1", "status": "Fail"}]}]}]}}


def test_dcgm_4_json_blocks_the_isolate_problem_on_its_gpu_and_warns_on_a_config_one():
    failed, warned, error = _health.parse_dcgm_json(json.dumps(DIAG_4), [0, 1])
    assert failed == {1: ["memory: A memory mismatch was detected on GPU 1, but no error was reported by CUDA or NVML."]}
    assert warned == {0: ["software: Persistence Mode: Persistence mode for GPU 0 is disabled."]}
    assert error is None  # GPU 0's shared "Fail" status blocks nothing: the warnings tell who failed


def test_dcgm_3_json_and_a_failure_that_says_nothing():
    failed, warned, error = _health.parse_dcgm_json(json.dumps(DIAG_3), [0, 1])
    assert failed == {1: ["Inforom: inforom corrupted on GPU 1", "GPU Memory failed"]} and warned == {}
    assert _health.parse_dcgm_json(json.dumps(DIAG_3), [0])[0] == {}  # GPU 1 is not in the scope


def test_dcgm_that_could_not_run_or_answered_no_diagnostic(monkeypatch):
    monkeypatch.setattr(_health.shutil, "which", lambda name: "/usr/bin/dcgmi")
    gone = {"DCGM Diagnostic": {"runtime_error": "Unable to connect to the host engine", "version": "4.6.0"}}
    run = Run(dcgmi=(226, json.dumps(gone), ""))
    assert _health.run_dcgm_diag(run, 1, [0], False)[2] == [
        "dcgmi diag -r 1 could not run: Unable to connect to the host engine"]
    assert run.calls == [["/usr/bin/dcgmi", "diag", "-r", "1", "-i", "0", "-j"]]
    run = Run(dcgmi=(1, "Error: unable to establish a connection to the specified host: localhost", ""))
    assert _health.run_dcgm_diag(run, 2, [0, 1], False)[2] == [
        "dcgmi diag -r 2 exited 1 without a diagnostic: Error: unable to establish a connection to the specified "
        "host: localhost"]
    run = Run(dcgmi=(205, json.dumps(DIAG_4), ""))  # exits 205 (ISOLATE), and the JSON says what and where
    report = _health.assess([gpu(0, "00000000:18:00.0"), gpu(1, "00000000:3B:00.0")],
                            {"xid": "skip", "dcgm_diag": 2}, run, phase="after", boot=BOOT)
    assert report["errors"] == [] and report["dcgm"]["level"] == 2
    assert any(w.startswith("GPU 0 (PCI 00000000:18:00.0) dcgm: dcgmi diag -r 2: software: Persistence")
               for w in report["warnings"])


def test_a_missing_dcgmi_is_a_note_or_with_require_an_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    gpus = [gpu(0, "00000000:18:00.0")]
    report = _health.assess(gpus, {"xid": "skip", "dcgm_diag": 1}, Run(), boot=BOOT)
    assert "dcgmi is not on PATH" in report["notes"][0] and report["errors"] == []
    report = _health.assess(gpus, {"xid": "skip", "dcgm_diag": 1, "dcgm": "require"}, Run(), boot=BOOT)
    assert "health.dcgm is require" in report["errors"][0]
    # level 2 runs only after the stop
    assert _health.assess(gpus, {"xid": "skip", "dcgm_diag": 2}, Run(), phase="before", boot=BOOT)["notes"] == []


def test_nvml_reads_the_bus_id_pcie_link_and_nvlink_counters():
    nv = fake_pynvml.FakeNvml([fake_pynvml.gpu(0, bus_id="00000000:3B:00.0", pcie=(4, 5, 8, 16),
                                               nvlink={0: (1, 2, 3, 4), 5: (0, 0, 1, 0)})])
    read = _gpu.NvmlBackend(nv).snapshot([0])[0]
    assert read["pci_bus_id"] == "00000000:3B:00.0"
    assert read["pcie"] == {"gen_current": 4, "gen_max": 5, "width_current": 8, "width_max": 16}
    assert read["nvlink"] == {"replay": 1, "recovery": 2, "crc": 8}


def test_the_default_fatal_list_is_the_catalogs_reset_and_reboot_codes():
    fatal = _health.settings(None)["xid_fatal"]
    # the reset and reboot buckets of NVIDIA's Xid catalog block; restart-the-application and ignore do not
    assert set([46, 48, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 151, 155, 156, 158]) <= set(fatal)
    assert set(range(144, 151)) <= set(fatal)
    assert not set([8, 13, 31, 43, 45, 61, 63, 92, 94, 121, 152, 153, 154, 157]) & set(fatal)
