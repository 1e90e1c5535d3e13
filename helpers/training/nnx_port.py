"""Notebook 17's answer to google/flax#4751: nnx.pmap's step on a (host, device) mesh, two ways.

`way_one` keeps pmap's body: in the form NNX's tree mode keeps, `nnx.split` the model into its per-device
state and the rest, hand each group to `jax.shard_map` with its own spec, and `nnx.merge` it back inside.
`tree_body` is pmap's body written for NNX's tree mode. `way_three` has no per-device body: `nnx.jit` on the
global batch. `nnx_shard_map.py` runs way one and way three on real hosts; the notebook shows this source.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec as P

from helpers.training.nnx_dropout import LEARNING_RATE, Seen, step_body

DATA = ("host", "device")


def way_one(mesh, body=step_body, splits=None, place_keys=lambda keys: keys, check_vma=False):
    """step(model, x, y) -> (loss, kept): `body` on every device as nnx.pmap ran it, its dropout keys split
    `splits` ways (every device of the mesh by default) and laid out by `place_keys`. `model` may be a tuple
    of modules, (model, optimizer) say: all but Seen and the keys goes to every device whole. `check_vma`
    stays off, as pmap ran it: the body averages its gradients itself."""
    def on_device(graphdef, seen, keys, rest, x, y):  # this device's blocks: Seen f32[1, 2], key [1], x f32[1, 2, 4]
        first = partial(jax.tree.map, lambda a: a[0])
        model = nnx.merge(graphdef, first(seen), first(keys), rest)  # drop the device axis, as pmap did
        loss, kept = body(model, x[0], y[0], axis=DATA)
        _, seen, _, rest = nnx.split(model, Seen, nnx.RngState, ...)
        return jax.tree.map(lambda a: a[None], seen), rest, loss[None], kept[None]  # and put it back

    @partial(jax.jit, static_argnums=0)
    def sharded(graphdef, seen, keys, rest, x, y):
        return jax.shard_map(partial(on_device, graphdef), mesh=mesh,
                             in_specs=(P(DATA), P(DATA), P(), P(DATA), P(DATA)),  # Seen, keys, the rest, x, y
                             out_specs=(P(DATA), P(), P(DATA), P(DATA)), check_vma=check_vma)(seen, keys, rest, x, y)

    def train_step(model, x, y):
        split = nnx.with_rngs(model, split=splits or mesh.size, graph=False)  # a copy; model's stream steps on
        graphdef, seen, keys, rest = nnx.split(split, Seen, nnx.RngState, ..., graph=False)
        seen, rest, loss, kept = sharded(graphdef, seen, place_keys(keys), rest, x, y)
        nnx.update(model, seen, rest)
        return loss, kept
    return train_step


def tree_body(model, x, y, axis):
    """step_body, written for tree mode: the gradient with respect to the parameters only."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss_fn(params, rest):
        prediction, kept = nnx.merge(graphdef, params, rest)(x)
        return jnp.mean((prediction - y) ** 2), kept

    (loss, kept), grads = nnx.value_and_grad(loss_fn, has_aux=True)(params, rest)
    grads = jax.lax.pmean(grads, axis)
    nnx.update(model, jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads))
    model.seen[...] += jnp.stack([x.shape[0], x.sum()])
    return jax.lax.pmean(loss, axis), kept


@nnx.jit
def way_three(model, x, y):  # x: f32[rows, 4], the global batch, its rows over every device
    """One step on the whole global batch; each device's row of Seen from its own rows of the batch."""
    def loss_fn(model):
        prediction, kept = model(x)
        return jnp.mean((prediction - y) ** 2), kept

    (loss, kept), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    params = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads))
    blocks = x.reshape(model.seen.shape[0], -1, x.shape[-1])  # f32[devices, rows, 4]: device k's rows are block k
    model.seen[...] += jnp.stack([jnp.full(blocks.shape[0], blocks.shape[1]), blocks.sum((1, 2))], axis=1)
    return loss, kept
