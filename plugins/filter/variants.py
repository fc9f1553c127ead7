# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""resolve_variant and variant_names: the serving_variants catalog, resolved on the controller; state_record:
what a server's state file says serves."""

from __future__ import annotations

import base64
import binascii
import json

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.plugin_utils._lazy import LazyModule

# Imported on first use: Ansible loads every filter file to find one filter (plugin_utils/_lazy.py).
_variants = LazyModule("_variants")


def resolve_variant(catalog, name, engine=None, model=None):
    try:
        return _variants.resolve(catalog, name, engine=engine, model=model)
    except _variants.VariantError as exc:
        raise AnsibleFilterError(str(exc))


def variant_names(catalog, engine=None, model=None):
    try:
        return sorted(_variants.resolve_all(catalog, engine, model))
    except _variants.VariantError as exc:
        raise AnsibleFilterError(str(exc))


def state_record(content):
    """The record in a state file's content (slurp's base64, as the role reads it): {} when nothing is recorded,
    or when the file is empty or half-written (inference_server rebuilds such a file from the processes)."""
    if not content:
        return {}
    try:
        record = json.loads(base64.b64decode(content, validate=True).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return {}
    return record if isinstance(record, dict) and not record.get("corrupt") else {}


class FilterModule(object):
    def filters(self):
        return {"resolve_variant": resolve_variant, "variant_names": variant_names, "state_record": state_record}
