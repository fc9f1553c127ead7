# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The watchdog parent of one engine (the `process` supervisor). Standard library only, and no import of
the collection: this file is also the watchdog's whole program.

The supervisor runs `python -c <this source>` through AnsibleModule.run_command, with the launch as JSON
on standard input ({"argv", "env", "cwd", "log", "exit_path", and "metrics_path" with a metrics_dir}). Then:

- the first process forks the watchdog and waits only for its report, prints it (one JSON line: the
  engine's pid, process group and start time, and the watchdog's; or {"error": ...}) and exits, so
  run_command returns at once;
- the watchdog leaves the caller's session (setsid), points its own standard streams at /dev/null, and
  starts the engine in a session and process group of its own, its output appended to the log;
  a failed exec is reported back through a close-on-exec pipe, as subprocess does;
- it then waits for the engine, reaps it (no zombie lingers), writes how it ended ({"pid",
  "starttime", "code" or "signal", "ended_at"}) to exit_path atomically, and exits.

The watchdog carries no instance marker (only the engine does), so a stop's marker sweep never ends it
before it has written the exit. A watchdog killed by hand loses only the exit status: the engine runs
on, found and stopped through its process group and marker as before.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def _starttime(pid):
    """Field 22 of /proc/PID/stat (clock ticks after boot): with the pid, one process's identity."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            data = handle.read()
        return int(data[data.rindex(")") + 2:].split()[19])
    except (IOError, OSError, ValueError, IndexError):
        return None


def _write_atomic(path, record):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_all(fd):
    """Everything a pipe's writers send until they all close it; closes fd."""
    chunks = []
    while True:
        data = os.read(fd, 65536)
        if not data:
            break
        chunks.append(data)
    os.close(fd)
    return b"".join(chunks)


def ending(status):
    """{"code": N, "signal": None} or {"code": None, "signal": "SIGKILL"} from a waitpid status."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "signal %d" % sig
        return {"code": None, "signal": name, "signum": sig}
    return {"code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None, "signal": None, "signum": None}


def _engine(spec, err_w):
    """In the forked child: become the engine (never returns)."""
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(spec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.chdir(spec["cwd"])
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
    except OSError as exc:
        os.write(err_w, json.dumps({"errno": exc.errno, "error": exc.strerror or str(exc)}).encode("utf-8"))
    finally:
        os._exit(127)


def watch(spec, report_w):
    """In the watchdog: start the engine, report it on report_w, wait for it, record its end."""
    err_r, err_w = os.pipe()  # close-on-exec: EOF without data means the exec succeeded
    pid = os.fork()
    if pid == 0:
        os.close(err_r)
        os.close(report_w)
        _engine(spec, err_w)
    os.close(err_w)
    failed = read_all(err_r)
    if failed:
        os.waitpid(pid, 0)
        why = json.loads(failed.decode("utf-8"))
        os.write(report_w, json.dumps({"error": "cannot launch %r: %s" % (spec["argv"][0], why["error"])}).encode("utf-8"))
        os.close(report_w)
        return
    starttime = _starttime(pid)
    os.write(report_w, json.dumps({"pid": pid, "pgid": pid, "starttime": starttime, "watchdog": os.getpid(),
                                   "watchdog_starttime": _starttime(os.getpid())}).encode("utf-8"))
    os.close(report_w)
    while True:
        try:
            dummy, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            status = None
            break
    record = {"pid": pid, "starttime": starttime, "ended_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "watchdog": os.getpid()}
    record.update(ending(status) if status is not None else {"code": None, "signal": None, "signum": None})
    try:
        _write_atomic(spec["exit_path"], record)
    except OSError:
        pass  # a full or read-only disk: the exit is lost, the engine is reaped all the same
    if spec.get("metrics_path"):
        mark_down(spec["metrics_path"], pid)


# as _prom writes them: the comment naming the engine the file describes, and the series of its liveness
PID_COMMENT = "# inferops engine pid "
UP = "inferops_serving_up"


def mark_down(path, pid):
    """The engine pid ended: its instance's metrics file (_prom) says inferops_serving_up 0, written atomically
    (0644), when the file still describes that engine. A stale file must not say a dead server is up."""
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except (IOError, OSError):
        return False
    if PID_COMMENT + str(pid) not in lines:
        return False  # a later engine's file, or none
    out = []
    for line in lines:
        if line.startswith(UP + "{") or line.startswith(UP + " "):
            line = line.rsplit(" ", 1)[0] + " 0"
        elif line.startswith(PID_COMMENT):
            continue
        out.append(line)
    tmp = "%s.%d.tmp" % (os.path.join(os.path.dirname(path), "." + os.path.basename(path)), os.getpid())
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write("\n".join(out) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError:
        return False
    return True


def main():
    spec = json.loads(sys.stdin.read())
    report_r, report_w = os.pipe()
    if os.fork():  # the caller's process: relay the watchdog's report, then exit
        os.close(report_w)
        report = read_all(report_r).decode("utf-8") or json.dumps({"error": "the watchdog died before it reported"})
        os.write(1, (report + "\n").encode("utf-8"))
        os._exit(1 if '"error"' in report else 0)
    os.close(report_r)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # run_command reads the caller's streams to their end: let go of them
        os.dup2(null, fd)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        watch(spec, report_w)
    finally:
        os._exit(0)


if __name__ == "__main__":
    main()
