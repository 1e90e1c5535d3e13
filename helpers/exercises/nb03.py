"""Exercises of notebook 03: global arrays from host-local data."""
from __future__ import annotations

from typing import Any

from helpers.exercises.kinds import Judged, WrongAnswer
from helpers.exercises.core import Kernel

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)
from helpers.exercises.core import Mistake, describe, register
from helpers.exercises.judges import placement, require_shape, require_spec

# ------------------------------------------------------------------ 03.1 the inferred global shape

_SHAPE_SPECS = ("P(('host', 'device'))", "P('host')", "P('device')", "P()")
_SHAPES = ((32, 4), (32, 4), (16, 4), (16, 4))


def _judge_global_shapes(answer: Any) -> None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 4:
        raise Mistake(f"expected a tuple of 4 shapes like ((8, 4), (8, 4), (8, 4), (8, 4)), one per spec, "
                      f"but got {describe(answer)}")
    got = tuple(require_shape(tuple(s) if isinstance(s, list) else s, f"the shape for {spec}")
                for s, spec in zip(answer, _SHAPE_SPECS))
    if got == _SHAPES:
        return
    if any(len(s) != 2 for s in got):
        raise Mistake("each host passes a 2-D batch, so every global shape has 2 numbers: (rows, features)")
    if any(s[1] != 4 for s in got):
        raise Mistake("none of these specs splits dimension 1, so the 4 features stay 4")
    rows = tuple(s[0] for s in got)
    if rows == (16, 16, 16, 16):
        raise Mistake("that is the shape each host passes, not the global one: with P(('host', 'device')) "
                      "the two hosts' 16 rows are different rows, so the global array has 32")
    if rows[2] == 32 or rows[3] == 32:
        which = _SHAPE_SPECS[2] if rows[2] == 32 else _SHAPE_SPECS[3]
        raise Mistake(f"{which} does not name 'host', so it says both hosts hold the SAME rows: JAX takes "
                      "the two batches as copies and does not stack them. The global array keeps 16 rows")
    if rows[0] > 32 or rows[1] > 32 or rows[2] > 16:
        raise Mistake("JAX does not multiply by the number of devices: each host passes its WHOLE part, "
                      "and JAX multiplies by how many hosts hold different rows (2 when 'host' splits the "
                      "rows, 1 when it does not)")
    if rows[1] == 16:
        raise Mistake("P('host') splits the rows over the hosts: host 0's 16 rows and host 1's 16 rows are "
                      "different rows of the global array, 32 in all (each copied on the 4 devices of its host)")
    wrong = next(i for i in range(4) if got[i] != _SHAPES[i])
    raise Mistake(f"the shape for {_SHAPE_SPECS[wrong]} is not right: does the spec name 'host'? If it does, "
                  "the hosts' rows are stacked")


register(Judged(
    id="03.1", kernel=KERNEL,
    title="the global shapes JAX infers from two hosts' (16, 4) batches",
    answer_name="global_shapes",
    solution="global_shapes = ((32, 4), (32, 4), (16, 4), (16, 4))  # 'host' named: the hosts' rows stack",
    judged_by=_judge_global_shapes,
    hints=(
        "JAX never sees the other host's data; it works the global shape out from the spec: along a "
        "dimension split over 'host', each host's rows are different rows.",
        "A spec that names 'host' for dimension 0 doubles it (2 hosts); a spec that does not leaves it "
        "as each host passed it, whatever it does with 'device'.",
    ),
    wrong_answers=(
        WrongAnswer("global_shapes = ((16, 4), (16, 4), (16, 4), (16, 4))", "not the global one"),
        WrongAnswer("global_shapes = ((128, 4), (32, 4), (64, 4), (16, 4))", "does not multiply by the number of devices"),
        WrongAnswer("global_shapes = ((32, 4), (32, 4), (32, 4), (32, 4))", "does not name 'host'"),
        WrongAnswer("global_shapes = ((32, 4), (16, 4), (16, 4), (16, 4))", "P('host') splits the rows over the hosts"),
        WrongAnswer("global_shapes = ((32, 8), (32, 4), (16, 4), (16, 4))", "the 4 features stay 4"),
        WrongAnswer("global_shapes = (32, 32, 16, 16)", "expected the shape for"),
    ),
))


# ------------------------------------------------------------------ 03.2 the spec on a devices-first mesh

_LOCAL = (8, 3)  # each host's batch
_GLOBAL = (16, 3)


def _devices_first():
    """jax.make_mesh((4, 2), ("device", "host")) on 2 hosts x 4 devices: host 0 owns rows device=0, 1."""
    import jax

    return jax.make_mesh((4, 2), ("device", "host"), devices=jax.devices()[:8])


def _host_of_position(device) -> int:
    import jax

    return jax.devices().index(device) // 4


