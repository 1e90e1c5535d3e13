"""The migration assistant's data rules met on a seventh set of published scripts: a run's total shared out over one
host's devices, a count of every device handed to the project's loader, rows read by a batch size split over every
device, a helper of the script that stacks rows per device, the project's loader feeding a training step with no
host index, each leaf of a step's output read on the host, and a mesh of one host's devices. The snippets are
written for these tests."""
from __future__ import annotations

import pytest

from migrate_support import rule_set as _rules
from migrate_support import said as _said


SHARED_OVER_LOCAL = """import jax

class Config:
    envs: int = 4096
    host_envs: int = 512

    def __post_init__(self):
        n = jax.local_device_count()
        self.envs_per_device = self.envs // n
        self.host_per_device = self.host_envs // n
        print(self.envs / n)

step = jax.pmap(lambda x: x, axis_name='d')
"""


def test_a_run_total_divided_by_this_hosts_devices_is_a_global_batch_per_host_not_a_local_batch():
    found = _rules(SHARED_OVER_LOCAL)
    assert (9, "global-batch-per-host") in found and (9, "local-batch") not in found
    assert "jax.device_count()" in _said(SHARED_OVER_LOCAL, 9, "global-batch-per-host")
    assert (10, "global-batch-per-host") not in found  # a host's own count, named so
    assert (11, "global-batch-per-host") not in found  # printed, not assigned


def test_a_run_total_over_this_hosts_devices_in_a_script_that_counts_hosts_is_no_global_batch():
    counted = SHARED_OVER_LOCAL.replace("n = jax.local_device_count()",
                                        "n = jax.local_device_count()\n        hosts = jax.process_count()")
    assert not any(rule == "global-batch-per-host" for _, rule in _rules(counted))


LOADER_TOLD_EVERY_DEVICE = """import jax
from pipeline.images import ImageGenerator

step = jax.pmap(train_step, axis_name='b')
gen = ImageGenerator(files, batch_size=32, num_devices=jax.device_count())
local = ImageGenerator(files, batch_size=32, num_devices=jax.local_device_count())
"""


def test_a_count_of_every_device_handed_to_the_projects_loader_is_a_global_batch_per_host():
    found = _rules(LOADER_TOLD_EVERY_DEVICE)
    assert (5, "global-batch-per-host") in found
    assert (6, "global-batch-per-host") not in found


ROWS_OF_A_SPLIT_BATCH = """import jax
from jax.experimental import mesh_utils
from jax.experimental.pjit import pjit

def epoch(state, ds, size, key, step):
    n = len(ds['x']) // size
    order = jax.random.permutation(key, len(ds['x']))[:n * size].reshape((n, size))
    for rows in order:
        x = ds['x'][rows]
        state = step(state, x)
    return state

def evaluate(state, ds, size, step):
    for start in range(0, len(ds['x']), size):
        x = ds['x'][start:start + size]
        step(state, x)

def run(args, state, ds, key):
    assert args.batch % args.gpus == 0
    grid = mesh_utils.create_device_mesh((args.gpus,))
    step = pjit(f, in_shardings=None, out_shardings=None)
    state = epoch(state, ds, args.batch, key, step)
    evaluate(state, ds, args.batch, step)
    evaluate(state, ds, args.chunk, step)
"""


def test_rows_read_by_a_batch_size_split_over_the_meshs_devices_are_a_global_batch_per_host():
    found = _rules(ROWS_OF_A_SPLIT_BATCH)
    assert {(9, "global-batch-per-host"), (15, "global-batch-per-host")} <= found
    assert not any(rule == "global-batch-per-host" and line not in (9, 15) for line, rule in found)


def test_rows_read_by_a_size_nothing_splits_over_devices_or_by_the_host_index_are_no_global_batch():
    unsplit = ROWS_OF_A_SPLIT_BATCH.replace("    assert args.batch % args.gpus == 0\n", "")
    assert not any(rule == "global-batch-per-host" for _, rule in _rules(unsplit))
    by_host = ROWS_OF_A_SPLIT_BATCH.replace("x = ds['x'][rows]", "x = ds['x'][rows][jax.process_index()::2]")
    assert (9, "global-batch-per-host") not in _rules(by_host)


ROW_RANGES = """import jax

step = jax.pmap(train_step, axis_name='batch')
bs = per_device * jax.device_count()
for i in range(steps):
    idx = [j for j in range(i * bs, (i + 1) * bs)]
    step(state, shard(collate([ds[j] for j in idx])))
others = [j for j in range(i * other, (i + 1) * other)]
"""


def test_a_range_of_a_whole_global_batchs_rows_is_said_there_and_where_the_size_is_made():
    found = _rules(ROW_RANGES)
    assert {(4, "global-batch-per-host"), (6, "global-batch-per-host")} <= found
    assert (8, "global-batch-per-host") not in found
    split = ROW_RANGES.replace("bs = per_device", "host = jax.process_count()\nbs = per_device")
    assert not any(rule == "global-batch-per-host" for _, rule in _rules(split))


