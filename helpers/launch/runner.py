"""The launcher's side: start the hosts, watch them, stop them, and say what happened.

`run()` starts one OS process per host (cold, or forked from a warm process:
helpers.launch.warm), each running helpers.launch.host.main around the script; it reads every
host's output as it comes, stops every host when one fails, at the timeout or when no host
prints for `stall` seconds (a hang), and returns a `RunResult` (helpers.launch.result) that
says where each host was. With --netns each host is in a network namespace of its own
(helpers.launch.netns); with `max_restarts` the job starts again after a failure
(helpers.launch.job).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

from helpers.devices import DEVICE_COUNT_FLAG
from helpers.launch import activity, netns, warm
from helpers.launch.host import DUMP_SIGNAL
from helpers.launch.job import JobResult
from helpers.launch.netns import ETC_HOSTS
from helpers.launch.result import SCRIPT_ENDED, HostResult, RunResult, clean_stdout, describe_exit, hosts_text

__all__ = ["run", "launch", "restarted", "Limits", "ADDRESS_PORT", "DUMP_FRAME"]

_PORT_ATTEMPTS = 3
_POLL_SECONDS = 0.02
_SAME_MOMENT = 2.0  # hosts failing within this many seconds of each other failed together
# A collective's error on a host whose peer died: a consequence of another failure, never its cause.
_LOST_PEER = re.compile(r"Connection (?:closed|reset) by peer")
# gloo's error when it dialled a loopback address that a peer advertised (a hostname that
# resolves to 127.x: on one machine it reaches every host, between machines none).
_GLOO_LOOPBACK = re.compile(r"(?:Gloo context initialization failed|failed to connect).*?"
                            r"remote=\[(127\.\d+\.\d+\.\d+)\]")
# What the coordinator prints when its port is already taken (jaxlib then crashes).
_BIND_FAILURE = re.compile(r"Failed to add port to server|[Aa]ddress already in use")
_REPO_ROOT = str(Path(__file__).resolve().parents[2])
# Every host runs its script through helpers.launch.host.main, which turns its exit into one
# the launcher sees at once; the script's path and arguments follow.
_HOST_MAIN = "from helpers.launch import host; host.main()"
# A bare host under --netns: enter its namespace, then become plain `python script.py`.
_EXEC_APART = "from helpers.launch import netns; netns.exec_apart()"
_DUMP_WAIT_SECONDS = 2.0
# After a host fails, the others get this long to reach the place where they wait before the stack
# dump that names their line: a host still computing would be named at a line it was only passing.
_SETTLE_SECONDS = 3.0
_SETTLED_POLLS = 5  # polls in a row whose main thread sleeps and prints nothing: the host waits
# An IPv4 address and port in a host's output: the port changes from run to run, the address not.
ADDRESS_PORT = re.compile(r"(\b\d{1,3}(?:\.\d{1,3}){3}\]?):\d+")
# One frame of a faulthandler dump: '  File "/path/script.py", line 9 in <module>'.
DUMP_FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)',
                         re.MULTILINE)



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


def group_is_ours(proc: subprocess.Popen | warm.WarmHost) -> bool:
    """Whether the process group `proc.pid` is still the one its host led.

    An unreaped host holds its number. A reaped one's group lives on only while something it
    left runs in it, and then Linux gives the number to no new process; once no process holds it,
    the number is free, and a process with it (a Jupyter kernel, another run's host: each leads
    a group of its own) is a stranger.
    """
    if proc.poll() is None:
        return True
    try:
        os.kill(proc.pid, 0)
    except ProcessLookupError:
        return True  # no process has the number: only the host's leftovers can be in its group
    except PermissionError:
        return False
    return False


def _kill_groups(procs: list[subprocess.Popen | warm.WarmHost]) -> None:
    """SIGKILL every process group at once (no host outlives another by a wait), then reap them."""
    for proc in procs:
        if not group_is_ours(proc):
            continue
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
        self.script_ended = False  # it said so on stderr: it waits at JAX's exit barrier
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
        self.watch = activity.Watch(self.proc.pid)

    def _pump(self, stream, sink: list[str], name: str, on_line) -> None:
        for line in stream:
            sink.append(line)
            if name != "log":
                self.last_output = time.monotonic()
            if name == "stderr" and line.startswith(SCRIPT_ENDED):
                self.script_ended = True
            if on_line is not None:
                on_line(self.index, name, line)
        stream.close()

    def finish(self) -> None:
        for t in self.readers:
            t.join(timeout=5)


def _warm_start(cmd: list[str], env: dict[str, str], log_write: int) -> warm.WarmHost | None:
    """The host forked from a warm process (see helpers.launch.warm); None if none can fork it."""
    if not warm.enabled():
        return None
    try:
        return warm.start(cmd[3:], env, log_write)
    except OSError:
        return None


def _tidy(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        text = text.replace(old, new)
    text = re.sub(r"(?:/[^\s\"':]+)*/site-packages/", "site-packages/", text)
    return ADDRESS_PORT.sub(r"\1:<port>", text)


def _settle(running: list[_Host]) -> None:
    """Wait, at most _SETTLE_SECONDS, until every host's main thread has slept for _SETTLED_POLLS
    polls in a row without a printed line: it waits somewhere (a collective the failed host never
    joins), and its stack dump then shows where, the same on a busy machine as on an idle one."""
    calm = {h.index: 0 for h in running}
    seen = {h.index: h.last_output for h in running}
    deadline = time.monotonic() + _SETTLE_SECONDS
    while time.monotonic() < deadline:
        for h in running:
            quiet = h.last_output == seen[h.index] and activity.main_thread_waits(h.proc.pid)
            calm[h.index] = calm[h.index] + 1 if quiet or h.proc.poll() is not None else 0
            seen[h.index] = h.last_output
        if all(n >= _SETTLED_POLLS for n in calm.values()):
            return
        time.sleep(_POLL_SECONDS)


def _ask_where(running: list[_Host]) -> None:
    """Have each host still running print its Python stack (faulthandler), for `_where`."""
    marks = {}
    for h in running:
        marks[h.index] = len(h.err)
        try:
            os.kill(h.proc.pid, DUMP_SIGNAL)
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
    for frame in DUMP_FRAME.finditer(stderr):
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
class Limits:
    """When the launcher stops a run that has not ended by itself."""

    timeout: float  # seconds from the start
    grace: float = 0.0  # seconds the others get to end by themselves after a host fails
    stall: float | None = None  # seconds without a printed line, once every host has printed
    idle: float | None = None  # the same, when moreover no host is using the CPU (helpers.launch.activity)

    def check(self) -> None:
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)) \
                or self.timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds; got {self.timeout!r}")
        if isinstance(self.grace, bool) or not isinstance(self.grace, (int, float)) \
                or self.grace < 0:
            raise ValueError(f"grace must be a number of seconds, 0 or more; got {self.grace!r}")
        for name in ("stall", "idle"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or value <= 0):
                raise ValueError(f"{name} must be a positive number of seconds or None; got {value!r}")


def _silence(started: list[_Host]) -> float | None:
    """Seconds since any host printed, once every host still running has printed; None before,
    and while every host still running has ended its script (they are at JAX's exit barrier
    together, which a busy machine can make last a few seconds)."""
    running = [h for h in started if h.proc.poll() is None]
    times = [h.last_output for h in running]
    if not times or None in times or all(h.script_ended for h in running):
        return None
    return time.monotonic() - max(times)


def _all_idle(started: list[_Host]) -> bool:
    """Every host still in its script was idle since its last line: blocked, waiting for another
    (a hang), not computing (a loop, a compile)."""
    return all(h.watch.activity(since=h.last_output) == "idle"
               for h in started if h.proc.poll() is None and not h.script_ended)


@dataclasses.dataclass(frozen=True)
class _Ending:
    """How an attempt's hosts ended."""

    status: list[str]  # each host's: "ok", "failed", "stopped", "timed out"
    failed: list[list[int]]  # the failed hosts, grouped by when they failed
    why: str = ""  # why the launcher stopped a run that had not failed ('' if it did not)
    limit: float | None = None  # the limit (seconds) that stopped it
    doing: dict[int, str] = dataclasses.field(default_factory=dict)  # each running host's activity then
    printed_at: float | None = None  # when a host last printed, before the launcher stopped the run


