# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The settings an engine really resolved, read from a ready server. Standard library only; runs on the target.

Engines change settings on their own (vLLM takes another attention backend with speculative decoding, SGLang
sizes its CUDA graphs and chunked prefill by the GPU), so what was asked is not always what runs. Each engine
says what it resolved in its own way:

- SGLang: ``GET /server_info`` (the deprecated alias ``/get_server_info`` on older builds) answers its
  ServerArgs as a dict with the scheduler's state merged in. 0.5.9 srt/entrypoints/http_server.py
  ``server_info``: ``{**dataclasses.asdict(server_args), **scheduler_info, "internal_states": [...],
  "version": ...}``; 0.5.23 srt/entrypoints/http_server.py ``server_info`` with srt/utils/common.py
  ``build_server_info``: ``server_args.resolved_dict()`` (srt/server_args.py), ``launch_command`` (the argv as
  asked, only its watermark secrets redacted by SGLang), the scheduler info, ``kv_events``, then
  ``startup_time``, ``internal_states``, ``version`` and ``frontend``. 0.5.23's dict carries ``api_key`` and
  ``admin_api_key`` in clear.
- vLLM 0.34.0: the API server logs ``non-default args: {...}`` (vllm/entrypoints/common/startup.py
  ``log_non_default_args``, called by vllm/entrypoints/launchers/launcher.py ``setup_server``): the Python repr
  of the arguments that differ from the parser's defaults, ``api_key``, ``hf_token`` and ``watermark_config``
  shown as ``***``. Its /metrics carries the gauge ``vllm:cache_config_info`` whose labels are the resolved
  CacheConfig (vllm/v1/metrics/loggers.py ``log_metrics_info``; vllm/config/cache.py ``metrics_info``:
  ``{key: str(value)}``), one label set per engine.
- ``transformers serve`` resolves nothing it reports: its settings are the defaults its ``--help`` prints
  (typer / click, ``[default: X]``) with the argv over them.
- ``engine: command``: an unknown program. ``resolved_from: auto`` asks ``GET /server_info`` once and records
  the answer only when it is a JSON object (an SGLang behind a wrapper); ``resolved_from`` names the engine
  when the program is one that answers otherwise.

