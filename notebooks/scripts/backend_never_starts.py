"""Both hosts join jax.distributed, but host 1 never starts its backend (notebook 12).

Host 0's first JAX call waits for host 1's devices, and raises after
jax_cpu_get_local_topology_timeout_minutes (2 by default). With the argument `dies`, host 1 is
killed (SIGKILL) there instead of hanging: then the heartbeat timeout (100 s by default) ends
host 0 first. Recorded once by tools/record_transcripts.py, because each takes minutes.
"""
import os
import signal
import sys
import time

import jax

dies = sys.argv[1:] == ["dies"]
address = os.environ["JAX_COORDINATOR_ADDRESS"]
process, processes = int(os.environ["JAX_PROCESS_ID"]), int(os.environ["JAX_NUM_PROCESSES"])
jax.distributed.initialize(address, processes, process, coordinator_bind_address=address)
if process == 1:
    if dies:
        print("host 1: joined, and is killed before its first JAX call", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    print("host 1: joined, but hangs before its first JAX call", flush=True)
    time.sleep(600)
print("host 0: asking for the devices", flush=True)
print(jax.devices())
