"""Per-device dropout with nnx.pmap, in the style of the pmap example of Flax's randomness guide
(written for the course's corpus)."""
import jax
import jax.numpy as jnp
from flax import nnx


class Model(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.linear = nnx.Linear(20, 10, rngs=rngs)
        self.drop = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x):
        return self.drop(self.linear(x))


model = Model(nnx.Rngs(params=0, dropout=1))
num_devices = jax.local_device_count()
x = jnp.ones((num_devices, 16, 20))
state_axes = nnx.StateAxes({"dropout": 0, ...: None})


@nnx.split_rngs(splits=num_devices, only="dropout")
@nnx.pmap(in_axes=(state_axes, 0), out_axes=0)
def forward(model: Model, x: jax.Array):
    return model(x)


y = forward(model, x)
print(y.shape)
