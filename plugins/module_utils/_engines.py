# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One adapter per inference engine: argv from data, env, readiness probe, version. Standard library only.

Every adapter spells the core settings (model, host, port, API key, served model name) the way its
engine takes them, and lets engine_args override or add any flag, so a new engine release never
blocks a user. engine_args keys in snake_case or kebab-case become --kebab-case (TensorRT-LLM's
trtllm-serve spells its options with underscores, so its adapter keeps --snake_case); true gives a
bare flag, false or null leaves the flag out, a list gives the flag followed by each value, a dict
gives compact JSON with sorted keys (vLLM --speculative-config).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket

from ansible_collections.inferops.serving.plugins.module_utils import _fingerprint, _http

ENGINES = ("sglang", "vllm", "trtllm", "transformers", "command")


class EngineError(ValueError):
    """A configuration the engine cannot take; the message says what and what is allowed."""


class Launch(object):
    """A resolved launch: argv (a list, never a shell string), env additions, probe target."""

    def __init__(self, engine, model, prefix, flags, env, probe_model, secrets, version=None):
        self.engine = engine
        self.model = model
        self.prefix = list(prefix)
        self.flags = list(flags)  # [(flag, [values])] in argv order
        self.env = dict(env)
        self.probe_model = probe_model
        self.secrets = [s for s in secrets if s]
        self.version = version
        self.health_timeout = Adapter.health_timeout

    @property
    def argv(self):
        out = list(self.prefix)
        for flag, values in self.flags:
            out.append(flag)
            out.extend(values)
        return out

    @property
    def public_argv(self):
        return _fingerprint.redact_argv(self.argv, self.secrets)

    @property
    def fingerprint(self):
        flags = [(flag, _fingerprint.redact_argv(values, self.secrets)) for flag, values in self.flags]
        return _fingerprint.fingerprint(self.engine, self.model, _fingerprint.redact_argv(self.prefix, self.secrets),
                                        flags, self.env, self.version)


def flag_name(key, style="kebab"):
    """engine_args key -> flag. A key already starting with '-' is taken as written."""
    key = str(key)
    if key.startswith("-"):
        return key
    if style == "snake":
        return "--" + key.replace("-", "_")
    return "--" + key.replace("_", "-")


def flag_values(flag, value):
    """None when the flag is left out, else the list of values after it ([] for a bare flag)."""
    if value is None or value is False:
        return None
    if value is True:
        return []
    if isinstance(value, dict):
        return [json.dumps(value, sort_keys=True, separators=(",", ":"))]
    if isinstance(value, (list, tuple)):
        out = []
        for item in value:
            if isinstance(item, (dict, list)):
                out.append(json.dumps(item, sort_keys=True, separators=(",", ":")))
            elif isinstance(item, bool):
                out.append("true" if item else "false")
            elif item is not None:
                out.append(str(item))
        return out
    return [str(value)]


def _norm(flag):
    """Flags compare equal whatever their spelling: --tp-size == --tp_size."""
    return flag.lstrip("-").replace("_", "-")


