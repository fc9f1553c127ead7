# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The variant catalog (serving_variants): inheritance through `extends`, merging, validation.

Controller side, pure Python, so it is unit-tested without Ansible. A variant is a dict of the
fields below. `extends: other` deep-merges `other` first: dicts are merged key by key, lists and
scalars of the child replace the parent's. Every variant of the catalog is resolved, not only the
one asked for, because a rollback may need any of them: a broken catalog is refused before any
host is touched.
"""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.module_utils._engines import ENGINES

FIELDS = {
    "engine": "str", "model": "str", "engine_args": "dict", "env": "dict", "command": "list",
    "extends": "str", "executable": "str", "python": "str", "served_model_name": "str",
    "ready_timeout": "number", "description": "str", "flag_check": "bool", "drain_metric": "str",
}


class VariantError(ValueError):
    """The catalog or the asked variant is wrong; the message says what and what is allowed."""


def _known(catalog):
    return ", ".join(sorted(catalog)) or "(none)"


def _plain(value):
    """A copy with dicts and lists rebuilt and scalars shared. Unlike copy.deepcopy, it does not copy
    the templating state of Ansible's lazy containers (a catalog read from inventory is one): that
    made resolving a small catalog cost a tenth of a second per task."""
    if isinstance(value, dict):
        return dict((key, _plain(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def merge(base, override):
    """Deep merge into a new dict: dicts key by key, anything else (lists, scalars) replaced by the override."""
    out = _plain(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = _plain(value)
    return out


def _shape_errors(name, spec):
    if not isinstance(spec, dict):
        return ["variant %s must be a dict of %s, got %s" % (name, ", ".join(sorted(FIELDS)), type(spec).__name__)]
    errors = []
    unknown = sorted(set(spec) - set(FIELDS))
    if unknown:
        errors.append("variant %s has unknown field(s) %s; allowed: %s"
                      % (name, ", ".join(unknown), ", ".join(sorted(FIELDS))))
    for key, kind in FIELDS.items():
        value = spec.get(key)
        if value is None:
            continue
        if kind == "str" and not isinstance(value, str):
            errors.append("variant %s: %s must be a string, got %r" % (name, key, value))
        elif kind == "dict" and not isinstance(value, dict):
            errors.append("variant %s: %s must be a dict, got %r" % (name, key, value))
        elif kind == "list" and not (isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value)):
            errors.append("variant %s: %s must be a list of strings (an argv), got %r" % (name, key, value))
        elif kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            errors.append("variant %s: %s must be a positive number of seconds, got %r" % (name, key, value))
        elif kind == "bool" and not isinstance(value, bool):
            errors.append("variant %s: %s must be true or false, got %r" % (name, key, value))
    for key, value in (spec.get("env") or {}).items() if isinstance(spec.get("env"), dict) else ():
        if isinstance(value, (dict, list)) or value is None:
            errors.append("variant %s: env %s must be a string or number, got %r" % (name, key, value))
    return errors


def _chain(catalog, name):
    """[root, ..., name] following extends; raises on a cycle or an unknown parent."""
    chain, current = [], name
    while current is not None:
        if current in chain:
            raise VariantError("variant %s: extends forms a cycle: %s" % (name, " -> ".join(chain + [current])))
        if current not in catalog:
            raise VariantError("variant %s extends unknown variant %r; known variants: %s"
                               % (chain[-1], current, _known(catalog)))
        chain.append(current)
        spec = catalog[current]
        current = spec.get("extends") if isinstance(spec, dict) else None
    return list(reversed(chain))


def _resolve_one(catalog, name, defaults):
    errors = []
    for member in _chain(catalog, name):
        errors.extend(_shape_errors(member, catalog[member]))
    if errors:
        raise VariantError("; ".join(errors))
    chain = _chain(catalog, name)
    merged = {}
    for member in chain:
        merged = merge(merged, dict((k, v) for k, v in catalog[member].items() if k != "extends"))
    spec = {"name": name, "chain": chain}
    for key in FIELDS:
        if key != "extends":
            spec[key] = merged.get(key)
    spec["engine"] = spec["engine"] or defaults.get("engine") or None
    spec["model"] = spec["model"] or defaults.get("model") or None
    spec["engine_args"] = spec["engine_args"] or {}
    spec["env"] = dict((k, str(v)) for k, v in (spec["env"] or {}).items())
    if spec["command"] is not None:
        spec["command"] = [str(item) for item in spec["command"]]
    if not spec["engine"]:
        errors.append("variant %s has no engine (set engine in the variant or serving_engine); allowed: %s"
                      % (name, ", ".join(ENGINES)))
    elif spec["engine"] not in ENGINES:
        errors.append("variant %s: engine %r is not one of %s" % (name, spec["engine"], ", ".join(ENGINES)))
    if not spec["model"]:
        errors.append("variant %s has no model (set model in the variant or serving_model)" % name)
    if spec["engine"] == "command" and not spec["command"]:
        errors.append("variant %s: engine command needs command, the full argv of the server" % name)
    if spec["engine"] not in (None, "command") and spec["command"]:
        errors.append("variant %s: command is only for engine command (engine is %s)" % (name, spec["engine"]))
    if errors:
        raise VariantError("; ".join(errors))
    return spec


def resolve_all(catalog, engine=None, model=None):
    """{name: resolved spec} for every variant; raises VariantError naming every problem found."""
    if not isinstance(catalog, dict) or not catalog:
        raise VariantError("serving_variants must be a non-empty dict of variant name -> {engine, model, "
                           "engine_args, env, command, extends}, got %r" % (catalog,))
    defaults = {"engine": engine, "model": model}
    resolved, errors = {}, []
    for name in sorted(catalog):
        try:
            resolved[name] = _resolve_one(catalog, name, defaults)
        except VariantError as exc:
            errors.append(str(exc))
    if errors:
        raise VariantError("serving_variants does not resolve: " + " | ".join(errors))
    return resolved


def resolve(catalog, name, engine=None, model=None):
    """The resolved spec of variant `name` (after checking the whole catalog resolves)."""
    if isinstance(catalog, dict) and catalog and not name:
        raise VariantError("no variant given: pass -e variant=NAME; known variants: %s" % _known(catalog))
    if isinstance(catalog, dict) and catalog and name not in catalog:
        raise VariantError("unknown variant %r; known variants: %s" % (name, _known(catalog)))
    return resolve_all(catalog, engine, model)[name]


def name_list(value):
    """Variant names as a run gives them (-e variants=a,b or a list): each trimmed, empty ones left out, in order."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        items = [items]
    return [str(item).strip() for item in items if str(item).strip()]
