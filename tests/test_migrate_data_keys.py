"""The migration assistant's rules for data and keys in pmap-era scripts: batches a project's loader stacks per
device, keys split per device by a project's wrapper, shuffles and draws every host shares, a global batch each host
collates in full, and parameters each host initialises from a key of its own. The snippets are written for these
tests."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.migrate import LESSONS
from tests.migrate_support import rule_set, said
from migrate_support import rule_set as _rules, said as _said

ROOT = Path(__file__).resolve().parents[1]


LOADER = """import jax
from mylib.text import BatchMaker

@jax.pmap
def step(params, tokens):
    return params

maker = BatchMaker(corpus, batch_size_per_device=16)
for i, batch in enumerate(maker):
    params = step(params, batch.tokens)
"""

CLASS_LOADER = """import jax
import jax.numpy as jnp
import project.input_pipeline as pipeline

class Trainer:
    def __init__(self, cfg):
        self.train_it, self.eval_it = pipeline.make_iterators(cfg)
        self.p_step = jax.pmap(self.step, 'batch')
        self.example = next(self.eval_it)['image'][0]

    def run(self, state):
        batch = jax.tree.map(jnp.asarray, next(self.train_it))
        return self.p_step(state, batch)
"""


def test_a_project_loaders_batches_fed_to_pmap_as_they_come_are_stacked_per_device():
    assert (8, "local-batch") in _rules(LOADER)
    assert "batch_size_per_device= sizes them per device" in _said(LOADER, 8, "local-batch")
    assert {(7, "local-batch"), (9, "local-batch")} <= _rules(CLASS_LOADER)  # the loader, and device 0's slice
    assert "device 0's slice" in _said(CLASS_LOADER, 9, "local-batch")


@pytest.mark.parametrize("source", [
    LOADER.replace("    params = step(params, batch.tokens)", "    params = step(params, shard(batch.tokens))"),
    LOADER.replace("@jax.pmap", "@jax.jit"),  # no pmap: nothing says the loader stacks per device
    LOADER.replace("from mylib.text import BatchMaker", "from tensorflow_datasets import BatchMaker"),
    LOADER.replace("BatchMaker", "Vocabulary"),  # a project call not named for data
])
def test_a_loader_is_not_said_to_stack_when_the_script_stacks_or_no_pmap_takes_its_batches(source):
    assert "local-batch" not in {rule for _, rule in _rules(source)}


WRAPPED_SPLIT = """import jax
from mylib.random import split_key, seed_key

key = seed_key(1)
n_local_devices = jax.local_device_count()
key, sub = split_key(key)
keys = split_key(sub, num=n_local_devices)
"""


def test_a_project_wrapper_that_splits_a_key_per_local_device_makes_per_device_keys():
    assert (7, "per-device-keys") in _rules(WRAPPED_SPLIT)
    assert "every host splits the same key" in _said(WRAPPED_SPLIT, 7, "per-device-keys")
    per_host = WRAPPED_SPLIT.replace("seed_key(1)", "seed_key(1 + jax.process_index())")
    assert "the key is made from jax.process_index()" in _said(per_host, 7, "per-device-keys")
    assert (6, "per-device-keys") not in _rules(WRAPPED_SPLIT)  # a split in two is no split per device
    assert not _rules(WRAPPED_SPLIT.replace("num=n_local_devices", "num=3"))


NNX_SHUFFLE = """import jax
from flax import nnx
from mylib.data import Table

table = Table(rows).shuffle(jax.random.key(0))
train = nnx.pmap(step, axis_name='data')
"""

DRAWN = """import jax
from functools import partial

n = jax.device_count()

@partial(jax.pmap, axis_name='d')
def step(w, x):
    return w

key = jax.random.key(0)
for _ in range(3):
    key, sub = jax.random.split(key)
    x = jax.random.normal(sub, (n, 8, 2))
    w = step(w, x)
