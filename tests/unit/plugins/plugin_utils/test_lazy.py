# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of plugin_utils/_lazy.py (a filter's code imported on first use, or warmed in the controller's main
process) and of the bench_facts callback's choice of the plays it warms for."""

from __future__ import annotations

import os
import sys

import pytest

from ansible_collections.inferops.serving.plugins.callback import bench_facts
from ansible_collections.inferops.serving.plugins.plugin_utils import _lazy

FULL = _lazy.PACKAGE + "._steady"


@pytest.fixture
def unimported(monkeypatch):
    """_steady (a small plugin_utils module no role filter warms) taken out of sys.modules for the test."""
    monkeypatch.delitem(sys.modules, FULL, raising=False)
    return FULL


def test_a_lazy_module_imports_on_its_first_attribute(unimported):
    lazy = _lazy.LazyModule("_steady")
    assert "not imported yet" in repr(lazy) and unimported not in sys.modules
    assert lazy.unsteady_levels is sys.modules[unimported].unsteady_levels
    assert repr(lazy).endswith(", imported>")


def test_warm_imports_the_names_into_this_process_and_skips_one_that_fails(unimported):
    assert _lazy.warm(("_steady", "_no_such_module")) == ["_steady"]
    assert unimported in sys.modules


def test_warm_by_default_imports_what_the_role_filters_use():
    assert _lazy.warm() == list(_lazy.ROLE_MODULES)
    for name in _lazy.ROLE_MODULES:
        assert "%s.%s" % (_lazy.PACKAGE, name) in sys.modules


class Role(object):
    def __init__(self, fqcn):
        self.fqcn = fqcn

    def get_name(self, include_role_fqcn=True):
        return self.fqcn if include_role_fqcn else self.fqcn.rsplit(".", 1)[-1]


class Play(object):
    def __init__(self, *roles):
        self.roles = [Role(r) for r in roles]

    def get_name(self):
        return "a play"

    def get_roles(self):
        return self.roles

    def get_variable_manager(self):
        raise AttributeError("no variable manager in this test")


@pytest.mark.parametrize("roles, playbook, expected", [
    (("inferops.serving.serve_variant",), "/elsewhere/site.yml", True),
    (("someone.else.web", "inferops.serving.inference_server"), None, True),
    (("someone.else.web",), "/elsewhere/site.yml", False),
    ((), None, False),
    ((), os.path.join(bench_facts.COLLECTION_ROOT, "playbooks", "rollout.yml"), True),
    # a sibling directory whose name starts like the collection's root is not inside it
    ((), bench_facts.COLLECTION_ROOT + "-other/playbooks/rollout.yml", False),
], ids=["our-role", "our-role-among-others", "another-collection", "no-roles", "our-playbook", "a-sibling-dir"])
def test_the_callback_warms_for_a_play_of_this_collection_only(roles, playbook, expected):
    assert bench_facts.runs_collection(Play(*roles), playbook) is expected


def test_a_play_object_without_roles_is_not_ours():
    assert bench_facts.runs_collection(object(), None) is False


def test_the_callback_warms_once_at_the_first_play_of_this_collection(monkeypatch):
    calls = []
    monkeypatch.setattr(_lazy, "warm", lambda: calls.append("warm"))
    callback = bench_facts.CallbackModule()
    callback.v2_playbook_on_play_start(Play("someone.else.web"))
    assert calls == []
    callback.v2_playbook_on_play_start(Play("inferops.serving.serve_variant"))
    callback.v2_playbook_on_play_start(Play("inferops.serving.serve_variant"))
    assert calls == ["warm"]
