"""Your progress through the course: exercises passed, notebook by notebook, and drills passed.

It lives in a small JSON file that survives kernel restarts and never dirties the repository
(`helpers.progress_store` says where, and how to move it or turn it off).

>>> progress()               # one bar per notebook, then the drills     # doctest: +SKIP
>>> progress(reset=True)     # start over                                 # doctest: +SKIP

Instructors read the same file with `python -m helpers.progress [--file PATH]`.
"""
from __future__ import annotations

import argparse
import html
import os
from dataclasses import dataclass
from pathlib import Path

from helpers.exercises import all_ids
from helpers.progress_store import ENV, REPO, Record, load, progress_file, save

BAR = 10  # characters in a text bar


# ------------------------------------------------------------------ the report

@dataclass
class NotebookRow:
    number: str
    name: str
    ids: list[str]
    passed: list[str]

    def bar(self) -> str:
        full = round(BAR * len(self.passed) / len(self.ids)) if self.ids else 0
        return "█" * full + "░" * (BAR - full)


def _notebook_names() -> dict[str, str]:
    folder = REPO / "notebooks"
    return {p.stem[:2]: p.stem[3:].replace("_", " ") for p in sorted(folder.glob("[0-9][0-9]_*.ipynb"))}


class Progress:
    """The table `progress()` shows: text for a terminal, HTML in a notebook."""

    def __init__(self, record: Record, path: Path | None, ids: list[str]):
        self.record, self.path = record, path
        names = _notebook_names()
        numbers = sorted(set(names) | {i.split(".")[0] for i in ids})
        self.rows = [NotebookRow(n, names.get(n, f"notebook {n}"),
                                 [i for i in ids if i.split(".")[0] == n],
                                 [i for i in ids if i.split(".")[0] == n and i in record.exercises])
                     for n in numbers]

    @property
    def passed(self) -> int:
        return sum(len(r.passed) for r in self.rows)

    @property
    def total(self) -> int:
        return sum(len(r.ids) for r in self.rows)

    def where(self) -> str:
        if self.path is None:
            return f"recording is off ({ENV}=off, or a test run): nothing is stored"
        return f"stored in {self.path}"

    def drills_line(self) -> str:
        kinds = ", ".join(f"{k} {len(s)}" for k, s in sorted(self.record.drills.items()) if s)
        count = sum(len(s) for s in self.record.drills.values())
        return (f"drills passed: {count}" + (f" ({kinds})" if kinds else "")
                + f"; answers checked: {self.record.drill_answers}")

    def text(self) -> str:
        width = max((len(r.name) for r in self.rows), default=0)
        lines = [f"exercises passed: {self.passed} of {self.total} ({self.where()})"]
        for r in self.rows:
            marks = "  ".join(f"{i} {'✓' if i in r.passed else '·'}" for i in r.ids) or "no exercises"
            count = f"{len(r.passed)}/{len(r.ids)}" if r.ids else "   "
            lines.append(f"{r.number} {r.name:<{width}}  {r.bar()} {count:>5}  {marks}")
        lines.append(self.drills_line())
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        cells = []
        for r in self.rows:
            share = 100 * len(r.passed) / len(r.ids) if r.ids else 0
            bar = (f'<div style="width:120px;height:10px;background:#e6e6e6;border-radius:3px">'
                   f'<div style="width:{share:.0f}%;height:10px;background:#009E73;border-radius:3px"></div></div>')
            marks = " ".join(f"{i}&nbsp;{'✓' if i in r.passed else '·'}" for i in r.ids) or "no exercises"
            count = f"{len(r.passed)}/{len(r.ids)}" if r.ids else ""
            cells.append(f"<tr><td>{r.number} {html.escape(r.name)}</td><td>{bar}</td>"
                         f"<td>{count}</td><td>{marks}</td></tr>")
        return (f"<div><b>exercises passed: {self.passed} of {self.total}</b> "
                f"<small>({html.escape(self.where())})</small>"
                f'<table style="font-size:90%">{"".join(cells)}</table>'
                f"<div>{html.escape(self.drills_line())}</div></div>")


def progress(reset: bool = False, *, path: str | os.PathLike | None = None) -> Progress:
    """Your passed exercises per notebook and your passed drills; `reset=True` starts over."""
    where = Path(path).expanduser() if path is not None else progress_file()
    if reset:
        save(where, Record())
        print("progress: started over." if where else "progress: recording is off; nothing to reset.")
    return Progress(load(where), where, all_ids())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m helpers.progress",
                                     description="Show a learner's progress through the course.")
    parser.add_argument("--file", help=f"a progress file (default: where notebooks store it; {ENV})")
    args = parser.parse_args(argv)
    print(progress(path=args.file).text())


if __name__ == "__main__":
    main()
