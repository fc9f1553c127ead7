# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/awx_configure.yml without a live AWX.

- syntax check (needs awx.awx resolvable: `make setup` unpacks it into collections/);
- a --check run against a closed port on 127.0.0.1: every awx.awx argument check passes and the run
  stops only at the network;
- real runs against tests/support/fake_awx.py (the AWX v2 API slice the modules use, in memory): what
  is created, the surveys, that a re-run and a --check run change nothing;
- the survey's variant choices against the catalog: a temporary one, and the real
  inventories/example/group_vars/serving.yml when it exists.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from fake_awx import FakeAwx  # noqa: E402

PLAYBOOK = os.path.join(ROOT, "playbooks", "awx_configure.yml")
REAL_CATALOG = os.path.join(ROOT, "inventories", "example", "group_vars", "serving.yml")
TOKEN = "inferops-test-token-not-a-secret"
REQUIRED = {"awx_project_scm_url": "https://git.example.invalid/inferops/serving.git",
            "awx_ee_image": "registry.example.invalid/inferops-serving-ee:0.5.0"}
TEMPLATES = {"Switch variant": "playbooks/switch_variant.yml", "Fleet rollout": "playbooks/rollout.yml",
             "Benchmark": "playbooks/bench.yml", "Stop and verify GPUs": "playbooks/stop.yml"}
# the awx.awx argument-spec failures that must not appear: the tasks' parameters are valid
PARAMETER_ERRORS = ("Unsupported parameters", "missing required arguments", "value of", "is of type",
                    "must be one of", "mutually exclusive", "Unable to parse controller_host")

CATALOG = {
    "serving_variants": {
        "baseline": {"engine": "sglang", "model": "nvidia/Qwen3.5-397B-A17B-NVFP4",
                     "engine_args": {"moe-runner-backend": "flashinfer_cutlass"}},
        "nextn": {"extends": "baseline", "engine_args": {"speculative-algorithm": "NEXTN"}},
        "vllm_mtp": {"engine": "vllm", "model": "{{ serving_model }}",
                     "engine_args": {"speculative-config": '{"method": "mtp"}'}},
    },
}


class TagBlindLoader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
    """Plain YAML that reads Ansible's tags (!unsafe, !vault) as null: only the catalog's keys matter."""


TagBlindLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


@pytest.fixture
def catalog(tmp_path):
    path = tmp_path / "serving.yml"
    path.write_text(yaml.safe_dump(CATALOG, sort_keys=False))
    return path


@pytest.fixture
def fake_awx():
    fake = FakeAwx().start()
    yield fake
    fake.stop()


def controller_env(url):
    return {"CONTROLLER_HOST": url, "CONTROLLER_OAUTH_TOKEN": TOKEN, "CONTROLLER_VERIFY_SSL": "false",
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def configure(run_playbook, url, catalog_file=None, check=False, extra=None):
    extra_vars = dict(REQUIRED)
    if catalog_file is not None:
        extra_vars["awx_catalog_file"] = str(catalog_file)
    extra_vars.update(extra or {})
    return run_playbook(PLAYBOOK, extra_vars=extra_vars, check=check, env=controller_env(url), timeout=300)


def spec_of(fake, name):
    return {question["variable"]: question for question in fake.survey("job_templates", name)["spec"]}


def test_syntax_check(ansible_env):
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "--syntax-check", PLAYBOOK], cwd=ROOT,
                          env=ansible_env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pins_of_awx_collection_agree():
    """make setup's awx.awx, collections/requirements.yml (AWX project sync) and the EE name one version."""
    with open(os.path.join(ROOT, "collections", "ansible_collections", "awx", "awx", "MANIFEST.json")) as fh:
        installed = json.load(fh)["collection_info"]["version"]
    with open(os.path.join(ROOT, "collections", "requirements.yml")) as fh:
        project = {c["name"]: str(c.get("version")) for c in yaml.safe_load(fh)["collections"]}
    with open(os.path.join(ROOT, "execution-environment.yml")) as fh:
        ee = {c["name"]: str(c.get("version")) for c in yaml.safe_load(fh)["dependencies"]["galaxy"]["collections"]}
    assert project["awx.awx"] == ee["awx.awx"] == installed


