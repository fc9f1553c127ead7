# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The instance parameters are decided once (_instance_args.INSTANCE_SPEC); the doc fragment that documents
them must say the same: every option, its type, default, choices and whether it is required."""

from __future__ import annotations

import os

import yaml

from ansible_collections.inferops.serving.plugins.doc_fragments import instance
from ansible_collections.inferops.serving.plugins.module_utils import _instance_args

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")


def test_the_fragment_documents_the_spec_exactly():
    documented = yaml.safe_load(instance.ModuleDocFragment.DOCUMENTATION)["options"]
    assert sorted(documented) == sorted(_instance_args.INSTANCE_SPEC)
    for key, spec in _instance_args.INSTANCE_SPEC.items():
        doc = documented[key]
        assert doc["type"] == spec["type"], key
        assert doc.get("required", False) == spec.get("required", False), key
        assert doc.get("choices") == spec.get("choices"), key
        if "default" in spec:
            assert type(spec["default"])(doc["default"]) == spec["default"], key
        else:
            assert "default" not in doc, key


def test_no_role_or_plugin_restates_an_instance_default():
    """The state and log directories are written in the spec (and the fragment's literal) only."""
    found = []
    for top in ("roles", "plugins", "playbooks"):
        for base, dummy, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                path = os.path.join(base, name)
                if not name.endswith((".py", ".yml", ".yaml")) or path.endswith(("_instance_args.py", "instance.py")):
                    continue
                with open(path) as handle:
                    text = handle.read()
                for value in (_instance_args.DEFAULT_STATE_DIR, _instance_args.DEFAULT_LOG_DIR):
                    if value in text:
                        found.append("%s: %s" % (os.path.relpath(path, ROOT), value))
    assert found == []
