"""One host is killed (SIGKILL, as a lost machine or the OOM killer) in step 1, under plain
jax.distributed with its default timeouts: `python killed_under_plain_jax.py HOST`.

Notebook 14 runs it with none of the course's code inside the hosts, and with a grace period so
the survivor ends on its own (host 0 killed: host 1 aborts within seconds):
helpers.launch.run("notebooks/scripts/killed_under_plain_jax.py", hosts=2, devices_per_host=2,
                   bare=True, grace=60, args=["0"])
Its recorded transcript kills host 1 instead (args=["1"]): host 0 waits out JAX's 100 s
heartbeat timeout, so that recording (tools/record_transcripts.py) uses grace=200.
"""
import os
import signal
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

killed = int(sys.argv[1]) if len(sys.argv) > 1 else 1
address = os.environ["JAX_COORDINATOR_ADDRESS"]  # set by the course launcher, or by you
process, processes = int(os.environ["JAX_PROCESS_ID"]), int(os.environ["JAX_NUM_PROCESSES"])
jax.distributed.initialize(address, processes, process, coordinator_bind_address=address)

mesh = jax.make_mesh((processes, jax.local_device_count()), ("host", "device"))
total = jax.jit(jnp.sum)  # a collective: every host must call it
for step in range(3):
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P(("host", "device"))),
                                               np.full(2, step + 1, np.float32))
    if process == killed and step == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    print(f"step {step}: sum {float(total(x)):.0f}", flush=True)
