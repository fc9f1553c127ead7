# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Python interpreter that reports its peak memory: for ansible_python_interpreter in tests.

Runs the real interpreter (INFEROPS_RSS_PYTHON, else the one running this) as a child with the same
arguments, stdin, stdout and stderr, waits for it with os.wait4 and appends its peak resident set size
(ru_maxrss, KiB on Linux) as one line to the file INFEROPS_RSS_FILE names; exits with the child's status.
Ansible runs the interpreter as one word, so install() writes an executable copy with its own shebang.
"""

from __future__ import annotations

import os
import sys


def install(path, python=None):
    """Write this script to ``path`` as an executable whose shebang is ``python`` (this interpreter); the path."""
    with open(os.path.abspath(__file__)) as src:
        text = src.read()
    with open(path, "w") as out:
        out.write("#!%s\n%s" % (python or sys.executable, text))
    os.chmod(path, 0o755)
    return path


def main():
    real = os.environ.get("INFEROPS_RSS_PYTHON") or sys.executable
    argv = [real] + sys.argv[1:]
    pid = os.fork()
    if pid == 0:
        try:
            os.execv(real, argv)
        finally:
            os._exit(127)  # pylint: disable=protected-access
    while True:
        try:
            dummy, status, usage = os.wait4(pid, 0)
            break
        except InterruptedError:
            continue
    report = os.environ.get("INFEROPS_RSS_FILE")
    if report:
        with open(report, "a") as out:
            out.write("%d\n" % usage.ru_maxrss)
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main())
