"""Generated sharding drills: unlimited questions, each judged from JAX's own placement.

>>> q = drill(7)          # the same seed always gives the same question   # doctest: +SKIP
>>> print(q.prompt)                                                        # doctest: +SKIP
>>> q.check((4, 8))       # prints one line; truthy when right             # doctest: +SKIP
>>> drill_form(seed=0)    # the same drills in a small form                # doctest: +SKIP

Kinds: "tile" (which rows/columns device k holds), "holders" (which devices hold an
element), "global_shape" (from host-local shapes), "copies" (of each tile), "spec" (which
P(...) draws a picture). Needs 8 devices: `use_fake_devices(8)` first.
"""
from __future__ import annotations

from helpers.practice.form import DrillForm
from helpers.practice.kinds import KINDS, drill, drills
from helpers.practice.question import Question


def drill_form(seed: int = 0, kind: str | None = None) -> DrillForm:
    """A small form: a question, an answer box, Check, Show answer and Next question."""
    return DrillForm(seed, kind)


__all__ = ["KINDS", "Question", "drill", "drill_form", "drills"]
