# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""execution-environment.yml and meta/execution-environment.yml through the real ansible-builder.

`ansible-builder create` needs no container runtime: it validates the definition (schema 3) and
writes the build context. The collection tarball goes where the definition expects it
(build/ee/inferops-serving.tar.gz beside a copy of the definition in a temp dir), as `make ee` does.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest
import yaml
from collection_meta import galaxy_version

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
EE_FILE = os.path.join(ROOT, "execution-environment.yml")


def run(argv, cwd=ROOT, timeout=300):
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, "%s\n%s\n%s" % (argv, proc.stdout, proc.stderr)
    return proc


@pytest.fixture(scope="module")
def collection_tarball(tmp_path_factory):
    out = tmp_path_factory.mktemp("collection")
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--force", "--output-path", str(out), ROOT])
    (path,) = glob.glob(str(out / "inferops-serving-*.tar.gz"))
    return path


@pytest.fixture(scope="module")
def context(tmp_path_factory, collection_tarball):
    """`ansible-builder create` into a temp dir; returns the context path."""
    work = tmp_path_factory.mktemp("ee")
    shutil.copy(EE_FILE, work / "execution-environment.yml")
    (work / "build" / "ee").mkdir(parents=True)
    shutil.copy(collection_tarball, work / "build" / "ee" / "inferops-serving.tar.gz")
    ctx = work / "context"
    proc = run([os.path.join(BIN, "ansible-builder"), "create", "-f", str(work / "execution-environment.yml"),
                "-c", str(ctx), "--output-filename", "Containerfile"], cwd=str(work))
    assert "No matches" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return ctx


def test_definition_is_schema_3_with_the_pieces_awx_needs():
    with open(EE_FILE) as fh:
        ee = yaml.safe_load(fh)
    assert ee["version"] == 3
    deps = ee["dependencies"]
    with open(os.path.join(ROOT, "requirements-dev.txt")) as fh:
        core_pin = [line.strip() for line in fh if line.startswith("ansible-core==")]
    assert deps["ansible_core"]["package_pip"] == core_pin[0], "EE and dev venv run one ansible-core"
    assert deps["ansible_runner"]["package_pip"].startswith("ansible-runner")
    names = [pkg.split(">")[0].split("=")[0].split("<")[0] for pkg in deps["python"]]
    assert {"nvidia-ml-py", "jmespath", "matplotlib"} <= set(names)


def test_builder_create_writes_a_complete_context(context):
    containerfile = (context / "Containerfile").read_text()
    with open(EE_FILE) as fh:
        ee = yaml.safe_load(fh)
    assert 'ARG EE_BASE_IMAGE="%s"' % ee["images"]["base_image"]["name"] in containerfile
    assert "ansible-core==" in containerfile and "ansible-runner==" in containerfile
    assert "ansible-galaxy collection install" in containerfile and "introspect" in containerfile

    build = context / "_build"
    pip = (build / "requirements.txt").read_text()
    for pkg in ("nvidia-ml-py", "jmespath", "matplotlib"):
        assert pkg in pip
    galaxy = yaml.safe_load((build / "requirements.yml").read_text())["collections"]
    assert {"name": "collections/inferops-serving.tar.gz", "type": "file"} in galaxy
    assert any(c["name"] == "awx.awx" for c in galaxy)

    # the collection the EE installs is this tree, at galaxy.yml's version
    tarball = build / "collections" / "inferops-serving.tar.gz"
    with tarfile.open(str(tarball)) as tar:
        manifest = json.load(tar.extractfile("MANIFEST.json"))
        members = tar.getnames()
    info = manifest["collection_info"]
    assert (info["namespace"], info["name"], info["version"]) == ("inferops", "serving", galaxy_version())
    assert "meta/execution-environment.yml" in members and "playbooks/awx_configure.yml" in members
    assert not [name for name in members if name.startswith(("collections/", ".venv", "build/"))]


def test_collection_declares_its_own_ee_needs(tmp_path, collection_tarball):
    """ansible-builder's introspection of the installed collection finds meta/execution-environment.yml."""
    dest = tmp_path / "ansible_collections" / "inferops" / "serving"
    dest.mkdir(parents=True)
    with tarfile.open(collection_tarball) as tar:
        tar.extractall(str(dest), filter="data")
    pip, bindep = tmp_path / "pip.txt", tmp_path / "bindep.txt"
    run([os.path.join(BIN, "ansible-builder"), "introspect", str(tmp_path), "--write-pip", str(pip),
         "--write-bindep", str(bindep)])
    pip_text, bindep_text = pip.read_text(), bindep.read_text()
    assert "nvidia-ml-py" in pip_text and "matplotlib" in pip_text
    assert "from collection inferops.serving" in pip_text
    assert "openssh-clients [platform:rpm]" in bindep_text