def test_check_mode_without_awx_fails_only_at_the_network(run_playbook, catalog, port):
    """Nothing listens on the port: the first awx.awx task passes its argument checks, then cannot connect."""
    run = configure(run_playbook, "http://127.0.0.1:%d" % port, catalog, check=True)
    assert run.rc == 2, run.stdout + run.stderr
    failed = [rec for rec in run.records if rec["status"] == "failed"]
    assert [rec["task"] for rec in failed] == ["Execution environment"], run.stdout
    msg = failed[0]["result"]["msg"]
    assert "Connection refused" in msg and "127.0.0.1" in msg, msg
    assert not any(err in run.stdout for err in PARAMETER_ERRORS), run.stdout
    assert TOKEN not in run.stdout + run.stderr


def test_configures_everything_then_changes_nothing(run_playbook, catalog, fake_awx):
    run = configure(run_playbook, fake_awx.url, catalog, extra={"awx_job_credentials": []})
    assert run.rc == 0, run.stdout + run.stderr
    assert not any(err in run.stdout for err in PARAMETER_ERRORS), run.stdout
    org = fake_awx.get("organizations", "Default")["id"]

    ee = fake_awx.get("execution_environments", "inferops-serving-ee")
    assert ee["image"] == REQUIRED["awx_ee_image"] and ee["pull"] == "missing" and ee["organization"] == org

    project = fake_awx.get("projects", "inferops.serving")
    assert project["scm_type"] == "git" and project["scm_url"] == REQUIRED["awx_project_scm_url"]
    assert project["scm_branch"] == "main" and project["scm_update_on_launch"] is True
    assert project["default_environment"] == ee["id"] and project["organization"] == org
    assert "credential" not in project  # none given: omitted, not an empty lookup

    inventory = fake_awx.get("inventories", "inferops-serving")
    source = fake_awx.get("inventory_sources", "inferops-serving (project inventories/example)")
    assert source["source"] == "scm" and source["source_path"] == "inventories/example"
    assert source["source_project"] == project["id"] and source["execution_environment"] == ee["id"]
    assert source["overwrite"] is True and source["update_on_launch"] is True

    names = [jt["name"] for jt in fake_awx.objects("job_templates")]
    assert names == list(TEMPLATES)
    for name, playbook in TEMPLATES.items():
        jt = fake_awx.get("job_templates", name)
        assert jt["playbook"] == playbook and jt["project"] == project["id"] and jt["inventory"] == inventory["id"]
        assert jt["execution_environment"] == ee["id"] and jt["survey_enabled"] is True
        assert jt["allow_simultaneous"] is False and jt["ask_limit_on_launch"] is True

    variants = list(CATALOG["serving_variants"])
    switch = spec_of(fake_awx, "Switch variant")
    assert list(switch) == ["variant", "target"]
    assert switch["variant"]["type"] == "multiplechoice" and switch["variant"]["choices"] == variants
    assert switch["variant"]["default"] == "baseline" and switch["variant"]["required"] is True
    assert switch["target"]["type"] == "text" and switch["target"]["default"] == "serving"

    rollout = spec_of(fake_awx, "Fleet rollout")
    assert list(rollout) == ["variant", "target", "rollout_batches", "rollout_max_fail_percentage"]
    assert rollout["variant"]["choices"] == variants
    batches = rollout["rollout_batches"]
    assert batches["type"] == "multiselect" and batches["default"] == "1\n25%"
    assert set(batches["default"].split("\n")) <= set(batches["choices"])
    budget = rollout["rollout_max_fail_percentage"]
    assert budget["type"] == "integer" and (budget["min"], budget["max"], budget["default"]) == (0, 100, 0)

    for name in ("Benchmark", "Stop and verify GPUs"):
        assert list(spec_of(fake_awx, name)) == ["target"]

    # the same run again, and in check mode: no change reported, nothing written
    writes = len(fake_awx.writes())
    again = configure(run_playbook, fake_awx.url, catalog)
    assert again.rc == 0 and again.recap()["changed"] == 0, again.stdout
    checked = configure(run_playbook, fake_awx.url, catalog, check=True)
    assert checked.rc == 0 and checked.recap()["changed"] == 0, checked.stdout
    assert len(fake_awx.writes()) == writes, fake_awx.writes()[writes:]


