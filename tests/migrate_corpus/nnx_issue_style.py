"""An nnx.pmap step with per-device custom state made on each host, in the style of the program of
google/flax#4751 (written for the course's corpus)."""
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

PMAP_AXIS = "pmap_axis"


class MyCustomState(nnx.Variable):
    pass


class Trainer(nnx.Module):
    def __init__(self, rngs):
        self.net = nnx.Sequential(nnx.Linear(32, 64, rngs=rngs), nnx.Dropout(0.2, rngs=rngs),
                                  nnx.Linear(64, 1, rngs=rngs))
        self.ema = MyCustomState(jnp.zeros((jax.local_device_count(), 1)))


def step_fn(trainer, data):
    def loss_fn(trainer):
        return jnp.mean((trainer.net(data["x"]) - data["y"]) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(trainer)
    grads = jax.lax.pmean(grads, PMAP_AXIS)
    nnx.update(trainer, jax.tree.map(lambda p, g: p - 1e-3 * g, nnx.state(trainer, nnx.Param), grads))
    trainer.ema.value = 0.9 * trainer.ema.value + 0.1 * loss
    return jax.lax.pmean(loss, PMAP_AXIS)


trainer = Trainer(nnx.Rngs(params=0, dropout=1))
state_axes = nnx.StateAxes({MyCustomState: 0, nnx.RngState: 0, ...: None})
pmapped_fn = nnx.split_rngs(splits=jax.local_device_count())(
    nnx.pmap(step_fn, axis_name=PMAP_AXIS, in_axes=(state_axes, 0)))

rng = np.random.default_rng(jax.process_index())
for step in range(100):
    x = rng.normal(size=(jax.local_device_count(), 16, 32)).astype(np.float32)
    data = {"x": x, "y": x.sum(-1, keepdims=True)}
    loss = pmapped_fn(trainer, data)
    if jax.process_index() == 0 and step % 10 == 0:
        print(step, float(loss[0]))
