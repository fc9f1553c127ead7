# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The executables the hardware stand-ins put on a fake host's PATH (nvidia-smi, dcgmi, journalctl, dmesg), written
one way: a launcher that runs this interpreter in isolated mode (-IS: no site-packages, no PYTHON* variables),
imports the stand-in's file as a module, so that its bytecode is compiled once and cached, and calls its
``main(prog, argv)``. The module checks call nvidia-smi thousands of times in a gate: this costs about 10 ms a
call less than runpy.run_path, which imports runpy and pkgutil and compiles the file again every time."""

from __future__ import annotations

import os
import sys

TEMPLATE = """#!{python} -IS
import sys
sys.path.insert(0, {directory!r})
from {module} import main
sys.exit(main({prog!r}, sys.argv[1:]))
"""


def install(bindir, prog, stand_in):
    """Write the executable ``prog`` into bindir, running the stand-in module file ``stand_in``; returns its path."""
    path = os.path.join(str(bindir), prog)
    directory, name = os.path.split(os.path.abspath(stand_in))
    with open(path, "w") as handle:
        handle.write(TEMPLATE.format(python=os.path.realpath(sys.executable), directory=directory,
                                     module=os.path.splitext(name)[0], prog=prog))
    os.chmod(path, 0o755)
    return path
