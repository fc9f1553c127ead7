# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where bench_facts keeps its results (run files, history.jsonl, reports, a tune's tuned-BASE.yml): the
one rule, for the callback and for the roles that read what it wrote.

In order: an explicit value (the callback's option; a role's tune_results_dir), then Ansible's
configuration of the callback (INFEROPS_RESULTS_DIR, then [callback_bench_facts] results_dir in
ansible.cfg), then results/ beside the playbook that runs.
"""

from __future__ import annotations

import os

CALLBACK = "inferops.serving.bench_facts"
OPTION = "results_dir"
DEFAULT_SUBDIR = "results"


def resolve(configured, playbook_dir):
    """The results directory (absolute): configured when set, else results/ in playbook_dir (or the
    current directory when no playbook is known)."""
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    return os.path.join(os.path.abspath(playbook_dir or os.getcwd()), DEFAULT_SUBDIR)


def configured():
    """results_dir as Ansible's configuration gives it to the callback (env, then ini), or None. Read
    through the callback's own option definition, so both sides see the same settings."""
    # pylint: disable=import-outside-toplevel
    from ansible import constants as C
    from ansible.plugins.loader import callback_loader

    plugin = callback_loader.get(CALLBACK, class_only=True)
    if plugin is None:
        return None
    return C.config.get_config_value(OPTION, plugin_type="callback", plugin_name=plugin._load_name) or None
