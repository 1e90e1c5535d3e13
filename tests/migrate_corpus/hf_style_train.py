"""A causal-LM fine-tuning loop in the style of the Hugging Face Flax examples (written for the course's corpus)."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import jax_utils, traverse_util
from flax.training import train_state
from flax.training.common_utils import get_metrics, onehot, shard

PER_DEVICE_BATCH = 8
EPOCHS = 3


class TrainState(train_state.TrainState):
    dropout_rng: jnp.ndarray

    def replicate(self):
        return jax_utils.replicate(self).replace(dropout_rng=shard_prng(self.dropout_rng))


def shard_prng(rng):
    return jax.random.split(rng, jax.local_device_count())


def data_loader(rng, dataset, batch_size, shuffle=False):
    steps = len(dataset) // batch_size
    if shuffle:
        order = jax.random.permutation(rng, len(dataset))
        order = np.asarray(order)
    else:
        order = np.arange(len(dataset))
    for i in range(steps):
        rows = order[i * batch_size:(i + 1) * batch_size]
        batch = dataset[rows]
        yield shard(batch)


def train_step(state, batch):
    dropout_rng, new_dropout_rng = jax.random.split(state.dropout_rng)

    def loss_fn(params):
        labels = batch.pop("labels")
        logits = state.apply_fn(**batch, params=params, dropout_rng=dropout_rng, train=True)[0]
        return optax.softmax_cross_entropy(logits, onehot(labels, logits.shape[-1])).mean()

    grad_fn = jax.value_and_grad(loss_fn)
    loss, grad = grad_fn(state.params)
    grad = jax.lax.pmean(grad, "batch")
    new_state = state.apply_gradients(grads=grad, dropout_rng=new_dropout_rng)
    metrics = jax.lax.pmean({"loss": loss, "learning_rate": schedule(state.step)}, axis_name="batch")
    return new_state, metrics


def eval_step(params, batch):
    labels = batch.pop("labels")
    logits = model(**batch, params=params, train=False)[0]
    loss = optax.softmax_cross_entropy(logits, onehot(labels, logits.shape[-1])).mean()
    return jax.lax.pmean({"loss": loss}, axis_name="batch")


rng = jax.random.PRNGKey(42)
rng, dropout_rng = jax.random.split(rng)
train_batch_size = PER_DEVICE_BATCH * jax.device_count()
schedule = optax.linear_schedule(5e-5, 0.0, EPOCHS * len(train_set) // train_batch_size)
state = TrainState.create(apply_fn=model.__call__, params=model.params, tx=optax.adamw(schedule),
                          dropout_rng=dropout_rng)
p_train_step = jax.pmap(train_step, "batch", donate_argnums=(0,))
p_eval_step = jax.pmap(eval_step, "batch")
state = state.replicate()

for epoch in range(EPOCHS):
    rng, input_rng = jax.random.split(rng)
    train_metrics = []
    for batch in data_loader(input_rng, train_set, train_batch_size, shuffle=True):
        state, train_metric = p_train_step(state, batch)
        train_metrics.append(train_metric)
    train_metrics = get_metrics(train_metrics)
    eval_metrics = [p_eval_step(state.params, batch) for batch in data_loader(rng, eval_set, train_batch_size)]
    eval_loss = get_metrics(eval_metrics)["loss"].mean()
    if jax.process_index() == 0:
        print(f"epoch {epoch}: eval loss {eval_loss:.4f}, perplexity {math.exp(eval_loss):.2f}")
        params = jax.device_get(jax_utils.unreplicate(state.params))
        model.save_pretrained("out", params=params)
