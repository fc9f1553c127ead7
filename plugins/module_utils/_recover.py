# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What serves when the state file is lost: the record rebuilt from the processes themselves.

The state file (NAME.json) is one file; a full disk, an operator's editor or a restore from backup can
empty, truncate or delete it while the engine serves. The engine still carries the instance's marker
(_marker, version 2 with the fingerprint of its launch), its watchdog is still its parent, and
NAME.launch.json still holds the parameters it was started with, secrets included. From those the record
is rebuilt, so that a switch stops what serves knowingly (and restores it when the new variant fails), and a
re-run of the same variant keeps it.

The launch file is believed only when its parameters build the very launch the engine carries: the same
fingerprint as the marker's (or, for an engine marked by an earlier version, the same command line).
Then the variant label comes from it (it wins over anything else: a relabel changes only the label) and so
do the secrets. Without it the record says what the processes show, no secrets, and no variant.
Standard library only.
"""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.module_utils import (
    _engines, _fingerprint, _marker, _procs, _switch, _watchdog)

WATCHDOG_MARK = _watchdog.__doc__.splitlines()[0]  # its docstring opens the -c source the supervisor runs


def main_engine(carriers, root=_procs.PROC_ROOT):
    """The ProcInfo of the instance's engine among its marker carriers ({pid: starttime}): the process group
    leader whose parent is not itself a carrier (the supervisors start the engine in a group of its own), else
    the earliest started. None when none lives."""
    infos = [info for info in (_procs.read_proc(pid, root) for pid in carriers)
             if info is not None and info.starttime == carriers[info.pid] and info.state not in ("Z", "X")]
    if not infos:
        return None
    leaders = [info for info in infos if info.pgid == info.pid and info.ppid not in carriers]
    return min(leaders or infos, key=lambda info: (info.starttime, info.pid))


def watchdog_of(info, root=_procs.PROC_ROOT):
    """(pid, starttime) of the engine's watchdog when its parent is one (python -c <_watchdog source>)."""
    parent = _procs.read_proc(info.ppid, root) if info.ppid > 1 else None
    if parent is not None and len(parent.argv) > 2 and parent.argv[1] == "-c" and WATCHDOG_MARK in parent.argv[2]:
        return parent.pid, parent.starttime
    return None, None


def confirmed(stored, engine, marker, version_of):
    """(params, launch, version) when the launch file's current parameters build the launch the engine
    carries, else Nones. version_of(adapter, params): the engine's version, as the adapter reads it."""
    params = (stored or {}).get("current")
    if not isinstance(params, dict) or not params.get("engine"):
        return None, None, None
    try:
        adapter = _engines.adapter(params["engine"])
        version = version_of(adapter, params)
        launch = adapter.build(params, version)
    except (_engines.EngineError, KeyError, TypeError, ValueError):
        return None, None, None
    if marker.fingerprint:
        same = marker.fingerprint == launch.fingerprint
    else:  # a version-1 marker carries no fingerprint: the command line must be the launch's
        same = bool(engine.argv) and engine.argv[1:] == list(launch.argv[1:])
    return (params, launch, version) if same else (None, None, None)


def unconfirmed(record):
    """A record rebuilt with nothing to confirm its launch (no launch file of that fingerprint): its variant,
    argv and secrets are unknown, so it cannot be restored and a re-run of it restarts once."""
    return bool(record) and bool(record.get("recovered")) and not record.get("secrets_digest")


def rebuild(sup, stored, version_of, why):
    """(record, note) for an instance whose state file is `why` ('missing' or 'corrupt'): the record of the
    engine that carries its marker, and the sentence that says so; (None, None) when none runs.

    sup: the instance's supervisor; stored: NAME.launch.json's content (or None); version_of(adapter, params):
    the engine's version."""
    root = sup.root
    engine = main_engine(sup.carriers(), root)
    if engine is None:
        return None, None
    marker = _marker.of_process(engine.pid, root)
    if marker is None:
        return None, None
    watchdog, watchdog_start = watchdog_of(engine, root)
    record = {"name": sup.name, "pid": engine.pid, "pgid": engine.pgid, "starttime": engine.starttime,
              "started_at": _procs.started_at(engine, root), "supervisor": sup.kind, "marker": sup.marker,
              "fingerprint": marker.fingerprint, "argv": None, "variant": None, "ready_s": None, "log_offset": 0,
              "recovered": why}
    if watchdog:
        record.update(watchdog=watchdog, watchdog_starttime=watchdog_start)
    if sup.kind == "systemd":
        record["unit"] = getattr(sup, "unit", None)
    params, launch, version = confirmed(stored, engine, marker, version_of)
    if params is None:
        note = "state file was %s: rebuilt from pid %d (variant unknown: %s.launch.json %s)" % (
            why, engine.pid, sup.name, "describes another launch" if stored else "is gone")
        return record, note
    salt = _fingerprint.new_salt()
    record.update(engine=params["engine"], model=params.get("model"), variant=params.get("variant"),
                  served_model_name=params.get("served_model_name"), served_model=launch.probe_model,
                  fingerprint=launch.fingerprint, argv=launch.public_argv, host=params.get("host"),
                  port=params.get("port"), engine_version=version, secrets_salt=salt,
                  secrets_digest=_fingerprint.secrets_digest(salt, _switch.secrets_of(params)))
    if params.get("port"):
        record["url"] = _switch.url_of(params.get("host") or "127.0.0.1", params["port"])
    return record, "state file was %s: rebuilt from pid %d (variant %s)" % (why, engine.pid, params.get("variant") or "unnamed")
