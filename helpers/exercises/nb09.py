"""Exercises of notebook 09: tensor parallelism inside a host, data parallelism across hosts."""
from __future__ import annotations

import functools
import re

from jax import P

from helpers import train
from helpers.exercises import forms
from helpers.exercises.core import Kernel, register
from helpers.exercises.kinds import ProgramExercise, Rule, Slot, SpecExercise, ValueExercise, course_mesh
from helpers.layout import format_spec

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)

# ------------------------------------------------------------------ 09.1 specs for 2-D parallelism

_MODEL_AXIS_HOST = ("your model axis is 'host': the psum that adds up every layer's partial results would cross "
                    "the slow network between hosts, in every layer of every step. Split the weights over 'device', "
                    "inside a host")
_SINGLE_OUTPUT = ("w2's second axis is the single output; the axis to split is its first, the hidden units, to match "
                  "w1's columns")
_BATCH_OVER_DEVICE = ("'device' already splits the hidden units; if it also split the batch, a device would only ever "
                      "see its own rows times its own columns. Split the batch over 'host' only")

register(SpecExercise(
    id="09.1", kernel=KERNEL,
    title="batch over 'host', hidden units over 'device'",
    answer_name="tp_specs",
    solution='''tp_specs = {
    "x": P("host", None),     # data parallel across hosts
    "w1": P(None, "device"),  # each device: 4 of the 16 hidden units...
    "w2": P("device", None),  # ...and the 4 rows of w2 that multiply them
}''',
    mesh=lambda: course_mesh((2, 4)),
    slots=(
        Slot(shape=(train.IN_DIM, train.HIDDEN), right=P(None, "device"), wrong={
            P(None, "host"): _MODEL_AXIS_HOST,
            P("device"): "P('device') on w1 splits its rows, the 4 input features; tensor parallelism here splits "
                         "the 16 hidden units: w1's columns and w2's rows",
        }, otherwise=lambda spec: f"{format_spec(spec)} does not split w1's 16 hidden columns over 'device'"),
        Slot(shape=(train.HIDDEN, train.OUT_DIM), right=P("device"), wrong={
            P(None, "device"): _SINGLE_OUTPUT,
            P(None, "host"): _SINGLE_OUTPUT,
            P("host"): _MODEL_AXIS_HOST,
            P(): "w2 is replicated, but each device computes only 4 of the 16 hidden units; split w2's rows over "
                 "'device' so each device holds the 4 rows that multiply its units",
        }, otherwise=lambda spec: f"{format_spec(spec)} does not split w2's 16 rows over 'device'"),
        Slot(shape=(train.GLOBAL_BATCH, train.IN_DIM), right=P("host"), wrong={
            P(("host", "device")): _BATCH_OVER_DEVICE,
            P("device"): _BATCH_OVER_DEVICE,
            P(): "with x replicated, both hosts compute the same rows: data parallelism across hosts means "
                 "splitting the batch over 'host'",
        }, otherwise=lambda spec: f"{format_spec(spec)} is not the batch split over 'host'"),
    ),
    form=forms.keys(("w1", "w2", "x"), forms.spec("P(...)"), "a PartitionSpec"),
    assemble=lambda s: {"w1": s[0], "w2": s[1], "x": s[2]},
    hints=(
        "The 16 hidden units are what gets split: they are w1's columns and w2's rows.",
        "Tensor-parallel collectives run in every layer, so their axis should stay inside a host; "
        "the other mesh axis splits the batch.",
    ),
))

# ------------------------------------------------------------------ 09.2 the tensor-parallel forward

_TP_SPECS = {"w1": P(None, "device"), "b1": P("device"), "w2": P("device", None), "b2": P()}


def _tp_case():
    import numpy as np

    rng = np.random.default_rng(9)
    params = {"w1": rng.normal(size=(4, 16)).astype(np.float32) / 2,
              "b1": rng.normal(size=16).astype(np.float32),
              "w2": rng.normal(size=(16, 1)).astype(np.float32) / 4,
              "b2": np.array([1.5], np.float32)}
    return params, rng.normal(size=(16, 4)).astype(np.float32)


def _tp_run(tp_forward, mesh):
    """tp_forward mapped over an Auto (host, device) mesh: x split over 'host', hidden units over 'device'."""
    import jax
    import numpy as np
    from jax.sharding import AxisType, Mesh

    auto = Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * 2)
    mapped = jax.jit(jax.shard_map(tp_forward, mesh=auto, in_specs=(_TP_SPECS, P("host", None)),
                                   out_specs=P("host", None)))
    return np.asarray(mapped(*_tp_case()))


def _tp(body: str) -> str:
    return f"def tp_forward(p, x):\n    return {body}\n"


