"""notebooks/scripts/pmap_train.py with every finding of helpers.migrate fixed (notebook 16).

    python -m helpers.launch --hosts 2 --devices-per-host 4 notebooks/scripts/ported_train.py

It trains the same model on the same rows and prints the same losses, with jax.shard_map on a
(host, device) mesh and global arrays built from each host's own rows. With --jit, the step is a
plain jax.jit of the loss on the whole global batch, and XLA writes the collectives.
"""
import sys
from functools import partial

from helpers.launch import initialize

initialize()  # joins the run: the course launcher, mpirun, srun, or alone

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from helpers.training import tiny

GLOBAL_BATCH = 256  # one number for the whole run, whatever the number of hosts or devices
STEPS, LR = 40, 0.3
BATCH = ("host", "device")  # the batch is split over every device of every host

mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), BATCH)
batch_sharding = NamedSharding(mesh, P(BATCH))


@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=(P(), P(BATCH), P(BATCH)), out_specs=(P(), P()))
def train_step(params, x, y):  # x: f32[32, 4] on 2 x 4, this device's block of the global batch
    def global_loss(p):
        return jax.lax.pmean(tiny.loss_fn(p, x, y), BATCH)

    loss, grads = jax.value_and_grad(global_loss)(params)  # already the mean gradient
    return jax.tree.map(lambda p, g: p - LR * g, params, grads), loss


@jax.jit
def jit_step(params, x, y):  # x: f32[256, 4], the whole global batch: XLA splits the work by its sharding
    loss, grads = jax.value_and_grad(tiny.loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - LR * g, params, grads), loss


step_fn = jit_step if "--jit" in sys.argv else train_step


def global_batch(step):
    """This host's rows of the step; JAX makes them this host's part of one global batch."""
    x, y = tiny.host_batch(step, jax.process_index(), jax.process_count(), GLOBAL_BATCH)
    return (jax.make_array_from_process_local_data(batch_sharding, x),
            jax.make_array_from_process_local_data(batch_sharding, y))


params = jax.device_put(tiny.init_params(), NamedSharding(mesh, P()))
for step in range(STEPS):
    params, loss = step_fn(params, *global_batch(step))
    if jax.process_index() == 0 and step % 10 == 0:  # loss is P(): host 0 reads its own copy, no host waits
        print(f"step {step:3d}  loss {float(loss):.8f}")

if jax.process_index() == 0:
    print(f"final loss {float(loss):.8f}")
