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
reclaim scope, unhealthy GPUs), and the host memory the variant declares (host_memory_mib) against
MemAvailable plus what the running server's processes hold.
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
# what a cached help record holds; another format is another cache key, and a record of another format is
# read again, never misread (format 1 had only "flags": a cache of it would check no value; format 2 had no
# "defaults", which _resolved reads for transformers)
HELP_FORMAT = 3
HELP_TIMEOUT = 120  # seconds for an engine's --help (transformers' imports torch: 5-15 s)

# What a --help says of an option's value, in the shapes the engines print (all read with COLUMNS=400; an
# option's own line is never wrapped by argparse or click, only its help text is):
#   argparse, "usage: " first: SGLang 0.5.9 (sglang/srt/server_args.py ServerArgs.add_cli_args), SGLang 0.5.23
#   (sglang/srt/arg_groups/arg_utils.py add_cli_args_from_dataclass, srt/server_args.py add_cli_args), vLLM
#   0.34.0 (`vllm serve --help=all`: vllm/engine/arg_utils.py _compute_kwargs, vllm/utils/argparse_utils.py
#   FlexibleArgumentParser):
#     "  --quantization {awq,fp8,...}"                   choices, one value
#     "  --collect-detailed-traces {all,model,worker,None} [{all,model,worker,None} ...]"   each of several
#     "  --tp-size TP_SIZE, --tensor-parallel-size TP_SIZE", "  --hf-token [HF_TOKEN]"   a metavar: anything
#     "  --enable-x, --no-enable-x"                       no value
#   argparse prints no type: a metavar is the destination's name (MEM_FRACTION_STATIC), so no type is checked.
#   vLLM prints a Literal that also takes any string as a list, "--kv-cache-dtype ['auto', 'bfloat16', ...]",
#   with no choices behind it (engine/arg_utils.py literal_to_kwargs: metavar when str is allowed), and its
#   tool parsers as "--tool-call-parser {apertus,...} or name registered in --tool-parser-plugin" (a metavar,
#   entrypoints/common/cli_args.py): neither is a list of choices, and neither shape is read as one.
#   click, "Usage: " first: transformers 5.24 `transformers serve --help` (typer 0.29, click 8.x):
#     "  --reasoning [on|off|auto]"                       choices
#     "  --port INTEGER", "  --cb-max-memory-percent FLOAT" (also "INTEGER RANGE", "FLOAT RANGE")   a type
#     "  --compile / --no-compile"                        no value
_BRACES = re.compile(r"\{([^{}\s]*)\}")
# how argparse prints nargs (Python 3.9+; "[M [M ...]]" before)
_ARGPARSE_NARGS = {"M": 1, "[M]": "?", "M [M ...]": "+", "[M ...]": "*", "[M [M ...]]": "*"}
_CLICK_CHOICES = re.compile(r"^\[([^\[\]|\s]+(?:\|[^\[\]|\s]+)+)\]$")
_CLICK_TYPES = {"INTEGER": "int", "INTEGER RANGE": "int", "FLOAT": "float", "FLOAT RANGE": "float"}
_INVOCATION_PART = re.compile(r"^(-{1,2}[A-Za-z0-9][\w.-]*)(?: (.+))?$")
_BOX = "\u2502\u2503\u2551"  # rich's panel borders
# an option's own line is indented by 2 (argparse's section, click's listing; 1 inside a rich panel); its
# wrapped help by the help column (24 for argparse, more for click)
OPTION_INDENT = 6


def _metavar_spec(metavar, click):
    """What a metavar says of the values, or None when it limits nothing that can be told."""
    if click:
        if metavar in _CLICK_TYPES:
            return {"type": _CLICK_TYPES[metavar], "nargs": 1}
        found = _CLICK_CHOICES.match(metavar)
        return {"choices": found.group(1).split("|"), "nargs": 1} if found else None
    groups = _BRACES.findall(metavar)
    if not groups or len(set(groups)) != 1 or not groups[0]:
        return None
    nargs = _ARGPARSE_NARGS.get(_BRACES.sub("M", metavar))
    if nargs is None:
        shape = _BRACES.sub("M", metavar).split(" ")
        if len(shape) < 2 or set(shape) != {"M"}:
            return None  # anything else around the braces: a metavar written by hand, not argparse's choices
        nargs = len(shape)  # nargs=N prints the choices N times
    return {"choices": groups[0].split(","), "nargs": nargs}


