"""Run one script as several real JAX processes ("hosts") on this machine.

    python -m helpers.launch --hosts 2 --devices-per-host 4 train.py --steps 10

or, from a notebook, `run("train.py", hosts=2, devices_per_host=4)`. With `--max-restarts N`
(`run(..., max_restarts=N)`) a failed run starts again, every host, at most N times. Host i is
an OS process with D fake CPU devices; the script calls `helpers.launch.initialize()` first,
which joins the run (jax.distributed, coordinator on 127.0.0.1, gloo collectives). With
`--netns` (`run(..., netns=True)`, root only) each host is in a network namespace of its own, at
its own address (helpers.launch_netns). The same script also runs under mpirun/srun (initialize
falls back to JAX's cluster auto-detection) or alone.

The launcher is also the tool that explains a broken run: a host that fails (exception,
non-zero exit status, signal) stops the others at once, and the result says for every host
how it ended or which line of the script it was at, and the last line it printed.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import io
import os
import re
import runpy
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Sequence

from helpers import launch_netns, launch_warm
from helpers.devices import DEVICE_COUNT_FLAG
from helpers.launch_job import JobResult
from helpers.launch_result import (SCRIPT_ENDED, HostResult, LaunchError, RunResult, clean_stderr,
                                   clean_stdout, describe_exit, hosts_text)

__all__ = ["run", "initialize", "main", "RunResult", "HostResult", "JobResult", "LaunchError",
           "HostsApartError"]

HostsApartError = launch_netns.HostsApartError

_PORT_ATTEMPTS = 3
_POLL_SECONDS = 0.02
_SAME_MOMENT = 2.0  # hosts failing within this many seconds of each other failed together
# A collective's error on a host whose peer died: a consequence of another failure, never its cause.
_LOST_PEER = re.compile(r"Connection (?:closed|reset) by peer")
# gloo's error when it dialled a loopback address that a peer advertised (a hostname that
# resolves to 127.x: on one machine it reaches every host, between machines none).
_GLOO_LOOPBACK = re.compile(r"(?:Gloo context initialization failed|failed to connect).*?"
                            r"remote=\[(127\.\d+\.\d+\.\d+)\]")
# What the coordinator prints when its port is already taken (jaxlib 0.10.2 then crashes).
_BIND_FAILURE = re.compile(r"Failed to add port to server|[Aa]ddress already in use")
_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
# Every host runs its script through _host_main (below), which turns its exit into one the
# launcher sees at once; the script's path and arguments follow.
_HOST_MAIN = "import helpers.launch as launch; launch._host_main()"
# A bare host under --netns: enter its namespace, then become plain `python script.py`.
_EXEC_APART = "import helpers.launch_netns as netns; netns.exec_apart()"
_DUMP_SIGNAL = signal.SIGUSR1  # asks a host the launcher is about to stop where it is
_DUMP_WAIT_SECONDS = 2.0
# An IPv4 address and port in a host's output: the port changes from run to run, the address not.
_PORT = re.compile(r"(\b\d{1,3}(?:\.\d{1,3}){3}\]?):\d+")
# One frame of a faulthandler dump: '  File "/path/script.py", line 9 in <module>'.
_DUMP_FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)',
                         re.MULTILINE)


# ----------------------------------------------------------------------------- child side

_joined_via: str | None = None
_stdout_moved = False


def _cluster_kind() -> str | None:
    """Which cluster launcher started this process, in the order JAX 0.10.2 looks (jax/_src/clusters).

    "Open MPI 5" is the one JAX's default detectors miss: its mpirun no longer sets
    OMPI_MCA_orte_hnp_uri; JAX's opt-in mpi4py detector handles it.
    """
    if "OMPI_MCA_orte_hnp_uri" in os.environ:
        return "Open MPI"
    slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID",
             "SLURM_LOCALID")
    if all(v in os.environ for v in slurm):
        return "SLURM"
    if "OMPI_COMM_WORLD_SIZE" in os.environ:
        return "Open MPI 5"
    return None


def _exit_promptly_on_crash() -> None:
    """On an uncaught exception, print it and exit now instead of waiting for the other hosts.

    Otherwise jax's atexit shutdown waits at a barrier for every other process, while they
    wait in a collective for this one: the crash would look like a hang.
    """
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)

    sys.excepthook = hook


def _die_with_launcher() -> None:
    """Linux: have the kernel kill this process if the launcher dies (e.g. a killed kernel)."""
    parent = os.environ.get("HELPERS_LAUNCH_PARENT")
    if sys.platform != "linux" or not parent:
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):  # the launcher died before prctl took effect
        os._exit(1)


def _text_stream(fd: int) -> io.TextIOWrapper:
    """A UTF-8 Python stream on `fd` that writes each line as it is printed."""
    return io.TextIOWrapper(io.BufferedWriter(io.FileIO(fd, "w")), encoding="utf-8",
                            errors="backslashreplace", line_buffering=True, write_through=True)


def _native_stdout_off_the_pipe(*, to_stderr: bool = False) -> None:
    """Give Python's stdout its own copy of the pipe, and point the C-level stdout elsewhere.

    gloo prints "[Gloo] Rank N is connected to ..." from several C++ threads straight to
    file descriptor 1, interleaved mid-line with each other and with the script's prints, so
    it cannot be filtered out afterwards. Native stdout goes to /dev/null (to stderr when
    the launcher runs with --verbose, or under a cluster launcher, so nothing is lost there).
    Only the first call acts: the course launcher's hosts make it before their script starts.
    """
    global _stdout_moved
    if _stdout_moved:
        return
    _stdout_moved = True
    sys.stdout.flush()
    sys.stdout = _text_stream(os.dup(1))
    if to_stderr or os.environ.get("HELPERS_LAUNCH_VERBOSE") == "1":
        os.dup2(2, 1)
    else:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


def _native_stderr_to_log() -> None:
    """Give Python's stderr its own copy of the pipe; native stderr goes to the launcher's log pipe.

    C++ libraries in jaxlib (absl, gloo, the coordination service) log to file descriptor 2,
    many lines per record with random ids in them. Kept apart, a host's stderr is what its
    Python code wrote (a traceback, warnings), and the native log stays available as `log`.
    """
    fd = os.environ.pop("HELPERS_LAUNCH_LOG_FD", None)
    if fd is None:
        return
    sys.stderr.flush()
    sys.stderr = _text_stream(os.dup(2))
    os.dup2(int(fd), 2)
    os.close(int(fd))


def _flush_and_exit(status: int) -> None:
    """End this process now with `status`, skipping JAX's exit barrier (other hosts may never reach it)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _exit_status(code: object) -> int:
    """The process exit status `sys.exit(code)` stands for (None: 0, an int: itself, else 1)."""
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _print_script_traceback(err: BaseException, script: str) -> None:
    """Print an uncaught exception as `python script.py` would, without this runner's frames."""
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next
    traceback.print_exception(type(err), err, tb)


