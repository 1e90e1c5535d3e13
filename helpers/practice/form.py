"""The drill form: a question, an answer box and three buttons. The logic lives in
DrillSession (testable without a browser); the widget only copies values in and out.
"""
from __future__ import annotations

import html

import ipywidgets as widgets

from helpers.exercises.core import Mistake, Outcome, Status, judge_exercise
from helpers.practice.kinds import KINDS, drill
from helpers.practice.parse import parse_answer
from helpers.practice.question import Question

KIND_CHOICES = [("any kind", None)] + [(k.replace("_", " "), k) for k in KINDS]
_PASS_STYLE = "border-left: 4px solid #009E73; background: #eefaf5; padding: 4px 8px"
_FAIL_STYLE = "border-left: 4px solid #D55E00; background: #fff4ec; padding: 4px 8px"


class DrillSession:
    """The current drill, and what happens on Check, Show answer and Next question."""

    def __init__(self, seed: int = 0, kind: str | None = None):
        self.seed, self.kind = seed, kind
        self.question = self._make()

    def _make(self) -> Question:
        return drill(self.seed, self.kind)

    def go_to(self, seed: int, kind: str | None = None) -> Question:
        """Show the drill of this seed (and kind)."""
        self.seed, self.kind = seed, kind
        self.question = self._make()
        return self.question

    def next(self) -> Question:
        """The drill of the next seed."""
        return self.go_to(self.seed + 1, self.kind)

    def submit(self, text: str) -> Outcome:
        """Judge a typed answer; a checked answer counts in your progress."""
        try:
            answer = parse_answer(text)
        except Mistake as mistake:
            return Outcome(Status.MISTAKE, str(mistake))
        outcome = judge_exercise(self.question.exercise, answer)
        self.question.exercise.record(outcome.passed)
        return outcome

    def reveal(self) -> str:
        """The right answer and where every tile lives."""
        return self.question.explain()


def _pre(text: str) -> str:
    return f'<pre style="margin: 0; line-height: 1.25">{html.escape(text)}</pre>'


class DrillForm(widgets.VBox):
    """The widget; `.session` is its DrillSession."""

    def __init__(self, seed: int = 0, kind: str | None = None):
        self.session = DrillSession(seed, kind)
        look = dict(style={"description_width": "initial"})
        self.seed_box = widgets.BoundedIntText(value=seed, min=0, max=10**9, description="seed",
                                               layout=widgets.Layout(width="160px"), **look)
        self.kind_box = widgets.Dropdown(options=KIND_CHOICES, value=kind, description="kind", **look)
        self.prompt = widgets.HTML().add_class("drill-prompt")
        self.answer = widgets.Text(description="your answer", continuous_update=False, **look)
        self.answer.add_class("drill-answer")
        self.check_button = widgets.Button(description="Check", button_style="primary")
        self.reveal_button = widgets.Button(description="Show answer")
        self.next_button = widgets.Button(description="Next question")
        self.verdict = widgets.HTML().add_class("drill-verdict")
        self.explanation = widgets.HTML().add_class("drill-explanation")
        self.check_button.on_click(lambda _b: self.check())
        self.reveal_button.on_click(lambda _b: self.reveal())
        self.next_button.on_click(lambda _b: self.next())
        self.answer.observe(lambda _c: self.check(), names="value")
        self.seed_box.observe(lambda _c: self._go(), names="value")
        self.kind_box.observe(lambda _c: self._go(), names="value")
        super().__init__([
            widgets.HBox([self.seed_box, self.kind_box]),
            self.prompt,
            widgets.HBox([self.answer, self.check_button, self.reveal_button, self.next_button],
                         layout=widgets.Layout(flex_flow="row wrap")),
            self.verdict, self.explanation,
        ])
        self.add_class("drill-form")
        self._last: tuple | None = None  # (seed, kind, text, passed) of the last check
        self._show()

    def __repr__(self) -> str:  # short and deterministic: it is the cell's text/plain output
        q = self.session.question
        return f"DrillForm(seed {q.seed}, {self.session.kind or 'any kind'}: {q.title})"

    def _show(self) -> None:
        self.prompt.value = _pre(self.session.question.prompt)
        self.answer.placeholder = self.session.question.example
        self.verdict.value = self.explanation.value = ""

    def _go(self) -> None:
        self.session.go_to(self.seed_box.value, self.kind_box.value)
        self._show()

    def check(self) -> bool:
        """Judge the answer box; show the verdict line."""
        text = self.answer.value
        if not text.strip():
            return False
        key = (self.session.seed, self.session.kind, text)
        if self._last and self._last[:3] == key:  # Enter, then a click on Check: judged once
            return self._last[3]
        outcome = self.session.submit(text)
        self._last = key + (outcome.passed,)
        mark, style = ("✅", _PASS_STYLE) if outcome.passed else ("❌ not yet:", _FAIL_STYLE)
        self.verdict.value = f'<div style="{style}">{mark} {html.escape(outcome.message)}</div>'
        return outcome.passed

    def reveal(self) -> None:
        """Show the right answer and the placement behind it."""
        self.explanation.value = _pre(self.session.reveal())

    def next(self) -> None:
        """Go to the next seed's drill."""
        self.seed_box.value = self.session.seed + 1  # observing seed_box moves the session
        self.answer.value = ""
