"""One host of a running job restarted alone, as a Kubernetes Job restarts one pod (notebook 14;
google/grain#802): `python restart_one_host.py` on 2 hosts, plain jax.distributed.

Host 1 joins, meets host 0 at a barrier, starts a fresh copy of itself (the same address and
process id, as a restarted pod gets) and is killed (SIGKILL). The copy asks the coordinator,
which still runs in host 0, to join as process 1 again:
helpers.launch.run("notebooks/scripts/restart_one_host.py", hosts=2, devices_per_host=1,
                   bare=True, grace=30)
"""
import os
import signal
import subprocess
import sys
import time

import jax
from jax.experimental import multihost_utils

again = sys.argv[1:] == ["again"]
address = os.environ["JAX_COORDINATOR_ADDRESS"]  # set by the course launcher, or by you
process, processes = int(os.environ["JAX_PROCESS_ID"]), int(os.environ["JAX_NUM_PROCESSES"])
print(f"host {process}: joining" + (", restarted alone" if again else ""), flush=True)
jax.distributed.initialize(address, processes, process, coordinator_bind_address=address,
                           initialization_timeout=20)
multihost_utils.sync_global_devices("joined")
print(f"host {process}: joined", flush=True)
if process == 1 and not again:
    subprocess.Popen([sys.executable, __file__, "again"])  # the restarted pod
    os.kill(os.getpid(), signal.SIGKILL)  # the pod that failed
time.sleep(20)  # host 0 trains on
multihost_utils.sync_global_devices("step 1")
print(f"host {process}: step 1", flush=True)
