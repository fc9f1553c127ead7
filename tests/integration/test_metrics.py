# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What serves is visible where operators look (issue 36): playbooks/switch_variant.yml with serving_metrics_dir,
scraped over HTTP from the real prometheus-node-exporter (Debian's package, `make test-packages`) reading that
directory with its textfile collector, after a switch, a rollback, a refused switch and a kill of the engine.
The example alert rules in docs/ pass the real `promtool check rules`, and the file `promtool check metrics`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from switchbed import ROOT, fleet, serving, switch  # noqa: F401 pylint: disable=unused-import

from conftest import free_port

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
PROMTOOL = shutil.which("promtool")


@pytest.fixture
def exporter(tmp_path):
    """The real node_exporter on a loopback port, only its textfile collector, reading tmp_path/textfile."""
    assert NODE_EXPORTER, "prometheus-node-exporter is not installed: run `make test-packages`"
    textfile = tmp_path / "textfile"
    port = free_port()
    log = open(str(tmp_path / "node_exporter.log"), "wb")
    proc = subprocess.Popen([NODE_EXPORTER, "--web.listen-address=127.0.0.1:%d" % port, "--collector.disable-defaults",
                             "--collector.textfile", "--collector.textfile.directory=%s" % textfile],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = "http://127.0.0.1:%d/metrics" % port

    def scrape():
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode("utf-8")
        return text, dict((f.name, f) for f in text_string_to_metric_families(text))

    deadline = time.monotonic() + 20
    while True:
        try:
            scrape()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "node_exporter.log").read_text()
            time.sleep(0.1)
    scrape.dir = textfile
    yield scrape
    proc.terminate()
    proc.wait(10)
    log.close()


def value(families, name, **labels):
    found = [s.value for s in families[name].samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, families.get(name))
    return found[0]


def excerpt(label, text):
    wanted = ("inferops_serving", "inferops_switch", "inferops_bench_output", 'inferops_gpu_healthy{gpu="2"', "node_textfile_scrape_error")
    lines = [line for line in text.splitlines() if line.startswith(wanted)]
    print("\nSCRAPE %s:\n  %s" % (label, "\n  ".join(lines)))


def test_node_exporter_serves_the_instance_after_a_switch_a_rollback_a_refusal_and_a_kill(switch, fleet, exporter):
    fleet.set_vars(serving_metrics_dir=str(exporter.dir))
    run = switch("fast")
    assert run.rc == 0, run.stdout[-3000:]
    pid = serving(fleet, "fast")["pid"]
    text, families = exporter()
    excerpt("after a switch to fast (pid %d)" % pid, text)
    assert value(families, "node_textfile_scrape_error") == 0
    assert value(families, "inferops_serving_up", instance="sv", variant="fast", host="localhost") == 1
    assert value(families, "inferops_serving_info", variant="fast", engine="command") == 1
    assert value(families, "inferops_switch", outcome="ready") == 1
    assert value(families, "inferops_switch_duration_seconds", variant="fast") > 0
    for level in ("1", "4"):
        assert value(families, "inferops_bench_output_throughput_tokens_per_second", concurrency=level, variant="fast") > 0
        assert value(families, "inferops_bench_ttft_p50_seconds", concurrency=level) > 0
    assert value(families, "inferops_gpu_healthy", gpu="2", pci_bus_id="00000000:3A:00.0") == 1
    path = exporter.dir / "inferops_sv.prom"
    assert oct(path.stat().st_mode & 0o777) == "0o644" and oct(exporter.dir.stat().st_mode & 0o777) == "0o755"
    if PROMTOOL:  # the naming conventions, as Prometheus' own linter reads them
        lint = subprocess.run([PROMTOOL, "check", "metrics"], input=path.read_text(), capture_output=True, text=True, check=False)
        assert lint.returncode == 0, lint.stdout + lint.stderr

    run = switch("crash", extra={"bench": "never"})
    assert run.rc != 0 and "ROLLED BACK" in " ".join(run.stdout.split())
    text, families = exporter()
    excerpt("after a rollback from crash", text)
    assert value(families, "inferops_switch", outcome="rolled_back") == 1
    assert value(families, "inferops_serving_up", variant="fast") == 1

    fleet.set_vars(serving_gpu_check={"backend": "nvidia_smi", "timeout": 10, "kill_grace": 2,
                                      "health": {"pcie_downgrade": "fail"}})
    fleet.gpus.state["gpus"][2]["pcie"] = [4, 5, 8, 16]
    fleet.gpus.save()
    run = switch("slow", extra={"bench": "never"})
    assert run.rc != 0 and "nothing was stopped" in " ".join(run.stdout.split())
    text, families = exporter()
    excerpt("after a refused switch (GPU 2 at x8)", text)
    assert value(families, "inferops_switch", outcome="nothing_stopped") == 1
    assert value(families, "inferops_serving_up", variant="fast") == 1
    assert value(families, "inferops_gpu_healthy", gpu="2") == 0
    assert value(families, "inferops_gpu_pcie_link_width", gpu="2") == 8
    assert value(families, "inferops_gpu_health_signal", gpu="2", signal="pcie_width", level="block") == 1

    pid = fleet.pid()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while True:
        text, families = exporter()
        if value(families, "inferops_serving_up", variant="fast") == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    excerpt("after kill -9 of the engine (pid %d)" % pid, text)
    assert value(families, "inferops_serving_up", variant="fast") == 0
    assert value(families, "inferops_switch", outcome="ready") == 1  # the counts outlive the engine


def test_the_example_alert_rules_pass_promtool():
    assert PROMTOOL, "promtool is not installed: run `make test-packages`"
    check = subprocess.run([PROMTOOL, "check", "rules", os.path.join(ROOT, "docs", "inferops-alerts.rules.yml")],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0 and "SUCCESS: 3 rules found" in check.stdout, check.stdout + check.stderr