STACKING_HELPERS = """import jax
import jax.numpy as jnp
from speech.loader import make_audio_ds

def split_in(x, n):
    return jax.tree_util.tree_map(lambda a: jnp.stack(jnp.split(a, n)), x)

def per_device(batch, count):
    def one(a):
        shape = (count, a.shape[0] // count) + a.shape[1:]
        return a.reshape(shape)
    return {k: one(v) for k, v in batch.items()}

def halves(x, n):
    return x[:n]

step = jax.pmap(train_step, axis_name='d')
n_local = jax.local_device_count()
every = jax.device_count()
it = iter(make_audio_ds(Options(batch_size=cfg.batch_size)))
for _ in range(10):
    batch = next(it)
    step(params, split_in(batch, n_local))
    step(params, per_device(batch, every))
    step(params, halves(batch, every))
"""


def test_a_helper_of_the_script_that_splits_or_reshapes_by_a_device_count_it_is_handed_is_a_local_batch():
    found = _rules(STACKING_HELPERS)
    assert {(23, "local-batch"), (24, "local-batch")} <= found
    assert (25, "local-batch") not in found  # a slice, no stack


def test_a_loaders_batch_size_stacked_over_every_device_is_the_global_batch_loaded_on_every_host():
    found = _rules(STACKING_HELPERS)
    assert (20, "global-batch-per-host") in found
    local_only = STACKING_HELPERS.replace("per_device(batch, every)", "per_device(batch, n_local)")
    assert (20, "global-batch-per-host") not in _rules(local_only)


SHARED_LOADER = """import jax
from jax import numpy as jnp
from reader.records import RecordsDataset

def train_step(state, batch):
    grads = jax.grad(loss)(state.params, batch)
    return state.apply_gradients(grads=jax.lax.pmean(grads, 'b'))

def eval_step(state, batch):
    return loss(state.params, batch)

p_train = jax.pmap(train_step, axis_name='b')
p_eval = jax.pmap(eval_step, axis_name='b')
train = RecordsDataset(train_files, batch_size=64)
train_ds = train.make_ds()
val_ds = RecordsDataset(val_files, batch_size=64).make_ds()
for batch in train_ds.as_numpy_iterator():
    state = p_train(state, batch)
for batch in val_ds:
    p_eval(state, batch)
"""


def test_the_projects_loader_feeding_a_training_step_with_no_host_index_loads_the_whole_batch_on_every_host():
    found = _rules(SHARED_LOADER)
    assert (15, "global-batch-per-host") in found  # the labelling guide's kind for it (benchmarks/heldout)
    # out of view, not the evaluation's: its loader may well split by host
    assert not any(rule == "global-batch-per-host" and line != 15 for line, rule in found)
    assert "unless it splits the data by host" in _said(SHARED_LOADER, 15, "global-batch-per-host")


def test_the_projects_loader_told_its_host_is_no_finding():
    told = SHARED_LOADER.replace("train_ds = train.make_ds()", "train_ds = train.make_ds(shard=jax.process_index())")
    assert not any(rule == "global-batch-per-host" for _, rule in _rules(told))


LEAVES_READ = """import jax
import jax.numpy as jnp

step = jax.pmap(train_step, axis_name='d')
losses = step(state, batch)
means = jax.tree_util.tree_map(lambda x: jnp.mean(x).item(), losses)
kept = jax.tree_util.tree_map(lambda x: jnp.mean(x), losses)
other = jax.tree_util.tree_map(lambda x: x.item(), config)
"""


def test_each_leaf_of_a_pmap_output_read_as_a_number_on_the_host_is_a_numpy_of_global():
    found = _rules(LEAVES_READ)
    assert (6, "numpy-of-global") in found
    assert (7, "numpy-of-global") not in found and (8, "numpy-of-global") not in found


@pytest.mark.parametrize("source, line", [
    ("import jax\nimport numpy as np\nfrom jax.sharding import Mesh\n"
     "mesh = Mesh(np.array(jax.local_devices()).reshape(2, -1), ('a', 'b'))\n", 4),
    ("import jax\nmesh = jax.make_mesh((jax.local_device_count(),), ('data',))\n", 2),
    ("import jax\nfrom jax.experimental import mesh_utils\n\ndef check(wanted):\n"
     "    assert len(jax.local_devices()) == wanted\n\ncheck(args.gpus)\n"
     "grid = mesh_utils.create_device_mesh((args.gpus, 1))\n", 8),
])
def test_a_mesh_of_this_hosts_devices_only_is_a_mesh_of_local_devices(source, line):
    assert (line, "mesh-of-local-devices") in _rules(source)


@pytest.mark.parametrize("source", [
    "import jax\nmesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), ('host', 'device'))\n",
    "import jax\nmesh = jax.make_mesh((jax.device_count(),), ('data',))\n",
    "import jax\nfrom jax.experimental import mesh_utils\ngrid = mesh_utils.create_device_mesh((args.gpus,))\n",
    "import jax\nfrom jax.sharding import Mesh\nmine = Mesh(jax.local_devices(), ('d',))\n"
    "print(jax.process_index())\n",  # a script that counts hosts builds a host's own mesh on purpose
])
def test_a_mesh_of_every_device_or_of_an_unknown_count_is_no_mesh_of_local_devices(source):
    assert not any(rule == "mesh-of-local-devices" for _, rule in _rules(source))
