# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Free TCP ports for the tests, each handed out once per test session across every pytest-xdist worker.

A port from bind(("127.0.0.1", 0)) is free when asked, not when used: a test takes its replicas' ports
first and starts them seconds later, and meanwhile another worker's router asked the kernel too and got
one of them ("port 41401 ... is taken by pid 9667 (sglang::router), which is not instance 'rep.r1'"). Every
port handed out is claimed by creating a file of that name (O_EXCL: one winner) in a directory shared by the
session's workers (PYTEST_XDIST_TESTRUNUID), or by every stage of one `make test` (tools/gate.py's GATE_DIR:
the stages of a group run at once), so no two tests of one run get the same port.
"""

from __future__ import annotations

import os
import socket
import tempfile


def _registry():
    if os.environ.get("GATE_DIR"):  # tools/gate.py's run: shared by the stages of a group too (fleet beside core-latest)
        path = os.path.join(os.environ["GATE_DIR"], "ports")
    else:
        session = os.environ.get("PYTEST_XDIST_TESTRUNUID") or "pid%d" % os.getpid()
        path = os.path.join(tempfile.gettempdir(), "inferops-test-ports", session)
    os.makedirs(path, exist_ok=True)
    return path


def free_port(host="127.0.0.1"):
    """A port free on host now and handed out to no other test of this session."""
    registry = _registry()
    for _attempt in range(200):
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        try:
            os.close(os.open(os.path.join(registry, str(port)), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            continue
        return port
    raise RuntimeError("no free port that this test session has not handed out already, in 200 tries")
