"""Notebook 17's answer to google/flax#4751: nnx.pmap's step as a plain jax.shard_map on a (host, device) mesh.

The form NNX's tree mode keeps: `nnx.split` the model into its per-device state and the rest, hand each
group to `jax.shard_map` with its own spec, and `nnx.merge` it back inside. `nnx_shard_map.py` runs it on
real hosts; the notebook shows this source.
"""
from __future__ import annotations

from functools import partial

import jax
from flax import nnx
from jax.sharding import PartitionSpec as P

from helpers.training.nnx_dropout import Seen, step_body

DATA = ("host", "device")


def way_one(mesh, body=step_body, splits=None, place_keys=lambda keys: keys, check_vma=False):
    """step(model, x, y) -> (loss, kept): `body` on every device as nnx.pmap ran it, with the dropout keys
    split `splits` ways (every device of the mesh by default) and laid out by `place_keys`. `check_vma`
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
