"""Data-parallel training with dropout, in the style of Hugging Face's Flax examples (notebook 16's capstone).

Each host reads its rows of the global batch and `shard` stacks them one slice per local device.
The `TrainState` holds the parameters, the optimizer's momentum and a dropout key; its `replicate()`
copies it to every local device and gives each device a key of its own with `shard_prng_key`, as the
examples' `run_*_flax.py` scripts do, and the step splits each device's key. `jax.pmap` is applied by
call with its axis name and donation; `get_metrics` keeps each host's first device's copy of the metrics:

    python -m helpers.launch --hosts 2 --devices-per-host 2 notebooks/scripts/hf_style_train.py
"""
from helpers.launch import initialize

initialize()  # joins the run: the course launcher, mpirun, srun, or alone

import jax
import jax.numpy as jnp
import optax
from flax import jax_utils
from flax.training import train_state
from flax.training.common_utils import get_metrics, shard, shard_prng_key

from helpers.training import tiny

PER_DEVICE_BATCH = 16
STEPS, LR = 12, 0.03


class TrainState(train_state.TrainState):
    dropout_rng: jax.Array

    def replicate(self):
        return jax_utils.replicate(self).replace(dropout_rng=shard_prng_key(self.dropout_rng))


def train_step(state, batch):
    dropout_rng, new_dropout_rng = jax.random.split(state.dropout_rng)

    def loss_fn(params):
        predictions = state.apply_fn(params, batch["x"], dropout_rng)
        return jnp.mean((predictions - batch["y"]) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    grads = jax.lax.pmean(grads, "batch")
    metrics = jax.lax.pmean({"loss": loss}, axis_name="batch")
    return state.apply_gradients(grads=grads, dropout_rng=new_dropout_rng), metrics


p_train_step = jax.pmap(train_step, "batch", donate_argnums=(0,))
train_batch_size = PER_DEVICE_BATCH * jax.device_count()

state = TrainState.create(apply_fn=tiny.dropout_predict, params=tiny.init_params(),
                          tx=optax.sgd(LR, momentum=0.9), dropout_rng=jax.random.PRNGKey(0))
state = state.replicate()
train_metrics = []
for step in range(STEPS):
    x, y = tiny.host_batch(step, jax.process_index(), jax.process_count(), train_batch_size)
    state, metrics = p_train_step(state, shard({"x": x, "y": y}))
    train_metrics.append(metrics)

train_metrics = get_metrics(train_metrics)
state = jax_utils.unreplicate(state)  # one copy, to save
if jax.process_index() == 0:
    for step, loss in enumerate(train_metrics["loss"]):
        print(f"step {step:3d}  loss {loss:.8f}")
    print(f"saved at step {int(state.step)}")
