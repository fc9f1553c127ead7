# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the inference_server module's parameter validation and its messages, and of its spec (a resolved
variant, whole): main() run in-process in check mode (ansible.module_utils.testing.patch_module_args, its JSON read
from stdout), which starts nothing."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from ansible.module_utils.testing import patch_module_args
from launch_params import params

from ansible_collections.inferops.serving.plugins.module_utils import _idle_check, _instance_args, _router
from ansible_collections.inferops.serving.plugins.modules import inference_server


def test_validation_messages():
    errors = inference_server.validate(params(engine="command", command=None, port=70000, name="bad name",
                                              stop_timeout=0, env={"1X": "a"}))
    text = " ".join(errors)
    assert "engine=command needs command" in text
    assert "port must be between 1 and 65535" in text
    assert "name 'bad name'" in text
    assert "stop_timeout must be a positive" in text
    assert "'1X'" in text
    assert inference_server.validate(params()) == []
    assert "only for engine=command" in " ".join(inference_server.validate(params(command=["x"])))
    check = dict((k, v.get("default")) for k, v in _idle_check.ARGUMENT_SPEC.items())
    text = " ".join(inference_server.validate(params(ready_wait=-1, gpu_check=dict(check, reclaim=True, kill_grace=60))))
    assert "ready_wait must be 0 or more" in text and "gpu_check: kill_grace (60) must be less than timeout" in text
    assert inference_server.validate(params(ready_wait=0, gpu_check=check)) == []


def test_host_memory_mib_must_not_be_negative():
    assert "host_memory_mib must be 0 (not checked) or more MiB, got -1" in " ".join(
        inference_server.validate(params(host_memory_mib=-1)))
    assert inference_server.validate(params(host_memory_mib=4096)) == []


def test_state_and_log_dirs_must_be_absolute():
    text = " ".join(inference_server.validate(params(state_dir="state", log_dir="./log")))
    assert "state_dir must be an absolute path, got 'state'" in text
    assert "log_dir must be an absolute path, got './log'" in text
    assert inference_server.validate(params(state_dir="/srv/x/state", log_dir="/srv/x/log")) == []


def test_a_bad_router_option_is_refused_naming_it():
    text = " ".join(inference_server.validate(params(router={"type": "sglang", "url": ["ftp://x"], "drain_timeout": -1})))
    assert "router: router_url must be an http:// or https:// URL" in text
    assert "router: drain_timeout must be 0 or more seconds, got -1" in text
    assert "router: router_url is required with router_type sglang" in " ".join(
        inference_server.validate(params(router={"type": "sglang"})))
    assert inference_server.validate(params(router={"type": "sglang", "url": ["http://127.0.0.1:30000"]})) == []
    assert inference_server.validate(params(router={"type": "none"})) == []


def plan(capsys, tmp_path, **args):
    """main() in check mode: (rc, the result)."""
    capsys.readouterr()
    args = dict(dict(name="t", port=30000, state_dir=str(tmp_path / "state"), log_dir=str(tmp_path / "log")), **args)
    with patch_module_args(dict(args, _ansible_check_mode=True, _ansible_diff=True)):
        with pytest.raises(SystemExit) as exited:
            inference_server.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


SPEC = dict(name="fast", engine="command", model="M", command=["/bin/sleep", "{port}"], env={"A": "1"},
            ready_timeout=5.0, flag_check=False)


def test_a_spec_is_the_variant_whole_and_overwrites_the_parameters_it_sets(capsys, tmp_path):
    rc, out = plan(capsys, tmp_path, engine="vllm", model="other", variant="label", spec=SPEC)
    assert rc == 0, out
    assert out["argv"] == ["/bin/sleep", "30000"] and out["variant"] == "fast" and out["served_model"] == "M"
    assert out["changed"] is True and out["diff"]["after"]["variant"] == "fast" and out["pid"] is None
    assert not os.path.exists(str(tmp_path / "state" / "t.json"))  # a plan writes nothing
    same, direct = plan(capsys, tmp_path, engine="command", model="M", command=SPEC["command"], env=SPEC["env"],
                        variant="fast", ready_timeout=5.0, flag_check=False)
    assert same == 0 and direct["fingerprint"] == out["fingerprint"] and direct["argv"] == out["argv"]


def test_a_spec_key_left_unset_leaves_the_parameter_as_given():
    given = params(engine="vllm", model="M", ready_timeout=900.0, env={"A": "1"}, variant="v")
    laid = _instance_args.with_variant(dict(given, spec=dict(dict.fromkeys(_instance_args.VARIANT_SPEC), model="N")))
    assert laid == dict(given, spec=laid["spec"], model="N")
    laid = _instance_args.with_variant(dict(given, spec=dict(name="w", ready_timeout=60.0, engine_args={"tp": 2})))
    assert (laid["variant"], laid["ready_timeout"], laid["engine_args"], laid["model"]) == ("w", 60.0, {"tp": 2}, "M")
    assert given["variant"] == "v" and laid["name"] == "t"  # a copy; spec's name is the variant label, not the server's
    assert _instance_args.with_variant(given) == given