def _host_main() -> None:
    """Child side of the course launcher: run the script as `__main__`, as `python script.py` would.

    An uncaught exception, or `sys.exit(n)` with n != 0, ends the process at once with its
    status, so the launcher sees the failure now (at interpreter exit, JAX would first wait for
    every other host). A host still running at the launcher's timeout prints where it is
    (faulthandler, on SIGUSR1); one whose script ended says so before JAX's exit barrier.
    """
    launch_netns.enter_from_env()  # --netns: first, while this process has a single thread
    script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(script)
    _die_with_launcher()
    _native_stderr_to_log()
    _native_stdout_off_the_pipe()
    faulthandler.register(_DUMP_SIGNAL, all_threads=True)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as done:
        status = _exit_status(done.code)
        if status:
            _flush_and_exit(status)
    except BaseException as err:  # noqa: BLE001 - an uncaught error of the script
        _print_script_traceback(err, script)
        _flush_and_exit(1)
    print(SCRIPT_ENDED, file=sys.stderr, flush=True)


def _warm_host_main() -> None:
    """A warm process (helpers.launch_warm): import JAX once; each fork of it runs one host.

    Python's stdout and stderr are set apart from the native ones before the import, so what
    the imported modules keep (a logging handler's stream) writes where a cold host's would.
    """
    global _stdout_moved
    _stdout_moved = True  # each fork gets its native stdout and log from launch_warm
    sys.stdout, sys.stderr = _text_stream(os.dup(1)), _text_stream(os.dup(2))
    launch_warm.serve(sys.stdout.fileno(), sys.stderr.fileno())  # returns in a fork only
    _host_main()


def _wait_for_coordinator(address: str, timeout: float) -> None:
    """Wait until process 0's coordinator accepts connections (at most `timeout` seconds).

    A host that connects before the coordinator listens backs off for about a second;
    waiting here first makes it join as soon as the coordinator is up.
    """
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, int(port)), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)


