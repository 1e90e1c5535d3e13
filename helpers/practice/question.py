"""One drill question: its prompt, its right answer, a catalogue of wrong answers that name
their mistake, and a judge that never raises.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from helpers.exercises.core import Verdict
from helpers.practice.scenario import Scenario


class Wrong(Exception):
    """The answer is wrong (often in form): the message says what to write instead."""


@dataclass(frozen=True)
class Mistake:
    """A wrong answer a learner could give, its family of mistake, and the message it earns."""

    answer: Any
    family: str
    message: str


class Result(Verdict):
    """What `Question.check` returns: truthy when the answer passed, equal to True or False.

    It displays nothing in a notebook, because `check` has already printed its line.
    """

    def __init__(self, passed: bool, message: str):
        super().__init__(passed)
        self.message = message


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
    normalize: Callable[[Any], Any]  # learner's answer -> comparable form, or raises Wrong
    fallback: Callable[[Any, Any], str]  # (comparable, raw) -> message for an unlisted wrong answer
    praise: Callable[[Any], str]  # raw right answer -> what it means
    setting: str  # the array and how it is placed (or the picture)
    example: str  # what an answer looks like, for messages about form
    mistakes: tuple[Mistake, ...] = ()
    _catalog: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        """Keep the candidate mistakes that are really wrong and distinct, first one wins."""
        kept = []
        for mistake in self.mistakes:
            try:
                value = self.normalize(mistake.answer)
            except Wrong:
                continue
            if value != self.right and value not in self._catalog:
                self._catalog[value] = mistake.message
                kept.append(mistake)
        self.mistakes = tuple(kept)

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

    def judge(self, answer: Any) -> tuple[bool, str]:
        """(passed, message) for an answer; never raises and prints nothing."""
        if answer is Ellipsis:
            return False, f"not attempted yet: replace ... with your answer, like {self.example}"
        try:
            value = self.normalize(answer)
            if value == self.right:
                return True, self.praise(answer)
            if value in self._catalog:
                return False, self._catalog[value]
            return False, self.fallback(value, answer)
        except Wrong as wrong:
            return False, str(wrong)
        except Exception as error:  # an answer this judge did not foresee: say so, never crash
            return False, (f"this answer could not be checked ({type(error).__name__}: {error}); "
                           f"write it like {self.example}")

    def check(self, answer: Any) -> Result:
        """Print a one-line verdict and record a pass in your progress; truthy when right."""
        passed, message = self.judge(answer)
        if answer is Ellipsis:
            print(f"⏳ drill {self.seed}: {message}")
        elif passed:
            print(f"✅ drill {self.seed}: right, {message}.")
        else:
            print(f"❌ drill {self.seed} not yet: {message}. (explain() on this drill shows the answer)")
        if answer is not Ellipsis:
            from helpers.progress import record_drill

            record_drill(self.kind, self.seed, passed)
        return Result(passed, message)

    def explain(self) -> str:
        """The right answer, where every tile lives (from JAX), and the code to see it yourself."""
        from helpers.layout import sharding_text

        sc = self.scenario
        return "\n".join([
            f"answer: {self.praise(self.answer)}",
            sharding_text(sc.shape, sc.mesh, sc.spec, host_of=sc.host_of),
            sc.code(),
        ])
