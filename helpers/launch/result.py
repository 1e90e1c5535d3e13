"""What a multi-process run produced, and how to show it: text for nbval, HTML columns for Jupyter.

Everything shown is deterministic (no ports, pids, timings, temp paths), so notebook outputs
compare equal between runs.
"""
from __future__ import annotations

import dataclasses
import html
import re
import signal
from typing import Sequence

__all__ = ["HostResult", "RunResult", "LaunchError", "LOG_NOISE", "clean_stdout", "clean_stderr",
           "describe_exit", "fatal_message", "hosts_text"]

TAIL_LINES = 15
# What a host prints on stderr when its script has ended and JAX's exit barrier begins.
SCRIPT_ENDED = "[helpers.launch] the script ended; JAX now waits at exit for every other host"

# The one list of log noise: lines that JAX, absl, XLA and gloo print on their own, not the
# learner's script. The launcher drops them from what hosts printed; the tests' nbval filter too.
LOG_NOISE_PATTERNS = (
    r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s",  # absl / glog lines
    r"WARNING: All log messages before absl::InitializeLog\(\) is called",
    r"\*\*\* Check failure stack trace: \*\*\*",
    r"\s*@\s+0x[0-9a-f]+\s",  # native stack frames
    r"\[Gloo\] Rank \d+ is connected",
    r"An NVIDIA GPU may be present on this machine",
    r"Platform '\w+' is experimental",
    r"\[helpers\.launch\] the script ended",
    r"(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):",  # a stack dump the
    r'  File "[^"]*", line \d+ in ',  # launcher asked for (its frames have no comma)
    # the continuation lines of a coordination-service record (on stderr when a bare host's
    # native log is not kept apart): which RPC failed, and gRPC's own status
    r"Additional GRPC error information from remote target ",
    r":[A-Z_]+:Error received from peer ",
)
LOG_NOISE = re.compile("^(?:" + "|".join(LOG_NOISE_PATTERNS) + ")")
# A fatal record of absl's log (the reason a host aborted): 'F1130 08:29:06.212153  24958 client.h:80] ...'.
_FATAL_RECORD = re.compile(r"^F\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+\S+:\d+\] (.*)$", re.MULTILINE)


# What JAX says when jax.distributed.initialize() gets no arguments and detects no cluster it knows.
_BARE_INITIALIZE_ERRORS = ("Number of processes must be defined", "coordinator_address should be defined")
BARE_INITIALIZE_ADVICE = (
    "your script calls jax.distributed.initialize() with no arguments, which finds its job only on a cluster JAX "
    "detects (SLURM, Open MPI, Kubernetes, Cloud TPU), and this launcher is none of them. Write "
    "`from helpers.launch import initialize; initialize()` (plain jax.distributed.initialize() on those "
    "clusters), or pass what the launcher sets: jax.distributed.initialize(os.environ['JAX_COORDINATOR_ADDRESS'], "
    "int(os.environ['JAX_NUM_PROCESSES']), int(os.environ['JAX_PROCESS_ID']))")


def describe_exit(returncode: int | None) -> str:
    """'exit status 3', 'killed by SIGABRT'; how a process ended, from its return code."""
    if returncode is None:
        return "still running"
    if returncode >= 0:
        return f"exit status {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def fatal_message(log: str) -> str:
    """The first fatal record of a native log, on one line ('' if none): why a host aborted."""
    found = _FATAL_RECORD.search(log)
    if not found:
        return ""
    lines = [found.group(1)]
    for line in log[found.end():].splitlines()[1:]:  # the record's continuation lines
        if LOG_NOISE.match(line) or line.startswith("***"):
            break
        if line.strip():
            lines.append(line)
    text = " ".join(line.strip() for line in lines)
    return re.sub(r"\s*\[type\.googleapis\.com/[^\]]*\]", "", text)


def _fold_library_frames(lines: list[str]) -> list[str]:
    """A traceback with each run of frames inside installed packages folded into one line."""
    out: list[str] = []
    folded = 0
    for line in lines:
        if line.startswith('  File "site-packages/'):
            folded += 1
            continue
        if folded and line.startswith("    "):  # the folded frame's source lines
            continue
        if folded:
            out.append(f"  ... {folded} frame{'s' if folded > 1 else ''} inside site-packages ...")
            folded = 0
        out.append(line)
    return out


