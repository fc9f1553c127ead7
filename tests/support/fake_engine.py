# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in OpenAI-compatible engine for the inference_server failure cases (engine: command).

usage: fake_engine.py --port P [--host H] [--model NAME] [--mode MODE] [--load-s S] [--ready-file FILE] [--orphan FILE]

modes:
  ok           /health 503 for --load-s seconds, then 200; /v1/completions answers one token
               (with --ready-file, 503 also until FILE exists: a test ends the load when it has seen what it waits
               for, instead of sleeping a load long enough for a busy machine)
  exit         prints an error and exits with code 3 right away (after --load-s)
  never-ready  /health answers 503 forever
  broken       /health answers 200 at once, every /v1/completions HTTP 500 (a CUDA error in the worker)
--orphan FILE  also start a child that leaves the process group (setsid) and lives on; its pid is written to FILE
--worker FILE  also start a worker in the engine's process group that holds a resource only the main process
               can make it release, as SGLang's schedulers hold GPU memory: on SIGTERM the main process asks
               the worker to release, waits for it and exits 0; the worker, asked, releases (0.5 s) and writes
               "released" to FILE. A worker that gets SIGTERM itself before it was asked writes "leaked" (0.5.23
               srt/managers/tokenizer_manager.py: killing schedulers mid-release "is how GPU memory survives a
               shutdown") and exits 1.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from stream_server import read_chunked  # this file's own directory is sys.path[0]


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="fake")
    parser.add_argument("--mode", default="ok", choices=["ok", "exit", "never-ready", "broken"])
    parser.add_argument("--load-s", type=float, default=0.5)
    parser.add_argument("--ready-file")
    parser.add_argument("--orphan")
    parser.add_argument("--worker")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--echo-args", action="store_true",
                        help="print the command line and the credential env values at start, as SGLang logs server_args")
    args = parser.parse_known_args(argv)[0]

    if args.child:  # the orphan: a new session, out of the engine's process group
        os.setsid()
        with open(args.orphan, "w") as handle:
            handle.write(str(os.getpid()))
        while True:
            time.sleep(3600)

    print("fake engine %s starting on %s:%d (%s)" % (args.model, args.host, args.port, args.mode), flush=True)
    if args.echo_args:
        secrets = dict((k, v) for k, v in os.environ.items() if k.endswith(("_TOKEN", "_KEY")))
        print("server_args=ServerArgs(argv=%r, env=%r)" % (argv, secrets), flush=True)
    if args.orphan:
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "--port", "0", "--child", "--orphan", args.orphan],
                         stdin=subprocess.DEVNULL, close_fds=True)
    if args.worker:
        worker(args.worker)
    if args.mode == "exit":
        time.sleep(args.load_s)
        print("RuntimeError: fake engine cannot load %s" % args.model, flush=True)
        sys.exit(3)
    started = time.monotonic()

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def ready(self):
            return (args.mode == "ok" and time.monotonic() - started >= args.load_s
                    and (not args.ready_file or os.path.exists(args.ready_file)))

        def do_GET(self):
            if self.path == "/health" and args.mode == "broken":
                self._send(200, {"status": "ok"})
            elif self.path == "/health":
                self._send(200 if self.ready() else 503, {"status": "ok" if self.ready() else "loading"})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self):
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():  # as smg 1.13.0 forwards
                body = json.loads(read_chunked(self.rfile) or b"{}")
            else:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
            if args.mode == "broken":
                self._send(500, {"error": "CUDA error: an illegal memory access was encountered"})
            elif not self.ready():
                self._send(503, {"error": "loading"})
            elif body.get("model") != args.model:
                self._send(404, {"error": "model %r not found" % body.get("model")})
            else:
                self._send(200, {"object": "text_completion", "model": args.model,
                                 "choices": [{"index": 0, "text": " x", "finish_reason": "length"}]})

        def log_message(self, fmt, *a):
            sys.stdout.write("fake engine: " + (fmt % a) + "\n")
            sys.stdout.flush()

    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


def worker(path):
    """Fork the worker (same process group); the main process's SIGTERM handler releases it, then exits."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker
        os.close(write_end)

        def killed(*dummy):
            with open(path, "w") as handle:
                handle.write("leaked")
            os._exit(1)

        signal.signal(signal.SIGTERM, killed)
        os.read(read_end, 1)  # until the main process asks (or dies: EOF)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # releasing: let it finish
        time.sleep(0.5)
        with open(path, "w") as handle:
            handle.write("released")
        os._exit(0)
    os.close(read_end)
    print("fake engine worker %d holds the resource" % pid, flush=True)

    def release(*dummy):
        os.write(write_end, b"r")
        os.waitpid(pid, 0)
        print("fake engine: worker released, exiting", flush=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, release)


if __name__ == "__main__":
    main(sys.argv[1:])
