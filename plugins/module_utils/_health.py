# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health beyond what the driver's counters say at one instant: Xid events in the kernel log, NVLink
error counters against the last clean check, the PCIe link against its maximum, and DCGM's diagnostic.
Standard library only; reads, and writes only its own record (<state_dir>/gpu-health.json).

Each GPU read by _gpu carries pci_bus_id, pcie {gen_current, gen_max, width_current, width_max} and
nvlink {replay, recovery, crc} (None where unknown). assess() adds to each GPU's health "signals": a list of
{"signal", "level" (block | warn | note), "msg"}; a "block" signal is a problem _gpu.health_problems names.

The Xid lines are the driver's (NVIDIA, "Xid Errors", docs.nvidia.com/deploy/xid-errors/index.html, "Viewing
Xid Error Messages"):  NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
The kernel names the GPU by PCI domain:bus:device; NVML's pci.bus_id is 00000000:3B:00.0 (8-digit domain,
upper case, function): both are reduced to 0000:3b:00.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time

# The blocking Xids: NVIDIA's Xid catalog, https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
# column "Resolution Bucket (Immediate Action)" (cross-read with NVIDIA/NVSentinel's
# distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv at 6f8b0fcf, which agrees on every
# code here): the codes whose action is RESET_GPU (46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156,
# 158), RESTART_VM (151) or RESTART_BM (79), and the workflows that end in a reset or a reboot: 48 double-bit ECC,
# 74 NVLink, 144-150 NVLink5. A new server on such a GPU fails or computes wrong until then.
# Not blocking: RESTART_APP (8, 13, 31, 94 contained ECC: only the application that hit it ends), IGNORE (43,
# 63 row remap event: the pending remap itself blocks through remapped_rows.pending, _gpu.py; 92 high single-bit
# rate; 121, 152, 153, 157), 45 (the application's own teardown), 61 (unused on A100 and later), 154
# (informational: it reports the recovery action of another Xid, judged by that Xid's own code).
DEFAULT_XID_FATAL = [46, 48, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 144, 145, 146, 147, 148, 149,
                     150, 151, 155, 156, 158]

ARGUMENT_SPEC = dict(
    xid=dict(type="str", default="check", choices=["check", "require", "skip"]),
    xid_fatal=dict(type="list", elements="int"),
    nvlink_errors_max=dict(type="int", default=0),
    pcie_downgrade=dict(type="str", default="warn", choices=["warn", "fail", "ignore"]),
    dcgm_diag=dict(type="int", default=0, choices=[0, 1, 2]),
    dcgm=dict(type="str", default="check", choices=["check", "require"]),
    ack=dict(type="list", elements="str"),
    state_dir=dict(type="path"),
)

DEFAULTS = dict((key, spec.get("default")) for key, spec in ARGUMENT_SPEC.items())

RECORD = "gpu-health.json"
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?\): (\d+)(?:, ?(.*))?")
# journalctl -o short-unix: "1733430000.123456 host kernel: NVRM: Xid ..."; dmesg: "[  123.456789] NVRM: Xid ..."
_UNIX = re.compile(r"^(\d+(?:\.\d+)?) ")
_MONO = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]")
# journalctl without the rights to the system journal says so on stderr and prints nothing (systemd 252,
# src/journal/journalctl.c access_check / "Hint: You are currently not seeing messages from other users
# and the system."); without journald it finds no file at all
_JOURNAL_DENIED = ("insufficient permissions", "not seeing messages from other users", "no journal files were found",
                   "permission denied")


def settings(health):
    """The health settings with their defaults (a gpu_check without health reads every signal)."""
    out = dict(DEFAULTS)
    out.update(dict((k, v) for k, v in (health or {}).items() if v is not None))
    if out["xid_fatal"] is None:
        out["xid_fatal"] = list(DEFAULT_XID_FATAL)
    return out