def hosts_text(hosts: Sequence[int]) -> str:
    """'host 1', 'hosts 0 and 1', 'hosts 0, 1 and 2'."""
    names = [str(h) for h in hosts]
    if len(names) == 1:
        return f"host {names[0]}"
    return f"hosts {', '.join(names[:-1])} and {names[-1]}"


class LaunchError(RuntimeError):
    """A multi-process run failed, timed out or could not start."""


def clean_stdout(text: str) -> str:
    """The script's own stdout, without log noise (the gloo connection chatter)."""
    return "".join(line for line in text.splitlines(keepends=True) if not LOG_NOISE.match(line))


def clean_stderr(text: str) -> str:
    """Stderr without JAX/absl/gloo log lines and native stack frames."""
    return clean_stdout(text)


@dataclasses.dataclass(frozen=True)
class HostResult:
    """One host's (process's) outcome."""

    host: int
    status: str  # "ok", "failed", "stopped" (because another host failed), "timed out" (or stalled)
    returncode: int | None  # None when the launcher stopped it
    stdout: str  # the script's stdout, gloo chatter removed
    stderr: str  # what the script's Python code wrote to stderr (a traceback, warnings)
    log: str = dataclasses.field(default="", repr=False)  # native log lines (absl, gloo)
    script_ended: bool = False  # its script had ended; it waited at JAX's exit barrier
    where: str = ""  # the script line it was at when the launcher stopped it ('' if unknown)
    # what it was doing when the launcher stopped the run: "busy", "waking", "idle" ('' if not known)
    activity: str = dataclasses.field(default="", compare=False)

    @property
    def ok(self) -> bool:
        """True when this host finished with exit status 0."""
        return self.status == "ok"

    @property
    def last_line(self) -> str:
        """The last non-empty line the script printed ('' if none)."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        return lines[-1] if lines else ""

    @property
    def state(self) -> str:
        """How this host ended: 'failed: exit status 3', 'still running at line 9: ...', ..."""
        if self.status in ("ok", "failed"):
            return ("exited" if self.ok else "failed") + f": {describe_exit(self.returncode)}"
        if self.script_ended:
            return "its script had ended; it was waiting at JAX's exit barrier for the others"
        running = "stopped by the launcher" if self.status == "stopped" else "still running"
        return running + (f" at {self.where}" if self.where else "")

    def report(self) -> str:
        """One line: this host's state and the last line it printed."""
        last = repr(self.last_line) if self.last_line else "nothing"
        return f"host {self.host}: {self.state}; last printed: {last}"

    def error_tail(self, lines: int = TAIL_LINES) -> str:
        """The last `lines` lines of stderr, log noise removed; and why it aborted, if it did."""
        kept = _fold_library_frames(clean_stderr(self.stderr).rstrip("\n").splitlines())[-lines:]
        fatal = fatal_message(self.log)
        if fatal and (self.returncode or 0) < 0:
            kept.append(f"native log, fatal: {fatal}")
        return "\n".join(kept)

    @property
    def label(self) -> str:
        """'host 1 (failed, exit code 1)' and the like."""
        if self.status == "failed":
            return f"host {self.host} (failed, {describe_exit(self.returncode)})"
        if self.status == "timed out":
            return f"host {self.host} ({'at the exit barrier' if self.script_ended else 'still running'})"
        return f"host {self.host}" + ("" if self.ok else f" ({self.status})")