def value_specs(text):
    """{option: spec} for each long option whose value the help limits: spec has "choices" (a list of strings)
    or "type" ("int", "float"), and "nargs" (1, N, "?", "+", "*": how many values the option takes). An option
    printed twice with different specs, or in a shape not read here, is left out: it is never judged."""
    text = text or ""
    usage = re.search(r"^[ %s]*([Uu]sage:)" % _BOX, text, re.M)
    click = bool(usage) and usage.group(1) == "Usage:"  # argparse says "usage:"
    specs, clashes = {}, set()
    for line in text.splitlines():
        bare = line.lstrip(" ")
        if bare and bare[0] in _BOX:  # "│ --device TEXT   where to run   │"
            line = bare[1:].rstrip(" " + _BOX)
        indent = len(line) - len(line.lstrip(" "))
        line = line.strip()
        if indent > OPTION_INDENT or not line.startswith("-") or line.startswith("- "):
            continue  # help text (vLLM 0.34.0: "--mamba-cache-mode is deprecated ...", "- "auto" will ...")
        invocation = re.split(r"\s{2,}", line)[0]
        parts = re.split(r" / (?=-)" if click else r", (?=-)", invocation)
        if click:  # "-h, --help", "--compile / --no-compile"
            parts = [p for part in parts for p in re.split(r", (?=-)", part)]
        named = []
        for part in parts:
            found = _INVOCATION_PART.match(part)
            if not found:
                named = []
                break
            named.append(found.groups())
        metavars = set(metavar for dummy, metavar in named if metavar)
        spec = _metavar_spec(metavars.pop(), click) if len(metavars) == 1 else None
        for option, metavar in named:
            if not option.startswith("--") or not metavar:
                continue
            if option in specs and specs[option] != spec:
                clashes.add(option)
            specs[option] = spec
    return dict((option, spec) for option, spec in specs.items() if spec and option not in clashes)


# A click help's defaults: "[default: 8000]", "[default: no-compile]" (a flag off)
_DEFAULT = re.compile(r"\[default:\s*([^\]]*)\]")


def option_dest(option):
    """The destination an option sets: --cb-max-memory-percent -> cb_max_memory_percent."""
    return option.lstrip("-").replace("-", "_")


def typed_value(text, kind):
    """text as kind ("int", "float"; any other kind, or text that is no such number: the text)."""
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        pass
    return text


def help_defaults(text):
    """`transformers serve --help` (typer / click) -> {dest: {"default": value, "flag": bool, "type": str,
    "options": [spellings]}}. A bool option (--compile / --no-compile) has default True or False ([default:
    no-compile] is False), or None when the help shows no default; a valued option its [default: X] as int,
    float or text, else None. Wrapped help lines are joined (a default cut at a hyphen, `[default: no-` then
    `enable-cors]`, included); the Formatting options section (the CLI's own output) and --help are left out."""
    entries, section, current = [], None, None
    for raw in (text or "").splitlines():
        line = raw.rstrip()
        bare = line.lstrip(" ")
        if bare and bare[0] in _BOX:  # "│ --device TEXT   where to run   │"
            line = bare[1:].rstrip(" " + _BOX)
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        stripped = line.strip()
        if indent == 0 and stripped.endswith(":"):
            section, current = stripped[:-1], None
            continue
        if stripped.startswith("\u256d") or stripped.startswith("\u2570"):  # rich panel top / bottom
            title = stripped.strip("\u256d\u256e\u2570\u256f\u2500 ")
            section, current = title or section, None
            continue
        if indent <= 6 and stripped.startswith("-"):
            current = {"section": section, "text": stripped}
            entries.append(current)
        elif current is not None:
            joiner = "" if current["text"].endswith("-") and not current["text"].endswith(" -") else " "
            current["text"] += joiner + stripped
    out = {}
    for entry in entries:
        if entry["section"] and "format" in entry["section"].lower():
            continue
        invocation = re.split(r"\s{2,}", entry["text"])[0]
        parts = [p.strip() for p in re.split(r" / |, ", invocation)]
        options = [p.split()[0] for p in parts if p.startswith("--")]
        if not options or options[0] == "--help":
            continue
        metavar = parts[0].split()[1] if len(parts[0].split()) > 1 else None
        flag = " / " in invocation and metavar is None
        found = _DEFAULT.search(entry["text"])
        shown = found.group(1).strip() if found else None
        if flag:
            default = None if shown is None else not shown.lstrip("-").startswith("no-")
            kind = "bool"
        else:
            kind = _CLICK_TYPES.get(metavar, "str")
            default = None if shown is None else typed_value(shown, kind)
        out[option_dest(options[0])] = {"default": default, "flag": flag, "type": kind, "options": options}
    return out


