# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every filter of the collection is documented as ansible-doc reads it: plugins/filter/NAME.yml parses as YAML
(a colon in a plain scalar breaks it, and ansible-doc then shows nothing), names the filter, documents each of its
arguments as an option (the input as _input) and lists its positional arguments in the signature's order."""

from __future__ import annotations

import glob
import importlib
import inspect
import os

import pytest
import yaml

from ansible_collections.inferops.serving.plugins import filter as filter_package

HERE = os.path.dirname(os.path.abspath(filter_package.__file__))


def registered():
    """[(file, filter name, function)] of every FilterModule under plugins/filter."""
    found = []
    for path in sorted(glob.glob(os.path.join(HERE, "*.py"))):
        base = os.path.basename(path)[:-3]
        if base.startswith("_"):
            continue
        module = importlib.import_module("%s.%s" % (filter_package.__name__, base))
        if hasattr(module, "FilterModule"):
            found += [(base, name, function) for name, function in sorted(module.FilterModule().filters().items())]
    return found


FILTERS = registered()


def test_every_filter_file_is_found():
    assert len(FILTERS) >= 49 and len(set(name for dummy, name, dummy2 in FILTERS)) == len(FILTERS)


@pytest.mark.parametrize("base, name, function", FILTERS, ids=[name for dummy, name, dummy2 in FILTERS])
def test_each_filter_is_documented_as_its_signature(base, name, function):
    path = os.path.join(HERE, "%s.yml" % name)
    assert os.path.isfile(path), "filter %s (%s.py) has no %s.yml" % (name, base, name)
    with open(path) as handle:
        doc = yaml.safe_load(handle)["DOCUMENTATION"]
    params = list(inspect.signature(function).parameters)
    assert doc["name"] == name
    assert sorted(doc["options"]) == sorted(["_input"] + params[1:])
    positional = [word for word in (doc.get("positional") or "").split(", ") if word]
    assert positional == params[1:1 + len(positional)], "positional must follow the signature's order"
