"""The migration assistant's data and key rules met on a fourth set of published pmap-era scripts: keys split per
device plus one to keep, loaders asked to shuffle with a seed every host shares, shuffles that are no loader's
order (a minibatch permutation on the device, a sample of the data), batches stacked per device through a count held
in a name, and a count of every device that sizes each host's data. The snippets are written for these tests."""
from __future__ import annotations

import pytest

from helpers.migrate import findings
from migrate_support import rule_set as _rules, said as _said


def _kinds(source: str) -> set[str]:
    return {rule for _, rule in _rules(source)}


KEYS_AND_ONE_TO_KEEP = """import jax

step = jax.pmap(lambda k, x: x, axis_name='d')
key = jax.random.key(0)
key, *device_keys = jax.random.split(key, num=jax.local_device_count() + 1)
"""


def test_a_split_into_the_local_device_count_plus_one_makes_per_device_keys():
    assert (5, "per-device-keys") in _rules(KEYS_AND_ONE_TO_KEEP)


def _split_into(count: str) -> str:
    return KEYS_AND_ONE_TO_KEEP.replace("num=jax.local_device_count() + 1", f"num={count}").replace(
        "key = jax.random.key(0)", "n_devices = jax.local_device_count()\nkey = jax.random.key(0)")


def test_a_split_into_keys_per_row_is_no_per_device_split():
    assert "per-device-keys" not in _kinds(_split_into("total_envs // n_devices"))


def test_a_split_into_a_multiple_of_the_devices_makes_keys_per_device():
    # so many keys a device (an environment's each), made on the host alike on every host (blind sets 17, 25, 51)
    assert "per-device-keys" in _kinds(_split_into("n_devices * envs_per_device + 1"))


SHUFFLES = """import jax
import numpy as np
import tensorflow as tf

step = jax.pmap(lambda p, x: p, axis_name='d')

def make_loader(ds):
    ds = ds.cache()
    ds = ds.shuffle(buffer_size=512)
    return ds.batch(64)

def update_epoch(carry, _):
    key, rows = carry
    key, sub = jax.random.split(key)
    order = jax.random.permutation(sub, rows.shape[0])
    return (key, rows[order]), None

def run(key, rows):
    return jax.lax.scan(update_epoch, (key, rows), None, length=4)

def sample(table, seed, n):
    return table.shuffle(seed=seed).select(range(n))

def epoch_order(n, seed):
    return np.random.RandomState(seed).permutation(n)
"""


def test_an_unseeded_buffer_shuffle_a_device_permutation_and_a_sample_are_no_shared_shuffle():
    assert {line for line, rule in _rules(SHUFFLES) if rule == "shared-shuffle"} == {25}  # the loader's order only


LOADER_CALL = """import jax
from myproject.data import iter_rows

step = jax.pmap(lambda p, x: p, axis_name='d')

def batches(table, cfg, *, shuffle, seed):
    return iter_rows(table, batch_size=cfg.batch_size, shuffle=shuffle, seed=seed)

def train(params, table, cfg):
    for epoch in range(cfg.epochs):
        for rows in batches(table, cfg, shuffle=True, seed=cfg.seed + epoch):
            params = step(params, rows)
"""


def test_a_loader_asked_to_shuffle_with_a_shared_seed_is_a_shared_shuffle():
    assert (11, "shared-shuffle") in _rules(LOADER_CALL)
    assert "seed=cfg.seed + epoch" in _said(LOADER_CALL, 11, "shared-shuffle")


@pytest.mark.parametrize("source", [
    LOADER_CALL.replace("seed=cfg.seed + epoch", "seed=cfg.seed + epoch + jax.process_index()"),
    LOADER_CALL.replace("shuffle=True, seed=", "shuffle=True, shard_index=jax.process_index(), seed="),
    LOADER_CALL.replace("    return iter_rows(table,", "    table = table[jax.process_index()::jax.process_count()]\n"
                        "    return iter_rows(table,"),  # the script's own loader function takes this host's rows
    LOADER_CALL.replace("shuffle=True", "shuffle=False"),
])
def test_a_loader_that_splits_by_host_or_does_not_shuffle_is_no_shared_shuffle(source):
    assert "shared-shuffle" not in _kinds(source)


TORCH_LOADER = """import jax
import torch
from transformers import set_seed
from flax.training.common_utils import shard

step = jax.pmap(lambda p, x: p, axis_name='d')

def main(args, dataset, params):
    set_seed(args.seed)
    loader = torch.utils.data.DataLoader(dataset, shuffle=True, batch_size=args.batch_size, drop_last=True)
    for batch in loader:
        params = step(params, shard(batch))
"""


def test_a_torch_loader_shuffled_under_a_seed_set_for_the_program_is_a_shared_shuffle():
    assert (10, "shared-shuffle") in _rules(TORCH_LOADER)
    assert "set_seed(args.seed)" in _said(TORCH_LOADER, 10, "shared-shuffle")


@pytest.mark.parametrize("source", [
    TORCH_LOADER.replace("set_seed(args.seed)", "set_seed(args.seed + jax.process_index())"),
    TORCH_LOADER.replace("    set_seed(args.seed)\n", ""),  # unseeded: each host its own order
    TORCH_LOADER.replace("shuffle=True,", "sampler=DistributedSampler(dataset, rank=rank),"),
])
def test_a_torch_loader_seeded_per_host_unseeded_or_sampled_is_no_shared_shuffle(source):
    assert "shared-shuffle" not in _kinds(source)


