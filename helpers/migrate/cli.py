"""Files and the command line: a script, a notebook (cell by cell) or a folder, read and reported."""
from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import sys
from pathlib import Path
from typing import Iterator

from helpers.migrate.findings import Finding, findings
from helpers.migrate.rewriter import rewrite
from helpers.migrate.script import Folder, Script


class MigrateError(Exception):
    """A path the tool cannot read: the message is one line for the learner."""


def _python_files(folder: Path) -> list[Path]:
    """The .py files under a folder, but not under its hidden folders, caches and installed packages (the
    folder itself may sit anywhere, `/root/.cache/x/` too)."""
    return sorted(p for p in folder.rglob("*.py") if not any(
        part.startswith(".") or part in ("__pycache__", "site-packages") for part in p.relative_to(folder).parts))


def folder_facts(files: list[Path]) -> Folder:
    """What the files of a folder tell each other: the functions they hand gradients to, their pmaps' axes."""
    handed, axes, copies = set(), set(), set()
    for file in files:
        try:
            script = Script(ast.parse(file.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, SyntaxError):
            continue  # said when the file itself is read
        handed |= set(script.gradients.handed_out())
        axes |= script.pmap_axes
        copies |= set(script.copies().items())
    return Folder(frozenset(handed), frozenset(axes), frozenset(copies))


def _sources(path: Path, shown: Path, folder: Folder = Folder()
             ) -> Iterator[tuple[str, str, int, tuple[str, ...], Folder]]:
    """(text, the name findings give, first line, the notebook's cells before it, what the other files of its
    folder tell) for a script, each cell of a notebook, or every .py file under a folder; `shown` is how the
    path is written in the findings."""
    if path.is_dir():
        files = _python_files(path)
        if not files:
            raise MigrateError(f"{path}: a folder with no .py file in it")
        folder = folder_facts(files)
        for file in files:
            yield from _sources(file, shown / file.relative_to(path), folder)
        return
    if not path.exists():
        raise MigrateError(f"{path}: no such file; check the path")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise MigrateError(f"{path}: cannot be read as text ({error})") from None
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(text)["cells"]
        except (ValueError, KeyError, TypeError):
            raise MigrateError(f"{path}: not a Jupyter notebook (no cells in its JSON)") from None
        code = [_python("".join(cell.get("source", []))) for cell in cells if cell.get("cell_type") == "code"]
        for number, text in enumerate(code, start=1):
            yield text, f"{shown} cell {number}", 1, tuple(code[:number - 1]), Folder()
        return
    if path.suffix == ".md":  # a jupytext MyST notebook: its code cells, numbered by the file's lines
        fences = list(_CODE_CELL.finditer(text))
        for number, fence in enumerate(fences):
            yield (_python(fence.group(1)), str(shown), text.count("\n", 0, fence.start(1)) + 1,
                   tuple(_python(f.group(1)) for f in fences[:number]), Folder())
        return
    yield text, str(shown), 1, (), folder


_CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _python(cell: str) -> str:
    """A cell's source with what is not Python blanked, keeping its line numbers: IPython's own
    syntax (%magic, !shell) and MyST cell options (`:tags: [...]`)."""
    return re.sub(r"^\s*[%!].*$|^:\w[\w-]*:.*$", "", cell, flags=re.MULTILINE)


def migrate(path: str | Path, *, show: bool = True, relative_to: str | Path | None = None) -> list[Finding]:
    """Every finding for a script, a notebook (cell by cell, .ipynb or jupytext MyST .md) or a
    folder; printed when `show`.

    Findings name the path as given, or relative to `relative_to`.
    """
    found: list[Finding] = []
    path = Path(path)
    shown = path.relative_to(relative_to) if relative_to is not None else path
    for text, name, first, earlier, folder in _sources(path, shown):
        try:
            found += findings(text, name, first_line=first, earlier=earlier, folder=folder)
        except SyntaxError as error:
            raise MigrateError(f"{name}:{error.lineno}: not valid Python ({error.msg}); fix that "
                               "line first (the tool reads the script, it never runs it)") from None
    if show:
        print("\n".join(map(str, found)) if found else "nothing to change")
    return found


def _diff(path: Path, folder: Folder) -> str:
    """A unified diff of the safe rewrites of one script ('' if none); `folder` what the other files of its
    folder tell (the functions they hand gradients to: their pmaps' axes are theirs to rename)."""
    if path.suffix != ".py":
        return ""
    old = path.read_text(encoding="utf-8")
    new, _ = rewrite(old, Folder(folder.handed))
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        f"{path}", f"{path} (suggested)"))


def main(argv: list[str] | None = None) -> int:
    """Command line: the findings, one a line; exit 0 (none), 1 (some) or 2 (a bad path)."""
    parser = argparse.ArgumentParser(
        prog="python -m helpers.migrate",
        description="Say what the course teaches about each pmap-era line of your script "
                    "(read with ast, never run).",
        epilog="Reads .py scripts, folders (every .py file under them, hidden folders and caches left out), "
               ".ipynb notebooks and jupytext MyST .md notebooks (cell by cell). Exit status: 0 nothing to "
               "change, 1 findings, 2 a path that cannot be read (missing, not text, not valid Python, "
               "not a notebook, a folder with no .py file).")
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="a .py script, a folder of scripts, a .ipynb notebook or a MyST .md notebook")
    parser.add_argument("--diff", action="store_true",
                        help="also print a suggested rewrite of what can be rewritten safely")
    opts = parser.parse_args(argv)
    found: list[Finding] = []
    try:
        for path in opts.paths:
            found += migrate(path, show=False)
    except MigrateError as error:
        print(f"migrate: {error}", file=sys.stderr)
        return 2
    print("\n".join(map(str, found)) if found else "nothing to change")
    if opts.diff:
        diffs = []
        for path in map(Path, opts.paths):
            files = _python_files(path) if path.is_dir() else [path]
            folder = folder_facts(files) if path.is_dir() else Folder()
            diffs += [d for d in (_diff(f, folder) for f in files) if d]
        print("\n" + ("".join(diffs) if diffs else "(no finding here can be rewritten safely; "
                                                    "the lines above say what to write)"), end="")
    return 1 if found else 0
