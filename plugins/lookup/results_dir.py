# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: results_dir
version_added: 0.5.0
short_description: The directory where the bench_facts callback keeps its results
description:
  - Returns the absolute directory where the C(inferops.serving.bench_facts) callback writes its run files,
    C(history.jsonl) and reports, by the callback's own rule, so that a role reads what the callback
    wrote (a tune's history) and writes beside it (C(tuned-BASE.yml)).
  - In order, the first term when it is not empty, then the callback's configuration
    (E(INFEROPS_RESULTS_DIR), then C(results_dir) in the C([callback_bench_facts]) section of C(ansible.cfg)),
    then C(results/) beside the playbook that runs (C(playbook_dir)); for a playbook of an installed
    collection, C($XDG_DATA_HOME/inferops/results) (else C(~/.local/share/inferops/results)), as the callback.
author:
  - inferops.serving maintainers (@inferops)
options:
  _terms:
    description: An explicit directory, which wins when not empty (a role's C(tune_results_dir)).
    type: list
    elements: str
    required: false
"""

EXAMPLES = r"""
- name: Read the history that bench_facts keeps
  ansible.builtin.set_fact:
    history: "{{ lookup('ansible.builtin.file', lookup('inferops.serving.results_dir') ~ '/history.jsonl', errors='ignore') }}"

- name: An explicit directory wins
  ansible.builtin.debug:
    msg: "{{ lookup('inferops.serving.results_dir', tune_results_dir | default('')) }}"
"""

RETURN = r"""
_raw:
  description: One absolute directory.
  type: list
  elements: str
"""

from ansible.plugins.lookup import LookupBase

from ansible_collections.inferops.serving.plugins.plugin_utils import _results_dir


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        explicit = next((str(t) for t in terms or () if t), None)
        playbook_dir = (variables or {}).get("playbook_dir")
        return [_results_dir.resolve(explicit or _results_dir.configured(), playbook_dir)]
