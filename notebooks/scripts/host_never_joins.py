"""Host 1 never calls jax.distributed.initialize; host 0 calls it with a timeout of 1 s, or of the
argument's seconds (notebook 12).

It joins with the address and process numbers the course launcher passes in the environment:

    python -m helpers.launch --hosts 2 --devices-per-host 2 --timeout 60 notebooks/scripts/host_never_joins.py
"""
import os
import sys
import time

import jax

address = os.environ["JAX_COORDINATOR_ADDRESS"]  # set by the course launcher
process, processes = int(os.environ["JAX_PROCESS_ID"]), int(os.environ["JAX_NUM_PROCESSES"])
timeout = int(sys.argv[1]) if sys.argv[1:] else 1
if process == 1:
    print("host 1: busy elsewhere, never joins", flush=True)
    time.sleep(600)
print(f"host {process}: joining, initialization_timeout={timeout}", flush=True)
try:
    jax.distributed.initialize(address, processes, process, coordinator_bind_address=address,
                               initialization_timeout=timeout)
except Exception as error:
    print("caught:", error)
