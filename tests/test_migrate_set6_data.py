"""The migration assistant's data and state rules met on a sixth set of published pmap-era scripts: a batch shared
out over one host's devices inside the pmapped body, stacks of per-device stacks and a count nnx.split_rngs splits
by, statistics returned per device, and a contrastive loss whose negatives are one device's rows. The snippets are
written for these tests."""
from __future__ import annotations

from migrate_support import rule_set as _rules


SHARED_OUT_IN_THE_BODY = """import jax
import jax.numpy as jnp

n_local = len(jax.local_devices())

@jax.pmap
def rollout(params, key):
    rows = cfg.rollout_batch // n_local
    return jax.random.normal(key, (rows,))

def plain(total):
    return total // n_local
"""


def test_a_batch_divided_by_the_local_device_count_in_a_pmapped_body_is_a_global_batch_per_host():
    found = _rules(SHARED_OUT_IN_THE_BODY)
    assert (8, "global-batch-per-host") in found
    assert not any(rule == "global-batch-per-host" and line != 8 for line, rule in found)


STACK_OF_DEVICE_STACKS = """import jax
from flax import nnx

n_local = jax.local_device_count()
step = jax.pmap(lambda p, x: p)

def train(params, rows, n_steps):
    stacks = jax.tree_util.tree_map(lambda x: x.reshape((n_steps, n_local, -1) + x.shape[1:]), rows)
    flat = jax.tree_util.tree_map(lambda x: x.reshape((n_steps, 4, -1)), rows)
    for i in range(n_steps):
        params = step(params, stacks[i])
    return params

def accumulate(model, batches, n_dev):
    @nnx.split_rngs(splits=n_dev)
    def grads_of(m, b):
        return m(b)
    for b in batches:
        sharded = jax.tree.map(lambda x: x.reshape(n_dev, -1, *x.shape[1:]), b)
        grads_of(model, sharded)
"""


def test_a_device_count_second_in_a_stack_of_stacks_or_split_by_nnx_split_rngs_is_a_local_batch():
    local = {line for line, rule in _rules(STACK_OF_DEVICE_STACKS) if rule == "local-batch"}
    assert {8, 19} <= local and 9 not in local


STATE_RETURNED_PER_DEVICE = """import functools
import jax
import haiku as hk

net = hk.transform_with_state(lambda x: x)

def loss_of(params, state, x):
    out, state = net.apply(params, state, None, x)
    return out.mean(), (state, out)

@functools.partial(jax.pmap, axis_name='d')
def haiku_step(bundle, x):
    params, state = bundle
    grads, (state, out) = jax.grad(loss_of, has_aux=True)(params, state, x)
    bundle = (params, state)
    return bundle

@functools.partial(jax.pmap, axis_name='d')
def linen_step(apply_fn, variables, x):
    def loss_of(p):
        y, stats = apply_fn({'params': p, **variables}, x, mutable=['batch_stats'])
        return y.sum(), (stats, y)
    aux, grads = jax.value_and_grad(loss_of, has_aux=True)(variables['params'])
    stats, y = aux[1]
    new_variables = variables.copy({'params': grads, **stats})
    return new_variables

@functools.partial(jax.pmap, axis_name='d')
def averaged_step(model_fn, params, state, x):
    y, new_state = model_fn(params, x, state, update_batch_norm=True)
    new_state = jax.lax.pmean(new_state, 'd')
    return y, new_state
"""


def test_a_model_state_an_apply_gives_back_kept_by_a_pmapped_step_without_a_collective_is_per_device():
    state = {line for line, rule in _rules(STATE_RETURNED_PER_DEVICE) if rule == "per-device-state"}
    assert state == {15, 25}


CONTRASTIVE_STEPS = """import jax
import jax.numpy as jnp

def contrastive_loss(sim):
    return -jnp.mean(jax.nn.log_softmax(sim)[jnp.arange(sim.shape[0]), jnp.arange(sim.shape[0])])

@jax.pmap
def named_loss(params, batch):
    sim = model(params, batch)
    return contrastive_loss(sim)

@jax.pmap
def by_hand(params, batch):
    a, b = encode(params, batch['x']), encode(params, batch['y'])
    sim = jnp.einsum('nd,md->nm', a, b)
    labels = jnp.arange(sim.shape[0])
    return jnp.mean(jax.nn.log_softmax(sim)[labels, labels]) + jnp.clip(a @ b.T, 0, 1).sum()

@jax.pmap
def gathered(params, batch):
    a, b = encode(params, batch['x']), encode(params, batch['y'])
    b = jax.lax.all_gather(b, 'i', tiled=True)
    return contrastive_loss(a @ b.T)

@jax.pmap
def attention(q, k):
    return jax.nn.softmax(q @ k.T)
"""


def test_a_contrastive_loss_of_one_devices_rows_in_a_pmapped_step_has_per_device_negatives():
    negatives = sorted(line for line, rule in _rules(CONTRASTIVE_STEPS) if rule == "per-device-negatives")
    assert negatives == [10, 15, 17]  # not jnp.clip, not a gathered loss, not attention with no diagonal targets


SHUFFLED_PMAP_OUTPUT = """import jax
import jax.numpy as jnp

@jax.pmap
def rollout(params, key):
    return jax.random.normal(key, (8, 3))

def train(params, keys, key, dataset):
    rows: jnp.ndarray = rollout(params, keys)
    rows = jax.device_get(rows).reshape((-1, 3))
    order = jax.random.permutation(key, jnp.arange(rows.shape[0]))
    epoch = jax.random.permutation(key, len(dataset))
    return rows[order], epoch
"""


def test_a_shuffle_of_a_pmapped_functions_output_is_no_shared_loader_shuffle():
    shuffles = {line for line, rule in _rules(SHUFFLED_PMAP_OUTPUT) if rule == "shared-shuffle"}
    assert shuffles == {12}  # the dataset's order is shared; the rows rollout made (bound with an annotation) are not


DRAWN_GLOBAL_BATCHES = """import jax
from jax.experimental.pjit import pjit

class Synthetic:
    def __init__(self):
        self.key = jax.random.PRNGKey(0)
        self.global_batch = 128
        self.per_host = 16

    def __next__(self):
        self.key, k = jax.random.split(self.key)
        x = jax.random.normal(k, shape=[self.global_batch, 32])
        y = jax.random.normal(k, shape=[self.per_host, 32])
        return x, y

    def init(self):
        return jax.random.normal(self.key, shape=[self.global_batch, 32])
"""


def test_a_loader_drawing_the_global_batch_from_a_shared_key_draws_it_on_every_host():
    found = {(line, rule) for line, rule in _rules(DRAWN_GLOBAL_BATCHES)
             if rule in ("global-batch-per-host", "shared-shuffle")}
    assert found == {(12, "global-batch-per-host"), (12, "shared-shuffle")}