def _help_cache_key(help_argv, version, env):
    exe = shutil.which(help_argv[0]) or help_argv[0]
    try:
        stat = os.stat(exe)
        identity = [os.path.realpath(exe), stat.st_size, int(stat.st_mtime)]
    except OSError:
        identity = [exe]
    blob = json.dumps([help_argv, identity, version, sorted(env.items()), HELP_FORMAT], sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:24]


def _cached_help(path):
    """The help record cached at path, or None when there is none of this format."""
    try:
        with open(path) as handle:
            record = json.load(handle)
        if record["format"] == HELP_FORMAT and all(isinstance(record[key], kind) for key, kind in (
                ("flags", list), ("values", dict), ("defaults", dict))):
            return record
    except (IOError, OSError, ValueError, KeyError, TypeError):
        pass
    return None


def read_help(help_argv, env, version, run, cache_dir, create=True):
    """What the engine's own --help says, read once per launcher and version and cached in cache_dir: the
    preflight's flags and values, and the defaults _resolved reports for an engine that resolves nothing it can
    be asked (transformers). ({"flags": the long options it lists, "values": value_specs, "defaults":
    help_defaults}, None), or (None, why) when the help could not be read. cache_dir None: read, never cached."""
    path = os.path.join(cache_dir, "%s.json" % _help_cache_key(help_argv, version, env)) if cache_dir else None
    record = _cached_help(path) if path else None
    if record is not None:
        return record, None
    call_env = dict(env)
    call_env.update(_HELP_ENV)
    limit = shutil.which("timeout")
    argv = ([limit, "--kill-after=5", str(HELP_TIMEOUT)] if limit else []) + list(help_argv)
    rc, out, err = run(argv, environ_update=call_env, expand_user_and_vars=False)
    flags = sorted(set(m.rstrip(".-") for m in _OPTION.findall(out or "")) - {"--"})
    if rc != 0 or len(flags) < 3:
        tail = " ".join(((err or "") + " " + (out or "")).split())[-300:]
        return None, "%s exited %s listing %d flags: %s" % (" ".join(help_argv), rc, len(flags), tail)
    record = {"format": HELP_FORMAT, "argv": help_argv, "version": version, "flags": flags,
              "values": value_specs(out), "defaults": help_defaults(out)}
    if create and path:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        _supervisor.write_atomic(path, json.dumps(record, sort_keys=True) + "\n")
    return record, None


def accepted_flags(help_argv, env, version, run, cache_dir, create=True):
    """The long options the engine's own --help lists: (flags, None), or (None, why) (read_help)."""
    record, why = read_help(help_argv, env, version, run, cache_dir, create)
    return (record["flags"], None) if record else (None, why)


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


# the choices a message lists at most (SGLang 0.5.23 lists 90 attention backends)
MAX_CHOICES_SHOWN = 40


