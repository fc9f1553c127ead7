# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the tests read of the collection's own metadata: its version, galaxy.yml's (the one fact
tests/unit/test_version.py holds the others to)."""

from __future__ import annotations

import os

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def galaxy_version():
    with open(os.path.join(ROOT, "galaxy.yml")) as handle:
        return str(yaml.safe_load(handle)["version"])