def validate(health):
    errors = []
    if health and health.get("nvlink_errors_max") is not None and health["nvlink_errors_max"] < 0:
        errors.append("health.nvlink_errors_max must be 0 or more, got %d" % health["nvlink_errors_max"])
    if health and health.get("state_dir") and not os.path.isabs(health["state_dir"]):
        errors.append("health.state_dir must be an absolute path, got %r" % health["state_dir"])
    return errors


def bus_key(text):
    """'0000:3b:00' from NVML's '00000000:3B:00.0' or the kernel's 'PCI:0000:3b:00'; None when not a bus id."""
    if not text:
        return None
    found = re.match(r"^(?:PCI:)?([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.[0-7])?$", str(text).strip())
    if not found:
        return None
    domain, bus, device = found.groups()
    return "%04x:%s:%s" % (int(domain, 16) & 0xFFFF, bus.lower(), device.lower())


def boot_time(proc_stat="/proc/stat"):
    try:
        with open(proc_stat) as handle:
            for line in handle:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (IOError, OSError, ValueError):
        pass
    return 0.0


def parse_xids(text, boot=0.0):
    """[{"at": epoch seconds or None, "bus": '0000:3b:00', "code": 79, "line": text}] from journalctl -o short-unix
    or dmesg lines (seconds since boot, made epoch with boot)."""
    events = []
    for line in (text or "").splitlines():
        found = _XID.search(line)
        if not found:
            continue
        at = None
        unix, mono = _UNIX.match(line), _MONO.match(line)
        if unix:
            at = float(unix.group(1))
        elif mono:
            at = boot + float(mono.group(1))
        events.append({"at": at, "bus": bus_key(found.group(1)), "code": int(found.group(2)),
                       "line": line[found.start():].strip()[:300]})
    return events


def read_kernel_log(run, since, boot=None):
    """(events, source, None) or (None, None, why): Xid lines of this boot from `journalctl -k`, else `dmesg`."""
    boot = boot_time() if boot is None else boot
    whys = []
    argv = ["journalctl", "-k", "-b", "-o", "short-unix", "--no-pager", "-q", "--since", "@%d" % int(max(since, boot))]
    rc, out, err = run(argv)
    text = ("%s %s" % (out or "", err or "")).lower()
    if rc == 0 and not (not (out or "").strip() and any(hint in text for hint in _JOURNAL_DENIED)):
        return parse_xids(out, boot), "journalctl -k", None
    whys.append("journalctl -k: %s" % (" ".join((err or out or "exit %d" % rc).split())[:200] or "exit %d" % rc))
    rc, out, err = run(["dmesg"])
    if rc == 0:
        return parse_xids(out, boot), "dmesg", None
    whys.append("dmesg: %s" % (" ".join((err or out or "exit %d" % rc).split())[:200] or "exit %d" % rc))
    return None, None, "; ".join(whys)


# `dcgmi diag -r N -j` prints JSON, read here rather than the table: only the JSON carries each problem's
# severity, and the table's shape changed between DCGM 3 and 4 while the JSON's did little. The two shapes
# (NVIDIA/DCGM, dcgmi/Diag.cpp and nvvs/include/NvvsJsonStrings.h at 3.3.9 b0ec3c6 and 4.6.0 51b65cc):
#   DCGM 4: {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "memory",
#           "results": [{"entity_group": "GPU", "entity_id": 1, "status": "Fail", "warnings": [{"warning": "...",
#           "error_id": 58, "error_category": 10, "error_severity": 2}]}], "test_summary": {...}}]}]}}
#   DCGM 3: {"DCGM GPU Diagnostic": {... the same, but a result names its GPU as "gpu_id": "1" (a string; the
#           level-1 tests give it only beside an error, and write the message under "warnings")}}
#   either: {"...": {"runtime_error": "...", "version": "..."}} when the diagnostic could not run.
# A result's status is not the GPU's: the memory test sets one status for all the GPUs it ran on (DCGM 4.6.0
# nvvs/plugin_src/memory/memory.cpp), and a warning makes every GPU of the software test "Fail"; the problems
# are told by the warnings, each tied to its GPU.
# The severities (dcgmlib/dcgm_errors.h dcgmErrorSeverity_t): 0 NONE, 1 MONITOR ("can perform workload, but
# needs to be monitored"), 5 CONFIG ("can be configured": persistence mode off) warn; 2 ISOLATE, 3 UNKNOWN,
# 4 TRIAGE, 6 RESET (drain and reset) block, as does a warning without a severity.
DCGM_ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
DCGM_WARN_SEVERITIES = (0, 1, 5)


