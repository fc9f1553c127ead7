# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""throughput_bench against a hostile server (tests/support/hostile_server.py), through real ansible-playbook runs.

Every wait is bounded as a whole and every read in size: whatever the server does (drip its answer, drip its
headers, stream without end, send a 50 MB event, flood without a newline, never end its headers or a
chunk-size line, send a 200 MB error body, send what is not JSON), the module ends within its deadline plus
one second by its own elapsed_s, says why in the right failure kind, and its process (the module's Python,
through tests/support/rss_python.py as ansible_python_interpreter) never passes PEAK_RSS_MIB.

A run's deadline is the sum of the bounded waits it meets, with timeout TIMEOUT: the /v1/models lookup
(min(timeout, 30 s)), the engine identification (min(timeout, 5 s), both its requests together), a metrics
scrape (min(timeout, 10 s), twice per level) and the one measured request (timeout). One worker, one request,
no warm-up, engine openai (no identification, no scrape) unless a case says otherwise; each case names the
one wait it meets, the others answer at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)

import rss_python  # noqa: E402  pylint: disable=wrong-import-position
import stand_in  # noqa: E402  pylint: disable=wrong-import-position

TIMEOUT = 3.0
PEAK_RSS_MIB = 150
SLACK_S = 1.0

# behaviour -> (module args beyond the common ones, deadline in s and which waits make it, what must come out)
# "models": the model lookup fails (error_kind, a text of msg); "stream": the one request fails (its kind in
# results[].errors, a text of its sample); "ok": the call succeeds (a text that must be in a warning, or None).
CASES = {
    "drip-models": ({}, (TIMEOUT, "the model lookup"), ("models", "timeout", "no complete answer within 3s")),
    "slowloris-models": ({}, (TIMEOUT, "the model lookup"), ("models", "timeout", "no complete answer within 3s")),
    "bad-json-models": ({}, (TIMEOUT, "the model lookup"), ("models", "bad_response", "not an OpenAI model list")),
    "flood-models": ({}, (TIMEOUT, "the model lookup"), ("models", "oversized", "the body passed 4 MiB")),
    "no-blank-line-models": ({}, (TIMEOUT, "the model lookup"),
                             ("models", "oversized", "the response head passed 64 KiB")),
    "chunk-line-models": ({}, (TIMEOUT, "the model lookup"),
                          ("models", "oversized", "a chunk-size line passed 64 KiB")),
    "huge-error-models": ({}, (TIMEOUT, "the model lookup"), ("models", "http_500", "the engine is on fire")),
    "drip-identify": ({"engine": "auto"}, (TIMEOUT, "the identification, both requests"), ("ok", None, None)),
    "drip-metrics": ({"engine": "vllm"}, (2 * TIMEOUT + TIMEOUT, "two metrics scrapes and the request"),
                     ("ok", None, "no complete answer within 3s")),
    "slowloris-stream": ({}, (TIMEOUT, "the request"), ("stream", "timeout", "no complete response within 3.0s")),
    "endless-stream": ({}, (TIMEOUT, "the request"), ("stream", "timeout", "no complete response within 3.0s")),
    "bad-json-stream": ({}, (TIMEOUT, "the request"), ("stream", "bad_event", "event is not JSON")),
    "huge-event": ({}, (TIMEOUT, "the request"), ("stream", "oversized", "one server-sent event passed 8 MiB")),
    "flood": ({}, (TIMEOUT, "the request"), ("stream", "oversized", "one server-sent event passed 8 MiB")),
    "no-blank-line-stream": ({}, (TIMEOUT, "the request"), ("stream", "oversized", "the response head passed 64 KiB")),
    "chunk-line-stream": ({}, (TIMEOUT, "the request"), ("stream", "oversized", "a chunk-size line passed 64 KiB")),
    "huge-error-stream": ({}, (TIMEOUT, "the request"), ("stream", "http_500", "the engine is on fire")),
}
# the cases that end by a deadline, not by a cap: they must also last it (less a little)
WAITED = {"drip-models": TIMEOUT, "slowloris-models": TIMEOUT, "drip-identify": TIMEOUT, "drip-metrics": 2 * TIMEOUT,
          "slowloris-stream": TIMEOUT, "endless-stream": TIMEOUT}


