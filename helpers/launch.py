"""Run one script as several real JAX processes ("hosts") on this machine.

    python -m helpers.launch --hosts 2 --devices-per-host 4 train.py --steps 10

or, from a notebook, `run("train.py", hosts=2, devices_per_host=4)`. Host i is an OS process
with D fake CPU devices; the script calls `helpers.launch.initialize()` first, which joins the
run (jax.distributed, coordinator on 127.0.0.1, gloo collectives). The same script also runs
under mpirun/srun (initialize falls back to JAX's cluster auto-detection) or alone.
"""
from __future__ import annotations

import argparse
import io
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
from helpers.launch_result import HostResult, LaunchError, RunResult, clean_stderr, clean_stdout

__all__ = ["run", "initialize", "main", "RunResult", "HostResult", "LaunchError"]

_PORT_ATTEMPTS = 3
_POLL_SECONDS = 0.02
# What the coordinator prints when its port is already taken (jaxlib 0.10.2 then crashes).
_BIND_FAILURE = re.compile(r"Failed to add port to server|[Aa]ddress already in use")
_REPO_ROOT = str(Path(__file__).resolve().parent.parent)


# ----------------------------------------------------------------------------- child side

_joined_via: str | None = None


def _cluster_kind() -> str | None:
    """Which cluster launcher JAX 0.10.2 would auto-detect (mirrors jax/_src/clusters)."""
    if "OMPI_MCA_orte_hnp_uri" in os.environ:
        return "Open MPI"
    slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID",
             "SLURM_LOCALID")
    if all(v in os.environ for v in slurm):
        return "SLURM"
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


def _native_stdout_off_the_pipe(*, to_stderr: bool = False) -> None:
    """Give Python's stdout its own copy of the pipe, and point the C-level stdout elsewhere.

    gloo prints "[Gloo] Rank N is connected to ..." from several C++ threads straight to
    file descriptor 1, interleaved mid-line with each other and with the script's prints, so
    it cannot be filtered out afterwards. Native stdout goes to /dev/null (to stderr when
    the launcher runs with --verbose, or under a cluster launcher, so nothing is lost there).
    """
    sys.stdout.flush()
    own = os.dup(1)
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(own, "w")), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True,
                                  write_through=True)
    if to_stderr or os.environ.get("HELPERS_LAUNCH_VERBOSE") == "1":
        os.dup2(2, 1)
    else:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


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
    if not launcher and cluster is None:
        if int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1:
            raise RuntimeError(
                "this looks like an Open MPI run (OMPI_COMM_WORLD_SIZE="
                f"{env['OMPI_COMM_WORLD_SIZE']}), but JAX 0.10.2 only detects Open MPI "
                "through OMPI_MCA_orte_hnp_uri, which Open MPI 4's mpirun sets. Launch with "
                "Open MPI 4's mpirun, or with python -m helpers.launch.")
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
                jax.distributed.initialize(initialization_timeout=timeout)
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

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child_env(host: int, hosts: int, devices_per_host: int, port: int,
               verbose: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    flags = re.sub(rf"{DEVICE_COUNT_FLAG}=\S+", "", env.get("XLA_FLAGS", "")).split()
    env.update({
        "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
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


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child leads its own session/group
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


class _Host:
    """One running process and the threads that collect its output."""

    def __init__(self, index: int, cmd: list[str], env: dict[str, str],
                 on_line: Callable[[int, str, str], None] | None):
        self.index = index
        self.out: list[str] = []
        self.err: list[str] = []
        self.proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
            text=True, encoding="utf-8", errors="replace", bufsize=1)
        self.readers = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.out, "stdout", on_line),
                             daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.err, "stderr", on_line),
                             daemon=True),
        ]
        for t in self.readers:
            t.start()

    def _pump(self, stream, sink: list[str], name: str, on_line) -> None:
        for line in stream:
            sink.append(line)
            if on_line is not None:
                on_line(self.index, name, line)
        stream.close()

    def finish(self) -> None:
        for t in self.readers:
            t.join(timeout=5)


