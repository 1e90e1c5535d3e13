"""Files and the command line: a script, a notebook (cell by cell) or a folder, read and reported."""
from __future__ import annotations

import argparse
import collections
import difflib
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Iterator

from helpers.migrate.findings import LESSONS, Finding, findings
from helpers.migrate.importers import script_facts
from helpers.migrate.project import folder_facts
from helpers.migrate.rewriter import rewrite
from helpers.migrate.script import Folder


class MigrateError(Exception):
    """A path the tool cannot read: the message is one line for the learner."""


def _python_files(folder: Path) -> list[Path]:
    """The .py files under a folder, but not under its hidden folders, caches and installed packages (the
    folder itself may sit anywhere, `/root/.cache/x/` too)."""
    return sorted(p for p in folder.rglob("*.py") if not any(
        part.startswith(".") or part in ("__pycache__", "site-packages") for part in p.relative_to(folder).parts))


def _sources(path: Path, shown: Path, folder: Folder | None = None
             ) -> Iterator[tuple[str, str, int, tuple[str, ...], Folder]]:
    """(text, the name findings give, first line, the notebook's cells before it, what the other files of its
    folder tell) for a script, each cell of a notebook, or every .py file under a folder; `shown` is how the
    path is written in the findings. A script named alone is read with the project modules it imports."""
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
    yield text, str(shown), 1, (), folder if folder is not None else script_facts(path)


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


def _short(finding: Finding, width: int = 100) -> str:
    """One line: where, the rule, and the start of what the line does (up to its first ';' or `width`)."""
    does = finding.does.split("; ")[0]
    if len(does) > width:
        does = does[:width].rsplit(" ", 1)[0] + " ..."
    return f"{finding.path}:{finding.line}: {finding.rule}: {does}"


def counts(found: list[Finding]) -> dict[str, int]:
    """Findings per rule, the most first."""
    return dict(collections.Counter(f.rule for f in found).most_common())


def summary(found: list[Finding]) -> str:
    """Findings per rule, one a line, with the section that teaches the fix; then the total."""
    per_rule = [f"  {rule:28} {n:3}  {Finding('', 0, rule, '', '').lesson}" for rule, n in counts(found).items()]
    files = len({f.path for f in found})
    return "\n".join(["findings per rule:", *per_rule,
                      f"  {len(found)} finding{'' if len(found) == 1 else 's'} in {files} file{'' if files == 1 else 's'}"])


def as_json(found: list[Finding]) -> str:
    """The findings for a CI job: file, line, rule, notebook, section, what the line does, the advice; and the
    counts per rule."""
    rows = [{"file": f.path, "line": f.line, "rule": f.rule, "notebook": LESSONS[f.rule][0],
             "section": LESSONS[f.rule][1], "does": f.does, "advice": f.instead} for f in found]
    return json.dumps({"findings": rows, "counts": counts(found)}, indent=1)


_EPILOG = "\n\n".join([
    textwrap.fill("Reads .py scripts, folders (every .py file under them, hidden folders and caches left out), "
                  ".ipynb notebooks and jupytext MyST .md notebooks (cell by cell). A script named where it lives in "
                  "its project is read with the project's modules it imports (its pmap aliases, replicate helpers, "
                  "loaders, checkpointers), never a third-party library's, and with the pmap axes of the project's "
                  "files that import it (a launcher that pmaps its functions).", 100),
    "A line you keep on purpose (a port that keeps the script's keys, say): end it with\n"
    "  # migrate: ok                  every finding on that line is acknowledged\n"
    "  # migrate: ok per-device-keys  only that rule's (several: comma-separated)\n"
    + textwrap.fill("or leave a rule out everywhere with --ignore RULE. The `# migrate: RULE` marks that --diff "
                    "leaves are still findings.", 100),
    textwrap.fill("Exit status: 0 nothing to change, 1 findings, 2 a path that cannot be read (missing, not text, "
                  "not valid Python, not a notebook, a folder with no .py file) or a RULE that does not exist. "
                  "Acknowledged and ignored findings do not count: a port whose every finding is acknowledged "
                  "exits 0.", 100)])


def main(argv: list[str] | None = None) -> int:
    """Command line: the findings, one a line; exit 0 (none), 1 (some) or 2 (a bad path)."""
    parser = argparse.ArgumentParser(
        prog="python -m helpers.migrate",
        description="Say what the course teaches about each pmap-era line of your script "
                    "(read with ast, never run).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG)
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="a .py script, a folder of scripts, a .ipynb notebook or a MyST .md notebook")
    parser.add_argument("--diff", action="store_true",
                        help="also print a suggested rewrite of what can be rewritten safely")
    parser.add_argument("--format", choices=("full", "short", "json"), default="full",
                        help="full: each finding with what the line does, what to write instead and the section "
                             "(the default); short: one short line a finding, then each rule once with its count "
                             "and section (--explain RULE for its findings in full); json: a JSON object "
                             "{findings: [{file, line, rule, notebook, section, does, advice}], counts: {rule: n}} "
                             "for a CI job")
    parser.add_argument("--explain", action="append", default=[], metavar="RULE",
                        help="print the findings of RULE in full (repeatable; 'all' for every rule), "
                             "after the short form")
    parser.add_argument("--ignore", action="append", default=[], metavar="RULE",
                        help="leave out the findings of RULE (repeatable, or comma-separated)")
    parser.add_argument("--summary", action="store_true", help="end with the number of findings per rule")
    opts = parser.parse_args(argv)
    ignored = {r for arg in opts.ignore for r in arg.split(",") if r}
    unknown = sorted((ignored | {r for r in opts.explain if r != "all"}) - set(LESSONS))
    if unknown:
        print(f"migrate: no rule named {', '.join(unknown)}; the rules: {', '.join(sorted(LESSONS))}",
              file=sys.stderr)
        return 2
    found: list[Finding] = []
    try:
        for path in opts.paths:
            found += migrate(path, show=False)
    except MigrateError as error:
        print(f"migrate: {error}", file=sys.stderr)
        return 2
    found = [f for f in found if f.rule not in ignored]
    if opts.format == "json":
        print(as_json(found))
        return 1 if found else 0
    if opts.format == "short" and found:
        print("\n".join(map(_short, found)))
        print("\n" + "\n".join(f"{rule} ({n}): {Finding('', 0, rule, '', '').lesson}; --explain {rule} says "
                                "what to write" for rule, n in counts(found).items()))
    else:
        print("\n".join(map(str, found)) if found else "nothing to change")
    explained = [f for f in found if f.rule in opts.explain or "all" in opts.explain]
    if explained and opts.format == "short":
        print("\n" + "\n".join(map(str, explained)))
    if opts.summary and found:
        print("\n" + summary(found))
    if opts.diff:
        diffs = []
        for path in map(Path, opts.paths):
            files = _python_files(path) if path.is_dir() else [path]
            folder = folder_facts(files) if path.is_dir() else script_facts(path)
            diffs += [d for d in (_diff(f, folder) for f in files) if d]
        print("\n" + ("".join(diffs) if diffs else "(no finding here can be rewritten safely; "
                                                    "the lines above say what to write)"), end="")
    return 1 if found else 0