def test_engine_and_model_are_needed_from_the_parameters_or_the_spec(capsys, tmp_path):
    rc, out = plan(capsys, tmp_path, spec={"name": "fast", "engine": "vllm"})
    assert rc == 1 and out["outcome"] == "nothing_stopped"
    assert out["msg"] == "state=started needs model, as parameters or as keys of spec"
    rc, out = plan(capsys, tmp_path, state="restarted")
    assert rc == 1 and out["msg"] == "state=restarted needs engine and model, as parameters or as keys of spec"
    rc, out = plan(capsys, tmp_path, model="M", spec={"engine": "nginx"})
    assert rc == 1 and out["msg"].startswith("value of engine must be one of: sglang, vllm, trtllm, transformers, command")
    assert out["msg"].endswith("got: nginx found in spec")  # Ansible's own check of the spec's choices
    assert inference_server.validate(params(state="stopped", engine=None, model=None)) == []


ROUTER = {"type": "sglang", "url": ["http://127.0.0.1:30080"], "worker_url": "http://127.0.0.1:30000"}


def test_a_plan_that_would_switch_reads_what_its_router_lists(capsys, tmp_path, monkeypatch):
    """The plan of an instance that switches reads its router too (issue 34 item 2): the run's one reading of it,
    so the controller reads the router no more."""
    reads = []

    def read(self):
        reads.append((self.params["router_url"], self.params["worker_url"]))
        return {"listed": True, "healthy": False, "router_url": "http://127.0.0.1:30080", "worker_url": self.params["worker_url"]}
    monkeypatch.setattr(_router.Membership, "read", read)
    rc, out = plan(capsys, tmp_path, spec=SPEC, router=ROUTER)
    assert rc == 0, out
    assert out["changed"] is True and out["pid"] is None, "nothing serves: it would switch"
    assert reads == [(["http://127.0.0.1:30080"], "http://127.0.0.1:30000")]
    assert out["membership"] == {"listed": True, "healthy": False, "router_url": "http://127.0.0.1:30080",
                                 "worker_url": "http://127.0.0.1:30000"}
    monkeypatch.undo()  # router type none: the real read, which has no list to read
    rc, out = plan(capsys, tmp_path, spec=SPEC, router={"type": "none"})
    assert rc == 0 and out["listed"] is None and "membership" not in out


def test_a_command_router_s_plan_runs_no_hook_and_its_option_needs_both_hooks(capsys, tmp_path):
    """router type command (a load balancer that argv hooks drive): a plan, a stop's plan included, runs neither
    hook and has no list to read (listed null); the option without its hooks is refused, naming them."""
    ran = tmp_path / "ran"
    hook = [sys.executable, "-c", "import sys; open(sys.argv[1], 'a').write('ran')", str(ran)]
    hooks = {"type": "command", "remove": hook, "add": hook}
    rc, out = plan(capsys, tmp_path, spec=SPEC, router=hooks)
    assert rc == 0 and out["changed"] is True and out["listed"] is None and "membership" not in out, out
    rc, out = stop(capsys, tmp_path, check=True, router=hooks)
    assert rc == 0 and out["changed"] is False and out["listed"] is None, out
    assert not ran.exists(), "a plan runs no hook"
    rc, out = plan(capsys, tmp_path, spec=SPEC, router={"type": "command", "add": hook})
    assert rc == 1 and "router: type command needs remove: the argv of the hook that takes the instance out" in out["msg"]
    assert not ran.exists()


def test_a_plan_whose_router_cannot_be_read_is_refused_naming_the_router(capsys, tmp_path, monkeypatch):
    def read(self):
        raise _router.RouterError("router http://127.0.0.1:30080: GET /workers failed: [Errno 111] Connection refused")
    monkeypatch.setattr(_router.Membership, "read", read)
    rc, out = plan(capsys, tmp_path, spec=SPEC, router=ROUTER)
    assert rc == 1 and out["outcome"] == "nothing_stopped"
    assert out["msg"] == ("nothing was stopped: t would switch to fast, and its router could not be read: router "
                          "http://127.0.0.1:30080: "
                          "GET /workers failed: [Errno 111] Connection refused")
    assert not os.path.exists(str(tmp_path / "state" / "t.json")), "a plan writes no state"


def stop(capsys, tmp_path, check=False, **args):
    """main() with state=stopped (nothing recorded, nothing runs): (rc, the result)."""
    capsys.readouterr()
    args = dict(dict(name="t", port=30000, state="stopped", state_dir=str(tmp_path / "state"),
                     log_dir=str(tmp_path / "log")), **args)
    with patch_module_args(dict(args, _ansible_check_mode=check)):
        with pytest.raises(SystemExit) as exited:
            inference_server.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


