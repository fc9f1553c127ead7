# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for DCGM's `dcgmi` at the hardware boundary (tests only, never in plugins/): `dcgmi diag -r LEVEL
-i 0,1 -j` answers from the fake host's state file ($FAKE_NVIDIA_SMI_STATE):
  "dcgm_fail": {"TEST": [gpu indices]}  a problem of severity ISOLATE (2) on each of those GPUs;
  "dcgm_warn": {"TEST": [gpu indices]}  one of severity CONFIG (5), as persistence mode off gives;
  "dcgm_shape": 3                        DCGM 3's JSON instead of DCGM 4's;
  "dcgm_runtime_error": "TEXT"           the diagnostic could not run.
Every call is appended to dcgmi-calls.jsonl beside the state file.

The JSON is the shape `dcgmi diag -j` prints (NVIDIA/DCGM dcgmi/Diag.cpp, nvvs/include/NvvsJsonStrings.h):
DCGM 4.6.0 "DCGM Diagnostic" with results per entity ({"entity_group": "GPU", "entity_id": N}) and a
test_summary; DCGM 3.3.9 "DCGM GPU Diagnostic" with "gpu_id" as a string. The tests of a level are DCGM 4's:
level 1 "software" (Deployment), level 2 adds "pcie" (Integration) and "memory" (Hardware)
(nvvs/src/NvidiaValidationSuite.cpp FillTestVectors). A failed test sets every GPU's status to Fail, as DCGM
does; dcgmi exits 205 (an ISOLATE problem) or 226 (another), as DCGM 4's GetFailureResult.
"""

import json
import os
import sys

import launcher

TESTS = [(1, "Deployment", "software"), (2, "Integration", "pcie"), (2, "Hardware", "memory")]
ISOLATE, CONFIG = 2, 5


def install(bindir):
    """Write an executable `dcgmi` into bindir that runs this file (tests/support/launcher.py); returns its path."""
    return launcher.install(bindir, "dcgmi", __file__)


def diag_test(name, indices, fails, warns, shape):
    """One test of the JSON: a result per GPU, its problems as warnings with their severity."""
    results = []
    bad = any(fails.get(name) or warns.get(name) or [])
    for gpu in indices:
        result = {"status": "Fail" if bad else "Pass"}
        if shape == 3:
            result["gpu_id"] = str(gpu)
        else:
            result.update(entity_group="GPU", entity_group_id=1, entity_id=gpu)
        warnings = []
        if gpu in fails.get(name, []):  # DCGM_FR_MEMORY_MISMATCH's shape: hardware memory, isolate
            warnings.append({"warning": "%s check failed on GPU %d (fake DCGM)" % (name, gpu), "error_id": 58,
                             "error_category": 10, "error_severity": ISOLATE})
        if gpu in warns.get(name, []):  # DCGM_FR_PERSISTENCE_MODE's: software other, config
            warnings.append({"warning": "Persistence mode for GPU %d is disabled (fake DCGM)" % gpu, "error_id": 29,
                             "error_category": 8, "error_severity": CONFIG})
        if warnings:
            result["warnings"] = warnings
        results.append(result)
    entry = {"name": name, "results": results}
    if shape != 3:
        entry["test_summary"] = {"status": "Fail" if bad else "Pass"}
    return entry


def main(_prog, argv):  # _prog: the name it was launched under (tests/support/launcher.py)
    path = os.environ.get("FAKE_NVIDIA_SMI_STATE")
    with open(path) as handle:
        state = json.load(handle)
    with open(os.path.join(os.path.dirname(path), "dcgmi-calls.jsonl"), "a") as handle:
        handle.write(json.dumps(argv) + "\n")
    if argv[:1] != ["diag"] or "-r" not in argv or "-i" not in argv or "-j" not in argv:
        sys.stderr.write("fake dcgmi only answers diag -r LEVEL -i GPUS -j\n")
        return 2
    level = int(argv[argv.index("-r") + 1])
    indices = [int(i) for i in argv[argv.index("-i") + 1].split(",")]
    shape = state.get("dcgm_shape", 4)
    root = "DCGM GPU Diagnostic" if shape == 3 else "DCGM Diagnostic"
    if state.get("dcgm_runtime_error"):
        print(json.dumps({root: {"runtime_error": state["dcgm_runtime_error"], "version": "fake"}}, indent=1))
        return 226
    fails, warns = state.get("dcgm_fail", {}), state.get("dcgm_warn", {})
    categories = []
    for at, category, name in TESTS:
        if at > level:
            continue
        if not categories or categories[-1]["category"] != category:
            categories.append({"category": category, "tests": []})
        categories[-1]["tests"].append(diag_test(name, indices, fails, warns, shape))
    print(json.dumps({root: {"test_categories": categories, "version": "fake"}}, indent=1, sort_keys=True))
    if any(set(fails.get(name, [])) & set(indices) for _level, _category, name in TESTS):
        return 205
    return 226 if any(set(warns.get(name, [])) & set(indices) for _level, _category, name in TESTS) else 0


if __name__ == "__main__":
    sys.exit(main("dcgmi", sys.argv[1:]))
