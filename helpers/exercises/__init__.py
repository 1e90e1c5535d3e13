"""Every exercise of the course in one registry: `check`, `hint`, `solution`.

In a notebook: `from helpers.exercises import check, hint, solution`. The kinds of exercise are
in `helpers.exercises.kinds` and `.processes`, the kinds of rule in `.rules`; CONTRIBUTING.md
("Adding an exercise") shows one of each.
"""
import importlib
import pkgutil

from helpers.exercises.core import (  # noqa: F401  (the public API)
    Exercise, Kernel, Mistake, NotAttempted, Outcome, Verdict, all_ids, call_learner, check, get, hint, judge,
    reference, register, solution, verdict,
)
from helpers.exercises.kinds import DrillExercise, ProgramExercise, Slot, SpecExercise, ValueExercise  # noqa: F401
from helpers.exercises.rules import CodeRule, ErrorRule, OutputRule, SpecRule, TrafficRule, ValueRule  # noqa: F401
from helpers.exercises.processes import ProcessExercise  # noqa: F401

for _module in pkgutil.iter_modules(__path__):  # each notebook's module registers its exercises
    if _module.name.startswith("nb"):
        importlib.import_module(f"{__name__}.{_module.name}")
