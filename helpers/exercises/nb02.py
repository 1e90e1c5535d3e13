"""Exercises of notebook 02: PartitionSpecs on a (host, device) mesh."""
from __future__ import annotations

import numbers
from typing import Any

from helpers.exercises.core import Exercise, Mistake, WrongAnswer, describe, register
from helpers.exercises.judges import placement, require_spec


def _mesh():
    """The course's mesh: 2 hosts x 4 devices, host h's devices in row h."""
    import jax

    return jax.make_mesh((2, 4), ("host", "device"), devices=jax.devices()[:8])


# ------------------------------------------------------------------ 02.1 device 5's rows

def _judge_device5(answer: Any) -> None:
    if isinstance(answer, (slice, range)):
        if answer.step not in (None, 1):
            raise Mistake("the rows of one tile are consecutive: give a step of 1 (or none)")
        start, stop = answer.start, answer.stop
    elif isinstance(answer, (tuple, list)) and len(answer) == 2:
        start, stop = answer
    else:
        raise Mistake(f"expected the rows as (start, stop), like (0, 2) for rows 0 and 1, but got "
                      f"{describe(answer)}")
    if not all(isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in (start, stop)):
        raise Mistake(f"expected two whole numbers (start, stop), but got {describe(answer)}")
    got = (int(start), int(stop))
    if got == (6, 8):
        return
    if got == (6, 7) or got == (7, 8):
        raise Mistake("16 rows over 8 devices makes tiles of 2 rows; (start, stop) stops one past the "
                      "last row, like a Python slice")
    if got == (10, 12):
        raise Mistake("that is device 5's tile under P(('host', 'device')). In ('device', 'host') the "
                      "LAST name varies fastest: tiles go device 0 of host 0, device 0 of host 1, "
                      "device 1 of host 0, ...")
    if got == (2, 4):
        raise Mistake("device 5 is the second device of host 1, not of host 0; with ('device', 'host') "
                      "the host picks between neighbouring tiles")
    if got == (5, 6) or got == (3, 4):
        raise Mistake("each tile has 16 / 8 = 2 rows, not 1: scale the tile number by the tile size")
    raise Mistake(f"rows {got[0]}:{got[1]} are not device 5's; find its (host, device) cell in the mesh, "
                  "then its place in the order the tuple ('device', 'host') sets")


register(Exercise(
    id="02.1",
    title="the rows device 5 holds under P(('device', 'host'), None)",
    answer_name="device5_rows",
    solution="device5_rows = (6, 8)  # device 5 is (host=1, device=1): tile 1 * 2 + 1 = 3 of 8, rows 6:8",
    judge=_judge_device5,
    hints=(
        "Device 5 sits in the mesh cell (host=1, device=1). 16 rows over 8 tiles is 2 rows per tile.",
        "A tuple of axes numbers the tiles like digits of a number: the first name is the slow digit, "
        "the last the fast one. With ('device', 'host'), tile = device index x 2 + host index.",
    ),
    wrong_answers=(
        WrongAnswer("device5_rows = (10, 12)", "the LAST name varies fastest"),
        WrongAnswer("device5_rows = (3, 4)", "not 1"),
        WrongAnswer("device5_rows = (2, 4)", "second device of host 1"),
        WrongAnswer("device5_rows = (6, 7)", "stops one past the"),
        WrongAnswer("device5_rows = '6:8'", "expected the rows as (start, stop)"),
    ),
))


# ------------------------------------------------------------------ 02.2 copies per tile

_COPY_SPECS = ("P()", "P(None, 'host')", "P('device', None)", "P('device', 'host')")
_COPIES = (8, 4, 2, 1)


def _judge_copies(answer: Any) -> None:
    if (not isinstance(answer, (tuple, list)) or len(answer) != 4
            or not all(isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in answer)):
        raise Mistake(f"expected a tuple of 4 whole numbers like (1, 2, 3, 4), one per spec, but got "
                      f"{describe(answer)}")
    got = tuple(int(n) for n in answer)
    if got == _COPIES:
        return
    if got == (1, 2, 4, 8):
        raise Mistake("those are the numbers of tiles (distinct blocks), not of copies: P() makes 1 tile "
                      "that all 8 devices hold")
    if got[1] == 2 and got[2] == 4:
        raise Mistake("you swapped the axis sizes: 'host' has 2 entries and 'device' 4. P(None, 'host') "
                      "leaves 'device' unused, so each tile is copied on 4 devices, one host's")
    if got[0] == 1:
        raise Mistake("P() splits nothing: the whole array is one tile, and every one of the 8 devices "
                      "holds a copy")
    if got[1] == 8:
        raise Mistake("P(None, 'host') does use a mesh axis: 'host' splits dimension 1 (the columns). "
                      "Only 'device' is unused, so each tile has 4 copies; which dimension an axis splits "
                      "does not change the count")
    if got[2] == 8 or got[2] == 1:
        raise Mistake("P('device', None) is P('device') with the None spelled out: 'device' splits the "
                      "rows, 'host' is unused, so each tile is on 2 devices, one per host")
    if got[3] != 1:
        raise Mistake("P('device', 'host') uses both mesh axes, so no axis is left to copy along: "
                      "each tile is on exactly 1 device")
    wrong = next(i for i in range(4) if got[i] != _COPIES[i])
    raise Mistake(f"{_COPY_SPECS[wrong]} is not right: count the devices along the mesh axes the spec "
                  "does NOT name; their sizes multiply")


