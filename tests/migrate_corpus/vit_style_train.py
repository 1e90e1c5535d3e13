"""A vision transformer's fine-tuning loop in the style of older ViT trainers (written for the course's corpus)."""
import functools

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

BATCH_AXIS = "batch"


def make_update_fn(apply_fn, accum_steps, tx):
    @functools.partial(jax.pmap, axis_name=BATCH_AXIS, donate_argnums=(0, 1))
    def update_fn(params, opt_state, batch, rng):
        rng, new_rng = jax.random.split(rng)

        def loss_fn(params, images, labels):
            logits = apply_fn(dict(params=params), rngs=dict(dropout=rng), inputs=images, train=True)
            return -jnp.mean(jnp.sum(logits * labels, axis=1))

        l, g = jax.value_and_grad(loss_fn)(params, batch["image"], batch["label"])
        g = jax.tree.map(lambda x: jax.lax.pmean(x, axis_name=BATCH_AXIS), g)
        updates, opt_state = tx.update(g, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, jax.lax.pmean(l, axis_name=BATCH_AXIS), new_rng

    return update_fn


def evaluate(params, apply_fn, ds):
    good = total = 0
    eval_fn = jax.pmap(lambda p, x: apply_fn(dict(params=p), x, train=False), axis_name=BATCH_AXIS)
    step = flax.jax_utils.pad_shard_unpad(eval_fn, static_argnums=(0,), static_return=False)
    for batch in ds:
        predicted = step(params, batch["image"])
        good += int((np.argmax(predicted, -1) == np.argmax(batch["label"], -1)).sum())
        total += len(batch["image"])
    return good / total


def train(config, params, apply_fn, ds_train, ds_test):
    tx = optax.sgd(config.base_lr, momentum=0.9)
    update_fn_repl = make_update_fn(apply_fn, config.accum_steps, tx)
    opt_state = tx.init(params)
    params_repl = flax.jax_utils.replicate(params)
    opt_state_repl = flax.jax_utils.replicate(opt_state)
    update_rng_repl = flax.jax_utils.replicate(jax.random.PRNGKey(0))
    for step, batch in zip(range(1, config.total_steps + 1), ds_train.as_numpy_iterator()):
        params_repl, opt_state_repl, loss_repl, update_rng_repl = update_fn_repl(
            params_repl, opt_state_repl, batch, update_rng_repl)
        if step % config.eval_every == 0 and jax.host_id() == 0:
            accuracy = evaluate(params_repl, apply_fn, ds_test)
            print(f"step {step}: loss {loss_repl[0]:.4f}, accuracy {accuracy:.3f}")
    return flax.jax_utils.unreplicate(params_repl)
