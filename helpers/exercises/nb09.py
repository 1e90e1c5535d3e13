"""Exercises of notebook 09: tensor parallelism inside a host, data parallelism across hosts."""
from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax import P
from jax.sharding import AxisType, Mesh

from helpers.training import tiny
from helpers.exercises import forms
from helpers.exercises.core import Kernel, Mistake, register
from helpers.exercises.kinds import (
    ProgramExercise, Raised, Slot, SpecExercise, ValueExercise, course_mesh, entry, equations, varying_over,
)
from helpers.exercises.rules import ErrorRule, OutputRule, ValueRule
from helpers.pictures.layout import format_spec

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
    id="09.1", kernel=KERNEL, answer_name="tp_specs", title="batch over 'host', hidden units over 'device'",
    solution='''tp_specs = {
    "x": P("host", None),     # data parallel across hosts
    "w1": P(None, "device"),  # each device: 4 of the 16 hidden units...
    "w2": P("device", None),  # ...and the 4 rows of w2 that multiply them
}''',
    mesh=lambda: course_mesh((2, 4)),
    slots=(
        Slot(shape=(tiny.IN_DIM, tiny.HIDDEN), right=P(None, "device"), wrong={
            P(None, "host"): _MODEL_AXIS_HOST,
            P("device"): "P('device') on w1 splits its rows, the 4 input features; tensor parallelism here splits "
                         "the 16 hidden units: w1's columns and w2's rows",
        }, otherwise=lambda spec: f"{format_spec(spec)} does not split w1's 16 hidden columns over 'device'"),
        Slot(shape=(tiny.HIDDEN, tiny.OUT_DIM), right=P("device"), wrong={
            P(None, "device"): _SINGLE_OUTPUT,
            P(None, "host"): _SINGLE_OUTPUT,
            P("host"): _MODEL_AXIS_HOST,
            P(): "w2 is replicated, but each device computes only 4 of the 16 hidden units; split w2's rows over "
                 "'device' so each device holds the 4 rows that multiply its units",
        }, otherwise=lambda spec: f"{format_spec(spec)} does not split w2's 16 rows over 'device'"),
        Slot(shape=(tiny.GLOBAL_BATCH, tiny.IN_DIM), right=P("host"), wrong={
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
    """Seeded MLP parameters (b2 not 0, so adding it more than once shows) and a 16-row x."""
    rng = np.random.default_rng(9)
    params = {"w1": rng.normal(size=(4, 16)).astype(np.float32) / 2,
              "b1": rng.normal(size=16).astype(np.float32),
              "w2": rng.normal(size=(16, 1)).astype(np.float32) / 4,
              "b2": np.array([1.5], np.float32)}
    return params, rng.normal(size=(16, 4)).astype(np.float32)


_MISPLACED = "a psum, but its output still varies over 'device'"  # what _tp_run gives a misplaced psum


def _tp_run(tp_forward, mesh):
    """tp_forward mapped over an Auto (host, device) mesh: x split over 'host', hidden units over 'device'.
    A function that has a psum and still returns a result that varies over 'device' gives _MISPLACED."""
    auto = Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * 2)

    def mapped(check_vma=True):
        return jax.shard_map(tp_forward, mesh=auto, in_specs=(_TP_SPECS, P("host", None)),
                             out_specs=P("host", None), check_vma=check_vma)

    try:
        return np.asarray(jax.jit(mapped())(*_tp_case()))
    except Exception as error:  # noqa: BLE001 - re-raised unless it is a misplaced psum
        if varying_over(str(error)) is None or not _has_psum(mapped(check_vma=False)):
            raise
        return Raised(_MISPLACED, _MISPLACED)


def _has_psum(fn) -> bool:
    try:
        return any(eqn.primitive.name == "psum" for eqn, _ in equations(fn, *_tp_case()))
    except Mistake:  # not traceable: the error the real call raised is the verdict
        return False


_RANK = re.compile(r"has shape \w+\[([^\]]*)\]\S*, which has rank (\d+)")


def _rank_of(error_text: str) -> tuple[tuple[int, ...], int]:
    """(shape, rank) of the per-device output that shard_map found too short for out_specs."""
    dims, rank = _RANK.search(error_text).groups()
    return tuple(int(d.split("@")[0]) for d in dims.split(",") if d), int(rank)


def _tp(body: str) -> str:
    return f"def tp_forward(p, x):\n    return {body}\n"


_PARTIAL = 'jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]'

register(ProgramExercise(
    id="09.2", kernel=KERNEL, answer_name="tp_forward",
    title="tensor-parallel forward: partial products, psum over 'device', then b2",
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
    errors=(
        ErrorRule(lambda text: text == _MISPLACED,
             example=_tp(f'jax.lax.psum(jnp.tanh(x @ p["w1"] + p["b1"]), "device") @ p["w2"] + p["b2"]'),
             say="your psum is in the wrong place: the output is still each device's share, because what "
                 "you summed comes before the product with this device's rows of w2. Sum the partial "
                 "products hidden @ w2, once, after the second matmul; then add b2"),
        ErrorRule(lambda text: varying_over(text) is not None,
             example=_tp(f'{_PARTIAL} + p["b2"]'),
             say="JAX cannot tell that your output is the same on a host's 4 devices, as out_specs=P('host', None) "
                 "says: each device holds only its 4 hidden units' share of the result. Add the shares with "
                 "jax.lax.psum over 'device' (an all_gather's result still counts as varying over 'device')"),
        ErrorRule(lambda text: _RANK.search(text) is not None,
             example=_tp(f'(jax.lax.psum({_PARTIAL}, "device") + p["b2"])[:, 0]'),
             say=lambda case: "each device returns shape {} (rank {}), but out_specs=P('host', None) needs 2 "
                              "dimensions: return one row of predictions per row of x, shape (rows, 1), as "
                              "hidden @ w2 gives".format(*_rank_of(case.got.raw))),
    ),
    families=(OutputRule(lambda case: case.got.shape != case.want.shape,
                   example=_tp(f'jnp.tile(jax.lax.psum({_PARTIAL}, "device") + p["b2"], 2)'),
                   say=lambda case: f"the mapped output has shape {case.got.shape}, but the model gives "
                                    f"{case.want.shape}: return one prediction per row of this device's x block"),),
    otherwise="the predictions differ from the model's tanh(x @ w1 + b1) @ w2 + b2",
    hints=(
        "Each device computes its hidden units' contribution to the output; the output is the "
        "sum of the 4 contributions of one host's devices.",
        "Add the bias b2 once, after jax.lax.psum(..., 'device').",
    ),
))

# ------------------------------------------------------------------ 09.3 read a type, predict a reduction

_EXPRESSIONS = ("jnp.sum(h, axis=1)", "jnp.sum(h, axis=0)", "h @ pe['w2']")
_LIKE = "('float32[8@host]', 'float32[3]', None)"


def _type_text(answer) -> str:
    """A type as text (forms.text), in the spelling jax.typeof prints: the type itself, repr's ShapedArray(...),
    f32 for float32 and @(host) for @host accepted."""
    if isinstance(answer, jax.core.ShapedArray):
        answer = str(answer)
    text = re.sub(r"^ShapedArray\((.*)\)$", r"\1", forms.text(_LIKE)(answer))
    text = re.sub(r"^(b?)f(16|32|64)\[", r"\1float\2[", text)
    return re.sub(r"@\((\w+)\)", r"@\1", text)


@functools.cache
def _right_types() -> tuple:
    """jax.typeof (spaces dropped) of each of _EXPRESSIONS on the notebook's h and pe; None where JAX refuses."""
    out = []
    with jax.set_mesh(course_mesh((2, 4))):
        pe = jax.device_put(tiny.init_params(), _TP_SPECS)
        h = jnp.tanh(jax.device_put(tiny.global_batch_at(0)[0], P("host", None)) @ pe["w1"] + pe["b1"])
        for expression in _EXPRESSIONS:
            try:
                out.append(str(jax.typeof(eval(expression, {"jnp": jnp, "h": h, "pe": pe}))).replace(" ", ""))
            except Exception as error:  # ShardingTypeError, not a public name in jax 0.12
                if "ambiguous how the output should be sharded" not in str(error):
                    raise
                out.append(None)
    return tuple(out)


register(ValueExercise(
    id="09.3", kernel=KERNEL, answer_name="result_types",
    title="read h's type, predict what a reduction over a split axis gives",
    solution='result_types = ("float32[256@host]", "float32[16@device]", None)  # h @ w2: the split sum is ambiguous',
    form=forms.or_refused(_EXPRESSIONS, _type_text, like=_LIKE, per="expression",
                          should_be="the text jax.typeof prints (a string)"),
    right=_right_types,
    rules=(
        ValueRule(lambda v: "None" in v, example=("float32[256@host]", "float32[16@device]", "None"),
             say="where JAX refuses an expression, write None itself, without quotes: the text 'None' is not a type "
                 "jax.typeof prints"),
        ValueRule(lambda v: any(t is not None and not t.startswith("float32[") for t in v),
             example=("float16[256@host]", "float32[16@device]", None),
             say="h is float32, and so is each result: begin each type with float32[, as jax.typeof prints it"),
        ValueRule(lambda v: v[0] == "float32[128@host]" or v[1] == "float32[4@device]",
             example=("float32[128@host]", "float32[16@device]", None),
             say="a type shows the global shape: the size before @ is the whole array's (256 rows, 16 columns), "
                 "and the axis after @ splits it; one host's or device's share is not written"),
        ValueRule(entry(0, "float32[256]"), example=("float32[256]", "float32[16@device]", None),
             say="summing over the columns adds across 'device' (JAX inserts that all-reduce), but the rows are "
                 "untouched: they keep their split over 'host'"),
        ValueRule(entry(0, "float32[256@host,16@device]", "float32[256@host,1]", "float32[256@host,1@device]"),
             example=("float32[256@host,1]", "float32[16@device]", None),
             say="jnp.sum(h, axis=1) removes axis 1: the result has one dimension, the 256 rows"),
        ValueRule(entry(0, "float32[256@(host,device)]", "float32[256@device]"),
             example=("float32[256@(host,device)]", "float32[16@device]", None),
             say="a reduction does not move the rows to other devices: the 256 rows stay split over 'host' only"),
        ValueRule(lambda v: v[0] is None, example=(None, "float32[16@device]", None),
             say="JAX accepts jnp.sum(h, axis=1): a sum has no partner whose sharding could disagree"),
        ValueRule(entry(1, "float32[16]"), example=("float32[256@host]", "float32[16]", None),
             say="summing over the rows adds across 'host'; the 16 columns keep their split over 'device'"),
        ValueRule(entry(1, "float32[256@host]"), example=("float32[256@host]", "float32[256@host]", None),
             say="axis=0 sums over the rows: what is left are the 16 columns"),
        ValueRule(lambda v: v[1] is None, example=("float32[256@host]", None, None),
             say="JAX accepts jnp.sum(h, axis=0): the sum over the 'host' split is one all-reduce"),
        ValueRule(lambda v: v[0] != _right_types()[0], example=("float32[16@device]", "float32[16@device]", None),
             say=lambda v: f"jnp.sum(h, axis=1) is not {v[0]}: it leaves h's 256 rows, with their split"),
        ValueRule(lambda v: v[1] != _right_types()[1], example=("float32[256@host]", "float32[16@host]", None),
             say=lambda v: f"jnp.sum(h, axis=0) is not {v[1]}: it leaves h's 16 columns, with their split"),
        ValueRule(lambda v: v[2] is not None, example=("float32[256@host]", "float32[16@device]", "float32[256@host,1]"),
             say="h @ w2 adds over the 16 hidden units, which h and w2 both split over 'device'. The result could "
                 "stay as per-device partial sums or be summed, and Explicit mode does not guess: JAX refuses it "
                 "while tracing"),
    ),
    hints=(
        "A sum over a dimension removes it. The dimensions left keep the split their type shows; a split on "
        "the removed dimension becomes an all-reduce.",
        "For h @ w2, look at the dimension the product adds over: which mesh axis splits it in h, and in w2?",
    ),
))