def _judge_data_spec(answer: Any) -> None:
    from jax import P

    from helpers.layout import format_spec

    spec = require_spec(answer)
    mesh = _devices_first()
    if len(spec) > 2:
        raise Mistake(f"{format_spec(spec)} has {len(spec)} entries, but the batch has 2 dimensions")
    entries = list(spec) + [None] * (2 - len(spec))
    axes = [(e if isinstance(e, tuple) else (e,)) if e is not None else () for e in entries]
    unknown = [a for a in axes[0] + axes[1] if a not in ("host", "device")]
    if unknown:
        raise Mistake(f"the mesh's axes are 'device' and 'host'; {unknown[0]!r} is not one of them")
    if axes[1]:
        raise Mistake(f"{format_spec(spec)} splits dimension 1, the 3 features of each example; keep whole "
                      "examples and split dimension 0, the batch")
    if not axes[0]:
        raise Mistake("with P() every device holds the whole batch, and JAX takes the two hosts' batches as "
                      "copies of the same 8 rows: the global batch has 8 rows, not 16, and the copies disagree")
    got = placement(mesh, spec, _GLOBAL)
    if got == placement(mesh, P(("device", "host")), _GLOBAL):
        return
    if axes[0] == ("host",):
        raise Mistake("on this mesh 'host' does not separate the hosts: devices 0 and 1, both host 0's, sit "
                      "at host=0 and host=1. So JAX takes the two hosts' batches as copies of the same 8 rows "
                      "(the global batch has 8 rows, not 16), and the copies disagree")
    if axes[0] == ("device",):
        raise Mistake("the global batch is right (16 rows, host 0's first): on this mesh 'device' is the axis "
                      "that changes host. But 'host' is unused, so each tile is copied on 2 devices of one "
                      "host (devices 0 and 1 hold the same examples): name 'host' too, in the same tuple")
    host0_rows = sorted(got[d.id][0][:2] for d in mesh.devices.flat if _host_of_position(d) == 0)
    raise Mistake(f"every device gets examples of its own, but host 0's examples land on global rows "
                  f"{', '.join(f'{a}:{b}' for a, b in host0_rows)}, mixed with host 1's. On this mesh the "
                  "axis called 'host' changes inside each host; the one that runs over the hosts is "
                  "'device'. Put that axis first in the tuple: the first name is the slow one")


register(Judged(
    id="03.2", kernel=KERNEL,
    title="the batch spec on a devices-first mesh",
    answer_name="data_spec",
    solution='data_spec = P(("device", "host"))  # on this mesh "device" runs over the hosts, so it comes first',
    judged_by=_judge_data_spec,
    hints=(
        "Find host 0's devices (0-3) in the mesh. Do you leave host 0 by moving along 'device' or "
        "along 'host'?",
        "Every device needs examples of its own, so dimension 0 is split over both axes, in one tuple. "
        "The first name is the slow one: it must be the axis that runs over the hosts.",
    ),
    wrong_answers=(
        WrongAnswer('data_spec = P(("host", "device"))', "mixed with host 1's"),
        WrongAnswer('data_spec = P("device")', "copied on 2 devices of one host"),
        WrongAnswer('data_spec = P("host")', "does not separate the hosts"),
        WrongAnswer("data_spec = P()", "with P() every device holds the whole batch"),
        WrongAnswer('data_spec = P(None, ("device", "host"))', "splits dimension 1"),
        WrongAnswer('data_spec = "device, host"', "expected a PartitionSpec"),
    ),
))


# ------------------------------------------------------------------ 03.3 which meshes HLA2GA accepts

_ACCEPTS = (True, True, False, True)
_MESH_WHY = {
    0: "A is the course's mesh: each host's devices are one row, one contiguous block",
    1: "in B host 0's devices 0-3 fill columns 0 and 1 of both rows: a 2 x 2 block. The function needs "
       "each host's devices to form one block (a 'contiguous subcube'), not one row, so B is accepted",
    2: "in C host 0's devices sit in columns 0 and 2 of both rows: two pieces with host 1's devices "
       "between them, not one block, so host_local_array_to_global_array raises a ValueError",
    3: "in D each host's devices are one row, a block; the axis names do not matter to the function, only "
       "where each host's devices sit",
}


def _judge_accepts(answer: Any) -> None:
    if (not isinstance(answer, (tuple, list)) or len(answer) != 4
            or not all(isinstance(a, bool) for a in answer)):
        raise Mistake(f"expected a tuple of 4 booleans like (True, False, True, False), one per mesh A to D, "
                      f"but got {describe(answer)}")
    got = tuple(answer)
    if got == _ACCEPTS:
        return
    wrong = next(i for i in range(4) if got[i] != _ACCEPTS[i])
    raise Mistake(f"mesh {'ABCD'[wrong]}: " + _MESH_WHY[wrong])


register(Judged(
    id="03.3", kernel=KERNEL,
    title="the meshes host_local_array_to_global_array accepts",
    answer_name="hla2ga_accepts",
    solution="hla2ga_accepts = (True, True, False, True)  # only C splits a host's devices into pieces",
    judged_by=_judge_accepts,
    hints=(
        "Ignore the axis names. For each mesh, mark the cells that hold host 0's devices (0-3). "
        "Do they form one rectangle?",
        "B is [[0 2 4 6] [1 3 5 7]] and C is [[0 4 1 5] [2 6 3 7]]: a rectangle may span both rows.",
    ),
    wrong_answers=(
        WrongAnswer("hla2ga_accepts = (True, False, False, True)", "a 2 x 2 block"),
        WrongAnswer("hla2ga_accepts = (True, True, True, True)", "two pieces"),
        WrongAnswer("hla2ga_accepts = (True, True, False, False)", "the axis names do not matter"),
        WrongAnswer("hla2ga_accepts = (True, False, False, False)", "mesh B"),
        WrongAnswer("hla2ga_accepts = (1, 1, 0, 1)", "expected a tuple of 4 booleans"),
    ),
))
