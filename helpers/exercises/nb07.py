"""Exercises of notebook 07: data-parallel training across hosts."""
from __future__ import annotations

import functools

import jax
import numpy as np
from jax import P

from helpers.training import tiny
from helpers.exercises import forms
from helpers.exercises.core import Kernel, register
from helpers.exercises.kinds import (
    ValueExercise, course_mesh, entry, from_hosts, normal_spec, placed, placement, same_spec,
)
from helpers.exercises.rules import ValueRule
from helpers.pictures.layout import format_spec

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)
HOSTS, DEVICES = 2, 8
_PER_DEVICE = tiny.GLOBAL_BATCH // DEVICES
_BATCH = (tiny.GLOBAL_BATCH, tiny.IN_DIM)
_CANDIDATES = (P(("host", "device")), P("device"), P("host"), P(("device", "host")), P())


@functools.cache
def _data_parallel() -> tuple:
    """The spec (of the candidates) with which the two emulated hosts build the reference batch from their own
    rows, no device repeating another's rows, and the axes to average over: those it splits the batch over."""
    mesh = course_mesh((HOSTS, 4))
    parts = [tiny.host_batch(7, h, HOSTS)[0] for h in range(HOSTS)]
    for spec in _CANDIDATES:
        rows = placement(mesh, spec, _BATCH)
        if len(set(rows.values())) == DEVICES and np.array_equal(from_hosts(parts, spec), tiny.global_batch_at(7)[0]):
            axes = normal_spec(spec)[0]
            return spec, frozenset(axes if isinstance(axes, tuple) else (axes,))
    raise AssertionError("no candidate spec builds the reference batch")


def _fix_form(answer):
    """The answer as (spec, axes); a spec that places the batch like a candidate becomes that candidate."""
    spec, axes = forms.tuple_of(
        forms.spec("P(...)"), forms.axis_names(("host", "device"), like="'host' or ('host', 'device')"),
        like="(P(...), 'host')", of="entries (batch_spec, mean_over)")(answer)
    mesh = course_mesh((HOSTS, 4))
    known = next((k for k in _CANDIDATES if same_spec(mesh, spec, k, _BATCH)), P(*normal_spec(spec)))
    return known, axes


_BOTH = frozenset({"host", "device"})

# ------------------------------------------------------------------ 07.1 the fix

register(ValueExercise(
    id="07.1", kernel=KERNEL, answer_name="fix",
    title="P(('host', 'device')), averaged over ('host', 'device'): one model, all the data",
    solution="fix = (P(('host', 'device')), ('host', 'device'))  # split over both, average over both",
    form=_fix_form,
    right=_data_parallel,
    wrong={(P("device"), frozenset({"device"})):
           "that is the step from the shard_map question the course started from: it runs, but P('device') claims "
           "every host has the same rows, so each host's copy trains on its own data"},
    rules=(
        ValueRule(entry(0, P("device")), example=(P("device"), _BOTH),
             say="P('device') types the batch as the same on every host, so JAX refuses one average over both axes "
                 "(section 5 shows JAX raising): the spec must change too"),
        ValueRule(entry(0, P("host")), example=(P("host"), _BOTH),
             say="P('host') gives each host's whole 128 rows to every one of its 4 devices: the 4 devices repeat "
                 "the same work instead of splitting it"),
        ValueRule(entry(0, P(("device", "host"))), example=(P(("device", "host")), _BOTH),
             say="P(('device', 'host')) splits the rows 8 ways but device-major, so the global array interleaves "
                 "blocks of host 0 and host 1; list the axes in mesh order, host first"),
        ValueRule(entry(0, P()), example=(P(), _BOTH),
             say="P() replicates the batch: every device would claim to hold all rows, and every host to have the "
                 "same ones"),
        ValueRule(lambda fix: len(normal_spec(fix[0])) > 1, example=(P("host", "device"), _BOTH),
             say=lambda fix: f"{format_spec(fix[0])} splits axis 1 (the {tiny.IN_DIM} features) too; every device "
                             "needs whole examples. Put both mesh axes in one tuple for axis 0"),
        ValueRule(lambda fix: fix[0] != _data_parallel()[0], example=(P("chip"), _BOTH),
             say=lambda fix: f"{format_spec(fix[0])} does not give every device its own rows; split axis 0 over "
                             "both mesh axes"),
        ValueRule(lambda fix: fix[1] == {"device"}, example=(P(("host", "device")), frozenset({"device"})),
             say="the batch spec is right, but averaging over 'device' only leaves the two hosts with different "
                 "losses, and out_specs=P() then fails: average over every axis the batch is split over"),
        ValueRule(lambda fix: fix[1] == {"host"}, example=(P(("host", "device")), frozenset({"host"})),
             say="averaging over 'host' only leaves a host's 4 devices with different losses: average over every "
                 "axis the batch is split over"),
    ),
    otherwise="average over both mesh axes",
    hints=(
        "The batch axis (axis 0) must be split 8 ways, so both mesh axes take part; several mesh "
        "axes on one array axis go together in a tuple, in mesh order.",
        "The loss must be the mean over every example of the global batch: average over every "
        "axis the batch is split over.",
    ),
))


