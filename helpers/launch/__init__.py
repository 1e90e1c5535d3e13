"""Run one script as several real JAX processes ("hosts") on this machine.

    python -m helpers.launch --hosts 2 --devices-per-host 4 train.py --steps 10

or, from a notebook, `run("train.py", hosts=2, devices_per_host=4)`. With `--max-restarts N`
(`run(..., max_restarts=N)`) a failed run starts again, every host, at most N times. Host i is
an OS process with D fake CPU devices; the script calls `helpers.launch.initialize()` first,
which joins the run (jax.distributed, coordinator on 127.0.0.1, gloo collectives). With
`--netns` (`run(..., netns=True)`, root only) each host is in a network namespace of its own,
at its own address. The same script also runs under mpirun/srun (initialize falls back to
JAX's cluster auto-detection) or alone.

The launcher is also the tool that explains a broken run: a host that fails (exception,
non-zero exit status, signal) stops the others at once, and the result says for every host
how it ended or which line of the script it was at, and the last line it printed.

The package, one module a job:
  runner   starts, watches and stops the hosts: `run`
  host     the launcher's side inside each host: `initialize`, and how a host runs its script
  result   what a run produced (`RunResult`, `HostResult`), as text and as HTML
  stall    what each host of a stopped run was doing, in terms of the learner's code
  activity what a silent host is doing, from its CPU: busy, waking or idle
  job      a job restarted after a failure (`JobResult`)
  warm     hosts forked from a process that has already imported JAX
  netns    --netns: every host in a network namespace of its own
  cli      the command line (`python -m helpers.launch`)

This file names what a script or notebook uses; nothing else is defined here.
"""
from helpers.launch.host import initialize
from helpers.launch.job import JobResult
from helpers.launch.netns import HostsApartError
from helpers.launch.result import HostResult, LaunchError, RunResult
from helpers.launch.runner import run

__all__ = ["run", "initialize", "RunResult", "HostResult", "JobResult", "LaunchError",
           "HostsApartError"]
