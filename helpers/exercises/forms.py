"""Forms: turn a learner's answer into the value a catalogue compares, or say what type was expected.

A form is a function `answer -> value`. It accepts the spellings a learner naturally uses where
the value is unambiguous (a list where a tuple is natural, a range for (start, stop), numpy or
jax arrays and scalars, 8.0 for 8), returns one hashable normal form, and
raises a Mistake that names the type it wanted when the answer has the wrong type or length.

>>> ints(2, like="(0, 2)")((6, 8))
(6, 8)
"""
from __future__ import annotations

from numbers import Integral
from typing import Any, Callable

import jax
import numpy as np
from jax.sharding import PartitionSpec

from helpers.exercises.core import Mistake, describe

Form = Callable[[Any], Any]


def _is_whole(value: Any) -> bool:
    """An int (numpy's too) or a whole-valued float like 8.0; not a bool."""
    if isinstance(value, (bool, np.bool_)):
        return False
    return isinstance(value, Integral) or (isinstance(value, (float, np.floating)) and float(value).is_integer())


def _fraction(values: Any) -> str:
    """' (8.5 is not a whole number)' for the first number of the list `values` with a fraction; '' if none."""
    if not isinstance(values, (tuple, list)):
        return ""
    odd = next((v for v in values if isinstance(v, (float, np.floating)) and not float(v).is_integer()), None)
    return "" if odd is None else f" ({float(odd):g} is not a whole number)"


def _plain(answer: Any) -> Any:
    """`answer` in Python's own types: numpy and jax arrays and scalars of numbers or booleans as (nested)
    lists, ints, floats and bools, ranges as lists, inside lists, tuples and sets too."""
    if isinstance(answer, range):
        return list(answer)
    if isinstance(answer, (np.ndarray, np.generic, jax.Array)) and np.asarray(answer).dtype.kind in "iubf":
        return np.asarray(answer).tolist()
    if type(answer) in (list, tuple, set, frozenset):  # not a PartitionSpec, which is a tuple too
        return type(answer)(_plain(a) for a in answer)
    return answer


def whole(what: str) -> Form:
    """One whole number (not a bool, not a string)."""
    def form(answer: Any) -> int:
        given, answer = answer, _plain(answer)
        if not _is_whole(answer):
            raise Mistake(f"expected a whole number ({what}); got {describe(given)}")
        return int(answer)
    return form


def ints(n: int, *, like: str, what: str = "") -> Form:
    """A tuple (or a list) of `n` whole numbers."""
    tail = f", {what}" if what else ""

    def form(answer: Any) -> tuple[int, ...]:
        given, answer = answer, _plain(answer)
        if not isinstance(answer, (tuple, list)) or len(answer) != n or not all(map(_is_whole, answer)):
            raise Mistake(f"expected a tuple of {n} whole numbers like {like}{tail}, but got {describe(given)}"
                          + _fraction(answer))
        return tuple(int(v) for v in answer)
    return form


def shape(what: str = "the shape") -> Form:
    """An array shape: a tuple of whole numbers like (8, 4) (a list is accepted)."""
    def form(answer: Any) -> tuple[int, ...]:
        given, answer = answer, _plain(answer)
        if not isinstance(answer, (tuple, list)) or not all(map(_is_whole, answer)):
            raise Mistake(f"expected {what} as a tuple of whole numbers like (8, 4), but got {describe(given)}"
                          + _fraction(answer))
        return tuple(int(v) for v in answer)
    return form


def tuple_of(*parts: Form, like: str, what: str = "", of: str = "entries") -> Form:
    """A tuple (or a list) with one entry per part, each put in its part's form."""
    tail = f", {what}" if what else ""

    def form(answer: Any) -> tuple:
        given = answer
        if isinstance(answer, (np.ndarray, jax.Array)) and answer.ndim == 1:  # an array of entries
            answer = _plain(answer)
        if not isinstance(answer, (tuple, list)) or len(answer) != len(parts):
            raise Mistake(f"expected a tuple of {len(parts)} {of} like {like}{tail}, but got {describe(given)}")
        return tuple(part(a) for part, a in zip(parts, answer))
    return form


def _floats(answer: Any) -> np.ndarray | None:
    """The answer as an array of floats; None for text, a dict, None, or what numpy cannot convert."""
    if isinstance(answer, (str, bytes, dict)) or answer is None:
        return None
    try:
        return np.asarray(answer, dtype=float)
    except (TypeError, ValueError):
        return None


def numbers(n: int, what: str) -> Form:
    """`n` ordinary numbers (a list, tuple or 1-D array), as a tuple of floats."""
    def form(answer: Any) -> tuple[float, ...]:
        values = _floats(answer)
        if values is None:
            raise Mistake(f"expected {what} as a list of {n} numbers, but got {describe(answer)}")
        if values.ndim != 1 or values.shape[0] != n:
            raise Mistake(f"expected {n} numbers ({what}), one per device, but got {describe(answer)}")
        if not np.all(np.isfinite(values)):
            raise Mistake(f"expected {n} ordinary numbers ({what}); your list has nan or inf in it")
        return tuple(values.tolist())
    return form


