# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What serves, as Prometheus series in a file for node_exporter's textfile collector. Standard library only.

The one place of the exposition format here: the text format 0.0.4 (prometheus.io/docs/instrumenting/exposition_formats,
"Text-based format": "# HELP name text", "# TYPE name counter|gauge", "name{label="value",...} number"; label values
escape backslash, double quote and newline) and the naming conventions (prometheus.io/docs/practices/naming: a
unit suffix in base units, _seconds; a counter ends _total).

Each instance has one file, <metrics_dir>/inferops_<name>.prom (a replica's name "sv.a" gives inferops_sv_a.prom),
written atomically (a temp file in the same directory, then a rename: the collector never reads half a file),
0644, the directory created 0755. Families are owned by their writers: inference_server writes every family but
the benchmark's (inferops_bench_*), which throughput_bench writes; each keeps the other's lines as they are. The
engine's watchdog (_watchdog.mark_down) rewrites inferops_serving_up to 0 when the engine ends between runs.
The outcome counts persist in <state_dir>/<name>.metrics.json.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time

BENCH_PREFIX = "inferops_bench_"
# the comment that ties a file to the engine it describes: the watchdog marks down only its own engine
PID_COMMENT = "# inferops engine pid "
KEEP_IDS = 200

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def file_name(name):
    """inferops_<name>.prom, the instance name's characters outside [A-Za-z0-9_] made '_'."""
    return "inferops_%s.prom" % re.sub(r"[^A-Za-z0-9_]", "_", name)


def escape(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def number(value):
    if value is True or value is False:
        return "1" if value else "0"
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if value == int(value) and abs(value) < 1e15 else repr(value)


class Family(object):
    """One metric family: its name, type, help and samples [(labels dict, value)]."""

    def __init__(self, name, kind, text):
        if not (_NAME.match(name) and kind in ("gauge", "counter")) or (kind == "counter" and not name.endswith("_total")):
            raise ValueError("metric family %r of type %r: a Prometheus name, gauge or counter, a counter's ending _total"
                             % (name, kind))
        self.name, self.kind, self.text, self.samples = name, kind, text, []

    def add(self, labels, value):
        if value is not None:
            self.samples.append((dict((k, v) for k, v in labels.items() if v is not None), value))
        return self

    def render(self):
        if not self.samples:
            return ""
        lines = ["# HELP %s %s" % (self.name, self.text.replace("\\", "\\\\").replace("\n", "\\n")),
                 "# TYPE %s %s" % (self.name, self.kind)]
        for labels, value in self.samples:
            body = ",".join('%s="%s"' % (key, escape(labels[key])) for key in sorted(labels))
            lines.append("%s%s %s" % (self.name, "{%s}" % body if body else "", number(value)))
        return "\n".join(lines) + "\n"


def render(families):
    return "".join(f.render() for f in families)


def split(text):
    """{family name: its lines} of an exposition text this module wrote (HELP, TYPE and samples together)."""
    families, current = {}, None
    for line in (text or "").splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            current = line.split()[2]
        elif line.startswith("#") or not line.strip():
            continue
        else:
            current = re.split(r"[{ ]", line, 1)[0]
        families.setdefault(current, []).append(line)
    return families


def write_atomic(directory, name, text):
    """The file, atomically: 0644 in directory (created 0755). Returns its path."""
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o755, exist_ok=True)
        os.chmod(directory, 0o755)
    path = os.path.join(directory, name)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % name, suffix=".tmp", dir=directory)  # not *.prom: never collected
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return ""


def merge(directory, name, text, own):
    """Write text's families to <directory>/<name>, keeping the families of the file there that own(name) says
    another writer owns; returns the path."""
    kept = [lines for family, lines in split(read(os.path.join(directory, name))).items() if not own(family)]
    pid = [line for line in text.splitlines() if line.startswith(PID_COMMENT)]
    if not pid:
        pid = [line for line in read(os.path.join(directory, name)).splitlines() if line.startswith(PID_COMMENT)]
    body = "".join(line + "\n" for line in pid[:1])
    body += "".join(line + "\n" for line in text.splitlines() if not line.startswith(PID_COMMENT))
    body += "".join("\n".join(lines) + "\n" for lines in kept)
    return write_atomic(directory, name, body)


