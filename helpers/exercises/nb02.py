"""Exercises of notebook 02: PartitionSpecs on a (host, device) mesh."""
from __future__ import annotations

from jax import P

from helpers.exercises import forms
from helpers.exercises.core import Kernel, register
from helpers.exercises.kinds import Slot, SpecExercise, ValueExercise, course_mesh, normal_spec, placement
from helpers.exercises.rules import SpecRule, ValueRule
from helpers.pictures.layout import format_spec, sharding_layout

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)
MESH = (2, 4)  # 2 hosts x 4 devices, host h's devices in row h


# ------------------------------------------------------------------ 02.1 device 5's rows

_ONE_ROW = ("16 rows over 8 devices makes tiles of 2 rows; (start, stop) stops one past the last row, "
            "like a Python slice")
_TILE_OF_ONE = "each tile has 16 / 8 = 2 rows, not 1: scale the tile number by the tile size"

register(ValueExercise(
    id="02.1", kernel=KERNEL, answer_name="device5_rows",
    title="the rows device 5 holds under P(('device', 'host'), None)",
    solution="device5_rows = (6, 8)  # device 5 is (host=1, device=1): tile 1 * 2 + 1 = 3 of 8, rows 6:8",
    form=forms.span(like="(0, 2) for rows 0 and 1"),
    right=lambda: placement(course_mesh(MESH), P(("device", "host"), None), (16, 8))[5][0],  # device 5's rows
    wrong={
        (6, 7): _ONE_ROW, (7, 8): _ONE_ROW, (5, 6): _TILE_OF_ONE, (3, 4): _TILE_OF_ONE,
        (10, 12): "that is device 5's tile under P(('host', 'device')). In ('device', 'host') the LAST name "
                  "varies fastest: tiles go device 0 of host 0, device 0 of host 1, device 1 of host 0, ...",
        (2, 4): "device 5 is the second device of host 1, not of host 0; with ('device', 'host') the host "
                "picks between neighbouring tiles",
    },
    otherwise=lambda rows: (f"rows {rows[0]}:{rows[1]} are not device 5's; find its (host, device) cell in "
                            "the mesh, then its place in the order the tuple ('device', 'host') sets"),
    hints=(
        "Device 5 sits in the mesh cell (host=1, device=1). 16 rows over 8 tiles is 2 rows per tile.",
        "A tuple of axes numbers the tiles like digits of a number: the first name is the slow digit, "
        "the last the fast one. With ('device', 'host'), tile = device index x 2 + host index.",
    ),
))


# ------------------------------------------------------------------ 02.2 copies per tile

_COPY_SPECS = (P(), P(None, "host"), P("device", None), P("device", "host"))


def _copies() -> tuple[int, ...]:
    """For each spec, how many devices hold each tile of an (8, 8) array, from JAX's placement."""
    return tuple(sharding_layout((8, 8), course_mesh(MESH), spec).replication for spec in _COPY_SPECS)


def _first_wrong_spec(counts: tuple[int, ...]):
    """The spec of the first count that differs from JAX's."""
    return next(spec for spec, got, want in zip(_COPY_SPECS, counts, _copies()) if got != want)