def number(what: str) -> Form:
    """One real number (an int, a float or a 0-d array), as a float."""
    def form(answer: Any) -> float:
        values = None if isinstance(answer, bool) else _floats(answer)
        if values is None or values.ndim != 0:
            raise Mistake(f"{what} is one number, but you gave {describe(answer)}")
        return float(values)
    return form


def number_list(what: str) -> Form:
    """A list (or tuple, or 1-D array) of numbers of any length, as a tuple of floats."""
    def form(answer: Any) -> tuple[float, ...]:
        values = _floats(answer)
        if values is None:
            raise Mistake(f"{what} is a list of numbers, but you gave {describe(answer)}")
        return tuple(values.reshape(-1).tolist())
    return form


def booleans(n: int, *, like: str, what: str) -> Form:
    """A tuple of `n` booleans (True/False, not 1/0)."""
    def form(answer: Any) -> tuple[bool, ...]:
        given, answer = answer, _plain(answer)
        if not isinstance(answer, (tuple, list)) or len(answer) != n or not all(isinstance(a, bool) for a in answer):
            raise Mistake(f"expected a tuple of {n} booleans like {like}, {what}, but got {describe(given)}")
        return tuple(answer)
    return form


def text(like: str) -> Form:
    """A string, spaces and quotes dropped."""
    def form(answer: Any) -> str:
        if not isinstance(answer, str):
            raise Mistake(f"expected the text jax.typeof prints, as a string like {like}; got {describe(answer)}")
        return answer.replace(" ", "").replace("'", "").replace('"', "")
    return form


def span(like: str, word: str = "rows") -> Form:
    """Rows (or columns: `word`) start..stop-1 as (start, stop): a pair, a slice or a range with step 1."""
    def form(answer: Any) -> tuple[int, int]:
        if isinstance(answer, (slice, range)):
            if answer.step not in (None, 1):
                raise Mistake(f"the {word} of one tile are consecutive: give a step of 1 (or none)")
            answer = (answer.start, answer.stop)
        given = answer
        if not isinstance(answer, (np.ndarray, jax.Array)) or answer.ndim == 1:  # np.array([6, 8]) too
            answer = _plain(answer)
        if not isinstance(answer, (tuple, list)) or len(answer) != 2:
            raise Mistake(f"expected the {word} as (start, stop), like {like}, but got {describe(given)}")
        if not all(map(_is_whole, answer)):
            raise Mistake(f"expected two whole numbers (start, stop), but got {describe(given)}")
        return int(answer[0]), int(answer[1])
    return form


def letters(valid: str, like: str) -> Form:
    """A set of letters, given as a set, a list or a string like 'ABD'."""
    def form(answer: Any) -> frozenset[str]:
        if isinstance(answer, str):
            chosen = [c for c in answer.upper() if c.isalpha()]
        elif isinstance(answer, (set, frozenset, list, tuple)) and all(isinstance(a, str) for a in answer):
            chosen = [a.strip().upper() for a in answer]
        else:
            raise Mistake(f"expected a set of mesh letters like {like}, but got {describe(answer)}")
        unknown = sorted(set(chosen) - set(valid))
        if unknown:
            raise Mistake(f"there is no mesh {unknown[0]!r}; the meshes are {valid[0]!r} to {valid[-1]!r}")
        return frozenset(chosen)
    return form


def cells(like: str) -> Form:
    """A set of mesh cells, each a pair (row index, column index)."""
    def form(answer: Any) -> frozenset[tuple[int, int]]:
        given, answer = answer, _plain(answer)
        if not isinstance(answer, (list, tuple, set, frozenset)):
            raise Mistake(f"expected a list of (host index, device index) pairs like {like}, but got "
                          f"{describe(given)}")
        items = list(answer)
        if items and all(map(_is_whole, items)):
            raise Mistake("those look like device ids; give the mesh cells instead, as (host index, device "
                          "index) pairs, like (0, 1) for row host=0, column device=1")
        for item in items:
            if not isinstance(item, (tuple, list)) or len(item) != 2 or not all(map(_is_whole, item)):
                raise Mistake(f"each cell should be a pair of whole numbers (host index, device index), "
                              f"but one is {describe(item)}")
        return frozenset((int(a), int(b)) for a, b in items)
    return form


