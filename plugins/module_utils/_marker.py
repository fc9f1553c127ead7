# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The instance marker: the one place that writes and reads it. Standard library only.

Every engine that inference_server starts carries INFEROPS_INSTANCE in its environment, and so do its
workers, which inherit it. The marker says which instance a process belongs to; an instance is its name
and its state directory (two state directories may each hold an instance of one name).

Forms, by version:
  1  NAME@HASH                                (inferops.serving before 1.x: still matched)
  2  NAME@HASH;v=2;dir=STATE_DIR;fp=FINGERPRINT

HASH is the first 12 hex digits of the SHA-256 of the absolute state directory, so NAME@HASH alone is the
identity: a version-1 engine that runs across an upgrade stays its instance's. Version 2 adds what a
version-1 marker makes a reader guess: the state directory itself (where the instance's record and lock
are, to tell a live instance from a leftover) and the fingerprint of the configuration it was started
with. Fields are percent-encoded; a reader ignores fields it does not know, and takes the identity of a
marker of a later version from its head.
"""

from __future__ import annotations

import hashlib
import os
import re

from urllib.parse import quote, unquote

from ansible_collections.inferops.serving.plugins.module_utils import _procs

KEY = "INFEROPS_INSTANCE"
VERSION = 2

_HASH = re.compile(r"^[0-9a-f]{12}$")


def dir_hash(state_dir):
    return hashlib.sha256(os.path.abspath(state_dir).encode("utf-8")).hexdigest()[:12]


def identity(name, state_dir):
    """NAME@HASH: what makes two markers the same instance's."""
    return "%s@%s" % (name, dir_hash(state_dir))


class Marker(object):
    """One parsed marker. state_dir is None when the marker does not carry it (version 1)."""

    __slots__ = ("name", "digest", "version", "state_dir", "fingerprint")

    def __init__(self, name, digest, version=1, state_dir=None, fingerprint=None):
        self.name = name
        self.digest = digest
        self.version = version
        self.state_dir = state_dir
        self.fingerprint = fingerprint

    @property
    def identity(self):
        return "%s@%s" % (self.name, self.digest)

    def value(self):
        """The environment value, in this marker's version."""
        if self.version < 2:
            return self.identity
        fields = [("v", str(self.version))]
        if self.state_dir:
            fields.append(("dir", self.state_dir))
        if self.fingerprint:
            fields.append(("fp", self.fingerprint))
        return ";".join([self.identity] + ["%s=%s" % (k, quote(v, safe="/:@+-_.")) for k, v in fields])

    def __repr__(self):
        return "Marker(%s)" % self.value()


def make(name, state_dir, fingerprint=None):
    """The marker of instance name in state_dir, in the current version."""
    state_dir = os.path.abspath(state_dir)
    return Marker(name, dir_hash(state_dir), VERSION, state_dir, fingerprint)


def parse(value):
    """A Marker from an environment value, or None when it is not one (any version)."""
    if not value:
        return None
    head, dummy, rest = value.partition(";")
    name, at, digest = head.rpartition("@")
    if not at or not name or not _HASH.match(digest):
        return None
    fields = {}
    for part in rest.split(";") if rest else ():
        key, eq, raw = part.partition("=")
        if eq:
            fields[key] = unquote(raw)
    try:
        version = int(fields.get("v", "1"))
    except ValueError:
        return None
    state_dir = fields.get("dir") or None
    if state_dir is not None and dir_hash(state_dir) != digest:
        state_dir = None  # a directory that is not the one hashed: not trusted to find the record
    return Marker(name, digest, version, state_dir, fields.get("fp") or None)


def of_process(pid, root=_procs.PROC_ROOT):
    """The marker in a process's environment, or None (none, unreadable, or not a marker).

    A version-1 marker does not carry its state directory: the engine's working directory is it (both
    supervisors start the engine there) when its hash agrees."""
    marker = parse(_procs.environ_get(pid, KEY, root))
    if marker is not None and marker.state_dir is None:
        cwd = _procs.cwd_of(pid, root)
        if cwd and dir_hash(cwd) == marker.digest:
            marker.state_dir = cwd
    return marker


def carriers(ident, root=_procs.PROC_ROOT, skip=()):
    """{pid: starttime} of the live processes whose marker, of any version, is instance ident's."""
    found = {}
    for info in _procs.list_procs(root):
        if info.pid in skip or info.state in ("Z", "X"):
            continue
        marker = parse(_procs.environ_get(info.pid, KEY, root))
        if marker is not None and marker.identity == ident:
            found[info.pid] = info.starttime
    return found