@dataclasses.dataclass(frozen=True)
class RunResult:
    """The outcome of `helpers.launch.run`: per-host outputs, and what went wrong if anything."""

    hosts: tuple[HostResult, ...]
    devices_per_host: int
    message: str  # one deterministic sentence: what happened
    pids: tuple[int, ...] = dataclasses.field(default=(), repr=False, compare=False)
    attempts: int = dataclasses.field(default=1, repr=False, compare=False)
    # hosts that failed on their own, first cause first (a host whose collective lost its peer after the host that died)
    failed_first: tuple[int, ...] = dataclasses.field(default=(), repr=False, compare=False)
    # the limit (seconds) at which the launcher stopped a run that had not ended; None if it ended
    stopped_after: float | None = dataclasses.field(default=None, repr=False, compare=False)
    # when a host last printed a line (time.monotonic()); None if none did
    last_output_at: float | None = dataclasses.field(default=None, repr=False, compare=False)
    # --netns: where each host was ('host 0 at 198.18.0.1 (host0), ...'); '' on one network
    apart: str = dataclasses.field(default="", repr=False)

    @property
    def ok(self) -> bool:
        """True when every host exited with code 0."""
        return all(h.ok for h in self.hosts)

    @property
    def stdout(self) -> tuple[str, ...]:
        """Each host's stdout, indexed by host."""
        return tuple(h.stdout for h in self.hosts)

    @property
    def stderr(self) -> tuple[str, ...]:
        """Each host's raw stderr, indexed by host."""
        return tuple(h.stderr for h in self.hosts)

    @property
    def returncode(self) -> tuple[int | None, ...]:
        """Each host's exit code (None where the launcher stopped it), indexed by host."""
        return tuple(h.returncode for h in self.hosts)

    @property
    def failed_hosts(self) -> tuple[int, ...]:
        """Hosts that exited with a non-zero code on their own."""
        return tuple(h.host for h in self.hosts if h.status == "failed")

    def check(self) -> "RunResult":
        """Return self if every host succeeded, else raise LaunchError with the details."""
        if not self.ok:
            raise LaunchError(str(self))
        return self

    raise_on_failure = check

    def report(self) -> list[str]:
        """One line per host: how it ended (or where it was stopped) and what it printed last; first, what to
        write instead of a bare jax.distributed.initialize(), if a host failed on one."""
        bare = any(error in h.stderr for h in self.hosts for error in _BARE_INITIALIZE_ERRORS)
        return ([BARE_INITIALIZE_ADVICE] if bare else []) + [h.report() for h in self.hosts]

    def __str__(self) -> str:
        out = [self.apart] if self.apart else []
        out.append(f"{len(self.hosts)} hosts x {self.devices_per_host} devices: {self.message}")
        if not self.ok:
            out += self.report()
        for h in self.hosts:
            out.append(f"--- {h.label} ---")
            if h.stdout.strip():
                out.append(h.stdout.rstrip("\n"))
            if h.status == "failed" and h.error_tail():
                out.append(f"stderr (last {TAIL_LINES} lines, log noise removed):")
                out.append(h.error_tail())
        return "\n".join(out)

    def __repr__(self) -> str:
        return str(self)

    def _repr_pretty_(self, p, cycle) -> None:  # IPython's plain-text repr
        p.text(str(self))

    def _repr_html_(self) -> str:
        colour = "#2e7d32" if self.ok else "#c62828"
        cells, heads = [], []
        for h in self.hosts:
            heads.append(f'<th style="text-align:left;padding:4px 8px">{html.escape(h.label)}</th>')
            body = f'<pre style="margin:0">{html.escape(h.stdout.rstrip(chr(10)))}</pre>'
            if h.status == "failed" and h.error_tail():
                body += ('<pre style="margin:4px 0 0;color:#c62828">'
                         f"{html.escape(h.error_tail())}</pre>")
            cells.append(f'<td style="vertical-align:top;text-align:left;padding:4px 8px;'
                         f'border-top:1px solid #ccc">{body}</td>')
        report = "".join(f'<div style="font-family:monospace">{html.escape(line)}</div>'
                         for line in ([] if self.ok else self.report()))
        apart = f'<div>{html.escape(self.apart)}</div>' if self.apart else ""
        return (
            f'<div>{apart}<div style="color:{colour};font-weight:bold">'
            f"{len(self.hosts)} hosts x {self.devices_per_host} devices: "
            f"{html.escape(self.message)}</div>{report}"
            f'<table style="border-collapse:collapse"><tr>{"".join(heads)}</tr>'
            f'<tr>{"".join(cells)}</tr></table></div>'
        )
