"""The migration assistant's data and state rules met on a fifth set of published pmap-era scripts: a project's
loader whose batches reach pmap through `.numpy()`, a function's parameter or a star import, BatchNorm statistics
kept per device by a jitted step that is pmapped, and stacks split one piece per device. The snippets are written
for these tests."""
from __future__ import annotations

from migrate_support import rule_set as _rules, said as _said


LOADER_THROUGH_NUMPY_AND_A_PARAMETER = """import jax
from corpus import make_batches

step = jax.pmap(lambda p, x: p, axis_name='d')

def score(params, batches, n):
    for _, rows in zip(range(n), batches):
        rows = rows._numpy()
        step(params, rows)

def train(params, cfg):
    train_rows = make_batches(cfg.train, cfg.batch)
    held_rows = make_batches(cfg.held, cfg.batch)
    it = iter(train_rows)
    for _ in range(cfg.steps):
        params = step(params, next(it).numpy())
    score(params, held_rows, 4)
"""


def test_a_project_loader_read_through_numpy_or_handed_to_a_function_stacks_per_device():
    local = {line for line, rule in _rules(LOADER_THROUGH_NUMPY_AND_A_PARAMETER) if rule == "local-batch"}
    assert local == {12, 13}


LOADER_FROM_A_STAR_IMPORT = """import jax
from flax import jax_utils
from our_utils import *

step = jax.pmap(lambda s, b: s, axis_name='d')

def main(cfg):
    train_it, eval_it, n_train = build_loaders(cfg)
    state = jax_utils.replicate(make_state(cfg))
    for _ in range(cfg.steps):
        batch = next(train_it)
        state = step(state, batch)
        weight = len(batch['label'][0])
    first = next(eval_it)['image'][0]
"""


def test_a_loader_from_a_project_star_import_stacks_per_device_and_counting_a_slice_is_no_finding():
    local = {line for line, rule in _rules(LOADER_FROM_A_STAR_IMPORT) if rule == "local-batch"}
    assert local == {8, 14}  # the loader of both iterators, device 0's slice of its batch; len(...[0]) only counts


def test_a_star_import_of_a_library_is_no_project_loader():
    source = LOADER_FROM_A_STAR_IMPORT.replace("from our_utils import *", "from numpy import *")
    assert not {line for line, rule in _rules(source) if rule == "local-batch"}


JITTED_THEN_PMAPPED_BATCH_NORM = """import functools
import jax

@functools.partial(jax.jit, static_argnames=['lr'])
def update(state, batch, lr):
    def loss_fn(params):
        out, updates = state.apply_fn({'params': params, 'batch_stats': state.batch_stats}, batch['x'],
                                      mutable=['batch_stats'])
        return out.mean(), updates
    (loss, updates), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    grads = jax.lax.pmean(grads, 'batch')
    return state.apply_gradients(grads=grads, batch_stats=updates['batch_stats'])

fast_update = jax.jit(update, static_argnames=['lr'])
p_update = jax.pmap(functools.partial(fast_update, lr=0.1), axis_name='batch')
mean_over_devices = jax.pmap(lambda x: jax.lax.pmean(x, 'i'), 'i')
"""


def test_batch_stats_a_jitted_then_pmapped_step_keeps_per_device_are_per_device_state():
    assert (12, "per-device-state") in _rules(JITTED_THEN_PMAPPED_BATCH_NORM)
    said = _said(JITTED_THEN_PMAPPED_BATCH_NORM, 12, "per-device-state")
    assert "goes" in said and "axis_name=" in said  # the sync step goes; shard_map's BatchNorm needs the axis


def test_batch_stats_averaged_through_a_name_are_no_per_device_state():
    source = JITTED_THEN_PMAPPED_BATCH_NORM.replace(
        "    return state.apply_gradients(grads=grads, batch_stats=updates['batch_stats'])",
        "    stats = jax.lax.pmean(updates['batch_stats'], 'batch')\n"
        "    return state.apply_gradients(grads=grads, batch_stats=stats)")
    assert "per-device-state" not in {rule for _, rule in _rules(source)}


SPLIT_PER_DEVICE = """import jax
import jax.numpy as jnp
import numpy as np

step = jax.pmap(lambda p, x: p, axis_name='d')

def collect(steps, devices):
    pieces = jax.tree_util.tree_map(lambda *xs: jnp.split(jnp.stack(xs), len(devices), axis=1), *steps)
    placed = jax.device_put_sharded(pieces, devices=devices)
    obs = jax.device_put_sharded(np.split(steps[-1], len(devices)), devices=devices)
    return placed, obs

def feed(params, rows):
    halves = np.split(rows, 2)
    return step(params, np.split(rows, jax.local_device_count()))
"""


def test_a_split_one_piece_per_device_is_a_local_batch_stack():
    local = {line for line, rule in _rules(SPLIT_PER_DEVICE) if rule == "local-batch"}
    assert {8, 15} <= local and not {10, 14} & local  # one handed to device_put_sharded is said there; halves are no stack
    assert "one piece per device" in _said(SPLIT_PER_DEVICE, 8, "local-batch")


LOGGED_GLOBAL_COUNT = """import jax
import wandb

step = jax.pmap(lambda p, x: p, axis_name='d')

def log(i, cfg):
    wandb.log({"rows": i * cfg.batch * jax.device_count()}, step=i)
"""


def test_a_count_of_every_device_in_a_logged_dict_is_no_global_batch_per_host():
    assert "global-batch-per-host" not in {rule for _, rule in _rules(LOGGED_GLOBAL_COUNT)}