def grid(rows: int, cols: int, like: str, what: str) -> Form:
    """A rows x cols grid of whole numbers (nested lists or an int array), as nested tuples."""
    def form(answer: Any) -> tuple[tuple[int, ...], ...]:
        plain = _plain(answer)
        if not isinstance(plain, (list, tuple, np.ndarray, jax.Array)):
            raise Mistake(f"expected a {rows} x {cols} grid of {what} like {like}, but got {describe(answer)}")
        try:
            values = np.asarray(plain)
        except ValueError:
            values = np.asarray(0.5)
        if values.dtype.kind == "f" and np.all(np.mod(values, 1) == 0):
            values = values.astype(int)  # whole numbers written as floats, like 1.0
        if values.dtype.kind not in "iu":
            raise Mistake(f"expected a {rows} x {cols} grid of whole {what} like {like}, but got {describe(answer)}")
        if values.shape != (rows, cols):
            raise Mistake(f"the mesh has shape ({rows}, {cols}), so give a {rows} x {cols} grid of {what}; "
                          f"yours has shape {values.shape}")
        return tuple(map(tuple, values.tolist()))
    return form


def groups(n: int, like: str) -> Form:
    """A partition of the devices 0..n-1 into groups, as a frozenset of frozensets."""
    def form(answer: Any) -> frozenset[frozenset[int]]:
        given, answer = answer, _plain(answer)
        if not isinstance(answer, (list, tuple, set, frozenset)) or not answer:
            raise Mistake(f"expected a list of groups of device ids, like {like}; got {describe(given)}")
        for group in answer:
            if not isinstance(group, (list, tuple, set, frozenset)) or not all(map(_is_whole, group)):
                raise Mistake(f"each group must be a list of device ids like [0, 1]; got {describe(group)}")
        if sorted(d for g in answer for d in g) != list(range(n)):
            raise Mistake(f"list each of the {n} devices 0..{n - 1} exactly once, in the group of devices "
                          "whose copies are equal")
        return frozenset(frozenset(int(d) for d in g) for g in answer)
    return form


def axis_names(valid: tuple[str, ...], like: str) -> Form:
    """One mesh axis name or a tuple of them, as a frozenset."""
    def form(answer: Any) -> frozenset[str]:
        names = tuple(answer) if isinstance(answer, (tuple, list, frozenset)) else (answer,)
        if not names or not all(isinstance(n, str) for n in names):
            raise Mistake(f"mean_over names mesh axes, like {like}; got {describe(answer)}")
        unknown = [n for n in names if n not in valid]
        if unknown:
            raise Mistake(f"the mesh's axes are {' and '.join(map(repr, valid))}; {unknown[0]!r} is not one of them")
        return frozenset(names)
    return form


def spec(like: str) -> Form:
    """A PartitionSpec; a bare tuple or string gets a message about the type."""
    def form(answer: Any):
        if not isinstance(answer, PartitionSpec):
            raise Mistake(f"expected a PartitionSpec such as {like}, but got {describe(answer)}")
        return answer
    return form


def keys(names: tuple[str, ...], part: Form, what: str) -> Form:
    """A dict with exactly these keys, each value in `part`'s form; returned in `names` order."""
    def form(answer: Any) -> tuple:
        listed = ", ".join(repr(n) for n in names[:-1]) + f" and {names[-1]!r}"
        if not isinstance(answer, dict):
            raise Mistake(f"expected a dict with the keys {listed}, each {what}; got {describe(answer)}")
        missing = [n for n in names if n not in answer]
        unexpected = [k for k in answer if k not in names]
        if missing or unexpected:
            faults = ([f"no {_keys(missing)}"] if missing else []) + (
                [("an unexpected " if len(unexpected) == 1 else "unexpected ") + _keys(unexpected)] if unexpected else [])
            raise Mistake(f"expected a dict with the keys {listed}, each {what}; your dict has {(', and ' if len(missing) > 1 else ' and ').join(faults)}")
        return tuple(part(answer[n]) for n in names)
    return form


def _keys(keys: list) -> str:
    """"key 'w1'" or "keys 'w1' and 'x'"."""
    if len(keys) == 1:
        return f"key {keys[0]!r}"
    return "keys " + ", ".join(map(repr, keys[:-1])) + f" and {keys[-1]!r}"


def or_refused(names: tuple[str, ...], part: Form, *, like: str, per: str, should_be: str) -> Form:
    """One entry per name: a value in `part`'s form, or None where JAX refuses the expression."""
    def form(answer: Any) -> tuple:
        if not isinstance(answer, (tuple, list)) or len(answer) != len(names):
            raise Mistake(f"expected a tuple of {len(names)} entries like {like}, one per {per}, but got "
                          f"{describe(answer)}")
        out = []
        for name, entry in zip(names, answer):
            try:
                out.append(None if entry is None else part(entry))
            except Mistake:
                raise Mistake(f"the entry for {name} should be {should_be} or None (JAX refuses it), but it is "
                              f"{describe(entry)}") from None
        return tuple(out)
    return form
