# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stable hash of a resolved server configuration, standard library only.

The fingerprint is sha256 over canonical JSON (sorted keys, no whitespace), so the order of dict keys
never changes it. Secrets never enter it: the API key is replaced by a placeholder in the argv, and
environment variables whose names look like credentials are left out. A change of secret is still
detected, through secrets_digest: a salted hash kept only in the (0600) state file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

PREFIX = "sha256:"
REDACTED = "<redacted>"
# Environment variable names that hold credentials (HF_TOKEN, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, ...)
SECRET_ENV = re.compile(r"(TOKEN|KEY|SECRET|PASSW|CREDENTIAL|AUTH)", re.IGNORECASE)


def canonical(data):
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def is_secret_env(name):
    return bool(SECRET_ENV.search(name))


def public_env(env):
    """The environment without credential-looking variables."""
    return dict((k, v) for k, v in (env or {}).items() if not is_secret_env(k))


def secret_env(env):
    return dict((k, v) for k, v in (env or {}).items() if is_secret_env(k))


MASK = "********"  # what Ansible shows for a no_log value
SECRET_MIN = 4  # a secret env value shorter than this (a flag such as AUTH=1) is not masked in text


def secret_values(params):
    """The secret values of a launch's parameters: the api key, and each credential-looking env value of at least
    SECRET_MIN characters. The longest first, so that one that contains another is masked whole."""
    values = set(v for v in secret_env((params or {}).get("env")).values() if v and len(str(v)) >= SECRET_MIN)
    if (params or {}).get("api_key"):
        values.add(params["api_key"])
    return sorted((str(v) for v in values), key=len, reverse=True)


def redact(value, secrets):
    """value (text, or a list of texts such as a log tail) with every secret replaced by MASK."""
    if isinstance(value, list):
        return [redact(item, secrets) for item in value]
    if not isinstance(value, str):
        return value
    for secret in secrets:
        if secret in value:
            value = value.replace(secret, MASK)
    return value


def redact_argv(argv, secrets):
    """argv with every argument equal to (or carrying, as in --api-key=S) a secret replaced."""
    out = []
    for arg in argv:
        for secret in secrets:
            if secret and secret in arg:
                arg = arg.replace(secret, REDACTED)
        out.append(arg)
    return out


def fingerprint(engine, model, prefix, flags, env, version=None):
    """sha256 of engine, model, the argv, the public env and the engine version.

    prefix: the argv up to the first engine flag (launcher, subcommand, positional model; for
    engine=command the whole command), in order. flags: the engine flags as (name, values) pairs,
    secrets already redacted; they enter the hash sorted by name, so writing engine_args (or env) in
    another order is the same configuration.
    """
    data = {"engine": engine, "model": model, "argv": list(prefix),
            "flags": sorted([name, list(values)] for name, values in flags),
            "env": public_env(env), "version": version}
    return PREFIX + hashlib.sha256(canonical(data).encode("utf-8")).hexdigest()


def new_salt():
    return hashlib.sha256(os.urandom(32)).hexdigest()[:32]


def secrets_digest(salt, secrets):
    """Salted hash of the secrets, to detect a changed API key or token without storing it."""
    blob = canonical({"salt": salt, "secrets": secrets})
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()
