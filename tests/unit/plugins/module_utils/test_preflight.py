# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the preflight (_preflight): the state and log directories, the launcher, a local model
path, the port (with a real listening socket, and a real process of another instance), the flags the
engine's own --help lists (a fake run and a real cache directory), and check() putting them together."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import types

import pytest

from run_command import run_command

from ansible_collections.inferops.serving.plugins.module_utils import (
    _engines, _marker, _preflight, _procs, _supervisor)

# what runs an engine's --help: coreutils' timeout around it, where there is one
TIMEOUT = [shutil.which("timeout"), "--kill-after=5", str(_preflight.HELP_TIMEOUT)] if shutil.which("timeout") else []


# -- the preflight ----------------------------------------------------------------------------------

def test_dir_problems(tmp_path):
    assert _preflight.dir_problem("state_dir", str(tmp_path / "new" / "dir"), create=True) is None
    assert (tmp_path / "new" / "dir").is_dir() and os.listdir(str(tmp_path / "new" / "dir")) == []
    assert _preflight.dir_problem("log_dir", str(tmp_path / "absent"), create=False) is None
    assert not (tmp_path / "absent").exists()  # check mode looked at the parent
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert "cannot be created" in _preflight.dir_problem("log_dir", str(a_file / "sub"), create=True)
    assert "MiB free (at least 1000000000 MiB needed)" in _preflight.dir_problem(
        "state_dir", str(tmp_path), create=True, min_free_mib=10 ** 9)


def test_launcher_and_model_path(tmp_path):
    adapter = _engines.adapter("transformers")
    assert "does not exist" in _preflight.launcher_problem(adapter, {"executable": str(tmp_path / "nope")})
    assert "is not on PATH" in _preflight.launcher_problem(adapter, {"executable": "no-such-binary-xyz"})
    assert _preflight.launcher_problem(adapter, {"executable": sys.executable}) is None
    assert _preflight.model_problem({"engine": "vllm", "model": "Qwen/Qwen3"}) is None  # a hub id
    assert "does not exist" in _preflight.model_problem({"engine": "vllm", "model": str(tmp_path / "m")})
    assert _preflight.model_problem({"engine": "command", "model": "/not/a/path/either"}) is None


def test_port_problem_names_the_owner_unless_it_is_the_running_server():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        params = {"host": "127.0.0.1", "port": port, "name": "sv"}
        problem = _preflight.port_problem(params, None, False, {})
        assert problem.startswith("port %d on 127.0.0.1 is taken by pid %d (" % (port, os.getpid()))
        assert [p.pid for p in _procs.listeners(port)] == [os.getpid()]
        # the running server's own port: its stop frees it
        assert _preflight.port_problem(params, {"port": port, "host": "127.0.0.1"}, True, {}) is None
        # held by a process of the instance (spared): not a blocker either
        assert _preflight.port_problem(params, None, False, {os.getpid(): 0}) is None
    finally:
        sock.close()
    assert _preflight.port_problem({"host": "127.0.0.1", "port": port, "name": "sv"}, None, False, {}) is None


# -- flags the engine really accepts ------------------------------------------------------------------

SGLANG_0523_HELP = """usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]
  --cuda-graph-max-bs-decode CUDA_GRAPH_MAX_BS_DECODE
  --cuda-graph-max-bs-prefill CUDA_GRAPH_MAX_BS_PREFILL
  --tp-size TP_SIZE, --tensor-parallel-size TP_SIZE
  --speculative-algorithm {EAGLE,EAGLE3,NEXTN,STANDALONE,NGRAM}
  --host HOST  --port PORT  --enable-metrics
"""


def test_judge_flag_as_argparse_and_click_do():
    accepted = set(_preflight._OPTION.findall(SGLANG_0523_HELP))
    assert _preflight.judge_flag("--tp-size", accepted, True) is None
    assert _preflight.judge_flag("--tp", accepted, True) is None  # argparse: a unique prefix
    assert _preflight.judge_flag("--tp", accepted, False).startswith("is not among")  # click: no prefixes
    assert _preflight.judge_flag("--cuda-graph-max-bs", accepted, True) == (
        "is ambiguous (it abbreviates --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill)")
    assert _preflight.judge_flag("--speculative-algoritm", accepted, True) == (
        "is not among the flags its --help lists; nearest: --speculative-algorithm")


