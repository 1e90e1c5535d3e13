"""Section 4: a real multi-process run through the launcher, and how much of it is JAX start-up."""
from __future__ import annotations

import json
import os
import statistics
import time

from benchmarks.measure import ROOT, log, record, run_worker
from benchmarks.tables import fmt_bench, fmt_s, md_table, times_text

KEY = "launcher"
TITLE = "The launcher: a real multi-process run, and how much of it is JAX start-up"
LAUNCHED = ROOT / "benchmarks" / "launched.py"
RUNS = [(2, 4), (4, 2)]  # (hosts, devices per host)
PHASES = [  # (label, start mark, end mark); marks are per-host timestamps, the slowest host wins
    ("process start", "launch", "entry"),
    ("import numpy + jax", "entry", "imported"),
    ("join the run (`initialize`)", "imported", "joined"),
    ("start the backend", "joined", "backend"),
    ("first psum (compile + run)", "backend", "psum"),
    ("exit and shutdown", "psum", "end"),
]
STARTUP = ("import numpy + jax", "join the run (`initialize`)", "start the backend")
ALONE = "launcher/one process alone"


def bench_name(run: str, phase: str = "wall") -> str:
    return f"launcher/{run}/{phase}"


def bench_lines(result) -> list[dict]:
    """Every host's `BENCH {json}` line of a launcher run."""
    out = []
    for text in result.stdout:
        out += [json.loads(l[len("BENCH "):]) for l in text.splitlines() if l.startswith("BENCH ")]
    return out


def startup_worker() -> tuple[list, dict]:
    """Nothing: the parent times this process's whole life (import jax, start backend, exit)."""
    import jax

    return [], {"devices": jax.device_count()}


def measure(results, opts) -> None:
    from helpers.launch import run

    for hosts, per_host in RUNS:
        name = f"{hosts} x {per_host}"
        walls, phases = [], {label: [] for label, _, _ in PHASES}
        for r in range(opts.repeats):
            t0 = time.time()
            result = run(LAUNCHED, hosts=hosts, devices_per_host=per_host, args=["hello"])
            t1 = time.time()
            result.check()
            lines = bench_lines(result)
            marks = {k: max(line[k] for line in lines)
                     for k in ("entry", "imported", "joined", "backend", "psum")}
            marks.update(launch=t0, end=t1)
            walls.append(t1 - t0)
            for label, a, b in PHASES:
                phases[label].append(marks[b] - marks[a])
            log(f"launcher: {name} run {r + 1}/{opts.repeats}: {fmt_s(walls[-1])}")
        results.add(record(bench_name(name), walls),
                    *[record(bench_name(name, label), v) for label, v in phases.items()])
    alone = []
    for r in range(opts.repeats):
        t = time.perf_counter()
        run_worker("benchmarks.launcher:startup_worker", 8)
        alone.append(time.perf_counter() - t)
        log(f"launcher: one process alone, run {r + 1}/{opts.repeats}: {fmt_s(alone[-1])}")
    results.add(record(ALONE, alone))
    results.sections[KEY] = {"runs": [f"{h} x {d}" for h, d in RUNS], "cpus": os.cpu_count()}


def render(results) -> str:
    data = results.sections[KEY]
    headers = ["run", "wall time", *[label for label, _, _ in PHASES], "JAX start-up share"]
    rows, shares, startups, imports = [], {}, {}, {}
    for name in data["runs"]:
        walls = results.values(bench_name(name))
        startup = [sum(results.values(bench_name(name, label))[i] for label in STARTUP)
                   for i in range(len(walls))]
        share = statistics.median(s / w for s, w in zip(startup, walls))
        shares[name], startups[name] = share, statistics.median(startup)
        imports[name] = results.median(bench_name(name, "import numpy + jax"))
        hosts, per_host = name.split(" x ")
        rows.append([f"`run(..., hosts={hosts}, devices_per_host={per_host})`",
                     fmt_bench(results.benchmarks[bench_name(name)]),
                     *[fmt_bench(results.benchmarks[bench_name(name, label)])
                       for label, _, _ in PHASES], f"{share:.0%}"])
    rows.append(["one process, no launcher: start Python, `import jax`, start the backend, exit",
                 fmt_bench(results.benchmarks[ALONE]), *["" for _ in PHASES], ""])
    prose = (
        f"A real multi-process run of a hello-and-psum script (`benchmarks/launched.py hello`) "
        f"through `helpers.launch.run`, {times_text(len(results.values(ALONE)))}. Every host "
        f"prints wall-clock timestamps at script entry, after `import jax`, after "
        f"`helpers.launch.initialize()`, after `jax.devices()` and after a first `psum` over all "
        f"devices; each phase is measured up to the slowest host. *JAX start-up* is import + "
        f"join + backend. The last row is one plain process that imports JAX, starts the "
        f"backend and exits, for comparison. All hosts import JAX at the same moment, and with "
        f"more processes than cores ({data['cpus']} here) they take turns on the CPU: importing "
        f"takes " + " and ".join(f"{fmt_s(imports[k])} in the {k} run" for k in imports)
        + " although each host imports the same modules. JAX start-up takes " + ", ".join(
            f"{fmt_s(startups[k])} ({v:.0%}) of the {k} run" for k, v in shares.items()) + "."
    )
    return md_table(headers, rows, "l" + "r" * (len(headers) - 1)) + "\n\n" + prose
