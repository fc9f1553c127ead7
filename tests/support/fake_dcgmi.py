# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for DCGM's `dcgmi` at the hardware boundary (tests only, never in plugins/): `dcgmi diag -r LEVEL
-i 0,1` answers from the fake host's state file ($FAKE_NVIDIA_SMI_STATE), key "dcgm_fail": {"TEST NAME":
[gpu indices]}; every call is appended to "dcgm_calls" of a log file beside it (dcgmi-calls.jsonl).

The table is the shape `dcgmi diag` prints (DCGM User Guide, "Diagnostics", "Run Levels and Tests", DCGM 3.3):
a box with a Diagnostic / Result header, the Deployment tests of level 1 (Denylist ... Inforom), the Integration
and Hardware tests of level 2 (PCIe, GPU Memory, ...), a result "Pass", "Skip" or "Fail - GPU: N" and a
"Warning" row under a failure; dcgmi exits non-zero (226, DCGM_ST_NVVS_ERROR's return through dcgmi) on a failure.
"""

import json
import os
import sys

LEVEL_1 = ["Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
           "Environment Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom"]
LEVEL_2 = ["PCIe", "GPU Memory"]


def install(bindir):
    launcher = os.path.join(str(bindir), "dcgmi")
    with open(launcher, "w") as handle:
        handle.write("#!%s -IS\nimport runpy, sys\nsys.argv[0] = 'dcgmi'\nrunpy.run_path(%r, run_name='__main__')\n"
                     % (os.path.realpath(sys.executable), os.path.abspath(__file__)))
    os.chmod(launcher, 0o755)
    return launcher


def row(name, result):
    return "| %-25s | %-46s |" % (name, result)


def main(argv):
    path = os.environ.get("FAKE_NVIDIA_SMI_STATE")
    with open(path) as handle:
        state = json.load(handle)
    with open(os.path.join(os.path.dirname(path), "dcgmi-calls.jsonl"), "a") as handle:
        handle.write(json.dumps(argv) + "\n")
    if argv[:1] != ["diag"] or "-r" not in argv:
        sys.stderr.write("fake dcgmi only answers diag -r LEVEL\n")
        return 2
    level = int(argv[argv.index("-r") + 1])
    fails = state.get("dcgm_fail", {})
    lines = ["Successfully ran diagnostic for group.",
             "+---------------------------+------------------------------------------------+",
             "| Diagnostic                | Result                                         |",
             "+===========================+================================================+",
             "|-----  Deployment  --------+------------------------------------------------|"]
    tests = LEVEL_1 + (["-----  Hardware  ----------"] + LEVEL_2 if level >= 2 else [])
    failed = False
    for test in tests:
        if test.startswith("-----"):
            lines.append("|%s+------------------------------------------------|" % test)
            continue
        gpus = fails.get(test)
        if gpus:
            failed = True
            lines.append(row(test, "Fail - GPU: %s" % ", ".join(str(g) for g in gpus)))
            for gpu in gpus:
                lines.append(row("Warning", "GPU %d %s check failed (fake DCGM)" % (gpu, test)))
        else:
            lines.append(row(test, "Pass"))
    lines.append("+---------------------------+------------------------------------------------+")
    print("\n".join(lines))
    return 226 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
