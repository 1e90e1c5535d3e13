"""Where the learner's progress is kept: passed exercises and drills, in a small JSON file.

A leaf module (it imports nothing of the course), so the judge can record a pass and
`helpers.progress` can show the record without importing each other.
The file is `.course-progress.json` in the repository root (git-ignored), or
`~/.jax-multihost-course/progress.json` when the repository is not writable.
`COURSE_PROGRESS_FILE=/some/file.json` puts it elsewhere; `COURSE_PROGRESS_FILE=off` turns
recording off, and so does any pytest run (tests never write a learner's file).
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ENV = "COURSE_PROGRESS_FILE"
FILE_NAME = ".course-progress.json"
REPO = Path(__file__).resolve().parents[1]
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
