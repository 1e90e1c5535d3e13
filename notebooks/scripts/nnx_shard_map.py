"""Notebook 17's port of nnx_pmap.py to a (host, device) mesh.

By default way one: the step's body unchanged, run by helpers.training.nnx_port.way_one as nnx.pmap ran
it, its dropout keys split over every device of every host. With --pmap-keys the keys are laid out as
nnx.pmap had them (the same on every host), and the script prints what nnx_pmap.py prints. With --jit,
way three: nnx.jit on the global batch, one key for all its rows.

    python -m helpers.launch --hosts 2 --devices-per-host 4 notebooks/scripts/nnx_shard_map.py
"""
import sys

from helpers.launch import initialize

initialize()  # joins the run: the course launcher, mpirun, srun, or alone

import jax
import numpy as np
from flax import nnx
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from helpers.training.nnx_dropout import STEPS, Model, digest, host_batch, local_rows, parameter_norm
from helpers.training.nnx_port import DATA, way_one, way_three

PMAP_KEYS, JIT = "--pmap-keys" in sys.argv, "--jit" in sys.argv
host, hosts, local = jax.process_index(), jax.process_count(), jax.local_device_count()
mesh = jax.make_mesh((hosts, local), ("host", "device"), axis_types=(AxisType.Auto,) * 2)
# Row h of the mesh is host h's devices, so the rows of every global array follow the hosts. On TPU and GPU,
# make_mesh may order devices otherwise: jax.experimental.mesh_utils.create_hybrid_device_mesh((1, local),
# (hosts, 1), process_is_granule=True) builds rows that are the processes (notebook 01).
assert all(d.process_index == h for h, row in enumerate(mesh.devices) for d in row), "row h of the mesh is host h"
rows = NamedSharding(mesh, P(DATA))  # device k of the mesh holds row k: each host its own rows


def made_global(local_rows):
    """This host's rows (one per local device) as its part of a global array."""
    return jax.make_array_from_process_local_data(rows, np.asarray(local_rows))


def as_pmap_had_them(keys):
    """Keys split over this host's devices (the same on every host, as nnx.pmap had them), made global."""
    def made_global_rng(a):  # a key (made global as its key data) or a count
        if not jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            return made_global(a)
        return jax.random.wrap_key_data(made_global(jax.random.key_data(a)), impl=jax.random.key_impl(a))
    return jax.tree.map(made_global_rng, keys)


model = Model(nnx.Rngs(params=0, dropout=1), devices=local)
model.seen.set_value(made_global(model.seen[...]))  # f32[local, 2] per host -> f32[8, 2], global
train_step = way_one(mesh, splits=local, place_keys=as_pmap_had_them) if PMAP_KEYS else way_one(mesh)


def jit_step(model, x, y):
    """Way three on this host's rows, made one global batch: each device's rows, in order."""
    loss, kept = way_three(model, *(made_global(a.reshape(-1, a.shape[-1])) for a in (x, y)))
    return loss, kept.reshape(mesh.size, -1, kept.shape[-1])  # per device again, as the other ways return

losses = []
for step in range(STEPS):
    x, y = host_batch(step, host, hosts, devices=local)  # this host's rows: f32[local, 2, 4], f32[local, 2, 1]
    loss, kept = jit_step(model, x, y) if JIT else train_step(model, *(made_global(a) for a in (x, y)))
    loss = np.asarray(loss.addressable_data(0))[None] if JIT else local_rows(loss)  # way three's: one number
    losses.append(loss)
    print(f"step {step}: loss {float(loss[0]):.4f}  dropout masks {digest(local_rows(kept))}")
print(f"Seen: {local_rows(model.seen[...]).astype(np.float64).round(4).tolist()}")
print(f"parameters: norm {parameter_norm(model):.4f}")
print(f"bits: {digest(*losses, *jax.tree.leaves(nnx.state(model, nnx.Param)))}")  # every loss and parameter, exactly