def _dcgm_gpus(result, indices):
    """The GPUs of indices a result of either shape is about: the one it names, none when it names another
    entity (a CPU), all of them when it names none."""
    if "entity_id" in result:
        named = [result["entity_id"]] if result.get("entity_group", "GPU") == "GPU" else []
    elif result.get("gpu_id") is not None:
        try:
            named = [int(result["gpu_id"])]
        except (TypeError, ValueError):
            named = list(indices)
    else:
        named = list(indices)
    return [index for index in named if index in indices]


def parse_dcgm_json(text, indices):
    """`dcgmi diag -j` (DCGM 3 or 4) -> ({index: [blocking problems]}, {index: [warnings]}, runtime error or
    None) for the GPUs in indices. A problem tied to no GPU is each GPU's. ValueError: no diagnostic JSON."""
    doc = json.loads(text)
    root = next((doc[key] for key in DCGM_ROOTS if isinstance(doc, dict) and key in doc), None)
    if not isinstance(root, dict):
        raise ValueError("no %s object" % " or ".join(repr(k) for k in DCGM_ROOTS))
    failed, warned = {}, {}
    for category in root.get("test_categories") or []:
        for test in category.get("tests") or []:
            name, told = test.get("name", "?"), False
            for result in test.get("results") or []:
                for warning in result.get("warnings") or []:
                    msg = " ".join(str(warning.get("warning") or warning.get("warnings") or "(no message)").split())
                    into = warned if warning.get("error_severity") in DCGM_WARN_SEVERITIES else failed
                    for index in _dcgm_gpus(result, indices):
                        into.setdefault(index, []).append("%s: %s" % (name, msg))
                    told = True
            if not told:  # a failure that says nothing: each GPU whose result failed
                for result in test.get("results") or []:
                    if str(result.get("status", "")).lower() == "fail":
                        for index in _dcgm_gpus(result, indices):
                            failed.setdefault(index, []).append("%s failed" % name)
    return failed, warned, root.get("runtime_error") or None


def run_dcgm_diag(run, level, indices, required):
    """({index: [blocking problems]}, {index: [warnings]}, [errors], note or None, seconds): dcgmi diag -r level
    -j on indices. A missing dcgmi is a note (an error with required); a diagnostic that could not run, or an
    answer that is no diagnostic, is an error."""
    exe = shutil.which("dcgmi")
    if exe is None:
        why = "dcgmi is not on PATH (DCGM not installed): the level %d diagnostic was not run" % level
        if required:
            return {}, {}, [why + " and health.dcgm is require"], None, 0.0
        return {}, {}, [], why, 0.0
    began = time.monotonic()
    rc, out, err = run([exe, "diag", "-r", str(level), "-i", ",".join(str(i) for i in indices), "-j"])
    took = round(time.monotonic() - began, 3)
    try:
        failed, warned, runtime_error = parse_dcgm_json(out, indices)
    except ValueError:
        text = " ".join((err or out or "").split())[:300]
        return {}, {}, ["dcgmi diag -r %d exited %d without a diagnostic: %s" % (level, rc, text)], None, took
    if runtime_error:
        return failed, warned, ["dcgmi diag -r %d could not run: %s" % (level, runtime_error)], None, took
    return failed, warned, [], None, took


