# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where results go (plugin_utils/_results_dir.py): beside a user's playbook and the checkout's, outside an
installed collection, and the old history inside one named, never touched."""

from __future__ import annotations

import os

from ansible_collections.inferops.serving.plugins.plugin_utils import _results_dir


def installed(tmp_path):
    root = tmp_path / "collections" / "ansible_collections" / "inferops" / "serving"
    (root / "playbooks").mkdir(parents=True)
    (root / "MANIFEST.json").write_text("{}")
    return root / "playbooks"


def test_a_users_playbook_and_the_checkout_keep_results_beside_them(tmp_path):
    assert _results_dir.resolve(None, str(tmp_path / "books")) == str(tmp_path / "books" / "results")
    checkout = tmp_path / "checkout"
    (checkout / "playbooks").mkdir(parents=True)
    (checkout / "galaxy.yml").write_text("version: 0.1.0\n")
    assert _results_dir.resolve(None, str(checkout / "playbooks")) == str(checkout / "playbooks" / "results")


def test_an_installed_collections_playbook_writes_to_the_xdg_data_home(tmp_path):
    books = installed(tmp_path)
    assert _results_dir.resolve(None, str(books), {"XDG_DATA_HOME": "/data"}) == "/data/inferops/results"
    home = os.path.join(os.path.expanduser("~"), ".local", "share", "inferops", "results")
    assert _results_dir.resolve(None, str(books), {}) == home
    assert _results_dir.resolve(None, str(books), {"XDG_DATA_HOME": "relative"}) == home  # the spec ignores it
    assert _results_dir.resolve("/explicit", str(books), {"XDG_DATA_HOME": "/data"}) == "/explicit"


def test_the_old_history_inside_the_collection_is_named_and_left_alone(tmp_path):
    books = installed(tmp_path)
    assert _results_dir.stranded("/data/inferops/results", str(books)) is None  # nothing there
    (books / "results").mkdir()
    (books / "results" / "history.jsonl").write_text("{}\n")
    said = _results_dir.stranded("/data/inferops/results", str(books))
    assert said.startswith("bench_facts: an earlier history is inside the installed collection, at %s;" % (books / "results"))
    assert "mkdir -p /data/inferops/results && mv -n %s/* /data/inferops/results/" % (books / "results") in said
    assert (books / "results" / "history.jsonl").read_text() == "{}\n"
    assert _results_dir.stranded(str(books / "results"), str(books)) is None  # results_dir set to it: nothing to say
