# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which settings differ between two variants as their engines resolved them, and who chose the difference.

Input per variant: its name, its engine_args as the catalog gives them (what was asked) and its ``resolved``
as inference_server returns it (plugins/module_utils/_resolved.py: ``{"engine", "settings", "digest", ...}``).
Every setting whose resolved value differs between the two (a setting only one reports counts as differing)
falls in one of two groups:

- asked for: its name is in either variant's engine_args. Names are compared normalised (leading dashes
  dropped, kebab-case as snake_case, lower case) and through the engine's own aliases (SGLang's
  ``--tensor-parallel-size`` is ``tp_size``, vLLM's ``--tp-size`` is ``tensor_parallel_size``,
  ``--no-enable-X`` and ``--disable-X`` are ``enable_X``);
- chosen by the engine: nobody asked, and the engine resolved it differently anyway (a default that depends
  on another setting, the GPU, the memory left): the warning, as the difference in speed may come from it.

The fields that differ between any two launches (a seed drawn at start, the port, the argv as asked; module
_resolved.PER_LAUNCH) are not compared. Pure functions; ``markdown_lines`` renders a "Resolved settings"
report section.
"""

from __future__ import annotations

import json

from ansible_collections.inferops.serving.plugins.plugin_utils._results_common import md_escape

ABSENT = "(not reported)"
VALUE_CHARS = 60  # characters of a value shown in the report

# an engine_args spelling -> the name the engine reports the setting under (normalised names)
# SGLang 0.5.9 / 0.5.23 srt/server_args.py: the option strings of one argparse action (--tp-size and
# --tensor-parallel-size, ...), and the dataclass field the value ends in
ALIASES = {
    "sglang": {"tensor_parallel_size": "tp_size", "tp": "tp_size", "pipeline_parallel_size": "pp_size",
               "data_parallel_size": "dp_size", "expert_parallel_size": "ep_size", "ep": "ep_size",
               "model": "model_path", "nccl_init_addr": "dist_init_addr",
               "fp8_gemm_backend": "fp8_gemm_runner_backend", "fp4_gemm_backend": "fp4_gemm_runner_backend",
               "speculative_draft_model": "speculative_draft_model_path",
               "attention_context_parallel_size": "attn_cp_size", "moe_data_parallel_size": "moe_dp_size",
               "decode_context_parallel_size": "dcp_size", "attention_data_parallel_size": "attn_dp_size",
               "enable_hicache": "enable_hierarchical_cache", "context_bucket": "cuda_graph_prefill_max_context"},
    # vLLM 0.34.0 vllm/engine/arg_utils.py: -tp, -pp, -dp, -sc, -cc, -ac; --device-memory-utilization
    "vllm": {"tp_size": "tensor_parallel_size", "tp": "tensor_parallel_size", "pp": "pipeline_parallel_size",
             "dp": "data_parallel_size", "sc": "speculative_config", "cc": "compilation_config",
             "ac": "attention_config", "device_memory_utilization": "gpu_memory_utilization",
             "model": "model_tag"},
    "transformers": {"model": "force_model"},
}


def norm(name):
    """'--Tensor-Parallel-Size' -> 'tensor_parallel_size'."""
    return str(name).lstrip("-").replace("-", "_").lower()


def asked_name(key, engine, reported=()):
    """The name an engine_args key is reported under: its alias, or for a negation (--no-X, --disable-X) the
    positive name when that is the one reported."""
    name = norm(key)
    name = ALIASES.get(engine, {}).get(name, name)
    if name in reported:
        return name
    for prefix, positive in (("no_", ""), ("disable_", "enable_"), ("enable_", "disable_")):
        if name.startswith(prefix) and positive + name[len(prefix):] in reported:
            return positive + name[len(prefix):]
    return name


def _settings(resolved):
    if isinstance(resolved, dict) and isinstance(resolved.get("settings"), dict):
        return dict((norm(k), v) for k, v in resolved["settings"].items())
    return None


def _same(a, b):
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _why_missing(resolved):
    if not resolved:
        return "nothing was read"
    return resolved.get("error") or "no settings"


def diff(a, b):
    """The settings that differ between two variants. a and b: {"name", "engine_args", "resolved"}.

    Returns {"variants": [a, b], "engine": the engines' (a list when they differ), "digests": [a, b],
    "asked": [row], "engine_chosen": [row], "unavailable": {variant: why}, "not_compared": [names]}; a row is
    {"setting", "values": [a's, b's], "asked": [a's engine_args value or None, b's]}, a value that a variant's
    engine does not report being ABSENT. Variants of different engines, or one without settings, are not
    compared (only "unavailable" / "engine" say why)."""
    names = [a.get("name"), b.get("name")]
    resolved = [a.get("resolved") or None, b.get("resolved") or None]
    engines = [(r or {}).get("engine") for r in resolved]
    out = {"variants": names, "engine": engines[0] if engines[0] == engines[1] else engines,
           "digests": [(r or {}).get("digest") for r in resolved], "asked": [], "engine_chosen": [],
           "unavailable": {}, "not_compared": []}
    settings = [_settings(r) for r in resolved]
    for name, got, res in zip(names, settings, resolved):
        if got is None:
            out["unavailable"][name] = _why_missing(res)
    if out["unavailable"] or engines[0] != engines[1]:
        return out
    engine = engines[0]
    reported = set(settings[0]) | set(settings[1])
    asked = []
    for variant in (a, b):
        asked.append(dict((asked_name(k, engine, reported), v) for k, v in (variant.get("engine_args") or {}).items()))
    asked_names = set(asked[0]) | set(asked[1])
    # imported here: module_utils._resolved pulls in the engines' and the preflight's code (about 50 ms), and this
    # file is loaded by every report of the bench_facts callback, which needs it only for a diff
    from ansible_collections.inferops.serving.plugins.module_utils import _resolved
    per_launch = set(_resolved.PER_LAUNCH)
    for setting in sorted(reported | asked_names):
        values = [s.get(setting, ABSENT) for s in settings]
        # asked differently but reported by neither engine (vLLM lists only what differs from its defaults):
        # shown, ABSENT on both sides
        unreported = setting not in reported and not _same(asked[0].get(setting), asked[1].get(setting))
        if _same(values[0], values[1]) and not unreported:
            continue
        if setting in per_launch and setting not in asked_names:
            out["not_compared"].append(setting)
            continue
        row = {"setting": setting, "values": values, "asked": [asked[0].get(setting), asked[1].get(setting)]}
        (out["asked"] if setting in asked_names else out["engine_chosen"]).append(row)
    return out


def _show(value):
    if value == ABSENT:
        return "*%s*" % ABSENT
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value
    if len(text) > VALUE_CHARS:
        text = text[:VALUE_CHARS - 3] + "..."
    return "`%s`" % md_escape(text).replace("`", "'")


def markdown_lines(result, heading="## Resolved settings"):
    """A "Resolved settings" report section (Markdown lines) for diff()'s result."""
    names = [md_escape(n) for n in result["variants"]]
    sub = "#" * (len(heading) - len(heading.lstrip("#")) + 1)  # one level under the heading
    out = [heading, ""]
    if result["unavailable"]:
        out.extend("- %s: no resolved settings (%s)." % (md_escape(n), md_escape(why))
                   for n, why in sorted(result["unavailable"].items()))
        out.append("")
        return out
    if isinstance(result["engine"], list):
        out.append("%s runs on %s and %s on %s: their settings are not comparable." % (
            names[0], md_escape(result["engine"][0]), names[1], md_escape(result["engine"][1])))
        out.append("")
        return out
    digests = result.get("digests") or [None, None]
    out.append("What the engine (%s) resolved, %s (digest %s) against %s (digest %s)." % (
        md_escape(result["engine"]), names[0], digests[0] or "-", names[1], digests[1] or "-"))
    out.append("")
    if not result["asked"] and not result["engine_chosen"]:
        out.append("Every compared setting resolved the same.")
        out.append("")
        return out
    if result["asked"]:
        out.append(sub + " Asked for")
        out.append("")
        out.append("| setting | %s | %s | asked (%s / %s) |" % (names[0], names[1], names[0], names[1]))
        out.append("| --- | --- | --- | --- |")
        for row in result["asked"]:
            asked = " / ".join("-" if v is None else _show(v) for v in row["asked"])
            cells = (md_escape(row["setting"]), _show(row["values"][0]), _show(row["values"][1]), asked)
            out.append("| %s | %s | %s | %s |" % cells)
        out.append("")
    if result["engine_chosen"]:
        out.append(sub + " Chosen by the engine")
        out.append("")
        count = len(result["engine_chosen"])
        one = count == 1
        out.append("**Warning**: %d setting%s differ%s although neither variant asked for %s; a difference in "
                   "speed may come from %s." % (count, "" if one else "s", "s" if one else "", "it" if one else "them",
                                                "it" if one else "them"))
        out.append("")
        out.append("| setting | %s | %s |" % (names[0], names[1]))
        out.append("| --- | --- | --- |")
        for row in result["engine_chosen"]:
            out.append("| %s | %s | %s |" % (md_escape(row["setting"]), _show(row["values"][0]), _show(row["values"][1])))
        out.append("")
    if result["not_compared"]:
        out.append("Not compared (they differ between any two launches): %s." % ", ".join(
            md_escape(n) for n in result["not_compared"]))
        out.append("")
    return out
