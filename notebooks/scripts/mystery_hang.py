"""A training loop on 3 hosts that hangs (notebook 12, exercise 12.4): don't read it before the exercise.

    python -m helpers.launch --hosts 3 --devices-per-host 1 --timeout 20 notebooks/scripts/mystery_hang.py
"""
from helpers.launch import initialize

initialize()

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

STEPS = 5
CORRUPT = {1: 2}  # host -> the step whose batch is corrupt on that host

host = jax.process_index()
mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), ("host", "device"))
rows = NamedSharding(mesh, P(("host", "device")))
global_mean = jax.jit(jnp.mean)

for step in range(STEPS):
    if CORRUPT.get(host) == step:
        print(f"step {step}: corrupt batch, skipped")
        continue
    local = np.full(jax.local_device_count(), 10.0 * step + host, np.float32)
    loss = float(global_mean(jax.make_array_from_process_local_data(rows, local)))
    print(f"step {step}: loss {loss:.2f}")
print("done")
