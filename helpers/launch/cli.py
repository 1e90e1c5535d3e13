"""The launcher on the command line (`python -m helpers.launch`, through `__main__`).

    python -m helpers.launch --hosts 2 --devices-per-host 4 train.py --steps 10

Every host's lines appear as they are printed, prefixed `[host N]`; the run's outcome follows
on stderr. Exit status: 0 when every host finished, 1 when one failed, 124 when the launcher
stopped a hang, 130 on Ctrl-C, 2 for bad input.
"""
from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Sequence

from helpers.launch import netns
from helpers.launch.job import JobResult
from helpers.launch.netns import HostsApartError
from helpers.launch.result import RunResult, clean_stderr, clean_stdout
from helpers.launch.runner import Limits, launch, restarted

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
                        f"address in {netns.NETWORK}, hostname and /etc/hosts, as on a cluster")
    p.add_argument("--etc-hosts", choices=netns.ETC_HOSTS, default="address",
                   help="with --netns: what each host's /etc/hosts maps its hostname to (loopback: "
                        f"{netns.DEBIAN_LOOPBACK}, which breaks gloo; default: address)")
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
        if why := netns.unavailable():
            print(f"[launch] {why}", file=sys.stderr)
            return 2
        print(f"[launch] {netns.addresses_line(opts.hosts)}", file=sys.stderr, flush=True)

    def launch_once(extra: Sequence[str] = ()) -> RunResult:
        result = launch(path.resolve(), [*opts.args, *extra], hosts=opts.hosts,
                         devices_per_host=opts.devices_per_host, limits=Limits(opts.timeout, opts.grace, opts.stall),
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
            result = restarted(launch_once, opts.max_restarts, shlex.split(opts.restart_args),
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