def initialize(*, timeout: int = 60, verbose: bool = False) -> str:
    """Join the multi-process run this script was started in; return how ("course launcher", ...)."""
    global _joined_via
    if _joined_via is not None:
        return _joined_via
    env = os.environ
    launcher = all(k in env for k in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES",
                                      "JAX_PROCESS_ID"))
    cluster = None if launcher else _cluster_kind()
    if cluster == "Open MPI 5":
        import importlib.util

        if importlib.util.find_spec("mpi4py") is None:
            raise RuntimeError(
                "this is an Open MPI 5 run (OMPI_COMM_WORLD_SIZE is set, OMPI_MCA_orte_hnp_uri "
                "is not): JAX 0.10.2 joins it only through mpi4py. Install it (pip install "
                "mpi4py), or launch with Open MPI 4's mpirun or python -m helpers.launch.")
    if not launcher and cluster is None:
        _joined_via = "single process"
    else:
        import jax

        try:
            if launcher:
                _die_with_launcher()
                _native_stdout_off_the_pipe()
                address = env["JAX_COORDINATOR_ADDRESS"]
                if int(env["JAX_PROCESS_ID"]) != 0:
                    _wait_for_coordinator(address, timeout)
                jax.distributed.initialize(
                    coordinator_address=address,
                    num_processes=int(env["JAX_NUM_PROCESSES"]),
                    process_id=int(env["JAX_PROCESS_ID"]),
                    coordinator_bind_address=address,  # loopback only, never all interfaces
                    initialization_timeout=timeout,
                    cluster_detection_method="deactivate",
                )
            else:
                _native_stdout_off_the_pipe(to_stderr=True)
                mpi4py = {"cluster_detection_method": "mpi4py"} if cluster == "Open MPI 5" else {}
                jax.distributed.initialize(initialization_timeout=timeout, **mpi4py)
        except RuntimeError as err:
            if "before any JAX" in str(err) or "must be called before" in str(err):
                raise RuntimeError(
                    "helpers.launch.initialize() must run before anything uses JAX (even "
                    "jax.devices()). Move the call to the top of the script, right after "
                    "the imports.") from err
            raise
        _exit_promptly_on_crash()
        _joined_via = "course launcher" if launcher else f"cluster auto-detect ({cluster})"
    if verbose:
        import jax

        print(f"process {jax.process_index()} of {jax.process_count()} joined via "
              f"{_joined_via}; {jax.local_device_count()} local devices", flush=True)
    return _joined_via


# ---------------------------------------------------------------------------- parent side

def _loopback() -> str:
    """Where this user's coordinators listen: 127.0.0.1, or the loopback address a shared machine
    gives each learner (HELPERS_LAUNCH_LOOPBACK, set by the workshop hub), so that two learners'
    runs never meet whatever ports they pick."""
    address = os.environ.get("HELPERS_LAUNCH_LOOPBACK", "127.0.0.1")
    if not re.fullmatch(r"127\.\d{1,3}\.\d{1,3}\.\d{1,3}", address):
        raise ValueError(f"HELPERS_LAUNCH_LOOPBACK must be a loopback address (127.x.y.z); got {address!r}")
    return address


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_loopback(), 0))
        return s.getsockname()[1]


