"""The launcher's side inside each host: how a host joins the run, and how it runs its script.

`initialize()` is the one call a course script makes first: under the course launcher it
joins the run the launcher set up (jax.distributed, coordinator on loopback, gloo
collectives); under mpirun or srun it falls back to JAX's cluster auto-detection; alone it
does nothing. `main()` is what the launcher starts in every host (`python -c`, or a fork of a
warm process: `warm_main()`): it runs the script as `python script.py` would, but ends the host
at once when the script fails, so the launcher sees the failure now.
"""
from __future__ import annotations

import faulthandler
import io
import os
import runpy
import signal
import socket
import sys
import time
import traceback

from helpers.launch import netns, warm
from helpers.launch.result import SCRIPT_ENDED

__all__ = ["initialize", "main", "warm_main", "cluster_kind", "exit_promptly_on_crash",
           "DUMP_SIGNAL"]

DUMP_SIGNAL = signal.SIGUSR1  # the launcher's question to a host it is about to stop: where are you?

_joined_via: str | None = None
_stdout_moved = False


def cluster_kind() -> str | None:
    """Which cluster launcher started this process, in the order JAX 0.12 looks (jax/_src/clusters).

    Open MPI 4's mpirun sets OMPI_MCA_orte_hnp_uri. Open MPI 5's does not (PRRTE replaced
    ORTE): since jax 0.11.2 JAX knows it by OMPI_VERSION, or by its rank variables without that
    URI, and joins it through mpi4py.
    """
    if "OMPI_MCA_orte_hnp_uri" in os.environ:
        return "Open MPI"
    ranks = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")
    if all(v in os.environ for v in ranks):
        return "Open MPI 5"
    slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID",
             "SLURM_LOCALID")
    if all(v in os.environ for v in slurm):
        return "SLURM"
    return None


def exit_promptly_on_crash() -> None:
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


def main() -> None:
    """Child side of the course launcher: run the script as `__main__`, as `python script.py` would.

    An uncaught exception, or `sys.exit(n)` with n != 0, ends the process at once with its
    status, so the launcher sees the failure now (at interpreter exit, JAX would first wait for
    every other host). A host still running at the launcher's timeout prints where it is
    (faulthandler, on SIGUSR1); one whose script ended says so before JAX's exit barrier.
    """
    netns.enter_from_env()  # --netns: first, while this process has a single thread
    script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(script)
    _die_with_launcher()
    _native_stderr_to_log()
    _native_stdout_off_the_pipe()
    faulthandler.register(DUMP_SIGNAL, all_threads=True)
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


def warm_main() -> None:
    """A warm process (helpers.launch.warm): import JAX once; each fork of it runs one host.

    Python's stdout and stderr are set apart from the native ones before the import, so what
    the imported modules keep (a logging handler's stream) writes where a cold host's would.
    """
    global _stdout_moved
    _stdout_moved = True  # each fork gets its native stdout and log from helpers.launch.warm
    sys.stdout, sys.stderr = _text_stream(os.dup(1)), _text_stream(os.dup(2))
    warm.serve(sys.stdout.fileno(), sys.stderr.fileno())  # returns in a fork only
    main()


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
    cluster = None if launcher else cluster_kind()
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
                jax.distributed.initialize(initialization_timeout=timeout)  # JAX detects the cluster
        except RuntimeError as err:
            if "before any JAX" in str(err) or "must be called before" in str(err):
                raise RuntimeError(
                    "helpers.launch.initialize() must run before anything uses JAX (even "
                    "jax.devices()). Move the call to the top of the script, right after "
                    "the imports.") from err
            raise
        exit_promptly_on_crash()
        _joined_via = "course launcher" if launcher else f"cluster auto-detect ({cluster})"
    if verbose:
        import jax

        print(f"process {jax.process_index()} of {jax.process_count()} joined via "
              f"{_joined_via}; {jax.local_device_count()} local devices", flush=True)
    return _joined_via