def test_a_stop_behind_a_router_takes_the_instance_out_and_drains_it_in_the_same_call(capsys, tmp_path, monkeypatch):
    """stop with the router option (issue 34 items 2 and 4): out of the router and drained under the lock, then
    stopped, one module call whose work a detached process carries out (its journal says each phase); a change of its
    own when the router listed it."""
    def leave(self, on_removed=None):
        on_removed()
        return {"changed": True, "listed": False, "drain": "%s read 0" % self.params["drain_metric"], "drained_s": 0.4,
                "keep_healthy": self.params["keep_healthy"]}
    monkeypatch.setattr(_router.Membership, "leave", leave)
    rc, out = stop(capsys, tmp_path, router=dict(ROUTER, drain_metric="vllm:num_requests_running"))
    assert rc == 0, out
    assert out["changed"] is True and out["outcome"] == "unchanged", "nothing ran; its router listed it"
    assert out["listed"] is False
    # nothing recorded: the option's own gauge; in the detached process, which the journal's phases show
    assert [dict((k, v) for k, v in step.items() if k != "at") for step in out["router_steps"]] == [
        {"step": "leave", "listed": False, "changed": True, "drain": "vllm:num_requests_running read 0", "drained_s": 0.4}]
    # the detached process writes its own journal (which the module waits on) before NAME.switch.json: read the latter
    # once it has caught up (the module may return a moment before that second write)
    deadline = time.monotonic() + 10
    while True:
        journal = json.loads((tmp_path / "state" / "t.switch.json").read_text())
        if journal.get("outcome") or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert journal["what"] == "stop" and journal["outcome"] == "unchanged" and journal["pid"] != os.getpid()
    assert [p for p, _t in journal["phases"]] == ["leaving_router", "draining", "done"]


def test_a_stop_whose_drain_does_not_end_stops_nothing_and_puts_the_instance_back(capsys, tmp_path, monkeypatch):
    def leave(self, on_removed=None):
        on_removed()
        raise _router.RouterError("worker http://127.0.0.1:30000 left router http://127.0.0.1:30080, but it did not "
                                  "drain: sglang:num_running_reqs read 2 after 5.0 s", {"listed": False})
    monkeypatch.setattr(_router.Membership, "leave", leave)
    monkeypatch.setattr(_router.Membership, "join", lambda self: {"changed": True, "listed": True})
    rc, out = stop(capsys, tmp_path, router=ROUTER)
    assert rc == 1 and out["outcome"] == "nothing_stopped" and out["listed"] is True
    assert [(step["step"], step["listed"]) for step in out["router_steps"]] == [("leave", False), ("join", True)]
    assert out["msg"] == ("nothing was stopped: t could not be taken out of its router: worker http://127.0.0.1:30000 "
                          "left router http://127.0.0.1:30080, but it did not drain: sglang:num_running_reqs read 2 "
                          "after 5.0 s; it was put back into its router")


def test_a_stop_plan_behind_a_router_reads_it_and_says_it_would_take_the_instance_out(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(_router.Membership, "read", lambda self: {"listed": True, "healthy": True,
                                                                  "router_url": "http://127.0.0.1:30080",
                                                                  "worker_url": self.params["worker_url"]})
    monkeypatch.setattr(_router.Membership, "leave", lambda self, on_removed=None: pytest.fail("a plan takes nothing out"))
    rc, out = stop(capsys, tmp_path, check=True, router=ROUTER)
    assert rc == 0 and out["changed"] is True and out["listed"] is True and out["membership"]["listed"] is True
    monkeypatch.setattr(_router.Membership, "read", lambda self: {"listed": False, "healthy": False,
                                                                  "router_url": "http://127.0.0.1:30080",
                                                                  "worker_url": self.params["worker_url"]})
    rc, out = stop(capsys, tmp_path, check=True, router=ROUTER)
    assert rc == 0 and out["changed"] is False and out["listed"] is False, "not listed, nothing runs: nothing to do"


def test_the_drain_reads_the_gauge_of_the_variant_the_state_file_records():
    option = dict(ROUTER, drain_metric="engine:default",
                  drain_metric_by_variant={"nextn": "vllm:num_requests_running", "baseline": "sglang:num_running_reqs"})
    assert _router.Membership(option, None, None, serving="nextn").params["drain_metric"] == "vllm:num_requests_running"
    assert _router.Membership(option, None, None, serving="other").params["drain_metric"] == "engine:default"
    assert _router.Membership(option, None, None).params["drain_metric"] == "engine:default"
    text = " ".join(inference_server.validate(params(router=dict(ROUTER, drain_metric_by_variant={"v": "not a name"}))))
    assert "router: drain_metric_by_variant: variant v's gauge must be a Prometheus metric name" in text and "'not a name'" in text
