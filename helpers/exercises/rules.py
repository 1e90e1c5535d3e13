"""Rules: families of mistakes, one kind per thing a rule's predicate receives.

Each kind is `Kind(when, say, example)`: `when(...)` is true for the members of the family, `say`
is their message (text, or a function of what `when` received, or of the case), and `example` is
a member that no earlier entry of the catalogue catches (the tests check it earns this message, so
a rule is never dead or shadowed). An exercise refuses a rule of another kind, by name.

| kind          | declared in                         | when(...) receives                         | say(...) receives |
|---------------|-------------------------------------|--------------------------------------------|-------------------|
| `ValueRule`   | `ValueExercise.rules`               | the answer in its form's normal form       | the same value    |
| `SpecRule`    | `Slot.rules`                        | the learner's PartitionSpec                | the same spec     |
| `ErrorRule`   | `ProgramExercise.errors`            | the text of the exception the code raised  | the case          |
| `OutputRule`  | `ProgramExercise.families`          | the case (`case.got`, `case.want`, ...)    | the case          |
| `CodeRule`    | `ProgramExercise.checks`            | (the function, the mesh): structure        | the case          |
| `TrafficRule` | `PuzzleExercise.traffic`            | (your traffic report, the flat psum's)     | the same two      |
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from helpers.exercises.core import Message


@dataclass(frozen=True)
class Rule:
    """A family of mistakes (use one of its kinds below)."""

    when: Callable[..., bool]
    say: Message
    example: Any = None


class ValueRule(Rule):
    """A family of wrong values: when(value), say(value); `example` may be a function of the right value."""


class SpecRule(Rule):
    """A family of wrong PartitionSpecs: when(spec), say(spec)."""


class ErrorRule(Rule):
    """A family of exceptions the learner's code raised: when(error_text), say(case)."""


class OutputRule(Rule):
    """A family of wrong outputs that no catalogued program computes: when(case), say(case)."""


class CodeRule(Rule):
    """A structural rule tried once the outputs are right: when(fn, mesh), say(case)."""


class TrafficRule(Rule):
    """A rule on what a right program sends: when(yours, flat), say(yours, flat) on two traffic reports."""


def of_kind(kind: type[Rule], rules: tuple[Rule, ...], where: str) -> None:
    """Refuse a rule of another kind than `kind` in the declaration field `where`."""
    for rule in rules:
        if type(rule) is not kind:
            raise TypeError(f"{where} takes {kind.__name__}s ({kind.__doc__.split(': ')[1].split(';')[0]}), "
                            f"not a {type(rule).__name__}")
