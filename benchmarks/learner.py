"""Section 1: how long a learner waits for Run All, per notebook, against its budget.

Each notebook runs top to bottom on a fresh kernel, round after round; a floor notebook (only
the first cell every notebook has, plus starting the backend) runs in every round too, so the
"× floor" ratios compare runs made at the same moment. Budgets come from each notebook's
front matter (tools/course_table.py).
"""
from __future__ import annotations

import time

from benchmarks.measure import log, record
from benchmarks.tables import fmt_bench, fmt_ratio, fmt_s, md_table, times_text

KEY = "learner"
TITLE = "How long a learner waits: Run All, per notebook"
FLOOR = "learner/floor"
FLOOR_SOURCE = ("from helpers.devices import use_fake_devices\n\nuse_fake_devices(8)\n\n"
                "import jax\n\njax.devices()")


def bench_name(stem: str) -> str:
    return f"learner/run all/{stem}"


def _floor_notebook():
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(FLOOR_SOURCE)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    return nb


def _time_notebook(make_nb) -> tuple[float | None, str | None]:
    """(seconds, None) for a Run All on a fresh kernel, or (None, one line of what failed)."""
    from tools.nbrun import execute

    nb = make_nb()
    t = time.perf_counter()
    try:
        execute(nb, quiet_kernel=True)
    except Exception as err:  # noqa: BLE001 - a broken notebook is a result, not a crash
        if getattr(err, "ename", None):  # nbclient's CellExecutionError: the cell's exception
            text = f"{err.ename}: {str(getattr(err, 'evalue', '')).strip()}"
        else:
            lines = str(err).strip().splitlines()
            text = f"{type(err).__name__}: {lines[-1] if lines else ''}"
        return None, text.splitlines()[0][:160]
    return time.perf_counter() - t, None


def measure(results, opts) -> None:
    from tools.course_table import budgets
    from tools.nbrun import course_notebooks, read

    paths = [p for p in course_notebooks()
             if not opts.notebooks or any(p.name.startswith(s) for s in opts.notebooks)]
    budget = budgets()  # a notebook without its front-matter fields stops the run here
    missing = [p.stem for p in paths if p.stem not in budget]
    if missing:
        raise RuntimeError(f"no notebooks/src/*.md source for {missing}")
    floor: list[float] = []
    start = time.perf_counter()
    runs = {p.stem: {"times": [], "rounds": [], "errors": []} for p in paths}
    for r in range(opts.notebook_repeats):  # round robin: the floor and every notebook in each round
        t, err = _time_notebook(_floor_notebook)
        if err:
            raise RuntimeError(f"the floor notebook failed: {err}")
        floor.append(t)
        log(f"learner wait, round {r + 1}/{opts.notebook_repeats}: floor {fmt_s(t)}")
        for path in paths:  # a failed run is reported, and retried next round
            t, err = _time_notebook(lambda: read(path))
            run = runs[path.stem]
            where = f"round {r + 1}/{opts.notebook_repeats}, {fmt_s(time.perf_counter() - start)} in"
            if err:
                run["errors"].append(err)
                log(f"  {path.stem}: ERROR {err} ({where})")
            else:
                run["times"].append(t)
                run["rounds"].append(r)
                log(f"  {path.stem}: {fmt_s(t)} ({where})")
    results.add(record(FLOOR, floor))
    results.add(*[record(bench_name(stem), run["times"]) for stem, run in runs.items()
                  if run["times"]])
    results.sections[KEY] = {
        "reps": opts.notebook_repeats, "selection": opts.notebooks,
        "notebooks": [{"stem": stem, "budget": budget[stem], "rounds": run["rounds"],
                       "errors": run["errors"]} for stem, run in runs.items()]}


def _within_budget(results, nb: dict) -> bool | None:
    """Whether the median Run All is within the budget; None when no run succeeded."""
    name = bench_name(nb["stem"])
    return results.median(name) <= nb["budget"] if name in results.benchmarks else None


def readme_rows(results) -> list[list[str]]:
    """['`00_fake_devices`, Run All', '40 s', '8.1 s ✅'] per notebook, for the README."""
    rows = []
    for nb in results.sections.get(KEY, {"notebooks": []})["notebooks"]:
        ok = _within_budget(results, nb)
        measured = (f"❌ all {len(nb['errors'])} runs failed" if ok is None else
                    f"{fmt_s(results.median(bench_name(nb['stem'])))} {'✅' if ok else '⚠️ over'}")
        rows.append([f"`{nb['stem']}`, Run All", f"{nb['budget']:g} s", measured])
    return rows


def render(results) -> str:
    data = results.sections[KEY]
    floor_values = results.values(FLOOR)
    floor = results.benchmarks[FLOOR]
    rows = [["floor: `use_fake_devices(8)`, `import jax`, `jax.devices()`", "",
             fmt_bench(floor), "1.00×", ""]]
    total, total_budget, over, slowest = 0.0, 0.0, [], None
    for nb in data["notebooks"]:
        total_budget += nb["budget"]
        name = bench_name(nb["stem"])
        errors = nb["errors"]
        failed = (f"❌ {len(errors)} of {len(errors) + len(nb['rounds'])} runs failed: "
                  f"{errors[0]}" if errors else "")
        if name not in results.benchmarks:
            rows.append([f"`{nb['stem']}`", f"{nb['budget']:g} s", "–", "–", failed])
            over.append(nb["stem"])
            continue
        bench = results.benchmarks[name]
        total += bench.median()
        if slowest is None or bench.median() > results.median(bench_name(slowest)):
            slowest = nb["stem"]
        ok = _within_budget(results, nb)
        verdict = "✅ pass" if ok else "⚠️ over"
        if not ok or errors:
            over.append(nb["stem"])
        ratios = [t / floor_values[r] for t, r in zip(bench.get_values(), nb["rounds"])]
        rows.append([f"`{nb['stem']}`", f"{nb['budget']:g} s", fmt_bench(bench),
                     fmt_ratio(ratios), f"{verdict}; {failed}" if failed else verdict])
    rows.append(["**whole course**", f"{total_budget:g} s", f"**{fmt_s(total)}**",
                 f"{total / floor.median():.1f}×" if data["notebooks"] else "–", ""])
    table = md_table(["notebook", "budget", "Run All: median (min–max)", "× floor (same round)",
                      "result"], rows, "lrrrl")
    prose = (
        f"What a learner waits for after *Kernel > Restart Kernel and Run All Cells*: each "
        f"notebook executed top to bottom on a fresh kernel (`tools.nbrun.execute` on a copy), "
        f"{times_text(data['reps'])}, median and min–max. The time includes starting the "
        f"kernel. The floor is a notebook with only the first cell every notebook has "
        f"(`use_fake_devices(8)`, `import jax`) plus `jax.devices()`, which starts the backend: "
        f"{fmt_s(floor.median())} that no notebook can go below. The floor and every notebook "
        f"are timed in the same round, so the × floor column compares like with like even when "
        f"the machine's speed drifts. Each budget is the `run_all_budget_s` of the notebook's "
        f"front matter (`notebooks/src/NN_*.md`)."
    )
    if slowest is not None:
        prose += (f" The slowest notebook here is `{slowest}` at "
                  f"{fmt_s(results.median(bench_name(slowest)))}.")
    prose += (" " + (f"Over budget or failing: {', '.join(f'`{o}`' for o in over)}."
                     if over else "Every notebook is within its budget."))
    return table + "\n\n" + prose

