"""Data-parallel training with dropout, in the style of Hugging Face's Flax examples (notebook 16's capstone).

Each host reads its rows of the global batch; `shard` stacks them one slice per local device,
`shard_prng_key` gives each local device a dropout key, `jax.pmap` is applied by call with its
axis name and donation, and `get_metrics` keeps each host's first device's copy of the metrics:

    python -m helpers.launch --hosts 2 --devices-per-host 2 notebooks/scripts/hf_style_train.py
"""
from helpers.launch import initialize

initialize()  # joins the run: the course launcher, mpirun, srun, or alone

import jax
from flax import jax_utils
from flax.training.common_utils import get_metrics, shard, shard_prng_key

from helpers.training import tiny

PER_DEVICE_BATCH = 16
STEPS, LR = 12, 0.3


def train_step(params, batch, dropout_rng):
    def loss_fn(params):
        return tiny.dropout_loss_fn(params, batch["x"], batch["y"], dropout_rng)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    metrics = jax.lax.pmean({"loss": loss}, axis_name="batch")
    return jax.tree.map(lambda p, g: p - LR * g, params, grads), metrics


p_train_step = jax.pmap(train_step, "batch", donate_argnums=(0,))
train_batch_size = PER_DEVICE_BATCH * jax.device_count()

rng = jax.random.PRNGKey(0)
params = jax_utils.replicate(tiny.init_params())
train_metrics = []
for step in range(STEPS):
    x, y = tiny.host_batch(step, jax.process_index(), jax.process_count(), train_batch_size)
    rng, dropout_rng = jax.random.split(rng)
    params, metrics = p_train_step(params, shard({"x": x, "y": y}), shard_prng_key(dropout_rng))
    train_metrics.append(metrics)

train_metrics = get_metrics(train_metrics)
if jax.process_index() == 0:
    for step, loss in enumerate(train_metrics["loss"]):
        print(f"step {step:3d}  loss {loss:.8f}")
