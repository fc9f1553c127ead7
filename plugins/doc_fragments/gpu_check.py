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
"""
