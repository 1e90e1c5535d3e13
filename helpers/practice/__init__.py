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

import random

from helpers.practice.kinds import KINDS
from helpers.practice.question import Question, Result


def drill(seed: int | None = None, kind: str | None = None) -> Question:
    """The drill question of this seed (a fresh random one without a seed); `kind` picks its kind."""
    if seed is None:
        seed = random.SystemRandom().randrange(100_000)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0, like drill(7); got {seed!r}")
    if kind is not None and kind not in KINDS:
        raise ValueError(f"no drill kind {kind!r}; the kinds are {', '.join(map(repr, KINDS))}")
    rng = random.Random(seed)
    natural = rng.choice(list(KINDS))
    return KINDS[kind or natural](rng, seed)


def drills(first_seed: int, count: int, kind: str | None = None) -> list[Question]:
    """A set of questions to hand out: the drills of seeds first_seed .. first_seed + count - 1."""
    return [drill(first_seed + i, kind) for i in range(count)]


def drill_form(seed: int = 0, kind: str | None = None):
    """A small form: a question, an answer box, Check, Show answer and Next question."""
    from helpers.practice.form import DrillForm

    return DrillForm(seed, kind)


__all__ = ["KINDS", "Question", "Result", "drill", "drill_form", "drills"]
