# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The parameters that place and pace one server instance, stated once: inference_server's argument spec
takes them from here (as kubernetes.core's modules take args_common), the doc fragment
inferops.serving.instance documents them (tests/unit checks that the two agree), and the roles pass
their variables through with omit, so that a default lives here and nowhere else."""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.module_utils import _supervisor

DEFAULT_STATE_DIR = "/var/lib/inferops/serving"
DEFAULT_LOG_DIR = "/var/log/inferops"

INSTANCE_SPEC = dict(
    name=dict(type="str", required=True),
    host=dict(type="str", default="127.0.0.1"),
    port=dict(type="int", required=True),
    state_dir=dict(type="path", default=DEFAULT_STATE_DIR),
    log_dir=dict(type="path", default=DEFAULT_LOG_DIR),
    log_keep=dict(type="int", default=_supervisor.LOG_KEEP),
    supervisor=dict(type="str", default="auto", choices=list(_supervisor.SUPERVISORS)),
    ready_timeout=dict(type="float", default=1800.0),
    stop_timeout=dict(type="float", default=120.0),
    stop_grace=dict(type="float"),
    lock_timeout=dict(type="float", default=60.0),
)


def defaults():
    """{parameter: default} of the instance parameters that have one."""
    return dict((key, spec["default"]) for key, spec in INSTANCE_SPEC.items() if "default" in spec)
