"""Shared by the tests that start real processes: which of them are still running."""
import psutil


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