def _attempt(cmd: list[str], hosts: int, devices_per_host: int, limits: Limits,
             on_line, verbose: bool, bare: bool = False, etc_hosts: str | None = None,
             ) -> tuple[list[_Host], _Ending, str]:
    """Start the hosts once; stop them all `grace` s after the first failure, or at a limit.

    With `etc_hosts` (--netns), each host runs in a network namespace of its own
    (helpers.launch.netns), removed with everything else when the attempt ends.
    Returns the hosts, how they ended, and the coordinator's address.
    """
    with contextlib.ExitStack() as stack:
        apart = (stack.enter_context(netns.HostsApart(hosts, etc_hosts))
                 if etc_hosts else None)
        coordinator = f"{netns.address(0) if apart else _loopback()}:{_free_port()}"
        return (*_run_hosts(cmd, hosts, devices_per_host, limits, on_line, verbose, bare,
                            coordinator, apart), coordinator)


def _run_hosts(cmd: list[str], hosts: int, devices_per_host: int, limits: Limits, on_line,
               verbose: bool, bare: bool, coordinator: str,
               apart: netns.HostsApart | None,
               ) -> tuple[list[_Host], _Ending]:
    """`_attempt`'s hosts, from their start until every one has ended or been stopped."""
    started: list[_Host] = []
    status = ["running"] * hosts
    failed_at: dict[int, float] = {}
    why, limit = "", None
    try:
        for i in range(hosts):
            env = _child_env(i, hosts, devices_per_host, coordinator, verbose)
            if apart:
                env.update(apart.env(i))
            started.append(_Host(i, cmd, env, on_line, warm=not bare))
        deadline = time.monotonic() + limits.timeout
        next_sample = 0.0
        while True:
            codes = [h.proc.poll() for h in started]
            silence = _silence(started)
            # what the hosts do matters once the run is silent (what a stopped run was doing)
            if (now := time.monotonic()) >= next_sample and silence is not None \
                    and silence > 2 * activity.SAMPLE_SECONDS:
                for h, code in zip(started, codes):
                    if code is None:
                        h.watch.sample(now)
                next_sample = now + activity.SAMPLE_SECONDS
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
                why, limit = ("", None) if failed_at else (f"the {limits.timeout:g} s timeout", limits.timeout)
                break
            if not failed_at and silence is not None:
                if limits.idle is not None and silence > limits.idle and _all_idle(started):
                    why, limit = (f"no host printed anything for {limits.idle:g} s, and none was computing",
                                  limits.idle)
                    break
                if limits.stall is not None and silence > limits.stall:
                    why, limit = f"no host printed anything for {limits.stall:g} s", limits.stall
                    break
            time.sleep(_POLL_SECONDS)
        doing = {h.index: h.watch.activity(since=h.last_output) for h in started if h.proc.poll() is None}
        printed_at = max((h.last_output for h in started if h.last_output is not None), default=None)
        if not bare:  # a bare host has no stack-dump handler: SIGUSR1 would kill it
            if failed_at and not why:
                _settle([h for h in started if h.proc.poll() is None and not h.script_ended])
            _ask_where([h for h in started if h.proc.poll() is None and not h.script_ended])
    finally:  # on KeyboardInterrupt too: no host may outlive the run
        _kill_groups([h.proc for h in started])  # and anything the scripts left behind
        for h in started:
            h.finish()
    for i, s in enumerate(status):
        if s == "running":
            status[i] = "timed out" if why else "stopped"
    return started, _Ending(status, _failure_groups(failed_at), why, limit, doing, printed_at)


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


