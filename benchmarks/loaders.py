"""Section 7: examples per second per host, Grain's per-host loader against notebook 07's numpy one.

In a real 2 x 4 run (benchmarks/launched_stack.py loaders) every host reads its rows of each
global batch, with `helpers.training.tiny.host_batch` (notebook 07) or `helpers.training.data.HostLoader`
(Grain, notebook 11), alone and then followed by `jax.make_array_from_process_local_data`.
"""
from __future__ import annotations

from benchmarks.measure import log, record, run_stack, slowest
from benchmarks.tables import md_table

KEY = "loaders"
TITLE = "Loading: Grain's per-host loader against notebook 07's numpy loader"
MESH = (2, 4)  # (hosts, devices per host)
LOADERS = {"numpy": "notebook 07's numpy loader (`train.host_batch`)",
           "grain": "Grain `HostLoader` (notebook 11)"}
STAGES = {"read": "read only", "assembled": "read + `make_array_from_process_local_data`"}
FULL = {"global_batches": [256, 2048], "steps": 20, "reps": 3}
QUICK = {"global_batches": [256], "steps": 3, "reps": 1}


def bench_name(batch, loader: str, stage: str) -> str:
    return f"loaders/batch {batch}/{loader}/{stage}"


def measure_loaders(results, global_batches: list[int], steps: int, reps: int) -> dict:
    log(f"loaders: {len(LOADERS)} loaders on {MESH[0]} x {MESH[1]}, batches {global_batches}, "
        f"{steps} steps x {reps} repetition(s)")
    lines = run_stack("loaders", *MESH, global_batches=global_batches, steps=steps, reps=reps)
    for batch in global_batches:
        for loader in LOADERS:
            for stage in STAGES:  # seconds per step, the slowest host's
                per_step = [t / steps for t in slowest(lines, stage, f"{batch}/{loader}")]
                results.add(record(bench_name(batch, loader, stage), per_step))
    return {"batches": global_batches, "steps": steps, "reps": reps,
            "rows_per_host": lines[0]["rows_per_host"]}


def measure(results, opts) -> None:
    results.sections[KEY] = measure_loaders(results, **(QUICK if opts.quick else FULL))


def examples_per_second(results, batch, loader: str, stage: str, rows: int) -> float:
    """A host's examples per second: its rows of one step over the median time of a step."""
    return rows / results.median(bench_name(batch, loader, stage))


def render(results) -> str:
    data = results.sections[KEY]
    rows, ratios = [], []
    for batch in data["batches"]:
        per_host = data["rows_per_host"][str(batch)]
        rate = {(loader, stage): examples_per_second(results, batch, loader, stage, per_host)
                for loader in LOADERS for stage in STAGES}
        for loader, label in LOADERS.items():
            rows.append([f"{batch} ({per_host} per host)", label,
                         *[f"{rate[loader, stage]:,.0f}" for stage in STAGES]])
        ratios.append(rate["numpy", "assembled"] / rate["grain", "assembled"])
    table = md_table(["global batch", "loader",
                      *[f"examples/s per host: {text}" for text in STAGES.values()]], rows)
    return table + "\n\n" + (
        f"Every host of a real {MESH[0]}-host × {MESH[1]}-device run reads its own rows of "
        f"{data['steps']} consecutive global batches, with notebook 07's numpy loader (slicing "
        f"the in-memory table) or with notebook 11's Grain `HostLoader` (one seeded shuffle "
        f"shared by every host, a record at a time from a random-access source), first alone "
        f"and then each step's x and y passed to `jax.make_array_from_process_local_data` and "
        f"waited for. Examples per second per host are a host's rows of a step over the median "
        f"step time of the slowest host, {data['reps']} repetition(s) after a warm-up pass, "
        f"each started after a barrier. With both assembling, the numpy loader delivers "
        f"{' and '.join(f'{r:.1f}×' for r in ratios)} the examples per second of Grain's at "
        f"global batches {' and '.join(map(str, data['batches']))}. The numpy loader slices "
        f"consecutive rows of the table in one call; Grain fetches its rows one record at a "
        f"time through its shuffled index (`ArrayRecords.__getitem__` is Python, called once "
        f"per record) and then stacks them, so its examples per second barely change with the "
        f"batch while the numpy loader's grow with it.")
