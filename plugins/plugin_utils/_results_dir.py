# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where bench_facts keeps its results (run files, history.jsonl, reports, a tune's tuned-BASE.yml): the
one rule, for the callback and for the roles that read what it wrote.

In order: an explicit value (the callback's option; a role's tune_results_dir), then Ansible's
configuration of the callback (INFEROPS_RESULTS_DIR, then [callback_bench_facts] results_dir in
ansible.cfg), then results/ beside the playbook that runs, except for a playbook of an installed collection
(ansible-playbook inferops.serving.X): `ansible-galaxy collection install --force` of the next version
deletes everything inside the collection, so its results go to $XDG_DATA_HOME/inferops/results (falling back
to ~/.local/share/inferops/results). A history left in the old place inside the collection is named
(stranded), never moved or deleted.
"""

from __future__ import annotations

import os

CALLBACK = "inferops.serving.bench_facts"
OPTION = "results_dir"
DEFAULT_SUBDIR = "results"


HISTORY = "history.jsonl"


def installed_playbooks(playbook_dir):
    """Whether playbook_dir is the playbooks/ of an installed collection: its parent holds the MANIFEST.json that
    `ansible-galaxy collection install` writes (a checkout has galaxy.yml and no MANIFEST.json)."""
    if not playbook_dir:
        return False
    playbook_dir = os.path.abspath(playbook_dir)
    return (os.path.basename(playbook_dir) == "playbooks"
            and os.path.isfile(os.path.join(os.path.dirname(playbook_dir), "MANIFEST.json")))


def data_dir(environ=None):
    """$XDG_DATA_HOME/inferops/results, or ~/.local/share/inferops/results when XDG_DATA_HOME is unset or not
    absolute (the XDG Base Directory Specification ignores a relative one)."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_DATA_HOME") or ""
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "inferops", DEFAULT_SUBDIR)


def resolve(configured, playbook_dir, environ=None):
    """The results directory (absolute): configured when set; else, for a playbook of an installed collection,
    data_dir(); else results/ in playbook_dir (or the current directory when no playbook is known)."""
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    if installed_playbooks(playbook_dir):
        return data_dir(environ)
    return os.path.join(os.path.abspath(playbook_dir or os.getcwd()), DEFAULT_SUBDIR)


def stranded(results_dir, playbook_dir):
    """A line naming the history an earlier version left inside the installed collection (results/ beside its
    playbooks), where the next `ansible-galaxy collection install --force` deletes it, and how to move it; None
    when there is none, or it is where this run writes anyway. Nothing is moved or deleted."""
    if not installed_playbooks(playbook_dir):
        return None
    old = os.path.join(os.path.abspath(playbook_dir), DEFAULT_SUBDIR)
    if os.path.abspath(results_dir) == old or not os.path.isfile(os.path.join(old, HISTORY)):
        return None
    return ("bench_facts: an earlier history is inside the installed collection, at %s; reinstalling the collection "
            "deletes it. This run writes to %s. To keep one history, move the old files there (mkdir -p %s && "
            "mv -n %s/* %s/, then append the old history.jsonl before the new one), or set results_dir. Nothing was "
            "moved or deleted." % (old, results_dir, results_dir, old, results_dir))


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
