# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""pytest-ansible runs modules on localhost; use this interpreter (discovery picks a broken shim here)."""

from __future__ import annotations

import os
import sys

os.environ["ANSIBLE_PYTHON_INTERPRETER"] = sys.executable
os.environ.setdefault("ANSIBLE_CONFIG", os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "ansible.cfg"))
