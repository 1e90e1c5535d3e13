"""Generic mistakes, built from a question's spec and mesh: each is the spec a learner
effectively used instead of the real one, with a sentence that names the slip.

Families: the order of the axes in a tuple swapped, the host axis and another axis swapped,
split vs copied (an axis left out, or an unused axis put in), and the two dimensions swapped.
Answers to a drill are compared by what JAX does with these specs, never by their text.
"""
from __future__ import annotations

from dataclasses import dataclass

from jax.sharding import PartitionSpec

from helpers.pictures.layout import format_spec
from helpers.practice.scenario import axes_of

TUPLE_ORDER = "tuple order"
HOST_DEVICE = "host/device swapped"
SPLIT_COPIED = "split vs copied"
DIMENSIONS = "dimensions swapped"
TILE_SIZE = "tile size"
OFF_BY_ONE = "stop off by one"
COUNTING = "tiles vs copies"
FAMILIES = (TUPLE_ORDER, HOST_DEVICE, SPLIT_COPIED, DIMENSIONS, TILE_SIZE, OFF_BY_ONE, COUNTING)


@dataclass(frozen=True)
class Variant:
    """A spec that stands for one mistake, and the sentence that explains the mistake."""

    spec: object  # PartitionSpec
    family: str
    why: str  # for an answer that follows this spec instead of the question's
    why_spec: str  # for a learner who wrote this spec for the question's picture


def _entry(entry) -> str:
    return format_spec((entry,))[2:-1]


def _rebuild(entries):
    return PartitionSpec(*(None if not a else a[0] if len(a) == 1 else tuple(a) for a in entries))


def variants(spec, axis_names: tuple[str, ...], rank: int) -> list[Variant]:
    """Every generic mistake for `spec` on a mesh with these axes, most telling first."""
    entries = [list(axes_of(e)) for e in spec] + [[] for _ in range(rank - len(spec))]
    out: list[Variant] = []
    for dim, axes in enumerate(entries):
        if len(axes) >= 2:
            swapped = [list(a) for a in entries]
            swapped[dim] = axes[::-1]
            out.append(Variant(_rebuild(swapped), TUPLE_ORDER,
                               f"the order inside {_entry(tuple(axes))} matters: the first axis is the slow "
                               "one (like the tens digit of a number), the last the fast one",
                               f"your tuple has the axes in the other order; in {_entry(tuple(axes))} the "
                               "first axis is the slow one (like the tens digit), the last the fast one"))
    if "host" in axis_names:
        for other in axis_names:
            if other == "host":
                continue
            rename = {"host": other, other: "host"}
            swapped = [[rename.get(a, a) for a in axes] for axes in entries]
            if swapped != entries:
                out.append(Variant(_rebuild(swapped), HOST_DEVICE,
                                   f"that mixes up the mesh axes 'host' and '{other}': read the axis names "
                                   "and sizes off the mesh",
                                   f"your spec mixes up the mesh axes 'host' and '{other}': read the axis "
                                   "names and sizes off the mesh"))
    for dim, axes in enumerate(entries):
        for axis in axes:
            fewer = [list(a) for a in entries]
            fewer[dim] = [a for a in axes if a != axis]
            out.append(Variant(_rebuild(fewer), SPLIT_COPIED,
                               f"'{axis}' splits dimension {dim} as well: an axis named in the spec splits, "
                               "only the axes it leaves out make copies",
                               f"in the picture dimension {dim} is split over '{axis}' as well; an axis "
                               "left out of the spec makes copies instead"))
    used = {a for axes in entries for a in axes}
    for axis in axis_names:
        if axis in used:
            continue
        for dim in range(rank):
            more = [list(a) for a in entries]
            more[dim] = more[dim] + [axis]
            out.append(Variant(_rebuild(more), SPLIT_COPIED,
                               f"'{axis}' is not in the spec, so it splits nothing: the array is copied "
                               f"along '{axis}'",
                               f"in the picture the array is copied along '{axis}': an axis in the spec "
                               f"splits, so leave '{axis}' out"))
    if rank == 2 and entries[0] != entries[1]:
        out.append(Variant(_rebuild(entries[::-1]), DIMENSIONS,
                           "entry 0 of a spec is about dimension 0 (rows) and entry 1 about dimension 1 "
                           "(columns); those are swapped",
                           "your entries are on the wrong dimensions: entry 0 of a spec is about "
                           "dimension 0 (rows), entry 1 about dimension 1 (columns)"))
    return out
