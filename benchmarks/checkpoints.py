"""Section 6: Orbax save and restore of a sharded train state, against its size, 2 x 4 -> 4 x 2.

A real 2 x 4 run (benchmarks/launched_stack.py ckpt_save) saves each state with
`helpers.training.checkpoints.save`; a real 4 x 2 run restores it onto its own mesh with
`checkpoints.restore` and checks every number came back (a difference stops the benchmark).
"""
from __future__ import annotations

import tempfile

from benchmarks.measure import log, record, run_stack, slowest
from benchmarks.tables import fmt_bench, md_table

KEY = "checkpoints"
TITLE = "Orbax: saving and restoring the train state, 2 × 4 → 4 × 2"
SAVE_MESH, RESTORE_MESH = (2, 4), (4, 2)  # (hosts, devices per host)
COURSE = "course"  # notebook 10's own train state; numbers are rows of a synthetic state
FULL = {"sizes": [COURSE, 256, 2048, 8192], "reps": 3}
QUICK = {"sizes": [COURSE, 256], "reps": 1}


def bench_name(what: str, size) -> str:
    return f"checkpoints/{what}/{size}"


def measure_sizes(results, sizes: list, reps: int) -> dict:
    """Save on SAVE_MESH, restore on RESTORE_MESH, each repetition's slowest host."""
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as directory:
        log(f"checkpoints: save {len(sizes)} states on {SAVE_MESH[0]} x {SAVE_MESH[1]}, "
            f"{reps} time(s) each after a warm-up")
        saved = run_stack("ckpt_save", *SAVE_MESH, directory=directory, sizes=sizes, reps=reps)
        log(f"checkpoints: restore them on {RESTORE_MESH[0]} x {RESTORE_MESH[1]} and compare")
        restored = run_stack("ckpt_restore", *RESTORE_MESH, directory=directory, sizes=sizes,
                             reps=reps)
    for size in map(str, sizes):
        results.add(record(bench_name("save", size), slowest(saved, "save", size)),
                    record(bench_name("restore", size), slowest(restored, "restore", size)))
    return {"sizes": list(map(str, sizes)), "reps": reps, "bytes": saved[0]["bytes"],
            "arrays": saved[0]["arrays"]}


def measure(results, opts) -> None:
    results.sections[KEY] = measure_sizes(results, **(QUICK if opts.quick else FULL))


def _size_text(size: str, nbytes: int, arrays: int | None) -> str:
    what = "notebook 10's train state" if size == COURSE else f"{size} × 256 float32 × 3"
    amount = (f"{nbytes:,} B" if nbytes < 2**10 else f"{nbytes / 2**10:.3g} KiB"
              if nbytes < 2**20 else f"{nbytes / 2**20:.3g} MiB")
    return f"{what} ({amount})" if arrays is None else f"{what} ({arrays} arrays, {amount})"


def render(results) -> str:
    data = results.sections[KEY]
    bench = lambda what, size: results.benchmarks[bench_name(what, size)]  # noqa: E731
    arrays = data.get("arrays", {})  # runs before 2026-11-30T09:37Z did not count them
    rows = [[_size_text(size, data["bytes"][size], arrays.get(size)),
             fmt_bench(bench("save", size)),
             fmt_bench(bench("restore", size))] for size in data["sizes"]]
    table = md_table(["train state (size)", f"save on {SAVE_MESH[0]} × {SAVE_MESH[1]}",
                      f"restore on {RESTORE_MESH[0]} × {RESTORE_MESH[1]}"], rows)
    method = (
        f"A real {SAVE_MESH[0]}-host × {SAVE_MESH[1]}-device run saves each train state with "
        f"`helpers.training.checkpoints.save` (Orbax `CheckpointManager`: a `StandardSave` of the state "
        f"and a `JsonSave` of the loader position, waiting until the save is finished), then a "
        f"real {RESTORE_MESH[0]} × {RESTORE_MESH[1]} run restores it onto its own mesh with "
        f"`checkpoints.restore` and checks that every number came back and sits on the new mesh "
        f"(a difference stops the benchmark). Notebook 10's state is placed by "
        f"`nnx_model.state_shardings`; the synthetic states have its layout: parameters "
        f"replicated, two AdamW-like moments split over `'device'`. Each figure is the slowest "
        f"host's, median (min–max) of {data['reps']} repetition(s) after a warm-up save and "
        f"restore, each started after a barrier.")
    synthetic = [size for size in data["sizes"] if size != COURSE]
    if len(synthetic) < 2:
        return table + "\n\n" + method
    small, large = synthetic[0], synthetic[-1]
    growth = data["bytes"][large] / data["bytes"][small]
    save_growth = bench("save", large).median() / bench("save", small).median()
    restore_growth = bench("restore", large).median() / bench("restore", small).median()
    return table + "\n\n" + method + (
        f" From the smallest synthetic state to the largest ({growth:,.0f}× the bytes, the "
        f"same 3 arrays), saving takes {save_growth:.1f}× the time and restoring "
        f"{restore_growth:.1f}×"
        + (": at these sizes a checkpoint's time is mostly Orbax's fixed work per save "
           "(directories, metadata, the hosts agreeing that the save is complete), not its "
           "bytes." if save_growth < growth / 10 else "."))
