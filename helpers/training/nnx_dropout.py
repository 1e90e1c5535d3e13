"""Notebook 17's model: Flax NNX with dropout and per-device state, as in google/flax#4751.

`Model` holds a `Seen` variable, one row per device (how many rows that device trained on, and
their sum), which the program makes on each host for its own devices. `step_body` is the body of
the nnx.pmap step, one device's work: every port in notebook 17 calls it unchanged or says why not.
"""
from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from helpers.training import tiny

STEPS = 3
ROWS_PER_DEVICE = 2
LEARNING_RATE = 0.1


class Seen(nnx.Variable):
    """Per-device state kept across steps: [rows trained on, sum of their features]."""


class Model(nnx.Module):
    """4 features -> 8 hidden units -> dropout (rate 0.5) -> 1 output."""

    def __init__(self, rngs: nnx.Rngs, devices: int):
        self.hidden = nnx.Linear(4, 8, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)
        self.out = nnx.Linear(8, 1, rngs=rngs)
        self.seen = Seen(jnp.zeros((devices, 2)))

    def __call__(self, x):
        """(prediction, which hidden units dropout kept)."""
        h = self.dropout(jnp.tanh(self.hidden(x)))
        return self.out(h), h != 0


def step_body(model: Model, x, y, axis):
    """One device's step, as nnx.pmap ran it: x f32[rows, 4], y f32[rows, 1], its Seen row f32[2].
    The loss and the gradient are averaged over `axis`; returns (loss, kept)."""
    def loss_fn(model):
        prediction, kept = model(x)
        return jnp.mean((prediction - y) ** 2), kept

    (loss, kept), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    grads = jax.lax.pmean(grads, axis)
    params = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads))
    model.seen[...] += jnp.stack([x.shape[0], x.sum()])
    return jax.lax.pmean(loss, axis), kept


def host_batch(step: int, host: int, hosts: int, devices: int) -> tuple[np.ndarray, np.ndarray]:
    """This host's rows of the step, one block per local device: (x f32[devices, rows, 4], y f32[devices, rows, 1])."""
    x, y = tiny.host_batch(step, host, hosts, ROWS_PER_DEVICE * devices * hosts)
    return x.reshape(devices, ROWS_PER_DEVICE, 4), y.reshape(devices, ROWS_PER_DEVICE, 1)


def digest(*arrays) -> str:
    """8 hex digits that change when any bit of the arrays does."""
    h = hashlib.sha1()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:8]


def parameter_norm(model: Model) -> float:
    """The Euclidean norm of all the model's parameters together."""
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    return float(np.sqrt(sum(np.sum(np.square(np.asarray(p, np.float64))) for p in leaves)))


def local_rows(a) -> np.ndarray:
    """This host's rows of an output: a pmap output as it is, a global array's own shards in order."""
    if not isinstance(a, jax.Array) or a.is_fully_addressable:
        return np.asarray(a)
    shards = sorted(a.addressable_shards, key=lambda s: s.index[0].start or 0)
    return np.concatenate([np.asarray(s.data) for s in shards])
