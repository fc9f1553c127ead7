#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_idle_check
short_description: Verify that every GPU is free, and reclaim leftovers of our inference engines
version_added: 0.1.0
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
  - Health is reported per GPU and fails the check when bad, uncorrected volatile ECC errors,
    pending or failed row remapping, pending page retirement, and a pending MIG mode change.
author:
  - inferops.serving maintainers (@inferops)
extends_documentation_fragment:
  - inferops.serving.attributes
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
      - The default matches the inference engines' processes (sglang, vllm and VLLM::, trtllm and
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
    type: list
    elements: str
    default: [nvidia-persistenced, nv-hostengine, dcgm-exporter, nvidia-fabricmanager]
  require_gpus:
    description:
      - With V(true), a host without an NVIDIA GPU or driver fails the check.
      - With V(false), such a host reports RV(gpus=[]) and succeeds (a CPU host).
    type: bool
    default: true
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

- name: Reclaim a custom engine's leftovers too, never touching the monitoring agent
  inferops.serving.gpu_idle_check:
    reclaim: true
    reclaim_match: ['my_engine\.server', 'vllm']
    protected: [nvidia-persistenced, nv-hostengine, dcgm-exporter, nvidia-fabricmanager, my-monitor]
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
      description: Processes holding the GPU.
      type: list
      elements: dict
      sample: [{pid: 4242, name: python, used_mib: 8192, type: compute, verdict: reclaim}]
    clean:
      description: Whether this GPU is clean.
      type: bool
      sample: true
    health:
      description: ECC, row remapping, page retirement and MIG figures, with C(ok) and C(problems).
      type: dict
      sample: {ok: true, problems: [], ecc_uncorrected_volatile: 0, remapped_rows_pending: false}
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
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inferops.serving.plugins.module_utils import _gpu, _idle_check, _procs


def _import_pynvml():
    import pynvml  # pylint: disable=import-error
    return pynvml


def _holders(gpus, without=()):
    return dict(("GPU %d" % g["index"], sorted(p["pid"] for p in g["processes"] if p["pid"] not in without))
                for g in gpus)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpus=dict(type="list", elements="int"),
            backend=dict(type="str", default="auto", choices=["auto", "nvml", "nvidia_smi"]),
            max_used_mib=dict(type="int", default=0),
            timeout=dict(type="float", default=60.0),
            poll_interval=dict(type="float", default=0.1),
            reclaim=dict(type="bool", default=False),
            kill_grace=dict(type="float", default=10.0),
            reclaim_match=dict(type="list", elements="str"),
            reclaim_all=dict(type="bool", default=False),
            protected=dict(type="list", elements="str", default=list(_procs.DEFAULT_PROTECTED)),
            require_gpus=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    module.run_command_environ_update = dict(LANG="C", LC_ALL="C", LC_MESSAGES="C")

    for key in ("timeout", "poll_interval", "kill_grace"):
        if p[key] <= 0:
            module.fail_json(msg="%s must be a positive number of seconds, got %s" % (key, p[key]))
    if p["max_used_mib"] < 0:
        module.fail_json(msg="max_used_mib must be 0 or more, got %d" % p["max_used_mib"])
    if p["reclaim"] and p["kill_grace"] >= p["timeout"]:
        module.fail_json(msg="kill_grace (%s) must be less than timeout (%s), or a holder that ignores "
                             "SIGTERM is never killed" % (p["kill_grace"], p["timeout"]))
    if p["gpus"] is not None and any(i < 0 for i in p["gpus"]):
        module.fail_json(msg="gpus: indices are 0 or more, got %s" % p["gpus"])
    try:
        scope = _procs.Scope(patterns=p["reclaim_match"] if p["reclaim_match"] is not None else _procs.DEFAULT_RECLAIM_MATCH,
                             reclaim_all=p["reclaim_all"], protected=p["protected"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))

    def run(argv):
        return module.run_command(argv)

    def no_gpus(exc):
        if p["require_gpus"]:
            module.fail_json(msg="no NVIDIA GPU can be seen: %s (set require_gpus=false on hosts without GPUs)"
                             % exc, gpus=[], clean=False, killed=[], backend="none")
        module.exit_json(changed=False, clean=True, gpus=[], killed=[], waited_s=0.0, backend="none",
                         msg="no NVIDIA GPU on this host: %s" % exc)

    try:
        backend = _gpu.open_backend(p["backend"], _import_pynvml, run,
                                    lambda: module.get_bin_path("nvidia-smi"))
    except _gpu.NoDriverError as exc:
        no_gpus(exc)
    except _gpu.GpuError as exc:
        module.fail_json(msg=str(exc))

    try:
        try:
            present = backend.indices()
        except _gpu.NoDriverError as exc:
            no_gpus(exc)
        if not present:
            no_gpus("the NVIDIA driver reports no GPUs")
        indices = present if p["gpus"] is None else sorted(set(p["gpus"]))
        unknown = sorted(set(indices) - set(present))
        if unknown:
            module.fail_json(msg="gpus: no GPU with index %s on this host; it has %s"
                                 % (", ".join(map(str, unknown)), ", ".join(map(str, present)) or "none"))
        check = _idle_check.IdleCheck(
            backend, indices, max_used_mib=p["max_used_mib"], timeout=p["timeout"],
            poll_interval=p["poll_interval"], reclaim=p["reclaim"], kill_grace=p["kill_grace"],
            scope=scope, check_mode=module.check_mode)
        try:
            result = check.run()
        except _idle_check.CheckFailed as exc:
            module.fail_json(msg=exc.msg, **exc.result)
        except _gpu.GpuError as exc:
            module.fail_json(msg=str(exc))
    finally:
        backend.close()

    changed = result.pop("changed", False)
    if changed and module._diff:
        after = _holders(result["gpus"], without=result.get("would_kill", ()))
        result["diff"] = {"before": {"holders": check.first_holders}, "after": {"holders": after}}
    result["msg"] = "%d GPU(s) clean%s" % (len(result["gpus"]), ", killed %s" % result["killed"] if result["killed"] else "")
    if module.check_mode and result.get("would_kill"):
        result["msg"] = "would signal %s to free the GPUs" % result["would_kill"]
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
