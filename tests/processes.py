"""Shared by the tests that start real processes: which of them are still running."""
import time

import psutil

_POLL_SECONDS = 0.05


def alive(pids) -> list[int]:
    """The pids that still run (zombies, already dead, do not count)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def survivors(pids, within: float = 10.0) -> list[int]:
    """The pids still running after waiting up to `within` seconds for them all to end.

    Tests assert `not survivors(pids)`: a process that ends a moment late (the kernel reaps
    a killed group asynchronously) passes, one that outlives the deadline fails.
    """
    deadline = time.monotonic() + within
    while (running := alive(pids)) and time.monotonic() < deadline:
        time.sleep(_POLL_SECONDS)
    return running
