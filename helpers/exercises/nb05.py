"""Exercises of notebook 05: shard_map blocks, collectives over mesh axes, out_specs and check_vma."""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import P

from helpers.exercises import forms
from helpers.exercises.core import Kernel, Mistake, register
from helpers.exercises.kinds import (
    ProgramExercise, Slot, SpecExercise, ValueExercise, axes_apart, course_mesh, lacks, placed, varying_over,
)
from helpers.exercises.rules import CodeRule, ErrorRule, SpecRule, ValueRule
from helpers.pictures.layout import format_spec, sharding_text

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)
DATA = ("host", "device")
_W8 = (3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0)


# --------------------------------------------------------------------------- 05.1

def _host_sums() -> tuple[float, ...]:
    """over_hosts(w8) of the notebook: a psum over 'host' on the (2, 4) mesh, run by JAX."""
    mesh = course_mesh((2, 4))
    w8 = placed(mesh, np.asarray(_W8, np.float32))
    over_hosts = jax.shard_map(lambda v: jax.lax.psum(v, "host"), mesh=mesh, in_specs=P(DATA), out_specs=P(DATA))
    return tuple(np.asarray(over_hosts(w8)).tolist())


_NEIGHBOURS = ("'host' does not pair neighbouring devices: device d of host 0 (w8[d]) goes with device d of "
               "host 1 (w8[4 + d])")

def _first_wrong_sum(sums: tuple[float, ...]) -> str:
    """Where the first wrong value sits, and the two inputs its psum over 'host' adds."""
    i = next(i for i, (got, want) in enumerate(zip(sums, _host_sums())) if not np.isclose(got, want))
    d = i % 4
    return (f"not quite at position {i} (host {i // 4}'s device {d}): host 0's device {d} holds {_W8[d]:g} and "
            f"host 1's device {d} holds {_W8[4 + d]:g}; a psum over 'host' gives both of them the sum")


register(ValueExercise(
    id="05.1", kernel=KERNEL, answer_name="host_sums", title="a psum over 'host' pairs device d of every host",
    solution="host_sums = [8.0, 10.0, 6.0, 7.0, 8.0, 10.0, 6.0, 7.0]  # w8[d] + w8[4 + d], on both hosts",
    form=forms.numbers(8, "the 8 values of over_hosts(w8)"),
    right=_host_sums,
    wrong={
        (9.0,) * 4 + (22.0,) * 4: "those are sums over 'device' (each host's 4 devices added up); a psum over "
                                  "'host' adds device d of host 0 to device d of host 1",
        (31.0,) * 8: "31 everywhere is a psum over BOTH axes; over 'host' only, each device adds just its "
                     "counterpart on the other host",
        (4.0, 4.0, 5.0, 5.0, 14.0, 14.0, 8.0, 8.0): _NEIGHBOURS,
        (4.0, 5.0, 14.0, 8.0, 4.0, 5.0, 14.0, 8.0): _NEIGHBOURS,
        _W8: "those are the inputs; the psum adds each device's value to its counterpart's on the other host",
    },
    rules=(
        ValueRule(lambda sums: not np.allclose(sums[:4], sums[4:]), example=lambda right: (*right[:7], right[7] + 1),
             say=lambda sums: f"{_first_wrong_sum(sums)}, so both hosts end with the same 4 values"),
    ),
    otherwise=_first_wrong_sum,
    hints=(
        "Host 0's devices hold w8[0:4] and host 1's hold w8[4:8]. Which devices does the 'host' axis connect?",
        "Along 'host', device d of host 0 meets device d of host 1: both get w8[d] + w8[4 + d].",
    ),
))


# --------------------------------------------------------------------------- 05.2

_SUMS_BLOCK = (1, 2)  # what paired_column_sums returns on each device: f32[1, 2]


def _output_shape(mesh, spec) -> tuple[int, ...]:
    """The global shape shard_map makes of the (1, 2) blocks with this out_specs, from JAX."""
    blocks = jax.shard_map(lambda: jnp.zeros(_SUMS_BLOCK), mesh=mesh, in_specs=(), out_specs=spec, check_vma=False)
    return jax.eval_shape(blocks).shape


@dataclass(frozen=True)
class _OutSlot(Slot):
    """An out_specs slot: specs are compared on `shape`, but a mistake pictures the array the learner's
    out_specs really makes, of its own shape."""

    def judge(self, mesh, spec) -> None:
        try:
            super().judge(mesh, spec)
        except Mistake as mistake:
            try:
                detail = sharding_text(_output_shape(mesh, spec), mesh, spec)
            except Exception:  # an unknown axis or too many entries: the message already says so
                detail = ""
            raise Mistake(str(mistake), detail) from None


