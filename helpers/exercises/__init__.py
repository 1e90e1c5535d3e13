"""Every exercise of the course in one registry: `check`, `hint`, `solution`.

In a notebook: `from helpers.exercises import check, hint, solution`. To add an exercise, see
`helpers.exercises.kinds` and CONTRIBUTING.md ("Adding an exercise").
"""
from helpers.exercises.core import (
    Exercise,
    Kernel,
    Mistake,
    NotAttempted,
    Outcome,
    Verdict,
    all_ids,
    call_learner,
    check,
    get,
    hint,
    judge,
    reference,
    register,
    solution,
    verdict,
)
from helpers.exercises.kinds import (
    Judged,
    ProcessExercise,
    ProgramExercise,
    Rule,
    Slot,
    SpecExercise,
    ValueExercise,
    WrongAnswer,
)
from helpers.exercises import catalog as _catalog  # noqa: F401  (registers every exercise)

__all__ = [
    "Exercise", "Judged", "Kernel", "Mistake", "NotAttempted", "Outcome", "ProcessExercise",
    "ProgramExercise", "Rule", "Slot", "SpecExercise", "ValueExercise", "Verdict", "WrongAnswer",
    "all_ids", "call_learner", "check", "get", "hint", "judge", "reference", "register",
    "solution", "verdict",
]
