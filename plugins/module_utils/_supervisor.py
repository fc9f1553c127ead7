# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The `process` and `systemd` supervisors behind one start / stop / alive / ending interface.

Both keep a JSON state file per instance in state_dir (written atomically, mode 0600) holding the
fingerprint, argv, PID, PGID, start time and port, log to log_dir/<name>.log, and stamp the engine's
environment with the instance marker (_marker: INFEROPS_INSTANCE, its name, state directory and
fingerprint) so that processes that left the instance's process group or unit are still found and swept
on stop. Nothing without this instance's marker, or outside the recorded (and identity-checked) process
group, is ever signalled; another instance's marker is never this one's, whatever its command line.

Every command runs through the caller's `run` (AnsibleModule.run_command): the `process` supervisor's
watchdog (_watchdog: the engine's parent, which reaps it and records how it ended in
<state_dir>/<name>.exit.json) and systemctl alike.

A stop is orderly: SIGTERM to the engine's main process only, which then shuts its workers down in its
own order (SGLang 0.5.23 srt/managers/tokenizer_manager.py sigterm_watchdog: drain, ShutdownReq to the
schedulers, up to 15 s for them to release the GPU, "killing them before they released ... is how GPU
memory survives a shutdown"); after `grace` seconds SIGTERM to the rest of its process group and the
marker carriers; SIGKILL to whatever is left at `timeout`; then the marker sweep. systemd does the same
with KillMode=mixed (SIGTERM to the main process, SIGKILL to the rest of the unit at TimeoutStopSec).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time

from ansible_collections.inferops.serving.plugins.module_utils import _marker, _procs, _watchdog

MARKER_KEY = _marker.KEY
SUPERVISORS = ("auto", "systemd", "process")


EXIT_UNKNOWN = -1  # exit_code(): the engine exited, with a status nobody recorded
LOG_MODE = 0o640  # an engine log: its owner and group, never every local user
LOG_KEEP = 5  # engine logs kept, the current one included (inference_server's log_keep)


def rotate(path, keep):
    """Before a start: PATH -> PATH.1, PATH.1 -> PATH.2, ..., so that with the log to come keep logs remain;
    older ones (PATH.(keep-1) and beyond, left by a larger log_keep too) are removed."""
    keep = max(1, int(keep))
    directory, base = os.path.split(path)
    numbered = re.compile(r"^%s\.([0-9]+)$" % re.escape(base))
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        found = numbered.match(name)
        if found and int(found.group(1)) >= keep - 1:
            os.unlink(os.path.join(directory, name))
    if keep == 1:
        if os.path.lexists(path):
            os.unlink(path)
        return
    for index in range(keep - 2, -1, -1):
        src = "%s.%d" % (path, index) if index else path
        if os.path.lexists(src):
            os.replace(src, "%s.%d" % (path, index + 1))
    first = "%s.1" % path
    if os.path.isfile(first) and not os.path.islink(first) and os.stat(first).st_mode & 0o7777 & ~LOG_MODE:
        os.chmod(first, LOG_MODE)  # a log an earlier version left readable by everyone is not kept so


def log_holding(path, rotations):
    """Where a log written at path is after rotations more starts: path, path.1, ..."""
    return "%s.%d" % (path, rotations) if rotations else path


def describe(end):
    """'exited with code 3 at T' / 'was killed by SIGKILL at T' / why the status is unknown."""
    when = " at %s" % end["ended_at"] if end.get("ended_at") else ""
    if end.get("signal"):
        return "was killed by %s%s" % (end["signal"], when)
    if end.get("code") is not None:
        return "exited with code %d%s" % (end["code"], when)
    return "exited (%s)" % (end.get("unknown") or "its exit status is unknown")


def exit_code_of(end):
    """A Popen-style status: the code, -N for signal N, EXIT_UNKNOWN, or None (still running)."""
    if end is None:
        return None
    if end.get("signum"):
        return -int(end["signum"])
    return end["code"] if end.get("code") is not None else EXIT_UNKNOWN


def watchdog_source():
    """The watchdog's program: _watchdog's own source (from the module's zip under AnsiballZ)."""
    loader = getattr(_watchdog, "__loader__", None)
    text = None
    if loader is not None and hasattr(loader, "get_source"):
        text = loader.get_source(_watchdog.__name__)
    if not text:
        with open(_watchdog.__file__) as handle:
            text = handle.read()
    return text


class SupervisorError(RuntimeError):
    pass


def marker_value(name, state_dir):
    """The instance's identity as its marker carries it (NAME@HASH, every version)."""
    return _marker.identity(name, state_dir)


def systemd_usable(root="/"):
    """systemd runs as PID 1 and manages this system."""
    if not os.path.isdir(os.path.join(root, "run", "systemd", "system")):
        return False
    try:
        with open(os.path.join(root, "proc", "1", "comm")) as handle:
            return handle.read().strip() == "systemd"
    except (IOError, OSError):
        return False


def choose(supervisor):
    if supervisor == "auto":
        return "systemd" if systemd_usable() and shutil.which("systemctl") else "process"
    return supervisor


def write_atomic(path, text, mode=0o600):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk: no half-written file left behind
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def tail(path, lines=40, offset=0, max_bytes=65536):
    """The last lines of a log, from offset on (the current start only)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            start = max(offset, size - max_bytes)
            handle.seek(start)
            data = handle.read()
    except (IOError, OSError):
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


class StateStore(object):
    """<state_dir>/<name>.json (or <state_dir>/<filename>), written atomically with mode 0600."""

    def __init__(self, name, state_dir, filename=None):
        self.name = name
        self.state_dir = state_dir
        self.path = os.path.join(state_dir, filename or "%s.json" % name)

    def load(self):
        try:
            with open(self.path) as handle:
                data = json.load(handle)
        except (IOError, OSError):
            return None
        except ValueError:
            return {"corrupt": True}
        return data if isinstance(data, dict) else {"corrupt": True}

    def save(self, record):
        os.makedirs(self.state_dir, exist_ok=True)
        write_atomic(self.path, json.dumps(record, indent=1, sort_keys=True) + "\n")

    def clear(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class Base(object):
    kind = None

    def __init__(self, name, state_dir, log_dir, root=_procs.PROC_ROOT, run=None, log_keep=LOG_KEEP):
        self.name = name
        self.state_dir = state_dir
        self.log_dir = log_dir
        self.root = root
        self.run = run  # AnsibleModule.run_command
        self.store = StateStore(name, state_dir)
        self.exits = StateStore(name, state_dir, "%s.exit.json" % name)
        self.log_path = os.path.join(log_dir, "%s.log" % name)
        self.log_keep = log_keep
        self.marker = marker_value(name, state_dir)

    def ending(self, record, wait=2.0):
        """How the recorded engine ended: None while it runs, else {"code", "signal", "ended_at", "message"}."""
        if self.alive(record):
            return None
        end = self._ending(record, wait)
        end["message"] = describe(end)
        return end

    def _ending(self, record, wait):
        raise NotImplementedError

    def exit_code(self, record):
        return exit_code_of(self.ending(record))

    # -- finding the instance's processes

    def carriers(self):
        """Live processes stamped with this instance's marker (never this module or its ancestors)."""
        return _marker.carriers(self.marker, self.root, skip=_procs.ancestors(root=self.root))

    def marker_env(self, fingerprint=None):
        """The marker an engine of this instance starts with (the current version)."""
        return _marker.make(self.name, self.state_dir, fingerprint).value()

    def processes(self, record):
        """Every live process of the instance: the recorded process group (when its leader is still the
        recorded process) and the marker carriers. {pid: starttime}. A group member that carries another
        instance's marker is that instance's, never this one's."""
        members = self.carriers()
        if self.leader_alive(record):
            pgid = record.get("pgid") or record["pid"]
            for info in _procs.list_procs(self.root):
                if info.pgid == pgid and info.state not in ("Z", "X") and not self._foreign(info.pid):
                    members[info.pid] = info.starttime
        return members

    def _foreign(self, pid):
        marker = _marker.parse(_procs.environ_get(pid, MARKER_KEY, self.root))
        return marker is not None and marker.identity != self.marker

    def leader_alive(self, record):
        if not record or not record.get("pid"):
            return False
        return _procs.alive(record["pid"], self.root, record.get("starttime"))

    def alive(self, record):
        return self.leader_alive(record)

    def _open_log(self, argv):
        """A new log for this start, the previous ones rotated (rotate, log_keep); created 0640 whatever the
        umask, and brought back to 0640 when it is wider: an engine may print its arguments, a key among them
        (SGLang logs server_args=ServerArgs(...))."""
        os.makedirs(self.log_dir, exist_ok=True)
        rotate(self.log_path, self.log_keep)
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, LOG_MODE)
        if os.fstat(fd).st_mode & 0o7777 & ~LOG_MODE:
            os.fchmod(fd, LOG_MODE)
        handle = os.fdopen(fd, "ab")
        offset = handle.tell()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        handle.write(("=== inferops.serving %s: starting %s\n" % (stamp, self.name)).encode("utf-8"))
        handle.flush()
        return handle, offset

    def _signal_set(self, members, sig):
        """Signal each process on its own, through _procs.send (which skips reused PIDs)."""
        sent = []
        for pid, start in members.items():
            try:
                sent.extend(_procs.send(_procs.Target(pid=pid, members=[(pid, start)]), sig, self.root))
            except PermissionError:
                pass
        return sent

    def _wait_gone(self, members, timeout):
        deadline = time.monotonic() + timeout
        while True:
            living = dict((p, s) for p, s in members.items() if _procs.alive(p, self.root, s))
            if not living or time.monotonic() >= deadline:
                return living
            time.sleep(0.05)

    def sweep(self, timeout):
        """TERM, then KILL, every stray process that still carries the marker. Returns the pids."""
        signalled = set()
        for dummy in range(5):
            strays = self.carriers()
            if not strays:
                break
            signalled.update(self._signal_set(strays, signal.SIGTERM))
            left = self._wait_gone(strays, min(timeout, 5.0))
            if left:
                signalled.update(self._signal_set(left, signal.SIGKILL))
                self._wait_gone(left, 5.0)
        return signalled


