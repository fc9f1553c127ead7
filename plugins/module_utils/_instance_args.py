# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The parameters that place and pace one server instance, stated once: inference_server's argument spec
takes them from here (as kubernetes.core's modules take args_common), the doc fragment
inferops.serving.instance documents them (tests/unit checks that the two agree), and the roles pass
their variables through with omit, so that a default lives here and nowhere else."""

from __future__ import annotations

from ansible_collections.inferops.serving.plugins.module_utils import _engines, _supervisor

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


# A resolved variant, whole (inference_server's `spec`): the serve_variant role's catalog entry after
# resolve_variant, trimmed to these keys by the filter inferops.serving.server_spec. Each key stands for the
# module parameter of the same name (`name` for `variant`) and, when set, overwrites it, as kubernetes.core's
# k8s module lets its resource_definition override api_version, kind, name and namespace (their documentation:
# kubernetes.core plugins/doc_fragments/k8s_name_options.py).
# No key has a default here: an unset key leaves the parameter as the task gave it.
VARIANT_SPEC = dict(
    name=dict(type="str"),
    engine=dict(type="str", choices=list(_engines.ENGINES)),
    model=dict(type="str"),
    served_model_name=dict(type="str"),
    engine_args=dict(type="dict"),
    command=dict(type="list", elements="str"),
    executable=dict(type="path"),
    python=dict(type="path"),
    env=dict(type="dict"),
    ready_timeout=dict(type="float"),
    flag_check=dict(type="bool"),
    host_memory_mib=dict(type="int"),
)
# the parameter each key of the spec stands for, where it is not its own name
VARIANT_PARAMS = dict(name="variant")


def with_variant(params):
    """The parameters with the variant of `spec` (when given) laid over them: each set key overwrites the
    parameter it stands for; `spec` itself is kept, as given."""
    spec = params.get("spec") or {}
    out = dict(params)
    for key, value in spec.items():
        if value is not None:
            out[VARIANT_PARAMS.get(key, key)] = value
    return out


def defaults():
    """{parameter: default} of the instance parameters that have one."""
    return dict((key, spec["default"]) for key, spec in INSTANCE_SPEC.items() if "default" in spec)