What is kept: ``{"engine", "source", "settings": {name: value}, "digest"}`` and, when a read failed,
``"error"`` (never raised: a server that is ready stays ready whether or not its settings could be read).
Every value of a field whose name is a credential (``api_key``, ``admin_api_key``, ``hf_token``,
``ssl_keyfile_password``, ``watermark_key_b``; see secret_name) becomes ``********``, at any depth, as does
every known secret value inside a text and the value after a credential flag in a command line. The size is
bounded: scheduler-state blobs (``internal_states``) are dropped, any other value over VALUE_MAX characters of
JSON is replaced by a note, and the whole by TOTAL_MAX (largest values dropped first); ``dropped`` names them.
"""

from __future__ import annotations

import ast
import hashlib
import http.client
import json
import math
import os
import re

from ansible_collections.inferops.serving.plugins.module_utils import _engines, _fingerprint, _http, _preflight

MASK = _fingerprint.MASK
READ_TIMEOUT = 10.0  # seconds for each HTTP read (SGLang's /server_info asks every scheduler for its state)
BODY_MAX = 8 * 1024 * 1024  # bytes of a /server_info or /metrics answer
LOG_SCAN_MAX = 32 * 1024 * 1024  # bytes of the engine log searched for vLLM's non-default args
LINE_MAX = 1024 * 1024  # bytes of one log line
VALUE_MAX = 4096  # characters of JSON of one kept value
TOTAL_MAX = 96 * 1024  # characters of JSON of all kept settings
DROP = ("internal_states",)  # per-scheduler state (SGLang): large, changes with every request
# fields that differ between two launches of one configuration (a seed drawn at start, the port, the start
# time, the argv as asked): kept, but left out of the digest and of the comparison of variants
PER_LAUNCH = ("random_seed", "port", "host", "nccl_port", "dist_init_addr", "startup_time", "launch_command",
              "served_model_name", "model_path", "model", "tokenizer_path", "engine")
KINDS = ("auto", "sglang", "vllm", "transformers", "none")

# ---------------------------------------------------------------------------------------------------
# redaction

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
SECRET_WORDS = frozenset(("secret", "secrets", "password", "passwords", "passwd", "passphrase", "credential",
                          "credentials", "apikey"))
SECRET_TAIL = frozenset(("key", "keys", "token"))  # not tokens: a count (max_prefill_tokens)


def words_of(name):
    """'admin_api_key' -> ['admin', 'api', 'key']; 'sslKeyfilePassword' -> ['ssl', 'keyfile', 'password']."""
    return [w.lower() for w in _WORDS.findall(str(name))]


def secret_name(name):
    """Whether a field (or flag) name names a credential, case-insensitive: a word secret, password, passwd,
    passphrase, credential or apikey anywhere (ssl_keyfile_password, client_secret), or key / token as the last
    word but for a one-letter or numeric suffix (api_key, admin_api_key, hf_token, watermark_key_b, key_2).

    Whole words, not substrings: a substring rule would mask max_prefill_tokens, speculative_num_draft_tokens,
    max_total_num_tokens and tokenizer_path, the very settings a comparison of variants is about; so key and
    token count only where they end the name (speculative_token_map, stop_token_ids and ssl_keyfile stay)."""
    words = words_of(name)
    if any(w in SECRET_WORDS for w in words):
        return True
    while len(words) > 1 and (len(words[-1]) == 1 or words[-1].isdigit()):
        words = words[:-1]
    return bool(words) and words[-1] in SECRET_TAIL


_FLAG_VALUE = re.compile(r"""(?<![\w-])(--?[A-Za-z][\w.-]*)(=|\s+)(?!-)("[^"]*"|'[^']*'|[^\s'"]+)""")


def _mask_flags(text):
    """A command line in one text with the value after each credential flag masked (--api-key sk-1 ->
    --api-key ********), and any --flag=value form alike."""
    def sub(match):
        if not secret_name(match.group(1)):
            return match.group(0)
        return match.group(1) + match.group(2) + MASK
    return _FLAG_VALUE.sub(sub, text)


def _may_hold_a_secret(value):
    """A credential is a text: a non-empty text, a list with a text in it or a non-empty mapping may hold one;
    null, a boolean, a number or a list of numbers does not (allow_credentials=true, SGLang's
    bucket_time_to_first_token=[0.1, 0.5], kt_max_deferred_experts_per_token=2 are settings)."""
    if isinstance(value, str):
        return value != ""
    if isinstance(value, (list, tuple)):
        return any(isinstance(item, (str, list, tuple, dict)) for item in value)
    return isinstance(value, dict) and bool(value)


def redact(value, secrets=()):
    """value with every credential masked: the value of each field whose name is a credential (secret_name) and
    that may hold one (_may_hold_a_secret), at any depth (an unset one stays null, so that set and unset can be
    told apart); in texts, each known secret value and the value after a credential flag; in lists of texts (an
    argv), the item after a credential flag."""
    if isinstance(value, dict):
        return dict((k, MASK if secret_name(k) and _may_hold_a_secret(v) else redact(v, secrets))
                    for k, v in value.items())
    if isinstance(value, (list, tuple)):
        out, masked_next = [], False
        for item in value:
            if masked_next and isinstance(item, str) and not item.startswith("-"):
                out.append(MASK)
                masked_next = False
                continue
            masked_next = isinstance(item, str) and item.startswith("-") and "=" not in item and secret_name(item)
            out.append(redact(item, secrets))
        return out
    if isinstance(value, str):
        return _mask_flags(_fingerprint.redact(value, secrets))
    return value


# ---------------------------------------------------------------------------------------------------
# parsing (pure)

def _jsonable(value):
    """value as JSON has it: tuples and sets as lists, keys as texts, anything else JSON lacks as its repr."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return dict((k if isinstance(k, str) else repr(k), _jsonable(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v) for v in value), key=repr)
    return repr(value)


