"""Every text a learner can see, written to one file, and compared with a saved one.

Before a change to the judge, save a snapshot; after it, compare: any message that changed is
shown as a diff (exit status 1), so a refactor that means to keep every message proves it.

    python -m tools.learner_texts save .learner-texts.txt
    python -m tools.learner_texts compare .learner-texts.txt
    python -m tools.learner_texts compare .learner-texts.txt --processes   # real-process verdicts too

What it records, for every exercise: title, hints, solution, each catalogue entry's message and
the verdict `check` prints for it, the verdict on each garbage answer, on the notebook's stub and
on `...`; the messages for an unknown id; and for the drills of the first seeds of each kind:
prompt, explanation, the verdict on the right answer, on each catalogued mistake and on garbage,
and the drill form's answers to typed text. Verdicts of exercises judged in real processes need
real runs: only with `--processes` (minutes).
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import os
import re
import sys
from pathlib import Path

from helpers.devices import use_fake_devices

use_fake_devices(8)  # before anything imports JAX's backend: the course's 8 fake devices

import numpy as np  # noqa: E402
from jax import P  # noqa: E402

from helpers import exercises  # noqa: E402
from helpers.exercises.kinds import ProgramExercise  # noqa: E402
from helpers.exercises.processes import ProcessExercise  # noqa: E402
from helpers.practice import KINDS, drill  # noqa: E402
from helpers.practice.form import DrillSession  # noqa: E402
from helpers.emulated.topology import emulated_hosts  # noqa: E402
from tools.nbrun import course_notebooks, exercise_id, read  # noqa: E402

GARBAGE = [None, 3, "P('host')", [], {"a": 1}, object(), (lambda *a, **k: 1 / 0), float("nan"),
           ("host", "device"), np.ones(3), True, -1, "", P("no_such_axis")]
TYPED = ["", "nonsense", "P(", "__import__('os')", "(0, 2)", "[0, 4]", "P('host', None)", "2:4", "3.5"]
DRILL_SEEDS = 12  # per kind
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _printed(fn, *args) -> str:
    """What `fn(*args)` prints (and its result's text when it prints nothing)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = fn(*args)
    return _ADDRESS.sub("", out.getvalue().rstrip("\n") or repr(result))


def _name(value) -> str:
    """A catalogue entry's short name (a set's members sorted: one text every run)."""
    text = f"{{{', '.join(sorted(map(repr, value)))}}}" if isinstance(value, (set, frozenset)) else repr(value)
    return _ADDRESS.sub("", " ".join(text.split()))[:120]


def _stubs() -> dict[str, str]:
    return {exercise_id(c): c.source for p in course_notebooks() for c in read(p).cells if exercise_id(c)}


def exercise_texts(ex_id: str, stub: str | None, processes: bool) -> list[str]:
    exercise = exercises.get(ex_id)
    real = isinstance(exercise, ProcessExercise)
    lines = [f"## {ex_id} title: {exercise.title}", f"## {ex_id} kind: {type(exercise).__name__}"]
    for i, text in enumerate(exercise.hints):
        lines.append(f"## {ex_id} hint {i + 1}\n{_printed(exercises.hint, ex_id)}")
    lines.append(f"## {ex_id} solution\n{_printed(exercises.solution, ex_id)}")
    lines.append(f"## {ex_id} ...\n{_printed(exercises.check, ex_id, ...)}")
    with emulated_hosts(exercise.kernel.hosts or 1):
        if not real or processes:
            for n, (entry, message) in enumerate(exercise.catalogue()):
                answer = exercise.run_source(entry) if isinstance(exercise, ProgramExercise) else entry
                lines.append(f"## {ex_id} catalogue {n}: {_name(entry)}\nmessage: {message}\n"
                             f"{_printed(exercises.check, ex_id, answer)}")
        for n, junk in enumerate(GARBAGE):
            lines.append(f"## {ex_id} garbage {n}: {_name(junk)}\n{_printed(exercises.check, ex_id, junk)}")
        if stub is not None and (not real or processes):
            namespace: dict = {}
            exec(exercises.core.PRELUDE + exercise.setup + "\n" + stub, namespace)
            lines.append(f"## {ex_id} stub\n{_printed(exercises.check, ex_id, namespace[exercise.answer_name])}")
    return lines


def drill_texts(kind: str, seed: int) -> list[str]:
    q = drill(seed, kind)
    head = f"## drill {kind} {seed}"
    lines = [f"{head} prompt\n{q.prompt}", f"{head} explain\n{q.explain()}",
             f"{head} right\n{_printed(q.check, q.answer)}", f"{head} ...\n{_printed(q.check, ...)}"]
    for n, mistake in enumerate(q.mistakes):
        lines.append(f"{head} mistake {n} ({mistake.family}): {_name(mistake.answer)}\n"
                     f"{_printed(q.check, mistake.answer)}")
    for n, junk in enumerate(GARBAGE):
        lines.append(f"{head} garbage {n}: {_name(junk)}\n{_printed(q.check, junk)}")
    session = DrillSession(seed, kind)
    for text in TYPED:
        outcome = session.submit(text)
        lines.append(f"{head} typed {text!r}\n{(outcome.passed, outcome.message)}")
    return lines


def snapshot(processes: bool = False) -> str:
    """Every learner-visible text, one section per `## ` line."""
    stubs = _stubs()
    lines = [f"## unknown id\n{_printed(exercises.check, '99.9', 1)}\n{_printed(exercises.hint, '02.99')}\n"
             f"{_printed(exercises.solution, 'x')}"]
    for ex_id in exercises.all_ids():
        lines += exercise_texts(ex_id, stubs.get(ex_id), processes)
    for kind in KINDS:
        for seed in range(DRILL_SEEDS):
            lines += drill_texts(kind, seed)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.learner_texts", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("save", "compare"))
    parser.add_argument("file", type=Path)
    parser.add_argument("--processes", action="store_true", help="judge real-process exercises too (real runs)")
    args = parser.parse_args(argv)
    os.environ["COURSE_PROGRESS_FILE"] = "off"  # judging here records nothing
    now = snapshot(args.processes)
    if args.action == "save":
        args.file.write_text(now, encoding="utf-8")
        print(f"saved {now.count(chr(10) + '## ') + 1} texts to {args.file}")
        return 0
    before = args.file.read_text(encoding="utf-8")
    diff = list(difflib.unified_diff(before.splitlines(), now.splitlines(), str(args.file), "now", lineterm=""))
    if not diff:
        print(f"every learner-visible text is unchanged ({now.count(chr(10) + '## ') + 1} texts)")
        return 0
    print("\n".join(diff))
    return 1


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":  # sets print in hash order: one order every run
        os.execve(sys.executable, [sys.executable, "-m", "tools.learner_texts", *sys.argv[1:]],
                  {**os.environ, "PYTHONHASHSEED": "0"})
    sys.exit(main())
