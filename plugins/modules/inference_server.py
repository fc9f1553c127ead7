#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: inference_server
short_description: Run one inference engine variant as a supervised, fingerprinted, health-gated service
version_added: 0.5.0
description:
  - Launches SGLang, vLLM, TensorRT-LLM, C(transformers serve) or any command that serves the OpenAI
    API, as one instance O(name) per host, with an argv built from data (a list, never a shell string).
  - The configuration's fingerprint (a sha256 of engine, model, argv, environment without secrets, and
    the engine version where it can be read) decides the change. O(state=started) with the same
    fingerprint and a live, healthy server changes nothing; a different fingerprint stops the old
    server (its whole process group or unit) and starts the new one.
  - Readiness is C(GET /health) answering 200 (503 means still loading) and then one real 1-token
    generation (C(POST /v1/completions)) on the served model. If the engine exits before it is ready,
    the switch fails at once with its exit code and the last lines of its log; generations that fail
    with a 5xx other than 503 for about 10 s (3 probes) while C(/health) is 200 fail it too, with the
    response body.
  - Every change of an instance holds its lock (C(STATE_DIR/NAME.lock), an C(flock) released by the kernel
    when its holder dies); a second run waits O(lock_timeout), then fails naming the holder.
  - Before anything is stopped, everything knowable is checked, and any blocker fails the call with
    C(nothing was stopped) and the running server untouched (check mode reports the same RV(blockers)),
    GPU holders that would remain once the old server's processes are gone (protected daemons, holders
    outside the O(gpu_check) reclaim scope, unhealthy GPUs), the new port when another process holds it,
    O(state_dir) and O(log_dir) writable with free space, the launcher and a local model path present,
    the engine arguments.
  - A switch (stop the old server, O(gpu_check), start, wait until ready, and on failure stop the new
    server and restore the one that served before) is one transaction that the host carries out by
    itself, in a process detached from the module that holds the lock until it ends. If the controller
    disappears, the host still ends with the new server ready or the previous one serving again. The
    module waits for it as O(wait) and O(ready_wait) say; a later call with O(switch_id) joins it.
  - Every failure of a start, restart or stop says in RV(outcome) how it ended, exactly one of V(nothing_stopped), V(rolled_back)
    (the previous server serves again) and V(restore_failed) (nothing serves), and its message ends with
    the matching phrase, C(nothing was stopped), C(ROLLED BACK - VARIANT serves again) or
    C(RESTORE FAILED - nothing serves) (written with a colon, not a dash).
  - The C(process) supervisor starts, through C(run_command), a small watchdog that detaches and runs the
    engine in its own session and process group, reaps it when it ends and records its exit code or
    signal and time in C(STATE_DIR/NAME.exit.json), so that every later call says how the engine ended
    (RV(exit), RV(stopped_exit)) and no zombie lingers. PID, PGID, fingerprint, argv, port and start time
    go to O(state_dir), the engine's output to O(log_dir).
  - A stop is orderly. SIGTERM goes to the engine's main process only, so that it ends its workers in its
    own order (SGLang's schedulers release their GPU memory first). After O(stop_grace) the rest of its
    process group gets SIGTERM, SIGKILL goes to whatever is left at O(stop_timeout), then the processes
    that carry the instance's marker (environment variable C(INFEROPS_INSTANCE)) are swept even if they
    left the group. The C(systemd) supervisor writes C(/etc/systemd/system/inferops-NAME.service) with
    C(KillMode=mixed) (SIGTERM to the main process, SIGKILL to the unit at C(TimeoutStopSec)). Nothing
    outside the instance is ever signalled.
  - An instance is its O(name) in its O(state_dir), and the marker says which instance a process belongs
    to. A process that carries another instance's marker is never signalled while that instance is live
    (its state file names a running engine, or a change of it holds its lock), by the stop, the marker
    sweep, the GPU check's reclaim or anything else; a GPU it holds is a blocker that names it, reported before anything is stopped (C(GPU 4 is
    held by instance b (pid N, variant X\)), then what to do). Its leftovers, once
    it has no live record, are reclaimed like any engine's. To run two servers on one host, give each its
    own O(name), O(port), O(gpu_check) C(gpus) and C(CUDA_VISIBLE_DEVICES) in O(env).
author:
  - inferops.serving maintainers (@inferops)
extends_documentation_fragment:
  - inferops.serving.attributes
  - inferops.serving.instance
attributes:
  check_mode:
    support: full
    details: Computes the argv and fingerprint and reports whether the server would be (re)started or stopped; starts and stops nothing.
  diff_mode:
    support: full
    details: Shows the old and new argv and fingerprint.
  idempotent:
    support: full
    details: A second run with the same configuration finds the server healthy and restarts nothing.
requirements:
  - Linux C(/proc) to inspect and signal the engine's processes.
  - The engine itself on the target (C(sglang), C(vllm), C(tensorrt_llm) or C(transformers[serving])).
