# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What can be known before a running server is stopped: every reason the new one could not start
that does not depend on the new engine itself. Standard library only; reads, never changes anything.

A blocker is a message; any blocker means the switch fails with "nothing was stopped: ..." and the
server that runs keeps running. Checked: the state and log directories (writable, with free space),
the launcher (executable / python / command[0]) present, a local model path present, the new port
free when it is not the running server's, and the GPU holders that will remain once the running
server's processes are gone (protected daemons, another live instance's engine, holders outside the
reclaim scope, unhealthy GPUs).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shutil
import tempfile

from ansible_collections.inferops.serving.plugins.module_utils import (
    _engines, _idle_check, _instances, _procs, _supervisor)

# A state file and a log's first lines need little; a disk this full fails the switch half-way.
MIN_FREE_MIB = 16


def _existing_parent(path):
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def dir_problem(label, path, create, min_free_mib=MIN_FREE_MIB):
    """None when path is (or can be made) a writable directory with min_free_mib free, else why not.
    create=False (check mode) never creates anything: the nearest existing parent is checked instead."""
    if create:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            return "%s %s cannot be created: %s" % (label, path, exc.strerror or exc)
    where = path if os.path.isdir(path) else _existing_parent(path)
    if not os.path.isdir(where):
        return "%s %s is not a directory" % (label, where)
    try:
        stat = os.statvfs(where)
    except OSError as exc:
        return "%s %s cannot be read: %s" % (label, where, exc.strerror or exc)
    free_mib = stat.f_bavail * stat.f_frsize // (1024 * 1024)
    if free_mib < min_free_mib:
        return "%s %s has %d MiB free (at least %d MiB needed)" % (label, where, free_mib, min_free_mib)
    if not create:
        if not os.access(where, os.W_OK | os.X_OK):
            return "%s %s is not writable" % (label, where)
        return None
    try:  # a real write: os.access says yes on a read-only mount for root
        fd, probe = tempfile.mkstemp(prefix=".inferops-preflight-", dir=path)
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        return "%s %s is not writable: %s" % (label, path, exc.strerror or exc)
    return None


def launcher_problem(adapter, params):
    exe = adapter.launcher(params)
    if not exe:
        return None
    if os.sep in exe:
        if not os.path.isfile(exe):
            return "the engine's launcher %s does not exist" % exe
        if not os.access(exe, os.X_OK):
            return "the engine's launcher %s is not executable" % exe
        return None
    if shutil.which(exe) is None:
        return "the engine's launcher %r is not on PATH (%s); set executable or python" % (
            exe, os.environ.get("PATH", ""))
    return None


def model_problem(params):
    """A model given as a local path (absolute, ./, ../ or ~) must exist; hub ids are not checked."""
    model = params.get("model") or ""
    if params.get("engine") == "command" or not model.startswith(("/", "./", "../", "~")):
        return None
    if not os.path.exists(os.path.expanduser(model)):
        return "the model path %s does not exist" % model
    return None


def _listener(proc, owners):
    """'instance b (pid N, variant X)' for another live instance's process, else 'pid N (command line)'."""
    owner = owners.ownership(proc.pid)
    if owner is not None and owner.live:
        return "instance %s (pid %d%s)" % (owner.name, proc.pid, ", variant %s" % owner.variant if owner.variant else "")
    return "pid %d (%s)" % (proc.pid, proc.cmdline[:120])


def port_problem(params, record, running, spared, owner=None):
    """The port, unless the running server holds it (its stop frees it)."""
    host, port = params["host"], params["port"]
    if running and record and record.get("port") == port and record.get("host", host) == host:
        return None
    if not _engines.port_in_use(host, port):
        return None
    holders = _procs.listeners(port)
    owners = [p for p in holders if p.pid not in spared]
    if holders and not owners:
        return None  # only processes of the instance (which the stop ends) listen there
    instances = _instances.Instances(owner)
    who = ", ".join(_listener(p, instances) for p in owners) or "a process this user cannot see"
    return "port %d on %s is taken by %s, which is not instance %r; choose another port or stop it" % (
        port, host, who, params["name"])


# a long option as help texts print it ("--tp-size", "--enable-x / --no-enable-x", "│ --device TEXT")
_OPTION = re.compile(r"(?<![\w-])(--[A-Za-z0-9][\w.-]*)")
# rich and argparse wrap help to the terminal: a wide one keeps every option whole
_HELP_ENV = {"COLUMNS": "400", "TERM": "dumb", "NO_COLOR": "1"}


def _help_cache_key(help_argv, version, env):
    exe = shutil.which(help_argv[0]) or help_argv[0]
    try:
        stat = os.stat(exe)
        identity = [os.path.realpath(exe), stat.st_size, int(stat.st_mtime)]
    except OSError:
        identity = [exe]
    blob = json.dumps([help_argv, identity, version, sorted(env.items())], sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:24]


