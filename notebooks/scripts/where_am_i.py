"""Each host says its hostname and the address that name resolves to, then gathers from every host.

The address is what gloo, JAX's CPU collectives, advertises to the other hosts, and so what they
dial at the first collective (notebook 08, section 6):

    python -m helpers.launch --netns --hosts 2 --devices-per-host 1 notebooks/scripts/where_am_i.py
"""
import socket

from helpers.launch import initialize

how = initialize()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

name = socket.gethostname()
print(f"host {jax.process_index()} ({how}): hostname {name!r} resolves to "
      f"{socket.gethostbyname(name)}", flush=True)
# The first collective: each host's gloo now dials the address every other host advertised.
ranks = multihost_utils.process_allgather(jnp.array([jax.process_index()]))
print("gathered from every host:", ranks.ravel().tolist())