def _integer(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _among(value, choices, fold):
    """Whether a parser that lists choices takes value, erring towards yes: argparse converts the value with
    the option's type before it looks among the choices, and the help shows only the choices."""
    if value in choices:
        return True
    if value == "" and "None" in choices:
        return True  # vLLM 0.34.0 engine/arg_utils.py optional_type: "" and "None" are None, a choice
    numbers = [_integer(c) for c in choices if c != "None"]
    if numbers and None not in numbers and _integer(value) in numbers:
        return True  # type=int choices ({0,1,2,3}): "03" is 3
    if fold == "value":
        return value.lower().replace("-", "_") in choices
    if fold == "both":
        return value.lower().replace("-", "_") in set(c.lower().replace("-", "_") for c in choices)
    return False


def judge_value(flag, value, spec, fold="exact"):
    """None when the engine's parser would take value for flag as far as its --help tells (spec, from
    value_specs), else why not, naming the flag, the value and what the help allows. fold: how the parser may
    change the value before it looks among the choices, which its help cannot show: "exact" not at all,
    "value" lowercased with '-' made '_' (vLLM 0.34.0 engine/arg_utils.py add_cli_args, type=lambda s:
    s.lower().replace("-", "_") for --moe-backend, --linear-backend, --sparse-indexer-topk-backend), "both"
    value and choices compared that way (click's Choice(case_sensitive=False), an engine not read here)."""
    if not spec:
        return None
    shown = value if value and value.split() == [value] else json.dumps(value)
    choices = spec.get("choices")
    if choices is not None:
        if _among(value, choices, fold):
            return None
        near = difflib.get_close_matches(value, choices, n=2, cutoff=0.6)
        listed = ", ".join(choices[:MAX_CHOICES_SHOWN])
        if len(choices) > MAX_CHOICES_SHOWN:
            listed += ", ... (%d in all)" % len(choices)
        return "%s %s is not among the choices its --help lists: %s%s" % (
            flag, shown, listed, " (nearest: %s)" % ", ".join(near) if near else "")
    kind = spec.get("type")
    convert, said = {"int": (int, "an integer"), "float": (float, "a number")}.get(kind, (None, None))
    if convert is None:
        return None
    try:
        convert(value)  # what click's INTEGER and FLOAT do (click/types.py _NumberParamTypeBase.convert)
    except ValueError:
        return "%s %s is not %s, the type its --help gives it" % (flag, shown, said)
    return None


def _taken(values, nargs):
    """The values the option itself takes from those after it in the argv (argparse and click leave the
    rest to other arguments, which the parser then refuses or takes on its own)."""
    if nargs in ("+", "*"):
        return list(values)
    if nargs == "?":
        return list(values[:1])
    return list(values[:nargs if isinstance(nargs, int) else 1])


# how each engine's parser may change a value before it looks among the choices (judge_value's fold). SGLang
# 0.5.9 and 0.5.23: not at all; every option with choices has type str, int or (0.5.23 --cuda-graph-backend-*)
# srt/model_executor/cuda_graph_config.py parse_cuda_graph_backend_arg, which returns the value as given. vLLM:
# its own normaliser (0.34.0 uses it for three options; its help cannot say which, so any option may).
# Any other engine: case and separators are let through both ways.
FOLD = {"sglang": "exact", "vllm": "value"}


def _option_of(flag, accepted, abbrev):
    """The option of the help that flag stands for: itself, or the one it abbreviates where argparse allows it."""
    if flag in accepted or not abbrev:
        return flag
    longer = [a for a in accepted if a.startswith(flag)]
    return longer[0] if len(longer) == 1 else flag


def flag_problems(adapter, params, launch, version, run, create=True):
    """Each flag of the launch, and each value of one, that the engine's own parser would refuse (the engine
    exiting 2 right after the old server was stopped). ([], None) when not checked: engine=command,
    flag_check=false, no run."""
    help_argv = adapter.help_argv(params)
    if not help_argv or not params.get("flag_check", True) or run is None:
        return [], None
    cache_dir = os.path.join(params["state_dir"], "engine-flags")
    record, why = read_help(help_argv, launch.env, version, run, cache_dir, create=create)
    if record is None:
        return [], {"checked": False, "why": why}
    accepted, specs = set(record["flags"]), record["values"]
    engine = "engine %s %s" % (adapter.name, version or "(version unknown)")
    fold = FOLD.get(adapter.name, "both")
    problems = []
    for flag, values in launch.flags:
        verdict = judge_flag(flag, accepted, adapter.abbrev, adapter.hidden_negations, adapter.spelling(flag))
        if verdict:
            problems.append("%s does not accept %s: it %s (set flag_check: false in the variant if "
                            "its --help is incomplete)" % (engine, flag, verdict))
            continue
        spec = specs.get(_option_of(flag, accepted, adapter.abbrev))
        for value in _taken(values, spec.get("nargs", 1)) if spec else []:
            if value in launch.secrets:
                continue  # never in a message; no secret has choices anyway
            verdict = judge_value(flag, value, spec, fold)
            if verdict:
                problems.append("%s would refuse a value: %s (set flag_check: false in the variant if its "
                                "--help is incomplete)" % (engine, verdict))
    return problems, {"checked": True, "argv": help_argv, "flags": len(accepted), "values": len(specs)}


def gpu_problems(params, spared, run, find_smi, owner=None, write=True):
    """(blockers, survey) of params["gpu_check"] once spared are gone, as instance owner sees the GPUs, with its
    health signals (_health: Xid, NVLink, PCIe, DCGM level 1); ([], None) without a gpu_check."""
    if not params.get("gpu_check") or run is None:
        return [], None
    return _idle_check.blockers(params["gpu_check"], run, find_smi, spared=spared, owner=owner, write=write)


def meminfo_mib(root=_procs.PROC_ROOT):
    """{field: MiB} of /proc/meminfo (MemAvailable, MemTotal, ...), {} when it cannot be read."""
    found = {}
    try:
        with open(os.path.join(root, "meminfo")) as handle:
            for line in handle:  # "MemAvailable:   12345678 kB"
                key, dummy, rest = line.partition(":")
                parts = rest.split()
                if len(parts) == 2 and parts[0].isdigit() and parts[1] == "kB":  # HugePages_Total: a count
                    found[key.strip()] = int(parts[0]) // 1024
    except (IOError, OSError):
        return {}
    return found


def rss_mib(pids, root=_procs.PROC_ROOT):
    """The resident memory of pids (VmRSS of /proc/PID/status, summed), in MiB; a pid gone counts 0."""
    total_kib = 0
    for pid in pids:
        try:
            with open(os.path.join(root, str(pid), "status")) as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total_kib += int(line.split()[1])
                        break
        except (IOError, OSError, ValueError, IndexError):
            continue
    return total_kib // 1024


def memory_problem(params, spared, root=_procs.PROC_ROOT):
    """None when params["host_memory_mib"] (what the variant needs, unset: not checked) fits what the host has
    available once the running server's processes (spared) are gone: MemAvailable plus their resident memory;
    else why not, naming needed and available. A host whose /proc/meminfo has no MemAvailable is not judged."""
    need = params.get("host_memory_mib")
    if not need:
        return None
    available = meminfo_mib(root).get("MemAvailable")
    if available is None:
        return None
    freed = rss_mib(spared, root)
    if need <= available + freed:
        return None
    return ("host memory: variant %s needs host_memory_mib %d MiB, the host has %d MiB available (MemAvailable "
            "%d MiB plus %d MiB resident in the %d process(es) of instance %s that the stop would free); free memory "
            "or lower the variant's needs" % (params.get("variant") or params.get("engine"), need, available + freed,
                                              available, freed, len(spared), params["name"]))


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
        memory_problem(params, spared),
    ) if problem]
    flags, flag_check = ([], None) if launcher else flag_problems(adapter, params, launch, version, run, create)
    gpus, survey = gpu_problems(params, spared, run, find_smi, owner, write=create)
    return blockers + flags + gpus, survey, flag_check
