# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A sick GPU never gets a server (issue 36): playbooks/switch_variant.yml on 8 fake GPUs whose kernel log,
NVLink counters, PCIe link and DCGM diagnostic say something is wrong with GPU 2. Each signal refuses the switch
before the stop: the old engine's pid is unchanged in the process table, on the port and in the state file.
One found only after the stop (DCGM level 2) starts nothing and ends restore_failed, naming the GPU."""

from __future__ import annotations

import json

from switchbed import PLAY, engines, flat, fleet, observed, serving, started, switch, untouched  # noqa: F401 pylint: disable=unused-import

from ansible_collections.inferops.serving.plugins.module_utils import _procs

BUS_2 = "00000000:3A:00.0"  # fake_nvidia_smi.BUS_IDS[2]
CHECK = {"backend": "nvidia_smi", "timeout": 10, "kill_grace": 2}


def with_health(fleet, **health):
    fleet.set_vars(serving_gpu_check=dict(CHECK, health=health))


def refused(switch, fleet, before, signal, extra=None):
    run = switch("slow", extra=extra)
    out = flat(run)
    assert run.rc != 0, out[-2000:]
    assert "nothing was stopped" in out and "ROLLED BACK" not in out and "RESTORE FAILED" not in out, out[-3000:]
    assert "GPU 2 (" in out and "PCI %s" % BUS_2 in out and "is unhealthy: %s:" % signal in out, out[-3000:]
    assert run.recap()["changed"] == 0
    untouched(fleet, before)  # same pid in the state file, on the port, the one engine of the instance
    assert _procs.alive(before["pid"])
    observed("%s on GPU 2 (old pid %d)" % (signal, before["pid"]), run, fleet)
    return run


def test_a_fatal_xid_refuses_the_switch_until_acknowledged(switch, fleet):
    with_health(fleet)
    before = started(switch, fleet)
    fleet.gpus.xid(2, 94, "Contained ECC error")  # restart the application: warns, does not block
    fleet.gpus.xid(2, 79, "GPU has fallen off the bus.")
    run = refused(switch, fleet, before, "xid")
    assert "Xid 79" in flat(run) and "gpu_health_ack=%s" % BUS_2 in flat(run)
    acked = switch("slow", extra={"gpu_health_ack": BUS_2, "bench": "never"})
    assert acked.rc == 0, flat(acked)[-3000:]
    record = json.loads((fleet.state_dir / "gpu-health.json").read_text())
    assert record["0000:3a:00"]["ack"]["by"] == BUS_2 and record["0000:3a:00"]["ack"]["at"] > before["started_at"]


def test_an_unreadable_kernel_log_warns_and_with_require_refuses(switch, fleet):
    with_health(fleet, xid="require")
    before = started(switch, fleet)
    fleet.gpus.state.update(journal="denied", dmesg="denied")
    fleet.gpus.save()
    run = switch("slow")
    out = flat(run)
    assert run.rc != 0 and "nothing was stopped" in out and "the kernel log cannot be read" in out, out[-3000:]
    assert "insufficient permissions" in out and "Operation not permitted" in out, out[out.find("cannot be read") - 300:][:1500]
    untouched(fleet, before)


def test_nvlink_errors_growing_since_the_last_clean_check_refuse_the_switch(switch, fleet):
    for gpu in fleet.gpus.state["gpus"]:
        gpu["nvlink"] = {"replay": 0, "recovery": 0, "crc": 0}
    fleet.gpus.save()
    with_health(fleet, nvlink_errors_max=3)
    before = started(switch, fleet)
    fleet.gpus.state["gpus"][2]["nvlink"] = {"replay": 2, "recovery": 0, "crc": 5}
    fleet.gpus.save()
    run = refused(switch, fleet, before, "nvlink")
    assert "NVLink errors grew by 7" in flat(run)


def test_a_narrowed_pcie_link_refuses_the_switch_with_fail(switch, fleet):
    with_health(fleet, pcie_downgrade="fail")
    before = started(switch, fleet)
    fleet.gpus.state["gpus"][2]["pcie"] = [4, 5, 8, 16]
    fleet.gpus.save()
    run = refused(switch, fleet, before, "pcie_width")
    assert "x8 below its maximum x16" in flat(run)


def test_dcgm_level_1_refuses_before_the_stop_and_a_configuration_warning_does_not(switch, fleet):
    fleet.gpus.install_dcgmi()
    with_health(fleet, dcgm_diag=1)
    # persistence mode off (severity CONFIG: "can be configured"): DCGM 4 exits 226, and the switch goes on
    fleet.gpus.state["dcgm_warn"] = {"software": [2]}
    fleet.gpus.save()
    run = switch("fast", extra={"bench": "never"})
    assert run.rc == 0, flat(run)[-3000:]
    warned = "GPU 2 (PCI %s) dcgm: dcgmi diag -r 1: software: Persistence mode for GPU 2 is disabled" % BUS_2
    health = [r["result"]["gpu_check"]["health"] for r in run.results("inference_server") if r["result"].get("gpu_check")]
    assert health[-1]["dcgm"]["phase"] == "before" and any(w.startswith(warned) for w in health[-1]["warnings"])
    assert warned in " ".join(run.stderr.split()), run.stderr[-2000:]  # the call's [WARNING]
    before = serving(fleet, "fast")
    fleet.gpus.state["dcgm_fail"] = {"software": [2]}  # severity ISOLATE: the GPU cannot take the workload
    fleet.gpus.save()
    run = refused(switch, fleet, before, "dcgm")
    assert "dcgmi diag -r 1: software: software check failed on GPU 2 (fake DCGM)" in flat(run)
    assert all(call[:3] == ["diag", "-r", "1"] and call[-1] == "-j" for call in fleet.gpus.dcgmi_calls())


def test_dcgm_level_2_after_the_stop_starts_nothing_and_ends_restore_failed(switch, fleet):
    fleet.gpus.install_dcgmi()
    with_health(fleet, dcgm_diag=2)
    before = started(switch, fleet)
    fleet.gpus.state.update(dcgm_fail={"memory": [2]}, dcgm_shape=3)  # DCGM 3's JSON
    fleet.gpus.save()
    run = switch("slow")
    out = flat(run)
    assert run.rc != 0 and "RESTORE FAILED" in out, out[-3000:]
    assert "GPU 2 (" in out and "PCI %s" % BUS_2 in out and "dcgm: dcgmi diag -r 2: memory: memory check failed on GPU 2" in out
    assert not _procs.alive(before["pid"]) and engines(fleet) == {}  # nothing started on the sick GPU
    assert fleet.record() is None
    observed("dcgm level 2 after the stop (old pid %d)" % before["pid"], run, fleet)