class ProcessSupervisor(Base):
    """The engine in its own session and process group, the child of a watchdog (_watchdog) that reaps it
    and records how it ended; no shell, nothing left as a zombie."""

    kind = "process"

    def __init__(self, name, state_dir, log_dir, root=_procs.PROC_ROOT, run=None, log_keep=LOG_KEEP):
        Base.__init__(self, name, state_dir, log_dir, root, run, log_keep)
        # read now: a switch's detached process may start an engine (a restore) after the module exited,
        # when AnsiballZ has removed the payload zip that the source is read from
        self.watchdog = watchdog_source()

    def start(self, argv, env, fingerprint=None):
        handle, offset = self._open_log(argv)
        handle.close()
        full_env = dict(os.environ)
        full_env.update(env)
        full_env[MARKER_KEY] = self.marker_env(fingerprint)
        os.makedirs(self.state_dir, exist_ok=True)
        spec = {"argv": list(argv), "env": full_env, "cwd": self.state_dir, "log": self.log_path,
                "exit_path": self.exits.path}
        if getattr(self, "metrics_path", None):
            spec["metrics_path"] = self.metrics_path
        # the launch (secrets in env included) travels on the watchdog's stdin, never on a command line
        rc, out, err = self.run([sys.executable, "-c", self.watchdog], data=json.dumps(spec),
                                expand_user_and_vars=False)
        lines = [line for line in (out or "").splitlines() if line.strip()]
        try:
            report = json.loads(lines[-1])
        except (IndexError, ValueError):
            report = {"error": "the watchdog exited %s: %s" % (rc, " ".join(((err or "") + (out or "")).split())[-300:])}
        if report.get("error"):
            raise SupervisorError(report["error"])
        return {"pid": report["pid"], "pgid": report["pgid"], "starttime": report["starttime"],
                "watchdog": report["watchdog"], "watchdog_starttime": report.get("watchdog_starttime"),
                "log_offset": offset}

    def _ending(self, record, wait):
        """The watchdog's exit record of this engine (pid and start time match); it writes it as it reaps."""
        record = record or {}
        deadline = time.monotonic() + wait
        while True:
            end = self._recorded_end(record)
            if end:
                return end
            watchdog = record.get("watchdog")
            if not watchdog:
                return {"unknown": "no watchdog recorded its exit: an earlier version of inferops.serving started it"}
            if not _procs.alive(watchdog, self.root, record.get("watchdog_starttime")):
                # it may have written the record just before it exited
                return self._recorded_end(record) or {
                    "unknown": "its watchdog (pid %d) ended before it, so nobody recorded its exit status" % watchdog}
            if time.monotonic() >= deadline:
                return {"unknown": "its watchdog (pid %d) has not recorded its exit yet" % watchdog}
            time.sleep(0.02)

    def _recorded_end(self, record):
        """The exit file's record when it is this engine's (pid and start time match), else None."""
        end = self.exits.load() or {}
        if end.get("pid") == record.get("pid") and end.get("starttime") == record.get("starttime"):
            return end
        return None

    def stop(self, record, timeout, grace=None):
        """SIGTERM to the main process; after grace, SIGTERM to the rest of its group and the marker
        carriers; SIGKILL to what is left at timeout; then the marker sweep. Returns the signalled pids."""
        deadline = time.monotonic() + timeout
        grace = timeout if grace is None else min(grace, timeout)
        members = self.processes(record)
        if not members:
            return []
        signalled = set()
        main = record.get("pid") if self.leader_alive(record) else None
        if main:
            target = _procs.Target(pid=main, members=[(main, record.get("starttime"))])
            signalled.update(_procs.send(target, signal.SIGTERM, self.root))
            _procs.send(target, signal.SIGCONT, self.root)  # a stopped (SIGSTOP, debugger) engine gets it too
            self._wait_gone({main: members.get(main, record.get("starttime"))}, grace)
        rest = self._living(members)
        if rest:
            signalled.update(self._signal_set(rest, signal.SIGTERM))
            self._signal_set(rest, signal.SIGCONT)
            rest = self._wait_gone(self._living(members), max(0.0, deadline - time.monotonic()))
        if rest:
            signalled.update(self._signal_set(rest, signal.SIGKILL))
            self._wait_gone(rest, 10.0)
        signalled.update(self.sweep(timeout))
        return sorted(signalled)

    def _living(self, members):
        """The members still alive, plus marker carriers that appeared since (children forked meanwhile)."""
        living = dict((p, s) for p, s in members.items() if _procs.alive(p, self.root, s))
        living.update(self.carriers())
        return living