# -- the instance's series, as inference_server writes them ---------------------------------------------------

class Counts(object):
    """<state_dir>/<name>.metrics.json: the outcome counts of the instance (each switch counted once, by id),
    the last switch, and the GPUs' last health read."""

    def __init__(self, state_dir, name):
        self.path = os.path.join(state_dir, "%s.metrics.json" % name)

    def load(self):
        try:
            with open(self.path) as handle:
                data = json.load(handle)
            if isinstance(data, dict):
                return data
        except (IOError, OSError, ValueError):
            pass
        return {}

    def save(self, data):
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".metrics-", dir=directory)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(data, sort_keys=True) + "\n")
        os.replace(tmp, self.path)


# the outcomes that are a switch (or a refused one); unchanged and relabelled start nothing, loading has no end yet
COUNTED = ("ready", "rolled_back", "restore_failed", "nothing_stopped", "stopped", "died")


def gpu_families(gpus, base):
    healthy = Family("inferops_gpu_healthy", "gauge", "1 when the GPU passed every health signal of its last check, else 0.")
    xid = Family("inferops_gpu_xid_events", "gauge", "Xid events of the GPU in its window (since its last clean check or ack).")
    nvlink = Family("inferops_gpu_nvlink_errors_total", "counter", "NVLink errors the driver counts on the GPU, summed over links.")
    width = Family("inferops_gpu_pcie_link_width", "gauge", "The PCIe link width the GPU trained at (lanes).")
    width_max = Family("inferops_gpu_pcie_link_width_max", "gauge", "The widest PCIe link the GPU supports (lanes).")
    gen = Family("inferops_gpu_pcie_link_generation", "gauge", "The PCIe generation of the GPU's link now (an idle GPU may train it down).")
    gen_max = Family("inferops_gpu_pcie_link_generation_max", "gauge", "The highest PCIe generation the GPU's link supports.")
    signal = Family("inferops_gpu_health_signal", "gauge",
                    "1 for each health signal of the GPU's last check, by signal (xid, nvlink, pcie_width, pcie_gen, dcgm) and level.")
    for gpu in gpus or []:
        labels = dict(base, gpu=str(gpu.get("index")), pci_bus_id=gpu.get("pci_bus_id"))
        health = gpu.get("health") or {}
        healthy.add(labels, 0 if health.get("problems") else 1)
        xid.add(labels, len(health.get("xid") or []) if "xid" in health else None)
        for counter, value in sorted((gpu.get("nvlink") or {}).items()):
            nvlink.add(dict(labels, counter=counter), value)
        pcie = gpu.get("pcie") or {}
        width.add(labels, pcie.get("width_current"))
        width_max.add(labels, pcie.get("width_max"))
        gen.add(labels, pcie.get("gen_current"))
        gen_max.add(labels, pcie.get("gen_max"))
        for sig in health.get("signals") or []:
            signal.add(dict(labels, signal=sig["signal"], level=sig["level"]), 1)
    return [healthy, xid, nvlink, width, width_max, gen, gen_max, signal]


