#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_idle_check
short_description: Verify that every GPU is free, and reclaim leftovers of our inference engines
version_added: 0.5.0
description:
  - Checks every NVIDIA GPU of the host (or those listed in O(gpus)) until each one is clean or
    O(timeout) passes. A GPU is clean when no compute or graphics process holds it (on the GPU
    itself or on any of its MIG devices), its used memory is at most O(max_used_mib), and its
    health is good.
  - Polls every O(poll_interval) seconds instead of sleeping a fixed time, so it returns within one
    poll of the last holder releasing its memory.
  - With O(reclaim=true), terminates the holders in scope (SIGTERM, then SIGKILL after
    O(kill_grace) seconds). A holder's whole process group is signalled only when every member of
    the group is itself in scope. Processes named in O(protected), this module's own process and its
    ancestors are never signalled.
  - Nor is a process of a live inference_server instance, one whose C(INFEROPS_INSTANCE) marker names an
    instance whose state file records a running engine, or whose lock is held. Whatever O(reclaim_match)
    or O(reclaim_all) say, a GPU such a process holds fails the check, naming the instance, its pid and
    variant. A process whose marker names an instance with no live record is a leftover, in scope like
    any other engine process.
  - Health is reported per GPU and fails the check when bad, uncorrected volatile ECC errors,
    pending or failed row remapping, pending page retirement, and a pending MIG mode change.
author:
  - inferops.serving maintainers (@inferops)
extends_documentation_fragment:
  - inferops.serving.attributes
  - inferops.serving.gpu_check
attributes:
  check_mode:
    support: full
    details: Reports which processes would be signalled and signals none.
  diff_mode:
    support: full
    details: Shows the GPU holders before and after a reclaim.
  idempotent:
    support: full
    details: A second run finds the GPUs clean and kills nothing.
requirements:
  - An NVIDIA driver with C(nvidia-smi) on PATH, or the C(nvidia-ml-py) package (C(import pynvml)) on the target.
  - Linux C(/proc) to inspect and signal holders.
notes:
  - Inside a container NVML reports host PIDs; holders then cannot be matched to processes and are
    reported as not visible, and are never signalled. Run the check on the host (or in the host PID namespace).
  - nvidia-smi's CSV interface lists compute processes only; graphics holders are still caught by O(max_used_mib).
seealso:
  - name: The inferops.serving.gpu_clean role
    description: Wraps this module for playbooks, with reclaim on.
    link: https://example.invalid/inferops/serving/blob/main/roles/gpu_clean/README.md
"""

EXAMPLES = r"""
- name: Fail unless all eight GPUs are free
  inferops.serving.gpu_idle_check:

- name: Reclaim leftovers of our engines, then wait until every GPU is clean
  inferops.serving.gpu_idle_check:
    reclaim: true
    kill_grace: 15
    timeout: 120

- name: Only GPUs 0-3, allowing the few MiB some drivers always show
  inferops.serving.gpu_idle_check:
    gpus: [0, 1, 2, 3]
    max_used_mib: 16
    backend: nvidia_smi

- name: On a CPU-only demo host, succeed with no GPUs
  inferops.serving.gpu_idle_check:
    require_gpus: false
  register: gpu_state

- name: Reclaim a custom engine's leftovers too (the built-in protected list still applies)
  inferops.serving.gpu_idle_check:
    reclaim: true
    reclaim_match: ['my_engine\.server', 'vllm']
"""

RETURN = r"""
clean:
  description: Whether every checked GPU was clean at the end.
  returned: always
  type: bool
  sample: true