def launch(script: Path, args: Sequence[str], *, hosts: int, devices_per_host: int,
            limits: Limits, display: dict[str, str], on_line=None, on_retry=None,
            verbose: bool = False, bare: bool = False, etc_hosts: str | None = None) -> RunResult:
    """Run the hosts (retrying when the coordinator's port was taken); `etc_hosts`: --netns."""
    for name, value, low in (("hosts", hosts, 1), ("devices_per_host", devices_per_host, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be a whole number of at least {low}; got {value!r}")
    limits.check()
    cmd = _host_command(script, args, bare, apart=etc_hosts is not None)
    pids: list[int] = []
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        started, ending, coordinator = _attempt(
            cmd, hosts, devices_per_host, limits, on_line, verbose, bare, etc_hosts)
        pids += [h.proc.pid for h in started]
        bind_failed = any(_BIND_FAILURE.search("".join(started[i].err + started[i].log))
                          for group in ending.failed for i in group)
        if not (bind_failed and attempt < _PORT_ATTEMPTS):
            break
        if on_retry is not None:
            on_retry(int(coordinator.rsplit(":", 1)[1]))
    tidy = {coordinator: "<coordinator>", **display}
    results = []
    for h in started:
        stderr = "".join(h.err)
        status = ending.status[h.index]
        results.append(HostResult(
            host=h.index, status=status,
            returncode=h.proc.returncode if status in ("ok", "failed") else None,
            stdout=_tidy(clean_stdout("".join(h.out)), tidy), stderr=_tidy(stderr, tidy),
            log=_tidy("".join(h.log), tidy),
            script_ended=SCRIPT_ENDED in stderr,
            where=_tidy(_where(stderr, script), tidy), activity=ending.doing.get(h.index, "")))
    failed = _causes_first(ending.failed, results)
    if ending.why:
        message = _timeout_message(ending.why, results)
    elif failed:
        message = _failure_message(failed, results)
    else:
        message = "all hosts finished"
    return RunResult(hosts=tuple(results), devices_per_host=devices_per_host, message=message,
                     pids=tuple(pids), attempts=attempt, failed_first=tuple(h for group in failed for h in group),
                     stopped_after=ending.limit, last_output_at=ending.printed_at,
                     apart=netns.addresses_line(hosts) if etc_hosts else "")


def restarted(launch_once: Callable[[Sequence[str]], RunResult], max_restarts: int,
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
        idle: float | None = None, bare: bool = False, max_restarts: int | None = None,
        restart_args: Sequence[str] = (), netns: bool = False,
        etc_hosts: str = "address") -> RunResult | JobResult:
    """Run a script (a file, or Python `source` text) as `hosts` JAX processes; return their outputs.

    A host that fails (an uncaught exception, a non-zero `sys.exit`, `os._exit` or a signal)
    stops the others at once, or after `grace` seconds in which they may end on their own
    (to see what they make of it). At the `timeout`, or when every host has printed and then
    none prints for `stall` seconds (a hang), every host still running is stopped; with `idle`,
    already after `idle` seconds when no host is computing either (helpers.launch.activity):
    every host is blocked, so none can print again. A host stopped at a limit says what it was
    doing then (`HostResult.activity`: busy, waking or idle).
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
    address, hostname and /etc/hosts, as on a cluster (helpers.launch.netns); `etc_hosts=
    "loopback"` gives each host the /etc/hosts line that makes gloo advertise 127.0.1.1.
    Without root it raises HostsApartError, having made nothing.
    """
    if (script_path is None) == (source is None):
        raise ValueError("pass either a script path or source='...python code...', not both")
    if etc_hosts not in ETC_HOSTS:  # (`netns` here is run's argument)
        raise ValueError(f"etc_hosts must be one of {ETC_HOSTS}; got {etc_hosts!r}")
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
            return launch(path, [*args, *extra], hosts=hosts, devices_per_host=devices_per_host,
                           limits=Limits(timeout, grace, stall, idle), display=display, bare=bare,
                           etc_hosts=etc_hosts if netns else None)

        if max_restarts is None:
            return launch_once()
        return restarted(launch_once, max_restarts, restart_args)
