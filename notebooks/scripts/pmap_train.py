"""Data-parallel training with jax.pmap, written the way public examples did before 2023 (notebook 16).

It still runs on jax 0.12, one process per host:

    python -m helpers.launch --hosts 2 --devices-per-host 4 notebooks/scripts/pmap_train.py

and `python -m helpers.migrate notebooks/scripts/pmap_train.py` says what to change for
jax.shard_map, line by line, without running it. notebooks/scripts/ported_train.py is the same
training with every finding fixed.
"""
from functools import partial

from helpers.launch import initialize

initialize()  # joins the run: the course launcher, mpirun, srun, or alone

import jax
from flax import jax_utils

from helpers.training import tiny

PER_DEVICE_BATCH = 32
STEPS, LR = 40, 0.3

host_batch_size = PER_DEVICE_BATCH * jax.local_device_count()
global_batch_size = host_batch_size * jax.process_count()


@partial(jax.pmap, axis_name="batch", in_axes=(0, 0, 0))
def train_step(params, x, y):  # x: f32[32, 4], this device's slice of this host's batch
    loss, grads = jax.value_and_grad(tiny.loss_fn)(params, x, y)
    grads = jax.lax.pmean(grads, "batch")
    loss = jax.lax.pmean(loss, "batch")
    return jax.tree.map(lambda p, g: p - LR * g, params, grads), loss


def device_batches(step):
    """This host's rows of the step, stacked one slice per local device."""
    x, y = tiny.host_batch(step, jax.process_index(), jax.process_count(), global_batch_size)
    return (x.reshape(jax.local_device_count(), -1, x.shape[-1]),
            y.reshape(jax.local_device_count(), -1, y.shape[-1]))


params = jax_utils.replicate(tiny.init_params())
for step in range(STEPS):
    params, loss = train_step(params, *device_batches(step))
    if jax.process_index() == 0 and step % 10 == 0:
        print(f"step {step:3d}  loss {jax.device_get(loss)[0]:.8f}")

final_params = jax_utils.unreplicate(params)
if jax.process_index() == 0:
    print(f"final loss {jax.device_get(loss)[0]:.8f}")