def instance_text(host, name, record, up, counts, gpus):
    """The instance's families (all but the benchmark's): record is its state file (what serves, or None)."""
    record = record or {}
    base = {"host": host, "instance": name}
    labelled = dict(base, variant=record.get("variant") or counts.get("variant") or "")
    info = Family("inferops_serving_info", "gauge", "What the instance serves: its variant, engine and fingerprint.")
    if record:
        info.add(dict(labelled, engine=record.get("engine"), fingerprint=record.get("fingerprint")), 1)
    families = [
        info,
        Family("inferops_serving_up", "gauge", "1 while the instance's engine runs and was ready, else 0.").add(labelled, 1 if up else 0),
    ]
    last = counts.get("last") or {}
    families.append(Family("inferops_switch_last_timestamp_seconds", "gauge",
                           "When the last switch of the instance ended (Unix time).").add(
        dict(labelled, outcome=last.get("outcome")), last.get("at")))
    families.append(Family("inferops_switch_duration_seconds", "gauge", "How long the last switch of the instance took.").add(
        dict(labelled, outcome=last.get("outcome")), last.get("duration")))
    total = Family("inferops_switch_total", "counter", "Switches of the instance by outcome, over its life (kept in the state dir).")
    for outcome, value in sorted((counts.get("totals") or {}).items()):
        total.add(dict(base, outcome=outcome), value)
    families.append(total)
    families.extend(gpu_families(gpus, base))
    head = "%s%s\n" % (PID_COMMENT, record.get("pid")) if up and record.get("pid") else ""
    return head + render(families)


def export_instance(metrics_dir, state_dir, name, host, outcome, record, up, journal=None, gpus=None, now=None):
    """Count outcome once (by the switch journal's id when there is one) and write the instance's file."""
    store = Counts(state_dir, name)
    counts = store.load()
    counts.setdefault("totals", {})
    ids = counts.setdefault("ids", [])
    switch_id = (journal or {}).get("id")
    if outcome in COUNTED and (switch_id is None or switch_id not in ids):
        counts["totals"][outcome] = counts["totals"].get(outcome, 0) + 1
        if switch_id:
            ids.append(switch_id)
            del ids[:-KEEP_IDS]
        now = time.time() if now is None else now
        began = (journal or {}).get("started_at")
        ended = (journal or {}).get("finished_at") or now
        counts["last"] = {"outcome": outcome, "at": ended, "duration": round(ended - began, 3) if began else 0.0}
    if gpus:
        counts["gpus"] = [dict((k, g.get(k)) for k in ("index", "pci_bus_id", "pcie", "nvlink", "health")) for g in gpus]
    if record and record.get("variant"):
        counts["variant"] = record.get("variant")
    store.save(counts)
    text = instance_text(host, name, record, up, counts, counts.get("gpus"))
    return merge(metrics_dir, file_name(name), text, lambda family: not family.startswith(BENCH_PREFIX))


# -- the benchmark's series, as throughput_bench writes them ------------------------------------------------------

def bench_text(labels, levels, now=None):
    """The last benchmark's families: per concurrency level, output throughput, TTFT p50 and TPOT p50.
    levels: [{"concurrency", "output_throughput" (tokens/s), "ttft_p50_s", "tpot_p50_s"}]."""
    base = dict((k, str(v)) for k, v in (labels or {}).items() if v is not None and k in ("host", "instance", "variant", "engine", "fingerprint"))
    throughput = Family("inferops_bench_output_throughput_tokens_per_second", "gauge",
                        "Output tokens per second of the last benchmark, by concurrency.")
    ttft = Family("inferops_bench_ttft_p50_seconds", "gauge", "Median time to first token of the last benchmark, by concurrency.")
    tpot = Family("inferops_bench_tpot_p50_seconds", "gauge", "Median time per output token of the last benchmark, by concurrency.")
    for level in levels:
        labels = dict(base, concurrency=str(level["concurrency"]))
        throughput.add(labels, level.get("output_throughput"))
        ttft.add(labels, level.get("ttft_p50_s"))
        tpot.add(labels, level.get("tpot_p50_s"))
    stamp = Family("inferops_bench_last_timestamp_seconds", "gauge", "When the last benchmark of the instance ended (Unix time).")
    stamp.add(base, time.time() if now is None else now)
    return render([throughput, ttft, tpot, stamp])


def export_bench(path, labels, levels):
    directory, name = os.path.split(path)
    return merge(directory, name, bench_text(labels, levels), lambda family: family.startswith(BENCH_PREFIX))