DEVICES_HANDED = """import jax
import jax.numpy as jnp

def train(params, batches, devices):
    device_count = len(devices)
    step = jax.pmap(lambda p, x: p, axis_name='d', devices=devices)
    for rows in batches:
        per_device = len(rows) // device_count
        params = step(params, jnp.asarray(rows).reshape(device_count, per_device, *rows.shape[1:]))
    return params
"""

CAPPED_COUNT = """import jax
import jax.numpy as jnp

def run(key, num_envs, cap, reset):
    n_local = jax.local_device_count()
    if cap:
        n_local = min(n_local, cap)
    keys = jax.random.split(key, num_envs)
    keys = jnp.reshape(keys, (n_local, -1) + keys.shape[1:])
    return jax.pmap(reset)(keys)
"""

EVERY_DEVICE = """import jax
import jax.numpy as jnp

def setup(key, cfg, reset, learn):
    n_devices = len(jax.devices())
    key, *env_keys = jax.random.split(key, n_devices * cfg.num_envs + 1)
    states = jax.vmap(reset)(jnp.stack(env_keys))
    to_devices = lambda x: x.reshape(
        (n_devices, cfg.num_envs) + x.shape[1:])
    states = jax.tree.map(to_devices, states)
    return jax.pmap(learn, axis_name='d')(states)
"""


def test_a_stack_per_device_through_a_count_held_in_a_name_is_a_local_batch():
    assert (9, "local-batch") in _rules(DEVICES_HANDED)  # len() of the devices the pmap is handed
    assert "this host's devices" in _said(DEVICES_HANDED, 9, "local-batch")
    assert (9, "local-batch") in _rules(CAPPED_COUNT)  # min(jax.local_device_count(), cap)
    assert (8, "local-batch") in _rules(EVERY_DEVICE)  # len(jax.devices()), in a lambda a tree map applies
    assert "every host's devices" in _said(EVERY_DEVICE, 8, "local-batch")


def test_a_count_of_every_device_that_sizes_each_hosts_share_is_said_where_it_is_bound():
    found = {(line, rule) for line, rule in _rules(EVERY_DEVICE) if rule == "global-batch-per-host"}
    assert found == {(5, "global-batch-per-host")}
    assert "x.reshape((n_devices, cfg.num_envs) + x.shape[1:]), line 8" in _said(EVERY_DEVICE, 5,
                                                                                "global-batch-per-host")


PLAIN_COUNT = """import jax
from tqdm import tqdm

def train(ds, cfg, step, state):
    num_devices = jax.device_count()
    bar = tqdm()
    for images in ds:
        bar.update(num_devices * cfg.batch_size)
        images = images.reshape((num_devices, -1) + images.shape[1:])
        state = step(state, images)
    return state

p_step = jax.pmap(lambda s, x: s, axis_name='d')
"""


def test_a_named_count_of_every_device_is_said_once_at_its_binding_and_a_plain_stack_once():
    found = _rules(PLAIN_COUNT)
    assert {(5, "global-batch-per-host"), (9, "local-batch")} <= found
    assert (8, "global-batch-per-host") not in found  # the product is said at the binding
    assert len([f for f in findings(PLAIN_COUNT, "t.py") if f.line == 9]) == 1


def test_keys_split_per_device_and_stacked_are_said_where_they_are_split_not_as_data():
    source = """import jax
import jax.numpy as jnp

def evaluate(key, params, run_eval):
    n_devices = len(jax.devices())
    key, *keys = jax.random.split(key, n_devices + 1)
    keys = jnp.stack(keys).reshape(n_devices, -1)
    return jax.pmap(run_eval)(params, keys)
"""
    assert (6, "per-device-keys") in _rules(source)
    assert not {"local-batch", "global-batch-per-host"} & _kinds(source)


def test_an_initialisations_dummy_shape_of_every_device_is_no_host_batch():
    source = """import jax
import jax.numpy as jnp
from jax.experimental.pjit import pjit

def init_state(model, cfg, key):
    shape = (len(jax.devices()) * cfg.per_device_batch_size, cfg.length)
    return model.init(key, jnp.ones(shape))
"""
    assert "global-batch-per-host" not in _kinds(source)


DATA_MODULE = """import jax
import datasets

def train(config, state, step_fn, scaler):
    p_step = jax.pmap(step_fn, axis_name='batch')
    train_ds, eval_ds = datasets.get_dataset(config, additional_dim=4)
    train_iter = iter(train_ds)
    for _ in range(config.steps):
        batch = jax.tree.map(lambda x: scaler(x._numpy()), next(train_iter))
        state = p_step(state, batch)
"""


def test_a_projects_own_datasets_module_is_a_project_loader():
    assert (6, "local-batch") in _rules(DATA_MODULE)


@pytest.mark.parametrize("source", [
    DATA_MODULE.replace("datasets.get_dataset(config, additional_dim=4)",
                        "datasets.load_dataset(config.name, split='train')"),  # Hugging Face's
    DATA_MODULE.replace("lambda x: scaler(x._numpy())", "lambda x: x.reshape((2, -1) + x.shape[1:])"),
])
def test_hugging_faces_datasets_or_a_batch_the_script_restacks_is_no_project_stack(source):
    assert (6, "local-batch") not in _rules(source)