class Adapter(object):
    name = None
    style = "kebab"
    model_flag = None  # None: the model is positional (in the prefix)
    api_key_flag = "--api-key"
    api_key_env = None  # an environment variable the engine reads its key from: preferred to the argv
    served_name_flag = "--served-model-name"
    distribution = None  # the Python distribution whose version is read
    default_executable = None
    aliases = {}  # engine_args spellings that mean a core flag (normalised -> core flag)
    spellings = {}  # engine_args keys the engine spells otherwise (normalised -> the engine's flag)
    negatable = False  # false gives --no-FLAG (the engine's booleans default to None, not False)
    hidden_negations = False  # its --help lists --FLAG but not the --no-FLAG its parser also takes
    health_timeout = 10.0  # seconds a healthy, busy server may take to answer /health
    stop_grace = 10.0  # seconds its main process gets, after SIGTERM, to end its own workers
    abbrev = False  # the engine's parser takes a unique prefix of a long option (argparse's allow_abbrev)
    help_args = None  # the arguments after the launcher that print every flag the engine takes

    def prefix(self, params):
        raise NotImplementedError

    def extra_env(self, params):
        return {}

    def core(self, params):
        """(head, tail): core flags before and after engine_args, as (flag, values) lists."""
        head, tail = [], []
        if self.model_flag:
            head.append((self.model_flag, [params["model"]]))
        tail.append((flag_name("host", self.style), [params["host"]]))
        tail.append((flag_name("port", self.style), [str(params["port"])]))
        if params.get("served_model_name"):
            if not self.served_name_flag:
                raise EngineError("engine %s has no served-model-name flag that this adapter knows; leave "
                                  "served_model_name unset (requests name the model as %r)"
                                  % (self.name, params["model"]))
            tail.append((self.served_name_flag, [params["served_model_name"]]))
        if params.get("api_key") and not self.api_key_env:
            if not self.api_key_flag:
                raise EngineError("engine %s takes no API key that this adapter knows; leave api_key unset, "
                                  "or run it behind a proxy that checks one" % self.name)
            tail.append((self.api_key_flag, [params["api_key"]]))
        return head, tail

    def key_env(self, params):
        """The API key as the environment variable the engine reads (off the argv, where /proc/PID/cmdline
        shows it to every local user; /proc/PID/environ is readable by the owner only)."""
        if params.get("api_key") and self.api_key_env:
            return {self.api_key_env: params["api_key"]}
        return {}

    def probe_model(self, params):
        return params.get("served_model_name") or params["model"]

    def build(self, params, version=None):
        head, tail = self.core(params)
        user = []
        for key, value in (params.get("engine_args") or {}).items():
            flag = flag_name(key, self.style)
            if not str(key).startswith("-"):
                flag = self.spellings.get(_norm(flag), flag)
            if value is False and self.negatable:
                user.append(("--no-" + flag.lstrip("-"), []))
                continue
            user.append((flag, flag_values(flag, value)))
        overridden = set(self.aliases.get(_norm(f), _norm(f)) for f, dummy in user)
        for reserved in ("host", "port"):
            if reserved in overridden and self.name != "command":
                raise EngineError("engine_args must not set %s: use the %s parameter (the readiness probe "
                                  "and the url need it)" % (reserved, reserved))
        flags = [(f, v) for f, v in head if _norm(f) not in overridden]
        flags += [(f, v) for f, v in user if v is not None]
        flags += [(f, v) for f, v in tail if _norm(f) not in overridden]
        env = dict(self.extra_env(params))
        env.update(params.get("env") or {})
        env.update(self.key_env(params))
        secrets = [params.get("api_key")] + list(_fingerprint.secret_env(params.get("env")).values())
        launch = Launch(self.name, params["model"], self.prefix(params), flags, env, self.probe_model(params),
                        secrets, version)
        launch.health_timeout = self.health_timeout
        return launch

    def launcher(self, params):
        return params.get("executable") or self.default_executable

    def spelling(self, flag):
        """The engine's own flag for a spelling the adapter rewrites (vLLM: --tp-size is --tensor-parallel-size)."""
        return self.spellings.get(_norm(flag))

    def help_argv(self, params):
        """The argv that prints every flag the engine accepts, or None when it cannot be asked."""
        if self.help_args is None:
            return None
        return [self.launcher(params)] + list(self.help_args)

    def version_python(self, params):
        """The interpreter that can tell the engine's version: python, or one beside the executable."""
        if params.get("python"):
            return params["python"]
        exe = params.get("executable")
        if exe and os.path.isabs(exe):
            for name in ("python3", "python"):
                candidate = os.path.join(os.path.dirname(exe), name)
                if os.access(candidate, os.X_OK):
                    return candidate
        return None

    def version(self, params, run, timeout=30):
        """The engine's installed version, best effort (None when it cannot be read). run: run_command; the
        probe goes through coreutils' timeout where there is one, as run_command has no timeout."""
        python = self.version_python(params)
        if not self.distribution or not python or run is None:
            return None
        code = "import importlib.metadata as m; print(m.version(%r))" % self.distribution
        argv = [python, "-c", code]
        limit = shutil.which("timeout")
        if limit:
            argv = [limit, "--kill-after=5", str(int(timeout))] + argv
        rc, out, dummy = run(argv, expand_user_and_vars=False)
        text = (out or "").strip()
        return text if rc == 0 and text else None


