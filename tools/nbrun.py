"""Run course notebooks headless: as committed, or with every exercise solved.

Developer tooling, not for learners (it lives outside `helpers`, the package the notebooks
import). Used by the tests, `make solutions`, `make notebooks` and the benchmarks.
"""
from __future__ import annotations

import ast
import os
import re
import symtable
import warnings
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


def _touching(nb) -> list[int]:
    """Indices of the code cells that touch an exercise: the exercise cell itself, a call of
    check/hint/solution/reference, or a use of an answer's name or of a verdict kept from check
    (a reveal gated on it)."""
    from helpers.exercises import get

    code = [(n, cell) for n, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    names = [get(i).answer_name for i in map(exercise_id, nb.cells) if i]
    names += [name for _, cell in code for name in _VERDICT_NAME.findall(cell.source)]
    used = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b") if names else None
    return [n for n, cell in code if exercise_id(cell) or _EXERCISE_CALL.search(cell.source)
            or (used and used.search(cell.source))]


def last_exercise_cell(nb) -> int:
    """Index of the last cell that touches an exercise; -1 if none does."""
    touching = _touching(nb)
    return touching[-1] if touching else -1


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, *_COMPREHENSIONS)


def _comprehension_reads(node: ast.AST) -> list[ast.Name]:
    """The names a comprehension reads from the cell's scope: all it loads but its own variables.
    (Python 3.12 inlines comprehensions, so symtable no longer shows them as scopes of their own.)"""
    own = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
    parts = [getattr(node, f) for f in ("elt", "key", "value") if hasattr(node, f)]
    parts += [cond for g in node.generators for cond in g.ifs] + [g.iter for g in node.generators[1:]]
    return [n for part in parts for n in ast.walk(part)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in own]


def _uses_in_order(tree: ast.Module) -> tuple[dict[str, float], dict[str, float]]:
    """When the cell's top-level code first reads and first assigns each name, as line numbers (an
    assignment counts after the expression it assigns, so `x = f(x)` reads x first)."""
    loaded: dict[str, float] = {}
    stored: dict[str, float] = {}

    def visit(node: ast.AST, store_at: float | None = None) -> None:
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                loaded.setdefault(node.id, node.lineno)
            else:
                stored.setdefault(node.id, store_at if store_at is not None else node.lineno)
            return
        for field, child in ast.iter_fields(node):
            for each in child if isinstance(child, list) else [child]:
                if isinstance(each, _COMPREHENSIONS):
                    visit(each.generators[0].iter, store_at)  # the one part the cell's own scope evaluates
                    for name in _comprehension_reads(each):
                        loaded.setdefault(name.id, name.lineno)
                if not isinstance(each, ast.AST) or isinstance(each, _SCOPES):  # symtable reads the rest
                    continue
                late = field in ("targets", "target") and isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign,
                                                                            ast.For, ast.NamedExpr))
                after = node.iter if isinstance(node, ast.For) else getattr(node, "value", None)
                visit(each, after.end_lineno + 0.5 if late and after is not None else store_at)

    visit(tree)
    return loaded, stored


def _names(source: str) -> tuple[set[str], set[str]] | None:
    """(names a cell binds at its top level, names it reads anywhere); None if it is no Python."""
    try:
        with warnings.catch_warnings():  # a cell's regex in a plain string is the notebook's business
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
            top = symtable.symtable(source, "<cell>", "exec")
    except SyntaxError:
        return None
    bound, read_ = set(), set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    loaded, stored = _uses_in_order(tree)
    bound |= set(stored)
    read_ = {name for name, line in loaded.items() if not stored.get(name, float("inf")) < line}
    todo = list(top.get_children())
    while todo:  # functions, lambdas (and on Python 3.11 comprehensions): the names they read from the cell's scope
        table = todo.pop()
        todo += table.get_children()
        read_ |= {s.get_name() for s in table.get_symbols()
                  if s.is_referenced() and s.is_global() and s.get_name() not in bound}
    return bound, read_


def solved_cells(nb) -> list[int]:
    """The cells a solved run executes: every markdown cell, the first code cell (the kernel's
    set-up), every cell that touches an exercise, and, for each kept cell, the last earlier cell
    that binds a name it reads (and so on back). Demos no exercise reads are left to nbval."""
    code = [n for n, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    names = {n: _names(nb.cells[n].source) for n in code}
    last = last_exercise_cell(nb)
    kept = {n for n in code[:1] + _touching(nb)} | {n for n in code if names[n] is None and n <= last}
    todo = list(kept)
    while todo:
        reader = todo.pop()
        for name in (names[reader][1] if names[reader] else ()):
            binder = next((n for n in reversed(code) if n < reader and names[n] and name in names[n][0]), None)
            if binder is not None and binder not in kept:
                kept.add(binder)
                todo.append(binder)
    return [n for n in range(last + 1) if n in kept or nb.cells[n].cell_type != "code"]


# A kernel that dies before its first reply (one of its ports taken in the moment between its
# choice and its bind, by another of the suite's processes) is started again; nothing has run.
KERNEL_STARTS = 3


def execute(nb, *, cell_timeout: int = 180, cwd: Path = NOTEBOOKS, quiet_kernel: bool = False):
    """Execute a notebook in place on a fresh python3 kernel, as a learner's Run All would.

    quiet_kernel: hide the kernel's own log warnings (not the notebook's outputs).
    """
    for attempt in range(1, KERNEL_STARTS + 1):
        client = NotebookClient(
            nb, timeout=cell_timeout, kernel_name="python3", record_timing=False,
            resources={"metadata": {"path": str(cwd)}},
            extra_arguments=["--IPKernelApp.log_level=ERROR"] if quiet_kernel else [],
        )
        try:
            client.execute(env={**os.environ, "COURSE_PROGRESS_FILE": "off"})  # tool runs leave no progress
            return nb
        except RuntimeError as error:  # the kernel never started: no cell has run yet
            if "Kernel died before replying to kernel_info" not in str(error) or attempt == KERNEL_STARTS:
                raise


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
