"""Every exercise of the course in one registry: `check`, `hint`, `solution`.

In a notebook: `from helpers.exercises import check, hint, solution`.
"""
from helpers.exercises.core import (
    Exercise,
    Mistake,
    NotAttempted,
    Verdict,
    WrongAnswer,
    all_ids,
    call_learner,
    check,
    get,
    hint,
    reference,
    register,
    solution,
    verdict,
)
from helpers.exercises import catalog as _catalog  # noqa: F401  (registers every exercise)

__all__ = [
    "Exercise", "Mistake", "NotAttempted", "Verdict", "WrongAnswer", "all_ids", "call_learner",
    "check", "get", "hint", "reference", "register", "solution", "verdict",
]
