#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: router_worker
short_description: Take one engine instance out of a router, wait until it is drained, and put it back
version_added: 0.5.0
description:
  - Adds one engine instance (a worker) to, or removes it from, one or more running routers through their
    worker API (C(GET /workers), C(POST /workers), C(DELETE /workers/...)), and waits until each router's
    listing shows the change. Routers take such a change in the background, or answer only once it is done, so
    the listing is what tells. The routers are C(sglang-router) 0.3.2, the Shepherd Model Gateway C(smg) 1.13.0
    and C(vllm-router) 0.1.17 (docs/replicas.md has a table of how each behaves).
  - Every router of O(router_url) is read (and, with O(router_type=auto), identified) before anything changes. A
    router that is down, unknown, or refuses the key is an error before any change. With O(api_key) and
    O(state=absent), a C(DELETE) of a random UUID asks whether the key may change workers (404) or only list
    them (403, a user-role key), without a change.
  - O(state=absent) removes the worker, waits until the router no longer lists it (no new request goes there
    from then on; requests already streaming from it go on), then waits until the engine has drained, that is
    until its own in-flight gauge O(drain_metric) reads 0 on its C(/metrics), within O(drain_timeout).
    Without O(drain_metric), where the router counts the requests in flight to the worker (C(smg)'s C(load))
    and counted 0 before it let the worker go, there is nothing to wait for; otherwise it waits the whole
    O(drain_timeout) and says so (a warning, and RV(drain)). An engine that is gone (see O(engine_state)) ends
    the wait at once, and RV(engine_ended) says how it ended. A worker the router does not list is left as it
    is, with no drain wait.
  - After the removal the listing is read again. When it shows fewer than O(keep_healthy) other healthy
    workers (another removal ran at the same time), the worker is put back and the module fails before
    anything stopped. Removals are not serialised; two racing removals each re-check after their own, so the
    later one sees both.
  - C(smg) lists a removed worker C(status=draining) for 5 seconds. It counts as listed, so a removal is done
    when it is gone, and an add of a URL still listed waits until it is gone, then adds. A failed C(smg) add is
    found when its job disappears (404) without a listing.
  - C(vllm-router) addresses workers by URL, answers a removal 200 even for a URL it does not know (the
    listing confirms it), and answers an add only once the worker is healthy; O(timeout) bounds that whole
    request.
  - O(state=present) adds the worker unless the router lists it healthy, then waits until it is listed and
    healthy. A worker listed but marked unhealthy is removed and added again (the router refuses to add a URL
    it already lists, and an unhealthy worker takes no traffic), so that the router checks it at once.
  - Worker URLs compare with scheme and host in lower case, the default port explicit and trailing slashes
    dropped. When the router lists no such URL, one that differs only in how it spells the loopback host
    (C(localhost), C(127.0.0.1), C(::1)) is taken as the same worker. Names are never resolved through DNS.
  - Every wait is bounded, and a failure names the router, the worker and what the router listed or the engine
    read last.
author:
  - inferops.serving maintainers (@inferops)
extends_documentation_fragment:
  - inferops.serving.attributes
attributes:
  check_mode:
    support: full
    details: Reads the router's listing and reports whether the worker would be added or removed; changes nothing.
  diff_mode:
    support: full
    details: Shows this worker's entry in the router's listing before and after.
  idempotent:
    support: full
    details: A second run finds the worker listed healthy (or not listed) and changes nothing.
options:
  router_url:
    description:
      - Base URL of the router, for example V(http://10.0.0.5:30000), or a list of them (routers run in pairs);
        the worker's membership is converged on each. Required unless O(router_type=none).
    type: list
    elements: str
  router_type:
    description:
      - The router's kind. V(sglang) is C(sglang-router) 0.3, V(smg) the Shepherd Model Gateway 1.13, V(vllm)
        C(vllm-router) 0.1.
      - V(auto) identifies each router from its own answers (its C(/workers) entries, its answer to
        C(GET /list_workers)) and returns what it found in RV(routers); an unknown router is an error that
        lists what was tried.
      - V(none) asks no router (for a load balancer that hooks of your own drive). Then O(state=absent) only waits
        until the engine is drained, and O(state=present) does nothing.
    type: str
    choices: [sglang, smg, vllm, none, auto]
    default: sglang
  worker_url:
    description:
      - The engine instance's base URL as the router reaches it, for example V(http://10.0.0.7:8000).
      - It is added as given, less any trailing slash.
    type: str
    required: true
  state:
    description:
      - V(present) puts the worker in the router's rotation, V(absent) takes it out and waits until it is drained.
    type: str
    choices: [present, absent]
    default: present
  timeout:
    description:
      - Seconds the router may take to list the worker healthy (V(present)) or stop listing it (V(absent)),
        after it accepted the change.
    type: float
    default: 60
  drain_metric:
    description:
      - The engine's in-flight gauge, read after the worker left the router until it is 0 summed over all its
        series. SGLang's is V(sglang:num_running_reqs) (with C(--enable-metrics)), vLLM's is
        V(vllm:num_requests_running).
      - Unset, the drain is a fixed wait of O(drain_timeout) seconds, for an engine without such a gauge.
    type: str
  drain_metrics_url:
    description:
      - Where the engine serves its Prometheus metrics. Default is O(worker_url) followed by C(/metrics).
    type: str
  drain_timeout:
    description:
      - Seconds the engine may take to drain (with O(drain_metric)), or the fixed wait (without it).
    type: float
    default: 60
  keep_healthy:
    description:
      - With O(state=absent), the fewest OTHER workers the router must list healthy for this one to be taken out.
        With fewer, the module fails and changes nothing, so the last healthy replica is never taken out.
    type: int
    default: 0
  api_key:
    description:
      - Sent to the router as C(Authorization Bearer), the key it was started with (C(--api-key)), or an admin
        key of C(--control-plane-api-keys). A user-role key may list but not change workers (403), an error
        before anything changes.
      - C(vllm-router)'s C(--api-key) is the key it sends to the engines (it must match theirs); its worker API
        has no auth.
    type: str
  engine_state:
    description:
      - The instance's state file (C(<state_dir>/<name>.json) of M(inferops.serving.inference_server)). While
        draining, a recorded engine that is no longer alive ends the wait at once, and its watchdog's exit
        record (C(<name>.exit.json)) says how it ended (RV(engine_ended)).
      - Without it, an engine whose port refuses connections is taken as gone ("the engine stopped answering").
    type: path
notes:
  - A request the router sent to the worker just before the removal is counted by the engine once it is
    admitted. The drain starts only after the router stopped listing the worker.
  - The module talks to the router and the engine from the host it runs on. Run it where both are reachable,
    for example with C(delegate_to) the router's host.
seealso:
  - module: inferops.serving.inference_server
"""

EXAMPLES = r"""
- name: Take the engine on this host out of the router and wait until it has no request in flight
  inferops.serving.router_worker:
    router_url: http://router.internal:30000
    worker_url: "http://{{ ansible_host }}:8000"
    state: absent
    drain_metric: "sglang:num_running_reqs"
    drain_timeout: 120
  delegate_to: localhost

- name: Put it back once it serves the new variant, and wait until the router lists it healthy
  inferops.serving.router_worker:
    router_url: http://router.internal:30000
    worker_url: "http://{{ ansible_host }}:8000"
    state: present
    timeout: 30
  delegate_to: localhost

- name: A vLLM engine behind a router that checks a key
  inferops.serving.router_worker:
    router_url: https://router.internal
    api_key: "{{ router_api_key }}"
    worker_url: http://10.0.0.7:8000
    state: absent
    drain_metric: "vllm:num_requests_running"
"""

RETURN = r"""
worker:
  description:
    - The router's entry of this worker after the run; null when it does not list it.
    - In check mode, the entry as it is (nothing changed).
  returned: always
  type: dict
  sample: {id: 0b3e4d3c-5f0a-4c1e-9f7a-2f1d6a1f0c11, url: "http://10.0.0.7:8000", is_healthy: true, load: 0}
listed:
  description: Whether the router lists this worker after the run (in check mode, as it is).
  returned: always
  type: bool
  sample: true
workers:
  description: The router's whole listing after the run, each worker's id, url and health.
  returned: always
  type: list
  elements: dict
  sample: [{id: 0b3e4d3c-5f0a-4c1e-9f7a-2f1d6a1f0c11, url: "http://10.0.0.7:8000", is_healthy: true}]
drained_s:
  description:
    - Seconds from the worker leaving the router to its in-flight gauge reading 0 (or the fixed wait).
    - Null when nothing was removed.
  returned: always
  type: float
  sample: 1.234
drain_value:
  description:
    - The last value of O(drain_metric), summed over its series; 0 once drained.
    - Null without O(drain_metric) or when nothing was removed.
  returned: always
  type: float
  sample: 0.0
waited_s:
  description: Seconds the router took to show the change in its listing.
  returned: always
  type: float
  sample: 0.05
router_url:
  description: The (first) router's URL as used.
  returned: always
  type: str
  sample: "http://router.internal:30000"
router_type:
  description: The (first) router's type, as given or as O(router_type=auto) identified it.
  returned: always
  type: str
  sample: smg
routers:
  description: Each router of O(router_url), its type, how it was identified, whether it lists the worker, and its listing.
  returned: always
  type: list
  elements: dict
  sample: [{router_url: "http://router.internal:30000", router_type: smg, identified: "router_type smg", listed: true,
            workers: []}]
drain:
  description: How the drain ended, in words (the gauge read 0, the router counted 0, the whole drain_timeout waited, the engine ended).
  returned: always
  type: str
  sample: "sglang:num_running_reqs read 0"
engine_ended:
  description: How the engine ended while draining (from its exit record), or null while it runs.
  returned: always
  type: str
  sample: "the engine (pid 4242) was killed by SIGKILL"
worker_url:
  description: The worker's URL as sent to the router.
  returned: always
  type: str
  sample: "http://10.0.0.7:8000"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inferops.serving.plugins.module_utils import _router


def main():
    module = AnsibleModule(argument_spec=_router.ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    errors = _router.url_problems(p)
    if errors:
        module.fail_json(msg="; ".join(errors))
    try:
        result, diff = _router.converge(p, check_mode=module.check_mode)
    except _router.RouterError as exc:
        module.fail_json(msg=exc.msg, **exc.result)
    if result.get("drain") and (result.get("engine_ended") or result["drain"].startswith("no in-flight reading")):
        module.warn("worker %s: %s" % (result["worker_url"], result["drain"]))
    if module._diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
