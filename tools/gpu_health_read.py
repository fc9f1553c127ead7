# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read this host's GPU health as the GPU check does (plugins/module_utils/_health.py): Xid events of this boot,
NVLink counters, the PCIe link and, when dcgmi is present, `dcgmi diag -r 1`; prints one JSON document.
Usage: python3 tools/gpu_health_read.py [--dcgm-diag 0|1] [--backend nvidia_smi|nvml|auto]
Reads only (no state dir: the Xid window starts at boot)."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def importable():
    """The collection as ansible_collections.inferops.serving, from this checkout."""
    base = tempfile.mkdtemp(prefix="inferops-health-")
    os.makedirs(os.path.join(base, "ansible_collections", "inferops"))
    os.symlink(ROOT, os.path.join(base, "ansible_collections", "inferops", "serving"))
    sys.path.insert(0, base)


def run(argv, **_kwargs):
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    except OSError as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dcgm-diag", type=int, default=1)
    parser.add_argument("--backend", default="auto")
    args = parser.parse_args()
    importable()
    from ansible_collections.inferops.serving.plugins.module_utils import _gpu, _health, _idle_check

    backend = _gpu.open_backend(args.backend, _idle_check.import_pynvml, run, lambda: shutil.which("nvidia-smi"))
    began = time.monotonic()
    gpus = backend.snapshot(backend.indices(), health=True)
    read_s = time.monotonic() - began
    report = _health.assess(gpus, {"dcgm_diag": args.dcgm_diag}, run, phase="standalone", write=False)
    for gpu in gpus:
        gpu["problems"] = _gpu.health_problems(gpu)
    out = {"backend": backend.name, "read_s": round(read_s, 3), "report": report,
           "gpus": [dict((k, g.get(k)) for k in ("index", "name", "uuid", "pci_bus_id", "pcie", "nvlink", "health", "problems"))
                    for g in gpus],
           "nvidia_smi_nvlink_e": run(["nvidia-smi", "nvlink", "-e"])[1][:4000],
           "whoami": run(["id"])[1].strip(), "kernel": os.uname().release}
    backend.close()
    print(json.dumps(out, indent=1, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
