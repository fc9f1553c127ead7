# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The compare's schedule: which variant runs when, and how many repeats (a pure function the role loops on
through the compare_schedule filter).
"""

from __future__ import annotations


class CompareError(ValueError):
    """Bad input to the comparison; the message says what was wrong and what is allowed."""


ORDERS = ("blocked", "interleaved")


def schedule(variants, repeats, order="blocked"):
    """The runs of a comparison, in turn: [{variant, repeats, round}].

    blocked (the default): each variant served once and benchmarked ``repeats`` times in one call
    (A A A B B B): the fastest, but a slow drift of the host (thermals, other tenants) falls on the later
    variants alone and reads as a difference. interleaved: rounds of one repeat of each variant, the order
    reversed every other round (A B, B A, A B, ...): a drift falls on every variant alike (a steady one
    cancels exactly over an even number of rounds; plain A B A B would leave B one run later in every
    round), at the price of a switch per repeat (fewer: the variant that ends a round starts the next).
    ``round`` is the repeat index of a run's first repeat (its levels' ``labels.repeat``).
    """
    if order not in ORDERS:
        raise CompareError("compare_order must be one of %s, got %r" % (", ".join(ORDERS), order))
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise CompareError("repeats must be a whole number, 1 or more, got %r" % (repeats,))
    variants = list(variants or ())
    if not variants or not all(isinstance(name, str) and name for name in variants):
        raise CompareError("variants must be a non-empty list of variant names, got %r" % (variants,))
    if order == "blocked":
        return [{"variant": name, "repeats": repeats, "round": 0} for name in variants]
    return [{"variant": name, "repeats": 1, "round": turn} for turn in range(repeats)
            for name in (variants if turn % 2 == 0 else variants[::-1])]

