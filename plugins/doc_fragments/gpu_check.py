# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment(object):
    """The parameters of a GPU check (_idle_check.ARGUMENT_SPEC), as top-level options.

    inference_server takes the same parameters nested under its gpu_check option, where a fragment
    cannot apply, so its documentation repeats them as suboptions.
    """

    DOCUMENTATION = r"""
options:
  gpus:
    description:
      - GPU indices to check. Default is every GPU of the host.
      - An index the host does not have is an error that lists the indices it has.
    type: list
    elements: int
  backend:
    description:
      - How GPU state is read.
      - V(auto) uses NVML through C(nvidia-ml-py) when it imports and initialises, else C(nvidia-smi).
      - V(nvidia_smi) uses only the stable CSV query interface (C(--query-gpu), C(--query-compute-apps),
        C(--query-remapped-rows) with C(--format=csv,noheader,nounits)).
    type: str
    choices: [auto, nvml, nvidia_smi]
    default: auto
  max_used_mib:
    description:
      - Most memory a clean GPU may show as used, in MiB.
      - With NVML this is the v2 figure, which excludes driver-reserved memory (about 600 MiB on an
        idle H200 that NVML v1 counts as used).
    type: int
    default: 0
  timeout:
    description: Seconds to wait for every GPU to become clean before failing.
    type: float
    default: 60
  poll_interval:
    description: Seconds between two reads of the GPU state.
    type: float
    default: 0.1
  reclaim:
    description: Terminate GPU holders in scope (see O(reclaim_match) and O(reclaim_all)).
    type: bool
    default: false
  kill_grace:
    description: Seconds between SIGTERM and SIGKILL for a reclaimed holder. Must be less than O(timeout).
    type: float
    default: 10
  reclaim_match:
    description:
      - Regular expressions searched in a holder's command line; a match puts the holder in scope.
      - The default matches the inference engines' processes (sglang, vllm and C(VLLM::), trtllm and
        tensorrt_llm, transformers serve, text-generation-launcher and text-generation-server).
    type: list
    elements: str
  reclaim_all:
    description: Put every holder in scope that is not protected (and not this module or its ancestors).
    type: bool
    default: false
  protected:
    description:
      - Process names that are never signalled, whatever the scope. A protected holder makes the check
        fail at once, naming the process and the GPU.
      - Matched against the process's comm, the basename of its argv[0] and of its executable.
      - Unset, the built-in protected list applies (C(DEFAULT_PROTECTED) in C(plugins/module_utils/_procs.py)),
        the NVIDIA daemons that legitimately hold the GPUs, such as DCGM's C(nv-hostengine).
      - A list replaces the built-in one; to protect one more process, give the built-in names too.
    type: list
    elements: str
  require_gpus:
    description:
      - With V(true), a host without an NVIDIA GPU or driver fails the check.
      - With V(false), such a host reports RV(gpus=[]) and succeeds (a CPU host).
    type: bool
    default: true
  health:
    description:
      - The health signals read for each GPU of the check, besides the driver's counters (ECC, retired pages, row
        remaps, MIG mode), which are always read. Unset, each signal is read with its default below.
      - A problem found before a stop (O(inferops.serving.inference_server#module:gpu_check)) fails the switch with
        C(nothing was stopped), naming the GPU index, its PCI bus id and the signal; one found after the stop starts
        nothing and ends C(restore_failed).
      - See docs/gpu-health.md for the privileges each read needs.
    type: dict
    suboptions:
      xid:
        description:
          - Xid events of this boot in the kernel log (C(journalctl -k), else C(dmesg)), matched to each GPU by PCI
            bus id, since the GPU's last clean check (recorded in O(health.state_dir)) or its last O(health.ack),
            else since boot.
          - V(check) warns when the log cannot be read, naming why; V(require) makes that an error; V(skip) reads no log.
        type: str
        choices: [check, require, skip]
        default: check
      xid_fatal:
        description:
          - The Xid codes that make a GPU unhealthy; any other code in the window warns.
          - Unset, the codes whose immediate action in NVIDIA's Xid catalog is a GPU reset or a reboot (46, 48, 62,
            64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 144-151, 155, 156, 158). 94 (contained ECC,
            restart the application), 63 (a row remap event, while a pending remap blocks on its own) and 92 warn.
        type: list
        elements: int
      nvlink_errors_max:
        description: The NVLink CRC, replay and recovery errors a GPU may gain since its last clean check.
        type: int
        default: 0
      pcie_downgrade:
        description:
          - A PCIe link trained narrower than its maximum width (x8 of x16) V(warn)s, V(fail)s the GPU, or is V(ignore)d.
          - A lower link generation alone is a note, never a problem; an idle GPU trains it down to save power.
        type: str
        choices: [warn, fail, ignore]
        default: warn
      dcgm_diag:
        description:
          - Run C(dcgmi diag -r LEVEL -j) (DCGM 3 or 4) on the GPUs of the check; V(0) runs none. A problem of
            severity config or monitor (persistence mode off) warns; any other blocks its GPU.
          - Level V(1) (seconds) runs before the stop; level V(2) (about 2 minutes, wants idle GPUs) runs after the
            stop, which the run reports as downtime (C(health.dcgm) in the result of the check). M(inferops.serving.gpu_idle_check)
            runs either level.
        type: int
        choices: [0, 1, 2]
        default: 0
      dcgm:
        description: With V(check) a missing C(dcgmi) is a note; with V(require) it is an error.
        type: str
        choices: [check, require]
        default: check
      ack:
        description:
          - GPUs (index, PCI bus id or UUID) an operator has reset or repaired. Their Xid window and NVLink
            baseline move to now, recorded with the time in O(health.state_dir).
          - The roles pass C(-e gpu_health_ack=...).
        type: list
        elements: str
      state_dir:
        description:
          - Where C(gpu-health.json) keeps each GPU's last clean check and acknowledgement.
          - M(inferops.serving.inference_server) uses its O(inferops.serving.inference_server#module:state_dir) when
            unset; M(inferops.serving.gpu_idle_check) then records nothing and its window starts at boot.
        type: path
"""
