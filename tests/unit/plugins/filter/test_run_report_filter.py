# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the run report filters (final_check, converge_checks, plan_words): each registered and documented as
its signature (its documentation parses: ansible-doc reads it), and bad input a filter error naming the filter."""

from __future__ import annotations

import inspect
import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.filter import run_report as run_report_filter

HERE = os.path.dirname(os.path.abspath(run_report_filter.__file__))
NAMES = ["converge_checks", "final_check", "plan_words"]


def test_the_module_registers_exactly_its_filters():
    filters = run_report_filter.FilterModule().filters()
    assert sorted(filters) == NAMES
    assert all(filters[name] is getattr(run_report_filter, name) for name in filters)


@pytest.mark.parametrize("name", NAMES)
def test_each_documentation_names_the_signature(name):
    with open(os.path.join(HERE, "%s.yml" % name)) as handle:
        doc = yaml.safe_load(handle)["DOCUMENTATION"]
    params = list(inspect.signature(getattr(run_report_filter, name)).parameters)
    assert doc["name"] == name
    assert doc["positional"].split(", ") == params[1:]
    assert sorted(doc["options"]) == sorted(["_input"] + params[1:])


def test_bad_input_is_a_filter_error_naming_the_filter():
    with pytest.raises(AnsibleFilterError, match="^converge_checks: "):
        run_report_filter.converge_checks("not a plan", None, "demo")
    with pytest.raises(AnsibleFilterError, match="^final_check: "):
        run_report_filter.final_check([None])
