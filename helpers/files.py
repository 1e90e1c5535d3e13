"""The files the notebooks launch or read: `scripts/*.py` and `transcripts/*`.

In a clone of the course they live in `notebooks/`; the installed wheel carries a copy in
`helpers/course_files/` (setup.py puts it there), so a notebook copied alone into an empty
folder finds them too.
"""
from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
ROOTS = (_HERE.parent / "notebooks", _HERE / "course_files")  # a clone of the course; the wheel


def course_file(name: str) -> Path:
    """The path of one course file, e.g. course_file("scripts/train_dp.py")."""
    for root in ROOTS:
        if (root / name).is_file():
            return root / name
    raise FileNotFoundError(f"no course file {name!r} in {' or '.join(map(str, ROOTS))}: "
                            "reinstall the course (pip install the course's folder)")