options:
  state:
    description:
      - V(started) keeps the server running with this configuration. It restarts it when the fingerprint (or a
        credential) changed, and when a server of this configuration that was ready once no longer answers a
        quick probe (C(/health) within the engine's health timeout, 30 s for SGLang, whose /health runs a
        generation, and 10 s for the others; then a 1-token generation within 30 s). One that never became
        ready (left loading by an earlier call) is waited for, not restarted.
      - V(restarted) always stops and starts it. V(stopped) stops it and sweeps its leftovers.
      - V(checked) reads and judges what the instance leaves serving, changing nothing (no lock, no state file
        written; the same in check mode), for the end of a run. Nothing recorded in its state file passes
        (nothing should serve). A recorded engine must be alive (its pid, with its start time) and answer
        C(/health) and a 1-token generation; else the call fails naming the instance, its variant and pid, and
        how the engine ended as its watchdog recorded it (RV(exit)), with the kernel's OOM kill of that pid where
        the kernel log has one (RV(oom), from C(journalctl -k), else C(dmesg)); RV(problem) has an example. An
        instance whose switch is under way (loading) passes, said so in RV(reason). Needs only O(name), O(port)
        and where the state lives.
    type: str
    choices: [started, stopped, restarted, checked]
    default: started
  engine:
    description:
      - V(sglang) runs C(PYTHON -m sglang.launch_server --model-path MODEL ...), V(vllm) C(vllm serve MODEL ...),
        V(trtllm) C(trtllm-serve serve MODEL ...) (its options are spelled C(--snake_case)),
        V(transformers) C(transformers serve MODEL ...), V(command) the O(command) argv as given.
      - Required with O(state=started) and O(state=restarted), here or in O(spec). O(state=stopped) needs only
        O(name), as the state file says what runs.
    type: str
    choices: [sglang, vllm, trtllm, transformers, command]
  model:
    description:
      - Model path or hub id. It is the model requests name unless O(served_model_name) is set.
      - Required with O(state=started) and O(state=restarted), here or in O(spec).
    type: str
  api_key:
    description:
      - API key the server requires, sent as a bearer token by the readiness probe.
      - SGLang reads it only from C(--api-key), so it goes on the argv (redacted in results and state files).
        vLLM gets it in the environment variable C(VLLM_API_KEY), off the argv that C(/proc/PID/cmdline)
        shows every local user.
      - C(transformers serve) and C(trtllm-serve) have no API key; setting it for them is an error.
        For O(engine=command) the key must already appear in O(command) or O(env) (where the program reads
        it), else it is an error; a key is never silently dropped.
      - Never part of the fingerprint; a change is still detected (salted hash in the state file).
    type: str
  served_model_name:
    description: Name the model is served under (C(--served-model-name)). Not supported by C(transformers serve).
    type: str
  engine_args:
    description:
      - Engine flags as a dict. Keys in snake_case or kebab-case become C(--kebab-case) (C(--snake_case) for
        trtllm); a key starting with C(-) is used as written. V(true) gives a bare flag, V(false) or null
        leaves the flag out (for vLLM, whose booleans default to None, V(false) gives C(--no-FLAG)), a list
        gives the flag followed by each item, a dict gives compact JSON with sorted keys.
      - Keys are spelled as each engine takes them; V(tp_size) becomes C(--tensor-parallel-size) for vLLM,
        which has no C(--tp-size).
      - A key that names a core setting (for example C(model_path) or C(tp_size)) overrides it.
      - The order of the keys does not change the fingerprint.
    type: dict
    default: {}
  command:
    description:
      - The full argv for O(engine=command). The program must serve the OpenAI API on O(host):O(port).
      - Each literal C({host}) and C({port}) in an element is replaced by O(host) and O(port) (plain string
        replacement, no shell), so one command serves every replica of a host.
    type: list
    elements: str
  executable:
    description: Binary that launches vllm, trtllm or transformers (default C(vllm), C(trtllm-serve), C(transformers) from PATH).
    type: path
  python:
    description:
      - Interpreter that runs C(-m sglang.launch_server) (default C(python3)); also used to read any engine's version.
      - Without it the version is read with the C(python3) beside O(executable), when there is one.
    type: path
  env:
    description:
      - Environment variables for the engine, added to the module's environment.
      - Names that look like credentials (containing TOKEN, KEY, SECRET, PASSW, CREDENTIAL or AUTH) are left out of the fingerprint.
      - For V(transformers) with a local model directory, C(HF_HUB_OFFLINE=1) is set unless given here.
    type: dict
    default: {}
  variant:
    description: A label carried into the results and the state file (for example V(baseline) or V(nextn)).
    type: str
  spec:
    description:
      - A resolved variant, whole, as the C(inferops.serving.serve_variant) role passes it (its catalog entry after
        C(inferops.serving.resolve_variant), trimmed to these keys by the C(inferops.serving.server_spec) filter).
      - Each key set overwrites the parameter of the same name (C(name) the O(variant) label), as
        C(kubernetes.core.k8s)'s C(resource_definition) overwrites its C(kind), C(name) and C(namespace). A key
        left unset leaves that parameter as given, so O(spec.ready_timeout) (the variant's own) wins over
        O(ready_timeout) (the host's) only where the variant sets one.
      - O(engine) and O(model) are then required with O(state=started) and O(state=restarted) as parameters or
        as keys of O(spec).
    type: dict
    suboptions:
      name:
        description: The variant's name, carried into the results and the state file as O(variant).
        type: str
      engine:
        description: As O(engine).
        type: str
        choices: [sglang, vllm, trtllm, transformers, command]
      model:
        description: As O(model).
        type: str
      served_model_name:
        description: As O(served_model_name).
        type: str
      engine_args:
        description: As O(engine_args).
        type: dict
      command:
        description: As O(command).
        type: list
        elements: str
      executable:
        description: As O(executable).
        type: path
      python:
        description: As O(python).
        type: path
      env:
        description: As O(env).
        type: dict
      ready_timeout:
        description: As O(ready_timeout); the variant's own, for a model that loads longer or quicker than the host's default.
        type: float
      flag_check:
        description: As O(flag_check).
        type: bool
      host_memory_mib:
        description: As O(host_memory_mib).
        type: int
  wait:
    description:
      - Wait until the server is ready (health and a 1-token generation). With V(false), return right after start.
      - A later run with V(true) and the same configuration waits for that server without restarting it.
    type: bool
    default: true
  ready_wait:
    description:
      - At most this many seconds of this call go to waiting for readiness. A server not ready by then keeps
        loading; the module returns RV(loading=true) and RV(healthy=false), and a later call with the same
        configuration resumes the wait without restarting it (failing at once, with the log tail, if the
        engine exited meanwhile). Unset, the call waits up to O(ready_timeout).
      - The C(inferops.serving.inference_server) role uses it to finish a quick start in one call and to
        print a progress line per poll during a long load.
      - Only a live load is resumed. An engine that ended with an exit code or a signal its watchdog recorded
        crashed (the variant's failure); one that ended with no record, its watchdog gone too (a power cut),
        was interrupted, and the call starts the variant afresh, saying so in RV(reason).
    type: float
  gpu_check:
    description:
      - Verify the GPUs clean (as M(inferops.serving.gpu_idle_check) does, with the same parameters)
        after the old server is stopped and before the new one starts, in the same call.
      - Before the stop (and in check mode) the GPUs are read once; a holder that would remain once the
        old server's processes are gone (protected, outside the reclaim scope) or an unhealthy GPU is a
        blocker, so nothing is stopped. RV(gpu_check) then holds that survey (C(would_kill), what the check
        would reclaim; C(unknown_holders), holders this PID namespace cannot see).
      - If the check after the stop fails anyway, the new server is not started and the previous one is
        restored.
      - Unset, no GPU is checked.
    type: dict
    suboptions:
      gpus:
        description: GPU indices to check; all when unset.
        type: list
        elements: int
      backend:
        description: V(nvml) (C(nvidia-ml-py)), V(nvidia_smi) (CSV), or V(auto) (NVML when importable).
        type: str
        choices: [auto, nvml, nvidia_smi]
        default: auto
      max_used_mib:
        description: Used memory per GPU that still counts as clean.
        type: int
        default: 0
      timeout:
        description: Seconds to wait for the GPUs to be clean.
        type: float
        default: 60
      poll_interval:
        description: Seconds between polls.
        type: float
        default: 0.1
      reclaim:
        description: Signal holders in scope (SIGTERM, then SIGKILL after O(gpu_check.kill_grace)).
        type: bool
        default: false
      kill_grace:
        description: Seconds between SIGTERM and SIGKILL of a holder.
        type: float
        default: 10
      reclaim_match:
        description: Regular expressions on a holder's command line that put it in scope (default, the known engines).
        type: list
        elements: str
      reclaim_all:
        description: Every holder that is not protected is in scope.
        type: bool
        default: false
      protected:
        description:
          - Process names never signalled. Unset, the built-in protected list (C(DEFAULT_PROTECTED) in
            C(plugins/module_utils/_procs.py), such as DCGM's C(nv-hostengine)); a list replaces it.
        type: list
        elements: str
      require_gpus:
        description: Fail when no NVIDIA GPU can be seen (V(false) passes on hosts without GPUs).
        type: bool
        default: true
      health:
        description:
          - The health signals read for each GPU of the check, besides the driver's counters (ECC, retired pages, row
            remaps, MIG mode), which are always read. Unset, each signal is read with its default below.
          - A problem found before a stop (this O(gpu_check)) fails the switch with
            C(nothing was stopped), naming the GPU index, its PCI bus id and the signal; one found after the stop starts
            nothing and ends C(restore_failed).
          - See docs/gpu-health.md for the privileges each read needs.
        type: dict
        suboptions:
          xid:
            description:
              - Xid events of this boot in the kernel log (C(journalctl -k), else C(dmesg)), matched to each GPU by PCI
                bus id, since the GPU's last clean check (recorded in O(gpu_check.health.state_dir)) or its last O(gpu_check.health.ack),
                else since boot.
              - V(check) warns when the log cannot be read, naming why; V(require) makes that an error; V(skip) reads no log.
            type: str
            choices: [check, require, skip]
            default: check
          xid_fatal:
            description:
              - The Xid codes that make a GPU unhealthy; any other code in the window warns.
              - Unset, the codes whose immediate action in NVIDIA's Xid catalog is a GPU reset or a reboot (46, 48, 62,
                64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 144-151, 155, 156, 158). 94 (contained ECC,
                restart the application), 63 (a row remap event, while a pending remap blocks on its own) and 92 warn.
            type: list
            elements: int
          nvlink_errors_max:
            description: The NVLink CRC, replay and recovery errors a GPU may gain since its last clean check.
            type: int
            default: 0
          pcie_downgrade:
            description:
              - A PCIe link trained narrower than its maximum width (x8 of x16) V(warn)s, V(fail)s the GPU, or is V(ignore)d.
              - A lower link generation alone is a note, never a problem; an idle GPU trains it down to save power.
            type: str
            choices: [warn, fail, ignore]
            default: warn
          dcgm_diag:
            description:
              - Run C(dcgmi diag -r LEVEL -j) (DCGM 3 or 4) on the GPUs of the check; V(0) runs none. A problem of
                severity config or monitor (persistence mode off) warns; any other blocks its GPU.
              - Level V(1) (seconds) runs before the stop; level V(2) (about 2 minutes, wants idle GPUs) runs after the
                stop, which the run reports as downtime (C(health.dcgm) in the result of the check). M(inferops.serving.gpu_idle_check)
                runs either level.
            type: int
            choices: [0, 1, 2]
            default: 0
          dcgm:
            description: With V(check) a missing C(dcgmi) is a note; with V(require) it is an error.
            type: str
            choices: [check, require]
            default: check
          ack:
            description:
              - GPUs (index, PCI bus id or UUID) an operator has reset or repaired. Their Xid window and NVLink
                baseline move to now, recorded with the time in O(gpu_check.health.state_dir).
              - The roles pass C(-e gpu_health_ack=...).
            type: list
            elements: str
          state_dir:
            description:
              - Where C(gpu-health.json) keeps each GPU's last clean check and acknowledgement.
              - M(inferops.serving.inference_server) uses its O(inferops.serving.inference_server#module:state_dir) when
                unset; M(inferops.serving.gpu_idle_check) then records nothing and its window starts at boot.
            type: path
  flag_check:
    description:
      - Before anything is stopped, run the engine's own help (C(python -m sglang.launch_server --help),
        C(vllm serve --help=all), C(trtllm-serve serve --help), C(transformers serve --help)) with the
        variant's launcher and environment, and refuse a flag it does not list, naming the flag, the engine
        version and the nearest accepted spellings; for SGLang and vLLM (argparse) a unique prefix is taken
        and a prefix of several flags is refused as ambiguous, as their parsers do.
      - Values are checked too, where the help limits them. A value outside the choices the help lists for
        its flag (C(--quantization {awq,fp8,...}), C(--reasoning [on|off|auto])) is refused, naming the flag,
        the value and the choices (C(--quantization modelopt_fp5 is not among the choices its --help lists)),
        as is a value that is not a number where a click help states C(INTEGER) or C(FLOAT). A value the
        parser may take is never refused, so what the help cannot tell passes (a metavar such as
        C(TP_SIZE) or vLLM's C(['auto', 'hf']), a different case where vLLM lowers it, JSON, a bare
        boolean flag).
      - The flags and value choices are cached per launcher and version in C(STATE_DIR/engine-flags/). A help
        that fails or lists almost nothing is reported in RV(flag_check) and checks nothing.
      - Set V(false) for an engine build whose help is incomplete. O(engine=command) is never checked.
    type: bool
    default: true
  metrics_dir:
    description:
      - A directory of node_exporter's textfile collector (such as C(/var/lib/node_exporter/textfile_collector)).
        After each call but in check mode, the instance's series are written to C(inferops_NAME.prom) there (a
        replica's C(sv.a) gives C(inferops_sv_a.prom)), atomically (a temp file in the directory, then a
        rename), mode 0644, with no secret; the directory is created 0755 when missing.
      - "The series (docs/metrics.md): C(inferops_serving_info), C(inferops_serving_up), C(inferops_switch_last_timestamp_seconds),
        C(inferops_switch_duration_seconds), C(inferops_switch_total{outcome}) (counted once per switch, kept in
        C(STATE_DIR/NAME.metrics.json) across runs) and the GPUs' health (C(inferops_gpu_healthy{gpu}) and one
        series per signal). M(inferops.serving.throughput_bench) adds the benchmark's to the same file."
      - With the C(process) supervisor, the engine's watchdog rewrites C(inferops_serving_up) to 0 when the engine
        ends between runs.
      - Unset, nothing is written.
    type: path
  metrics_host:
    description: The C(host) label of the series (the roles pass C(inventory_hostname)); unset, the host name.
    type: str
  host_memory_mib:
    description:
      - The host memory (MiB) this configuration needs once it serves, as measured for the variant (the engine's
        resident memory). Before anything is stopped, a start is refused when it exceeds what the host has
        available, C(MemAvailable) of C(/proc/meminfo) plus the resident memory (C(VmRSS)) of the running
        server's processes that the stop would free, naming needed and available; the call fails with
        C(nothing was stopped) and the running server untouched.
      - Unset or V(0), memory is not checked.
    type: int
  resolved_from:
    description:
      - How RV(resolved), the settings the engine really resolved, is read once the server is ready.
      - V(auto) reads them the engine's own way, SGLang's C(GET /server_info) (falling back to
        C(/get_server_info)), vLLM's C(non-default args) log line with the labels of its C(vllm:cache_config_info)
        gauge on C(/metrics), the defaults in C(transformers serve --help) with the argv over them. For
        O(engine=command) it asks C(GET /server_info) once and keeps the answer only when it is a JSON object (an
        SGLang behind a wrapper); nothing is read for V(trtllm).
      - V(sglang), V(vllm) or V(transformers) reads that engine's way whatever O(engine) is, for a command that
        runs one of them. V(none) reads nothing.
      - A read that fails never fails the call; RV(resolved.error) says why.
    type: str
    choices: [auto, sglang, vllm, transformers, none]
    default: auto
  switch_id:
    description:
      - The RV(switch.id) an earlier call returned with RV(loading=true). The call only waits for that switch
        (up to O(ready_wait)) and reports how it ended, starting and stopping nothing; its outcome stays
        readable after later switches (the last 20 are kept in C(STATE_DIR/NAME.switches/)).
    type: str
  router:
    description:
      - The router this instance serves behind. With it, a switch is one unit under the instance lock that the host
        finishes by itself. Phase C(leaving_router) takes the instance out of the router (refused, nothing stopped,
        when fewer than O(router.keep_healthy) other healthy workers would remain, read again after the removal),
        phase C(draining) waits until it has no request in flight (ending at once if its engine ends), then the switch
        runs, and phase C(joining_router) adds the server that serves (the new one, or the one restored) and waits until
        the router lists it healthy. A drain that times out stops nothing and puts the instance back.
      - A controller that dies mid-way leaves the host to end the unit, the instance listed and serving. A second run
        waits O(lock_timeout) for the lock, then fails naming the holder and its phase.
      - A server kept as it is (it serves this configuration) that its router does not list is added back.
      - With O(state=stopped), the instance leaves its router and is drained, on the gauge that
        O(router.drain_metric_by_variant) gives the variant its state file records, then it is stopped and its GPUs
        checked, all under the lock (O(router.keep_healthy) applies), and carried out by the host as a switch is (its
        journal's phases C(leaving_router), C(draining), C(stopping), C(checking_gpus)), so a controller that dies
        during the drain leaves the host to finish the stop. A router that cannot be read or refuses, or a drain that times
        out, stops nothing, the instance put back in.
      - In check mode (a plan), the router is read whatever the plan finds (RV(membership)), and a router that cannot
        be read fails the plan (C(nothing_stopped)), before anything changes.
      - With O(state=checked), an instance that serves is looked up in its router's listing too (RV(membership));
        a router that cannot be read is said there (its C(error)), and the call does not fail for it.
      - The same settings as M(inferops.serving.router_worker), which does the same steps from the controller.
      - A load balancer without a router API is driven by command hooks (O(router.type=command)). O(router.remove)
        runs where another type's router is asked to take the instance out, O(router.add) where it is asked to put it
        back, each inside the same unit (a remove hook that fails runs the add hook, and nothing is stopped). It has
        no list to read, so RV(listed) is V(null) and O(router.keep_healthy) is not checked.
      - The key is never written to the state, journal, launch or log files.
    type: dict
    suboptions:
      url:
        description: The router's base URL, or a list of them (routers run in pairs). Required unless O(router.type) is V(none) or V(command).
        type: list
        elements: str
      type:
        description:
          - The router's API, as M(inferops.serving.router_worker)'s O(inferops.serving.router_worker#module:router_type).
          - V(command) is a load balancer that O(router.remove) and O(router.add) drive.
        type: str
        choices: [sglang, smg, vllm, none, auto, command]
        default: sglang
      remove:
        description:
          - With O(router.type=command), the argv of the program that takes this instance out of the load balancer,
            run without a shell, its input closed; an exit other than 0, or one after O(router.timeout), fails it.
        type: list
        elements: str
      add:
        description: With O(router.type=command), the argv that puts this instance back, run as O(router.remove) is.
        type: list
        elements: str
      api_key:
        description: The key the router checks (sent as a bearer token), when it runs with one.
        type: str
      worker_url:
        description: The URL under which the router knows this instance; unset, C(http://HOST:PORT) of O(host) and O(port).
        type: str
      timeout:
        description: Seconds the router may take to list or unlist the instance (a command router's hook, to end).
        type: float
        default: 60
      drain_timeout:
        description: Seconds to wait for the drain; at this limit the switch stops nothing and the instance goes back.
        type: float
        default: 60
      drain_metric:
        description:
          - The engine's in-flight gauge on its C(/metrics) (C(sglang:num_running_reqs), C(vllm:num_requests_running)).
          - Unset, the router's own count where it keeps one, else the whole O(router.drain_timeout).
        type: str
      drain_metric_by_variant:
        description:
          - The in-flight gauge per variant (variant name to gauge name), as the
            P(inferops.serving.drain_metric_by_variant#filter) filter gives it from the catalog.
          - The drain reads the gauge of the variant the state file records, else O(router.drain_metric). For a
            stop, whose caller does not know what serves.
        type: dict
      keep_healthy:
        description: Other healthy workers the router must keep, else the instance stays in and nothing is stopped.
        type: int
        default: 0
notes:
  - The state files live in O(state_dir), C(NAME.json) (what serves; while a switch is under way the new
    server with C(loading) and the previous one under C(previous)), C(NAME.launch.json) (mode 0600, the
    parameters of the running and the previous server, secrets included, so the host can restore without
    the controller), C(NAME.switch.json) (the journal of the last switch) and C(NAME.lock).
  - SGLang's API key is on its command line, so local users can read it from C(/proc); results and state
    files show it redacted. vLLM's goes in its environment instead.
  - Flags for a list are written C(--flag a b c) (argparse C(nargs)); for a flag that must repeat, use a key per
    spelling or O(engine=command).
seealso:
  - name: The inferops.serving.inference_server role
    description: Wraps this module with an asynchronous start and a progress loop for long model loads.
    link: https://example.invalid/inferops/serving/blob/main/roles/inference_server/README.md
"""

EXAMPLES = r"""
- name: SGLang, TP 8, NVFP4 with NEXTN speculative decoding
  inferops.serving.inference_server:
    name: qwen
    engine: sglang
    model: /models/Qwen3.5-397B-A17B-NVFP4
    port: 30000
    python: /opt/sglang/bin/python
    variant: nextn
    env:
      SGLANG_ENABLE_SPEC_V2: "True"
    engine_args:
      tp_size: 8
      quantization: modelopt_fp4
      moe_runner_backend: flashinfer_cutlass
      fp4_gemm_backend: flashinfer_cudnn
      speculative_algorithm: NEXTN
      speculative_num_steps: 3
      speculative_eagle_topk: 1
      speculative_num_draft_tokens: 4
  register: server

- name: vLLM with MTP
  inferops.serving.inference_server:
    name: qwen
    engine: vllm
    model: Qwen/Qwen3-Next-80B-A3B-Instruct
    port: 8000
    api_key: "{{ vault_api_key }}"
    engine_args:
      tensor_parallel_size: 4
      speculative_config: {method: mtp, num_speculative_tokens: 2}

- name: A variant of the catalog, resolved on the controller and passed whole
  inferops.serving.inference_server:
    name: qwen
    port: 30000
    spec: "{{ serving_variants | inferops.serving.resolve_variant('nextn') | inferops.serving.server_spec }}"

- name: A tiny model on CPU with transformers serve
  inferops.serving.inference_server:
    name: tiny
    engine: transformers
    model: /srv/models/tiny
    port: 8000
    executable: /opt/venv/bin/transformers
    engine_args: {device: cpu}
    ready_timeout: 300

- name: Stop it and sweep its leftovers
  inferops.serving.inference_server:
    name: qwen
    engine: sglang
    model: /models/Qwen3.5-397B-A17B-NVFP4
    port: 30000
    state: stopped

- name: Stop one replica, out of its router and drained first, under its lock
  inferops.serving.inference_server:
    name: qwen.r0
    port: 30001
    state: stopped
    router:
      url: http://10.0.0.5:30080
      drain_metric_by_variant: {baseline: "sglang:num_running_reqs", nextn: "sglang:num_running_reqs"}
      drain_timeout: 120

- name: At the end of a run, check what the instance leaves serving (changes nothing; fails if it died)
  inferops.serving.inference_server:
    name: qwen
    port: 30000
    state: checked
"""

RETURN = r"""
listed:
  description:
    - With O(router), whether the router lists the instance healthy after the call (V(null) for router types V(none) and V(command)).
  returned: when O(router) is set
  type: bool
  sample: true
membership:
  description:
    - With O(router), what the instance's router listed of it when the call read it, before any add back, in a server
      kept as it is, in every plan (check mode) its own checks do not refuse, and with O(state=checked) in one that
      serves. The serve_variant role takes the plans' readings as the instances' router membership; the controller
      does not read the router.
  returned: >-
    when O(router) is set and the server is kept, the call is a plan, or, with O(state=checked), the server serves;
    for router types other than V(none) and V(command)
  type: dict
  contains:
    listed:
      description: The (first) router lists the instance, healthy or not.
      type: bool
    healthy:
      description: Every router lists it healthy.
      type: bool
    router_url:
      description: The (first) router's URL.
      type: str
    worker_url:
      description: The URL under which the router knows the instance.
      type: str
    error:
      description: O(state=checked) only, when the router could not be read (then C(listed) and C(healthy) are null).
      type: str
  sample: {listed: true, healthy: true, router_url: "http://10.0.0.5:30080", worker_url: "http://10.0.0.7:30001"}
router_steps:
  description:
    - With O(router), each router step of the switch or the stop, as its journal keeps them (C(leave), then C(join)
      for a switch, and for a stop whose drain did not end); a command router's step has C(hook_s), the seconds
      its hook took.
  returned: when a switch or a stop with O(router) ran
  type: list
  elements: dict
  sample: [{step: leave, listed: false, drain: "sglang:num_running_reqs read 0"}, {step: join, listed: true}]
argv:
  description: The engine's argv (the API key redacted).
  returned: always
  type: list
  elements: str
  sample: [python3, -m, sglang.launch_server, --model-path, /models/M, --tp-size, "8", --host, 127.0.0.1, --port, "30000"]
pid:
  description: PID of the engine (its process group leader, or the unit's main PID); null when not running.
  returned: always
  type: int
  sample: 4242
served_model:
  description:
    - The model id the engine serves (and requests must name), as the readiness probe and the benchmark use
      it. O(served_model_name) when set; for trtllm, a local model directory's basename; else O(model).
  returned: always
  type: str
  sample: Qwen3.5-397B-A17B-NVFP4
url:
  description: Base URL of the server.
  returned: always
  type: str
  sample: http://127.0.0.1:30000
fingerprint:
  description: sha256 of the resolved configuration (secrets excluded).
  returned: always
  type: str
  sample: sha256:e42baade89caa3c2bf7ea60ea67f026a743b9b2b01155363286768d76bbb5216
variant:
  description: The O(variant) label.
  returned: always
  type: str
  sample: nextn
ready_s:
  description: Seconds from start to readiness (of the run that started the server); null when not waited.
  returned: always
  type: float
  sample: 14.8
resolved:
  description:
    - The settings the engine really resolved, read when the server became ready (as O(resolved_from) says) and
      kept in the state file, so a call that keeps the server returns them too. Null when nothing was read (the
      server is not ready, V(trtllm), a command without C(/server_info), O(resolved_from=none)).
    - Every value of a field named as a credential (C(api_key), C(admin_api_key), C(hf_token),
      C(ssl_keyfile_password)), at any depth, every O(api_key) or secret O(env) value inside a text, and the
      value after a credential flag in a command line are C(********). An unset one stays null, and a boolean or a
      number (C(allow_credentials=true)) is a setting, not a credential.
    - Bounded in size, scheduler state (C(internal_states)) is left out and a value over 4096 characters of
      JSON is replaced by a note in C(dropped).
  returned: always
  type: dict
  contains:
    engine:
      description: Whose names the settings are in, V(sglang), V(vllm) or V(transformers).
      type: str
    source:
      description: Where they were read (C(GET /server_info)).
      type: str
    settings:
      description: Setting name to the value the engine reports.
      type: dict
    digest:
      description:
        - sha256 of the settings as canonical JSON, first 12 hex digits, without the fields that change with
          every launch (C(random_seed), C(port), C(launch_command), ...). Benchmarks carry it as the label
          C(resolved).
      type: str
      sample: 3f2a9c1e5b7d
    given:
      description: The names the engine says were asked for (vLLM's non-default args, the flags of the argv of C(transformers serve)).
      type: list
      elements: str
    dropped:
      description: The fields left out and why (their size).
      type: dict
    error:
      description: Why the settings (or a part of them) could not be read.
      type: str
  sample: {engine: sglang, source: GET /server_info, digest: 3f2a9c1e5b7d,
           settings: {tp_size: 8, attention_backend: trtllm_mha, api_key: "********", chunked_prefill_size: 16384}}
engine_version:
  description: The engine's version where it could be read, else null.
  returned: always
  type: str
  sample: 0.5.9
supervisor:
  description: The supervisor used, C(process) or C(systemd).
  returned: always
  type: str
  sample: process
log:
  description: Path of the engine log.
  returned: always
  type: str
  sample: /srv/inferops/log/qwen.log
state_file:
  description: Path of the state file.
  returned: always
  type: str
  sample: /srv/inferops/state/qwen.json
switch_timeout_s:
  description:
    - The longest a switch of this call may take on the host, in seconds - the new server's stop and load, then
      the previous server's restore (its stop and load), with 300 s for the GPU checks (2 * O(ready_timeout) +
      2 * O(stop_timeout) + 300). The C(inferops.serving.inference_server) role waits for a long load that long.
  returned: always
  type: float
  sample: 4140.0
current:
  description:
    - What the state file recorded before this run (the server this run keeps, replaces or stops), null when
      nothing was recorded.
    - Also returned on failure, once the state file was read.
  returned: always
  type: dict
  contains:
    variant: {description: Its variant label., type: str}
    fingerprint: {description: Its fingerprint., type: str}
    url: {description: Its base URL., type: str}
    pid: {description: Its PID., type: int}
    engine: {description: Its engine., type: str}
    model: {description: Its model., type: str}
    argv: {description: Its argv (API key redacted)., type: list, elements: str}
    started_at: {description: Start time (seconds since the epoch)., type: float}
    ready_s: {description: Seconds it took to become ready., type: float}
    loading: {description: Whether it was still loading (a switch under way)., type: bool}
    running: {description: Whether its process (or unit) is alive., type: bool}
healthy:
  description:
    - V(true) when the server answered C(/health) and a 1-token generation in this run. In check mode,
      for a server already running with this fingerprint, one quick probe decides it; V(false) there
      means it runs but does not serve (C(changed) says whether a run would restart it). Null when
      nothing was probed (a stop, a plan that would restart, O(wait=false)).
  returned: always
  type: bool
  sample: true
loading:
  description:
    - V(true) when O(ready_wait) ended before the server was ready; it keeps loading, and the host finishes
      the switch (restoring the previous server if it fails). Join it with O(switch_id=RV(switch.id)).
  returned: always
  type: bool
  sample: false
outcome:
  description:
    - How the call ended, one word. V(unchanged), V(relabelled) (the same configuration under another variant
      label, only the label changed), V(ready) (a new server serves), V(loading) (the switch goes on on the
      host), V(stopped); or, on failure, exactly one of V(nothing_stopped) (what ran still runs, or nothing
      ran before), V(rolled_back) (the new server failed after the stop; the previous one serves again) and
      V(restore_failed) (nothing serves). Null in check mode when a switch is planned.
  returned: always
  type: str
  sample: rolled_back
failure:
  description: Why the call failed (the message without the outcome's phrase).
  returned: on failure
  type: str
  sample: qwen exited with code 3 before it was ready (after 4.2s)
outcome_msg:
  description: The outcome's phrase that ends the message.
  returned: on failure
  type: str
  sample: "ROLLED BACK: baseline serves again at http://127.0.0.1:30000 (pid 4711)"
blockers:
  description: What the preflight found that would make a switch fail after the stop; any blocker stops nothing.
  returned: when a switch was considered
  type: list
  elements: str
  sample: ["GPU 2 is held by protected process nv-hostengine (pid 1234), which is never signalled"]
switch:
  description: The switch transaction carried out on the host, C(id), C(pid) (its process) and C(phase).
  returned: when a switch ran or runs
  type: dict
  contains:
    id: {description: The switch's id (give it as O(switch_id) to join the switch)., type: str, sample: 3f2a9c1e5b7d4a60}
    pid: {description: The process that carries the switch out., type: int, sample: 52311}
    phase:
      description: Where it is, V(preparing), V(stopping), V(checking_gpus), V(starting), V(waiting), V(restoring) or V(done).
      type: str
      sample: waiting
restored:
  description: The previous server that serves again after a failed switch (C(variant), C(fingerprint), C(pid), C(url)).
  returned: when RV(outcome=rolled_back)
  type: dict
flag_check:
  description:
    - How the engine's flags were checked (C(checked), C(argv), C(flags) counted, C(values) the flags whose
      value the help limits) or why they were not (C(why)).
  returned: when a switch was considered and the engine can be asked
  type: dict
  sample: {checked: true, argv: [/opt/venv/bin/transformers, serve, --help], flags: 38, values: 9}
lock_holder:
  description: Who held the instance's lock when this call gave up waiting (C(pid), C(what), C(since)).
  returned: when the lock stayed taken for O(lock_timeout)
  type: dict
serving:
  description: O(state=checked) only. V(true) when the recorded engine is alive and answered; V(false) when nothing
    is recorded, a switch is under way, or (with the call failed) it is gone or does not answer.
  returned: when O(state=checked)
  type: bool
oom:
  description:
    - O(state=checked) only, for an engine that is gone. The kernel's OOM kill of its pid (after it started), as
      C(journalctl -k) (else C(dmesg)) tells it; null when the kernel log has none or cannot be read.
  returned: when O(state=checked)
  type: dict
  contains:
    pid:
      description: The process killed.
      type: int
    comm:
      description: Its command name, as the kernel printed it.
      type: str
    anon_rss_kib:
      description: Its anonymous resident memory when it was killed (KiB), null when the line has none.
      type: int
    at:
      description: When, in seconds since boot, null when the log line has no such stamp.
      type: float
    cgroup:
      description: V(true) when a memory cgroup's limit ran out (not the host's memory).
      type: bool
  sample: {pid: 4242, comm: transformers, anon_rss_kib: 13574219, at: 8123.45, cgroup: false}
problem:
  description: O(state=checked) only. What is wrong with what the instance leaves serving (the message of the
    failed call), null when nothing is.
  returned: when O(state=checked)
  type: str
  sample: "instance demo.r0 (variant batched, pid 4242) no longer runs: the engine was killed by SIGKILL at 2026-12-05T21:40:01+0000"
probe:
  description: O(state=checked) only. What the health probe of the recorded engine found, in words.
  returned: when O(state=checked) and the engine runs
  type: str
  sample: "POST /v1/completions: 1 token generated"
reason:
  description:
    - Why this call kept, waited for, started or restarted the server, in words (for example
      V(the configuration changed), V(nothing runs), V(it runs with this configuration but does not answer),
      V(it serves with this configuration and is healthy)). Null for O(state=stopped).
  returned: always
  type: str
  sample: the configuration changed
recovered:
  description:
    - Set when the state file was missing or corrupt while an engine of this instance ran. The record was rebuilt
      from the engine's marker, its watchdog and C(NAME.launch.json), and saved. The reason starts with the same
      words.
    - When no launch file confirms the engine's launch, the variant is unknown. A switch then stops it knowingly, and
      a re-run of the same configuration restarts it once, since nothing can confirm the secrets it was started with.
  returned: when the state file was rebuilt
  type: str
  sample: 'state file was corrupt: rebuilt from pid 4242 (variant fast)'
metrics_file:
  description: The metrics file this call wrote (O(metrics_dir)).
  returned: when O(metrics_dir) is set, but not in check mode
  type: str
  sample: /var/lib/node_exporter/textfile_collector/inferops_sv.prom
gpu_check:
  description: The result of O(gpu_check) (the return values of M(inferops.serving.gpu_idle_check)).
  returned: when O(gpu_check) ran
  type: dict
  sample: {clean: true, backend: nvml, killed: [], waited_s: 0.0, gpus: []}
stopped_pids:
  description: PIDs that were signalled to stop the old server (and any stray that carried the marker).
  returned: when a server was stopped
  type: list
  elements: int
  sample: [4242, 4250]
log_tail:
  description:
    - The last lines of the engine log of the start that failed, every O(api_key) and secret O(env) value (of this
      call and of the server restored) replaced by C(********).
  returned: on failure to become ready
  type: list
  elements: str
  sample: ["ValueError: unknown quantization method"]
log_file:
  description:
    - The file that holds the log of the start that failed, now. After a restore, the restored server writes
      C(NAME.log) and the failed start's log is C(NAME.log.1). Null when O(log_keep) let it go.
  returned: on failure to become ready
  type: str
  sample: /srv/inference/log/inference.log.1
rc:
  description: The engine's exit code when it exited before it was ready (-N when signal N ended it).
  returned: on failure, when the engine exited
  type: int
  sample: 3
exit:
  description: How the engine ended when it exited before it was ready, or, in a later call, how the recorded
    engine that no longer runs ended.
  returned: when the engine ended by itself
  type: dict
  contains:
    code:
      description: Its exit code, null when a signal ended it or nobody recorded it.
      type: int
    signal:
      description: The signal that ended it (C(SIGKILL)), else null.
      type: str
    ended_at:
      description: When it ended, as the watchdog (or systemd) recorded it.
      type: str
    message:
      description: The same in words.
      type: str
      sample: exited with code 3 at 2026-12-04T18:40:02+0000
stopped_exit:
  description: How the engine that this call stopped ended (the same keys as RV(exit)), so the orderly stop
    shows whether the engine exited by itself (code 0) or had to be killed (C(SIGKILL)).
  returned: when a server was stopped
  type: dict
  sample: {code: 0, signal: null, ended_at: "2026-12-04T18:40:02+0000", message: "exited with code 0 at 2026-12-04T18:40:02+0000"}
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inferops.serving.plugins.module_utils import (
    _engines, _fingerprint, _idle_check, _instance_args, _router, _server)

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def validate(p):
    """Messages for bad input (nothing is changed when there is any)."""
    errors = []
    if p["state"] in ("started", "restarted"):
        missing = [key for key in ("engine", "model") if not p[key]]
        if missing:
            errors.append("state=%s needs %s, as parameters or as keys of spec" % (p["state"], " and ".join(missing)))
    if not NAME_RE.match(p["name"]):
        errors.append("name %r must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
                      % p["name"])
    if not 1 <= p["port"] <= 65535:
        errors.append("port must be between 1 and 65535, got %d" % p["port"])
    if p["engine"] == "command":
        if not p["command"]:
            errors.append("engine=command needs command: the full argv of a program that serves the OpenAI API")
    elif p["command"] and p["engine"]:
        errors.append("command is only for engine=command (engine is %s); use executable/python and engine_args"
                      % p["engine"])
    for key in ("ready_timeout", "stop_timeout"):
        if p[key] <= 0:
            errors.append("%s must be a positive number of seconds, got %s" % (key, p[key]))
    if p["stop_grace"] is not None and not 0 <= p["stop_grace"] <= p["stop_timeout"]:
        errors.append("stop_grace must be between 0 and stop_timeout (%s) seconds, got %s" % (p["stop_timeout"], p["stop_grace"]))
    if p["lock_timeout"] < 0:
        errors.append("lock_timeout must be 0 or more seconds, got %s" % p["lock_timeout"])
    if p["switch_id"] is not None and not re.match(r"^[0-9a-f]{16}$", p["switch_id"]):
        errors.append("switch_id must be the switch.id an earlier call returned (16 hex digits), got %r" % p["switch_id"])
    if p["ready_wait"] is not None and p["ready_wait"] < 0:
        errors.append("ready_wait must be 0 or more seconds, got %s" % p["ready_wait"])
    for key in ("state_dir", "log_dir"):
        if not os.path.isabs(p[key]):
            errors.append("%s must be an absolute path, got %r: a relative one would resolve against the directory "
                          "the module happens to run in, where a later run would not find it" % (key, p[key]))
    if p["host_memory_mib"] is not None and p["host_memory_mib"] < 0:
        errors.append("host_memory_mib must be 0 (not checked) or more MiB, got %s" % p["host_memory_mib"])
    if p["log_keep"] < 1:
        errors.append("log_keep must be 1 or more (the engine logs kept, the current one included), got %s" % p["log_keep"])
    if p.get("router"):
        errors.extend(_router.Membership(p["router"], _server.url_of(p["host"], p["port"]), None).problems())
    if p["gpu_check"]:
        errors.extend("gpu_check: %s" % err for err in _idle_check.validate(p["gpu_check"]))
    for key, value in (p["env"] or {}).items():
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(key)):
            errors.append("env name %r is not a valid environment variable name" % key)
        if value is None or isinstance(value, (dict, list)):
            errors.append("env %s must be a string or number, got %r" % (key, value))
    if p["served_model_name"] and ":" in p["served_model_name"] and p["engine"] == "sglang":
        errors.append("served_model_name must not contain ':' for SGLang")
    return errors


def _export(module, p, result, into):
    """The instance's metrics file (metrics_dir), never in check mode; a failure to write it warns."""
    if module.check_mode or not p["metrics_dir"]:
        return
    try:
        into["metrics_file"] = _server.export_metrics(p, result)
    except (IOError, OSError) as exc:
        module.warn("metrics_dir %s: the metrics file was not written: %s" % (p["metrics_dir"], exc))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="started", choices=["started", "stopped", "restarted", "checked"]),
            engine=dict(type="str", choices=list(_engines.ENGINES)),
            model=dict(type="str"),
            api_key=dict(type="str", no_log=True),
            served_model_name=dict(type="str"),
            engine_args=dict(type="dict", default={}),
            command=dict(type="list", elements="str"),
            executable=dict(type="path"),
            python=dict(type="path"),
            env=dict(type="dict", default={}),
            variant=dict(type="str"),
            wait=dict(type="bool", default=True),
            ready_wait=dict(type="float"),
            gpu_check=dict(type="dict", options=_idle_check.ARGUMENT_SPEC),
            flag_check=dict(type="bool", default=True),
            host_memory_mib=dict(type="int"),
            switch_id=dict(type="str"),
            resolved_from=dict(type="str", default="auto", choices=["auto", "sglang", "vllm", "transformers", "none"]),
            metrics_dir=dict(type="path"),
            metrics_host=dict(type="str"),
            router=dict(type="dict", options=_router.ROUTER_OPTION_SPEC),
            spec=dict(type="dict", options=_instance_args.VARIANT_SPEC),
            **_instance_args.INSTANCE_SPEC
        ),
        supports_check_mode=True,
    )
    p = _instance_args.with_variant(module.params)
    errors = validate(p)
    if errors:
        module.fail_json(msg="; ".join(errors), outcome="nothing_stopped", failure="; ".join(errors),
                         outcome_msg="nothing was stopped")
    p["env"] = dict((str(k), str(v)) for k, v in (p["env"] or {}).items())
    module.no_log_values.update(_fingerprint.secret_values(p))  # secret env values too, as api_key (no_log)
    p["state_dir"] = os.path.normpath(p["state_dir"])
    p["log_dir"] = os.path.normpath(p["log_dir"])
    if p["gpu_check"]:  # each GPU's last clean check and acknowledgement live beside the instance's state
        health = dict(p["gpu_check"].get("health") or {})
        health["state_dir"] = health.get("state_dir") or p["state_dir"]
        p["gpu_check"] = dict(p["gpu_check"], health=health)
    module.run_command_environ_update = dict(LANG="C", LC_ALL="C", LC_MESSAGES="C")

    host = _server.Host(module.run_command, lambda: module.get_bin_path("nvidia-smi"))
    try:
        changed, result, diff = _server.reconcile(p, host, check_mode=module.check_mode)
    except _server.ServerError as exc:  # reconcile() turns EngineError and SupervisorError into it
        extra = dict(exc.extra)
        _export(module, p, dict(extra, outcome=extra.get("outcome") or "nothing_stopped"), extra)
        module.fail_json(msg=str(exc), **extra)
    _export(module, p, result, result)
    for warning in ((result.get("gpu_check") or {}).get("health") or {}).get("warnings", []):
        module.warn(warning)
    if module._diff:
        result["diff"] = diff
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