register(SpecExercise(
    id="05.2", kernel=KERNEL, answer_name="sums_out_specs", title="out_specs names the axes a result still varies over",
    solution="sums_out_specs = P('device')  # after the psum over 'host' the sums vary over 'device' only",
    mesh=lambda: course_mesh((2, 4)),
    slots=(_OutSlot(
        shape=(8, 8),  # compares placements only; large enough for every spec to divide it
        right=P("device"),
        wrong={
            P(): "P() claims every device holds the same sums, but they differ between the devices of a host: "
                 "the psum ran over 'host' only",
            P(DATA): "naming 'host' too stores each host's copy: the rows come twice, shape (8, 2). After the psum "
                     "over 'host' both hosts hold the same sums, so leave 'host' out",
            P("host"): "P('host') leaves out 'device', which claims the 4 devices of a host hold the same sums; "
                       "they do not (the psum ran over 'host' only), so check_vma refuses it",
            P(None, "device"): "that spec puts the 4 rows side by side along dimension 1, shape (1, 8); stack "
                               "them along dimension 0 instead",
        },
        rules=(SpecRule(lambda spec: len(spec) > len(_SUMS_BLOCK), example=P("device", None, None),
                    say=lambda spec: f"out_specs={format_spec(spec)} has {len(spec)} entries, but each device's "
                                     "result is 2-D, f32[1, 2]: JAX refuses an out_specs longer than the result's "
                                     "rank"),
               SpecRule(axes_apart, example=P("host", "device"),
                    say=lambda spec: f"{format_spec(spec)} splits over two dimensions, a mesh axis on each: "
                                     "P('host', 'device') splits dimension 0 over 'host' and dimension 1 over "
                                     "'device' (one dimension over both is P(('host', 'device'))). After the psum "
                                     "over 'host', name only the axis the sums still vary over, on dimension 0"),),
        otherwise=lambda spec: f"with out_specs={format_spec(spec)} the result is not (4, 2) with one row of "
                               "column sums per device position",
    ),),
    hints=(
        "After the psum over 'host', do the 2 hosts still hold different sums? Do the 4 devices of one host?",
        "Name in out_specs exactly the mesh axes the result still varies over, on dimension 0, where the "
        "rows stack.",
    ),
))


# --------------------------------------------------------------------------- 05.3

def _batch(mesh):
    """A seeded (3 rows per device, 5) array placed over every device of `mesh`."""
    data = np.random.default_rng(7).normal(size=(3 * mesh.size, 5)).astype(np.float32) + 3.0
    return placed(mesh, data)


def _means(result):
    """What column_mean returned, as a float32 array (None stays None: the message names it)."""
    return None if result is None else np.asarray(result, dtype=np.float32)


def _varying(axes: str):
    """A test on shard_map's check_vma error: the result still varies over exactly `axes`."""
    return lambda text: varying_over(text) is not None and axes in (None, varying_over(text))


def _column_mean(body: str, out_specs: str = "P()", extra: str = "") -> str:
    return (f"def column_mean(x, mesh):\n    body = lambda b: {body}\n"
            "    return jax.shard_map(body, mesh=mesh, in_specs=P(('host', 'device')), "
            f"out_specs={out_specs}{extra})(x)\n")


