# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""inference_server records what the engine really resolved (`resolved`), through real ansible-playbook runs.

The engine is the stand-in (tests/support/stream_server.py --engine sglang) as an `engine: command` variant,
serving on /server_info the dict SGLang 0.5.23 really builds (tests/support/resolved/sglang-0.5.23.json, made
by tests/conformance/test_resolved_settings.py; its api_key, admin_api_key and launch_command carry keys in
clear, as SGLang serves them). The second variant's file differs in one setting its variant asked for and in
two that nobody asked for (what the engine would have chosen: another attention backend, fewer KV tokens), and
carries a large scheduler-state blob. `pytest -s` prints the "Resolved settings" section of the two.
"""

from __future__ import annotations

import json
import os

from switchbed import ROOT, SUPPORT, benchmarked, fleet, levels_of, stand_in, switch  # noqa: F401 pylint: disable=unused-import
from test_inference_server import play

from ansible_collections.inferops.serving.plugins.module_utils import _resolved
from ansible_collections.inferops.serving.plugins.plugin_utils import _resolved_diff

FIXTURE = os.path.join(ROOT, "tests", "support", "resolved", "sglang-0.5.23.json")
SECRETS = ("sk-resolved-fixture-0123456789", "admin-resolved-fixture-0123456789")
MASK = _resolved.MASK


def server_infos(tmp_path):
    """(nextn's file, nextn4's file, their engine_args): nextn4 asks for 4 draft tokens where nextn asks for 6;
    its engine took fa3 over triton and kept fewer KV tokens, which nobody asked."""
    real = json.load(open(FIXTURE))
    assert real["api_key"] == SECRETS[0] and real["admin_api_key"] == SECRETS[1]  # as SGLang serves it
    a = dict(real, max_total_num_tokens=812160)  # SGLang's scheduler info (srt/managers/scheduler.py)
    b = dict(real, speculative_num_draft_tokens=4, attention_backend="fa3", max_total_num_tokens=655360,
             internal_states=[{"last_gen_throughput": 1.0, "memory_usage": {"kv": 1.5}, "trace": "x" * 20000}])
    paths = []
    for name, info in (("nextn", a), ("nextn4", b)):
        path = tmp_path / ("server-info-%s.json" % name)
        path.write_text(json.dumps(info))
        paths.append(str(path))
    asked = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 5, "speculative_eagle_topk": 1}
    return paths, dict(asked, speculative_num_draft_tokens=6), dict(asked, speculative_num_draft_tokens=4)


def server(name, port, tmp_path, variant, info):
    cmd = stand_in(port, 2) + ["--engine", "sglang", "--server-info", info]
    return dict(name=name, engine="command", model="standin", port=port, command=cmd, supervisor="process",
                variant=variant, ready_timeout=30, stop_timeout=5, state_dir=str(tmp_path / "state"),
                log_dir=str(tmp_path / "log"))


def no_secret(text):
    return not any(secret in text for secret in SECRETS)


def test_resolved_is_returned_recorded_redacted_and_diffed(fake_gpus, run_playbook, port, tmp_path):
    (info_a, info_b), asked_a, asked_b = server_infos(tmp_path)
    state_file = tmp_path / "state" / "rs.json"
    a, b = server("rs", port, tmp_path, "nextn", info_a), server("rs", port, tmp_path, "nextn4", info_b)
    try:
        first = run_playbook(play(a))
        assert first.rc == 0, first.stdout[-3000:]
        res_a = first.result("inference_server")
        resolved_a = res_a["resolved"]
        assert resolved_a["engine"] == "sglang" and resolved_a["source"] == "GET /server_info"
        settings = resolved_a["settings"]
        assert settings["api_key"] == MASK and settings["admin_api_key"] == MASK
        assert "--api-key %s" % MASK in settings["launch_command"] and no_secret(json.dumps(resolved_a))
        assert settings["speculative_num_draft_tokens"] == 6 and settings["max_total_num_tokens"] == 812160
        assert settings["model_path"] == "standin" and settings["port"] == port  # the stand-in's own fields
        assert len(settings) > 500 and "error" not in resolved_a
        text = state_file.read_text()
        assert json.loads(text)["resolved"] == resolved_a and no_secret(text)

        switched = run_playbook(play(b))
        assert switched.rc == 0, switched.stdout[-3000:]
        resolved_b = switched.result("inference_server")["resolved"]
        assert resolved_b["settings"]["attention_backend"] == "fa3" and resolved_b["digest"] != resolved_a["digest"]
        assert "internal_states" not in resolved_b["settings"]
        assert resolved_b["dropped"]["internal_states"].startswith("scheduler state")
        text = state_file.read_text()
        assert json.loads(text)["resolved"] == resolved_b and no_secret(text)

        kept = run_playbook(play(b))  # unchanged: the recorded settings, not read again
        res = kept.result("inference_server")
        assert res["changed"] is False and res["outcome"] == "unchanged" and res["resolved"] == resolved_b
        for run in (first, switched, kept):
            assert no_secret(run.stdout)
    finally:
        run_playbook(play(dict(a, state="stopped")))

    result = _resolved_diff.diff({"name": "nextn", "engine_args": asked_a, "resolved": resolved_a},
                                 {"name": "nextn4", "engine_args": asked_b, "resolved": resolved_b})
    assert [row["setting"] for row in result["asked"]] == ["speculative_num_draft_tokens"]
    assert [row["setting"] for row in result["engine_chosen"]] == ["attention_backend", "max_total_num_tokens"]
    lines = _resolved_diff.markdown_lines(result)
    print("\n" + "\n".join(lines))
    assert lines[0] == "## Resolved settings" and any("Chosen by the engine" in line for line in lines)


def test_a_command_without_server_info_records_nothing_and_a_named_engine_says_why(
        fake_gpus, run_playbook, port, tmp_path):
    plain = dict(server("rn", port, tmp_path, "plain", FIXTURE), command=stand_in(port, 2))  # no --engine sglang
    try:
        first = run_playbook(play(plain))
        assert first.rc == 0, first.stdout[-3000:]
        assert first.result("inference_server")["resolved"] is None
        told = run_playbook(play(dict(plain, resolved_from="sglang", state="restarted")))
        assert told.rc == 0, told.stdout[-3000:]  # a read that fails never fails the call
        resolved = told.result("inference_server")["resolved"]
        assert resolved["engine"] == "sglang" and "HTTP 404" in resolved["error"] and "settings" not in resolved
    finally:
        run_playbook(play(dict(plain, state="stopped")))


def test_every_benchmark_is_labelled_with_the_resolved_digest(switch, fleet, tmp_path):
    fleet.add_variants({"sgl": {"command": stand_in(fleet.port, 2) + ["--engine", "sglang", "--server-info", FIXTURE]}})
    run = switch("sgl")
    assert run.rc == 0, run.stdout[-3000:]
    digest = fleet.record()["resolved"]["digest"]
    assert benchmarked(run) and all(level["labels"]["resolved"] == digest for level in levels_of(run))


def test_a_compare_report_lists_the_settings_that_differ_asked_and_chosen_by_the_engine(switch, fleet, tmp_path):
    """compare.yml on the two variants above (real runs, bench_facts writing its report): the verdict warns that
    the engine chose two settings by itself, and the report's section lists them apart from the one asked."""
    (info_a, info_b), asked_a, asked_b = server_infos(tmp_path)
    # engine_args come as flags; the model loads 2.5 s, longer than the first call waits (progress delay 1 s):
    # what the engine resolved comes from the wait for it
    sglang = ["--engine", "sglang", "--ignore-unknown-flags", "--load-s", "2.5", "--server-info"]
    fleet.add_variants({"nextn": {"command": stand_in(fleet.port, 2) + sglang + [info_a], "engine_args": asked_a},
                        "nextn4": {"command": stand_in(fleet.port, 2) + sglang + [info_b], "engine_args": asked_b}})
    fleet.set_vars(serving_bench={"concurrency": [2], "requests_per_level": 4, "input_tokens": 8, "output_tokens": 8,
                                  "warmup": 1})
    results = tmp_path / "results"
    run = switch(playbook=os.path.join(ROOT, "playbooks", "compare.yml"),
                 extra={"variants": "nextn,nextn4", "repeats": 2, "keep": "previous"},
                 env={"ANSIBLE_CALLBACKS_ENABLED": "record,inferops.serving.bench_facts", "INFEROPS_RESULTS_DIR": str(results)})
    assert run.rc == 0, run.stdout[-4000:]
    lines = [r["result"]["msg"] for r in run.results("debug") if "Say which variant" in r["task"]][-1]
    warning = [line for line in lines if "the engine chose by itself" in line]
    assert warning == ["compare localhost: WARNING nextn and nextn4 differ in 2 setting(s) the engine chose by itself: "
                       "attention_backend (triton / fa3), max_total_num_tokens (812160 / 655360)"], lines
    reports = list(results.glob("*.md"))
    text = "\n".join(p.read_text() for p in reports)
    section = text[text.index("### Resolved settings: nextn against nextn4"):]
    section = section[:section.index("\n## ")] if "\n## " in section else section
    print("\n" + section)
    assert "| speculative_num_draft_tokens | `6` | `4` | `6` / `4` |" in section
    chosen = section[section.index("#### Chosen by the engine"):]
    assert "| attention_backend | `triton` | `fa3` |" in chosen and "| max_total_num_tokens | `812160` | `655360` |" in chosen
    assert no_secret(text) and no_secret(run.stdout)
