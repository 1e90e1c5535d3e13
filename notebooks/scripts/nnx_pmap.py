"""The Flax NNX program of google/flax#4751, written with nnx.pmap (notebook 17).

Each host makes per-device state of shape (local devices, 2) and reads its own rows, one block
per local device; nnx.pmap's collectives span every device of every host.

    python -m helpers.launch --hosts 2 --devices-per-host 4 notebooks/scripts/nnx_pmap.py
"""
from helpers.launch import initialize

initialize()  # joins the run: the course launcher, mpirun, srun, or alone

import jax
import numpy as np
from flax import nnx

from helpers.training.nnx_dropout import STEPS, Model, Seen, digest, host_batch, parameter_norm, step_body

host, hosts, local = jax.process_index(), jax.process_count(), jax.local_device_count()
model = Model(nnx.Rngs(params=0, dropout=1), devices=local)  # Seen: f32[local, 2] on every host
state_axes = nnx.StateAxes({Seen: 0, nnx.RngState: 0, ...: None})


@nnx.split_rngs(splits=local)
@nnx.pmap(axis_name="batch", in_axes=(state_axes, 0, 0), out_axes=0)
def train_step(model, x, y):  # x: f32[2, 4], one device's rows; its Seen row f32[2]
    return step_body(model, x, y, axis="batch")


losses = []
for step in range(STEPS):
    x, y = host_batch(step, host, hosts, devices=local)  # f32[local, 2, 4], f32[local, 2, 1]
    loss, kept = train_step(model, x, y)  # f32[local], bool[local, 2, 8]
    losses.append(loss)
    print(f"step {step}: loss {float(loss[0]):.4f}  dropout masks {digest(kept)}")
print(f"Seen: {np.asarray(model.seen[...], np.float64).round(4).tolist()}")
print(f"parameters: norm {parameter_norm(model):.4f}")
print(f"bits: {digest(*losses, *jax.tree.leaves(nnx.state(model, nnx.Param)))}")  # every loss and parameter, exactly