class Record(object):
    """<state_dir>/gpu-health.json: per GPU (by bus id), the last clean check (time and NVLink counters) and
    the last acknowledgement (time and what named it)."""

    def __init__(self, state_dir):
        self.path = os.path.join(state_dir, RECORD) if state_dir else None

    def load(self):
        if not self.path:
            return {}
        try:
            with open(self.path) as handle:
                data = json.load(handle)
            return data if isinstance(data, dict) else {}
        except (IOError, OSError, ValueError):
            return {}

    def save(self, data):
        if not self.path:
            return
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".gpu-health-", dir=directory)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(data, sort_keys=True, indent=1) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.path)

    def mark_clean(self, gpus, now=None):
        """Record a clean check of gpus: the Xid window and the NVLink baseline start here."""
        if not self.path:
            return
        now = time.time() if now is None else now
        data = self.load()
        for gpu in gpus:
            key = bus_key(gpu.get("pci_bus_id"))
            if key:
                entry = data.setdefault(key, {})
                entry.update(index=gpu["index"], uuid=gpu.get("uuid"), clean_at=now, nvlink=gpu.get("nvlink"))
        self.save(data)


def _matches(gpu, token):
    token = str(token).strip()
    return token == str(gpu["index"]) or (bus_key(token) is not None and bus_key(token) == bus_key(gpu.get("pci_bus_id"))) \
        or token == gpu.get("uuid")


def _signal(gpu, signal, level, msg):
    gpu["health"].setdefault("signals", []).append({"signal": signal, "level": level, "msg": msg})


