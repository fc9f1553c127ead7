# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the run report filters (final_check, converge_checks, plan_words): each registered, and bad input a
filter error naming the filter (their documentation: test_filter_docs.py)."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.filter import run_report as run_report_filter

NAMES = ["converge_checks", "final_check", "plan_words"]


def test_the_module_registers_exactly_its_filters():
    filters = run_report_filter.FilterModule().filters()
    assert sorted(filters) == NAMES
    assert all(filters[name] is getattr(run_report_filter, name) for name in filters)


def test_bad_input_is_a_filter_error_naming_the_filter():
    with pytest.raises(AnsibleFilterError, match="^converge_checks: "):
        run_report_filter.converge_checks("not a plan", None, "demo")
    with pytest.raises(AnsibleFilterError, match="^final_check: "):
        run_report_filter.final_check([None])