def _tidy(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        text = text.replace(old, new)
    text = re.sub(r"(?:/[^\s\"':]+)*/site-packages/", "site-packages/", text)
    return text


def _attempt(cmd: list[str], hosts: int, devices_per_host: int, timeout: float,
             on_line, verbose: bool) -> tuple[list[_Host], list[str], set[int], bool, int]:
    """Start the hosts once; stop them all on the first failure or at the timeout."""
    port = _free_port()
    started: list[_Host] = []
    status = ["running"] * hosts
    failed: set[int] = set()
    timed_out = False
    try:
        for i in range(hosts):
            env = _child_env(i, hosts, devices_per_host, port, verbose)
            started.append(_Host(i, cmd, env, on_line))
        deadline = time.monotonic() + timeout
        while True:
            codes = [h.proc.poll() for h in started]
            for i, code in enumerate(codes):
                if code is not None and status[i] == "running":
                    status[i] = "ok" if code == 0 else "failed"
                    if code != 0:
                        failed.add(i)
            if failed or all(c is not None for c in codes):
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(_POLL_SECONDS)
    finally:  # on KeyboardInterrupt too: no host may outlive the run
        for h in started:  # also kills anything the script left behind in its group
            _kill_group(h.proc)
        for h in started:
            h.finish()
    for i, s in enumerate(status):
        if s == "running":
            status[i] = "timed out" if timed_out else "stopped"
    return started, status, failed, timed_out, port


def _hosts_text(hosts: Sequence[int]) -> str:
    """'host 1', 'hosts 0 and 1', 'hosts 0, 1 and 2'."""
    names = [str(h) for h in hosts]
    if len(names) == 1:
        return f"host {names[0]}"
    return f"hosts {', '.join(names[:-1])} and {names[-1]}"


def _launch(cmd: list[str], *, hosts: int, devices_per_host: int, timeout: float,
            display: dict[str, str], on_line=None, on_retry=None,
            verbose: bool = False) -> RunResult:
    for name, value, low in (("hosts", hosts, 1), ("devices_per_host", devices_per_host, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be a whole number of at least {low}; got {value!r}")
    if not timeout or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds; got {timeout!r}")
    pids: list[int] = []
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        started, status, failed, timed_out, port = _attempt(
            cmd, hosts, devices_per_host, timeout, on_line, verbose)
        pids += [h.proc.pid for h in started]
        bind_failed = any(_BIND_FAILURE.search("".join(started[i].err)) for i in failed)
        if not (bind_failed and attempt < _PORT_ATTEMPTS):
            break
        if on_retry is not None:
            on_retry(port)
    tidy = {f"127.0.0.1:{port}": "<coordinator>", **display}
    results = tuple(
        HostResult(host=h.index, status=status[h.index],
                   returncode=h.proc.returncode if status[h.index] in ("ok", "failed") else None,
                   stdout=_tidy(clean_stdout("".join(h.out)), tidy),
                   stderr=_tidy("".join(h.err), tidy))
        for h in started)
    stopped = [h.host for h in results if h.status == "stopped"]
    if timed_out:
        running = [h.host for h in results if h.status == "timed out"]
        message = (f"stopped after the {timeout:g} s timeout: {_hosts_text(running)} "
                   f"{'was' if len(running) == 1 else 'were'} still running (a host waiting "
                   "in a collective for a host that never arrives looks like this)")
    elif failed:
        first = min(failed)
        code = results[first].returncode
        others = sorted(failed - {first})
        message = (f"host {first} failed (exit code {code})"
                   + (f", and so did {_hosts_text(others)}" if others else "")
                   + (f"; the launcher stopped {_hosts_text(stopped)}" if stopped else ""))
        if any(_BIND_FAILURE.search(h.stderr) for h in results):
            message += f" (the coordinator's port was taken {_PORT_ATTEMPTS} times in a row)"
    else:
        message = "all hosts finished"
    return RunResult(hosts=results, devices_per_host=devices_per_host, message=message,
                     pids=tuple(pids), attempts=attempt)


def run(script_path: str | os.PathLike | None = None, *, source: str | None = None,
        hosts: int = 2, devices_per_host: int = 4, timeout: float = 120,
        args: Sequence[str] = ()) -> RunResult:
    """Run a script (a file, or Python `source` text) as `hosts` JAX processes; return their outputs."""
    if (script_path is None) == (source is None):
        raise ValueError("pass either a script path or source='...python code...', not both")
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
        cmd = [sys.executable, str(path), *map(str, args)]
        return _launch(cmd, hosts=hosts, devices_per_host=devices_per_host, timeout=timeout,
                       display=display)


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
        if not opts.verbose and (clean_stdout(line) if stream == "stdout"
                                 else clean_stderr(line)) == "":
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
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        result = _launch([sys.executable, str(path.resolve()), *opts.args], hosts=opts.hosts,
                         devices_per_host=opts.devices_per_host, timeout=opts.timeout,
                         display={}, on_line=on_line, on_retry=on_retry,
                         verbose=opts.verbose)
    except KeyboardInterrupt:
        print("[launch] interrupted; stopped every host", file=sys.stderr)
        return 130
    except ValueError as err:
        print(f"[launch] {err}", file=sys.stderr)
        return 2
    print(f"[launch] {opts.hosts} hosts x {opts.devices_per_host} devices: {result.message}",
          file=sys.stderr)
    if result.ok:
        return 0
    return 124 if any(h.status == "timed out" for h in result.hosts) else 1


if __name__ == "__main__":
    sys.exit(main())
