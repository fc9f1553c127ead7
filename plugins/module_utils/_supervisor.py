# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The `process` and `systemd` supervisors behind one start / stop / alive / exit_code interface.

Both keep a JSON state file per instance in state_dir (written atomically, mode 0600) holding the
fingerprint, argv, PID, PGID, start time and port, log to log_dir/<name>.log, and stamp the engine's
environment with a marker (INFEROPS_INSTANCE=<name>@<state_dir hash>) so that processes that left the
instance's process group or unit are still found and swept on stop. Nothing without the marker, or
outside the recorded (and identity-checked) process group, is ever signalled.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time

from ansible_collections.inferops.serving.plugins.module_utils import _procs

MARKER_KEY = "INFEROPS_INSTANCE"
SUPERVISORS = ("auto", "systemd", "process")


EXIT_UNKNOWN = -1  # exit_code(): the engine exited, with a status this process cannot know


class SupervisorError(RuntimeError):
    pass


def marker_value(name, state_dir):
    digest = hashlib.sha256(os.path.abspath(state_dir).encode("utf-8")).hexdigest()[:12]
    return "%s@%s" % (name, digest)


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

    def __init__(self, name, state_dir, log_dir, root=_procs.PROC_ROOT):
        self.name = name
        self.state_dir = state_dir
        self.log_dir = log_dir
        self.root = root
        self.store = StateStore(name, state_dir)
        self.log_path = os.path.join(log_dir, "%s.log" % name)
        self.marker = marker_value(name, state_dir)
        self.proc = None

    # -- finding the instance's processes

    def carriers(self):
        """Live processes stamped with this instance's marker (never this module or its ancestors)."""
        untouchable = _procs.ancestors(root=self.root)
        found = {}
        for info in _procs.list_procs(self.root):
            if info.pid in untouchable or info.state in ("Z", "X"):
                continue
            if _procs.environ_has(info.pid, MARKER_KEY, self.marker, self.root):
                found[info.pid] = info.starttime
        return found

    def processes(self, record):
        """Every live process of the instance: the recorded process group (when its leader is still the
        recorded process) and the marker carriers. {pid: starttime}."""
        members = self.carriers()
        if self.leader_alive(record):
            pgid = record.get("pgid") or record["pid"]
            for info in _procs.list_procs(self.root):
                if info.pgid == pgid and info.state not in ("Z", "X"):
                    members[info.pid] = info.starttime
        return members

    def leader_alive(self, record):
        if not record or not record.get("pid"):
            return False
        return _procs.alive(record["pid"], self.root, record.get("starttime"))

    def alive(self, record):
        return self.leader_alive(record)

    def _open_log(self, argv):
        os.makedirs(self.log_dir, exist_ok=True)
        handle = open(self.log_path, "ab")
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
            if self.proc is not None:
                self.proc.poll()
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
    """The engine in its own session and process group, detached from the module (no shell)."""

    kind = "process"

    def start(self, argv, env):
        handle, offset = self._open_log(argv)
        full_env = dict(os.environ)
        full_env.update(env)
        full_env[MARKER_KEY] = self.marker
        cwd = self.state_dir
        os.makedirs(cwd, exist_ok=True)
        try:
            # not AnsibleModule.run_command: the engine outlives this call in its own session, its output
            # goes to the log file, and argv is used as given (run_command expands ~ and $VARS in it)
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
                                         env=full_env, cwd=cwd, close_fds=True, start_new_session=True)
        except OSError as exc:
            handle.close()
            raise SupervisorError("cannot launch %r: %s" % (argv[0], exc))
        handle.close()
        info = None
        for dummy in range(100):
            info = _procs.read_proc(self.proc.pid, self.root)
            if info is not None:
                break
            time.sleep(0.01)
        return {"pid": self.proc.pid, "pgid": self.proc.pid, "starttime": info.starttime if info else None,
                "log_offset": offset}

    def exit_code(self, record):
        """The engine's exit status once it has exited (None while it runs; EXIT_UNKNOWN when an earlier
        call started it, as only the parent could read the status)."""
        if self.proc is not None:
            return self.proc.poll()
        return None if self.leader_alive(record) else EXIT_UNKNOWN

    def stop(self, record, timeout):
        """TERM the whole process group, KILL it after timeout, then sweep marker carriers."""
        signalled = set()
        members = self.carriers()
        pgid = None
        if self.leader_alive(record):
            pgid = record.get("pgid") or record["pid"]
            for info in _procs.list_procs(self.root):
                if info.pgid == pgid and info.state not in ("Z", "X"):
                    members[info.pid] = info.starttime
        if not members:
            self._reap()
            return []
        if pgid is not None:
            try:
                os.killpg(pgid, signal.SIGTERM)
                os.killpg(pgid, signal.SIGCONT)  # a stopped (SIGSTOP, debugger) engine gets its SIGTERM too, as under systemd
                signalled.update(p for p in members)
            except ProcessLookupError:
                pgid = None
        group = self._group(pgid) if pgid is not None else set()
        outside = dict((p, s) for p, s in members.items() if p not in group)
        signalled.update(self._signal_set(outside, signal.SIGTERM))
        left = self._wait_gone(members, timeout)
        if left:
            if pgid is not None and self.leader_alive(record):
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self._signal_set(left, signal.SIGKILL)
            self._wait_gone(left, 10.0)
        signalled.update(self.sweep(timeout))
        self._reap()
        return sorted(signalled)

    def _group(self, pgid):
        return set(i.pid for i in _procs.list_procs(self.root) if i.pgid == pgid)

    def _reap(self):
        if self.proc is not None:
            try:
                self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass


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
        "KillMode=control-group",
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
    """A unit inferops-<name>.service with KillMode=control-group; systemctl start / stop."""

    kind = "systemd"

    def __init__(self, name, state_dir, log_dir, root=_procs.PROC_ROOT, unit_dir="/etc/systemd/system",
                 stop_timeout=60, run=None):
        Base.__init__(self, name, state_dir, log_dir, root)
        self.unit = "inferops-%s.service" % name
        self.unit_path = os.path.join(unit_dir, self.unit)
        self.stop_timeout = stop_timeout
        self.run = run or self._run

    @staticmethod
    def _run(argv):
        # what make() uses (the unit tests hand in a fake as run=): not AnsibleModule.run_command, which
        # module_utils here are not given, and which would expand ~ and $VARS in the unit name
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              check=False)
        return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")

    def _systemctl(self, *args):
        rc, out, err = self.run(["systemctl"] + list(args))
        if rc != 0:
            raise SupervisorError("systemctl %s failed (rc=%d): %s" % (" ".join(args), rc, err.strip() or out.strip()))
        return out

    def show(self):
        out = self.run(["systemctl", "show", self.unit, "-p", "MainPID", "-p", "ActiveState",
                        "-p", "ExecMainStatus", "-p", "ExecMainCode"])[1]
        props = {}
        for line in out.splitlines():
            if "=" in line:
                key, value = line.split("=", 1)
                props[key] = value
        return props

    def start(self, argv, env):
        exe = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0])
        if not exe:
            raise SupervisorError("cannot launch %r: not found on PATH" % argv[0])
        argv = [exe] + list(argv[1:])
        full_env = dict(env)
        full_env[MARKER_KEY] = self.marker
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

    def exit_code(self, record):
        props = self.show()
        if props.get("ActiveState") in ("active", "activating", "reloading"):
            return None
        try:
            return int(props.get("ExecMainStatus") or EXIT_UNKNOWN)
        except ValueError:
            return EXIT_UNKNOWN

    def alive(self, record):
        return self.show().get("ActiveState") in ("active", "activating")

    def stop(self, record, timeout):
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


def make(kind, name, state_dir, log_dir, stop_timeout=60):
    if kind == "systemd":
        return SystemdSupervisor(name, state_dir, log_dir, stop_timeout=stop_timeout)
    return ProcessSupervisor(name, state_dir, log_dir)
