# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A switch to a variant whose flag, or a flag's value, the installed engine refuses, through the real
playbooks/switch_variant.yml: the refusal comes from that engine's own --help (SGLang 0.5.23 in its side
environment), before the running server is stopped; the process table, the port and the state file say it
still serves."""

from __future__ import annotations

from switchbed import fleet, observed, started, switch, untouched  # noqa: F401 pylint: disable=unused-import


def test_a_flag_the_installed_sglang_refuses_stops_nothing(switch, fleet, engine_envs):
    sglang = engine_envs["sglang-0.5.23"]
    fleet.add_variants({
        # the example inventory's baseline flags for SGLang 0.5.9, meeting an installed 0.5.23
        "sgl": {"engine": "sglang", "model": "Qwen/Qwen3-0.6B", "python": sglang.python,
                "engine_args": {"tp_size": 1, "cuda_graph_max_bs": 128, "mem_fraction_static": 0.8}},
    })
    before = started(switch, fleet)
    plan = switch("sgl", check=True)
    assert plan.rc != 0 and plan.recap()["changed"] == 0
    run = switch("sgl")
    assert run.rc != 0
    out = " ".join(run.stdout.split())
    assert ("engine sglang 0.5.23 does not accept --cuda-graph-max-bs: it is ambiguous (it abbreviates "
            "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill)") in out, out[-3000:]
    assert "nothing was stopped" in out and "ROLLED BACK" not in out
    result = run.result("inference_server")
    assert result["outcome"] == "nothing_stopped" and result["flag_check"]["checked"] is True
    assert run.recap()["changed"] == 0
    untouched(fleet, before)
    observed("SGLang 0.5.23 and --cuda-graph-max-bs (old pid %d)" % before["pid"], run, fleet)


def test_a_value_the_installed_sglang_refuses_stops_nothing(switch, fleet, engine_envs):
    """--quantization modelopt_fp5: a flag SGLang has, a value outside the choices its parser holds (it would exit 2
    with "invalid choice" right after the old server was stopped)."""
    sglang = engine_envs["sglang-0.5.23"]
    fleet.add_variants({
        "sgl5": {"engine": "sglang", "model": "Qwen/Qwen3-0.6B", "python": sglang.python,
                 "engine_args": {"tp_size": 1, "quantization": "modelopt_fp5", "mem_fraction_static": 0.8}},
    })
    before = started(switch, fleet)
    plan = switch("sgl5", check=True)
    assert plan.rc != 0 and plan.recap()["changed"] == 0
    assert "--quantization modelopt_fp5 is not among the choices its --help lists: awq, fp8," in " ".join(
        plan.stdout.split()), plan.stdout[-3000:]
    run = switch("sgl5")
    assert run.rc != 0
    out = " ".join(run.stdout.split())
    assert ("engine sglang 0.5.23 would refuse a value: --quantization modelopt_fp5 is not among the choices its "
            "--help lists: awq, fp8, mxfp8,") in out, out[-3000:]
    assert "(nearest: modelopt_fp8, modelopt_fp4)" in out
    assert "nothing was stopped" in out and "ROLLED BACK" not in out
    result = run.result("inference_server")
    assert result["outcome"] == "nothing_stopped" and result["flag_check"]["checked"] is True
    assert result["flag_check"]["values"] > 50  # the choices of 0.5.23's --help were read
    assert run.recap()["changed"] == 0
    untouched(fleet, before)
    print("\nPID UNCHANGED: before the refused switch pid %d, after it pid %d (started_at %s, variant %s)"
          % (before["pid"], fleet.record()["pid"], fleet.record()["started_at"], fleet.record()["variant"]))
    observed("SGLang 0.5.23 and --quantization modelopt_fp5 (old pid %d)" % before["pid"], run, fleet)