def _child_env(host: int, hosts: int, devices_per_host: int, coordinator: str,
               verbose: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    flags = re.sub(rf"{DEVICE_COUNT_FLAG}=\S+", "", env.get("XLA_FLAGS", "")).split()
    env.update({
        "JAX_COORDINATOR_ADDRESS": coordinator,
        "JAX_NUM_PROCESSES": str(hosts),
        "JAX_PROCESS_ID": str(host),
        "XLA_FLAGS": " ".join([*flags, f"{DEVICE_COUNT_FLAG}={devices_per_host}"]),
        "JAX_NUM_CPU_DEVICES": str(devices_per_host),  # an inherited value would win otherwise
        "JAX_PLATFORMS": "cpu",
        "PYTHONUNBUFFERED": "1",  # lines arrive as printed, and survive a kill
        "TF_CPP_MIN_LOG_LEVEL": env.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        "PYTHONPATH": os.pathsep.join(p for p in (_REPO_ROOT, env.get("PYTHONPATH")) if p),
        "HELPERS_LAUNCH_PARENT": str(os.getpid()),
        "HELPERS_LAUNCH_VERBOSE": "1" if verbose else "0",
    })
    return env


def _kill_groups(procs: list[subprocess.Popen | launch_warm.WarmHost]) -> None:
    """SIGKILL every process group at once (no host outlives another by a wait), then reap them."""
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # each child leads its own session/group
        except (ProcessLookupError, PermissionError):
            pass
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


class _Host:
    """One running process and the threads that collect its output."""

    def __init__(self, index: int, cmd: list[str], env: dict[str, str],
                 on_line: Callable[[int, str, str], None] | None, warm: bool = False):
        self.index = index
        self.out: list[str] = []
        self.err: list[str] = []
        self.log: list[str] = []
        self.last_output: float | None = None  # when the script last printed (monotonic)
        log_read, log_write = os.pipe()  # the host's native log (see _native_stderr_to_log)
        try:
            self.proc = _warm_start(cmd, env, log_write) if warm else None
            if self.proc is None:
                self.proc = subprocess.Popen(
                    cmd, env={**env, "HELPERS_LAUNCH_LOG_FD": str(log_write)},
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    pass_fds=(log_write,), start_new_session=True,
                    text=True, encoding="utf-8", errors="replace", bufsize=1)
        except BaseException:
            os.close(log_read)
            raise
        finally:
            os.close(log_write)
        log = open(log_read, encoding="utf-8", errors="replace")
        self.readers = [
            threading.Thread(target=self._pump, args=(stream, sink, name, on_line), daemon=True)
            for stream, sink, name in ((self.proc.stdout, self.out, "stdout"),
                                       (self.proc.stderr, self.err, "stderr"),
                                       (log, self.log, "log"))
        ]
        for t in self.readers:
            t.start()

    def _pump(self, stream, sink: list[str], name: str, on_line) -> None:
        for line in stream:
            sink.append(line)
            if name != "log":
                self.last_output = time.monotonic()
            if on_line is not None:
                on_line(self.index, name, line)
        stream.close()

    def finish(self) -> None:
        for t in self.readers:
            t.join(timeout=5)


def _warm_start(cmd: list[str], env: dict[str, str], log_write: int) -> launch_warm.WarmHost | None:
    """The host forked from a warm process (see helpers.launch_warm); None if none can fork it."""
    if not launch_warm.enabled():
        return None
    try:
        return launch_warm.start(cmd[3:], env, log_write)
    except OSError:
        return None


def _tidy(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        text = text.replace(old, new)
    text = re.sub(r"(?:/[^\s\"':]+)*/site-packages/", "site-packages/", text)
    return _PORT.sub(r"\1:<port>", text)


def _ask_where(running: list[_Host]) -> None:
    """Have each host still running print its Python stack (faulthandler), for `_where`."""
    marks = {}
    for h in running:
        marks[h.index] = len(h.err)
        try:
            os.kill(h.proc.pid, _DUMP_SIGNAL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + _DUMP_WAIT_SECONDS
    waiting = list(running)
    while waiting and time.monotonic() < deadline:
        # the runner's own frame, File "<string>", line 1, is the bottom of the main stack
        waiting = [h for h in waiting if h.proc.poll() is None
                   and not any('"<string>", line 1 in <module>' in line
                               for line in h.err[marks[h.index]:])]
        time.sleep(_POLL_SECONDS)


def _where(stderr: str, script: Path) -> str:
    """'line 9: total = jnp.sum(x)', the script line a stack dump shows a host at ('' if none)."""
    for frame in _DUMP_FRAME.finditer(stderr):
        if frame["path"] == str(script):
            number = int(frame["line"])
            try:
                code = script.read_text(encoding="utf-8").splitlines()[number - 1].strip()
            except (OSError, IndexError):
                code = ""
            function = frame["function"]
            place = f"line {number}" + ("" if function == "<module>" else f" (in {function})")
            return f"{place}: {code}" if code else place
    return ""


@dataclasses.dataclass(frozen=True)
class _Limits:
    """When the launcher stops a run that has not ended by itself."""

    timeout: float  # seconds from the start
    grace: float = 0.0  # seconds the others get to end by themselves after a host fails
    stall: float | None = None  # seconds without a printed line, once every host has printed

    def check(self) -> None:
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)) \
                or self.timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds; got {self.timeout!r}")
        if isinstance(self.grace, bool) or not isinstance(self.grace, (int, float)) \
                or self.grace < 0:
            raise ValueError(f"grace must be a number of seconds, 0 or more; got {self.grace!r}")
        if self.stall is not None and (isinstance(self.stall, bool) or not isinstance(
                self.stall, (int, float)) or self.stall <= 0):
            raise ValueError(f"stall must be a positive number of seconds or None; got "
                             f"{self.stall!r}")


def _stalled(started: list[_Host], stall: float | None) -> bool:
    """Every host has printed (or exited), and none has printed for `stall` seconds.

    Hosts that have all ended their scripts are not stalled: they are at JAX's exit barrier
    together, which a busy machine can make last a few seconds.
    """
    if stall is None:
        return False
    running = [h for h in started if h.proc.poll() is None]
    if running and all(SCRIPT_ENDED in "".join(h.err) for h in running):
        return False
    times = [h.last_output for h in running]
    return bool(times) and None not in times and time.monotonic() - max(times) > stall


def _attempt(cmd: list[str], hosts: int, devices_per_host: int, limits: _Limits,
             on_line, verbose: bool, bare: bool = False, etc_hosts: str | None = None,
             ) -> tuple[list[_Host], list[str], list[list[int]], str, str]:
    """Start the hosts once; stop them all `grace` s after the first failure, or at a limit.

    With `etc_hosts` (--netns), each host runs in a network namespace of its own
    (helpers.launch_netns), removed with everything else when the attempt ends.
    Returns the hosts, their statuses, the failed hosts grouped by when they failed, why the
    launcher stopped a run that had not failed ('' if it did not) and the coordinator's address.
    """
    with contextlib.ExitStack() as stack:
        apart = (stack.enter_context(launch_netns.HostsApart(hosts, etc_hosts))
                 if etc_hosts else None)
        coordinator = f"{launch_netns.address(0) if apart else _loopback()}:{_free_port()}"
        return (*_run_hosts(cmd, hosts, devices_per_host, limits, on_line, verbose, bare,
                            coordinator, apart), coordinator)


def _run_hosts(cmd: list[str], hosts: int, devices_per_host: int, limits: _Limits, on_line,
               verbose: bool, bare: bool, coordinator: str,
               apart: launch_netns.HostsApart | None,
               ) -> tuple[list[_Host], list[str], list[list[int]], str]:
    """`_attempt`'s hosts, from their start until every one has ended or been stopped."""
    started: list[_Host] = []
    status = ["running"] * hosts
    failed_at: dict[int, float] = {}
    why = ""
    try:
        for i in range(hosts):
            env = _child_env(i, hosts, devices_per_host, coordinator, verbose)
            if apart:
                env.update(apart.env(i))
            started.append(_Host(i, cmd, env, on_line, warm=not bare))
        deadline = time.monotonic() + limits.timeout
        while True:
            codes = [h.proc.poll() for h in started]
            for i, code in enumerate(codes):
                if code is not None and status[i] == "running":
                    status[i] = "ok" if code == 0 else "failed"
                    if code != 0:
                        if not failed_at:
                            deadline = min(deadline, time.monotonic() + limits.grace)
                        failed_at[i] = time.monotonic()
            if all(c is not None for c in codes):
                break
            if time.monotonic() > deadline:
                why = "" if failed_at else f"the {limits.timeout:g} s timeout"
                break
            if not failed_at and _stalled(started, limits.stall):
                why = f"no host printed anything for {limits.stall:g} s"
                break
            time.sleep(_POLL_SECONDS)
        if not bare:  # a bare host has no stack-dump handler: SIGUSR1 would kill it
            _ask_where([h for h in started if h.proc.poll() is None
                        and SCRIPT_ENDED not in "".join(h.err)])
    finally:  # on KeyboardInterrupt too: no host may outlive the run
        _kill_groups([h.proc for h in started])  # and anything the scripts left behind
        for h in started:
            h.finish()
    for i, s in enumerate(status):
        if s == "running":
            status[i] = "timed out" if why else "stopped"
    return started, status, _failure_groups(failed_at), why


def _failure_groups(failed_at: dict[int, float]) -> list[list[int]]:
    """Failed hosts in the order they failed; hosts that failed at the same moment share a group.

    Hosts that fail together (every host raising the same error) come out in the same order
    in every run, and a slow cascade (one host dies, the others abort later) keeps its order.
    """
    groups: list[list[int]] = []
    start = None
    for host in sorted(failed_at, key=lambda h: (failed_at[h], h)):
        if start is None or failed_at[host] - start >= _SAME_MOMENT:
            groups.append([])
            start = failed_at[host]
        groups[-1].append(host)
    return [sorted(group) for group in groups]


def _causes_first(failed: list[list[int]], results: Sequence[HostResult]) -> list[list[int]]:
    """Failure groups where a host whose collective lost its peer comes after the hosts that died."""
    ordered: list[list[int]] = []
    for group in failed:
        lost = [h for h in group if _LOST_PEER.search(results[h].stderr)]
        ordered += [g for g in ([h for h in group if h not in lost], lost) if g]
    return ordered


def _timeout_message(why: str, results: Sequence[HostResult]) -> str:
    running = [h.host for h in results if h.status == "timed out" and not h.script_ended]
    ended = [h.host for h in results if h.status == "timed out" and h.script_ended]
    exited = [h.host for h in results if h.status == "ok"]
    parts = []
    if running:
        parts.append(f"{hosts_text(running)} {'was' if len(running) == 1 else 'were'} "
                     "still running")
    if ended:
        parts.append(f"{hosts_text(ended)} had ended {'its' if len(ended) == 1 else 'their'} "
                     "script and waited at JAX's exit barrier for the others")
    if exited:
        parts.append(f"{hosts_text(exited)} had exited")
    return f"stopped after {why}: " + "; ".join(parts) + _loopback_gist(results)


def _loopback_gist(results: Sequence[HostResult]) -> str:
    """The cause, when a host's gloo dialled a loopback address that another host advertised."""
    for h in results:
        found = _GLOO_LOOPBACK.search(h.stderr + h.log)
        if found:
            return (f" (gloo on host {h.host} dialled {found[1]}, a loopback address: a host "
                    "advertised what its hostname resolves to, which no other machine can reach; "
                    "map each hostname to its host's own address in /etc/hosts)")
    return ""


def _failure_message(failed: list[list[int]], results: Sequence[HostResult]) -> str:
    """'host 1 failed (exit status 3)', then whoever failed after it, then whom the launcher stopped."""
    def how(group: list[int]) -> str:
        if len(group) == 1:
            return f"host {group[0]} ({describe_exit(results[group[0]].returncode)})"
        return f"{hosts_text(group)} (" + ", ".join(
            f"host {h}: {describe_exit(results[h].returncode)}" for h in group) + ")"

    stopped = [h.host for h in results if h.status == "stopped"]
    first, *later = failed
    message = how(first).replace(" (", " failed (", 1)
    message += "".join(f", then {how(group)}" for group in later)
    if stopped:
        message += f"; the launcher stopped {hosts_text(stopped)}"
    if any(_BIND_FAILURE.search(h.stderr + h.log) for h in results):
        message += f" (the coordinator's port was taken {_PORT_ATTEMPTS} times in a row)"
    return message + _loopback_gist(results)


def _host_command(script: Path, args: Sequence[str], bare: bool = False,
                  apart: bool = False) -> list[str]:
    if bare:
        plain = [sys.executable, str(script), *map(str, args)]
        return [sys.executable, "-c", _EXEC_APART, *plain] if apart else plain
    return [sys.executable, "-c", _HOST_MAIN, str(script), *map(str, args)]


def _launch(script: Path, args: Sequence[str], *, hosts: int, devices_per_host: int,
            limits: _Limits, display: dict[str, str], on_line=None, on_retry=None,
            verbose: bool = False, bare: bool = False, etc_hosts: str | None = None) -> RunResult:
    """Run the hosts (retrying when the coordinator's port was taken); `etc_hosts`: --netns."""
    for name, value, low in (("hosts", hosts, 1), ("devices_per_host", devices_per_host, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be a whole number of at least {low}; got {value!r}")
    limits.check()
    cmd = _host_command(script, args, bare, apart=etc_hosts is not None)
    pids: list[int] = []
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        started, status, failed, why, coordinator = _attempt(
            cmd, hosts, devices_per_host, limits, on_line, verbose, bare, etc_hosts)
        pids += [h.proc.pid for h in started]
        bind_failed = any(_BIND_FAILURE.search("".join(started[i].err + started[i].log))
                          for group in failed for i in group)
        if not (bind_failed and attempt < _PORT_ATTEMPTS):
            break
        if on_retry is not None:
            on_retry(int(coordinator.rsplit(":", 1)[1]))
    tidy = {coordinator: "<coordinator>", **display}
    results = []
    for h in started:
        stderr = "".join(h.err)
        results.append(HostResult(
            host=h.index, status=status[h.index],
            returncode=h.proc.returncode if status[h.index] in ("ok", "failed") else None,
            stdout=_tidy(clean_stdout("".join(h.out)), tidy), stderr=_tidy(stderr, tidy),
            log=_tidy("".join(h.log), tidy),
            script_ended=SCRIPT_ENDED in stderr,
            where=_tidy(_where(stderr, script), tidy)))
    failed = _causes_first(failed, results)
    if why:
        message = _timeout_message(why, results)
    elif failed:
        message = _failure_message(failed, results)
    else:
        message = "all hosts finished"
    stopped_after = (limits.stall if why.startswith("no host") else limits.timeout) if why else None
    return RunResult(hosts=tuple(results), devices_per_host=devices_per_host, message=message,
                     pids=tuple(pids), attempts=attempt, failed_first=tuple(h for group in failed for h in group),
                     stopped_after=stopped_after,
                     apart=launch_netns.addresses_line(hosts) if etc_hosts else "")


def _restarted(launch_once: Callable[[Sequence[str]], RunResult], max_restarts: int,
               restart_args: Sequence[str], on_attempt=None) -> JobResult:
    """Launch the job; after a failed attempt, stop it all and launch it again with
    `restart_args` added, at most `max_restarts` times. `on_attempt(job)` follows each attempt."""
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts must be a whole number, 0 or more; got {max_restarts!r}")
    if isinstance(restart_args, str):
        raise ValueError(f"restart_args is a list of arguments, like ['--resume']; got the text "
                         f"{restart_args!r}")
    attempts: list[RunResult] = []
    while True:
        attempts.append(launch_once(restart_args if attempts else ()))
        job = JobResult(tuple(attempts), max_restarts)
        if on_attempt is not None:
            on_attempt(job)
        if job.ok or job.restarts == max_restarts:
            return job


def run(script_path: str | os.PathLike | None = None, *, source: str | None = None,
        hosts: int = 2, devices_per_host: int = 4, timeout: float = 120,
        args: Sequence[str] = (), grace: float = 0.0, stall: float | None = None,
        bare: bool = False, max_restarts: int | None = None,
        restart_args: Sequence[str] = (), netns: bool = False,
        etc_hosts: str = "address") -> RunResult | JobResult:
    """Run a script (a file, or Python `source` text) as `hosts` JAX processes; return their outputs.

    A host that fails (an uncaught exception, a non-zero `sys.exit`, `os._exit` or a signal)
    stops the others at once, or after `grace` seconds in which they may end on their own
    (to see what they make of it). At the `timeout`, or when every host has printed and then
    none prints for `stall` seconds (a hang), every host still running is stopped.
    Either way the result says, host by host, how it ended or which line of the script it
    was at, and the last line it printed.

    bare=True runs each host as plain `python script.py`, with none of the launcher's code
    inside it: a crash does not end the host at once, the launcher cannot ask where a host
    is, the native log is part of stderr, and a host outlives a launcher that is killed (the
    launcher still stops every host when it returns). The script joins jax.distributed itself.

    With `max_restarts=N` a failed (or stopped) run starts again, every host, with
    `restart_args` added to `args` (e.g. `("--resume",)`), until one succeeds or N restarts
    are used up; the result is then a `JobResult` (each attempt, and a line for each).

    netns=True (root only) runs each host in a network namespace of its own, with its own
    address, hostname and /etc/hosts, as on a cluster (helpers.launch_netns); `etc_hosts=
    "loopback"` gives each host the /etc/hosts line that makes gloo advertise 127.0.1.1.
    Without root it raises HostsApartError, having made nothing.
    """
    if (script_path is None) == (source is None):
        raise ValueError("pass either a script path or source='...python code...', not both")
    if etc_hosts not in launch_netns.ETC_HOSTS:
        raise ValueError(f"etc_hosts must be one of {launch_netns.ETC_HOSTS}; got {etc_hosts!r}")
    with tempfile.TemporaryDirectory(prefix="helpers-launch-") as tmp:
        if source is not None:
            path = Path(tmp) / "script.py"
            path.write_text(source, encoding="utf-8")
            display = {str(path): "<source>"}
        else:
            path = Path(script_path).resolve()
            if not path.is_file():
                raise FileNotFoundError(
                    f"no script at {script_path!r} (looked in {os.getcwd()}); check the path")
            display = {str(path): path.name}

        def launch_once(extra: Sequence[str] = ()) -> RunResult:
            return _launch(path, [*args, *extra], hosts=hosts, devices_per_host=devices_per_host,
                           limits=_Limits(timeout, grace, stall), display=display, bare=bare,
                           etc_hosts=etc_hosts if netns else None)

        if max_restarts is None:
            return launch_once()
        return _restarted(launch_once, max_restarts, restart_args)


# ------------------------------------------------------------------------------------ CLI

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m helpers.launch",
        description="Run SCRIPT as several JAX processes on this machine, each with fake "
                    "CPU devices. The script must call helpers.launch.initialize() first.")
    p.add_argument("--hosts", type=int, default=2, help="number of processes (default 2)")
    p.add_argument("--devices-per-host", type=int, default=4,
                   help="fake CPU devices in each process (default 4)")
    p.add_argument("--timeout", type=float, default=120,
                   help="stop every host after this many seconds (default 120)")
    p.add_argument("--stall", type=float, default=None,
                   help="stop every host once all have printed and none prints for this many "
                        "seconds (a hang)")
    p.add_argument("--grace", type=float, default=0.0,
                   help="after a host fails, give the others this many seconds to end by "
                        "themselves (default 0)")
    p.add_argument("--max-restarts", type=int, default=None, metavar="N",
                   help="after a failed run, stop every host and start the whole job again, "
                        "at most N times")
    p.add_argument("--restart-args", default="", metavar="ARGS",
                   help="arguments added to the script's on a restart, e.g. --restart-args=--resume")
    p.add_argument("--netns", action="store_true",
                   help="root only: each host in a network namespace of its own, with its own "
                        f"address in {launch_netns.NETWORK}, hostname and /etc/hosts, as on a cluster")
    p.add_argument("--etc-hosts", choices=launch_netns.ETC_HOSTS, default="address",
                   help="with --netns: what each host's /etc/hosts maps its hostname to (loopback: "
                        f"{launch_netns.DEBIAN_LOOPBACK}, which breaks gloo; default: address)")
    p.add_argument("--verbose", action="store_true",
                   help="also show JAX/gloo log lines")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    return p


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    opts = _parser().parse_args(argv)
    lock = threading.Lock()

    def on_line(host: int, stream: str, line: str) -> None:
        if not opts.verbose and (stream == "log" or (
                clean_stdout(line) if stream == "stdout" else clean_stderr(line)) == ""):
            return
        with lock:
            target = sys.stdout if stream == "stdout" else sys.stderr
            target.write(f"[host {host}] {line if line.endswith(chr(10)) else line + chr(10)}")
            target.flush()

    def on_retry(port: int) -> None:
        print(f"[launch] port {port} was taken; retrying on a new port", file=sys.stderr)

    path = Path(opts.script)
    if not path.is_file():
        print(f"[launch] no script at {opts.script!r}; check the path", file=sys.stderr)
        return 2
    if opts.netns:
        if why := launch_netns.unavailable():
            print(f"[launch] {why}", file=sys.stderr)
            return 2
        print(f"[launch] {launch_netns.addresses_line(opts.hosts)}", file=sys.stderr, flush=True)

    def launch_once(extra: Sequence[str] = ()) -> RunResult:
        result = _launch(path.resolve(), [*opts.args, *extra], hosts=opts.hosts,
                         devices_per_host=opts.devices_per_host, limits=_Limits(opts.timeout, opts.grace, opts.stall),
                         display={}, on_line=on_line, on_retry=on_retry,
                         verbose=opts.verbose, etc_hosts=opts.etc_hosts if opts.netns else None)
        print(f"[launch] {opts.hosts} hosts x {opts.devices_per_host} devices: {result.message}",
              file=sys.stderr)
        if not result.ok:
            for line in result.report():
                print(f"[launch] {line}", file=sys.stderr)
        return result

    def on_attempt(job: JobResult) -> None:
        again = not job.ok and job.restarts < opts.max_restarts
        restart = f"; restarting every host{' with ' + opts.restart_args if opts.restart_args else ''}"
        print(f"[launch] {job.attempt_line(len(job.attempts))}{restart if again else ''}",
              file=sys.stderr)
        if not again:
            print(f"[launch] {job.message}", file=sys.stderr)

    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        if opts.max_restarts is None:
            result = launch_once()
        else:
            result = _restarted(launch_once, opts.max_restarts, shlex.split(opts.restart_args),
                                on_attempt).last
    except KeyboardInterrupt:
        print("[launch] interrupted; stopped every host", file=sys.stderr)
        return 130
    except (ValueError, HostsApartError) as err:
        print(f"[launch] {err}", file=sys.stderr)
        return 2
    if result.ok:
        return 0
    return 124 if any(h.status == "timed out" for h in result.hosts) else 1


if __name__ == "__main__":
    sys.exit(main())