@pytest.fixture
def hostile(tmp_path):
    """hostile(behaviour) -> base URL of a hostile server on a free port of its own choosing; stopped at the end."""
    procs = []

    def start(behaviour):
        port_file = tmp_path / ("port-%d" % len(procs))
        proc = subprocess.Popen([sys.executable, os.path.join(SUPPORT, "hostile_server.py"), behaviour,
                                 "--port-file", str(port_file)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append(proc)
        deadline = time.monotonic() + 15
        while not port_file.exists():
            if proc.poll() is not None:
                raise RuntimeError("hostile_server.py exited with %s: %s" % (proc.returncode, proc.stderr.read()[-2000:]))
            if time.monotonic() > deadline:
                raise RuntimeError("hostile_server.py did not listen within 15 s")
            time.sleep(0.02)
        return "http://127.0.0.1:%d" % int(port_file.read_text())

    yield start
    for proc in procs:
        stand_in.stop(proc)
        proc.stderr.close()


def play(args, interpreter):
    return "\n".join([
        "---", "- hosts: localhost", "  gather_facts: false",
        "  vars:", "    ansible_python_interpreter: %s" % json.dumps(interpreter),
        "  tasks:", "    - name: against a hostile server",
        "      inferops.serving.throughput_bench: %s" % json.dumps(args),
        "      ignore_errors: true", ""])


@pytest.mark.parametrize("behaviour", sorted(CASES))
def test_a_hostile_server_ends_within_the_deadline_named_and_small(behaviour, hostile, run_playbook, tmp_path):
    extra, (deadline, waits), (outcome, kind, text) = CASES[behaviour]
    url = hostile(behaviour)
    interpreter = rss_python.install(str(tmp_path / "rss-python"))
    rss_file = tmp_path / "rss.txt"
    args = dict(url=url, concurrency=[1], requests_per_level=1, warmup=0, input_tokens=4, output_tokens=2,
                ignore_eos=False, timeout=TIMEOUT, engine="openai")
    args.update(extra)
    run = run_playbook(play(args, interpreter), env={"INFEROPS_RSS_FILE": str(rss_file)}, timeout=120)
    (rec,) = run.results(task="against a hostile server")
    out = rec["result"]
    assert rec["status"] == ("ok" if outcome == "ok" else "ignored"), (rec["status"], out, run.stdout[-2000:])

    # ends by its own clock within its deadline (waits) plus a second, and a wait ended it when one should
    assert "elapsed_s" in out, out
    assert out["elapsed_s"] <= deadline + SLACK_S, (behaviour, waits, out["elapsed_s"], out.get("msg"))
    if behaviour in WAITED:
        assert out["elapsed_s"] >= WAITED[behaviour] - 0.2, (behaviour, out["elapsed_s"])

    # the module's process stayed small (one module run: one line)
    peaks = [int(line) for line in rss_file.read_text().split()]
    assert len(peaks) == 1, peaks
    assert peaks[0] < PEAK_RSS_MIB * 1024, (behaviour, "peak RSS %.1f MiB" % (peaks[0] / 1024.0))

    if outcome == "models":
        assert out["error_kind"] == kind, out
        assert "is unreachable or not OpenAI-compatible" in out["msg"] and text in out["msg"], out["msg"]
        if kind == "http_500":
            assert "GET %s/v1/models returned HTTP 500" % url in out["msg"]
    elif outcome == "stream":
        (level,) = out["results"]
        assert level["errors"] == {kind: 1} and level["completed"] == 0, level["errors"]
        assert text in level["error_samples"][kind], level["error_samples"]
        assert out["msg"].startswith("no request completed at concurrency 1 against %s: %s x1" % (url, kind))
        if kind == "http_500":
            assert "(the body passed 1 MiB: read no further)" in level["error_samples"][kind]
    else:
        (level,) = out["results"]
        assert level["completed"] == 1 and level["failed"] == 0, level
        assert out["engine"] == ("openai" if behaviour == "drip-identify" else "vllm")
        warnings = out["client"]["warnings"]
        if text is None:
            assert not [w for w in warnings if "metrics_url" in w], warnings
        else:
            assert any("metrics_url could not be read" in w and text in w for w in warnings), warnings
    print("%s: elapsed_s %.3f (deadline %.1f s: %s), peak RSS %.1f MiB" % (
        behaviour, out["elapsed_s"], deadline, waits, peaks[0] / 1024.0))