register(Exercise(
    id="02.2",
    title="how many devices hold each tile of an (8, 8) array",
    answer_name="copies",
    solution="copies = (8, 4, 2, 1)  # the product of the sizes of the mesh axes each spec leaves unused",
    judge=_judge_copies,
    hints=(
        "A mesh axis that the spec does not name does not split the array, so the array is copied "
        "along it. Which dimension a named axis splits does not matter for the count.",
        "The mesh has 'host' (size 2) and 'device' (size 4). Multiply the sizes of the unused axes; "
        "no unused axis means 1 copy.",
    ),
    wrong_answers=(
        WrongAnswer("copies = (1, 2, 4, 8)", "numbers of tiles"),
        WrongAnswer("copies = (8, 2, 4, 1)", "you swapped the axis sizes"),
        WrongAnswer("copies = (8, 8, 2, 1)", "does use a mesh axis"),
        WrongAnswer("copies = (8, 4, 8, 1)", "with the None spelled out"),
        WrongAnswer("copies = (8, 4, 2, 2)", "no axis is left to copy along"),
        WrongAnswer("copies = (1, 4, 2, 1)", "P() splits nothing"),
        WrongAnswer("copies = [8, 4, 2]", "expected a tuple of 4 whole numbers"),
    ),
))


# ------------------------------------------------------------------ 02.3 the spec of a data-parallel batch

_BATCH = (16, 8)


def _judge_batch_spec(answer: Any) -> None:
    from jax import P

    spec = require_spec(answer)
    mesh = _mesh()
    got = placement(mesh, spec, _BATCH)
    if got == placement(mesh, P(("host", "device")), _BATCH):
        return
    entries = list(spec) + [None] * (2 - len(spec))
    axes = [(e if isinstance(e, tuple) else (e,)) if e is not None else () for e in entries]
    used = set(axes[0]) | set(axes[1])
    if axes[1]:
        raise Mistake(f"{spec} splits dimension 1 (the 8 features of each example) over "
                      f"{', '.join(repr(a) for a in axes[1])}, so a device holds only part of each row; "
                      "keep whole rows and split dimension 0, the batch")
    if not used:
        raise Mistake("P() copies the whole batch onto every device: all 8 would compute on the same 16 rows")
    if used == {"device"}:
        raise Mistake("your spec replicates the batch across hosts: 'host' is unused, so device 0 (host 0) "
                      "and device 4 (host 1) are both said to hold rows 0:4, and each host's rows are "
                      "claimed to be the same")
    if used == {"host"}:
        raise Mistake("each host's 8 rows are copied onto all 4 of its devices ('device' is unused): "
                      "every device of a host would compute on the same rows")
    if axes[0] == ("device", "host"):
        raise Mistake("every device gets rows of its own, but they interleave: host 0's devices hold rows "
                      "0:2, 4:6, 8:10 and 12:14 instead of the first half. Put 'host' first in the tuple")
    raise Mistake(f"{spec} does not give device k rows 2k:2k+2; split dimension 0 over both mesh axes")


register(Exercise(
    id="02.3",
    title="the spec that gives every device its own rows, host by host",
    answer_name="batch_spec",
    solution='batch_spec = P(("host", "device"))  # or P(("host", "device"), None): dim 0 over both axes, host first',
    judge=_judge_batch_spec,
    hints=(
        "To have 8 different pieces, dimension 0 must be split over both mesh axes, 2 x 4 ways; one "
        "entry of a spec can name several axes as a tuple.",
        "The order in the tuple decides which rows go where: the first name is the slow one. Host 0 "
        "should get the first half.",
    ),
    wrong_answers=(
        WrongAnswer('batch_spec = P("device")', "replicates the batch across hosts"),
        WrongAnswer('batch_spec = P("host")', "copied onto all 4 of its devices"),
        WrongAnswer('batch_spec = P(("device", "host"))', "they interleave"),
        WrongAnswer('batch_spec = P(None, ("host", "device"))', "splits dimension 1"),
        WrongAnswer('batch_spec = P("host", "device")', "splits dimension 1"),
        WrongAnswer("batch_spec = P()", "copies the whole batch onto every device"),
        WrongAnswer('batch_spec = ("host", "device")', "expected a PartitionSpec"),
    ),
))
