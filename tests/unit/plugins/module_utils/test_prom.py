# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The metrics file: read back by the real prometheus_client parser (0.26), written atomically 0644, counts kept."""

from __future__ import annotations

import os
import stat

from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.inferops.serving.plugins.module_utils import _prom, _watchdog

RECORD = {"pid": 4242, "variant": "fast", "engine": "command", "fingerprint": "sha256:abc", "api_key": "sk-secret"}
GPUS = [{"index": 2, "pci_bus_id": "00000000:3A:00.0", "nvlink": {"crc": 5, "replay": 2, "recovery": 0},
         "pcie": {"gen_current": 4, "gen_max": 5, "width_current": 8, "width_max": 16},
         "health": {"problems": ["xid: Xid 79"], "xid": [{"code": 79, "at": 1.0}],
                    "signals": [{"signal": "xid", "level": "block", "msg": "Xid 79"}]}}]


def parsed(path):
    with open(path) as handle:
        text = handle.read()
    return text, dict((f.name, f) for f in text_string_to_metric_families(text))


def samples(family, **labels):
    return [s for s in family.samples if all(s.labels.get(k) == v for k, v in labels.items())]


def test_every_series_parses_with_help_and_type_and_the_file_is_atomic_0644(tmp_path):
    metrics, state = tmp_path / "textfile" / "collector", tmp_path / "state"
    path = _prom.export_instance(str(metrics), str(state), "sv.a", "web1", "ready", RECORD, True,
                                 journal={"id": "s1", "started_at": 100.0, "finished_at": 112.5}, gpus=GPUS)
    assert os.path.basename(path) == "inferops_sv_a.prom" and os.listdir(str(metrics)) == ["inferops_sv_a.prom"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644 and stat.S_IMODE(os.stat(str(metrics)).st_mode) == 0o755
    text, families = parsed(path)
    assert "sk-secret" not in text
    for family in families.values():
        assert family.documentation and family.type in ("gauge", "counter"), family
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{")[0].split(" ")[0]
            assert "# TYPE %s " % name in text and "# HELP %s " % name in text, name
    info = families["inferops_serving_info"].samples[0]
    assert info.labels == {"host": "web1", "instance": "sv.a", "variant": "fast", "engine": "command",
                           "fingerprint": "sha256:abc"} and info.value == 1
    assert families["inferops_serving_up"].samples[0].value == 1
    assert samples(families["inferops_switch"], outcome="ready")[0].value == 1  # the parser drops _total
    assert families["inferops_switch_duration_seconds"].samples[0].value == 12.5
    assert families["inferops_switch_last_timestamp_seconds"].samples[0].value == 112.5
    assert families["inferops_gpu_healthy"].samples[0].labels["gpu"] == "2"
    assert families["inferops_gpu_healthy"].samples[0].value == 0
    assert families["inferops_gpu_xid_events"].samples[0].value == 1
    assert samples(families["inferops_gpu_nvlink_errors"], counter="crc")[0].value == 5
    assert families["inferops_gpu_pcie_link_width"].samples[0].value == 8
    assert samples(families["inferops_gpu_health_signal"], signal="xid", level="block")[0].value == 1


def test_counts_persist_once_per_switch_and_the_benchmark_keeps_its_own_families(tmp_path):
    metrics, state = str(tmp_path / "m"), str(tmp_path / "s")
    journal = {"id": "s1", "started_at": 1.0, "finished_at": 2.0}
    _prom.export_instance(metrics, state, "sv", "h", "ready", RECORD, True, journal=journal)
    path = _prom.export_bench(os.path.join(metrics, "inferops_sv.prom"),
                              {"host": "h", "variant": "fast", "fingerprint": "sha256:abc", "engine": "command",
                               "instance": "sv", "repeat": 3},
                              [{"concurrency": 1, "output_throughput": 812.5, "ttft_p50_s": 0.012, "tpot_p50_s": 0.002},
                               {"concurrency": 4, "output_throughput": 2100.0, "ttft_p50_s": 0.02, "tpot_p50_s": 0.003}])
    _prom.export_instance(metrics, state, "sv", "h", "ready", RECORD, True, journal=journal)  # a join: not again
    _prom.export_instance(metrics, state, "sv", "h", "rolled_back", RECORD, True,
                          journal={"id": "s2", "started_at": 5.0, "finished_at": 9.0})
    _prom.export_instance(metrics, state, "sv", "h", "nothing_stopped", RECORD, True)
    _prom.export_instance(metrics, state, "sv", "h", "unchanged", RECORD, True)
    _text, families = parsed(path)
    totals = dict((s.labels["outcome"], s.value) for s in families["inferops_switch"].samples)
    assert totals == {"ready": 1, "rolled_back": 1, "nothing_stopped": 1}
    tput = families["inferops_bench_output_throughput_tokens_per_second"]
    assert [(s.labels["concurrency"], s.value) for s in tput.samples] == [("1", 812.5), ("4", 2100.0)]
    assert "repeat" not in tput.samples[0].labels
    assert samples(families["inferops_bench_ttft_p50_seconds"], concurrency="4")[0].value == 0.02
    assert samples(families["inferops_bench_tpot_p50_seconds"], concurrency="1")[0].value == 0.002


def test_label_values_are_escaped():
    text = _prom.Family("inferops_x", "gauge", "x").add({"variant": 'a"b\\c\nd'}, 1).render()
    sample = list(text_string_to_metric_families(text))[0].samples[0]
    assert sample.labels["variant"] == 'a"b\\c\nd'


def test_the_watchdog_marks_only_its_own_engine_down(tmp_path):
    metrics, state = str(tmp_path / "m"), str(tmp_path / "s")
    path = _prom.export_instance(metrics, state, "sv", "h", "ready", RECORD, True)
    assert not _watchdog.mark_down(path, 999)  # another engine's exit
    assert parsed(path)[1]["inferops_serving_up"].samples[0].value == 1
    assert _watchdog.mark_down(path, 4242)
    _text, families = parsed(path)
    assert families["inferops_serving_up"].samples[0].value == 0 and families["inferops_serving_info"].samples
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644 and os.listdir(metrics) == ["inferops_sv.prom"]