"""


def test_a_shuffle_or_a_device_stack_drawn_from_a_key_every_host_shares_is_a_shared_shuffle():
    assert (5, "shared-shuffle") in _rules(NNX_SHUFFLE)  # nnx.pmap is pmap era too
    assert (13, "shared-shuffle") in _rules(DRAWN)
    assert "every host feeds the same rows" in _said(DRAWN, 13, "shared-shuffle")


@pytest.mark.parametrize("source", [
    DRAWN.replace("key = jax.random.key(0)", "key = jax.random.fold_in(jax.random.key(0), jax.process_index())"),
    DRAWN.replace("(n, 8, 2)", "(8, n, 2)"),  # no leading device axis
    DRAWN.replace("w = step(w, x)", "w = step(w, x.mean(0))"),  # not what pmap is fed
    NNX_SHUFFLE.replace("jax.random.key(0)", "jax.random.fold_in(jax.random.key(0), jax.process_index())"),
])
def test_keys_with_the_host_folded_in_or_draws_pmap_is_not_fed_are_no_shared_shuffle(source):
    assert "shared-shuffle" not in {rule for _, rule in _rules(source)}


COLLATED = """import jax
import numpy as np

step = jax.pmap(f, 'batch')
per_update = per_device * jax.device_count() * accumulation
order = np.arange(len(rows))
splits = make_splits(order, per_update)
for i, idx in enumerate(splits):
    picked = [rows[int(j)] for j in idx]
    state = step(state, shard(collate(picked)))
"""


def test_each_host_collating_a_whole_global_batch_by_indices_is_said_where_it_collates_and_where_it_is_sized():
    found = _rules(COLLATED)
    assert (9, "global-batch-per-host") in found
    assert (5, "global-batch-per-host") in found  # and where the size is made (held-out set 7 labels it there)
    assert "every host collates the whole global batch" in _said(COLLATED, 9, "global-batch-per-host")


@pytest.mark.parametrize("source", [
    COLLATED.replace("jax.device_count()", "jax.local_device_count()"),  # a host's own batch
    COLLATED.replace("splits = make_splits(order, per_update)",
                     "splits = make_splits(order, per_update // jax.process_count())"),
])
def test_a_host_that_collates_its_own_part_is_not_said_to_collate_the_global_batch(source):
    assert (9, "global-batch-per-host") not in _rules(source)


HOST_INIT = """import jax

rng = jax.random.PRNGKey(0)
rng = jax.random.fold_in(rng, jax.process_index())
rng, init_rng = jax.random.split(rng)
params = model.init(init_rng, x)
dropout_rng = jax.random.fold_in(rng, 1)
y = model.apply(params, x, rngs={'dropout': dropout_rng})
"""

SEEDED_INIT = """import jax
from mylib.random import seed_key, split_key
from mylib.model import create_weights

host = jax.process_index()
key = seed_key(7 + host)
key, sub = split_key(key)
weights = create_weights(shape, param_key=sub)
"""


def test_parameters_initialised_from_a_key_with_the_process_index_are_per_host():
    assert (6, "per-host-init") in _rules(HOST_INIT)
    said = _said(HOST_INIT, 6, "per-host-init")
    assert "(line 4)" in said and "the same on every host" in said
    assert (8, "per-host-init") in _rules(SEEDED_INIT)  # through a project's key wrappers and a name
    assert "(line 6)" in _said(SEEDED_INIT, 8, "per-host-init")


@pytest.mark.parametrize("source", [
    HOST_INIT.replace("rng = jax.random.fold_in(rng, jax.process_index())\nrng, init_rng = jax.random.split(rng)\n",
                      "rng, init_rng = jax.random.split(rng)\nrng = jax.random.fold_in(rng, jax.process_index())\n"),
    "import jax\nkey = jax.random.fold_in(key, jax.process_index())\nopt_state = optimizer.init(params)\n"
    "y = model.apply(params, x, rngs={'dropout': key})\n",  # dropout folded with the host: fine
    SEEDED_INIT.replace("7 + host", "7"),
])
def test_an_init_key_split_off_before_the_host_is_folded_in_is_no_per_host_init(source):
    assert "per-host-init" not in {rule for _, rule in _rules(source)}


def test_the_new_kind_names_a_section_its_notebook_has():
    notebook, section = LESSONS["per-host-init"]
    source = next((ROOT / "notebooks" / "src").glob(f"{notebook}_*.md")).read_text()
    assert section in {re.sub(r"^#+ (\d+\. )?", "", line) for line in source.splitlines() if line.startswith("#")}


KEY_STREAM = """\
import jax
import haiku as hk