class SGLang(Adapter):
    """`python -m sglang.launch_server --model-path M ...`. SGLang reads its key only from --api-key (0.5.9
    srt/server_args.py `api_key`; 0.5.23 srt/arg_groups/fields/serving.py): no environment variable sets
    it, so it stays on the argv (redacted in results). It guards every route but /health*, /metrics
    (and /ready in 0.5.23) (srt/utils/auth.py)."""

    name = "sglang"
    model_flag = "--model-path"
    distribution = "sglang"
    # its /health runs a one-token generation and waits up to SGLANG_HEALTH_CHECK_TIMEOUT (20 s by default,
    # 0.5.23 srt/entrypoints/http_server.py health_generate): a busy healthy server must not look dead
    health_timeout = 30.0
    # SIGTERM: it drains (polling every 5 s), asks its schedulers to release and waits up to 15 s for them
    # (0.5.23 srt/managers/tokenizer_manager.py sigterm_watchdog, _SCHEDULER_EXIT_TIMEOUT_SECS)
    stop_grace = 30.0
    abbrev = True  # argparse: --tp works as a prefix of --tp-size; a prefix of two flags is "ambiguous"
    help_args = ("-m", "sglang.launch_server", "--help")
    aliases = {"model": "model-path", "tensor-parallel-size": "tp-size"}

    def prefix(self, params):
        return [params.get("python") or "python3", "-m", "sglang.launch_server"]

    def launcher(self, params):
        return params.get("python") or "python3"


class VLLM(Adapter):
    """`vllm serve MODEL ...`. The API key goes in VLLM_API_KEY, which vLLM uses when no --api-key is given
    (vllm 0.34.0 vllm/entrypoints/serve/middleware/register.py: `if tokens := [key for key in (args.api_key or
    [envs.VLLM_API_KEY]) if key]:`; vllm/envs.py: `"VLLM_API_KEY": lambda: os.environ.get("VLLM_API_KEY", None)`).
    It guards /v1, /v2, /inference and /cohere, not /health (middleware/authenticate.py GUARDED_PREFIX)."""

    name = "vllm"
    distribution = "vllm"
    api_key_env = "VLLM_API_KEY"
    default_executable = "vllm"
    aliases = {"tp-size": "tensor-parallel-size"}
    # only --tensor-parallel-size / -tp exist (vllm 0.34.0 vllm/engine/arg_utils.py); booleans are
    # BooleanOptionalAction defaulting to None, so turning one off takes --no-FLAG
    spellings = {"tp-size": "--tensor-parallel-size"}
    negatable = True
    hidden_negations = True
    # SIGTERM: the API server ends its engine cores, which install SIGTERM handlers of their own (vllm 0.34.0
    # vllm/v1/engine/core.py); in-flight requests get --shutdown-timeout more (0 by default: aborted)
    stop_grace = 15.0
    abbrev = True  # FlexibleArgumentParser is an argparse.ArgumentParser with allow_abbrev left on
    help_args = ("serve", "--help=all")  # plain --help lists config groups only (vllm/utils/argparse_utils.py)

    def prefix(self, params):
        return [self.launcher(params), "serve", params["model"]]


class TRTLLM(Adapter):
    """`trtllm-serve serve MODEL ...` (click options, spelled --snake_case); no API key."""

    name = "trtllm"
    style = "snake"
    distribution = "tensorrt_llm"
    default_executable = "trtllm-serve"
    api_key_flag = None
    served_name_flag = None
    # trtllm-serve's own parser was not read here (its repository is too large to fetch): no abbreviations assumed
    help_args = ("serve", "--help")

    def prefix(self, params):
        return [self.launcher(params), "serve", params["model"]]

    def probe_model(self, params):
        """trtllm-serve serves a local model directory under its basename (tensorrt_llm/serve/openai_server.py:
        model_dir.name), a hub id as given."""
        if params.get("served_model_name"):
            return params["served_model_name"]
        model = params["model"]
        return os.path.basename(os.path.normpath(model)) if os.path.isdir(model) else model


class Transformers(Adapter):
    """`transformers serve MODEL --host H --port P [--device ...]` from transformers[serving].

    transformers serve 5.x has no API key and no served-model-name option: the server is pinned to
    the model it was given, and requests must name exactly that.
    """

    name = "transformers"
    distribution = "transformers"
    default_executable = "transformers"
    help_args = ("serve", "--help")  # transformers 5.24 cli/serve.py is typer (click): no abbreviations
    # typer gives every bool option a --no-FLAG twin, and some default to None, which is not False:
    # cb_use_cuda_graph (transformers 5.24 cli/serve.py, `bool | None = None`) leaves the choice to
    # ContinuousBatchingConfig. So false must be said as --no-FLAG, never by leaving the flag out.
    negatable = True
    api_key_flag = None
    served_name_flag = None

    def prefix(self, params):
        return [self.launcher(params), "serve", params["model"]]

    def extra_env(self, params):
        if os.path.isdir(params["model"]):
            return {"HF_HUB_OFFLINE": "1"}  # a local model directory: never reach for the hub
        return {}


