# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The version is one fact: galaxy.yml's. The newest release of changelogs/changelog.yaml (antsibull-changelog),
the benchmark client's version (a module cannot read galaxy.yml on the target), and every version_added of the
plugins' documentation agree with it. `make lint` lints the changelog's fragments (antsibull-changelog lint)."""

from __future__ import annotations

import glob
import os
import re

import yaml

from collection_meta import galaxy_version

from ansible_collections.inferops.serving.plugins.module_utils import _bench

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def version_tuple(text):
    return tuple(int(part) for part in str(text).split("."))


def test_the_newest_release_in_the_changelog_is_galaxy_yml_s_version():
    with open(os.path.join(ROOT, "changelogs", "changelog.yaml")) as handle:
        releases = yaml.safe_load(handle)["releases"]
    assert releases, "changelogs/changelog.yaml records no release"
    assert max(releases, key=version_tuple) == galaxy_version()


def test_the_benchmark_client_reports_galaxy_yml_s_version():
    assert _bench.CLIENT_VERSION == galaxy_version()


def test_no_version_added_is_newer_than_the_collection():
    found = {}
    paths = glob.glob(os.path.join(ROOT, "plugins", "**", "*.py"), recursive=True)
    paths += glob.glob(os.path.join(ROOT, "plugins", "filter", "*.yml"))
    for path in paths:
        with open(path) as handle:
            for value in re.findall(r"^\s*version_added:\s*['\"]?([0-9.]+)", handle.read(), re.M):
                found.setdefault(value, []).append(os.path.relpath(path, ROOT))
    assert found, "no version_added found: the scan reads nothing"
    newer = dict((v, paths) for v, paths in found.items() if version_tuple(v) > version_tuple(galaxy_version()))
    assert not newer, "version_added newer than galaxy.yml's %s: %s" % (galaxy_version(), newer)