p_step = jax.pmap(step, axis_name='d')
rng = hk.PRNGSequence(jax.random.fold_in(jax.random.PRNGKey(0), jax.process_index()))
keys = rng.take(jax.local_device_count())
other = rng.take(4)
state = p_step(state, keys)
"""


def test_keys_taken_off_a_haiku_key_stream_one_a_local_device_are_per_device_keys():
    found = rule_set(KEY_STREAM)
    assert (6, "per-device-keys") in found and 7 not in {line for line, _ in found}, found
    assert "rng.take(jax.local_device_count())" in said(KEY_STREAM, 6, "per-device-keys")
    assert "folds in jax.process_index()" in said(KEY_STREAM, 6, "per-device-keys")


HOST_KEY = """\
import jax
from flax.training.common_utils import shard_prng_key

p_step = jax.pmap(step, axis_name='batch')


def train(state, batches, seed):
    rng = jax.random.PRNGKey(seed)
    rng = jax.random.fold_in(rng, jax.process_index())
    for batch in batches:
        rng, step_rng = jax.random.split(rng)
        state = p_step(state, batch, shard_prng_key(step_rng))
    return state
"""


def test_a_key_made_per_host_then_split_per_device_is_said_where_the_host_enters():
    found = rule_set(HOST_KEY)
    assert (9, "per-device-keys") in found
    assert "the same" not in said(HOST_KEY, 9, "per-device-keys")
    assert "one key for every host" in said(HOST_KEY, 9, "per-device-keys")
    unsplit = HOST_KEY.replace("shard_prng_key(step_rng)", "step_rng")
    assert (9, "per-device-keys") not in rule_set(unsplit)
    initialising = HOST_KEY.replace("    for batch in batches:", "    state = model.init(rng, batch0)\n"
                                                                 "    for batch in batches:")
    assert (9, "per-device-keys") not in rule_set(initialising)  # the init key: per-host-init, said at the init


REPLICATED_BY_ARRAY = """\
import jax
import jax.numpy as jnp


def replicate_tree(tree):
    return jax.tree_util.tree_map(lambda x: jnp.array([x] * jax.device_count()), tree)


p_step = jax.pmap(step)
params = replicate_tree(params)
"""


def test_an_array_of_one_copy_per_device_is_a_replicate():
    assert (10, "jax-utils-replicate") in rule_set(REPLICATED_BY_ARRAY)
    rows = REPLICATED_BY_ARRAY.replace("[x] * jax.device_count()", "[x] * 3")
    assert (10, "jax-utils-replicate") not in rule_set(rows)


OWN_REPLICATE = """\
import jax

p_step = jax.pmap(step, axis_name='batch')
replicate = lambda tree: jax.device_put_replicated(tree, jax.local_devices())
params = replicate(params)
"""


def test_a_replicate_of_the_scripts_own_is_said_at_each_call():
    assert (5, "jax-utils-replicate") in rule_set(OWN_REPLICATE)
    other = OWN_REPLICATE.replace("jax.device_put_replicated(tree, jax.local_devices())", "tree")
    assert (5, "jax-utils-replicate") not in rule_set(other)  # the name alone is no replicate
