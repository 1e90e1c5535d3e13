"""Run course notebooks headless: as committed, or with every exercise solved.

Developer tooling, not for learners (it lives outside `helpers`, the package the notebooks
import). Used by the tests, `make solutions`, `make notebooks` and the benchmarks.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
EXERCISE_TAG = "exercise"
_ID_TAG = re.compile(r"^exercise-(\d+\.\d+)$")
CHECK_LINE = re.compile(r"^(✅|⏳|❌|❓|⚠️) (\d+\.\d+)", re.MULTILINE)


def course_notebooks() -> list[Path]:
    """The course notebooks, in order."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def exercise_id(cell) -> str | None:
    """The exercise id of an `exercise`-tagged cell, else None."""
    tags = cell.get("metadata", {}).get("tags", [])
    if EXERCISE_TAG not in tags:
        return None
    ids = [m.group(1) for t in tags if (m := _ID_TAG.match(t))]
    return ids[0] if ids else None


def inject_solutions(nb) -> list[str]:
    """Replace every exercise cell's source with its reference solution; return the ids."""
    from helpers.exercises import get

    injected = []
    for cell in nb.cells:
        ex_id = exercise_id(cell)
        if ex_id:
            cell.source = get(ex_id).solution.strip()
            injected.append(ex_id)
    return injected


_EXERCISE_CALL = re.compile(r"(?<![.\w])(check|hint|solution|reference)\(")
_VERDICT_NAME = re.compile(r"^(\w+) = check\(", re.MULTILINE)


def last_exercise_cell(nb) -> int:
    """Index of the last cell that touches an exercise: the exercise cell itself, a call of
    check/hint/solution/reference, or a use of an answer's name or of a verdict kept from check
    (a reveal gated on it); -1 if none does."""
    from helpers.exercises import get

    code = [(n, cell) for n, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    names = [get(i).answer_name for i in map(exercise_id, nb.cells) if i]
    names += [name for _, cell in code for name in _VERDICT_NAME.findall(cell.source)]
    used = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b") if names else None
    touching = [n for n, cell in code if exercise_id(cell) or _EXERCISE_CALL.search(cell.source)
                or (used and used.search(cell.source))]
    return touching[-1] if touching else -1


def execute(nb, *, cell_timeout: int = 180, cwd: Path = NOTEBOOKS, quiet_kernel: bool = False):
    """Execute a notebook in place on a fresh python3 kernel, as a learner's Run All would.

    quiet_kernel: hide the kernel's own log warnings (not the notebook's outputs).
    """
    client = NotebookClient(
        nb, timeout=cell_timeout, kernel_name="python3", record_timing=False,
        resources={"metadata": {"path": str(cwd)}},
        extra_arguments=["--IPKernelApp.log_level=ERROR"] if quiet_kernel else [],
    )
    client.execute(env={**os.environ, "COURSE_PROGRESS_FILE": "off"})  # tool runs leave no progress
    return nb


def check_lines(nb) -> dict[str, str]:
    """Map exercise id -> the verdict symbol its check cell printed."""
    verdicts = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            text = output.get("text", "") if output.get("output_type") == "stream" else ""
            for symbol, ex_id in CHECK_LINE.findall(text):
                verdicts[ex_id] = symbol
    return verdicts


def read(path: Path):
    """Read a notebook file."""
    return nbformat.read(path, as_version=4)