# ---------------------------------------------------------------------------------------------------
# systemd

def systemd_quote(arg):
    """One ExecStart word, quoted by systemd's rules (not a shell's): specifiers and $ escaped too."""
    text = str(arg).replace("%", "%%").replace("$", "$$")
    if text and not any(c in text for c in " \t\n\"'\\;"):
        return text
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")


def render_unit(name, argv, env, log_path, stop_timeout, description=None, working_directory=None):
    """The text of inferops-<name>.service. argv[0] must be an absolute path."""
    lines = [
        "# Managed by inferops.serving.inference_server; changes are overwritten.",
        "[Unit]",
        "Description=%s" % (description or "inferops.serving inference server %s" % name).replace("%", "%%"),
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        "ExecStart=%s" % " ".join(systemd_quote(a) for a in argv),
    ]
    for key in sorted(env):
        lines.append("Environment=%s" % systemd_quote("%s=%s" % (key, env[key])))
    if working_directory:
        lines.append("WorkingDirectory=%s" % systemd_quote(working_directory))
    lines += [
        "StandardInput=null",
        "StandardOutput=append:%s" % log_path,
        "StandardError=inherit",
        "KillMode=mixed",  # SIGTERM to the main process only; SIGKILL to the whole unit at TimeoutStopSec
        "KillSignal=SIGTERM",
        "TimeoutStopSec=%d" % max(1, int(round(stop_timeout))),
        "Restart=no",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


class SystemdSupervisor(Base):
    """A unit inferops-<name>.service with KillMode=mixed; systemctl start / stop."""

    kind = "systemd"

    def __init__(self, name, state_dir, log_dir, root=_procs.PROC_ROOT, unit_dir="/etc/systemd/system",
                 stop_timeout=60, run=None, log_keep=LOG_KEEP):
        Base.__init__(self, name, state_dir, log_dir, root, run, log_keep)
        self.unit = "inferops-%s.service" % name
        self.unit_path = os.path.join(unit_dir, self.unit)
        self.stop_timeout = stop_timeout

    def _systemctl(self, *args):
        rc, out, err = self.run(["systemctl"] + list(args), expand_user_and_vars=False)
        if rc != 0:
            raise SupervisorError("systemctl %s failed (rc=%d): %s" % (" ".join(args), rc, err.strip() or out.strip()))
        return out

    def show(self):
        out = self.run(["systemctl", "show", self.unit, "-p", "MainPID", "-p", "ActiveState", "-p", "ExecMainStatus",
                        "-p", "ExecMainCode", "-p", "ExecMainExitTimestamp"], expand_user_and_vars=False)[1]
        props = {}
        for line in out.splitlines():
            if "=" in line:
                key, value = line.split("=", 1)
                props[key] = value
        return props

    def start(self, argv, env, fingerprint=None):
        exe = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0])
        if not exe:
            raise SupervisorError("cannot launch %r: not found on PATH" % argv[0])
        argv = [exe] + list(argv[1:])
        full_env = dict(env)
        full_env[MARKER_KEY] = self.marker_env(fingerprint)
        full_env.setdefault("PATH", os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"))
        handle, offset = self._open_log(argv)
        handle.close()
        text = render_unit(self.name, argv, full_env, self.log_path, self.stop_timeout,
                           working_directory=self.state_dir)
        write_atomic(self.unit_path, text, mode=0o640)  # may hold env secrets
        self._systemctl("daemon-reload")
        self._systemctl("restart", self.unit)
        props = self.show()
        pid = int(props.get("MainPID") or 0)
        info = _procs.read_proc(pid, self.root) if pid else None
        return {"pid": pid, "pgid": info.pgid if info else pid, "starttime": info.starttime if info else None,
                "log_offset": offset, "unit": self.unit}

    def _ending(self, record, wait):
        """systemd's own record of the main process: ExecMainCode 1 exited (ExecMainStatus is the code),
        2 killed / 3 dumped (ExecMainStatus is the signal number)."""
        props = self.show()
        end = {"ended_at": props.get("ExecMainExitTimestamp") or None, "code": None, "signal": None, "signum": None}
        try:
            how, status = int(props.get("ExecMainCode") or 0), int(props.get("ExecMainStatus") or 0)
        except ValueError:
            how, status = 0, 0
        if how == 1:
            end["code"] = status
        elif how in (2, 3) and status:
            end["signum"] = status
            try:
                end["signal"] = signal.Signals(status).name
            except ValueError:
                end["signal"] = "signal %d" % status
        else:
            end["unknown"] = "systemd reports no exit of %s" % self.unit
        return end

    def alive(self, record):
        return self.show().get("ActiveState") in ("active", "activating")

    def stop(self, record, timeout, grace=None):
        """systemctl stop: KillMode=mixed sends SIGTERM to the main process, SIGKILL to the rest of the unit at
        TimeoutStopSec (stop_timeout); grace is not systemd's to apply. Then the marker sweep."""
        props = self.show()
        signalled = set()
        pid = int(props.get("MainPID") or 0)
        if pid:
            signalled.add(pid)
        if os.path.exists(self.unit_path):
            self._systemctl("stop", self.unit)
        signalled.update(self.sweep(timeout))
        return sorted(signalled)

    def remove(self):
        if os.path.exists(self.unit_path):
            os.unlink(self.unit_path)
            self._systemctl("daemon-reload")


def make(kind, name, state_dir, log_dir, stop_timeout=60, run=None, log_keep=LOG_KEEP):
    """The supervisor of kind for instance name; run is AnsibleModule.run_command."""
    if kind == "systemd":
        return SystemdSupervisor(name, state_dir, log_dir, stop_timeout=stop_timeout, run=run, log_keep=log_keep)
    return ProcessSupervisor(name, state_dir, log_dir, run=run, log_keep=log_keep)
