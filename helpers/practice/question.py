"""One drill question: its prompt, its right answer and a catalogue of wrong answers that name
their mistake, judged by the exercise engine (a `DrillExercise`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

from helpers.exercises.core import Mistake, Outcome, Verdict, check_exercise, judge_exercise
from helpers.exercises.kinds import DrillExercise
from helpers.pictures.layout import sharding_text
from helpers.practice.scenario import Scenario


@dataclass(frozen=True)
class KnownMistake:
    """A wrong answer a learner could give, its family of mistake, and the message it earns."""

    answer: Any
    family: str
    message: str


@dataclass(eq=False)
class Question:
    """A generated drill. Read `prompt`, answer with `check(answer)`; `answer` is a right one."""

    seed: int
    kind: str
    title: str
    scenario: Scenario
    ask: str  # the question itself, with the form of the answer
    answer: Any
    right: Any  # the answer in the form the judge compares
    normalize: Callable[[Any], Any]  # the drill's form: answer -> comparable value, or a Mistake
    fallback: Callable[[Any], str]  # comparable value -> message for an unlisted wrong answer
    praise: Callable[[Any], str]  # a right answer -> what it means
    setting: str  # the array and how it is placed (or the picture)
    example: str  # what an answer looks like, for messages about form
    mistakes: tuple[KnownMistake, ...] = ()

    def __post_init__(self):
        """Keep the candidate mistakes that are really wrong and distinct, first one wins."""
        kept, values = [], []
        for mistake in self.mistakes:
            try:
                value = self.normalize(mistake.answer)
            except Mistake:
                continue
            if value != self.right and value not in values:
                values.append(value)
                kept.append(mistake)
        self.mistakes = tuple(kept)

    @functools.cached_property
    def exercise(self) -> DrillExercise:
        """This question as an exercise of the engine."""
        return DrillExercise(
            id=f"drill {self.kind} {self.seed}", title=self.title, kind=self.kind, seed=self.seed,
            example=self.example, meaning=self.praise, form=self.normalize, right=lambda: self.right,
            wrong={self.normalize(m.answer): m.message for m in self.mistakes}, otherwise=self.fallback)

    @property
    def prompt(self) -> str:
        """The question as text: the mesh, the hosts, the array, what to answer."""
        sc = self.scenario
        return "\n".join([
            f"Drill {self.seed}: {self.title}",
            sc.mesh_text(),
            f"The mesh lists the devices {sc.order}; {sc.hosts_text()}.",
            self.setting,
            self.ask,
        ])

    def __repr__(self) -> str:
        return self.prompt

    def judge(self, answer: Any) -> Outcome:
        """The outcome for an answer; never raises and prints nothing."""
        return judge_exercise(self.exercise, answer)

    def check(self, answer: Any) -> Verdict:
        """Print a one-line verdict and record it in your progress; truthy when right."""
        return check_exercise(self.exercise, answer)

    def explain(self) -> str:
        """The right answer, where every tile lives (from JAX), and the code to see it yourself."""
        sc = self.scenario
        return "\n".join([
            f"answer: {self.praise(self.answer)}",
            sharding_text(sc.shape, sc.mesh, sc.spec, host_of=sc.host_of),
            sc.code(),
        ])