def assess(gpus, health, run, phase="before", write=True, now=None, boot=None):
    """Read each health signal of gpus (as _gpu read them) with the settings health (settings()); adds
    health["signals"] to each GPU and returns {"warnings": [...], "notes": [...], "errors": [...], "acked": [...],
    "dcgm": {...} or None} for the whole check. phase: "before" the stop (DCGM level 1) or "after" it (level 2:
    level 2 wants idle GPUs), "standalone" (gpu_idle_check: either level). write=False (check mode) records nothing."""
    health = settings(health)
    now = time.time() if now is None else now
    boot = boot_time() if boot is None else boot
    record = Record(health.get("state_dir"))
    data = record.load()
    out = {"warnings": [], "notes": [], "errors": [], "acked": [], "dcgm": None}
    for gpu in gpus:
        gpu["health"]["signals"] = []
    # acknowledgements first: an operator who repaired a GPU moves its window (and NVLink baseline) to now
    acked = False
    for token in health.get("ack") or []:
        hits = [g for g in gpus if _matches(g, token)]
        if not hits:
            out["errors"].append("gpu_health_ack %r names no GPU of this check (an index, a PCI bus id or a UUID: %s)"
                                 % (token, ", ".join("%d=%s" % (g["index"], g.get("pci_bus_id")) for g in gpus)))
        for gpu in hits:
            key = bus_key(gpu.get("pci_bus_id")) or "index-%d" % gpu["index"]
            entry = data.setdefault(key, {})
            entry["ack"] = {"at": now, "by": str(token)}
            entry["nvlink"] = gpu.get("nvlink")
            out["acked"].append({"index": gpu["index"], "pci_bus_id": gpu.get("pci_bus_id"), "at": now})
            acked = True
    if acked and write:
        record.save(data)

    def since(gpu):
        entry = data.get(bus_key(gpu.get("pci_bus_id")) or "index-%d" % gpu["index"], {})
        marks = [entry.get("clean_at") or 0, (entry.get("ack") or {}).get("at") or 0]
        return max([boot] + marks), entry

    # Xid events
    if health["xid"] != "skip" and gpus:
        earliest = min(since(g)[0] for g in gpus)
        events, source, why = read_kernel_log(run, earliest, boot)
        if events is None:
            msg = "the kernel log cannot be read, so Xid events were not checked: %s" % why
            (out["errors"] if health["xid"] == "require" else out["warnings"]).append(
                msg + (" (health.xid is require)" if health["xid"] == "require" else ""))
        else:
            out["xid_source"] = source
            fatal = set(health["xid_fatal"])
            for gpu in gpus:
                start, _entry = since(gpu)
                key = bus_key(gpu.get("pci_bus_id"))
                mine = [e for e in events if key and e["bus"] == key and (e["at"] is None or e["at"] >= start)]
                gpu["health"]["xid"] = [{"code": e["code"], "at": e["at"]} for e in mine]
                for event in mine:
                    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(event["at"])) if event["at"] else "this boot"
                    text = "Xid %d at %s (%s, since the last clean check or ack)" % (event["code"], when, source)
                    if event["code"] in fatal:
                        _signal(gpu, "xid", "block", text + "; after a repair or reset, run again with "
                                "-e gpu_health_ack=%s" % gpu.get("pci_bus_id", gpu["index"]))
                    else:
                        _signal(gpu, "xid", "warn", text + " (not in health.xid_fatal)")
    # NVLink counters against the last clean check
    for gpu in gpus:
        counters = gpu.get("nvlink")
        if not counters:
            continue
        _start, entry = since(gpu)
        base = entry.get("nvlink")
        if not base:
            _signal(gpu, "nvlink", "note", "NVLink error counters %s have no clean check to compare with yet" % counters)
            continue
        growth = dict((k, (counters.get(k) or 0) - (base.get(k) or 0)) for k in counters)
        total = sum(v for v in growth.values() if v > 0)
        gpu["health"]["nvlink_growth"] = growth
        if total > health["nvlink_errors_max"]:
            grown = ", ".join("%s +%d" % kv for kv in sorted(growth.items()))
            _signal(gpu, "nvlink", "block", "NVLink errors grew by %d since the last clean check (%s; "
                    "health.nvlink_errors_max %d)" % (total, grown, health["nvlink_errors_max"]))
    # the PCIe link against its maximum
    for gpu in gpus:
        pcie = gpu.get("pcie") or {}
        width, width_max = pcie.get("width_current"), pcie.get("width_max")
        gen, gen_max = pcie.get("gen_current"), pcie.get("gen_max")
        if width and width_max and width < width_max and health["pcie_downgrade"] != "ignore":
            level = "block" if health["pcie_downgrade"] == "fail" else "warn"
            _signal(gpu, "pcie_width", level, "PCIe link trained at x%d below its maximum x%d (host-to-device "
                    "bandwidth cut%s)" % (width, width_max, "; health.pcie_downgrade is fail" if level == "block" else ""))
        if gen and gen_max and gen < gen_max:
            _signal(gpu, "pcie_gen", "note", "PCIe link at generation %d below its maximum %d (an idle GPU trains "
                    "its generation down to save power: only a reading under load tells)" % (gen, gen_max))
    # DCGM's diagnostic
    level = health["dcgm_diag"]
    if level and gpus and level in {"before": (1,), "after": (2,), "standalone": (1, 2)}[phase]:
        failed, warned, errors, note, took = run_dcgm_diag(run, level, [g["index"] for g in gpus],
                                                           health["dcgm"] == "require")
        out["dcgm"] = {"level": level, "seconds": took, "phase": phase}
        if note:
            out["notes"].append(note)
        out["errors"].extend(errors)
        for gpu in gpus:
            for level_of, found in (("block", failed), ("warn", warned)):
                for msg in found.get(gpu["index"], []):
                    _signal(gpu, "dcgm", level_of, "dcgmi diag -r %d: %s" % (level, msg))
    for gpu in gpus:
        for sig in gpu["health"]["signals"]:
            where = "GPU %d (PCI %s)" % (gpu["index"], gpu.get("pci_bus_id") or "?")
            if sig["level"] == "warn":
                out["warnings"].append("%s %s: %s" % (where, sig["signal"], sig["msg"]))
            elif sig["level"] == "note":
                out["notes"].append("%s %s: %s" % (where, sig["signal"], sig["msg"]))
    return out


def problems(gpu):
    """The blocking signals of one assessed GPU, as messages naming the signal."""
    return ["%s: %s" % (sig["signal"], sig["msg"]) for sig in gpu["health"].get("signals") or [] if sig["level"] == "block"]
