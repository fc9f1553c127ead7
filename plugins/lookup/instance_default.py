# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: instance_default
version_added: 0.5.0
short_description: The default of an instance parameter of inferops.serving.inference_server
description:
  - Returns the default that M(inferops.serving.inference_server) applies to an instance parameter (C(state_dir),
    C(log_dir), C(host), C(supervisor), C(ready_timeout), C(stop_timeout), C(lock_timeout)) when it is not given,
    from the module's own argument spec, so that a role that needs the value (the path of the state file, to read
    it) states no copy of it.
author:
  - inferops.serving maintainers (@inferops)
options:
  _terms:
    description: Parameter names.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Where the state file is when serving_state_dir is unset
  ansible.builtin.debug:
    msg: "{{ serving_state_dir | default(lookup('inferops.serving.instance_default', 'state_dir')) }}/qwen.json"
"""

RETURN = r"""
_raw:
  description: The default of each parameter, in the order asked.
  type: list
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.inferops.serving.plugins.module_utils import _instance_args


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        known = _instance_args.defaults()
        unknown = [t for t in terms if t not in known]
        if unknown:
            raise AnsibleLookupError("instance_default: %s has no default; the parameters with one are %s"
                                     % (", ".join(map(str, unknown)), ", ".join(sorted(known))))
        return [known[t] for t in terms]
