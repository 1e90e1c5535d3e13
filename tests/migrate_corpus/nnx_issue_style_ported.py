"""nnx_issue_style.py ported to nnx.shard_map on a (host, device) mesh, way two of notebook 17: no finding is left."""
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

DATA = ("host", "device")
GLOBAL_BATCH = 128


class MyCustomState(nnx.Variable):
    pass


class Trainer(nnx.Module):
    def __init__(self, rngs, devices):
        self.net = nnx.Sequential(nnx.Linear(32, 64, rngs=rngs), nnx.Dropout(0.2, rngs=rngs),
                                  nnx.Linear(64, 1, rngs=rngs))
        self.ema = MyCustomState(jnp.zeros((devices, 1)))  # one row per device of every host


mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), DATA)
rows = NamedSharding(mesh, P(DATA))
trainer = Trainer(nnx.Rngs(params=0, dropout=1), devices=mesh.size)
trainer.ema.set_value(jax.device_put(trainer.ema[...], rows))
state_specs = nnx.StateSharding({MyCustomState: P(DATA), ...: P()})


@nnx.jit
@nnx.shard_map(mesh=mesh, in_specs=(state_specs, P(DATA), P(DATA)), out_specs=P())
def train_step(trainer, x, y):
    dropout = trainer.net.layers[1].rngs
    shared = dropout.key[...]
    dropout.key.set_value(jax.random.fold_in(shared, jax.lax.axis_index(DATA)))

    def loss_fn(trainer):
        return jax.lax.pmean(jnp.mean((trainer.net(x) - y) ** 2), DATA)

    loss, grads = nnx.value_and_grad(loss_fn)(trainer)
    nnx.update(trainer, jax.tree.map(lambda p, g: p - 1e-3 * g, nnx.state(trainer, nnx.Param), grads))
    dropout.key.set_value(shared)
    trainer.ema[...] = 0.9 * trainer.ema[...] + 0.1 * loss
    return loss


rng = np.random.default_rng(jax.process_index())
for step in range(100):
    x = rng.normal(size=(GLOBAL_BATCH // jax.process_count(), 32)).astype(np.float32)  # this host's rows
    xs, ys = (jax.make_array_from_process_local_data(rows, a) for a in (x, x.sum(-1, keepdims=True)))
    loss = train_step(trainer, xs, ys)
    if step % 10 == 0:
        value = float(loss)  # every host: the loss is P(), the same everywhere
        if jax.process_index() == 0:
            print(step, value)
