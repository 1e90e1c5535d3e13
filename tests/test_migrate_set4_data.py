"""The migration assistant's data and key rules met on a fourth set of published pmap-era scripts: keys split per
device plus one to keep, loaders asked to shuffle with a seed every host shares, shuffles that are no loader's
order (a minibatch permutation on the device, a sample of the data), batches stacked per device through a count held
in a name, and a count of every device that sizes each host's data. The snippets are written for these tests."""
from __future__ import annotations

import pytest

from helpers.migrate import findings


def _rules(source: str) -> set[tuple[int, str]]:
    return {(f.line, f.rule) for f in findings(source, "t.py")}


def _kinds(source: str) -> set[str]:
    return {rule for _, rule in _rules(source)}


def _said(source: str, line: int, rule: str) -> str:
    (finding,) = [f for f in findings(source, "t.py") if (f.line, f.rule) == (line, rule)]
    return f"{finding.does} -> {finding.instead}"


KEYS_AND_ONE_TO_KEEP = """import jax

step = jax.pmap(lambda k, x: x, axis_name='d')
key = jax.random.key(0)
key, *device_keys = jax.random.split(key, num=jax.local_device_count() + 1)
"""


def test_a_split_into_the_local_device_count_plus_one_makes_per_device_keys():
    assert (5, "per-device-keys") in _rules(KEYS_AND_ONE_TO_KEEP)


@pytest.mark.parametrize("count", ["n_devices * envs_per_device + 1", "total_envs // n_devices"])
def test_a_split_into_keys_per_environment_is_no_per_device_split(count):
    source = KEYS_AND_ONE_TO_KEEP.replace("num=jax.local_device_count() + 1", f"num={count}").replace(
        "key = jax.random.key(0)", "n_devices = jax.local_device_count()\nkey = jax.random.key(0)")
    assert "per-device-keys" not in _kinds(source)


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