def test_flag_problems_run_the_engines_help_once_and_cache_it(tmp_path):
    calls = []

    def run(argv, environ_update=None, expand_user_and_vars=True):
        calls.append((argv, environ_update))
        return 0, SGLANG_0523_HELP, ""

    params = dict(name="t", engine="sglang", model="M", host="127.0.0.1", port=30000, api_key=None,
                  served_model_name=None, python="/opt/sglang/bin/python", env={"SGLANG_X": "1"},
                  engine_args={"cuda_graph_max_bs": 128, "tp_size": 8}, state_dir=str(tmp_path))
    adapter = _engines.adapter("sglang")
    launch = adapter.build(params, "0.5.23")
    problems, how = _preflight.flag_problems(adapter, params, launch, "0.5.23", run)
    assert problems == ["engine sglang 0.5.23 does not accept --cuda-graph-max-bs: it is ambiguous (it abbreviates "
                        "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill) (set flag_check: false in the "
                        "variant if its --help is incomplete)"]
    assert how["checked"] and calls[0][0] == TIMEOUT + ["/opt/sglang/bin/python", "-m", "sglang.launch_server", "--help"]
    assert calls[0][1]["SGLANG_X"] == "1"  # the variant's environment
    again, dummy = _preflight.flag_problems(adapter, params, launch, "0.5.23", run)
    assert again == problems and len(calls) == 1  # cached per launcher and version
    assert _preflight.flag_problems(adapter, dict(params, flag_check=False), launch, "0.5.23", run) == ([], None)
    broken = _preflight.flag_problems(adapter, dict(params, state_dir=str(tmp_path / "x")), launch, "0.5.23",
                                      lambda argv, **kw: (1, "", "ModuleNotFoundError: No module named 'sglang'"))
    assert broken[0] == [] and not broken[1]["checked"] and "No module named 'sglang'" in broken[1]["why"]


def test_vllm_negations_are_taken_though_its_help_hides_them():
    # vllm 0.34.0: `--no-enable-prefix-caching` parses (enable_prefix_caching=False) but --help=all lists only
    # --enable-prefix-caching; a --no- form of a flag it does not have is still refused
    accepted = {"--enable-prefix-caching", "--tensor-parallel-size", "--trust-remote-code"}
    assert _preflight.judge_flag("--no-enable-prefix-caching", accepted, True, negatable=True) is None
    assert _preflight.judge_flag("--no-enable-prefix-caching", accepted, True, negatable=False) is not None
    assert _preflight.judge_flag("--no-such-thing", accepted, True, negatable=True).startswith("is not among")
    assert _preflight.judge_flag("--tp-size", accepted, True, negatable=True).startswith("is not among")


def test_transformers_false_is_said_and_its_own_help_accepts_it(tmp_path):
    # transformers 5.24 cli/serve.py: cb_use_cuda_graph is `bool | None = None` (None leaves the choice to
    # ContinuousBatchingConfig), so false must reach the engine as --no-cb-use-cuda-graph, and typer's
    # --help lists that form itself: no --no- form of a non-boolean may pass
    transformers = shutil.which("transformers", path=os.path.dirname(sys.executable))
    if transformers is None:
        pytest.skip("transformers is not installed beside this Python")
    params = dict(name="t", engine="transformers", model=str(tmp_path), host="127.0.0.1", port=8000,
                  api_key=None, served_model_name=None, executable=transformers, env={},
                  engine_args={"continuous_batching": True, "cb_use_cuda_graph": False, "no_device": True},
                  state_dir=str(tmp_path))
    adapter = _engines.adapter("transformers")
    launch = adapter.build(params)
    assert "--no-cb-use-cuda-graph" in launch.argv and "--cb-use-cuda-graph" not in launch.argv
    problems, how = _preflight.flag_problems(adapter, params, launch, None, run_command)
    assert how["checked"], how
    refused = [p.split(": it ")[0] for p in problems]
    assert refused == ["engine transformers (version unknown) does not accept --no-device"]


# -- directories ------------------------------------------------------------------------------------