class Command(Adapter):
    """engine=command: the user's full argv; it must serve the OpenAI API on host:port.

    The collection cannot know where an arbitrary program reads an API key, so it never places one: an
    api_key must already be where the program reads it (in command or env); it is then used by the
    readiness probe and the benchmark, and redacted from results. Anything else is an error, never a
    key silently dropped."""

    name = "command"

    def core(self, params):
        key = params.get("api_key")
        if key and not (any(key in arg for arg in params["command"]) or key in (params.get("env") or {}).values()):
            raise EngineError("engine command: api_key is set but appears nowhere in command or env, and "
                              "inferops.serving cannot know where your program reads a key; put it where the "
                              "program reads it (for example '--api-key', KEY in command, or an env variable), "
                              "or leave api_key unset")
        return [], []

    def prefix(self, params):
        return placed(params["command"], params)

    def launcher(self, params):
        return params["command"][0]


PLACEHOLDERS = ("{host}", "{port}")


def placed(argv, params):
    """argv with each literal {host} and {port} replaced by the instance's host and port: plain string
    replacement inside each element (never str.format, never a shell), so '--port={port}' works and any
    other brace stays as written. A replica's command thus needs no per-instance copy."""
    values = {"{host}": str(params.get("host") or ""), "{port}": str(params.get("port") or "")}
    out = []
    for arg in argv:
        for token in PLACEHOLDERS:
            if token in arg:
                arg = arg.replace(token, values[token])
        out.append(arg)
    return out


ADAPTERS = dict((a.name, a()) for a in (SGLang, VLLM, TRTLLM, Transformers, Command))


def adapter(engine):
    try:
        return ADAPTERS[engine]
    except KeyError:
        raise EngineError("unknown engine %r; allowed: %s" % (engine, ", ".join(ENGINES)))


# ---------------------------------------------------------------------------------------------------
# readiness: /health 200 (503: still loading), then one real 1-token generation on the served model

PROBE_READ = 4096  # bytes of an answer a probe reads: enough for its message


class Probe(object):
    """One readiness check. state: 'down' (no answer), 'loading', 'ready' or 'refused' (a config error)."""

    def __init__(self, state, detail):
        self.state = state
        self.detail = detail


def probe(host, port, model, api_key=None, timeout=10.0, generate_timeout=120.0):
    """GET /health within ``timeout`` seconds in all, then a 1-token POST /v1/completions within
    ``generate_timeout`` in all (_http.request bounds each exchange as a whole, however slowly the server
    answers, and reads at most PROBE_READ bytes of either answer)."""
    try:
        status, text = _http.request(host, port, "GET", "/health", timeout=timeout, limit=PROBE_READ)
    except (OSError, http.client.HTTPException) as exc:
        return Probe("down", "GET /health: %s" % exc)
    if status != 200:
        return Probe("loading", "GET /health: HTTP %d %s" % (status, text[:200]))
    body = {"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0}
    try:
        status, text = _http.request(host, port, "POST", "/v1/completions", body, api_key, timeout=generate_timeout,
                                     limit=PROBE_READ)
    except (OSError, http.client.HTTPException) as exc:
        return Probe("loading", "POST /v1/completions: %s" % exc)
    if status == 200:
        try:
            answer = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or JSON nested deeper than the decoder goes
            answer = None
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if choices:
            return Probe("ready", "POST /v1/completions: 1 token generated")
        return Probe("loading", "POST /v1/completions: HTTP 200 without choices: %s" % text[:200])
    if status in (400, 401, 403, 404, 422):
        return Probe("refused", "POST /v1/completions on model %r: HTTP %d %s" % (model, status, text[:300]))
    if status >= 500 and status != 503:
        # /health says ready but generation fails (a CUDA error, a broken worker): wait_ready gives it a grace
        # window, then fails with this body instead of waiting out ready_timeout as if it were loading
        return Probe("error", "POST /v1/completions: HTTP %d %s" % (status, text[:300]))
    return Probe("loading", "POST /v1/completions: HTTP %d %s" % (status, text[:200]))


def port_in_use(host, port):
    """True when something accepts connections on host:port (or the address cannot be bound)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(1.0)
        if sock.connect_ex((host, port)) == 0:
            return True
    except OSError:
        pass
    finally:
        sock.close()
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        return False
    except OSError:
        return True
    finally:
        sock.close()