def accepted_flags(help_argv, env, version, run, cache_dir, create=True):
    """The long options the engine's own --help lists (cached per launcher and version in cache_dir):
    (flags, None), or (None, why) when the help could not be read."""
    path = os.path.join(cache_dir, "%s.json" % _help_cache_key(help_argv, version, env))
    try:
        with open(path) as handle:
            return json.load(handle)["flags"], None
    except (IOError, OSError, ValueError, KeyError):
        pass
    call_env = dict(env)
    call_env.update(_HELP_ENV)
    rc, out, err = run(help_argv, environ_update=call_env, expand_user_and_vars=False)
    flags = sorted(set(m.rstrip(".-") for m in _OPTION.findall(out or "")) - {"--"})
    if rc != 0 or len(flags) < 3:
        tail = " ".join(((err or "") + " " + (out or "")).split())[-300:]
        return None, "%s exited %s listing %d flags: %s" % (" ".join(help_argv), rc, len(flags), tail)
    if create:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        _supervisor.write_atomic(path, json.dumps({"argv": help_argv, "version": version, "flags": flags}) + "\n")
    return flags, None


def judge_flag(flag, accepted, abbrev, negatable=False, spelled=None):
    """None when the engine's parser takes flag, else why not (with the nearest spellings). negatable: the
    parser takes --no-FLAG for every boolean --FLAG without listing it (vLLM 0.34.0 hides those forms
    from --help but accepts them). spelled: the engine's own spelling of flag, when the adapter knows one."""
    if flag in accepted or not flag.startswith("--"):
        return None
    if negatable and flag.startswith("--no-") and judge_flag("--" + flag[5:], accepted, abbrev) is None:
        return None
    longer = sorted(a for a in accepted if a.startswith(flag))
    if abbrev and len(longer) == 1:
        return None  # argparse takes a unique prefix
    if abbrev and len(longer) > 1:
        return "is ambiguous (it abbreviates %s)" % ", ".join(longer[:6])
    near = longer[:3] + [a for a in difflib.get_close_matches(flag, accepted, n=3, cutoff=0.6) if a not in longer]
    if spelled in accepted:
        near = [spelled] + [a for a in near if a != spelled]
    return "is not among the flags its --help lists%s" % ("; nearest: %s" % ", ".join(near[:4]) if near else "")


def flag_problems(adapter, params, launch, version, run, create=True):
    """Each flag of the launch that the engine's own parser would refuse (the engine exiting 2 right after
    the old server was stopped). ([], None) when not checked: engine=command, flag_check=false, no run."""
    help_argv = adapter.help_argv(params)
    if not help_argv or not params.get("flag_check", True) or run is None:
        return [], None
    cache_dir = os.path.join(params["state_dir"], "engine-flags")
    accepted, why = accepted_flags(help_argv, launch.env, version, run, cache_dir, create=create)
    if accepted is None:
        return [], {"checked": False, "why": why}
    accepted = set(accepted)
    problems = []
    for flag, dummy in launch.flags:
        verdict = judge_flag(flag, accepted, adapter.abbrev, adapter.hidden_negations, adapter.spelling(flag))
        if verdict:
            problems.append("engine %s %s does not accept %s: it %s (set flag_check: false in the variant if "
                            "its --help is incomplete)" % (adapter.name, version or "(version unknown)", flag, verdict))
    return problems, {"checked": True, "argv": help_argv, "flags": len(accepted)}


def gpu_problems(params, spared, run, find_smi, owner=None):
    """(blockers, survey) of params["gpu_check"] once spared are gone, as instance owner sees the GPUs;
    ([], None) without a gpu_check."""
    if not params.get("gpu_check") or run is None:
        return [], None
    return _idle_check.blockers(params["gpu_check"], run, find_smi, spared=spared, owner=owner)


def check(params, adapter, launch, version, record, running, spared, run=None, find_smi=None, create=True,
          owner=None):
    """Every blocker of a switch to params (a list of messages), the GPU survey and the flag check (or None)."""
    launcher = launcher_problem(adapter, params)
    blockers = [problem for problem in (
        dir_problem("state_dir", params["state_dir"], create),
        dir_problem("log_dir", params["log_dir"], create),
        launcher,
        model_problem(params),
        port_problem(params, record, running, spared, owner),
    ) if problem]
    flags, flag_check = ([], None) if launcher else flag_problems(adapter, params, launch, version, run, create)
    gpus, survey = gpu_problems(params, spared, run, find_smi, owner)
    return blockers + flags + gpus, survey, flag_check
