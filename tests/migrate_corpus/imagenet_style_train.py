"""An image classifier's training loop in the style of Flax's ImageNet example (written for the course's corpus)."""
import functools

import jax
import jax.numpy as jnp
import optax
from flax import jax_utils
from flax.training import checkpoints, common_utils, dynamic_scale as dynamic_scale_lib, train_state
from jax import lax


class TrainState(train_state.TrainState):
    batch_stats: dict
    dynamic_scale: dynamic_scale_lib.DynamicScale


def cross_entropy(logits, labels):
    return optax.softmax_cross_entropy(logits, common_utils.onehot(labels, 1000)).mean()


def train_step(state, batch, learning_rate_fn):
    def loss_fn(params):
        logits, new_model_state = state.apply_fn({"params": params, "batch_stats": state.batch_stats},
                                                 batch["image"], mutable=["batch_stats"])
        return cross_entropy(logits, batch["label"]), (new_model_state, logits)

    lr = learning_rate_fn(state.step)
    if state.dynamic_scale:
        grad_fn = state.dynamic_scale.value_and_grad(loss_fn, has_aux=True, axis_name="batch")
        dynamic_scale, is_fin, aux, grads = grad_fn(state.params)
    else:
        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
        aux, grads = grad_fn(state.params)
        grads = lax.pmean(grads, axis_name="batch")
    new_model_state, logits = aux[1]
    metrics = {"loss": aux[0], "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch["label"]),
               "learning_rate": lr}
    metrics = lax.pmean(metrics, axis_name="batch")
    return state.apply_gradients(grads=grads, batch_stats=new_model_state["batch_stats"]), metrics


cross_replica_mean = jax.pmap(lambda x: lax.pmean(x, "x"), "x")


def sync_batch_stats(state):
    return state.replace(batch_stats=cross_replica_mean(state.batch_stats))


def prepare_tf_data(xs):
    local_device_count = jax.local_device_count()

    def _prepare(x):
        x = x._numpy()
        return x.reshape((local_device_count, -1) + x.shape[1:])

    return jax.tree_util.tree_map(_prepare, xs)


def train_and_evaluate(config, workdir):
    if config.batch_size % jax.device_count() > 0:
        raise ValueError("Batch size must be divisible by the number of devices")
    local_batch_size = config.batch_size // jax.process_count()
    train_iter = map(prepare_tf_data, create_input_iter(local_batch_size))
    train_iter = jax_utils.prefetch_to_device(train_iter, 2)
    state = create_train_state(config)
    state = checkpoints.restore_checkpoint(workdir, state)
    step_offset = int(state.step)
    state = jax_utils.replicate(state)
    p_train_step = jax.pmap(functools.partial(train_step, learning_rate_fn=schedule), axis_name="batch")
    train_metrics = []
    for step, batch in zip(range(step_offset, config.num_train_steps), train_iter):
        state, metrics = p_train_step(state, batch)
        train_metrics.append(metrics)
        if (step + 1) % config.log_every_steps == 0:
            summary = {k: v.mean() for k, v in common_utils.get_metrics(train_metrics).items()}
            print(step + 1, summary)
            train_metrics = []
        if (step + 1) % config.steps_per_checkpoint == 0:
            state = sync_batch_stats(state)
            saved = jax.device_get(jax.tree_util.tree_map(lambda x: x[0], state))
            checkpoints.save_checkpoint_multiprocess(workdir, saved, step + 1, keep=3)
    return state
