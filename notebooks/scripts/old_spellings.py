"""Spellings from older JAX that jax 0.12 warns about or no longer has (notebook 16, section 5).

Read by `python -m helpers.migrate --diff`, never run: jax.device_put_replicated is gone.
"""
import jax
from jax.experimental.shard_map import shard_map
from jax.sharding import PartitionSpec as P

mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), ("host", "device"))
params = jax.device_put_replicated({"w": jax.numpy.ones(3)}, jax.local_devices())
total = shard_map(lambda w: w * 2, mesh=mesh, in_specs=P(), out_specs=P(), check_rep=False)
with mesh:
    print(total(params["w"]))