_PARTIAL = 'jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]'

register(ProgramExercise(
    id="09.2", kernel=KERNEL,
    title="tensor-parallel forward: partial products, psum over 'device', then b2",
    answer_name="tp_forward",
    solution='''
def tp_forward(p, x):
    """One device's part of the MLP: its 4 hidden units, then the sum over the host's devices."""
    hidden = jnp.tanh(x @ p["w1"] + p["b1"])      # f32[rows, 4]: this device's hidden units
    partial = hidden @ p["w2"]                     # f32[rows, 1]: their share of the output
    return jax.lax.psum(partial, "device") + p["b2"]
''',
    run=_tp_run,
    wrong={
        _tp(f'jax.lax.psum({_PARTIAL} + p["b2"], "device")'):
            lambda case: f"b2 is added on every device before the psum, so it is counted {case.layout[1]} times; add "
                         "it once, after the psum",
        _tp(f'jax.lax.pmean({_PARTIAL}, "device") + p["b2"]'):
            "pmean divides by the 4 devices; the partial results are pieces of one sum, so add them with psum",
        _tp(f'jax.lax.psum({_PARTIAL}, ("host", "device")) + p["b2"]'):
            "the sum also runs over 'host', which adds host 0's rows to host 1's; sum over 'device' only",
    },
    errors=(Rule(lambda text: bool(re.search(r"out_specs|replicat|vary", text)),
                 example=_tp(f'{_PARTIAL} + p["b2"]'),
                 say="your output still differs from device to device: each device holds only its 4 hidden units' "
                     "share of the result. Add the shares with jax.lax.psum over 'device'"),),
    families=(Rule(lambda case: case.got.shape != case.want.shape, example=_tp(f'jnp.tile(jax.lax.psum({_PARTIAL}, "device") + p["b2"], 2)'),
                   say=lambda case: f"the mapped output has shape {case.got.shape}, but the model gives "
                                    f"{case.want.shape}: return one prediction per row of this device's x block"),),
    otherwise="the predictions differ from the model's tanh(x @ w1 + b1) @ w2 + b2",
    hints=(
        "Each device computes its hidden units' contribution to the output; the output is the "
        "sum of the 4 contributions of one host's devices.",
        "Add the bias b2 once, after jax.lax.psum(..., 'device').",
    ),
))

# ------------------------------------------------------------------ 09.3 jax.typeof in Explicit mode


@functools.cache
def _h_type() -> str:
    """jax.typeof of the notebook's hidden layer h, on the Explicit (host, device) mesh."""
    import jax
    import jax.numpy as jnp

    mesh = course_mesh((2, 4))
    params = train.init_params()
    x = train.global_batch_at(0)[0]
    with jax.set_mesh(mesh):
        xe = jax.device_put(x, P("host", None))
        w1, b1 = jax.device_put(params["w1"], P(None, "device")), jax.device_put(params["b1"], P("device"))
        h = jnp.tanh(xe @ w1 + b1)
        return str(jax.typeof(h)).replace(" ", "")


_BLOCKS = ("float32[128,4]", "float32[128,16]", "float32[128@host,16@device]", "float32[256@host,4@device]",
           "float32[128,4@device]")

register(ValueExercise(
    id="09.3", kernel=KERNEL,
    title="jax.typeof(h) is float32[256@host,16@device]",
    answer_name="h_type",
    solution='h_type = "float32[256@host,16@device]"  # rows from x (host), columns from w1 (device)',
    form=forms.text(like="'float32[8@data,3]'"),
    right=_h_type,
    wrong={
        "float32[256,16]": "in Explicit mode the sharding is part of the type: after each dimension typeof writes @ "
                           "and the mesh axis that splits it",
        "float32[256@host,16]": "h's 16 columns come from w1's columns, which are split over 'device', and the "
                                "product keeps that split",
        "float32[256,16@device]": "h's rows come from x's rows, which are split over 'host'",
    },
    rules=(
        Rule(lambda t: not t.startswith("float32["), example="f32[256@host,16@device]",
             say="the type starts with the dtype, float32, then the shape in brackets"),
        Rule(lambda t: t in _BLOCKS, example="float32[128,4@device]",
             say="jax.typeof shows the global shape, (256, 16), not one device's block"),
        Rule(lambda t: "(host,device)" in t, example="float32[256@(host,device),16]",
             say="x's rows are split over 'host' only; 'device' splits the columns"),
    ),
    otherwise=lambda t: f"{t!r} is not the type of h; write float32[rows@axis,columns@axis]",
    hints=(
        "typeof writes the global shape and, after each dimension, @ and the mesh axis that "
        "splits it.",
        "The rows of x @ w1 are x's rows; its columns are w1's columns.",
    ),
))
