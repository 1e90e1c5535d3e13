"""Your progress through the course: exercises passed, notebook by notebook, and drills passed.

It lives in a small JSON file that survives kernel restarts and never dirties the repository:
`.course-progress.json` in the repository root (git-ignored), or
`~/.jax-multihost-course/progress.json` when the repository is not writable.
`COURSE_PROGRESS_FILE=/some/file.json` puts it elsewhere; `COURSE_PROGRESS_FILE=off` turns
recording off, and so does any pytest run (tests never write a learner's file).

>>> progress()               # one bar per notebook, then the drills     # doctest: +SKIP
>>> progress(reset=True)     # start over                                 # doctest: +SKIP

Instructors read the same file with `python -m helpers.progress [--file PATH]`.
"""
from __future__ import annotations

import argparse
import html
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ENV = "COURSE_PROGRESS_FILE"
FILE_NAME = ".course-progress.json"
REPO = Path(__file__).resolve().parents[1]
BAR = 10  # characters in a text bar
_noted: set[str] = set()  # one note per problem and process, not one per check


@dataclass
class Record:
    """What the file holds: passed exercise ids, passed drills (seeds by kind), drill answers checked."""

    exercises: set[str] = field(default_factory=set)
    drills: dict[str, set[int]] = field(default_factory=dict)
    drill_answers: int = 0

    def to_json(self) -> str:
        return json.dumps({
            "version": 1,
            "exercises": sorted(self.exercises),
            "drills": {kind: sorted(seeds) for kind, seeds in sorted(self.drills.items())},
            "drill_answers": self.drill_answers,
        }, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Record":
        data = json.loads(text)
        exercises, drills, answers = data["exercises"], data["drills"], data["drill_answers"]
        if (not isinstance(exercises, list) or not all(isinstance(e, str) for e in exercises)
                or not isinstance(drills, dict) or not isinstance(answers, int)
                or not all(isinstance(s, int) for seeds in drills.values() for s in seeds)):
            raise ValueError("unexpected content")
        return cls(set(exercises), {str(k): set(v) for k, v in drills.items()}, answers)


def progress_file() -> Path | None:
    """Where progress is stored, or None when recording is off."""
    value = os.environ.get(ENV)
    if value is not None:
        return None if value.strip().lower() in ("", "off") else Path(value).expanduser()
    if "PYTEST_CURRENT_TEST" in os.environ:  # a test run, or a notebook a test started
        return None
    if (REPO / "notebooks").is_dir() and os.access(REPO, os.W_OK):
        return REPO / FILE_NAME
    return Path.home() / ".jax-multihost-course" / "progress.json"


def _note(key: str, text: str) -> None:
    if key not in _noted:
        _noted.add(key)
        print(text)


def load(path: Path | None) -> Record:
    """The record in `path`; a fresh one (and a one-line note) when the file is unreadable."""
    if path is None or not path.exists():
        return Record()
    try:
        return Record.from_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        reason = type(error).__name__ if isinstance(error, (KeyError, TypeError)) else str(error) or type(error).__name__
        _note(f"read {path}", f"progress: could not read {path} ({reason.splitlines()[0]}); starting fresh.")
        return Record()


def save(path: Path | None, record: Record) -> None:
    """Write the record atomically; a one-line note (never an error) when that fails."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name, suffix=".tmp",
                                         delete=False, encoding="utf-8") as tmp:
            tmp.write(record.to_json())
        os.replace(tmp.name, path)
    except OSError as error:
        _note(f"write {path}", f"progress: could not save to {path} ({error.strerror or error}); "
                               f"set {ENV} to a file you can write.")


def record_exercise(exercise_id: str) -> None:
    """Remember that the exercise `exercise_id` (like "02.1") was passed."""
    path = progress_file()
    record = load(path)
    if exercise_id not in record.exercises:
        record.exercises.add(str(exercise_id))
        save(path, record)


def record_drill(kind: str, seed: int, passed: bool) -> None:
    """Count one checked drill answer; remember the drill (kind, seed) when it passed."""
    path = progress_file()
    record = load(path)
    record.drill_answers += 1
    if passed:
        record.drills.setdefault(str(kind), set()).add(int(seed))
    save(path, record)


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
    from helpers.exercises import all_ids

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
