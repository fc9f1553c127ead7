# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One rule for where the results are: the bench_facts callback and the roles (the lookup
inferops.serving.results_dir) agree, whether the directory comes from INFEROPS_RESULTS_DIR,
[callback_bench_facts] results_dir in ansible.cfg, or the default beside the playbook; and a tune run
with only the ansible.cfg setting resumes from the history there and writes tuned-BASE.yml there."""

from __future__ import annotations

import json
import os

import pytest
from switchbed import ROOT, fleet, stand_in, switch  # noqa: F401 pylint: disable=unused-import

TUNE = os.path.join(ROOT, "playbooks", "tune.yml")
PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: where
      ansible.builtin.debug:
        msg: "{{ lookup('inferops.serving.results_dir', explicit | default('')) }}"
"""


def config_with(tmp_path, results_dir):
    """This repository's ansible.cfg, plus [callback_bench_facts] results_dir when given."""
    text = open(os.path.join(ROOT, "ansible.cfg")).read().replace("./", ROOT + "/")
    if results_dir:
        text += "\n[callback_bench_facts]\nresults_dir = %s\n" % results_dir
    path = tmp_path / ("ansible-%s.cfg" % bool(results_dir))
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("ini, env, explicit, expected", [
    (None, None, None, "PLAYBOOK_DIR/results"),
    ("INI", None, None, "INI"),
    ("INI", "ENV", None, "ENV"),
    ("INI", "ENV", "EXPLICIT", "EXPLICIT"),
])
def test_the_lookup_follows_the_callbacks_rule(run_playbook, tmp_path, monkeypatch, ini, env, explicit, expected):
    dirs = {"INI": str(tmp_path / "ini"), "ENV": str(tmp_path / "env"), "EXPLICIT": str(tmp_path / "explicit")}
    monkeypatch.delenv("INFEROPS_RESULTS_DIR", raising=False)
    run_env = {"ANSIBLE_CONFIG": config_with(tmp_path, dirs.get(ini)),
               "ANSIBLE_CALLBACKS_ENABLED": "record,inferops.serving.bench_facts"}
    if env:
        run_env["INFEROPS_RESULTS_DIR"] = dirs[env]
    run = run_playbook(PLAY, extra_vars={"explicit": dirs[explicit]} if explicit else None, env=run_env)
    assert run.rc == 0, run.stdout[-2000:]
    where = run.result(task="where")["msg"]
    assert where == (str(tmp_path / "results") if expected == "PLAYBOOK_DIR/results" else dirs[expected])


def starts(fleet):  # noqa: F811 pylint: disable=redefined-outer-name
    # each start has a log of its own (sv.log, then sv.log.1, ...: serving_log_keep, 50 in the test bed)
    return sum(log.read_text().count(": starting sv") for log in fleet.log_dir.glob("sv.log*"))


def test_a_tune_with_results_dir_in_ansible_cfg_resumes_and_writes_the_winner_there(switch, fleet, tmp_path,  # noqa: F811 pylint: disable=redefined-outer-name
                                                                                      monkeypatch):
    monkeypatch.delenv("INFEROPS_RESULTS_DIR", raising=False)
    results = tmp_path / "bench-results"
    fleet.add_variants({"tbase": {"command": stand_in(fleet.port, 6)}})
    extra = {"base": "tbase", "tune_grid": {"step_ms": [2]}, "repeats": 1}
    env = {"ANSIBLE_CONFIG": config_with(tmp_path, str(results)),
           "ANSIBLE_CALLBACKS_ENABLED": "record,inferops.serving.bench_facts"}
    first = switch(playbook=TUNE, extra=extra, env=env)
    assert first.rc == 0, first.stdout[-4000:]
    assert (results / "history.jsonl").exists() and (results / "tuned-tbase.yml").exists()
    assert not (tmp_path / "results").exists()
    assert not os.path.exists(os.path.join(ROOT, "playbooks", "results", "tuned-tbase.yml"))
    started = starts(fleet)
    second = switch(playbook=TUNE, extra=extra, env=env)
    assert second.rc == 0, second.stdout[-4000:]
    said = " ".join(second.stdout.split())
    assert "measuring none; from the history: tbase, tbase+step_ms=2;" in said, said[-3000:]
    assert starts(fleet) == started
    history = [json.loads(line) for line in (results / "history.jsonl").read_text().splitlines()]
    assert {h["variant"] for h in history} == {"tbase", "tbase+step_ms=2"}
