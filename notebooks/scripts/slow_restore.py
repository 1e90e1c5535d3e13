"""A resume where one host is slow to restore its checkpoint (notebook 14; google/orbax#3181).

Every host saves a small sharded array as Orbax checkpoint 0, then restores it, as a resumed job
does, and runs a first step: a jitted sum over every device (an all-reduce across the hosts).
Host 1 is still reading for --slow seconds after Orbax's restore returns (the rest of its state:
a big shard, its loader's position from a slow bucket). With --barrier,
every host waits at multihost_utils.sync_global_devices("restored") right after its restore,
before the first step. --heartbeat S joins with JAX's heartbeat_timeout_seconds=S (the course's
initialize() keeps JAX's 100). Each host prints how long it spent where:

    python -m helpers.launch --hosts 2 --devices-per-host 2 notebooks/scripts/slow_restore.py \
        --ckpt-dir /tmp/slow --slow 3 --barrier
"""
import argparse
import os
import time

from helpers.launch import initialize

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--ckpt-dir", required=True)
parser.add_argument("--slow", type=float, default=3.0, help="host 1's extra restore time, seconds")
parser.add_argument("--barrier", action="store_true", help="every host waits for all after its restore")
parser.add_argument("--heartbeat", type=int, help="JAX's heartbeat_timeout_seconds (default: JAX's)")
args = parser.parse_args()
if args.heartbeat is None:
    initialize()
else:  # the course launcher's address and process numbers, with a heartbeat timeout of our own
    import jax

    address = os.environ["JAX_COORDINATOR_ADDRESS"]
    jax.distributed.initialize(address, int(os.environ["JAX_NUM_PROCESSES"]), int(os.environ["JAX_PROCESS_ID"]),
                               coordinator_bind_address=address, heartbeat_timeout_seconds=args.heartbeat)

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax import P
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding

host = jax.process_index()
mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), ("host", "device"))
sharding = NamedSharding(mesh, P(("host", "device")))
rows = 4 * mesh.size
first_step = jax.jit(lambda w: (w * w).sum())  # one all-reduce over every device of every host
w = jax.make_array_from_callback((rows,), sharding, lambda index: np.arange(rows, dtype=np.float32)[index])
first_step(w).block_until_ready()  # compiled and run once: the timings below are waits
manager = ocp.CheckpointManager(os.path.abspath(args.ckpt_dir))
manager.save(0, args=ocp.args.StandardSave({"w": w}))
manager.wait_until_finished()


def restore():
    """Checkpoint 0 onto this mesh, and the rest of this host's state (slow on host 1)."""
    target = {"w": jax.ShapeDtypeStruct((rows,), jnp.float32, sharding=sharding)}
    state = manager.restore(0, args=ocp.args.StandardRestore(target))["w"]
    if host == 1:
        time.sleep(args.slow)  # host 1 is still reading
    return state


print(f"host {host}: saved checkpoint 0, restoring", flush=True)
start = time.monotonic()
w = restore()
restored = time.monotonic()
if args.barrier:
    multihost_utils.sync_global_devices("restored")  # every host has its state before any step
synced = time.monotonic()
loss = first_step(w)
loss.block_until_ready()
done = time.monotonic()
print(f"host {host}: restore {restored - start:.1f} s, barrier {synced - restored:.1f} s, "
      f"first step {done - synced:.1f} s", flush=True)
manager.close()
