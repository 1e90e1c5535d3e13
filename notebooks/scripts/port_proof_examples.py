"""Pmap steps and their ports, for helpers.migrate.proof (notebook 16 and tests/test_proof.py): pmap_train.py's
step, its right ports (as in ported_train.py), and the usual wrong ones. Real hosts import this file by path,
so importing it runs nothing: every function here is only defined."""
from functools import partial

import jax
import numpy as np
from jax import P

from helpers.training import tiny

LR = 0.3
PER_DEVICE = 8
DATA = ("host", "device")


@partial(jax.pmap, axis_name="batch")
def old_step(params, x, y):  # pmap_train.py's step
    loss, grads = jax.value_and_grad(tiny.loss_fn)(params, x, y)
    grads = jax.lax.pmean(grads, "batch")
    loss = jax.lax.pmean(loss, "batch")
    return jax.tree.map(lambda p, g: p - LR * g, params, grads), loss


def host_inputs(host, hosts, local_devices, step):
    """What host `host` passes old_step at `step`: replicated params, its rows stacked per device."""
    params = tiny.init_params()
    x, y = tiny.host_batch(step, host, hosts, PER_DEVICE * local_devices * hosts)
    return (jax.tree.map(lambda p: np.stack([p] * local_devices), params),
            x.reshape(local_devices, -1, x.shape[-1]), y.reshape(local_devices, -1, y.shape[-1]))


def _sgd(params, grads):
    return jax.tree.map(lambda p, g: p - LR * g, params, grads)


def port(mesh):  # ported_train.py's step: the gradient of the pmean'd loss
    def body(params, x, y):
        loss, grads = jax.value_and_grad(lambda p: jax.lax.pmean(tiny.loss_fn(p, x, y), DATA))(params)
        return _sgd(params, grads), loss

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(DATA), P(DATA)), out_specs=(P(), P())))


def jit_port(mesh):  # ported_train.py --jit: the loss of the whole global batch
    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(tiny.loss_fn)(params, x, y)
        return _sgd(params, grads), loss

    return step


def trapped_port(mesh):  # the pmap body renamed: pmean of gradients shard_map already summed
    def body(params, x, y):
        loss, grads = jax.value_and_grad(tiny.loss_fn)(params, x, y)
        grads = jax.lax.pmean(grads, DATA)
        return _sgd(params, grads), jax.lax.pmean(loss, DATA)

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(DATA), P(DATA)), out_specs=(P(), P())))


DEVICE_SPECS = (P(), P("device"), P("device"))


def device_rows_port(mesh):  # "each host splits its own batch over its devices": P('device')
    def body(params, x, y):
        loss, grads = jax.value_and_grad(lambda p: jax.lax.pmean(tiny.loss_fn(p, x, y), "device"))(params)
        return _sgd(params, grads), loss

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=DEVICE_SPECS, out_specs=(P(), P())))


def wrong_structure_port(mesh):
    inner = port(mesh)
    return lambda params, x, y: {"params": inner(params, x, y)[0]}


def raising_port(mesh):
    def step(params, x, y):
        raise ValueError("the port is not written yet")

    return step


# ----------------------------------------------------------------------------- dropout keys

@partial(jax.pmap, axis_name="batch")
def old_dropout_step(params, x, y, key):  # a parameters-only step with dropout, in hf_style_train.py's style
    loss, grads = jax.value_and_grad(tiny.dropout_loss_fn)(params, x, y, key)
    grads = jax.lax.pmean(grads, "batch")
    return _sgd(params, grads), jax.lax.pmean(loss, "batch")


def _with_keys(keys_of):
    def inputs(host, hosts, local_devices, step):
        params, x, y = host_inputs(host, hosts, local_devices, step)
        key = jax.random.fold_in(jax.random.PRNGKey(0), step)
        return params, x, y, keys_of(key, host, hosts, local_devices)

    return inputs


# every host splits the same key over its own devices (shard_prng_key)
shared_key_inputs = _with_keys(lambda key, host, hosts, local: np.asarray(jax.random.split(key, local)))


def _one_host_keys(key, host, hosts, local):
    from helpers.migrate.proof import one_host_keys

    return one_host_keys(key, host, hosts, local)


one_host_key_inputs = _with_keys(_one_host_keys)


def dropout_port(mesh):  # takes the keys it is given: one per device, a (1, 2) block
    def body(params, x, y, keys):
        def loss(p):
            return jax.lax.pmean(tiny.dropout_loss_fn(p, x, y, keys[0]), DATA)

        value, grads = jax.value_and_grad(loss)(params)
        return _sgd(params, grads), value

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(DATA), P(DATA), P(DATA)),
                                 out_specs=(P(), P())))


def fold_in_port(mesh):  # draws a key per device of every host itself, from the first key
    def body(params, x, y, keys):
        key = jax.random.fold_in(keys[0], jax.lax.axis_index(DATA))

        def loss(p):
            return jax.lax.pmean(tiny.dropout_loss_fn(p, x, y, key), DATA)

        value, grads = jax.value_and_grad(loss)(params)
        return _sgd(params, grads), value

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(DATA), P(DATA), P(DATA)),
                                 out_specs=(P(), P())))


def per_device_loss_port(mesh):  # pmap's own semantics (check_vma=False), but the loss is each device's
    def body(params, x, y):
        loss, grads = jax.value_and_grad(tiny.loss_fn)(params, x, y)
        return _sgd(params, jax.lax.pmean(grads, DATA)), loss

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(DATA), P(DATA)), out_specs=(P(), P()),
                                 check_vma=False))


@partial(jax.pmap, axis_name="batch", in_axes=(None, 0, 0))
def old_unstacked_params_step(params, x, y):  # params passed whole (in_axes=None)
    return old_step.__wrapped__(params, x, y)


def unstacked_inputs(host, hosts, local_devices):
    params, x, y = host_inputs(host, hosts, local_devices, 0)
    return jax.tree.map(lambda p: p[0], params), x, y


def _hf_train_step(params, batch, dropout_rng):  # HF style, parameters only: pmapped by call with donation
    def loss_fn(params):
        return tiny.dropout_loss_fn(params, batch["x"], batch["y"], dropout_rng)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    metrics = jax.lax.pmean({"loss": loss}, axis_name="batch")
    return _sgd(params, grads), metrics


hf_step = jax.pmap(_hf_train_step, "batch", donate_argnums=(0,))


def hf_inputs(host, hosts, local_devices, step):  # one_host_keys: what a port with a key per device can equal
    params, x, y, keys = one_host_key_inputs(host, hosts, local_devices, step)
    return params, {"x": x, "y": y}, keys


def hf_port(mesh):  # its port, on global arrays, with donation on the enclosing jit
    def body(params, batch, keys):
        def loss(p):
            return jax.lax.pmean(tiny.dropout_loss_fn(p, batch["x"], batch["y"], keys[0]), DATA)

        value, grads = jax.value_and_grad(loss)(params)
        return _sgd(params, grads), {"loss": value}

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(DATA), P(DATA)), out_specs=(P(), P())),
                   donate_argnums=(0,))
