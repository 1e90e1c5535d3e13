"""The floor every host of every real-process run pays: a fresh process that imports jax, makes a
(2, 4) mesh of 8 fake CPU devices and runs one jitted sum on it.

    python -m benchmarks.jax_floor                      # this environment's Python, 9 runs
    python -m benchmarks.jax_floor OTHER/bin/python     # side by side with another environment's
                                                        #   (another jax pin), runs interleaved

Each run is timed from the parent (process start to exit); the runs of the environments take
turns, so a drift of the machine's speed touches both alike. Prints the median and min-max of
each, and the ratio of the medians.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

PROGRAM = """
import jax, jax.numpy as jnp
mesh = jax.make_mesh((2, 4), ("host", "device"))
x = jax.device_put(jnp.arange(8.0), jax.sharding.NamedSharding(mesh, jax.P(("host", "device"))))
assert float(jax.jit(jnp.sum)(x)) == 28.0
print(jax.__version__)
"""
ENV = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}


def one_run(python: str) -> tuple[float, str]:
    """Seconds from start to exit of one floor process, and the jax version it printed."""
    start = time.perf_counter()
    done = subprocess.run([python, "-c", PROGRAM], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **ENV})
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"{python}: the floor program failed (exit status {done.returncode}): {last}")
    return seconds, done.stdout.strip()


def measure(pythons: list[str], runs: int) -> dict[str, dict]:
    """For each Python: its jax version and the seconds of each run; one warm-up run each first."""
    times: dict[str, list[float]] = {p: [] for p in pythons}
    versions = {p: one_run(p)[1] for p in pythons}  # warm-up: the OS's file cache, bytecode
    for _ in range(runs):
        for python in pythons:
            times[python].append(one_run(python)[0])
    return {p: {"jax": versions[p], "seconds": times[p]} for p in pythons}


def report(results: dict[str, dict]) -> str:
    rows = []
    first = None
    for python, r in results.items():
        median = statistics.median(r["seconds"])
        first = first or median
        rows.append(f"jax {r['jax']:10} {median:6.2f} s ({min(r['seconds']):.2f}-{max(r['seconds']):.2f}), "
                    f"{median / first:.2f}x the first  ({python})")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.jax_floor", description=__doc__.splitlines()[0])
    parser.add_argument("others", nargs="*", help="other environments' Pythons, measured beside this one")
    parser.add_argument("--runs", type=int, default=9)
    opts = parser.parse_args(argv)
    print(report(measure([sys.executable, *opts.others], opts.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
