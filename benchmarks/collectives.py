"""Section 8: notebook 13's hierarchical all-reduce against the flat psum, beside the cost model.

The times come from real runs (benchmarks/launched_stack.py allreduce) on 2 x 4 and 4 x 2,
where crossing hosts means crossing processes (gloo over localhost); both programs must give
the same sums. The bytes come from `helpers.measure.traffic`'s cost model of the same compiled
programs, counted in one process with 8 fake devices (`cost_model`, run by `run_worker`).
"""
from __future__ import annotations

from benchmarks.measure import log, record, run_stack, run_worker, slowest
from benchmarks.tables import fmt_bench, md_table
from helpers.measure.allreduce import AXES, BODIES

KEY = "collectives"
TITLE = "Collectives: the hierarchical all-reduce against the flat psum"
PROGRAMS = ("flat", "hierarchical")
FULL = {"meshes": [(2, 4), (4, 2)], "columns": [2**12, 2**16], "reps": 5}
QUICK = {"meshes": [(2, 4)], "columns": [2**8], "reps": 2}


def program(mesh, name: str):
    """The shard_map of one all-reduce on `mesh`, one row per device in, the sums out."""
    import jax
    from jax.sharding import PartitionSpec as P

    return jax.jit(jax.shard_map(BODIES[name], mesh=mesh, in_specs=P(AXES), out_specs=P(AXES)))


def cost_model(meshes: list, columns: list[int]) -> tuple[list, dict]:
    """Bytes across and inside hosts of each program, by helpers.measure.traffic (one process)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from helpers.measure import traffic

    out = {}
    for hosts, devices in meshes:
        mesh = jax.make_mesh((hosts, devices), AXES, devices=jax.devices()[:hosts * devices])
        for cols in columns:
            x = jax.device_put(jnp.zeros((mesh.size, cols), jnp.float32),
                               NamedSharding(mesh, P(AXES)))
            for name in PROGRAMS:
                report = traffic.traffic(program(mesh, name), x,
                                         host_of=traffic.hosts_along(mesh))
                out[cost_key(hosts, devices, cols, name)] = {
                    "across": float(report.across_hosts), "inside": float(report.inside_hosts),
                    "busiest_device": float(report.busiest_device_across()),
                    "collectives": [c.kind for c in report.folded()]}
    return [], out


def cost_key(hosts: int, devices: int, cols: int, name: str) -> str:
    return f"{hosts}x{devices}/{cols}/{name}"


def bench_name(hosts: int, devices: int, cols: int, name: str) -> str:
    return f"collectives/{hosts} x {devices}/{cols * 4} B per device/{name}"


def measure_allreduce(results, meshes: list, columns: list[int], reps: int) -> dict:
    meshes = [tuple(m) for m in meshes]
    log(f"collectives: the cost model of {len(PROGRAMS)} all-reduces, one process")
    _, costs = run_worker("benchmarks.collectives:cost_model", 8, meshes=meshes, columns=columns)
    for hosts, devices in meshes:
        log(f"collectives: flat and hierarchical all-reduce, real {hosts} x {devices} run")
        lines = run_stack("allreduce", hosts, devices, columns=columns, reps=reps)
        for cols in columns:
            for name in PROGRAMS:
                results.add(record(bench_name(hosts, devices, cols, name),
                                   slowest(lines, "time", f"{cols}/{name}")))
    return {"meshes": [list(m) for m in meshes], "columns": columns, "reps": reps,
            "costs": costs}


def measure(results, opts) -> None:
    results.sections[KEY] = measure_allreduce(results, **(QUICK if opts.quick else FULL))


def _kib(nbytes: float) -> str:
    return f"{nbytes / 1024:,.4g} KiB" if nbytes >= 1024 else f"{nbytes:,.0f} B"


def render(results) -> str:
    data = results.sections[KEY]
    rows, faster = [], []
    for hosts, devices in data["meshes"]:
        for cols in data["columns"]:
            medians = {}
            for name in PROGRAMS:
                cost = data["costs"][cost_key(hosts, devices, cols, name)]
                bench = results.benchmarks[bench_name(hosts, devices, cols, name)]
                medians[name] = bench.median()
                rows.append([f"{hosts} × {devices}", _kib(cols * 4), name,
                             ", ".join(cost["collectives"]), _kib(cost["across"]),
                             _kib(cost["inside"]), fmt_bench(bench)])
            faster.append(medians["flat"] / medians["hierarchical"])
    table = md_table(["hosts × devices", "per device", "all-reduce", "collectives (compiled)",
                      "cost model: across hosts", "cost model: inside hosts",
                      "measured: median (min–max)"], rows, "lllrrrr")
    return table + "\n\n" + (
        "Notebook 13's two all-reduces of one row of float32 per device: the flat "
        "`psum` over `('host', 'device')`, and the hierarchical one (`psum_scatter` over "
        "`'device'`, `psum` over `'host'`, `all_gather` over `'device'`). The bytes are "
        "`helpers.measure.traffic`'s cost model of the compiled programs (ring algorithms, counted in one "
        "process with the hosts read from the mesh); the times are real runs where each host is "
        "a process and crossing hosts means gloo over localhost, the slowest host's time of "
        f"each call, median (min–max) of {data['reps']} calls after a compiling one, each "
        "started after a barrier; both programs must return the same sums. Flat time ÷ "
        f"hierarchical time: {', '.join(f'{r:.2f}×' for r in faster)} (pairs of rows in table "
        "order)"
        + ("; the hierarchical all-reduce is the faster one in every pair, as its fewer bytes "
           "across hosts suggest. " if min(faster) > 1 else ". ")
        + "The cost model counts bytes, not time: on one machine, crossing processes is a copy "
          "through localhost, and the hierarchical version runs three collectives instead of "
          "one, so fewer bytes across hosts need not make it faster here.")