# ------------------------------------------------------------------ 07.2 device 5's rows

def _blocks() -> dict[int, tuple[int, int]]:
    """Device id -> the (start, stop) rows it holds of the P(('host', 'device')) batch, from JAX."""
    return {d: rows[0] for d, rows in placement(course_mesh((HOSTS, 4)), P(("host", "device")), _BATCH).items()}


def _owner(rows: tuple[int, int]) -> int:
    return next(d for d, held in _blocks().items() if held == rows)


register(ValueExercise(
    id="07.2", kernel=KERNEL, answer_name="device5_rows", title="device 5 holds rows 160..191 of the global batch",
    solution="device5_rows = (160, 192)  # host 1's rows are 128..255; its second device gets 160..191",
    form=forms.span(like="(0, 32)"),
    right=lambda: _blocks()[5],
    wrong={
        (32, 64): "(32, 64) are device 5's rows within host 1's own 128 rows; in the global array host 0's 128 rows "
                  "come first, so count from there",
        (192, 224): "devices count from 0: device 5 is the sixth device, so it holds the sixth block of 32 rows",
    },
    rules=(
        ValueRule(lambda r: r[1] - r[0] == 1, example=(5, 6),
             say="each device holds a block of rows, not one row: 256 rows over 8 devices"),
        ValueRule(lambda r: r in ((128, 256), (0, 256), (0, 128)), example=(128, 256),
             say="P(('host', 'device')) splits the 256 rows over all 8 devices, so each device holds 256 / 8 rows, "
                 "not a host's share or the whole batch"),
        ValueRule(lambda r: r[1] - r[0] != _PER_DEVICE, example=(160, 190),
             say=lambda r: f"({r[0]}, {r[1]}) spans {r[1] - r[0]} rows; with 256 rows over 8 devices each device "
                           f"holds {_PER_DEVICE}"),
        ValueRule(lambda r: r not in _blocks().values(), example=(150, 182),
             say=lambda r: f"({r[0]}, {r[1]}) is no device's block: each device holds {_PER_DEVICE} rows that start at "
                           f"a multiple of {_PER_DEVICE}"),
        ValueRule(lambda r: r in _blocks().values(), example=(128, 160),
             say=lambda r: f"({r[0]}, {r[1]}) is device {_owner(r)}'s block, not device 5's; devices take blocks in "
                           "mesh order: host 0's devices 0-3, then host 1's 4-7"),
    ),
    hints=(
        "The global array puts host 0's 128 rows first, then host 1's 128 rows.",
        "Within a host, the 4 devices split the host's rows in order, 32 each.",
    ),
))


# ------------------------------------------------------------------ 07.3 which copies agree

@functools.cache
def _equal_copies() -> frozenset:
    """Devices whose parameter copies are equal after one step of the P('device') / 'device' step, run by JAX."""
    mesh = course_mesh((HOSTS, 4))
    parts = [tiny.host_batch(0, h, HOSTS) for h in range(HOSTS)]
    x, y = (from_hosts([p[i] for p in parts], P("device")) for i in (0, 1))

    def body(params, x, y):
        grads = jax.grad(lambda p: jax.lax.pmean(tiny.loss_fn(p, x, y), "device"))(params)
        return jax.tree.map(lambda p, g: p - tiny.LEARNING_RATE * g, params, grads)

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P("device"), P("device")), out_specs=P()))
    b2 = step(placed(mesh, tiny.init_params(), P()), x, y)["b2"]
    groups: dict[bytes, set] = {}
    for shard in b2.addressable_shards:
        groups.setdefault(np.asarray(shard.data).tobytes(), set()).add(shard.device.id)
    return frozenset(frozenset(g) for g in groups.values())


register(ValueExercise(
    id="07.3", kernel=KERNEL, answer_name="equal_copies",
    title="with P('device') each host's devices agree, the hosts do not",
    solution="equal_copies = [[0, 1, 2, 3], [4, 5, 6, 7]]  # one group per host",
    form=forms.groups(DEVICES, like="[[0, 1], [2, 3, 4, 5, 6, 7]]"),
    right=_equal_copies,
    wrong={
        frozenset({frozenset(range(8))}):
            "out_specs=P() promises that all 8 copies are equal, but the batch typed as the same on every host means "
            "the gradient is summed over 'device' only: the two hosts' copies step with different data",
        frozenset(frozenset({d, d + 4}) for d in range(4)):
            "devices 0 and 4 hold the same slice of the P('device') batch (its claimed copies), but the gradient is "
            "averaged over 'device', over one host's 4 devices, so the copies agree within a host, not across",
        frozenset(frozenset({d}) for d in range(8)):
            "the pmean over 'device' gives a host's 4 devices the same gradient, so their copies stay equal; only "
            "the hosts differ",
    },
    otherwise="not these groups: ask which devices the gradient is averaged over (the axis named in pmean), and "
              "which devices see the same data",
    hints=(
        "The gradient is averaged with pmean over 'device' only. Which devices does that average "
        "connect?",
        "Host 0 owns devices 0-3 and host 1 owns devices 4-7; each host's devices see that host's rows.",
    ),
))
