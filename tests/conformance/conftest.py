# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The side environments of `make engine-envs` (build/engine-envs/PROFILE: a pinned SGLang or vLLM wheel
and tests/conformance/engine_stubs.py), and how to ask them: the engine's real parser over argvs, and
the engine's real --help as inference_server's flag check runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ENGINE_ENVS = os.environ.get("ENGINE_ENVS") or os.path.join(ROOT, "build", "engine-envs")
# the profiles (requirements/PROFILE.txt): what `make engine-envs` builds
PROFILES = sorted(name[:-4] for name in os.listdir(os.path.join(HERE, "requirements")) if name.endswith(".txt"))


class EngineEnv(object):
    """One side environment: PROFILE is ENGINE-VERSION (sglang-0.5.9)."""

    def __init__(self, profile):
        self.profile = profile
        self.engine, dummy, self.version = profile.partition("-")
        self.root = os.path.join(ENGINE_ENVS, profile)
        self.python = os.path.join(self.root, "bin", "python")
        self.vllm = os.path.join(self.root, "bin", "vllm")
        if not os.path.exists(os.path.join(self.root, ".installed")):
            pytest.fail("%s is not built: run `make engine-envs` (or `make conformance`)" % self.root)

    def parse(self, argvs):
        """The engine's own parser over each argv (less its executable): a verdict per argv (parse_argv.py)."""
        proc = subprocess.run([self.python, "-W", "ignore", os.path.join(HERE, "parse_argv.py"), self.engine],
                              input=json.dumps(argvs), capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, "parse_argv.py in %s failed:\n%s" % (self.profile, proc.stderr[-3000:])
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def launcher(self):
        """The variant fields that point inference_server at this environment's engine."""
        return {"python": self.python} if self.engine == "sglang" else {"executable": self.vllm}


@pytest.fixture(scope="session")
def engine_envs():
    return dict((profile, EngineEnv(profile)) for profile in PROFILES)


# the switch test bed (the end-to-end case) and the collection; tests/conftest.py puts tests/support on sys.path
for _path in (os.path.join(ROOT, "tests", "integration"), os.path.join(ROOT, "collections")):
    if _path not in sys.path:
        sys.path.insert(0, _path)
