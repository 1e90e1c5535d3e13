"""Exercises of notebook 03: global arrays from host-local data."""
from __future__ import annotations

import jax
import numpy as np
from jax import P
from jax.sharding import Mesh

from helpers.emulated import hosts
from helpers.exercises import forms
from helpers.exercises.core import Kernel, register
from helpers.exercises.kinds import (
    Slot, SpecExercise, ValueExercise, alone, course_mesh, from_hosts, normal_spec, placement,
)
from helpers.exercises.rules import SpecRule, ValueRule
from helpers.pictures.layout import format_spec

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)
HOSTS = 2


# ------------------------------------------------------------------ 03.1 the inferred global shape

_SHAPE_SPECS = (P(("host", "device")), P("host"), P("device"), P())
_LOCAL = (16, 4)  # each host's batch


def _global_shapes() -> tuple:
    """The global shapes the emulated hosts' make_array_from_process_local_data builds."""
    parts = [np.zeros(_LOCAL, np.float32)] * HOSTS
    return tuple(from_hosts(parts, spec).shape for spec in _SHAPE_SPECS)


def _rows(shapes) -> tuple:
    return tuple(s[0] for s in shapes)


def _first_wrong_spec(shapes):
    """The spec of the first shape that differs from JAX's."""
    return next(spec for spec, got, want in zip(_SHAPE_SPECS, shapes, _global_shapes()) if got != want)


_STACKED, _ALONE = HOSTS * _LOCAL[0], _LOCAL[0]

register(ValueExercise(
    id="03.1", kernel=KERNEL, answer_name="global_shapes",
    title="the global shapes JAX infers from two hosts' (16, 4) batches",
    solution="global_shapes = ((32, 4), (32, 4), (16, 4), (16, 4))  # 'host' named: the hosts' rows stack",
    form=forms.tuple_of(*(forms.shape(f"the shape for {format_spec(s)}") for s in _SHAPE_SPECS),
                        like="((8, 4), (8, 4), (8, 4), (8, 4))", what="one per spec", of="shapes"),
    right=_global_shapes,
    wrong={(_LOCAL,) * 4: "that is the shape each host passes, not the global one: with P(('host', 'device')) the "
                          "two hosts' 16 rows are different rows, so the global array has 32"},
    rules=(
        ValueRule(lambda shapes: any(len(s) != 2 for s in shapes), example=((32,), (32, 4), (16, 4), (16, 4)),
             say="each host passes a 2-D batch, so every global shape has 2 numbers: (rows, features)"),
        ValueRule(lambda shapes: any(s[1] != _LOCAL[1] for s in shapes), example=((32, 8), (32, 4), (16, 4), (16, 4)),
             say="none of these specs splits dimension 1, so the 4 features stay 4"),
        ValueRule(lambda shapes: _STACKED in _rows(shapes)[2:], example=((32, 4),) * 4,
             say=lambda shapes: f"{format_spec(_SHAPE_SPECS[2 if _rows(shapes)[2] == _STACKED else 3])} does not "
                                "name 'host', so it says both hosts hold the SAME rows: JAX takes the two batches "
                                "as copies and does not stack them. The global array keeps 16 rows"),
        ValueRule(lambda shapes: max(_rows(shapes)[:2]) > _STACKED or _rows(shapes)[2] > _ALONE,
             example=((128, 4), (32, 4), (64, 4), (16, 4)),
             say="JAX does not multiply by the number of devices: each host passes its WHOLE part, and JAX "
                 "multiplies by how many hosts hold different rows (2 when 'host' splits the rows, "
                 "1 when it does not)"),
        ValueRule(lambda shapes: _rows(shapes)[1] == _ALONE, example=((32, 4), (16, 4), (16, 4), (16, 4)),
             say="P('host') splits the rows over the hosts: host 0's 16 rows and host 1's 16 rows are different "
                 "rows of the global array, 32 in all (each copied on the 4 devices of its host)"),
    ),
    otherwise=lambda shapes: (f"the shape for {format_spec(_first_wrong_spec(shapes))} is not right: "
                              "does the spec name 'host'? If it does, the hosts' rows are stacked"),
    hints=(
        "JAX never sees the other host's data; it works the global shape out from the spec: along a "
        "dimension split over 'host', each host's rows are different rows.",
        "A spec that names 'host' for dimension 0 doubles it (2 hosts); a spec that does not leaves it "
        "as each host passed it, whatever it does with 'device'.",
    ),
))


# ------------------------------------------------------------------ 03.2 the spec on a devices-first mesh

_BATCH = (16, 3)  # the global batch: two hosts' (8, 3)


def _devices_first():
    """jax.make_mesh((4, 2), ("device", "host")) on 2 hosts x 4 devices: host 0 owns rows device=0, 1."""
    return course_mesh((4, 2), ("device", "host"))


def _host0_rows(spec) -> str:
    """The global rows host 0's devices hold under `spec` on the devices-first mesh."""
    where = placement(_devices_first(), spec, _BATCH)
    rows = sorted({where[d.id][0] for d in jax.devices()[:4]})
    return ", ".join(f"{a}:{b}" for a, b in rows)


