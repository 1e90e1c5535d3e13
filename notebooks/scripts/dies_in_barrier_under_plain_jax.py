"""Host 1 is killed (SIGKILL) while host 0 waits in a barrier, under plain jax.distributed with its
default timeouts (notebook 12; the course's version of the same run is live in section 6).

Host 0 raises gloo's error at once; then, its script over, it waits in JAX's shutdown barrier for
the dead host until the heartbeat timeout (100 s by default) ends it. Recorded once by
tools/record_transcripts.py, because it takes that long.
"""
import os
import signal
import time

import jax
from jax.experimental import multihost_utils

address = os.environ["JAX_COORDINATOR_ADDRESS"]  # set by the course launcher, or by you
process, processes = int(os.environ["JAX_PROCESS_ID"]), int(os.environ["JAX_NUM_PROCESSES"])
jax.distributed.initialize(address, processes, process, coordinator_bind_address=address)
multihost_utils.sync_global_devices("start-up")
print(f"host {process}: past 'start-up'", flush=True)
if process == 1:
    time.sleep(0.5)  # host 0 is in the barrier 'step 0' by now
    os.kill(os.getpid(), signal.SIGKILL)
multihost_utils.sync_global_devices("step 0")
