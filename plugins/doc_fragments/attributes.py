# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment(object):
    """Attributes every inferops.serving module declares."""

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
  idempotent:
    description:
      - When run twice in a row outside check mode, with the same arguments, the second invocation
        indicates no change.
"""

    # For modules that only read the target.
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: This action does not modify state.
  diff_mode:
    support: N/A
    details: This action does not modify state.
  idempotent:
    support: full
    details: This action does not modify state.
"""
