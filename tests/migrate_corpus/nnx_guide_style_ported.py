"""nnx_guide_style.py ported: one replicated key, and each device folds its position into it."""
import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

DATA = ("host", "device")


class Model(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.linear = nnx.Linear(20, 10, rngs=rngs)
        self.drop = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x):
        return self.drop(self.linear(x))


mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), DATA)
model = Model(nnx.Rngs(params=0, dropout=1))
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P(DATA)), jnp.ones((16, 20)))


@nnx.jit
@nnx.shard_map(mesh=mesh, in_specs=(P(), P(DATA)), out_specs=P(DATA))
def forward(model: Model, x: jax.Array):
    stream = model.drop.rngs
    shared = stream.key[...]
    stream.key.set_value(jax.random.fold_in(shared, jax.lax.axis_index(DATA)))
    y = model(x)
    stream.key.set_value(shared)
    return y


y = forward(model, x)
print(y.shape)
