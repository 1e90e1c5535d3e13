"""A job the launcher restarts after a failure: every attempt's outcome, and one line for each.

`helpers.launch.run(..., max_restarts=N)` starts the whole job again (every host, with the
restart arguments added, e.g. `--resume`) after an attempt fails, at most N times, as
torchrun's elastic agent or SLURM's `--requeue` would. A `JobResult` keeps each attempt's
`RunResult` and says which host failed, how, and after which step: the highest `step N` that
begins a line of any host's output in that attempt.
"""
from __future__ import annotations

import dataclasses
import re

from helpers.launch.result import LaunchError, RunResult, describe_exit

__all__ = ["JobResult", "last_step"]

_STEP_LINE = re.compile(r"^step (\d+)\b", re.MULTILINE)


def last_step(result: RunResult) -> int | None:
    """The highest step any host of `result` printed a `step N ...` line for (None if none)."""
    steps = [int(s) for h in result.hosts for s in _STEP_LINE.findall(h.stdout)]
    return max(steps) if steps else None


def _failure(result: RunResult) -> str:
    """'host 1 (killed by SIGKILL)': the host that failed first and how, or why the launcher stopped the run."""
    if result.failed_first:
        first = result.hosts[result.failed_first[0]]
        return f"host {first.host} failed ({describe_exit(first.returncode)})"
    return result.message


@dataclasses.dataclass(frozen=True)
class JobResult:
    """The attempts of a restarted job, oldest first; the job succeeded if its last attempt did."""

    attempts: tuple[RunResult, ...]
    max_restarts: int

    @property
    def ok(self) -> bool:
        return self.attempts[-1].ok

    @property
    def last(self) -> RunResult:
        """The last attempt (the one that succeeded, if any did)."""
        return self.attempts[-1]

    @property
    def restarts(self) -> int:
        return len(self.attempts) - 1

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(pid for attempt in self.attempts for pid in attempt.pids)

    def attempt_line(self, number: int) -> str:
        """One line for attempt `number` (from 1): how it ended, and after which step."""
        result = self.attempts[number - 1]
        step = last_step(result)
        after = "" if step is None else f" after step {step}"
        if result.ok:
            return f"attempt {number}: every host finished{after}"
        return f"attempt {number}: {_failure(result)}{after}"

    @property
    def message(self) -> str:
        """One sentence: how the job ended, after how many attempts."""
        count = len(self.attempts)
        attempts = f"{count} attempt{'s' if count > 1 else ''}"
        if self.ok:
            return f"the job finished after {attempts} ({self.restarts} restart" \
                   f"{'' if self.restarts == 1 else 's'})"
        return f"the job failed {attempts} in a row; no restarts left (--max-restarts " \
               f"{self.max_restarts})"

    def report(self) -> list[str]:
        """One line per attempt, then the job's outcome."""
        return [self.attempt_line(n) for n in range(1, len(self.attempts) + 1)] + [self.message]

    def check(self) -> "JobResult":
        """Return self if the job succeeded, else raise LaunchError with every attempt's report."""
        if not self.ok:
            raise LaunchError(str(self))
        return self

    def __str__(self) -> str:
        return "\n".join(self.report() + ["--- last attempt ---", str(self.last)])

    def __repr__(self) -> str:
        return str(self)

    def _repr_pretty_(self, p, cycle) -> None:  # IPython's plain-text repr
        p.text(str(self))
