# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse launch argvs with an engine's own command-line code, exactly as its launcher does, and stop
before the engine would start. Runs inside a side environment of `make engine-envs`.

    python parse_argv.py sglang|vllm < argvs.json > verdicts.json

argvs.json is a list of argvs as inference_server launches them, less the executable itself
(`-m sglang.launch_server ...` after python, `serve MODEL ...` after vllm). Each verdict is {"ok": true, "args":
{dest: value}} or {"ok": false, "rc": 2, "error": "<the parser's own error line>"}.

SGLang (0.5.9 srt/server_args.py, 0.5.23 srt/server_args.py `prepare_server_args`): an
argparse.ArgumentParser, ServerArgs.add_cli_args, parse_args, then ServerArgs.from_cli_args, which
this stops at (what follows resolves settings against the GPUs). vLLM (0.34.0
vllm/entrypoints/cli/main.py `main`): the `vllm` FlexibleArgumentParser with every subcommand, parse_args,
the subcommand's validate (vllm/entrypoints/cli/serve.py: validate_parsed_serve_args), then
ServeSubcommand.cmd, which this stops at.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys


class Parsed(Exception):
    """The engine's parser finished: carries the namespace its launcher would go on with."""

    def __init__(self, namespace):
        super().__init__("parsed")
        self.namespace = namespace


def _stop(*args):
    raise Parsed(args[-1])


def _sglang(argv):
    if argv[:2] != ["-m", "sglang.launch_server"]:
        raise ValueError("not an SGLang launch (python -m sglang.launch_server ...): %r" % argv)
    from sglang.srt import server_args
    sys.argv = ["launch_server.py"] + list(argv)  # argparse's prog, as `python -m sglang.launch_server` has it
    server_args.ServerArgs.from_cli_args = classmethod(_stop)
    server_args.prepare_server_args(argv[2:])


def _vllm(argv):
    if argv[:1] != ["serve"]:
        raise ValueError("not a vLLM launch (vllm serve MODEL ...): %r" % argv)
    from vllm.entrypoints.cli import main as cli, serve
    serve.ServeSubcommand.cmd = staticmethod(_stop)
    sys.argv = ["vllm"] + list(argv)
    cli.main()


def verdict(engine, argv):
    err, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            (_sglang if engine == "sglang" else _vllm)(argv)
    except Parsed as done:
        args = dict((k, v) for k, v in vars(done.namespace).items() if not callable(v) and not k.startswith("_"))
        return {"ok": True, "args": json.loads(json.dumps(args, default=repr))}
    except SystemExit as exc:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        return {"ok": False, "rc": exc.code, "error": lines[-1] if lines else out.getvalue()[-500:]}
    return {"ok": False, "rc": None, "error": "the launcher returned without parsing"}


def main():
    engine = sys.argv[1]
    argvs = json.load(sys.stdin)
    print(json.dumps([verdict(engine, argv) for argv in argvs]))


if __name__ == "__main__":
    main()
