# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A plugin_utils module imported when a filter first uses it, not when Ansible loads the filter's file.

Ansible finds a collection's filter by loading every file of its plugins/filter/ in turn and asking each
FilterModule for its names (Jinja2Loader.get_with_context, ansible-core 2.19 lib/ansible/plugins/loader.py).
It does so in each forked worker, so for every task that names one of our filters. A filter file that imports
its plugin_utils at the top makes every such task compile all of them: 0.25 s of compile() in 5 set_fact tasks,
measured with cProfile in the worker. Behind this proxy, a task compiles only the modules its own filters use.
"""

from __future__ import annotations

import importlib

PACKAGE = "ansible_collections.inferops.serving.plugins.plugin_utils"


class LazyModule(object):
    """Stands for plugin_utils/<name>.py: the first attribute read imports it, later reads go straight to it."""

    def __init__(self, name):
        self._name = name
        self._module = None

    def __getattr__(self, attr):
        # Only names the instance itself lacks reach here: the module's functions, classes and constants.
        if self._module is None:
            self._module = importlib.import_module("%s.%s" % (PACKAGE, self._name))
        return getattr(self._module, attr)

    def __repr__(self):
        return "<%s.%s, %s>" % (PACKAGE, self._name, "imported" if self._module is not None else "not imported yet")


# The plugin_utils that the roles' filters (instance, replicas, variants) read in nearly every task of a play of
# serve_variant, with the module_utils they import (_router, _engines, _http, _metrics, ...).
ROLE_MODULES = ("_replicas", "_variants")


def warm(names=ROLE_MODULES):
    """Imports NAMES (plugin_utils modules) into this process now; returns the names it imported.

    Ansible's collection loader compiles a collection's Python from source at each import and keeps no bytecode
    (_AnsibleCollectionPkgLoaderBase.get_code, ansible-core 2.19 lib/ansible/utils/collection_loader/
    _collection_finder.py), and each task runs in a worker forked from the controller's main process. So every
    task that uses one of the roles' filters compiled the same modules again: in 6 workers of one idempotent run
    of switch_variant.yml, 0.14 s of compile() by a log of the loader's get_code, besides executing them.
    Imported once in the main process, before the play's first task, they are inherited by every worker. A module
    that fails to import is left to its filter, which reports the error in the task that uses it.
    """
    done = []
    for name in names:
        try:
            importlib.import_module("%s.%s" % (PACKAGE, name))
        except Exception:  # pylint: disable=broad-except  # warming is an optimisation, never an error of its own
            continue
        done.append(name)
    return done