def test_a_file_where_a_directory_should_be(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert _preflight.dir_problem("state_dir", str(a_file), create=False) == (
        "state_dir %s is not a directory" % a_file)
    problem = _preflight.dir_problem("state_dir", str(a_file), create=True)
    assert problem.startswith("state_dir %s cannot be created: " % a_file)
    assert a_file.read_text() == "x"


def test_check_mode_judges_the_nearest_existing_parent_and_creates_nothing(tmp_path):
    missing = tmp_path / "a" / "b" / "c"
    assert _preflight.dir_problem("log_dir", str(missing), create=False) is None
    assert os.listdir(str(tmp_path)) == []
    problem = _preflight.dir_problem("log_dir", str(missing), create=False, min_free_mib=10 ** 9)
    assert problem.startswith("log_dir %s has " % tmp_path) and problem.endswith(" (at least 1000000000 MiB needed)")
    assert os.listdir(str(tmp_path)) == []


def test_a_creatable_directory_is_made_and_left_empty(tmp_path):
    target = tmp_path / "state"
    assert _preflight.dir_problem("state_dir", str(target), create=True) is None
    assert target.is_dir() and os.listdir(str(target)) == []  # the write probe was removed
    assert _preflight.dir_problem("state_dir", str(target), create=True) is None  # and again, existing


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits: a 0555 directory is writable for root")
@pytest.mark.parametrize("create", [False, True])
def test_a_read_only_directory_is_not_writable(tmp_path, create):
    target = tmp_path / "ro"
    target.mkdir()
    target.chmod(0o555)
    try:
        problem = _preflight.dir_problem("state_dir", str(target), create=create)
        assert problem.startswith("state_dir %s is not writable" % target)
        assert os.listdir(str(target)) == []
    finally:
        target.chmod(0o755)


@pytest.mark.skipif(os.geteuid() != 0, reason="as root only: root may write a 0555 directory")
def test_root_may_write_a_read_only_directory_and_the_probe_says_so(tmp_path):
    target = tmp_path / "ro"
    target.mkdir()
    target.chmod(0o555)
    try:
        assert os.access(str(target), os.W_OK)  # root: the mode bits do not bind
        assert _preflight.dir_problem("state_dir", str(target), create=False) is None
        assert _preflight.dir_problem("state_dir", str(target), create=True) is None  # a real write succeeded
        assert os.listdir(str(target)) == []
    finally:
        target.chmod(0o755)


# -- the launcher and the model ---------------------------------------------------------------------

def test_a_launcher_that_is_not_executable(tmp_path):
    script = tmp_path / "serve"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    adapter = _engines.adapter("vllm")
    assert _preflight.launcher_problem(adapter, {"executable": str(script)}) == (
        "the engine's launcher %s is not executable" % script)
    script.chmod(0o755)
    assert _preflight.launcher_problem(adapter, {"executable": str(script)}) is None
    assert _preflight.launcher_problem(adapter, {"executable": str(tmp_path)}) == (
        "the engine's launcher %s does not exist" % tmp_path)  # a directory is no launcher


def test_a_bare_launcher_name_is_looked_up_on_path(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "vllm"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    adapter = _engines.adapter("vllm")
    monkeypatch.setenv("PATH", str(bindir))
    assert _preflight.launcher_problem(adapter, {}) is None  # the default executable, vllm, is there
    monkeypatch.setenv("PATH", str(tmp_path))
    assert _preflight.launcher_problem(adapter, {}) == (
        "the engine's launcher 'vllm' is not on PATH (%s); set executable or python" % tmp_path)
    sglang = _engines.adapter("sglang")
    assert "'python3' is not on PATH" in _preflight.launcher_problem(sglang, {})
    assert _preflight.launcher_problem(sglang, {"python": sys.executable}) is None
    command = _engines.adapter("command")
    assert _preflight.launcher_problem(command, {"command": [str(script), "--port", "1"]}) is None
    assert _preflight.launcher_problem(types.SimpleNamespace(launcher=lambda params: None), {}) is None


def test_local_model_paths_must_exist_hub_ids_are_not_checked(tmp_path, monkeypatch):
    (tmp_path / "model").mkdir()
    monkeypatch.chdir(str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _preflight.model_problem({"engine": "vllm", "model": str(tmp_path / "model")}) is None
    assert _preflight.model_problem({"engine": "vllm", "model": "./model"}) is None
    assert _preflight.model_problem({"engine": "vllm", "model": "~/model"}) is None
    assert _preflight.model_problem({"engine": "vllm", "model": "./gone"}) == "the model path ./gone does not exist"
    assert _preflight.model_problem({"engine": "vllm", "model": "~/gone"}) == "the model path ~/gone does not exist"
    assert _preflight.model_problem({"engine": "sglang", "model": "../gone"}) == (
        "the model path ../gone does not exist")
    assert _preflight.model_problem({"engine": "vllm", "model": "gone"}) is None  # a hub id, even if not there
    assert _preflight.model_problem({"engine": "vllm", "model": None}) is None


# -- the port ---------------------------------------------------------------------------------------

LISTENER = ("import socket, time\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n"
            "print(s.getsockname()[1], flush=True); time.sleep(60)")


@pytest.fixture
def other_instance(tmp_path):
    """A real process listening on a free port with instance b's marker; b's state names it, serving 'nextn'."""
    state_dir = tmp_path / "b-state"
    marker = _marker.make("b", str(state_dir))
    env = dict(os.environ, **{_marker.KEY: marker.value()})
    child = subprocess.Popen([sys.executable, "-c", LISTENER], env=env, stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        store = _supervisor.StateStore("b", str(state_dir))
        yield types.SimpleNamespace(pid=child.pid, port=port, store=store, marker=marker,
                                    starttime=_procs.read_proc(child.pid).starttime)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_a_port_held_by_another_live_instance_names_that_instance(other_instance):
    other_instance.store.save({"pid": other_instance.pid, "starttime": other_instance.starttime, "variant": "nextn"})
    params = {"host": "127.0.0.1", "port": other_instance.port, "name": "sv"}
    assert _preflight.port_problem(params, None, False, {}) == (
        "port %d on 127.0.0.1 is taken by instance b (pid %d, variant nextn), which is not instance 'sv'; "
        "choose another port or stop it" % (other_instance.port, other_instance.pid))


def test_a_port_held_by_a_leftover_of_a_dead_instance_names_the_process(other_instance):
    # b's record names a process that is gone: b is not live, its leftover is just a process
    other_instance.store.save({"pid": 999999999, "starttime": 1, "variant": "nextn"})
    params = {"host": "127.0.0.1", "port": other_instance.port, "name": "sv"}
    problem = _preflight.port_problem(params, None, False, {})
    assert problem.startswith("port %d on 127.0.0.1 is taken by pid %d (" % (other_instance.port, other_instance.pid))
    assert "instance b" not in problem
    assert problem.endswith(", which is not instance 'sv'; choose another port or stop it")


def test_another_host_address_is_judged_on_its_own():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        params = {"host": "127.0.0.1", "port": port, "name": "sv"}
        # the running server listens on another address: its stop does not free this one
        assert _preflight.port_problem(params, {"port": port, "host": "127.0.0.2"}, True, {}) is not None
        # the record matches, but nothing runs: the stop frees nothing
        assert _preflight.port_problem(params, {"port": port, "host": "127.0.0.1"}, False, {}) is not None
        # a record without a host is this host's
        assert _preflight.port_problem(params, {"port": port}, True, {}) is None
    finally:
        sock.close()


# -- what the engine's --help lists -----------------------------------------------------------------

HELP = """Usage: serve [OPTIONS] MODEL
│ --device TEXT        where to run                                      │
│ --enable-x / --no-enable-x                                             │
  --port PORT     see also--not-an-option
  --host HOST.    Trailing dots go: --dtype.
"""
HELP_FLAGS = ["--device", "--dtype", "--enable-x", "--host", "--no-enable-x", "--port"]


class FakeRun(object):
    """AnsibleModule.run_command's signature; records each call and answers (rc, out, err)."""

    def __init__(self, rc=0, out=HELP, err=""):
        self.answer = (rc, out, err)
        self.calls = []

    def __call__(self, argv, environ_update=None, expand_user_and_vars=True):
        self.calls.append((list(argv), dict(environ_update or {}), expand_user_and_vars))
        return self.answer


def test_accepted_flags_reads_the_help_once_per_launcher_and_version(tmp_path):
    run = FakeRun()
    cache = tmp_path / "engine-flags"
    flags, why = _preflight.accepted_flags(["serve", "--help"], {"HF_HOME": "/h"}, "5.24", run, str(cache))
    assert (flags, why) == (HELP_FLAGS, None)
    argv, env, expand = run.calls[0]
    assert argv == TIMEOUT + ["serve", "--help"] and expand is False  # a hung --help is killed, never waited on
    assert env == {"HF_HOME": "/h", "COLUMNS": "400", "TERM": "dumb", "NO_COLOR": "1"}  # a wide, plain help
    assert stat.S_IMODE(os.stat(str(cache)).st_mode) == 0o700
    [name] = os.listdir(str(cache))
    record = json.loads((cache / name).read_text())
    assert record == {"format": 3, "argv": ["serve", "--help"], "version": "5.24", "flags": HELP_FLAGS, "values": {},
                      "defaults": _preflight.help_defaults(HELP)}
    assert _preflight.accepted_flags(["serve", "--help"], {"HF_HOME": "/h"}, "5.24", run, str(cache)) == (
        HELP_FLAGS, None)
    assert len(run.calls) == 1  # from the cache
    _preflight.accepted_flags(["serve", "--help"], {"HF_HOME": "/h"}, "5.25", run, str(cache))
    _preflight.accepted_flags(["serve", "--help"], {"HF_HOME": "/other"}, "5.24", run, str(cache))
    assert len(run.calls) == 3 and len(os.listdir(str(cache))) == 3  # another version, another environment


def test_a_changed_launcher_file_is_asked_again(tmp_path):
    launcher = tmp_path / "serve"
    launcher.write_text("#!/bin/sh\n")
    launcher.chmod(0o755)
    run = FakeRun()
    cache = str(tmp_path / "cache")
    _preflight.accepted_flags([str(launcher), "--help"], {}, None, run, cache)
    _preflight.accepted_flags([str(launcher), "--help"], {}, None, run, cache)
    assert len(run.calls) == 1
    launcher.write_text("#!/bin/sh\n# upgraded in place\n")  # another size: another engine
    _preflight.accepted_flags([str(launcher), "--help"], {}, None, run, cache)
    assert len(run.calls) == 2


@pytest.mark.parametrize("content", ["not json", "{\"argv\": []}"])
def test_a_broken_cache_entry_is_read_again_and_rewritten(tmp_path, content):
    run = FakeRun()
    cache = tmp_path / "cache"
    _preflight.accepted_flags(["serve", "--help"], {}, "1", run, str(cache))
    [name] = os.listdir(str(cache))
    (cache / name).write_text(content)
    assert _preflight.accepted_flags(["serve", "--help"], {}, "1", run, str(cache)) == (HELP_FLAGS, None)
    assert len(run.calls) == 2 and json.loads((cache / name).read_text())["flags"] == HELP_FLAGS


def test_check_mode_writes_no_cache(tmp_path):
    run = FakeRun()
    cache = tmp_path / "cache"
    assert _preflight.accepted_flags(["serve", "--help"], {}, "1", run, str(cache), create=False) == (
        HELP_FLAGS, None)
    _preflight.accepted_flags(["serve", "--help"], {}, "1", run, str(cache), create=False)
    assert len(run.calls) == 2 and not cache.exists()


@pytest.mark.parametrize("answer, why", [
    ((1, "", "ModuleNotFoundError: No module named 'vllm'"),
     "serve --help exited 1 listing 0 flags: ModuleNotFoundError: No module named 'vllm'"),
    ((0, "usage: serve [--port P]\n  --host H\n", ""), "serve --help exited 0 listing 2 flags: usage: serve"),
    ((2, HELP, "Error:   bad\n\n  option"), "serve --help exited 2 listing 6 flags: Error: bad option Usage: serve"),
])
def test_a_help_that_cannot_be_read_says_why_and_caches_nothing(tmp_path, answer, why):
    cache = tmp_path / "cache"
    flags, problem = _preflight.accepted_flags(["serve", "--help"], {}, "1", FakeRun(*answer), str(cache))
    assert flags is None and problem.startswith(why)
    assert not cache.exists()


def test_the_reason_keeps_the_last_300_characters():
    out = "--a --b " + "x" * 1000 + " THE END"
    dummy, why = _preflight.accepted_flags(["serve", "--help"], {}, "1", FakeRun(1, out, ""), "/nonexistent/cache")
    assert why.startswith("serve --help exited 1 listing 2 flags: ") and why.endswith("x THE END")
    assert len(why) == len("serve --help exited 1 listing 2 flags: ") + 300


# -- judging one flag -------------------------------------------------------------------------------

def test_judge_flag_exact_short_and_unknown():
    accepted = {"--port", "--host", "--tensor-parallel-size"}
    assert _preflight.judge_flag("--port", accepted, False) is None
    assert _preflight.judge_flag("-p", accepted, False) is None  # only long options are judged
    assert _preflight.judge_flag("--zzzzzzzz", accepted, True) == "is not among the flags its --help lists"
    assert _preflight.judge_flag("--prot", accepted, False).startswith(
        "is not among the flags its --help lists; nearest: --port")


def test_judge_flag_names_the_engines_own_spelling_first():
    accepted = {"--port", "--host", "--tensor-parallel-size", "--tp"}
    verdict = _preflight.judge_flag("--tp-size", accepted, False, spelled="--tensor-parallel-size")
    assert verdict.startswith("is not among the flags its --help lists; nearest: --tensor-parallel-size")
    assert _preflight.judge_flag("--tp-size", accepted, False, spelled="--not-listed") == (
        "is not among the flags its --help lists; nearest: --tp")


def test_a_hidden_negation_may_itself_be_abbreviated_where_the_parser_allows_it():
    accepted = {"--enable-prefix-caching", "--enable-chunked-prefill"}
    assert _preflight.judge_flag("--no-enable-prefix", accepted, True, negatable=True) is None
    assert _preflight.judge_flag("--no-enable", accepted, True, negatable=True).startswith("is not among")
    assert _preflight.judge_flag("--no-enable-prefix", accepted, False, negatable=True).startswith("is not among")


# -- flag_problems and check ------------------------------------------------------------------------

def _sglang(tmp_path, **kw):
    params = dict(name="t", engine="sglang", model="M", host="127.0.0.1", port=30000, api_key=None,
                  served_model_name=None, python=sys.executable, env={}, engine_args={"tp_size": 8},
                  state_dir=str(tmp_path / "state"), log_dir=str(tmp_path / "log"), gpu_check=None)
    params.update(kw)
    adapter = _engines.adapter("sglang")
    return adapter, params, adapter.build(params, "0.5.23")


def test_flag_problems_not_checked_without_a_help_or_a_run(tmp_path):
    run = FakeRun()
    params = dict(name="t", engine="command", model="m", host="127.0.0.1", port=8000, api_key=None,
                  served_model_name=None, engine_args={}, command=["srv", "--bogus"], env={}, state_dir=str(tmp_path))
    command = _engines.adapter("command")
    assert _preflight.flag_problems(command, params, command.build(params), None, run) == ([], None)
    adapter, params, launch = _sglang(tmp_path)
    assert _preflight.flag_problems(adapter, params, launch, "0.5.23", None) == ([], None)
    assert run.calls == [] and os.listdir(str(tmp_path)) == []


def test_flag_problems_in_check_mode_create_no_cache(tmp_path):
    adapter, params, launch = _sglang(tmp_path)
    run = FakeRun(out="--model-path --host --port --tp-size --tensor-parallel-size")
    problems, how = _preflight.flag_problems(adapter, params, launch, "0.5.23", run, create=False)
    assert problems == [] and how == {"checked": True, "argv": [sys.executable, "-m", "sglang.launch_server", "--help"],
                                      "flags": 5, "values": 0}
    assert not (tmp_path / "state").exists()
    problems, how = _preflight.flag_problems(adapter, params, launch, None, FakeRun(out="--model-path --host --port"))
    assert problems == ["engine sglang (version unknown) does not accept --tp-size: it is not among the flags its "
                        "--help lists (set flag_check: false in the variant if its --help is incomplete)"]
    assert os.listdir(str(tmp_path / "state" / "engine-flags"))  # outside check mode, cached in the state dir


def test_check_puts_every_blocker_together_and_skips_flags_when_the_launcher_is_missing(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        adapter, params, launch = _sglang(tmp_path, python=str(tmp_path / "no-python"), model=str(tmp_path / "m"),
                                          port=port)
        run = FakeRun()
        blockers, survey, flag_check = _preflight.check(params, adapter, launch, "0.5.23", None, False, {}, run=run,
                                                        create=False)
        assert blockers[0] == "the engine's launcher %s does not exist" % (tmp_path / "no-python")
        assert blockers[1] == "the model path %s does not exist" % (tmp_path / "m")
        assert blockers[2].startswith("port %d on 127.0.0.1 is taken by pid %d (" % (port, os.getpid()))
        assert len(blockers) == 3 and survey is None and flag_check is None
        assert run.calls == []  # no launcher: its --help is not asked
        assert os.listdir(str(tmp_path)) == []  # check mode created neither directory
    finally:
        sock.close()
    adapter, params, launch = _sglang(tmp_path)
    blockers, survey, flag_check = _preflight.check(params, adapter, launch, "0.5.23", None, False, {},
                                                    run=FakeRun(out="--model-path --host --port"))
    assert blockers == ["engine sglang 0.5.23 does not accept --tp-size: it is not among the flags its --help lists "
                        "(set flag_check: false in the variant if its --help is incomplete)"]
    assert flag_check["checked"] and (tmp_path / "state").is_dir() and (tmp_path / "log").is_dir()