register(ProgramExercise(
    id="05.3", kernel=KERNEL, answer_name="column_mean",
    title="a global mean: block sums, then a collective over both axes",
    solution='''
def column_mean(x, mesh):
    """Column means of a global (N, C) array, via shard_map."""
    def body(block):  # block: (N / devices, C)
        return jax.lax.pmean(jnp.mean(block, axis=0), ("host", "device"))  # (C,), the same everywhere

    return jax.shard_map(body, mesh=mesh, in_specs=P(("host", "device")), out_specs=P())(x)
''',
    run=lambda column_mean, mesh: _means(column_mean(_batch(mesh), mesh)),
    wrong={
        _column_mean('jax.lax.psum(jnp.mean(b, axis=0), ("host", "device"))'):
            lambda case: f"your result is {case.devices}x the mean: you added the {case.devices} block means "
                         "(psum); take their mean (pmean) instead",
        _column_mean('jax.lax.psum(jnp.sum(b, axis=0), ("host", "device")) / 16'):
            lambda case: f"you divide by 16, a number that fits the prompt's array only; here x has "
                         f"{3 * case.devices} rows. Use the block's shape times the number of devices, or pmean",
        _column_mean('jax.lax.psum(jnp.sum(b, axis=0), ("host", "device")) / (b.shape[0] * 8)'):
            lambda case: f"right on 8 devices only: you multiply the block's rows by 8, a hard-coded device count, "
                         f"and this mesh has {case.devices}. Count the devices of the mesh you are given "
                         "(jax.lax.psum(1, axes)), or use pmean",
        _column_mean('jax.lax.psum(jnp.sum(b, axis=0), ("host", "device"))'):
            "that is the column SUM; divide by the total number of rows N",
        _column_mean('jax.lax.pmean(jnp.mean(b, axis=0), "device")', extra=", check_vma=False"):
            "your result is host 0's mean only: the reduction covered 'device' but not 'host' (and "
            "check_vma=False let out_specs=P() hide it)",
        _column_mean("jnp.mean(b, axis=0)", extra=", check_vma=False"):
            "your result is device 0's block mean only: without a collective, out_specs=P() with "
            "check_vma=False silently returns device 0's block",
        _column_mean('jax.lax.pmean(jnp.mean(b, axis=0, keepdims=True), ("host", "device"))'):
            "your result has shape (1, C); return shape (C,) (drop the kept axis, e.g. result[0], or do not keepdims)",
        _column_mean('jax.lax.pmean(jnp.mean(b, axis=1), ("host", "device"))'):
            "you took the mean of each row (axis=1); a column mean averages each column over the rows: "
            "jnp.mean(block, axis=0)",
        _column_mean('jax.lax.pmean(jnp.mean(b, axis=0), "device")', out_specs="P('host')"):
            lambda case: f"your result is each host's own column means, one after the other (shape "
                         f"{case.got.shape}): the pmean over 'device' averages within a host only, and "
                         "out_specs=P('host') stacks the hosts' results. Average over ('host', 'device') and "
                         "return the one result with out_specs=P()",
        _column_mean('jax.lax.pmean(jnp.mean(b, axis=0), ("host", "device"))', out_specs="P('host')"):
            lambda case: f"your result holds the column means twice, shape {case.got.shape}: out_specs=P('host') "
                         "stacks the 2 hosts' copies. After the pmean every device holds the same means: "
                         "out_specs=P()",
        _column_mean('jax.lax.pmean(jnp.mean(b, axis=0), ("host", "device"))', out_specs="P(('host', 'device'))"):
            lambda case: f"your result holds the column means once per device, shape {case.got.shape}: "
                         "out_specs=P(('host', 'device')) stacks every device's copy. After the pmean every "
                         "device holds the same means: out_specs=P()",
        _column_mean('jax.lax.pmean(jnp.mean(b, axis=0, keepdims=True), ("host", "device"))',
                     out_specs="P(('host', 'device'))"):
            lambda case: f"your result has one row per device, shape {case.got.shape}: out_specs splits it over "
                         "the devices. The mean is one replicated result: out_specs=P()",
    },
    errors=(
        ErrorRule(_varying("host"), example=_column_mean('jax.lax.pmean(jnp.mean(b, axis=0), "device")'),
             say="your result still differs between hosts (check_vma refuses out_specs=P()): you reduced over "
                 "'device' only; reduce over both 'host' and 'device'"),
        ErrorRule(_varying("device"), example=_column_mean('jax.lax.pmean(jnp.mean(b, axis=0), "host")'),
             say="your result still differs between the devices of a host (check_vma refuses out_specs=P()): "
                 "you reduced over 'host' only; reduce over both axes"),
        ErrorRule(_varying(None), example=_column_mean("jnp.mean(b, axis=0)"),
             say="your result still differs from device to device, so check_vma refuses out_specs=P(): combine "
                 "the blocks with a collective over ('host', 'device')"),
    ),
    checks=(
        CodeRule(lambda fn, mesh: lacks("shard_map", lambda x: fn(x, mesh), _batch(mesh)),
             example="def column_mean(x, mesh):\n    return jnp.mean(x, axis=0)\n",
             say="the numbers are right, but your function does not use jax.shard_map; this exercise is about "
                 "writing the per-block body and the collective"),
    ),
    otherwise=lambda case: (f"for x of shape {(3 * case.devices, 5)} on a mesh {dict(case.mesh.shape)} your "
                            f"column means are {[round(float(v), 3) for v in case.got.reshape(-1)[:5]]}, not the "
                            "mean of each column over all rows"),
    hints=(
        "In the body, jnp.mean(block, axis=0) is this device's mean over its own rows; every block has "
        "the same number of rows.",
        "Average the block means over every device: jax.lax.pmean(..., ('host', 'device')), and return it "
        "with out_specs=P().",
    ),
))