def _unknown_axes(spec) -> list:
    """The names `spec` gives that are no axis of the mesh."""
    return [a for e in normal_spec(spec) if e is not None for a in (e if isinstance(e, tuple) else (e,))
            if a not in ("host", "device")]


register(SpecExercise(
    id="03.2", kernel=KERNEL, answer_name="data_spec", title="the batch spec on a devices-first mesh",
    solution='data_spec = P(("device", "host"))  # on this mesh "device" runs over the hosts, so it comes first',
    mesh=_devices_first,
    slots=(Slot(
        shape=_BATCH,
        right=P(("device", "host")),
        wrong={
            P(("host", "device")): lambda spec: (
                f"every device gets examples of its own, but host 0's examples land on global rows "
                f"{_host0_rows(spec)}, mixed with host 1's. On this mesh the axis called 'host' changes inside "
                "each host; the one that runs over the hosts is 'device'. Put that axis first in the tuple: the "
                "first name is the slow one"),
            P("device"): "the global batch is right (16 rows, host 0's first): on this mesh 'device' is the axis "
                         "that changes host. But 'host' is unused, so each tile is copied on 2 devices of one host "
                         "(devices 0 and 1 hold the same examples): name 'host' too, in the same tuple",
            P("host"): "on this mesh 'host' does not separate the hosts: devices 0 and 1, both host 0's, sit at "
                       "host=0 and host=1. So JAX takes the two hosts' batches as copies of the same 8 rows (the "
                       "global batch has 8 rows, not 16), and the copies disagree",
            P(): "with P() every device holds the whole batch, and JAX takes the two hosts' batches as copies of "
                 "the same 8 rows: the global batch has 8 rows, not 16, and the copies disagree",
        },
        rules=(
            SpecRule(lambda spec: len(spec) > 2, example=P(None, None, "host"),
                 say=lambda spec: f"{format_spec(spec)} has {len(spec)} entries, but the batch has 2 dimensions"),
            SpecRule(lambda spec: bool(_unknown_axes(spec)), example=P("hosts"),
                 say=lambda spec: "the mesh's axes are 'device' and 'host'; "
                                  f"{_unknown_axes(spec)[0]!r} is not one of them"),
            SpecRule(lambda spec: len(normal_spec(spec)) > 1, example=P(None, ("device", "host")),
                 say=lambda spec: f"{format_spec(spec)} splits dimension 1, the 3 features of each example; keep "
                                  "whole examples and split dimension 0, the batch"),
        ),
    ),),
    hints=(
        "Find host 0's devices (0-3) in the mesh. Do you leave host 0 by moving along 'device' or "
        "along 'host'?",
        "Every device needs examples of its own, so dimension 0 is split over both axes, in one tuple. "
        "The first name is the slow one: it must be the axis that runs over the hosts.",
    ),
))


# ------------------------------------------------------------------ 03.3 which meshes HLA2GA accepts

def _candidates() -> dict:
    """The notebook's four meshes."""
    devs = np.array(jax.devices())
    return {
        "A": jax.make_mesh((2, 4), ("host", "device")),
        "B": Mesh(devs.reshape(4, 2).T, ("host", "device")),
        "C": Mesh(devs.reshape(2, 4).T.reshape(2, 4), ("host", "device")),
        "D": Mesh(devs.reshape(2, 4), ("device", "host")),
    }


def _accepts() -> tuple[bool, ...]:
    """Whether the emulated host_local_array_to_global_array accepts each mesh."""
    verdicts = []
    for mesh in _candidates().values():
        try:
            hosts.host_local_array_to_global_array([np.zeros((8, 2), np.float32)] * HOSTS, mesh, P())
            verdicts.append(True)
        except ValueError:
            verdicts.append(False)
    return tuple(verdicts)


_MESH_WHY = (
    "A is the course's mesh: each host's devices are one row, one contiguous block",
    "in B host 0's devices 0-3 fill columns 0 and 1 of both rows: a 2 x 2 block. The function needs each host's "
    "devices to form one block (a 'contiguous subcube') of any shape, not necessarily a row, so B is accepted",
    "in C host 0's devices sit in columns 0 and 2 of both rows: two pieces with host 1's devices between them, "
    "not one block, so host_local_array_to_global_array raises a ValueError",
    "in D each host's devices are one row, a block; the axis names do not matter to the function, only where "
    "each host's devices sit",
)

register(ValueExercise(
    id="03.3", kernel=KERNEL, answer_name="hla2ga_accepts", title="the meshes host_local_array_to_global_array accepts",
    solution="hla2ga_accepts = (True, True, False, True)  # only C splits a host's devices into pieces",
    form=forms.booleans(4, like="(True, False, True, False)", what="one per mesh A to D"),
    right=_accepts,
    rules=tuple(ValueRule(lambda v, i=i: v[i] != _accepts()[i], f"mesh {'ABCD'[i]}: {_MESH_WHY[i]}",
                     example=alone(i))
                for i in range(4)),
    hints=(
        "Ignore the axis names. For each mesh, mark the cells that hold host 0's devices (0-3). "
        "Do they form one rectangle?",
        "B is [[0 2 4 6] [1 3 5 7]] and C is [[0 4 1 5] [2 6 3 7]]: a rectangle may span both rows.",
    ),
))
