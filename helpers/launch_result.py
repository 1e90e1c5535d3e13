"""What a multi-process run produced, and how to show it: text for nbval, HTML columns for Jupyter.

Everything shown is deterministic (no ports, pids, timings, temp paths), so notebook outputs
compare equal between runs.
"""
from __future__ import annotations

import dataclasses
import html
import re

__all__ = ["HostResult", "RunResult", "LaunchError", "LOG_NOISE", "clean_stdout", "clean_stderr"]

TAIL_LINES = 15

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
)
LOG_NOISE = re.compile("^(?:" + "|".join(LOG_NOISE_PATTERNS) + ")")


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
    status: str  # "ok", "failed", "stopped" (because another host failed), "timed out"
    returncode: int | None  # None when the launcher stopped it
    stdout: str  # the script's stdout, gloo chatter removed
    stderr: str  # everything the process wrote to stderr

    @property
    def ok(self) -> bool:
        """True when this host finished with exit code 0."""
        return self.status == "ok"

    def error_tail(self, lines: int = TAIL_LINES) -> str:
        """The last `lines` lines of stderr, log noise removed."""
        kept = clean_stderr(self.stderr).rstrip("\n").splitlines()
        return "\n".join(kept[-lines:])

    @property
    def label(self) -> str:
        """'host 1 (failed, exit code 1)' and the like."""
        if self.status == "failed":
            return f"host {self.host} (failed, exit code {self.returncode})"
        return f"host {self.host}" + ("" if self.ok else f" ({self.status})")


@dataclasses.dataclass(frozen=True)
class RunResult:
    """The outcome of `helpers.launch.run`: per-host outputs, and what went wrong if anything."""

    hosts: tuple[HostResult, ...]
    devices_per_host: int
    message: str  # one deterministic sentence: what happened
    pids: tuple[int, ...] = dataclasses.field(default=(), repr=False, compare=False)
    attempts: int = dataclasses.field(default=1, repr=False, compare=False)

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

    def __str__(self) -> str:
        out = [f"{len(self.hosts)} hosts x {self.devices_per_host} devices: {self.message}"]
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
        return (
            f'<div><div style="color:{colour};font-weight:bold">'
            f"{len(self.hosts)} hosts x {self.devices_per_host} devices: "
            f"{html.escape(self.message)}</div>"
            f'<table style="border-collapse:collapse"><tr>{"".join(heads)}</tr>'
            f'<tr>{"".join(cells)}</tr></table></div>'
        )
