"""Section 12: the floor every host of every real-process run pays, side by side with other pins.

A fresh process imports jax, makes a (2, 4) mesh of 8 fake CPU devices and runs one jitted sum
on it. `make bench-floor` times it here and in the course's environments at its last commit on
jax 0.10.2 (benchmarks/floor_envs.py builds them); FLOOR_AGAINST="PYTHON ..." names other
environments (another jax pin, another Python), whose runs take turns with this one's, so a drift
of the machine's speed touches them alike. Each run is timed from the parent, start to exit.

    python -m benchmarks.run --only floor --floor-against OLD_VENV/bin/python
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from benchmarks.measure import log, record
from benchmarks.tables import fmt_s, md_table

KEY = "floor"
TITLE = "The floor of every host: start, import jax, one jitted op on 8 devices"
RUNS = {"quick": 3, "full": 9}
PROGRAM = """
import sys, jax, jax.numpy as jnp
mesh = jax.make_mesh((2, 4), ("host", "device"))
x = jax.device_put(jnp.arange(8.0), jax.sharding.NamedSharding(mesh, jax.P(("host", "device"))))
assert float(jax.jit(jnp.sum)(x)) == 28.0
print(jax.__version__, "%d.%d.%d" % sys.version_info[:3])
"""
ENV = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}


def one_run(python: str) -> tuple[float, str]:
    """Seconds from start to exit of one floor process, and 'JAX_VERSION PYTHON_VERSION' it printed."""
    start = time.perf_counter()
    done = subprocess.run([python, "-c", PROGRAM], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **ENV})
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"{python}: the floor program failed (exit status {done.returncode}): {last}")
    return seconds, done.stdout.strip()


def environment(python: str) -> str:
    """The environment's directory and how many packages it holds: jax imports etils and filelock
    when they are installed, so only environments with the same packages compare like with like."""
    done = subprocess.run([python, "-c", DESCRIBE], capture_output=True, text=True, timeout=60)
    return done.stdout.strip() or "?"


DESCRIBE = """
import sys, os, importlib.metadata as m
print(f"{os.path.relpath(sys.prefix)} ({len({d.metadata['Name'].lower() for d in m.distributions()})} packages)")
"""


def time_pythons(pythons: list[str], runs: int) -> list[dict]:
    """For each Python: its jax and Python versions, its environment and the seconds of each run,
    runs interleaved; one warm-up run each first (the OS's file cache)."""
    versions = [one_run(p)[1].split() for p in pythons]
    seconds: list[list[float]] = [[] for _ in pythons]
    for _ in range(runs):
        for i, python in enumerate(pythons):
            seconds[i].append(one_run(python)[0])
    return [{"python_path": p, "jax": v[0], "python": v[1], "environment": environment(p), "seconds": t}
            for p, v, t in zip(pythons, versions, seconds)]


def bench_name(row: dict) -> str:
    return f"floor/jax {row['jax']} on Python {row['python']}"


def measure(results, opts) -> None:
    runs = RUNS["quick" if opts.quick else "full"]
    pythons = [sys.executable, *getattr(opts, "floor_against", [])]
    log(f"floor: {runs} runs each of {len(pythons)} environment(s), interleaved")
    rows = time_pythons(pythons, runs)
    for row in rows:
        results.add(record(bench_name(row), row["seconds"]))
    results.sections[KEY] = {"runs": runs, "rows": rows}


def render(results) -> str:
    data = results.sections[KEY]
    rows = data["rows"]
    first = statistics.median(rows[0]["seconds"])
    table = [[f"jax {r['jax']}", f"Python {r['python']}", f"`{r.get('environment', '?')}`",
              f"{fmt_s(statistics.median(r['seconds']))} ({fmt_s(min(r['seconds']))}–{fmt_s(max(r['seconds']))})",
              f"{statistics.median(r['seconds']) / first:.2f}×"] for r in rows]
    text = (f"A fresh process that imports jax, makes a (2, 4) mesh of 8 fake CPU devices and runs one "
            f"jitted sum, timed from its start to its exit: median (min–max) of {data['runs']} runs per "
            f"environment, the environments' runs taking turns. Every host of every real-process run "
            f"pays this before it does any work. The first row is the course's environment; the "
            f"target for a new pin is at most 1.20× the pin it replaces, in the course's environment "
            f"at that pin (`make bench-floor` builds it from that commit's lock with "
            f"`benchmarks/floor_envs.py`). jax imports etils and filelock when they are installed "
            f"(`python -X importtime -c 'import jax'` shows them under `jax._src.path` and "
            f"`jax._src.lru_cache`), so a venv with jax alone starts faster on any pin and is no "
            f"fair comparison.")
    return (text + "\n\n" + md_table(["jax", "Python", "environment", "process", "× the first row"], table)
            + pin_ratios(rows))


def pin_ratios(rows: list[dict]) -> str:
    """One sentence: the first row's floor over each row on another jax, the figure the target names."""
    first = statistics.median(rows[0]["seconds"])
    others = [f"{first / statistics.median(r['seconds']):.2f}× jax {r['jax']}'s on Python {r['python']}"
              for r in rows[1:] if r["jax"] != rows[0]["jax"]]
    if not others:
        return ""
    return f"\n\nThe course's floor on jax {rows[0]['jax']} is " + " and ".join(others) + "."


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmarks.jax_floor [PYTHON ...]`: the table, printed, without a report."""
    rows = time_pythons([sys.executable, *(argv if argv is not None else sys.argv[1:])], RUNS["full"])
    first = statistics.median(rows[0]["seconds"])
    for r in rows:
        median = statistics.median(r["seconds"])
        print(f"jax {r['jax']:10} Python {r['python']:7} {median:6.2f} s "
              f"({min(r['seconds']):.2f}-{max(r['seconds']):.2f}), {median / first:.2f}x  {r['python_path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
