"""Hosts forked from a warm Python process that has already imported JAX.

A host started cold spends about a second of CPU importing JAX before its script's first line
runs; a notebook that launches thirty runs pays it sixty times. So the course launcher keeps a
warm process per host environment: it imports JAX once, then forks a host for each request.
A script that imports the course's training stack (Flax, Optax, Orbax, Grain, or the helpers
built on them) gets a warm process that has imported those too. A forked host is what a cold
one is: its own process and session, with the environment, working directory, arguments,
standard streams and exit status the launcher gave it, and a freshly seeded numpy; only its
imports find their modules loaded. Linux only; `bare=True` hosts,
and hosts under mpirun or srun, are always plain `python script.py`. HELPERS_LAUNCH_WARM=0
turns it off.
"""
from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
from collections import OrderedDict

from helpers.launch import netns

# Read only after the import, so hosts that differ in these share a warm process: the run's
# coordinates, and the device count (XLA_FLAGS is read when the backend starts; JAX reads
# JAX_NUM_CPU_DEVICES at import, so a fork sets it in JAX's config). pytest names the running
# test and its phase in PYTEST_CURRENT_TEST: keyed on it, every test of the suite paid for new
# warm processes (each a JAX, and often a Flax and Orbax, import).
_AFTER_IMPORT = frozenset({"JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID",
                           "HELPERS_LAUNCH_PARENT", "XLA_FLAGS", "JAX_NUM_CPU_DEVICES",
                           "PYTEST_CURRENT_TEST",
                           *netns.ENV_NAMES})  # a fork enters its namespace (--netns)
_CONTROL_FD = "HELPERS_WARM_CONTROL_FD"
_SERVE = "from helpers.launch import host; host.warm_main()"
_STACK_MODULES = ("flax.nnx", "optax", "orbax.checkpoint", "grain")
# A script that uses the stack: imports it, or a helper module that does.
_USES_STACK = re.compile(r"^\s*(?:from|import)\s+(?:flax|optax|orbax|grain)\b"
                         r"|^\s*(?:from|import)\s+helpers\.training(?:\.|\s+import\s+[\w, (]*?)"
                         r"\b(?:data|checkpoints|nnx_model)\b", re.MULTILINE)
_KEEP = 3  # warm processes kept while idle (each holds 190-240 MB)
_START_SECONDS = 60.0  # how long a request may wait for a warm process still importing JAX
_MESSAGE_BYTES = 1 << 20

_pool: OrderedDict[tuple, "_Warm"] = OrderedDict()
_pool_lock = threading.Lock()


def enabled() -> bool:
    return sys.platform == "linux" and os.environ.get("HELPERS_LAUNCH_WARM", "1") != "0"


def pids() -> list[int]:
    """The warm processes this launcher keeps between runs (they end with it)."""
    with _pool_lock:
        return [warm.proc.pid for warm in _pool.values()]


# ---------------------------------------------------------------------------- launcher side

