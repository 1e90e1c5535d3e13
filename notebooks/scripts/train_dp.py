"""Data-parallel training on a (host, device) mesh: one process per host, host-local data.

Each host (process) reads only its own part of every global batch, JAX assembles the global
batch with make_array_from_process_local_data, and a shard_map train step averages the loss
over every device of every host. The same file runs three ways:

    python -m helpers.launch --hosts 2 --devices-per-host 4 notebooks/scripts/train_dp.py
    mpirun -n 2 -x XLA_FLAGS=--xla_force_host_platform_device_count=4 -x JAX_PLATFORMS=cpu \
        python notebooks/scripts/train_dp.py
    XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \
        python notebooks/scripts/train_dp.py          # one process: it is the only host

`--batch-spec device` runs the version of the step the shard_map question in the course
starts from (batch P('device'), averaged over 'device'): it runs without an error, and is
wrong as soon as there is more than one host.
"""
import argparse
from functools import partial

from helpers.launch import initialize

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--global-batch", type=int, default=256)
parser.add_argument("--lr", type=float, default=0.3)
parser.add_argument("--print-every", type=int, default=10)
parser.add_argument("--batch-spec", choices=["host,device", "device"], default="host,device")
args = parser.parse_args()

how = initialize()  # before anything else touches JAX: joins the run, or stays alone

import jax
import numpy as np
from jax import P
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding

from helpers.training import tiny

host, num_hosts = jax.process_index(), jax.process_count()
mesh = jax.make_mesh((num_hosts, jax.local_device_count()), ("host", "device"))
assert all(d.process_index == host for d in mesh.devices[host]), "row `host` of the mesh is this host"

if args.batch_spec == "host,device":  # every device of every host gets its own rows
    batch_spec, batch_axes = P(("host", "device")), ("host", "device")
else:  # the pitfall: "the same rows on every host", averaged over one host's devices only
    batch_spec, batch_axes = P("device"), "device"
batch_sharding = NamedSharding(mesh, batch_spec)


@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=(P(), batch_spec, batch_spec), out_specs=(P(), P()))
def train_step(params, x, y):  # x: f32[rows of this device, 4]
    def mean_loss(p):
        return jax.lax.pmean(tiny.loss_fn(p, x, y), batch_axes)

    loss, grads = jax.value_and_grad(mean_loss)(params)
    return jax.tree.map(lambda p, g: p - args.lr * g, params, grads), loss


@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=(P(), batch_spec, batch_spec), out_specs=batch_spec)
def squared_errors(params, x, y):  # one number per example, sharded like the batch
    return ((tiny.predict(params, x) - y) ** 2)[:, 0]


def global_batch(step):
    """This host reads its own rows of the step's batch; JAX stitches the hosts' parts together."""
    x_local, y_local = tiny.host_batch(step, host, num_hosts, args.global_batch)
    return (jax.make_array_from_process_local_data(batch_sharding, x_local),
            jax.make_array_from_process_local_data(batch_sharding, y_local))


rows = tiny.host_rows(0, host, num_hosts, args.global_batch)
print(f"{how}: host {host} of {num_hosts}, {jax.local_device_count()} local devices, "
      f"mesh {dict(mesh.shape)}, batch {batch_spec}")
print(f"step 0: this host reads rows {rows[0]}..{rows[-1]} of {args.global_batch}")

params = jax.device_put(tiny.init_params(), NamedSharding(mesh, P()))
for step in range(args.steps):
    x, y = global_batch(step)
    params, loss = train_step(params, x, y)
    if step % args.print_every == 0:
        print(f"step {step:3d}  loss {float(loss):.6f}")
print(f"final loss {float(loss):.6f}")

# A global result: the final model's error on each example of the next step's batch, spread
# over every host's devices. No host holds all of it; process_allgather fetches the rest.
errors = squared_errors(params, *global_batch(args.steps))
every = multihost_utils.process_allgather(errors, tiled=True)  # the whole array, on every host
print(f"errors on step {args.steps}'s batch, gathered from all hosts: {every.shape[0]}, "
      f"mean {every.mean():.6f}")

# Every host keeps its own copy of the parameters: are the copies still the same?
mine = np.concatenate([np.ravel(leaf.addressable_data(0)) for leaf in jax.tree.leaves(params)])
copies = multihost_utils.process_allgather(mine)  # numpy in: one row per host
print(f"parameter copies gathered from every host: {copies.shape}, "
      f"all identical: {bool((copies == copies[0]).all())}")
