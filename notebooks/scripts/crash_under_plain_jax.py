"""Host 1 raises in step 1 (or the step given), under plain jax.distributed with its default timeouts.

Notebook 12 runs it with none of the course's code inside the hosts:
helpers.launch.run("notebooks/scripts/crash_under_plain_jax.py", hosts=2, devices_per_host=2, bare=True)
"""
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

crash_step = int(sys.argv[1]) if len(sys.argv) > 1 else 1
address = os.environ["JAX_COORDINATOR_ADDRESS"]  # set by the course launcher, or by you
process, processes = int(os.environ["JAX_PROCESS_ID"]), int(os.environ["JAX_NUM_PROCESSES"])
jax.distributed.initialize(address, processes, process, coordinator_bind_address=address)

mesh = jax.make_mesh((processes, jax.local_device_count()), ("host", "device"))
rows = NamedSharding(mesh, P(("host", "device")))
global_mean = jax.jit(jnp.mean)  # a collective: every host must call it
for step in range(3):
    x = jax.make_array_from_process_local_data(rows, np.full(2, step + 1, np.float32))
    if process == 1 and step == crash_step:
        raise ValueError("host 1 read a corrupt batch")
    print(f"step {step}: global mean {float(global_mean(x)):.1f}", flush=True)