class WarmHost:
    """A host forked by a warm process: the part of `subprocess.Popen` the launcher uses."""

    def __init__(self, pid: int, status: socket.socket, stdout, stderr, warm: "_Warm"):
        self.pid = pid
        self.returncode: int | None = None
        self.stdout, self.stderr = stdout, stderr
        self._status, self._warm = status, warm

    def poll(self) -> int | None:
        return self.wait(timeout=0) if self.returncode is None else self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status (negative: killed by that signal); None if `timeout` passed first."""
        if self.returncode is None:
            if not select.select([self._status], [], [], timeout)[0]:
                if timeout is not None and timeout > 0:
                    raise subprocess.TimeoutExpired(f"host {self.pid}", timeout)
                return None
            report = b""
            while chunk := self._status.recv(64):
                report += chunk
            # no report: the warm process died, and its hosts with it (PR_SET_PDEATHSIG)
            self.returncode = int(report) if report else -signal.SIGKILL
            self._status.close()
            self._warm.ended()
        return self.returncode


class _Warm:
    """One warm process and the socket that asks it for hosts."""

    def __init__(self, env: dict[str, str], stack: bool):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _SERVE, *(_STACK_MODULES if stack else ())],
                env={**env, _CONTROL_FD: str(theirs.fileno())},
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        finally:
            theirs.close()
        self.control = ours
        self.running = 0
        self.lock = threading.Lock()

    def fork(self, argv: list[str], env: dict[str, str], cwd: str, stdout_fd: int,
             stderr_fd: int, log_fd: int) -> tuple[int, socket.socket]:
        """Ask for a host; return its pid and the socket its exit status will come on."""
        status, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            request = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
            with self.lock:
                socket.send_fds(self.control, [request],
                                [stdout_fd, stderr_fd, log_fd, theirs.fileno()])
            theirs.close()
            if not select.select([status], [], [], _START_SECONDS)[0]:
                raise OSError("the warm process did not answer")
            pid = status.recv(16, socket.MSG_WAITALL)
            if len(pid) < 16:
                raise OSError("the warm process ended")
        except BaseException:
            theirs.close()
            status.close()
            raise
        with self.lock:
            self.running += 1
        return int(pid), status

    def ended(self) -> None:
        with self.lock:
            self.running -= 1

    def close(self) -> None:
        """End the warm process (and with it any host it still has)."""
        self.control.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _warm_for(env: dict[str, str], stack: bool) -> _Warm:
    """The warm process for hosts with this environment, started if there is none yet."""
    shared = tuple(sorted((k, v) for k, v in env.items() if k not in _AFTER_IMPORT))
    key = (stack, shared)
    with _pool_lock:
        warm = _pool.pop(key, None)
        if warm is None or warm.proc.poll() is not None:
            warm = _Warm(dict(shared), stack)
        _pool[key] = warm
        idle = [k for k, w in _pool.items() if k != key and w.running == 0]
        for old in idle[:max(0, len(_pool) - _KEEP)]:
            _pool.pop(old).close()
    return warm


def start(argv: list[str], env: dict[str, str], log_fd: int) -> WarmHost:
    """Fork a host that runs `helpers.launch.host.main` with `argv` (script path, arguments) and `env`
    (without HELPERS_LAUNCH_LOG_FD: the fork's native stderr is `log_fd` from the start).

    Its stdout and stderr are new pipes (the WarmHost's text streams); `log_fd` becomes its
    native log. Raises OSError if no warm process can fork it (the caller then starts it cold).
    """
    with open(argv[0], encoding="utf-8", errors="replace") as script:
        warm = _warm_for(env, stack=bool(_USES_STACK.search(script.read())))
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        pid, status = warm.fork(argv, env, os.getcwd(), out_w, err_w, log_fd)
    except BaseException:
        for fd in (out_r, err_r):
            os.close(fd)
        with _pool_lock:  # a warm process that failed once is not asked again
            for key, w in list(_pool.items()):
                if w is warm:
                    _pool.pop(key).close()
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    streams = [open(fd, encoding="utf-8", errors="replace") for fd in (out_r, err_r)]
    return WarmHost(pid, status, *streams, warm)


# -------------------------------------------------------------------------- warm process side

def serve(stdout_fd: int, stderr_fd: int) -> None:
    """The warm process: import JAX, then fork a host per request until the launcher goes.

    Python's stdout and stderr write to `stdout_fd` and `stderr_fd`. Only a fork returns from
    here, with its streams in place, to run its script as `helpers.launch.host.main`.
    """
    control = socket.socket(fileno=int(os.environ.pop(_CONTROL_FD)))
    import importlib

    for module in ("jax.numpy", *sys.argv[1:]):  # what the hosts would import first
        importlib.import_module(module)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    hosts: dict[int, socket.socket] = {}
    while True:
        ready = select.select([control, wake_r], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
            _report_ended(hosts)
        if control in ready:
            request, fds, _, _ = socket.recv_fds(control, _MESSAGE_BYTES, 4)
            if not request:  # the launcher is gone: so are its hosts (PR_SET_PDEATHSIG)
                os._exit(0)
            status = socket.socket(fileno=fds[3])
            pid = os.fork()
            if pid == 0:
                for sock in (control, status, *hosts.values()):
                    sock.close()
                for fd in (wake_r, wake_w):
                    os.close(fd)
                _become_host(json.loads(request), {stdout_fd: fds[0], stderr_fd: fds[1]}, fds[2])
                return
            for fd in fds[:3]:
                os.close(fd)
            status.sendall(b"%16d" % pid)
            hosts[pid] = status


def _report_ended(hosts: dict[int, socket.socket]) -> None:
    """Send each ended host's exit status on its socket (negative: the signal that killed it)."""
    while hosts:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        status = hosts.pop(pid, None)
        if status is None:
            continue
        try:
            status.sendall(b"%d" % os.waitstatus_to_exitcode(wait_status))
        except OSError:
            pass  # the launcher stopped listening
        status.close()


def _become_host(request: dict, pipes: dict[int, int], log_fd: int) -> None:
    """In the fork: take the streams, session, environment, directory and argv of a cold host.

    `pipes` maps Python's stdout and stderr descriptors to the launcher's pipes; the native
    stdout goes to /dev/null (the log with --verbose) and the native stderr to the log, as
    helpers.launch.host arranges in a cold host.
    """
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    env = {**request["env"], "HELPERS_LAUNCH_PARENT": str(os.getppid())}
    null = os.open(os.devnull, os.O_RDWR)
    verbose = env.get("HELPERS_LAUNCH_VERBOSE") == "1"
    moves = [(pipe, fd) for fd, pipe in pipes.items()]
    for source, target in (*moves, (null, 0), (log_fd if verbose else null, 1), (log_fd, 2)):
        os.dup2(source, target)
    for fd in {*pipes.values(), null, log_fd}:
        os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    if "JAX_NUM_CPU_DEVICES" in env:
        import jax

        jax.config.update("jax_num_cpu_devices", int(env["JAX_NUM_CPU_DEVICES"]))
    os.chdir(request["cwd"])
    import numpy as np

    np.random.seed()  # a cold host's global generator is seeded from the OS: so is each fork's
    sys.argv = ["-c", *request["argv"]]