def test_survey_follows_the_catalog(run_playbook, catalog, fake_awx):
    """A variant added to the catalog appears in both surveys on the next run: no second list to edit."""
    assert configure(run_playbook, fake_awx.url, catalog).rc == 0
    data = yaml.safe_load(catalog.read_text())
    data["serving_variants"]["nextn_long"] = {"extends": "nextn", "engine_args": {"speculative-num-steps": 5}}
    catalog.write_text(yaml.safe_dump(data, sort_keys=False))

    writes = len(fake_awx.writes())
    run = configure(run_playbook, fake_awx.url, catalog)
    assert run.rc == 0, run.stdout
    for name in ("Switch variant", "Fleet rollout"):
        assert spec_of(fake_awx, name)["variant"]["choices"] == list(data["serving_variants"])
    # only those two surveys were rewritten
    assert sorted(req["path"] for req in fake_awx.writes()[writes:]) == sorted(
        "/api/v2/job_templates/%d/survey_spec/" % fake_awx.get("job_templates", name)["id"]
        for name in ("Switch variant", "Fleet rollout"))


def test_a_catalog_without_variants_is_refused_before_awx_is_touched(run_playbook, tmp_path, fake_awx):
    bad = tmp_path / "serving.yml"
    bad.write_text("serving_engine: sglang\n")
    run = configure(run_playbook, fake_awx.url, bad)
    assert run.rc == 2
    assert "must define serving_variants" in run.stdout, run.stdout
    assert fake_awx.requests == []


def test_required_settings_are_named(run_playbook, catalog, fake_awx):
    run = run_playbook(PLAYBOOK, extra_vars={"awx_catalog_file": str(catalog)}, env=controller_env(fake_awx.url))
    assert run.rc == 2
    assert "awx_project_scm_url" in run.stdout and "awx_ee_image" in run.stdout, run.stdout
    assert fake_awx.requests == []


@pytest.mark.skipif(not os.path.exists(REAL_CATALOG),
                    reason="inventories/example/group_vars/serving.yml (the real variant catalog) is not in "
                           "this tree yet; the temporary-catalog tests cover the mechanism")
def test_survey_choices_are_the_real_catalog(run_playbook, fake_awx):
    """The drift test: the surveys awx_configure.yml sends (default awx_catalog_file) list exactly the
    variants of inventories/example, in their order."""
    with open(REAL_CATALOG) as fh:
        variants = list(yaml.load(fh, Loader=TagBlindLoader)["serving_variants"])
    assert {"baseline", "nextn"} <= set(variants), variants
    run = configure(run_playbook, fake_awx.url)
    assert run.rc == 0, run.stdout + run.stderr
    for name in ("Switch variant", "Fleet rollout"):
        assert spec_of(fake_awx, name)["variant"]["choices"] == variants


def test_batches_answer_drives_serial(run_playbook, tmp_path):
    """What AWX passes for the multiselect (a list of the chosen strings) and the integer budget are
    what `serial` and `max_fail_percentage` take: 8 hosts with the default answer run 1 + 2 + 2 + 2 + 1."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"h%d" % i: None for i in range(1, 9)}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": os.path.join(BIN, "python")}}}))
    play = """
- name: Batches from a survey answer
  hosts: all
  gather_facts: false
  serial: "{{ rollout_batches }}"
  max_fail_percentage: "{{ rollout_max_fail_percentage }}"
  tasks:
    - name: Batch size
      ansible.builtin.debug:
        msg: "batch={{ ansible_play_batch | length }}"
      run_once: true
"""
    answer = {"rollout_batches": "1\n25%".split("\n"), "rollout_max_fail_percentage": 0}
    run = run_playbook(play, extra_vars=answer, inventory=str(inventory))
    assert run.rc == 0, run.stdout
    assert re.findall(r"batch=(\d+)", run.stdout) == ["1", "2", "2", "2", "1"]
