"""pjit_style_train.py ported to jax.jit with NamedShardings on a (data, model) mesh: no finding is left."""
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

DP, MP = "dp", "mp"


def train_step(params, opt_state, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return apply_updates(params, updates), opt_state, loss


def batch_for_this_host(dataset, step, per_host):
    start = (step * jax.process_count() + jax.process_index()) * per_host
    return dataset[start:start + per_host]


mesh = jax.make_mesh((jax.device_count() // 2, 2), (DP, MP))
param_shardings = {"w_in": NamedSharding(mesh, P(None, MP)), "w_out": NamedSharding(mesh, P(MP, None))}
rows = NamedSharding(mesh, P(DP))
with jax.set_mesh(mesh):
    p_train_step = jax.jit(train_step, out_shardings=(param_shardings, None, None), donate_argnums=(0, 1))
    params = jax.jit(init_params, out_shardings=param_shardings)(jax.random.key(0))
    opt_state = optimizer.init(params)
    for step in range(1000):
        batch = jax.make_array_from_process_local_data(rows, batch_for_this_host(train_data, step, 64))
        params, opt_state, loss = p_train_step(params, opt_state, batch)
        if step % 100 == 0:
            value = float(loss)
            if jax.process_index() == 0:
                print(step, value, dict(mesh.shape))

predict = jax.jit(jax.shard_map(lambda w, x: jnp.dot(x, w), mesh=mesh, in_specs=(P(), P(DP)), out_specs=P(DP)))
