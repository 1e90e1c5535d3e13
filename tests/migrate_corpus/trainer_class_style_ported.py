"""trainer_class_style.py ported to jax.jit + jax.shard_map on a (host, device) mesh: no finding is left."""
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

DATA = ("host", "device")


class Trainer:
    def __init__(self, model, tx, mesh):
        self.model, self.tx = model, tx
        self.grad_fn = jax.grad(self.loss_fn, has_aux=True)
        self.p_step = jax.jit(jax.shard_map(self.step, mesh=mesh, in_specs=(P(), P(), P(DATA)),
                                            out_specs=(P(), P(), P())))

    def loss_fn(self, params, batch):
        logits = self.model.apply(params, batch["x"])
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()
        return jax.lax.pmean(loss, DATA), logits

    def step(self, params, opt_state, batch):
        grads, logits = self.grad_fn(params, batch)
        accuracy = jax.lax.pmean(jnp.mean(jnp.argmax(logits, -1) == batch["y"]), DATA)
        updates, opt_state = self.tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, accuracy


def train(model, params, batches, mesh):
    tx = optax.sgd(0.1)
    trainer = Trainer(model, tx, mesh)
    replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P(DATA))
    opt_state = jax.device_put(tx.init(params), replicated)
    params = jax.device_put(params, replicated)
    for x, y in batches:
        batch = {"x": jax.make_array_from_process_local_data(rows, x),
                 "y": jax.make_array_from_process_local_data(rows, y)}
        params, opt_state, accuracy = trainer.p_step(params, opt_state, batch)
        if jax.process_index() == 0:
            print(f"accuracy {float(accuracy):.3f}")
    return params