gpus:
  description: One entry per GPU checked, as last read.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: GPU index.
      type: int
      sample: 7
    uuid:
      description: GPU UUID.
      type: str
      sample: GPU-5a8e3c1b-0f6d-4e8a-9c2b-7d1e0a3f4b5c
    name:
      description: Product name.
      type: str
      sample: NVIDIA H200
    memory_used_mib:
      description: Used memory in MiB (NVML v2 excludes driver-reserved memory).
      type: int
      sample: 0
    memory_total_mib:
      description: Total memory in MiB.
      type: int
      sample: 143771
    memory_reserved_mib:
      description: Driver-reserved memory in MiB (NVML v2 only, else null).
      type: int
      sample: 593
    processes:
      description:
        - Processes holding the GPU. C(verdict) is C(reclaim), C(out_of_scope), C(protected), C(self),
          C(invisible) or C(instance) (another live instance's, never signalled).
        - A process that carries an instance marker also has C(instance) (its name) and C(instance_state)
          (C(own), C(instance) while that instance is live, C(leftover) once it has no live record).
      type: list
      elements: dict
      sample:
        - {pid: 4242, name: python, used_mib: 8192, type: compute, verdict: reclaim, instance: b, instance_state: leftover}
    clean:
      description: Whether this GPU is clean.
      type: bool
      sample: true
    health:
      description:
        - ECC, row remapping, page retirement and MIG figures, with C(ok) and C(problems).
        - C(signals), each C({signal, level, msg}) with C(signal) one of C(xid), C(nvlink), C(pcie_width), C(pcie_gen),
          C(dcgm) and C(level) C(block) (a problem), C(warn) or C(note); C(xid) lists the Xid events in the window.
      type: dict
      sample: {ok: true, problems: [], ecc_uncorrected_volatile: 0, remapped_rows_pending: false, signals: []}
    pci_bus_id:
      description: The PCI bus id as NVML writes it.
      type: str
      sample: "00000000:3B:00.0"
    pcie:
      description: The PCIe link, C(gen_current), C(gen_max), C(width_current), C(width_max) (null where unknown).
      type: dict
      sample: {gen_current: 5, gen_max: 5, width_current: 16, width_max: 16}
    nvlink:
      description: NVLink error counters summed over the links (C(replay), C(recovery), C(crc)); null without NVLink.
      type: dict
      sample: null
    mig_mode:
      description: C(enabled), C(disabled) or null where unsupported.
      type: str
      sample: disabled
    mig_devices:
      description: MIG devices of this GPU (NVML backend), each with its memory and holder PIDs.
      type: list
      elements: dict
      sample: []
killed:
  description: PIDs that were signalled (SIGTERM, and SIGKILL where they outlived O(kill_grace)).
  returned: always
  type: list
  elements: int
  sample: [4242]
would_kill:
  description: In check mode, the PIDs that a reclaim would signal.
  returned: check mode, when something would be reclaimed
  type: list
  elements: int
  sample: [4242]
waited_s:
  description: Seconds from the first read of GPU state to the result.
  returned: always
  type: float
  sample: 0.412
backend:
  description: The backend used, C(nvml), C(nvidia_smi), or C(none) on a host without GPUs.
  returned: always
  type: str
  sample: nvml
health:
  description:
    - What the health signals of O(health) found for the whole check (each GPU's own are in its C(health.signals)).
    - C(warnings) (also given as warnings), C(notes), C(errors), C(acked) (the GPUs O(health.ack) moved, with the
      time), C(xid_source) (C(journalctl -k) or C(dmesg)) and C(dcgm) (level, seconds, phase) when DCGM ran.
  returned: when GPUs were read
  type: dict
  sample: {warnings: [], notes: ["dcgmi is not on PATH (DCGM not installed): the level 1 diagnostic was not run"],
           errors: [], acked: [], xid_source: journalctl -k, dcgm: null}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inferops.serving.plugins.module_utils import _idle_check


def main():
    module = AnsibleModule(argument_spec=_idle_check.ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    module.run_command_environ_update = dict(LANG="C", LC_ALL="C", LC_MESSAGES="C")
    errors = _idle_check.validate(p)
    if errors:
        module.fail_json(msg="; ".join(errors))
    try:
        result = _idle_check.verify(p, module.run_command, lambda: module.get_bin_path("nvidia-smi"),
                                    check_mode=module.check_mode, phase="standalone")
    except _idle_check.CheckFailed as exc:
        module.fail_json(msg=exc.msg, **exc.result)
    for warning in (result.get("health") or {}).get("warnings", []):
        module.warn(warning)
    diff = result.pop("diff", None)
    if diff and module._diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
