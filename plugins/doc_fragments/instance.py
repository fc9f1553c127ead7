# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment(object):
    """The parameters that place and pace one server instance (_instance_args.INSTANCE_SPEC), as
    inference_server takes them. The defaults are written here as literals because validate-modules reads
    them from the documentation; tests/unit/plugins/doc_fragments/test_instance_fragment.py checks that they
    agree with the argument spec, the one place they are decided."""

    DOCUMENTATION = r"""
options:
  name:
    description: Instance name; one server per name per host. Letters, digits, C(.), C(_) and C(-).
    type: str
    required: true
  host:
    description: Address the server listens on. The readiness probe uses C(127.0.0.1) for C(0.0.0.0).
    type: str
    default: 127.0.0.1
  port:
    description: TCP port the server listens on (1-65535). A port taken by anything else is an error before start.
    type: int
    required: true
  ready_timeout:
    description:
      - Seconds from the start to readiness before failing (and stopping the new server). Large models need long.
      - It counts from the start of the server, also across calls that resume the wait (see O(ready_wait)).
    type: float
    default: 1800
  stop_timeout:
    description: Seconds from the first SIGTERM to SIGKILL when stopping (C(TimeoutStopSec) for systemd).
    type: float
    default: 120
  stop_grace:
    description:
      - Seconds between the SIGTERM to the engine's main process and the SIGTERM to the rest of its process
        group (the C(process) supervisor; at most O(stop_timeout)).
      - Default per engine, long enough for its own shutdown. V(sglang) 30 (it drains, then waits up to 15 s
        for its schedulers to release), V(vllm) 15, the others 10.
      - The stop of a running server uses that server's engine's default.
    type: float
  state_dir:
    description: Directory of the state files (C(NAME.json), mode 0600). An absolute path.
    type: path
    default: /var/lib/inferops/serving
  log_dir:
    description:
      - Directory of the engine logs, mode 0640. An absolute path.
      - C(NAME.log) is the log of the engine started last. At each start the previous one moves to C(NAME.log.1),
        C(NAME.log.1) to C(NAME.log.2), and so on (see O(log_keep)).
    type: path
    default: /var/log/inferops
  log_keep:
    description:
      - How many engine logs are kept, the current C(NAME.log) included; the oldest beyond are removed at a start.
        At least 1.
      - A switch whose new variant fails and is rolled back quotes the failed start's log as C(NAME.log.1), where
        it is after the restore started, so keep at least 2 to read it whole.
    type: int
    default: 5
  supervisor:
    description:
      - V(auto) uses systemd when it is PID 1 and usable, else V(process).
    type: str
    choices: [auto, systemd, process]
    default: auto
  lock_timeout:
    description:
      - Seconds to wait while another run changes this instance (holds its lock) before failing with
        C(nothing was stopped), naming who holds the lock and since when. The default lets a short change (a plan,
        a stop, a small model's switch) finish; raise it to queue a switch behind a long model load.
      - A call that wants the configuration a switch under way brings up joins that switch instead.
    type: float
    default: 60
"""
