"""What a silent host is doing: busy on the CPU, waking up in a loop, or idle (waiting).

A host that prints nothing is either computing (a loop that never ends, a long compile) or
waiting (in a collective another host never joins, at a barrier). Its stack dump does not always
tell. A host that waits for a result shows JAX's frames above the learner's line (`_value` in
jax/_src/array.py: waiting for the devices), since JAX dispatches a jitted call asynchronously and
the host waits where it reads the result. But a compiled jitted call has no Python frame of its
own, and where the runtime runs the program inside the call (measured here: a CPU host with one
device), a host blocked in it shows only the learner's line, exactly like a loop. Its CPU time can
tell. The launcher samples
each host from /proc (Linux) every SAMPLE_SECONDS: the CPU time of the host and of its child
processes (a data loader's workers), and of its main thread (whose id is the process id), with
the number of times that thread went to sleep of its own accord; and, per thread, the time it
ran or waited for a core (its schedstat). Over a window of samples:

  busy    the main thread used at least BUSY_SHARE of a core, or the host and its children did,
          or one thread ran or waited for a core at least WANTED_SHARE of the time (a loop that
          computes; a compile, even one that a loaded machine leaves no core to)
  waking  the main thread used little CPU but woke at least WAKEUPS times a second
          (a loop around `time.sleep`, polling)
  idle    none of that: the host is blocked, waiting for something outside itself

Measured on the course's 2-core machine: a host blocked in a gloo collective used about 0.01 s
of CPU a second, its main thread none, and that thread woke about 5 times a second (jaxlib's
wait for the result looks again now and then); a `while True: pass` loop used 0.35-1 s a second;
a loop around `time.sleep(0.01)` woke about 100 times a second. Loaded by two test workers
besides, in 20 runs of notebook 12's spinning host beside a waiting one: no thread of the
waiting host ran or waited for a core more than 0.034 s a second, the spinning loop's 0.99-1.0 s.
(A snapshot of thread states cannot tell these apart: some helper thread of the waiting host was
caught ready to run in 4 of 6 samples, one of them in 3.) Where /proc is missing (macOS), every
host is "" (not known) and the launcher has only its stall limit.
"""
from __future__ import annotations

import collections
import dataclasses
import os

import psutil

__all__ = ["Watch", "ACTIVITIES", "SAMPLE_SECONDS", "WINDOW_SECONDS", "main_thread_waits"]

SAMPLE_SECONDS = 0.25
WINDOW_SECONDS = 2.0  # the span a verdict looks at
BUSY_SHARE = 0.1  # CPU seconds per second
WANTED_SHARE = 0.5  # seconds per second that one thread ran or waited for a core
WAKEUPS = 25.0  # the main thread's voluntary context switches per second
# What each activity means, in the words a result uses.
ACTIVITIES = {"busy": "busy on the CPU", "waking": "waking up again and again", "idle": "idle, waiting"}
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclasses.dataclass(frozen=True)
class _Sample:
    at: float  # time.monotonic()
    host_cpu: float  # seconds: the process, its reaped children and its live ones
    main_cpu: float  # seconds: the main thread
    wakeups: int  # the main thread's voluntary context switches
    wanted: dict[int, int]  # per thread: the nanoseconds it has run or waited for a core


def _stat_fields(path: str) -> list[str]:
    """The fields of a /proc stat file after 'pid (name)': its field 3 (the state) onwards."""
    with open(path, encoding="ascii") as f:
        return f.read().rsplit(")", 1)[1].split()


def _stat_cpu(path: str, children: bool = False) -> float:
    """utime + stime (+ cutime + cstime) of a /proc stat file, in seconds."""
    fields = _stat_fields(path)
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / _TICKS


def main_thread_waits(pid: int) -> bool:
    """Whether the host's main thread is asleep this moment (state S or D: blocked in a collective,
    a lock, I/O), not running or ready to run. True for a process that is gone or unreadable."""
    try:
        return _stat_fields(f"/proc/{pid}/task/{pid}/stat")[0] in "SD"
    except (OSError, IndexError):
        return True


def _threads(pid: int) -> tuple[dict[int, int], list[int]]:
    """Per thread of the process, the nanoseconds it has run or waited for a core (from its
    schedstat); and the processes its threads started (from /proc's children files, psutil where
    there are none)."""
    wanted, children, listed = {}, [], True
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as f:
                ran, waited = f.read().split()[:2]
            wanted[int(tid)] = int(ran) + int(waited)
        except OSError:  # a thread that has just ended, or a kernel without schedstat files
            pass
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                children += [int(c) for c in f.read().split()]
        except FileNotFoundError:  # a thread that has just ended, or a kernel without children files
            listed = listed and os.path.exists(f"/proc/{pid}/task/{tid}")
        except OSError:
            continue
    if not listed:
        children = [c.pid for c in psutil.Process(pid).children()]
    return wanted, children


def _sample(pid: int, at: float) -> _Sample | None:
    try:
        host_cpu = _stat_cpu(f"/proc/{pid}/stat", children=True)
        main_cpu = _stat_cpu(f"/proc/{pid}/task/{pid}/stat")
        with open(f"/proc/{pid}/task/{pid}/status", encoding="ascii") as f:
            wakeups = next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
        wanted, children = _threads(pid)
        while children:  # and their children's, down the tree
            child = children.pop()
            try:
                host_cpu += _stat_cpu(f"/proc/{child}/stat")
                children += _threads(child)[1]
            except OSError:  # it ended between the listing and the read; reaped, it counts in cutime
                continue
    except (OSError, ValueError, IndexError, StopIteration, psutil.Error):
        return None
    return _Sample(at, host_cpu, main_cpu, wakeups, wanted)


class Watch:
    """One host's recent samples, and what they say it was doing."""

    def __init__(self, pid: int):
        self.pid = pid
        self._samples: collections.deque[_Sample] = collections.deque()

    def sample(self, now: float) -> None:
        """Take a sample; keep the ones of the last window (and the one just before it)."""
        taken = _sample(self.pid, now)
        if taken is None:
            return
        self._samples.append(taken)
        while len(self._samples) > 2 and self._samples[1].at <= now - WINDOW_SECONDS:
            self._samples.popleft()

    def activity(self, since: float | None = None) -> str:
        """'busy', 'waking' or 'idle' over the last window, counted from `since` at the earliest
        (the host's last printed line: what came before is not the silence); '' if the samples
        cover less than half a window."""
        samples = [s for s in self._samples if since is None or s.at >= since]
        if len(samples) < 2 or samples[-1].at - samples[0].at < WINDOW_SECONDS / 2:
            return ""
        first, last = samples[0], samples[-1]
        seconds = last.at - first.at
        if (last.main_cpu - first.main_cpu) / seconds >= BUSY_SHARE \
                or (last.host_cpu - first.host_cpu) / seconds >= BUSY_SHARE:
            return "busy"
        if (last.wakeups - first.wakeups) / seconds >= WAKEUPS:  # before `wanted`: on a loaded machine
            return "waking"  # a loop around a sleep waits for a core after each wake-up
        wanted = max((ns - first.wanted.get(tid, 0) for tid, ns in last.wanted.items()), default=0)
        return "busy" if wanted / 1e9 / seconds >= WANTED_SHARE else "idle"
