# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an engine reports as its resolved settings, made by the engine's own code from a launch argv, inside a
side environment of `make engine-envs` (no GPU: tests/conformance/engine_stubs.py fakes torch).

    python resolved_dict.py sglang|vllm < argv.json

argv.json is one argv as inference_server launches it, less the executable (`-m sglang.launch_server ...` after
python, `serve MODEL ...` after vllm). The last line of stdout is JSON:

- SGLang: {"server_info": the dict /server_info answers, as its own code builds it}. 0.5.9
  (srt/entrypoints/http_server.py `server_info`): `{**dataclasses.asdict(server_args), **scheduler_info,
  "version": __version__}` of the ServerArgs that `prepare_server_args` builds; its __post_init__, which
  resolves settings against the GPUs and the model's config (srt/server_args.py `_handle_gpu_memory_settings`,
  `_handle_attention_backend_compatibility`, ...), cannot run without them and is skipped, so the values are
  what was asked over the dataclass defaults. 0.5.23 (srt/entrypoints/http_server.py `server_info`, srt/utils/
  common.py `build_server_info`): `server_args.resolved_dict()` (unresolved too: `resolve_once` needs the model's
  config), `launch_command`, `kv_events`, `version` and `frontend`, through SGLang's own
  `redact_watermark_secrets` and `msgspec_to_builtins`. The scheduler's part (`status`, `max_total_num_tokens`,
  `max_req_input_len`), `startup_time` and `internal_states` exist only in a running server and are left out.
- vLLM 0.34.0: {"log": the lines its logger printed}: the argv parsed by `vllm` itself (vllm/entrypoints/cli/
  main.py, stopped at ServeSubcommand.cmd as parse_argv.py does), then vllm/entrypoints/common/startup.py
  `log_non_default_args(args)`, as vllm/entrypoints/launchers/launcher.py `setup_server` calls it, printing
  `non-default args: {...}` through vLLM's own logging configuration.
"""

from __future__ import annotations

import dataclasses
import json
import sys


class Parsed(Exception):
    def __init__(self, namespace):
        super().__init__("parsed")
        self.namespace = namespace


def _stop(*args):
    raise Parsed(args[-1])


def sglang(argv):
    if argv[:2] != ["-m", "sglang.launch_server"]:
        raise ValueError("not an SGLang launch: %r" % argv)
    import sglang as package
    from sglang.srt import server_args
    version = getattr(package, "__version__", None)
    sys.argv = ["launch_server.py"] + list(argv)
    if dataclasses.is_dataclass(server_args.ServerArgs):  # 0.5.9: a dataclass that resolves in __post_init__
        server_args.ServerArgs.__post_init__ = lambda self: None
        args = server_args.prepare_server_args(argv[2:])
        if hasattr(args, "model_config"):  # as server_info does: not serialisable
            del args.model_config
        return {"server_info": json.loads(json.dumps(dict(dataclasses.asdict(args), version=version), default=repr))}
    # 0.5.23: construction does not resolve (ServerArgs.resolve_once does)
    from sglang.srt.sampling.watermarking.core import redact_watermark_secrets
    from sglang.srt.utils.common import build_server_info
    from sglang.srt.utils.msgspec_utils import msgspec_to_builtins
    args = server_args.prepare_server_args(argv[2:])
    info = msgspec_to_builtins(redact_watermark_secrets(dict(build_server_info(args, {}), version=version,
                                                             frontend="python")))
    return {"server_info": json.loads(json.dumps(info, default=repr))}


def vllm(argv):
    if argv[:1] != ["serve"]:
        raise ValueError("not a vLLM launch: %r" % argv)
    from vllm.entrypoints.cli import main as cli, serve
    from vllm.entrypoints.common.startup import log_non_default_args
    serve.ServeSubcommand.cmd = staticmethod(_stop)
    sys.argv = ["vllm"] + list(argv)
    namespace = None
    try:
        cli.main()
    except Parsed as done:
        namespace = done.namespace
    if namespace is None:
        raise SystemExit("vllm's parser returned without reaching ServeSubcommand.cmd")
    sys.stdout.flush()
    print("=== log")
    sys.stdout.flush()
    log_non_default_args(namespace)  # through vLLM's own handler, on this process's stdout
    sys.stdout.flush()
    return {"log": None}


def main():
    engine = sys.argv[1]
    argv = json.load(sys.stdin)
    out = (sglang if engine == "sglang" else vllm)(argv)
    sys.stdout.flush()
    print("\n" + json.dumps(out))


if __name__ == "__main__":
    main()
