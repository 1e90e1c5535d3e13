"""The exercise machinery: a registry, verdicts that name the mistake, hints and solutions.

An exercise's reference solution is *source code*: the cell a learner would write. The
same text is what `solution(id)` shows, what the solved-notebook test injects, and (run in
a fresh namespace) what `reference(id)` returns, so there is one source of truth.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

PRELUDE = """\
import numpy as np
import jax
import jax.numpy as jnp
from jax import P
from jax.sharding import Mesh, NamedSharding
"""
TIME_LIMIT_S = 10.0


class Mistake(Exception):
    """Raised by a judge: the answer is wrong, and the message says how."""


class NotAttempted(Exception):
    """Raised when the answer is still the untouched stub."""


class _TooSlow(Exception):
    pass


@dataclass(frozen=True)
class WrongAnswer:
    """A known wrong answer (as source code) and a fragment of the message it must earn."""

    source: str
    message: str


@dataclass(frozen=True)
class Exercise:
    """One exercise: `judge(answer)` returns None when right and raises Mistake when wrong."""

    id: str
    title: str
    answer_name: str
    solution: str
    judge: Callable[[Any], None]
    hints: tuple[str, ...]
    wrong_answers: tuple[WrongAnswer, ...] = ()
    setup: str = ""
    garbage: tuple[Any, ...] = field(default=())

    def run_source(self, source: str) -> Any:
        """Run `source` after the prelude and setup; return the answer it defines."""
        namespace: dict[str, Any] = {}
        exec(PRELUDE + self.setup + "\n" + source, namespace)
        return namespace[self.answer_name]


_REGISTRY: dict[str, Exercise] = {}
_hints_shown: dict[str, int] = {}


def register(exercise: Exercise) -> Exercise:
    """Add an exercise to the course registry (ids are unique)."""
    if exercise.id in _REGISTRY:
        raise ValueError(f"exercise id {exercise.id!r} is registered twice")
    _REGISTRY[exercise.id] = exercise
    return exercise


def get(exercise_id: str) -> Exercise:
    """The exercise with this id, or a KeyError that lists the known ids."""
    try:
        return _REGISTRY[exercise_id]
    except (KeyError, TypeError):
        known = ", ".join(sorted(_REGISTRY))
        raise KeyError(f"no exercise {exercise_id!r}; known ids: {known}") from None


def all_ids() -> list[str]:
    """Every exercise id in the course, in order."""
    return sorted(_REGISTRY, key=lambda i: tuple(int(p) for p in i.split(".")))


@contextmanager
def _time_limit(seconds: float):
    """Interrupt the block after `seconds` (main thread only; elsewhere no limit)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum, frame):
        raise _TooSlow

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def call_learner(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the learner's function; turn its failures into a Mistake that says what happened."""
    if not callable(fn):
        raise Mistake(f"expected a function, but got {describe(fn)}")
    try:
        return fn(*args, **kwargs)
    except (NotAttempted, Mistake, _TooSlow):
        raise
    except NotImplementedError:
        raise NotAttempted from None
    except Exception as error:  # the learner's code failed: report its last line
        last_line = (str(error).strip().splitlines() or [""])[-1]
        raise Mistake(
            f"your function raised {type(error).__name__}: {last_line}".rstrip(": ")
        ) from None


def describe(value: Any) -> str:
    """A short, learner-friendly description of a value's type (and shape)."""
    shape = getattr(value, "shape", None)
    name = type(value).__name__
    if shape is not None:
        article = "an" if name[0].lower() in "aeiou" else "a"
        return f"{article} {name} of shape {tuple(shape)}"
    text = repr(value)
    return f"{name} {text if len(text) < 40 else text[:37] + '...'}"


def verdict(exercise_id: str, answer: Any, time_limit: float = TIME_LIMIT_S) -> tuple[str, str]:
    """Judge an answer: ('pass' | 'not-attempted' | 'mistake', message). Never raises."""
    exercise = get(exercise_id)
    if answer is Ellipsis:
        return "not-attempted", "not attempted yet: edit the exercise cell above, run it, then run this cell again"
    try:
        with _time_limit(time_limit):
            exercise.judge(answer)
    except NotAttempted:
        return "not-attempted", "not attempted yet: your function still raises NotImplementedError"
    except Mistake as mistake:
        return "mistake", str(mistake)
    except _TooSlow:
        return "mistake", f"your answer took more than {time_limit:g} s to check; look for a loop that never ends"
    except Exception as error:  # the judge could not handle this answer
        return "mistake", f"this answer could not be checked ({type(error).__name__}: {error}); compare its form with the prompt"
    return "pass", f"correct: {exercise.title}"


class Verdict:
    """What `check` returns: truthy when the answer passed, equal to True or False.

    It shows nothing in a notebook, because `check` has already printed the verdict line.
    """

    def __init__(self, passed: bool):
        self.passed = passed

    def __bool__(self) -> bool:
        return self.passed

    def __eq__(self, other: object) -> bool:
        return self.passed == bool(other) if isinstance(other, (bool, Verdict)) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.passed)

    def __repr__(self) -> str:
        return f"Verdict(passed={self.passed})"

    def _ipython_display_(self) -> None:
        """Display nothing: the printed line is the verdict."""


def check(exercise_id: str, answer: Any) -> Verdict:
    """Print a one-line verdict for `answer`; the result is truthy when it is right."""
    try:
        get(exercise_id)
    except KeyError as error:
        print(f"❓ {error.args[0]}")
        return Verdict(False)
    status, message = verdict(exercise_id, answer)
    if status == "pass":
        print(f"✅ {exercise_id} {message}")
    elif status == "not-attempted":
        print(f"⏳ {exercise_id} {message}")
    else:
        print(f"❌ {exercise_id} not yet: {message}. (hint('{exercise_id}') helps)")
    return Verdict(status == "pass")


def hint(exercise_id: str) -> None:
    """Print the next hint for an exercise."""
    hints = get(exercise_id).hints
    shown = min(_hints_shown.get(exercise_id, 0), len(hints) - 1)
    _hints_shown[exercise_id] = shown + 1
    last = " (that is the last hint; solution('%s') shows an answer)" % exercise_id if shown == len(hints) - 1 else ""
    print(f"💡 hint {shown + 1}/{len(hints)} for {exercise_id}: {hints[shown]}{last}")


def solution(exercise_id: str) -> None:
    """Print a reference solution: the cell you could have written."""
    exercise = get(exercise_id)
    print(f"# A solution for {exercise_id} ({exercise.title}):\n{exercise.solution.strip()}")


def reference(exercise_id: str) -> Any:
    """The reference answer, in the form `check` accepts."""
    exercise = get(exercise_id)
    return exercise.run_source(exercise.solution)
