# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""resolve_variant and variant_names: the serving_variants catalog, resolved on the controller."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.serving.plugins.plugin_utils import _variants


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


class FilterModule(object):
    def filters(self):
        return {"resolve_variant": resolve_variant, "variant_names": variant_names}
