# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""AnsibleModule.run_command's shape for tests that call module_utils without a module: argv (never a shell),
data on stdin, environ_update, (rc, stdout, stderr) as text."""

from __future__ import annotations

import os
import subprocess


def run_command(args, data=None, environ_update=None, expand_user_and_vars=True, cwd=None, **dummy):
    assert isinstance(args, list), "run_command takes an argv list here"
    if expand_user_and_vars:
        args = [os.path.expandvars(os.path.expanduser(arg)) for arg in args]
    env = dict(os.environ, **(environ_update or {}))
    proc = subprocess.run(args, input=(data + "\n") if data is not None else None, env=env, cwd=cwd,
                          capture_output=True, text=True, check=False,
                          stdin=None if data is not None else subprocess.DEVNULL)
    return proc.returncode, proc.stdout, proc.stderr
