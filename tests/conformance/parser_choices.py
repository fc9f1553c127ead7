# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The choices of an engine's own parser, as its launcher builds it (parse_argv.py), read from the parser
itself rather than from its --help. Runs inside a side environment of `make engine-envs`.

    python parser_choices.py sglang|vllm > choices.json

Prints {option: {"choices": [str(choice), ...], "nargs": 1 | N | "?" | "+" | "*"}} for every long option
that has choices (vLLM: of the `serve` subcommand).
"""

from __future__ import annotations

import argparse
import json
import sys

import parse_argv


class Built(Exception):
    """The launcher asked its parser to parse: carries that parser."""

    def __init__(self, parser):
        super().__init__("built")
        self.parser = parser


def _capture(self, args=None, namespace=None):
    raise Built(self)


def _serve(parser):
    for action in parser._actions:  # vLLM: the top parser, with a subparser per subcommand
        if isinstance(action, argparse._SubParsersAction):
            return action.choices["serve"]
    return parser


def parser_of(engine):
    argparse.ArgumentParser.parse_known_args = _capture
    try:
        if engine == "sglang":
            parse_argv._sglang(["-m", "sglang.launch_server", "--model-path", "m"])
        else:
            parse_argv._vllm(["serve", "m"])
    except Built as built:
        return _serve(built.parser)
    raise RuntimeError("the launcher parsed nothing")


def main():
    parser = parser_of(sys.argv[1])
    found = {}
    for action in parser._actions:
        if action.choices is None:
            continue
        for option in action.option_strings:
            if option.startswith("--"):
                found[option] = {"choices": [str(choice) for choice in action.choices],
                                 "nargs": 1 if action.nargs is None else action.nargs}
    print(json.dumps(found))


if __name__ == "__main__":
    main()
