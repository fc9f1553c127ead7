# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the replica decisions: the instances plan (validation, selection, batches, NCCL ports), whether
a variant fits an instance, and the engine_args an instance gets."""

from __future__ import annotations

import pytest

from ansible_collections.inferops.serving.plugins.module_utils import _instance_args
from ansible_collections.inferops.serving.plugins.plugin_utils import _replicas as rp

FOUR = {"r0": {"gpus": [0, 1], "port": 30000}, "r1": {"gpus": [2, 3], "port": 30001},
        "r2": {"gpus": [4, 5], "port": 30002}, "r3": {"gpus": [6, 7], "port": 30003}}


def plan(instances, selected="all", **kwargs):
    return rp.instances_plan(instances, "qwen", selected, **kwargs)


def refused(instances, *wanted, **kwargs):
    """The PlanError message, after checking it names each of wanted."""
    with pytest.raises(rp.PlanError) as err:
        plan(instances, **kwargs)
    msg = str(err.value)
    for part in wanted:
        assert part in msg, msg
    return msg


# ---- a host without serving_instances ------------------------------------------------------------

@pytest.mark.parametrize("instances", [None, {}])
def test_a_host_without_instances_is_one_implicit_instance_on_every_gpu(instances):
    check = {"reclaim": True, "timeout": 10}
    out = rp.instances_plan(instances, "qwen", "all", 30000, check, 1, 1, "sglang")
    assert out == {"replicated": False, "selected": [None], "batches": [[None]], "min_available": 1,
                   "max_unavailable": 1, "keep_healthy": 0,
                   "instances": [{"instance": None, "name": "qwen", "port": 30000, "gpus": None, "variant": None,
                                  "nccl_port": None, "router": None, "env": {}, "gpu_check": check,
                                  "selected": True}]}


def test_the_implicit_instance_keeps_the_gpu_check_as_given_and_none_as_none():
    check = {"reclaim": True, "gpus": [0, 1]}
    assert plan(None, gpu_check=check)["instances"][0]["gpu_check"] == {"reclaim": True, "gpus": [0, 1]}
    assert plan(None)["instances"][0]["gpu_check"] is None
    # whole_host is not a gpu_idle_check option: never passed on
    assert plan(None, gpu_check={"whole_host": True, "timeout": 5})["instances"][0]["gpu_check"] == {"timeout": 5}


@pytest.mark.parametrize("selected", ["all", "", None, ["all"], []])
def test_a_host_without_instances_takes_all_or_nothing_named(selected):
    assert plan(None, selected)["selected"] == [None]


@pytest.mark.parametrize("selected", ["r0", ["r0", "r1"], "r0,all"])
def test_a_host_without_instances_refuses_a_selection(selected):
    refused(None, "this host declares no serving_instances", "r0", selected=selected)


# ---- the plan of a host with instances -----------------------------------------------------------

def test_every_instance_in_name_order_with_its_server_env_and_gpu_check():
    instances = {"r1": {"gpus": "3, 2", "port": 30001, "router": {"worker_url": "http://gpu1:30001"}},
                 "r0": {"gpus": [1, 0], "port": 30000, "variant": "nextn"}}
    out = rp.instances_plan(instances, "qwen", "all", 8000, {"reclaim": True, "gpus": [0, 1, 2, 3, 4]}, 1, 1)
    assert out["replicated"] is True
    assert out["instances"] == [
        {"instance": "r0", "name": "qwen.r0", "port": 30000, "gpus": [0, 1], "variant": "nextn", "nccl_port": 40000,
         "router": None, "env": {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
         "gpu_check": {"reclaim": True, "gpus": [0, 1]}, "selected": True},
        {"instance": "r1", "name": "qwen.r1", "port": 30001, "gpus": [2, 3], "variant": None, "nccl_port": 40001,
         "router": {"worker_url": "http://gpu1:30001"},
         "env": {"CUDA_VISIBLE_DEVICES": "2,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
         "gpu_check": {"reclaim": True, "gpus": [2, 3]}, "selected": True},
    ]
    assert out["selected"] == ["r0", "r1"] and out["batches"] == [["r0"], ["r1"]]


def test_the_plan_copies_what_it_was_given():
    check = {"reclaim": True}
    instances = {"r0": {"gpus": [0], "port": 1, "router": {"url": "x"}}}
    out = plan(instances, gpu_check=check)
    out["instances"][0]["router"]["url"] = "changed"
    assert check == {"reclaim": True} and instances["r0"]["router"] == {"url": "x"}


def test_an_instance_gpu_check_without_host_parameters_holds_its_gpus():
    assert plan({"r0": {"gpus": [3], "port": 1}})["instances"][0]["gpu_check"] == {"gpus": [3]}


@pytest.mark.parametrize("whole", [True, "true", "yes"])
def test_whole_host_checks_every_gpu_and_is_never_passed_on(whole):
    out = plan(FOUR, gpu_check={"whole_host": whole, "gpus": [0], "timeout": 10})
    assert [entry["gpu_check"] for entry in out["instances"]] == [{"timeout": 10}] * 4
    assert out["instances"][1]["env"]["CUDA_VISIBLE_DEVICES"] == "2,3"  # the engine still gets its own GPUs


def test_whole_host_false_is_dropped_and_the_instance_gpus_given():
    out = plan(FOUR, gpu_check={"whole_host": False, "timeout": 10})
    assert out["instances"][2]["gpu_check"] == {"timeout": 10, "gpus": [4, 5]}


# ---- selection ------------------------------------------------------------------------------------

@pytest.mark.parametrize("selected, wanted", [
    ("all", ["r0", "r1", "r2", "r3"]),
    (None, ["r0", "r1", "r2", "r3"]),
    ("", ["r0", "r1", "r2", "r3"]),
    ("r2,r0", ["r0", "r2"]),
    (" r3 , r1 ,", ["r1", "r3"]),
    (["r3", "r1", "r3"], ["r1", "r3"]),
])
def test_selection_in_name_order(selected, wanted):
    out = plan(FOUR, selected)
    assert out["selected"] == wanted
    assert [entry["instance"] for entry in out["instances"] if entry["selected"]] == wanted
    assert [entry["instance"] for entry in out["instances"]] == ["r0", "r1", "r2", "r3"]


def test_unknown_instances_are_refused_naming_them_and_the_declared_ones():
    msg = refused(FOUR, "r9, r7", "r0, r1, r2, r3", selected="r0,r9,r7")
    assert msg.startswith("instances names r9, r7, not declared on this host")


@pytest.mark.parametrize("selected", [3, {"r0": 1}, ["r0", 1]])
def test_a_selection_of_another_type_is_refused(selected):
    refused(FOUR, "instances must be 'all', a comma-separated string or a list of instance names", selected=selected)


# ---- validation -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["r.0", "r 0", "", "r/0", 7])
def test_instance_names_are_letters_digits_underscore_and_dash(name):
    refused({name: {"gpus": [0], "port": 1}}, "instance name %r must be letters, digits, '_' and '-' only" % (name,),
            "no dot")


def test_dash_and_underscore_names_are_taken():
    assert plan({"a-1": {"gpus": [0], "port": 1}, "B_2": {"gpus": [1], "port": 2}})["selected"] == ["B_2", "a-1"]


@pytest.mark.parametrize("gpus, why", [
    ([], "got []"),
    ("", "got ''"),
    ([0, -1], "not a GPU index: -1"),
    ([True], "not a GPU index: True"),
    ([0, "x"], "not a GPU index: 'x'"),
    ("0,1,1", "listed twice: 1"),
    ([2, 2, 3, 3], "listed twice: 2, 3"),
    (3, "got 3"),
    ({"0": 1}, "got {'0': 1}"),
])
def test_gpus_must_be_a_list_of_distinct_gpu_indices(gpus, why):
    refused({"r0": {"gpus": gpus, "port": 1}}, "instance r0: gpus must be a non-empty list of distinct GPU indices", why)


def test_gpus_are_required():
    refused({"r0": {"port": 1}}, "instance r0 has no gpus")


@pytest.mark.parametrize("port", [0, 65536, True, "x", -1, 3.5])
def test_port_must_be_1_to_65535(port):
    refused({"r0": {"gpus": [0], "port": port}}, "instance r0: port must be an integer from 1 to 65535, got %r"
            % (port,))


def test_port_is_required_and_taken_as_digits():
    refused({"r0": {"gpus": [0]}}, "instance r0 has no port")
    assert plan({"r0": {"gpus": [0], "port": "30000"}})["instances"][0]["port"] == 30000


def test_unknown_keys_are_refused_listing_the_allowed_ones():
    refused({"r0": {"gpus": [0], "port": 1, "gpu": [1], "tp": 2}},
            "instance r0 has unknown key(s) gpu, tp; allowed: gpus, nccl_port, port, router, variant")


@pytest.mark.parametrize("entry, why", [
    ("r0", "instance r1 must be a dict with gpus and port"),
    ({"gpus": [2], "port": 2, "variant": 3}, "instance r1: variant must be the name of a variant"),
    ({"gpus": [2], "port": 2, "router": "http://x"}, "instance r1: router must be a dict"),
    ({"gpus": [2], "port": 2, "nccl_port": 70000}, "instance r1: nccl_port must be an integer from 1 to 65535"),
])
def test_the_other_fields_are_checked(entry, why):
    refused({"r0": {"gpus": [0], "port": 1}, "r1": entry}, why)


def test_serving_instances_must_be_a_dict():
    refused([{"gpus": [0], "port": 1}], "serving_instances must be a dict of instance name")


def test_overlapping_gpus_are_refused_naming_both_instances_and_the_gpus():
    refused({"a": {"gpus": [0, 1, 2], "port": 1}, "b": {"gpus": [4, 5], "port": 2}, "c": {"gpus": [2, 1, 3], "port": 3}},
            "instances a and c share GPU(s) 1, 2")


def test_two_instances_on_one_port_are_refused_naming_both():
    msg = refused({"a": {"gpus": [0], "port": 30000}, "b": {"gpus": [1], "port": 30001},
                   "c": {"gpus": [2], "port": 30000}}, "instances a and c both use port 30000")
    assert "30001" not in msg
    refused({"a": {"gpus": [0], "port": 1}, "b": {"gpus": [1], "port": 1}, "c": {"gpus": [2], "port": 1}},
            "instances a and b and c all use port 1")


def test_every_problem_is_named_at_once():
    msg = refused({"a": {"gpus": [0], "port": 1, "x": 1}, "b": {"gpus": [0], "port": 2}, "c": {"gpus": [0], "port": 2}},
                  "instance a has unknown key(s) x", "instances b and c share GPU(s) 0", "instances b and c both use "
                  "port 2", max_unavailable=0)
    assert "max_unavailable (serving_max_unavailable) must be an integer >= 1, got 0" in msg


# ---- NCCL ports -----------------------------------------------------------------------------------

def test_sglang_instances_get_port_plus_10000_as_their_nccl_port():
    out = plan({"r0": {"gpus": [0], "port": 30000}, "r1": {"gpus": [1], "port": 30001, "nccl_port": 29000}},
               engine="sglang")
    assert [entry["nccl_port"] for entry in out["instances"]] == [40000, 29000]
    assert rp.NCCL_OFFSET == 10000


@pytest.mark.parametrize("engine", ["vllm", "trtllm", "command"])
def test_other_engines_get_no_derived_nccl_port(engine):
    out = plan({"r0": {"gpus": [0], "port": 60000}, "r1": {"gpus": [1], "port": 30001, "nccl_port": 29000}},
               engine=engine)
    assert [entry["nccl_port"] for entry in out["instances"]] == [None, 29000]


def test_a_derived_nccl_port_that_is_another_instances_port_is_refused_naming_both():
    refused({"a": {"gpus": [0], "port": 8000}, "b": {"gpus": [1], "port": 18000}},
            "port 18000 is declared twice on this host: instance a's nccl_port (port + 10000) and instance b's port",
            "set nccl_port on a", engine="sglang")


def test_the_same_ports_pass_where_no_nccl_port_is_derived():
    assert plan({"a": {"gpus": [0], "port": 8000}, "b": {"gpus": [1], "port": 18000}}, engine="vllm")["replicated"]


def test_declared_nccl_ports_are_checked_against_every_declared_port():
    refused({"a": {"gpus": [0], "port": 8000, "nccl_port": 9000}, "b": {"gpus": [1], "port": 8001, "nccl_port": 9000}},
            "port 9000 is declared twice on this host: instance a's nccl_port and instance b's nccl_port")
    refused({"a": {"gpus": [0], "port": 8000, "nccl_port": 8001}, "b": {"gpus": [1], "port": 8001}},
            "port 8001 is declared twice on this host: instance a's nccl_port and instance b's port", engine="vllm")
    refused({"a": {"gpus": [0], "port": 8000, "nccl_port": 8000}},
            "port 8000 is declared twice on this host: instance a's port and instance a's nccl_port")


def test_a_derived_nccl_port_and_a_declared_one_clash_too():
    refused({"a": {"gpus": [0], "port": 8000}, "b": {"gpus": [1], "port": 8001, "nccl_port": 18000}},
            "instance a's nccl_port (port + 10000) and instance b's nccl_port", engine="sglang")


def test_two_instances_on_one_port_are_said_once_not_again_for_their_derived_nccl_ports():
    msg = refused({"a": {"gpus": [0], "port": 8000}, "b": {"gpus": [1], "port": 8000}}, "instances a and b both use "
                  "port 8000", engine="sglang")
    assert "18000" not in msg


def test_a_derived_nccl_port_above_65535_is_refused_with_the_advice_to_set_one():
    refused({"r0": {"gpus": [0], "port": 60000}}, "instance r0: its NCCL port would be port + 10000 = 70000, above "
            "65535: set nccl_port on r0", engine="sglang")
    assert plan({"r0": {"gpus": [0], "port": 60000, "nccl_port": 20000}}, engine="sglang")["instances"][0][
        "nccl_port"] == 20000


# ---- settings and batches -------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, why", [
    ({"max_unavailable": 0}, "max_unavailable (serving_max_unavailable) must be an integer >= 1, got 0"),
    ({"max_unavailable": True}, "max_unavailable (serving_max_unavailable) must be an integer >= 1, got True"),
    ({"max_unavailable": "many"}, "must be an integer >= 1, got 'many'"),
    ({"min_available": -1}, "min_available (serving_min_available) must be an integer >= 0, got -1"),
    ({"min_available": None}, "min_available (serving_min_available) must be an integer >= 0, got None"),
    ({"gpu_check": "all"}, "gpu_check (serving_gpu_check) must be a dict of gpu_idle_check parameters, got str"),
])
def test_bad_settings_are_refused(kwargs, why):
    refused(FOUR, why, **kwargs)
    refused(None, why, **kwargs)


def test_the_settings_are_echoed_as_ints():
    out = plan(FOUR, max_unavailable="2", min_available="0")
    assert out["max_unavailable"] == 2 and out["min_available"] == 0


@pytest.mark.parametrize("selected, max_unavailable, min_available, batches", [
    ("all", 1, 1, [["r0"], ["r1"], ["r2"], ["r3"]]),
    ("all", 2, 1, [["r0", "r1"], ["r2", "r3"]]),
    ("all", 3, 1, [["r0", "r1", "r2"], ["r3"]]),
    ("all", 4, 1, [["r0", "r1", "r2"], ["r3"]]),  # shrunk: 4 out would leave 0 of 4 in
    ("all", 4, 0, [["r0", "r1", "r2", "r3"]]),
    ("all", 3, 2, [["r0", "r1"], ["r2", "r3"]]),  # shrunk to 2: the other 2 stay in
    ("all", 2, 3, [["r0"], ["r1"], ["r2"], ["r3"]]),
    ("r1,r3", 2, 2, [["r1", "r3"]]),  # r0 and r2, not in the batch, stay in
    ("r1,r2,r3", 3, 2, [["r1", "r2"], ["r3"]]),
])
def test_batches_take_at_most_max_unavailable_and_leave_min_available_in(selected, max_unavailable,
                                                                         min_available, batches):
    out = plan(FOUR, selected, max_unavailable=max_unavailable, min_available=min_available)
    assert out["batches"] == batches
    for batch in out["batches"]:
        assert len(FOUR) - len(batch) >= min_available


@pytest.mark.parametrize("instances, min_available, left", [
    ({"a": {"gpus": [0], "port": 1}, "b": {"gpus": [1], "port": 2}}, 2, 1),
    (FOUR, 4, 3),
    (FOUR, 7, 3),
])
def test_min_available_that_not_even_one_instance_can_go_under_is_refused(instances, min_available, left):
    refused(instances, "serving_min_available %d with %d instances (%s)" % (min_available, len(instances),
                                                                            ", ".join(sorted(instances))),
            "taking even one out would leave %d in service" % left, "lower serving_min_available to at most %d" % left,
            min_available=min_available)


def test_one_declared_instance_switches_as_a_host_does_whatever_min_available():
    out = plan({"r0": {"gpus": [0, 1], "port": 30000}}, min_available=5, max_unavailable=3)
    assert out["batches"] == [["r0"]] and out["min_available"] == 5


# ---- whether a variant fits an instance -----------------------------------------------------------

def instance(gpus=(0, 1), engine="sglang", nccl_port=None, **extra):
    instances = {"r0": dict({"gpus": list(gpus), "port": 30000}, **extra)}
    if nccl_port is not None:
        instances["r0"]["nccl_port"] = nccl_port
    return plan(instances, engine=engine)["instances"][0]


def variant(engine="sglang", engine_args=None, env=None, name="fast"):
    return {"name": name, "engine": engine, "model": "m", "engine_args": engine_args or {}, "env": env or {},
            "command": None}


@pytest.mark.parametrize("engine, key", [
    ("sglang", "tp_size"), ("sglang", "tensor_parallel_size"), ("sglang", "tp"), ("sglang", "--tp-size"),
    ("sglang", "tensor-parallel-size"), ("sglang", "pp_size"), ("sglang", "pipeline_parallel_size"),
    ("sglang", "--pp-size"), ("sglang", "dp_size"), ("sglang", "data_parallel_size"), ("sglang", "dp"),
    ("sglang", "--data-parallel-size"),
    ("vllm", "tensor_parallel_size"), ("vllm", "-tp"), ("vllm", "tp"), ("vllm", "tp_size"),
    ("vllm", "--tensor-parallel-size"), ("vllm", "pipeline_parallel_size"), ("vllm", "-pp"), ("vllm", "pp"),
    ("vllm", "data_parallel_size"), ("vllm", "-dp"), ("vllm", "dp"), ("vllm", "data-parallel-size"),
    ("trtllm", "tp_size"), ("trtllm", "--tp_size"), ("trtllm", "tensor_parallel_size"), ("trtllm", "pp_size"),
    ("trtllm", "pipeline_parallel_size"), ("trtllm", "cp_size"), ("trtllm", "context_parallel_size"),
])
def test_each_spelling_of_a_parallel_size_counts(engine, key):
    two = instance(engine=engine, nccl_port=20000)
    assert rp.instance_fit(two, variant(engine, {key: 2})) == []
    problems = rp.instance_fit(two, variant(engine, {key: 4}))
    assert problems == ["%s needs 4 GPUs (%s 4), instance qwen.r0 has 2 (GPUs 0,1)" % (engine, key)]


@pytest.mark.parametrize("engine, key", [
    ("sglang", "pp"),  # ambiguous for SGLang's parser: --pp-size, --pp-max-micro-batch-size, ...
    ("trtllm", "tp"),  # click takes no abbreviation
    ("transformers", "tensor_parallel_size"),  # sizes not known for this engine
    ("command", "tp_size"),
])
def test_what_an_engine_does_not_take_as_a_size_is_not_counted(engine, key):
    assert rp.instance_fit(instance(engine=engine, nccl_port=20000), variant(engine, {key: 8})) == []


def test_the_sizes_multiply_and_the_message_names_them():
    args = {"tp_size": 2, "pp_size": 2, "dp_size": 2}
    assert rp.instance_fit(instance(range(8), nccl_port=20000), variant("sglang", args)) == []
    assert rp.instance_fit(instance([4, 6, 5], nccl_port=20000), variant("sglang", args)) == [
        "sglang needs 8 GPUs (tp_size 2 x pp_size 2 x dp_size 2), instance qwen.r0 has 3 (GPUs 4,5,6)"]


def test_sglang_dp_attention_runs_dp_inside_the_tp_group():
    args = {"tp_size": 2, "dp_size": 2, "enable_dp_attention": True}
    assert rp.instance_fit(instance(nccl_port=20000), variant("sglang", args)) == []
    args["enable_dp_attention"] = False
    assert rp.instance_fit(instance(nccl_port=20000), variant("sglang", args)) == [
        "sglang needs 4 GPUs (tp_size 2 x dp_size 2), instance qwen.r0 has 2 (GPUs 0,1)"]


def test_vllm_counts_its_local_data_parallel_ranks():
    two = instance(engine="vllm")
    assert rp.instance_fit(two, variant("vllm", {"tp": 2, "dp": 4, "data_parallel_size_local": 1})) == []
    assert rp.instance_fit(two, variant("vllm", {"tp": 2, "dp": 4, "-dpl": 2})) == [
        "vllm needs 4 GPUs (tp 2 x -dpl 2), instance qwen.r0 has 2 (GPUs 0,1)"]
    assert rp.instance_fit(two, variant("vllm", {"tp": 2, "dp": 4, "data_parallel_rank": 0})) == []
    assert rp.instance_fit(two, variant("vllm", {"tp": 2, "dp": 4, "data_parallel_external_lb": True})) == []


def test_a_size_that_is_not_a_positive_integer_or_set_twice_differently_is_a_problem():
    assert rp.instance_fit(instance(nccl_port=20000), variant("sglang", {"tp_size": "two"})) == [
        "engine_args tp_size must be a positive integer, got 'two'"]
    assert rp.instance_fit(instance(nccl_port=20000), variant("sglang", {"tp_size": 0})) == [
        "engine_args tp_size must be a positive integer, got 0"]
    assert rp.instance_fit(instance(nccl_port=20000), variant("sglang", {"tp_size": 1, "tensor-parallel-size": 2})) == [
        "engine_args set one size twice, differently: tp_size 1 and tensor-parallel-size 2"]
    assert rp.instance_fit(instance(nccl_port=20000), variant("sglang", {"tp_size": 2, "--tp": "2"})) == []


def test_sizes_left_out_count_as_one():
    assert rp.instance_fit(instance([0], nccl_port=20000), variant("sglang", {"tp_size": None, "dp": False})) == []


def test_the_implicit_instance_is_never_short_of_gpus_nor_checked_for_env_or_nccl():
    only = plan(None)["instances"][0]
    spec = variant("sglang", {"tp_size": 8, "nccl_port": 5000}, {"CUDA_VISIBLE_DEVICES": "0"})
    assert rp.instance_fit(only, spec) == []
    assert rp.instance_engine_args(only, spec) == {"tp_size": 8, "nccl_port": 5000}


def test_a_variant_env_that_sets_other_devices_is_a_problem_naming_both_values():
    spec = variant("vllm", env={"CUDA_VISIBLE_DEVICES": "0,1,2,3", "CUDA_DEVICE_ORDER": "FASTEST_FIRST", "A": "1"})
    assert rp.instance_fit(instance([2, 3], engine="vllm"), spec) == [
        "variant fast sets env CUDA_DEVICE_ORDER=FASTEST_FIRST, but instance qwen.r0 has CUDA_DEVICE_ORDER=PCI_BUS_ID "
        "(drop it from the variant's env: the instance sets it)",
        "variant fast sets env CUDA_VISIBLE_DEVICES=0,1,2,3, but instance qwen.r0 has CUDA_VISIBLE_DEVICES=2,3 "
        "(drop it from the variant's env: the instance sets it)"]


def test_a_variant_env_that_sets_the_same_devices_is_fine():
    spec = variant("vllm", env={"CUDA_VISIBLE_DEVICES": "2, 3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert rp.instance_fit(instance([2, 3], engine="vllm"), spec) == []


def test_an_sglang_variant_with_another_nccl_port_is_a_problem_naming_both():
    assert rp.instance_fit(instance(), variant("sglang", {"nccl-port": 5000})) == [
        "variant fast sets nccl_port 5000, but instance qwen.r0's is 40000: on a host with serving_instances each "
        "instance has its own (drop nccl_port from the variant's engine_args)"]
    assert rp.instance_fit(instance(), variant("sglang", {"--nccl-port": "40000"})) == []


def test_an_sglang_variant_on_an_instance_without_nccl_port_is_a_problem():
    problems = rp.instance_fit(instance(engine="vllm"), variant("sglang"))
    assert len(problems) == 1
    assert problems[0].startswith("instance qwen.r0 has no nccl_port, and SGLang would pick a free port at start")
    assert "serving_engine: sglang" in problems[0]
    shared = rp.instance_fit(instance(engine="vllm"), variant("sglang", {"nccl_port": 5000}))
    assert "the variant's nccl_port 5000 would be every instance's" in shared[0]


def test_other_engines_have_no_nccl_port_to_check():
    assert rp.instance_fit(instance(engine=None), variant("vllm", {"nccl_port": 5000})) == []


def test_a_bad_nccl_port_in_engine_args_is_a_problem():
    assert rp.instance_fit(instance(), variant("sglang", {"nccl_port": "x"}))[0] == (
        "engine_args nccl_port must be a port, 1-65535, got 'x'")


@pytest.mark.parametrize("args", [("not an instance", variant()), (instance(), ["not", "a", "variant"]),
                                  (instance(), dict(variant(), engine_args=["--tp", "2"]))])
def test_fit_refuses_what_is_not_an_instance_or_a_variant(args):
    with pytest.raises(rp.PlanError, match="must be"):
        rp.instance_fit(*args)
    with pytest.raises(rp.PlanError, match="must be"):
        rp.instance_engine_args(*args)


# ---- the engine_args of an instance ---------------------------------------------------------------

def test_sglang_engine_args_get_the_instance_nccl_port():
    spec = variant("sglang", {"tp_size": 2, "mem_fraction_static": 0.8})
    assert rp.instance_engine_args(instance(), spec) == {"tp_size": 2, "mem_fraction_static": 0.8, "nccl_port": 40000}
    assert spec["engine_args"] == {"tp_size": 2, "mem_fraction_static": 0.8}


def test_a_variant_nccl_port_is_left_as_it_is():
    assert rp.instance_engine_args(instance(), variant("sglang", {"--nccl-port": 5000})) == {"--nccl-port": 5000}


def test_a_variant_nccl_port_left_out_is_replaced_by_the_instance_one():
    assert rp.instance_engine_args(instance(), variant("sglang", {"nccl_port": None})) == {"nccl_port": 40000}


@pytest.mark.parametrize("engine", ["vllm", "trtllm", "transformers", "command"])
def test_other_engines_get_their_engine_args_unchanged(engine):
    spec = variant(engine, {"tp": 2, "extra": {"a": [1]}})
    out = rp.instance_engine_args(instance(nccl_port=20000), spec)
    assert out == {"tp": 2, "extra": {"a": [1]}}
    out["extra"]["a"].append(2)
    assert spec["engine_args"] == {"tp": 2, "extra": {"a": [1]}}


def test_no_engine_args_are_an_empty_dict():
    assert rp.instance_engine_args(instance(engine=None), dict(variant("vllm"), engine_args=None)) == {}


# ---- a variant as inference_server's spec -----------------------------------------------------------

def test_the_spec_of_the_hosts_one_server_is_the_variant_as_the_module_takes_it():
    resolved = dict(variant("vllm", {"tp": 2}, {"A": "1"}), description="d", extends="base", chain=["base", "fast"],
                    drain_metric="my:gauge", ready_timeout=90, host_memory_mib=4096, served_model_name="", python=None)
    out = rp.server_spec(resolved)
    assert out == {"name": "fast", "engine": "vllm", "model": "m", "engine_args": {"tp": 2}, "env": {"A": "1"},
                   "ready_timeout": 90, "host_memory_mib": 4096, "flag_check": True}
    assert set(out) <= set(_instance_args.VARIANT_SPEC)  # every key one the module's spec takes
    assert rp.SERVER_SPEC_KEYS == tuple(_instance_args.VARIANT_SPEC)  # written out on the controller side, the same
    out["engine_args"]["tp"] = 4
    assert resolved["engine_args"] == {"tp": 2}  # a new dict
    assert rp.server_spec(resolved, {}) == rp.server_spec(resolved, None) == rp.server_spec(resolved)
    assert rp.server_spec(dict(resolved, flag_check=False))["flag_check"] is False
    command = rp.server_spec(dict(variant("command"), command=["/bin/x", "{port}"]))
    assert command["command"] == ["/bin/x", "{port}"]


def test_the_spec_of_an_instance_lays_its_env_and_nccl_port_over_the_variant():
    spec = variant("sglang", {"tp_size": 2}, {"A": "1", "CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    out = rp.server_spec(spec, instance([2, 3]))
    assert out["engine_args"] == {"tp_size": 2, "nccl_port": 40000}
    assert out["env"] == {"A": "1", "CUDA_VISIBLE_DEVICES": "2,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert spec["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"


@pytest.mark.parametrize("args", [(variant(), "r0"), (["not", "a", "variant"], instance()),
                                  (dict(variant(), engine_args=["--tp", "2"]), instance())])
def test_the_spec_refuses_what_is_not_a_variant_or_an_instance(args):
    with pytest.raises(rp.PlanError, match="must be"):
        rp.server_spec(*args)


def test_drain_metric_is_the_variants_own_else_its_engines_gauge():
    assert rp.drain_metric({"engine": "sglang"}) == "sglang:num_running_reqs"
    assert rp.drain_metric({"engine": "vllm"}) == "vllm:num_requests_running"
    assert rp.drain_metric({"engine": "vllm", "drain_metric": "my:gauge"}) == "my:gauge"
    assert rp.drain_metric({"engine": "command"}) == ""
    assert rp.drain_metric({"engine": "transformers"}) == ""
    assert rp.drain_metric(None) == ""


def test_hook_argv_replaces_each_placeholder_as_a_plain_string():
    inst = {"instance": "r1", "name": "qwen.r1", "port": 30001}
    argv = ["lbctl", "--id={instance}", "{url}", "{host}:{port}", "{0}", "$(id);{port}"]
    assert rp.hook_argv(argv, inst, "http://10.0.0.5:30001", "10.0.0.5") == [
        "lbctl", "--id=r1", "http://10.0.0.5:30001", "10.0.0.5:30001", "{0}", "$(id);30001"]
    # without a host, {host} is the one the router knows the instance by
    assert rp.hook_argv(["{host}:{port}"], inst, "http://gpu7:30001") == ["gpu7:30001"]


@pytest.mark.parametrize("argv", [[], "lbctl disable", None, [["nested"]]])
def test_hook_argv_refuses_what_is_not_an_argv(argv):
    with pytest.raises(rp.PlanError, match="non-empty list of strings"):
        rp.hook_argv(argv, {"instance": "r0", "port": 1}, "http://h:1")


def test_the_nccl_port_is_derived_when_the_hosts_engine_is_unknown_but_not_for_vllm():
    plan = rp.instances_plan({"r0": {"gpus": [0], "port": 8000}}, "s", engine=None)
    assert plan["instances"][0]["nccl_port"] == 18000
    plan = rp.instances_plan({"r0": {"gpus": [0], "port": 60000}}, "s", engine=None)
    assert plan["instances"][0]["nccl_port"] is None  # not derivable, and the host may not run SGLang at all
    plan = rp.instances_plan({"r0": {"gpus": [0], "port": 8000}}, "s", engine="vllm")
    assert plan["instances"][0]["nccl_port"] is None


def test_the_router_keeps_min_available_other_healthy_workers_on_a_host_of_two_or_more():
    two = {"r0": {"gpus": [0], "port": 30000}, "r1": {"gpus": [1], "port": 30001}}
    assert plan(two, min_available=1)["keep_healthy"] == 1
    assert plan(dict(two, r2={"gpus": [2], "port": 30002}), min_available=2)["keep_healthy"] == 2
    assert plan({"r0": {"gpus": [0], "port": 30000}}, min_available=1)["keep_healthy"] == 0  # one switches as ever


# ---- which instances a run takes through the switch ------------------------------------------

KEEP_RESULT = {"changed": False, "outcome": "unchanged", "healthy": True, "fingerprint": "fp-keep",
               "current": {"variant": "v2", "fingerprint": "fp-keep"}}


def switching(variant="v1", fingerprint="fp-new"):
    return {"changed": True, "outcome": "switched", "healthy": None, "fingerprint": fingerprint,
            "current": {"variant": variant, "fingerprint": "fp-old"}}


def four(selected="all", **kw):
    inst = dict(("r%d" % i, {"gpus": [2 * i, 2 * i + 1], "port": 9000 + i}) for i in range(4))
    return rp.instances_plan(inst, "rep", selected, **kw)


@pytest.mark.parametrize("result, action", [
    (KEEP_RESULT, "keep"),
    (switching(), "switch"),
    ({"changed": True, "outcome": "relabelled", "healthy": True}, "relabel"),
    ({"changed": True, "outcome": "unchanged", "healthy": True}, "keep"),  # a state file rebuilt is no switch
    ({"changed": False, "outcome": "unchanged", "healthy": False}, "switch"),  # recorded, but no longer answers
    ({"changed": "true", "outcome": "started"}, "switch"),
    (None, "keep"),
])
def test_converge_action_reads_the_plan_as_the_role_does(result, action):
    assert rp.converge_action(result) == action


@pytest.mark.parametrize("result, found, planning, words", [
    ({"outcome": "relabelled", "healthy": True, "changed": True}, {"variant": "fast"}, False,
     "serves it already as fast: relabelled fast -> nextn, nothing restarts"),
    ({"outcome": "relabelled", "healthy": True}, {"variant": "fast"}, True,
     "serves it already as fast: relabelling fast -> nextn, nothing restarts"),
    ({"outcome": "unchanged", "healthy": True, "changed": False}, {"variant": "nextn"}, False,
     "serves it already, healthy: nothing to change"),
    ({"outcome": "unchanged", "healthy": True, "changed": True, "recovered": "state file was missing: rebuilt from pid 7"},
     {"variant": "nextn"}, False,
     "serves it already, healthy: nothing to change (state file was missing: rebuilt from pid 7, and written again)"),
    ({"outcome": "ready", "changed": True, "reason": "the configuration changed"}, {"variant": "fast"}, False,
     "switched from fast: the configuration changed"),
    ({"outcome": None, "changed": False, "reason": "the configuration changed"}, {"variant": "fast"}, True,
     "switching from fast: the configuration changed"),
    ({"outcome": "ready", "changed": True, "reason": "what runs cannot be confirmed"}, {"variant": None, "pid": 4242},
     False, "switched from pid 4242, variant unknown: what runs cannot be confirmed"),
    ({"outcome": "ready", "changed": True, "reason": "nothing runs"}, {}, False,
     "started, nothing recorded before: nothing runs"),
    ({"outcome": None, "reason": "nothing runs"}, None, True, "starting, nothing recorded before: nothing runs"),
    ({"outcome": None, "reason": "nothing runs"}, None, "false", "started, nothing recorded before: nothing runs"),
])
def test_converge_words_say_what_the_converge_call_did_or_would_do(result, found, planning, words):
    assert rp.converge_words(result, found, "nextn", planning) == words


def test_instances_that_keep_their_server_stay_in_the_router():
    plans = {"r0": {"result": KEEP_RESULT}, "r1": {"result": switching()}, "r2": {"result": KEEP_RESULT},
             "r3": {"result": switching("v1", "fp-r3"), "bench": True}}
    out = rp.switch_plan(four(), plans)
    assert out["actions"] == {"r0": "keep", "r1": "switch", "r2": "keep", "r3": "switch"}
    assert out["switching"] == ["r1", "r3"] and out["batches"] == [["r1"], ["r3"]]
    assert out["first"] == ["r1", "r3"] and out["rest"] == [] and out["canary"] is None
    assert out["switches"] is True and out["replicated"] is True
    assert out["pick"] == "r1" and out["pick_entry"]["port"] == 9001 and out["result"]["fingerprint"] == "fp-new"


def test_a_run_that_changes_nothing_takes_nothing_out_unless_it_measures_everything():
    plans = dict(("r%d" % i, {"result": KEEP_RESULT, "bench": i == 2}) for i in range(4))
    out = rp.switch_plan(four(), plans)
    assert out["switching"] == [] and out["batches"] == [] and out["switches"] is False
    assert out["pick"] == "r0" and out["first"] == [] and out["rest"] == []
    measured = rp.switch_plan(four(), plans, bench_always=True)
    assert measured["switching"] == ["r0", "r1", "r2", "r3"] and measured["batches"] == [["r0"], ["r1"], ["r2"], ["r3"]]
    assert measured["switches"] is False


def test_the_canary_is_the_first_instance_that_switches_and_goes_alone_before_the_gate():
    plans = {"r0": {"result": KEEP_RESULT}, "r1": {"result": switching(), "bench": True},
             "r2": {"result": switching()}, "r3": {"result": {"outcome": "relabelled", "changed": True}}}
    out = rp.switch_plan(four(max_unavailable=2), plans, canary=True)
    assert out["canary"] == "r1" and out["first"] == ["r1"] and out["rest"] == ["r2", "r3"]
    assert out["pick"] == "r1" and out["bench"] is True
    assert out["batches"] == [["r1", "r2"], ["r3"]]  # max_unavailable 2 (min_available 1 leaves room for 3)


def test_a_relabel_alone_is_no_canary():
    plans = dict(("r%d" % i, {"result": KEEP_RESULT}) for i in range(4))
    plans["r2"] = {"result": {"outcome": "relabelled", "changed": True}}
    out = rp.switch_plan(four(), plans, canary=True)
    assert out["canary"] is None and out["first"] == ["r2"] and out["rest"] == [] and out["pick"] == "r2"


def test_a_pick_fixed_earlier_stands_for_the_host_when_it_is_selected():
    plans = dict(("r%d" % i, {"result": KEEP_RESULT}) for i in range(4))
    assert rp.switch_plan(four(), plans, pick="r3")["pick"] == "r3"
    assert rp.switch_plan(four("r0,r1"), dict((k, plans[k]) for k in ("r0", "r1")), pick="r3")["pick"] == "r0"


def test_only_the_selection_is_planned_and_switched():
    out = rp.switch_plan(four("r2"), {"r2": {"result": switching()}}, canary=True)
    assert out["actions"] == {"r2": "switch"} and out["first"] == ["r2"] and out["rest"] == []


def test_a_selected_instance_without_a_plan_is_refused():
    with pytest.raises(rp.PlanError, match=r"no plan for instance\(s\) r1, r3"):
        rp.switch_plan(four(), {"r0": {"result": KEEP_RESULT}, "r2": {"result": KEEP_RESULT}})


@pytest.mark.parametrize("plan, plans, why", [
    ({}, {}, "needs instances_plan's result"),
    (None, {}, "needs instances_plan's result"),
    ("plan", {}, "needs instances_plan's result"),
])
def test_switch_plan_refuses_what_is_not_a_plan(plan, plans, why):
    with pytest.raises(rp.PlanError, match=why):
        rp.switch_plan(plan, plans)


def test_switch_plan_refuses_plans_that_are_not_a_dict():
    with pytest.raises(rp.PlanError, match="must be a dict of instance"):
        rp.switch_plan(four(), ["r0"])


# ---- the router before the instances, and router membership as converged state (issue 34) ----------------

@pytest.mark.parametrize("router, drain_timeout, why", [
    ({"type": "sglang", "url": "ftp://x"}, None, "serving_router.url: 'ftp://x' is not an http(s) URL"),
    ({"url": "router:30080"}, None, "serving_router.url: 'router:30080' is not an http(s) URL"),
    ({"type": "sglang"}, None, "serving_router.url: type sglang needs the router's URL"),
    ({"type": "nginx", "url": "http://r:1"}, None, "serving_router.type: 'nginx' is not a router type; allowed: "
                                                   "sglang, smg, vllm, none, auto"),
    ({"type": "vllm", "url": ["http://r:1", "ftp://y"]}, None, "serving_router.url: 'ftp://y' is not an http(s) URL"),
    ({"type": "smg", "url": []}, None, "serving_router.url: type smg needs the router's URL"),
    ({"type": "command", "remove": [], "add": ["lb", "add"]}, None, "serving_router.remove: type command needs"),
    ({"type": "command", "remove": ["lb"], "add": "lb add"}, None, "serving_router.add: type command needs"),
    ({"url": "http://r:1", "api_key": 1234}, None, "serving_router.api_key must be a string"),
    ({"url": "http://r:1", "worker_host": "http://x/"}, None, "serving_router.worker_host: 'http://x/' is not"),
    ("http://r:1", None, "serving_router must be a dict"),
    ({"url": "http://r:1"}, -1, "serving_drain_timeout: -1 must be a number of seconds above 0"),
    ({"url": "http://r:1"}, 0, "serving_drain_timeout: 0 must be a number of seconds above 0"),
    ({"url": "http://r:1"}, "soon", "serving_drain_timeout: soon must be"),
    (None, True, "serving_drain_timeout: True must be"),
])
def test_router_settings_are_refused_in_the_inventorys_words(router, drain_timeout, why):
    problems = rp.router_problems(router, drain_timeout)
    assert len(problems) == 1 and problems[0].startswith(why), problems
    refused(FOUR, why, router=router, drain_timeout=drain_timeout)


def test_a_router_key_is_never_echoed():
    assert "s3cret" not in " ".join(rp.router_problems({"url": "ftp://x", "api_key": ["s3cret"]}))


@pytest.mark.parametrize("router, drain_timeout", [
    (None, None), ({}, None), ({"url": "http://r:30080"}, 60), ({"type": "sglang", "url": "https://r/prefix"}, "0.5"),
    ({"type": "command", "remove": ["lb", "rm", "{url}"], "add": ["lb", "add", "{url}"]}, 1),
    ({"url": "http://r:1", "api_key": "", "worker_host": "10.0.0.5"}, None),
])
def test_good_router_settings_pass(router, drain_timeout):
    assert rp.router_problems(router, drain_timeout) == []
    assert plan(FOUR, router=router, drain_timeout=drain_timeout)["replicated"] is True


def test_the_router_types_are_router_workers_own_and_command():
    from ansible_collections.inferops.serving.plugins.module_utils import _router
    assert rp.ROUTER_TYPES == _router.ROUTER_TYPES + ("command",) == _router.ROLE_ROUTER_TYPES


@pytest.mark.parametrize("router, kind", [
    (None, "sglang"), ({}, "sglang"), ({"url": "http://r:1"}, "sglang"), ({"type": "sglang"}, "sglang"),
    ({"type": "command"}, "none"),
])
def test_router_type_is_what_router_worker_gets(router, kind):
    assert rp.router_type(router) == kind


R0 = {"instance": "r0", "port": 30000, "router": None}


@pytest.mark.parametrize("instance, router, serving_host, address, url", [
    (R0, {}, "", "gpu7", "http://gpu7:30000"),
    (R0, {}, "10.0.0.5", "gpu7", "http://10.0.0.5:30000"),
    (R0, {}, "0.0.0.0", "gpu7", "http://gpu7:30000"),
    (R0, {}, "::", "gpu7", "http://gpu7:30000"),
    (R0, {"worker_host": "10.1.1.1"}, "10.0.0.5", "gpu7", "http://10.1.1.1:30000"),
    (R0, None, "", "fd00::7", "http://[fd00::7]:30000"),
    (dict(R0, router={"worker_url": "http://lb-side:9"}), {"worker_host": "x"}, "", "gpu7", "http://lb-side:9"),
])
def test_the_worker_url_of_an_instance(instance, router, serving_host, address, url):
    assert rp.worker_url(instance, router, serving_host, address) == url


TWO = [dict(R0, selected=True), {"instance": "r1", "port": 30001, "router": None, "selected": True}]


def test_membership_matches_each_instance_as_router_worker_does():
    listing = {"workers": [{"url": "http://LOCALHOST:30000/", "is_healthy": True},
                           {"url": "http://127.0.0.1:30002", "is_healthy": True}], "router_url": "http://127.0.0.1:30080"}
    out = rp.router_membership(listing, TWO, {}, "127.0.0.1", "h")
    assert out == {"r0": {"listed": True, "healthy": True, "worker_url": "http://127.0.0.1:30000",
                          "router_url": "http://127.0.0.1:30080"},
                   "r1": {"listed": False, "healthy": False, "worker_url": "http://127.0.0.1:30001",
                          "router_url": "http://127.0.0.1:30080"}}
    unhealthy = rp.router_membership({"workers": [{"url": "http://127.0.0.1:30001", "is_healthy": False}]}, TWO,
                                     None, "127.0.0.1")
    assert unhealthy["r1"] == {"listed": True, "healthy": False, "worker_url": "http://127.0.0.1:30001", "router_url": None}
    # the URL spelled as given wins over a loopback alias, as in router_worker (module_utils/_router.find_worker)
    both = rp.router_membership({"workers": [{"url": "http://localhost:30001", "is_healthy": True},
                                             {"url": "http://127.0.0.1:30001", "is_healthy": False}]}, TWO, None,
                                "127.0.0.1")
    assert both["r1"] == {"listed": True, "healthy": False, "worker_url": "http://127.0.0.1:30001", "router_url": None}


@pytest.mark.parametrize("listing", [None, {}, {"skipped": True, "changed": False}, "text"])
def test_no_listing_read_is_no_membership(listing):
    assert rp.router_membership(listing, TWO) is None


def test_membership_refuses_instances_that_are_not_a_list():
    with pytest.raises(rp.PlanError, match="instances_plan's instances"):
        rp.router_membership({"workers": []}, {"r0": 1})


@pytest.mark.parametrize("membership, action", [
    (None, "keep"), ({"listed": True, "healthy": True}, "keep"),
    ({"listed": False, "healthy": False}, "add"), ({"listed": True, "healthy": False}, "add"),
])
def test_a_kept_server_its_router_does_not_list_healthy_is_added(membership, action):
    assert rp.converge_action(KEEP_RESULT, membership) == action
    assert rp.converge_action(switching(), membership) == "switch", "a switch puts it back anyway"


def test_a_check_mode_plan_of_a_switch_has_a_null_outcome_and_reports_no_change():
    assert rp.converge_action({"changed": False, "outcome": None, "healthy": None}) == "switch"
    assert rp.converge_action({"changed": False}) == "keep"


def test_instances_not_listed_go_back_into_their_router_and_are_never_taken_out():
    plans = {"r0": {"result": KEEP_RESULT}, "r1": {"result": switching()}, "r2": {"result": KEEP_RESULT},
             "r3": {"result": KEEP_RESULT}}
    membership = {"r0": {"listed": False, "healthy": False}, "r1": {"listed": False, "healthy": False},
                  "r2": {"listed": True, "healthy": False}, "r3": {"listed": True, "healthy": True}}
    out = rp.switch_plan(four(), plans, membership=membership)
    assert out["actions"] == {"r0": "add", "r1": "switch", "r2": "add", "r3": "keep"}
    assert out["adding"] == ["r0", "r2"] and out["switching"] == ["r1"] and out["batches"] == [["r1"]]
    assert out["switches"] is True
    assert out["says"] == ["r0: keep, not in its router: would add it back", "r1: switch",
                           "r2: keep, listed unhealthy: would add it back", "r3: keep"]
    assert out["added"] == {"r0": "r0 serves v2; it was not in its router: added back",
                            "r2": "r2 serves v2; it was listed unhealthy: added back"}


def test_a_converged_host_whose_router_lost_its_list_changes_nothing_but_the_router():
    plans = dict(("r%d" % i, {"result": KEEP_RESULT}) for i in range(4))
    gone = dict(("r%d" % i, {"listed": False, "healthy": False}) for i in range(4))
    out = rp.switch_plan(four(), plans, membership=gone)
    assert out["adding"] == ["r0", "r1", "r2", "r3"] and out["batches"] == [] and out["switches"] is False
    measured = rp.switch_plan(four(), plans, bench_always=True, membership=gone)
    assert measured["adding"] == [] and measured["switching"] == ["r0", "r1", "r2", "r3"], "out and in anyway"
    assert rp.switch_plan(four(), plans)["adding"] == [], "no listing read: nothing to add"


def test_without_a_listing_each_plan_that_kept_its_server_says_its_own_membership():
    """inference_server reads the router inside a plan that keeps the server (its membership): the run reads no
    listing of its own. A plan that switches read none, and none is needed: the switch puts the instance back."""
    def kept(listed, healthy):
        return dict(KEEP_RESULT, membership={"listed": listed, "healthy": healthy, "router_url": "http://rt:30080",
                                             "worker_url": "http://h:3000%d" % listed, "ignored": 1})
    plans = {"r0": {"result": kept(False, False)}, "r1": {"result": switching()}, "r2": {"result": kept(True, False)},
             "r3": {"result": kept(True, True)}}
    assert rp.plans_membership(plans) == {
        "r0": {"listed": False, "healthy": False, "router_url": "http://rt:30080", "worker_url": "http://h:30000"},
        "r2": {"listed": True, "healthy": False, "router_url": "http://rt:30080", "worker_url": "http://h:30001"},
        "r3": {"listed": True, "healthy": True, "router_url": "http://rt:30080", "worker_url": "http://h:30001"}}
    out = rp.switch_plan(four(), plans)
    assert out["actions"] == {"r0": "add", "r1": "switch", "r2": "add", "r3": "keep"}
    assert out["adding"] == ["r0", "r2"] and out["switching"] == ["r1"]
    assert sorted(out["membership"]) == ["r0", "r2", "r3"] and out["membership"]["r3"]["variant"] == "v2"
    given = rp.switch_plan(four(), plans, membership={})
    assert given["adding"] == [] and given["membership"] == {}, "a membership given (even empty) is the one used"
    assert rp.plans_membership({"r0": {"result": KEEP_RESULT}, "r1": None, "r2": {}}) == {}


def test_the_summary_says_each_instances_outcome_in_the_modules_words_and_whether_it_is_listed():
    plans = {"r0": {"result": KEEP_RESULT}, "r1": {"result": switching()}, "r2": {"result": switching()},
             "r3": {"result": KEEP_RESULT}}
    membership = dict((n, {"listed": True, "healthy": True}) for n in ("r1", "r2", "r3"))
    membership["r0"] = {"listed": False, "healthy": False}
    plan = rp.switch_plan(four(), plans, membership=membership)
    results = {"r1": {"outcome": "ready", "variant": "v1", "pid": 7}}
    out = rp.replicas_summary(plan, results, {"r1": True}, None, "h")
    assert out["lines"] == ["h r0: unchanged, serves v2; listed in its router",
                            "h r1: ready, serves v1; listed in its router",
                            "h r2: not switched (a batch before it failed); listed in its router",
                            "h r3: unchanged, serves v2; listed in its router"]
    rolled = rp.replicas_summary(plan, {}, {"r1": True}, {"instance": "r1", "outcome": "rolled_back", "previous": "v2"})
    assert rolled["lines"][1] == "r1: rolled_back: ROLLED BACK: v2 serves again; listed in its router"
    refused = rp.replicas_summary(plan, {}, {}, {"instance": "r1", "outcome": None})
    assert refused["instances"]["r1"] == {"outcome": "nothing_stopped", "words": "nothing was stopped",
                                          "variant": "v1", "listed": True}, "what it served before, still listed"
    lost = rp.replicas_summary(plan, {}, {"r1": False},
                               {"instance": "r1", "outcome": "restore_failed", "outcome_msg": "RESTORE FAILED: nothing serves"})
    assert lost["lines"][1] == "r1: restore_failed: RESTORE FAILED: nothing serves; NOT in its router"
    assert lost["lines"][0] == "r0: unchanged, serves v2; NOT in its router", "a failed run added nothing back"


def test_the_summary_of_a_check_mode_run_says_what_would_switch():
    plan = rp.switch_plan(four("r0"), {"r0": {"result": switching()}})
    out = rp.replicas_summary(plan, {"r0": {"outcome": None, "variant": "v1"}})
    assert out["lines"] == ["r0: would switch to v1; its router was not read"]


FIRST = {"changed": True, "outcome": "loading", "loading": True, "healthy": None, "ready_s": None, "pid": 7}
JOB = {"finished": 1, "healthy": True, "loading": False, "ready_s": 3.5, "resolved": {"digest": "d"}, "pid": 9}


@pytest.mark.parametrize("first, job, plan, wanted", [
    (FIRST, JOB, None, dict(FIRST, healthy=True, loading=False, ready_s=3.5, resolved={"digest": "d"})),
    (FIRST, dict(JOB, finished=0), None, FIRST),
    (FIRST, dict(JOB, failed=True), None, FIRST),
    (FIRST, {"skipped": True}, None, FIRST),
    (dict(FIRST, loading=False), JOB, None, dict(FIRST, loading=False)),
    ({"skipped": True, "changed": False}, None, {"outcome": None, "changed": False}, {"outcome": None, "changed": False}),
    (None, None, {"outcome": "unchanged"}, {"outcome": "unchanged"}),
    (None, None, None, {}),
])
def test_the_converge_result_is_the_first_call_joined_by_the_wait_else_the_plan(first, job, plan, wanted):
    assert rp.converge_result(first, job, plan) == wanted


@pytest.mark.parametrize("mode, switching, enabled, bench, check_mode, wanted", [
    ("auto", True, True, {"concurrency": [1]}, False, True),
    ("auto", False, True, {"concurrency": [1]}, False, False),
    ("always", False, True, {"concurrency": [1]}, False, True),
    ("never", True, True, {"concurrency": [1]}, False, False),
    ("always", True, "false", {"concurrency": [1]}, False, False),
    ("always", True, True, {}, False, False),
    ("always", True, True, {"concurrency": [1]}, True, False),
])
def test_bench_now(mode, switching, enabled, bench, check_mode, wanted):
    assert rp.bench_now(mode, switching, enabled, bench, check_mode) is wanted


def test_the_gpu_check_of_the_server_in_scope():
    host = {"reclaim": True, "whole_host": True, "timeout": 5}
    assert rp.gpu_check_params(None, host) == {"reclaim": True, "timeout": 5}, "whole_host is never passed on"
    assert rp.gpu_check_params({"instance": "r0", "gpu_check": {"gpus": [0, 1]}}, host) == {"gpus": [0, 1]}
    assert rp.gpu_check_params(None, None) == {}


@pytest.mark.parametrize("kind", ["sglang", "smg", "vllm", "auto", "none", "command"])
def test_every_router_type_is_taken(kind):
    router = {"type": kind, "url": ["http://r:1", "http://r:2"]}
    if kind == "command":
        router = {"type": kind, "remove": ["rm", "{url}"], "add": ["add", "{url}"]}
    assert rp.router_problems(router) == []
    assert rp.router_problems({"type": "none"}) == []  # no router API: no URL needed


def test_switch_router_is_inference_server_s_router_option_with_a_command_router_s_hooks_filled_in():
    router = {"type": "smg", "url": "http://10.0.0.5:30000", "api_key": "k"}
    assert rp.switch_router(router, "http://10.0.0.7:30001", 1, "sglang:num_running_reqs", 20) == {
        "type": "smg", "url": ["http://10.0.0.5:30000"], "api_key": "k", "worker_url": "http://10.0.0.7:30001",
        "keep_healthy": 1, "drain_metric": "sglang:num_running_reqs", "drain_timeout": 20.0}
    assert rp.switch_router({"url": ["http://a:1", "http://b:1"]}, "http://w:2") == {
        "type": "sglang", "url": ["http://a:1", "http://b:1"], "worker_url": "http://w:2", "keep_healthy": 0}
    # a command router: its hooks, filled in for the instance, for the module to run inside the unit (no keep_healthy:
    # there is no list to count in)
    hooks = {"type": "command", "remove": ["lb", "rm", "{instance}", "{url}"], "add": ["lb", "add", "{host}:{port}"]}
    instance = {"instance": "r0", "name": "demo.r0", "port": 30001}
    assert rp.switch_router(hooks, "http://10.0.0.7:30001", 1, "", 20, hook_instance=instance) == {
        "type": "command", "worker_url": "http://10.0.0.7:30001", "drain_timeout": 20.0,
        "remove": ["lb", "rm", "r0", "http://10.0.0.7:30001"], "add": ["lb", "add", "10.0.0.7:30001"]}
    with pytest.raises(rp.PlanError, match="must be a non-empty list of strings"):
        rp.switch_router({"type": "command", "remove": "lb rm", "add": ["lb"]}, "http://w:2", hook_instance=instance)
    assert rp.switch_router({}, "http://w:2") == {} and rp.switch_router(None, "http://w:2") == {}
    # a stop's: the gauge per variant, for the host to pick by what its state file records
    gauges = {"a": "sglang:num_running_reqs", "b": "vllm:num_requests_running"}
    assert rp.switch_router({"url": "http://a:1"}, "http://w:2", 0, "", 30, gauges) == {
        "type": "sglang", "url": ["http://a:1"], "worker_url": "http://w:2", "keep_healthy": 0, "drain_timeout": 30.0,
        "drain_metric_by_variant": gauges}
