"""A model-parallel trainer from the xmap/pjit era, in the style of large-model codebases of 2022
(written for the course's corpus)."""
import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental import PartitionSpec as P
from jax.experimental import maps
from jax.experimental.maps import Mesh, xmap
from jax.experimental.pjit import pjit

DP, MP = "dp", "mp"


def train_step(params, opt_state, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return apply_updates(params, updates), opt_state, loss


def batch_for_this_host(dataset, step, per_host):
    start = (step * jax.host_count() + jax.host_id()) * per_host
    return dataset[start:start + per_host]


devices = np.asarray(jax.devices()).reshape(jax.device_count() // 2, 2)
param_spec = {"w_in": P(None, MP), "w_out": P(MP, None)}
with Mesh(devices, (DP, MP)):
    p_train_step = pjit(train_step, in_axis_resources=(param_spec, None, P(DP)),
                        out_axis_resources=(param_spec, None, None), donate_argnums=(0, 1))
    p_init = pjit(init_params, in_axis_resources=None, out_axis_resources=param_spec)
    params = p_init(jax.random.PRNGKey(0))
    opt_state = optimizer.init(params)
    for step in range(1000):
        batch = batch_for_this_host(train_data, step, 64)
        params, opt_state, loss = p_train_step(params, opt_state, batch)
        if jax.host_id() == 0 and step % 100 == 0:
            print(step, loss, maps.thread_resources.env.physical_mesh.shape)

predict = xmap(lambda w, x: jnp.dot(x, w), in_axes=([...], ["batch", ...]), out_axes=["batch", ...],
               axis_resources={"batch": DP})
