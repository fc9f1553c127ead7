# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which levels of a comparison were measured before the server was steady, and the warning lines that say so.

throughput_bench warms each level up until two successive warm-up windows agree (warmup_tolerance) or
warmup_max_s runs out; a level measured when it ran out (or when a warm-up window completed no request) has
``steady: false``. A figure from such a level may be a cold server's, so a comparison that uses it says so.
``steady: null`` (the warm-up was off, warmup 0) and a level without the key (a history from before 0.4.0)
are not listed: nothing says they were not steady.

Standard library only, pure (no I/O), the input shaped as compare()'s: {variant: {"repeats": [repeat, ...]}
or {"failed": reason}}, a repeat being a list of throughput_bench levels or a throughput_bench result.
"""

from __future__ import annotations


def _levels(repeat):
    """The level dicts of one repeat: a list of levels, or a throughput_bench result (a dict with results)."""
    if isinstance(repeat, dict):
        repeat = repeat.get("results")
    if not isinstance(repeat, list):
        return []
    return [level for level in repeat if isinstance(level, dict) and "concurrency" in level]


def _repeats(entry):
    if isinstance(entry, list):
        return entry
    if isinstance(entry, dict) and not entry.get("failed") and isinstance(entry.get("repeats"), list):
        return entry["repeats"]
    return []


def unsteady_levels(results_by_variant, order=None, concurrencies=None):
    """[{variant, concurrency, repeat, warmup_s, warmup_end, warmup_windows}] for every level with ``steady``
    false, variant by variant (in ``order``, else the dict's), repeat by repeat, in each repeat's level order.

    ``repeat`` is the level's C(labels.repeat) when it has one, else the repeat's 0-based position.
    ``concurrencies``: only levels at these (the levels a comparison uses); None: every level. A failed
    variant has no levels.
    """
    results_by_variant = results_by_variant if isinstance(results_by_variant, dict) else {}
    wanted = None if concurrencies is None else set(concurrencies)
    out = []
    for variant in (order if order is not None else list(results_by_variant)):
        for pos, repeat in enumerate(_repeats(results_by_variant.get(variant))):
            for level in _levels(repeat):
                if level.get("steady") is not False:
                    continue
                if wanted is not None and level["concurrency"] not in wanted:
                    continue
                labels = level.get("labels") if isinstance(level.get("labels"), dict) else {}
                index = labels.get("repeat")
                out.append({"variant": variant, "concurrency": level["concurrency"],
                            "repeat": index if isinstance(index, int) and not isinstance(index, bool) else pos,
                            "warmup_s": level.get("warmup_s"), "warmup_end": level.get("warmup_end"),
                            "warmup_windows": level.get("warmup_windows")})
    return out


def _fmt_s(value):
    return "%.1f s" % value if isinstance(value, (int, float)) and not isinstance(value, bool) else "? s"


def lines(unsteady, host=None):
    """Warning lines, one per variant and concurrency with levels not steady (its repeats listed), for a
    comparison's report; [] when every level was steady. ``host`` prefixes each line as compare's do."""
    groups = {}
    keys = []
    for row in unsteady or ():
        key = (row["variant"], row["concurrency"])
        if key not in groups:
            groups[key] = []
            keys.append(key)
        groups[key].append(row)
    prefix = "compare %s: " % host if host else ""
    out = []
    for variant, concurrency in keys:
        rows = groups[(variant, concurrency)]
        parts = []
        for row in rows:
            why = "a warm-up window completed no request" if row.get("warmup_end") == "nothing_completed" \
                else "not steady after %s of warm-up" % _fmt_s(row.get("warmup_s"))
            parts.append("repeat %s %s" % (row["repeat"], why))
        hint = "; raise warmup_max_s or warmup_tolerance" if any(
            row.get("warmup_end") != "nothing_completed" for row in rows) else ""
        out.append("%sWARNING %s at c=%s was measured before the server was steady (%s): its figures there may be a "
                   "cold server's%s" % (prefix, variant, concurrency, "; ".join(parts), hint))
    return out