register(ValueExercise(
    id="02.2", kernel=KERNEL, answer_name="copies", title="how many devices hold each tile of an (8, 8) array",
    solution="copies = (8, 4, 2, 1)  # the product of the sizes of the mesh axes each spec leaves unused",
    form=forms.ints(4, like="(1, 2, 3, 4)", what="one per spec"),
    right=_copies,
    wrong={(1, 2, 4, 8): "those are the numbers of tiles (distinct blocks), not of copies: P() makes 1 tile "
                         "that all 8 devices hold"},
    rules=(
        ValueRule(lambda c: all(got == want - 1 for got, want in zip(c, _copies())),
             example=lambda right: tuple(n - 1 for n in right),
             say="each of your counts is one short: you counted the copies beyond the first. Count every device "
                 "that holds the tile, the first one too (P('device', 'host') leaves each tile on 1 device)"),
        ValueRule(lambda c: c[1] == 2 and c[2] == 4, example=(8, 2, 4, 1),
             say="you swapped the axis sizes: 'host' has 2 entries and 'device' 4. P(None, 'host') leaves "
                 "'device' unused, so each tile is copied on 4 devices, one host's"),
        ValueRule(lambda c: c[0] == 1, example=(1, 4, 2, 1),
             say="P() splits nothing: the whole array is one tile, and every one of the 8 devices holds a copy"),
        ValueRule(lambda c: c[1] == 8, example=(8, 8, 2, 1),
             say="P(None, 'host') does use a mesh axis: 'host' splits dimension 1 (the columns). Only 'device' "
                 "is unused, so each tile has 4 copies; which dimension an axis splits does not change the count"),
        ValueRule(lambda c: c[2] in (8, 1), example=(8, 4, 8, 1),
             say="P('device', None) is P('device') with the None spelled out: 'device' splits the rows, 'host' "
                 "is unused, so each tile is on 2 devices, one per host"),
        ValueRule(lambda c: c[3] != 1, example=(8, 4, 2, 2),
             say="P('device', 'host') uses both mesh axes, so no axis is left to copy along: each tile is on "
                 "exactly 1 device"),
    ),
    otherwise=lambda c: (f"{format_spec(_first_wrong_spec(c))} is not right: count the devices along the mesh "
                         "axes the spec does NOT name; their sizes multiply"),
    hints=(
        "A mesh axis that the spec does not name does not split the array, so the array is copied "
        "along it. Which dimension a named axis splits does not matter for the count.",
        "The mesh has 'host' (size 2) and 'device' (size 4). Multiply the sizes of the unused axes; "
        "no unused axis means 1 copy.",
    ),
))


# ------------------------------------------------------------------ 02.3 the spec of a data-parallel batch

register(SpecExercise(
    id="02.3", kernel=KERNEL, answer_name="batch_spec",
    title="the spec that gives every device its own rows, host by host",
    solution='batch_spec = P(("host", "device"))  # or P(("host", "device"), None): dim 0 over both axes, host first',
    mesh=lambda: course_mesh(MESH),
    slots=(Slot(
        shape=(16, 8),
        right=P(("host", "device")),
        wrong={
            P("device"): "your spec replicates the batch across hosts: 'host' is unused, so device 0 (host 0) "
                         "and device 4 (host 1) are both said to hold rows 0:4, and each host's rows are "
                         "claimed to be the same",
            P("host"): "each host's 8 rows are copied onto all 4 of its devices ('device' is unused): every "
                       "device of a host would compute on the same rows",
            P(("device", "host")): "every device gets rows of its own, but they interleave: host 0's devices "
                                   "hold rows 0:2, 4:6, 8:10 and 12:14 instead of the first half. Put 'host' "
                                   "first in the tuple",
            P(): "P() copies the whole batch onto every device: all 8 would compute on the same 16 rows",
        },
        rules=(SpecRule(lambda spec: len(normal_spec(spec)) > 1, example=P(None, ("host", "device")),
                    say=lambda spec: f"{format_spec(spec)} splits dimension 1 (the 8 features of each example), "
                                     "so a device holds only part of each row; keep whole rows and split "
                                     "dimension 0, the batch"),),
        otherwise=lambda spec: f"{format_spec(spec)} does not give device k rows 2k:2k+2; split dimension 0 "
                               "over both mesh axes",
    ),),
    hints=(
        "To have 8 different pieces, dimension 0 must be split over both mesh axes, 2 x 4 ways; one "
        "entry of a spec can name several axes as a tuple.",
        "The order in the tuple decides which rows go where: the first name is the slow one. Host 0 "
        "should get the first half.",
    ),
))