def parse_server_info(text):
    """SGLang's /server_info answer (JSON text) -> its dict; ValueError when it is not a JSON object."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("/server_info answered %s, not a JSON object" % type(data).__name__)
    return data


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
NON_DEFAULT = "non-default args: "


def _top_level(text, separator):
    """The indexes of separator in text outside brackets and quotes (a backslash escapes inside quotes)."""
    depth, quote, i = 0, None, 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == separator and depth == 0:
            yield i
        i += 1


def _split_top(text):
    """The top-level items of a Python literal's body (between its outer braces), split at commas outside
    brackets and quotes."""
    cuts = [-1] + list(_top_level(text, ",")) + [len(text)]
    items = [text[start + 1:end].strip() for start, end in zip(cuts, cuts[1:])]
    return [item for item in items if item]


def _colon(item):
    """Index of the first colon of a dict item outside quotes and brackets, or -1."""
    return next(_top_level(item, ":"), -1)


# an enum's repr, <DynamicShapesType.BACKED: 'backed'> (vLLM's compilation_config): its value stands for it
_ENUM = re.compile(r"""<[A-Za-z_][\w.]*: ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|-?[0-9][0-9.]*)>""")


def _literal(text):
    """ast.literal_eval of text, enum reprs read as their values; ValueError when it is no literal."""
    for attempt in (text, _ENUM.sub(lambda m: m.group(1), text)):
        try:
            return ast.literal_eval(attempt)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            continue
    raise ValueError("not a literal: %s" % text[:120])


def parse_py_dict(text):
    """A dict as Python's repr prints it -> a dict of JSON values. ast.literal_eval when it can (an enum's repr
    read as its value); else item by item, a value that is no literal (a config object's repr) kept as its text."""
    text = text.strip()
    try:
        value = _literal(text)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return _jsonable(value)
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError("not a dict: %s" % text[:120])
    out = {}
    for item in _split_top(text[1:-1]):
        at = _colon(item)
        if at < 0:
            raise ValueError("not a dict item: %s" % item[:120])
        try:
            key = _literal(item[:at].strip())
        except ValueError:
            key = item[:at].strip()
        raw = item[at + 1:].strip()
        try:
            out[str(key)] = _jsonable(_literal(raw))
        except ValueError:
            out[str(key)] = raw
    return out


def parse_vllm_log_line(line):
    """The dict of vLLM's `non-default args: {...}` log line, or None when the line is not that one."""
    line = _ANSI.sub("", line)
    at = line.find(NON_DEFAULT)
    if at < 0:
        return None
    return parse_py_dict(line[at + len(NON_DEFAULT):].rstrip())


def find_non_default_args(lines):
    """The first `non-default args` dict among log lines (the API server logs it once, before it is ready)."""
    for line in lines:
        if NON_DEFAULT in line:
            parsed = parse_vllm_log_line(line)
            if parsed is not None:
                return parsed
    return None


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
_NUMBER = re.compile(r"^-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?$")


def _unescape(text):
    return text.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def label_value(text):
    """A label value (always a text, vLLM writes str(value)) back as the value: None, booleans, numbers."""
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    if _NUMBER.match(text):
        try:
            return int(text)
        except ValueError:
            return float(text)
    return text


def info_labels(text, metric="vllm:cache_config_info"):
    """The labels of an info gauge in Prometheus text (vLLM's vllm:cache_config_info), engine 0's (or the
    first) as values (label_value), without the engine label and bookkeeping labels (a leading _); None when
    the metric is absent."""
    found = []
    for line in text.splitlines():
        if not line.startswith(metric):
            continue
        match = _SAMPLE.match(line)
        if not match or match.group(1) != metric:
            continue
        labels = dict((k, _unescape(v)) for k, v in _LABEL.findall(match.group(2) or ""))
        found.append(labels)
    if not found:
        return None
    first = next((labels for labels in found if labels.get("engine") == "0"), found[0])
    return dict((k, label_value(v)) for k, v in first.items() if k != "engine" and not k.startswith("_"))


def transformers_settings(spec, argv, model=None):
    """The settings of `transformers serve` (the defaults in spec, help_defaults) with argv (its flags after
    `transformers serve MODEL`) over them, and force_model the model; (settings, the names argv set)."""
    by_option = {}
    for dest, item in spec.items():
        for option in item["options"]:
            by_option[option] = (dest, item)
    settings = dict((dest, item["default"]) for dest, item in spec.items())
    given = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("--"):
            continue
        name, eq, inline = arg.partition("=")
        if name in by_option:
            dest, item = by_option[name]
            if item["flag"]:
                settings[dest] = not (name.startswith("--no-") and name != item["options"][0])
            else:
                value = inline if eq else (argv[i] if i < len(argv) else None)
                if not eq:
                    i += 1
                settings[dest] = _preflight.typed_value(value, item["type"]) if value is not None else None
        else:  # not in its help: kept as given
            dest = _preflight.option_dest(name)
            if eq:
                settings[dest] = inline
            elif i < len(argv) and not argv[i].startswith("--"):
                settings[dest] = argv[i]
                i += 1
            else:
                settings[dest] = True
        given.append(dest)
    if model is not None:
        settings["force_model"] = model
        given.append("force_model")
    return settings, given


# ---------------------------------------------------------------------------------------------------
# keeping it: redacted, bounded, digested (pure)

def _size(value):
    return len(json.dumps(value, sort_keys=True, default=str))


def bound(settings, drop=DROP, value_max=VALUE_MAX, total_max=TOTAL_MAX):
    """(settings, dropped): scheduler-state blobs left out, each value over value_max characters of JSON
    replaced by a note, then the largest values dropped until the whole fits total_max. dropped: {name: why}."""
    kept, dropped = {}, {}
    for key, value in settings.items():
        if key in drop:
            dropped[key] = "scheduler state, %d characters" % _size(value)
            continue
        size = _size(value)
        if size > value_max:
            dropped[key] = "%d characters" % size
            continue
        kept[key] = value
    total = _size(kept)
    if total > total_max:
        for key in sorted(kept, key=lambda k: _size(kept[k]), reverse=True):
            size = _size(kept[key])
            dropped[key] = "%d characters (over the %d of all settings)" % (size, total_max)
            del kept[key]
            total -= size
            if total <= total_max:
                break
    return kept, dropped


def digest(settings):
    """sha256[:12] of the settings as canonical JSON, the per-launch fields (PER_LAUNCH) left out: two launches
    of one configuration that resolved the same have the same digest."""
    stable = dict((k, v) for k, v in (settings or {}).items() if k not in PER_LAUNCH)
    return hashlib.sha256(_fingerprint.canonical(stable).encode("utf-8")).hexdigest()[:12]


def kept(engine, source, settings=None, error=None, secrets=(), given=None):
    """The record kept and returned: settings redacted (redact), bounded (bound) and digested; error when a
    read failed; given: the names the engine says were asked (vLLM's non-default args, transformers' argv). A
    read that gave no settings is {"engine", "source", "error"}."""
    out = {"engine": engine, "source": source}
    if settings is not None:
        clean, dropped = bound(redact(_jsonable(settings), secrets))
        out["settings"] = clean
        out["digest"] = digest(clean)
        if dropped:
            out["dropped"] = dropped
    if given:
        out["given"] = sorted(set(given))
    if error:
        out["error"] = redact(str(error), secrets)[:1000]
    return out


# ---------------------------------------------------------------------------------------------------
# reading a ready server (I/O)

def kind_of(params):
    """Which way to read: 'sglang', 'vllm', 'transformers', 'probe' (engine=command, auto: /server_info if it
    answers) or None (trtllm, none)."""
    wanted = params.get("resolved_from") or "auto"
    if wanted == "none":
        return None
    if wanted != "auto":
        return wanted
    engine = params.get("engine")
    if engine in ("sglang", "vllm", "transformers"):
        return engine
    return "probe" if engine == "command" else None


def _get(host, port, path, api_key, timeout):
    status, text = _http.request(host, port, "GET", path, api_key=api_key, timeout=timeout, max_body=BODY_MAX,
                                 accept="*/*")
    return status, text


def read_sglang(host, port, api_key=None, timeout=READ_TIMEOUT):
    """(dict, source) of SGLang's /server_info, falling back to /get_server_info when it is not found (404)."""
    status, text, path = None, "", None
    for path in ("/server_info", "/get_server_info"):
        status, text = _get(host, port, path, api_key, timeout)
        if status != 404:
            break
    if status != 200:
        raise ValueError("GET %s: HTTP %s %s" % (path, status, " ".join(text.split())[:200]))
    return parse_server_info(text), "GET %s" % path


def read_log_args(path, offset=0, scan_max=LOG_SCAN_MAX):
    """vLLM's non-default args from the engine log, from offset on (this start's lines), or None."""
    with open(path, "rb") as handle:
        handle.seek(offset or 0)
        read = 0
        while read < scan_max:
            line = handle.readline(LINE_MAX)
            if not line:
                return None
            read += len(line)
            if NON_DEFAULT.encode("ascii") in line:
                parsed = parse_vllm_log_line(line.decode("utf-8", "replace"))
                if parsed is not None:
                    return parsed
    return None


def read_vllm(host, port, log_path, offset, api_key=None, timeout=READ_TIMEOUT):
    """(settings, error, given): the non-default args of the log, the cache_config_info labels over them (what
    the engine resolved of what was asked); given: the names the log listed."""
    problems, settings, given = [], {}, None
    try:
        args = read_log_args(log_path, offset)
    except (OSError, ValueError) as exc:
        args = None
        problems.append("%s: %s" % (log_path, exc))
    if args is None and not problems:
        problems.append("no 'non-default args' line in %s" % log_path)
    if args is not None:
        settings.update(args)
        given = sorted(args)
    try:
        status, text = _get(host, port, "/metrics", api_key, timeout)
        labels = info_labels(text) if status == 200 else None
        if status != 200:
            problems.append("GET /metrics: HTTP %s" % status)
        elif labels is None:
            problems.append("GET /metrics: no vllm:cache_config_info")
        else:
            settings.update(labels)
    except (OSError, http.client.HTTPException) as exc:
        problems.append("GET /metrics: %s" % exc)
    return (settings if settings else None), "; ".join(problems) or None, given


def transformers_spec(help_argv, env, version, run, state_dir=None):
    """help_defaults of `transformers serve --help`, from the record the preflight's flag check reads and caches
    (_preflight.read_help, STATE_DIR/engine-flags/): one run of the help per launcher and version."""
    cache_dir = os.path.join(state_dir, "engine-flags") if state_dir else None
    record, why = _preflight.read_help(help_argv, env or {}, version, run, cache_dir)
    if record is None:
        raise ValueError(why)
    if len(record["defaults"]) < 3:
        raise ValueError("%s lists %d options with a default" % (" ".join(help_argv), len(record["defaults"])))
    return record["defaults"]


def read(params, launch, record, log_path, run=None, host=None):
    """What the ready server resolved, as kept() records it, or None when nothing is read for this engine
    (trtllm, resolved_from none, a command engine that has no /server_info). Never raises: a read that fails
    gives {"engine", "source", "error"}."""
    kind = kind_of(params)
    if kind is None:
        return None
    host = host or params.get("host") or "127.0.0.1"
    port = params["port"]
    api_key = params.get("api_key")
    secrets = _fingerprint.secret_values(params)
    engine = params.get("engine") if kind == "probe" else kind
    source = {"sglang": "GET /server_info", "probe": "GET /server_info",
              "vllm": "engine log 'non-default args' + GET /metrics vllm:cache_config_info",
              "transformers": "transformers serve --help defaults + argv"}.get(kind, kind)
    try:
        if kind in ("sglang", "probe"):
            try:
                data, source = read_sglang(host, port, api_key)
            except (OSError, ValueError, http.client.HTTPException):
                if kind == "probe":
                    return None  # an unknown program without SGLang's endpoint: nothing to say
                raise
            return kept("sglang", source, data, secrets=secrets)  # settings in SGLang's names, whatever launched it
        if kind == "vllm":
            settings, error, given = read_vllm(host, port, log_path, (record or {}).get("log_offset", 0), api_key)
            return kept(engine, source, settings, error, secrets, given)
        if kind == "transformers":
            help_argv = _engines.adapter("transformers").help_argv(params)
            spec = transformers_spec(help_argv, launch.env if launch else {}, (record or {}).get("engine_version"),
                                     run, params.get("state_dir"))
            argv = launch.argv if launch else (record or {}).get("argv") or []
            settings, given = transformers_settings(spec, argv[3:], params.get("model"))
            return kept(engine, source, settings, secrets=secrets, given=given)
        return {"engine": engine, "source": kind, "error": "resolved_from %r is not known" % kind}
    except Exception as exc:  # pylint: disable=broad-except  # reading settings never fails a ready server
        return kept(engine, source, error="%s: %s" % (type(exc).__name__, exc), secrets=secrets)
