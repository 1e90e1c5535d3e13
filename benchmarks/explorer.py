"""Section 3: how long the sharding explorer of notebook 02 takes to redraw."""
from __future__ import annotations

import time

from benchmarks.measure import in_process_runner, log, run_worker
from benchmarks.tables import fmt_bench, fmt_s, md_table

KEY = "explorer"
TITLE = "Interactivity: the sharding explorer's redraw"
MESHES = {4: (2, 2), 8: (2, 4), 16: (4, 4)}  # devices: (hosts, devices per host)
SHAPE = "16, 16"
SPECS = [["'host'", "'device'", "None"], ["('host', 'device')", "None", "None"],  # valid on all
         ["'device'", "'host'", "None"], ["None", "('host', 'device')", "None"]]
KINDS = ("spec-only", "mesh-changed")


def bench_name(devices: int, kind: str) -> str:
    return f"explorer/{devices} devices/{kind} redraw"


def worker(hosts: int, devices_per_host: int, renders: int) -> tuple[list, dict]:
    """Time ExplorerState.render: the first one, then `renders` redraws of each kind (pyperf)."""
    from helpers.pictures.explorer import ExplorerState

    state = ExplorerState(hosts=hosts, devices_per_host=devices_per_host, shape=SHAPE,
                          spec=list(SPECS[-1]))
    t = time.perf_counter()
    previous = state.render()
    first = time.perf_counter() - t
    counter, cached = [0], [True]

    def redraw(loops: int, change_mesh: bool) -> float:
        nonlocal previous
        elapsed = 0.0
        for _ in range(loops):
            i = counter[0] = counter[0] + 1
            state.spec = list(SPECS[i % len(SPECS)])  # every redraw follows a change
            if change_mesh:
                state.order = ("interleaved", "contiguous")[i % 2]
            t = time.perf_counter()
            result = state.render()
            elapsed += time.perf_counter() - t
            if result.error:
                raise RuntimeError(f"explorer error: {result.error}")
            if not change_mesh:  # the mesh picture is kept while the mesh stays the same
                cached[0] = cached[0] and result.mesh_png is previous.mesh_png is not None
            previous = result
        return elapsed

    runner = in_process_runner(loops=1, values=renders, warmups=0)
    devices = hosts * devices_per_host
    benchmarks = [runner.bench_time_func(bench_name(devices, kind), redraw, kind == KINDS[1])
                  for kind in KINDS]
    return benchmarks, {"first": first, "mesh_cached": cached[0], "mesh": [hosts, devices_per_host]}


def measure(results, opts) -> None:
    renders = 8 if opts.quick else 15
    data = {"renders": renders, "meshes": {}}
    for devices, (hosts, per_host) in MESHES.items():
        log(f"explorer: {devices} devices ({hosts} x {per_host}), {renders} + {renders} redraws")
        benchmarks, facts = run_worker("benchmarks.explorer:worker", devices, hosts=hosts,
                                       devices_per_host=per_host, renders=renders)
        results.add(*benchmarks)
        data["meshes"][str(devices)] = facts
    results.sections[KEY] = data


def render(results) -> str:
    data = results.sections[KEY]
    cached = all(d["mesh_cached"] for d in data["meshes"].values())
    kinds = KINDS if cached else KINDS[:1]
    meshes = sorted(data["meshes"].items(), key=lambda item: int(item[0]))  # JSON keys are text
    rows = [[f"{devices} ({d['mesh'][0]} hosts × {d['mesh'][1]})", fmt_s(d["first"]),
             *[fmt_bench(results.benchmarks[bench_name(int(devices), k)], "p95") for k in kinds]]
            for devices, d in meshes]
    headers = ["devices (mesh)", "first render",
               *[f"{k} redraw: median (p95)" if cached else "redraw: median (p95)" for k in kinds]]
    worst = max(results.benchmarks[bench_name(int(devices), kinds[-1])].percentile(95)
                for devices in data["meshes"])
    prose = (
        f"How long the sharding explorer of notebook 02 takes to redraw after a control changes: "
        f"`ExplorerState(...).render()` (layout, text and the PNG pictures) for an array of shape "
        f"({SHAPE}), in a fresh process per device count with that many fake devices. "
        f"Each redraw follows a change of the PartitionSpec entries, so none is a no-op; "
        f"{data['renders']} redraws each, timed by pyperf."
    )
    if cached:
        prose += (" The state keeps the mesh picture while hosts, devices per host and order stay "
                  "the same, so a spec-only change redraws only the sharding picture; the "
                  "mesh-changed column also flips the mesh order before each redraw, so both "
                  "pictures are drawn.")
    prose += (f" The first render also pays for building the first mesh and matplotlib's first "
              f"figure. The slowest p95 here is {fmt_s(worst)}; the widget itself adds copying "
              f"the control values in and the PNG bytes out to the browser.")
    return md_table(headers, rows, "l" + "r" * (len(headers) - 1)) + "\n\n" + prose
