"""The migration assistant's batch rules met on a tenth set of published scripts: a stacking helper handed the count
through another function's parameter, a dataset batched twice (per device, then by every device), a batch reshaped
to (hosts, local devices) of which each host keeps its row, and device 0's copy read in a tree map. The snippets are
written for these tests."""
from __future__ import annotations

from migrate_support import rule_set as _rules

HELPER_THROUGH_A_PARAMETER = """import jax

def stack(rows, count):
    return jax.tree.map(lambda x: x.reshape(count, -1, *x.shape[1:]), rows)

def run_eval(step, state, loader, count):
    for rows in loader:
        step(state, stack(rows, count))

def main(step, state, loader):
    listed = jax.local_devices()
    count = len(listed)
    p = jax.pmap(step, axis_name='d')
    run_eval(p, state, loader, count)
    for rows in loader:
        p(state, stack(rows, count=count))
"""


def test_a_stacking_helper_handed_a_count_through_a_parameter_or_a_keyword_is_a_local_batch():
    found = _rules(HELPER_THROUGH_A_PARAMETER)
    assert {(4, "local-batch"), (8, "local-batch"), (16, "local-batch")} <= found  # the helper's own line too
    fixed = HELPER_THROUGH_A_PARAMETER.replace("count = len(listed)", "count = 4")
    assert not {line for line, rule in _rules(fixed) if rule == "local-batch"}


BATCHED_TWICE = """import jax

def make(ds, total):
    each, rest = divmod(total, len(jax.devices()))
    ds = (ds
          .batch(each, drop_remainder=True)
          .batch(len(jax.devices()), drop_remainder=True))
    return ds

p = jax.pmap(lambda x: x, axis_name='b')
"""


def test_a_dataset_batched_per_device_then_by_every_device_is_stacked_and_global_on_every_host():
    found = _rules(BATCHED_TWICE)
    assert {(4, "global-batch-per-host"), (6, "local-batch"), (7, "local-batch")} <= found
    no_pmap = BATCHED_TWICE.replace("jax.pmap(lambda x: x, axis_name='b')", "jax.jit(lambda x: x)")
    assert not _rules(no_pmap)
    by_eight = BATCHED_TWICE.replace(".batch(len(jax.devices()), drop_remainder=True)", ".batch(8)")
    assert not {line for line, rule in _rules(by_eight) if rule in ("local-batch", "global-batch-per-host")}


EVERY_HOSTS_ROWS = """import jax
import numpy as np

def train(step, state, source):
    p = jax.pmap(step, axis_name='b')
    for _ in range(10):
        rows = source.next()
        rows = np.asarray(rows)
        rows = np.reshape(
            rows,
            (jax.process_count(), jax.local_device_count(), -1))
        state = p(state, rows[jax.process_index()])
"""


def test_rows_reshaped_to_every_host_and_picked_by_process_index_are_a_global_batch_on_each_host():
    found = _rules(EVERY_HOSTS_ROWS)
    assert {(7, "global-batch-per-host"), (9, "local-batch"), (12, "global-batch-per-host")} <= found
    assert (11, "local-batch") not in found  # said where the reshape starts
    own = EVERY_HOSTS_ROWS.replace("jax.process_count(), ", "").replace("rows[jax.process_index()]", "rows")
    assert not {line for line, rule in _rules(own) if rule == "global-batch-per-host"}


FIRST_COPY_READ = """import jax

p = jax.pmap(lambda x: jax.lax.pmean(x, 'b'), axis_name='b')

def log(x):
    out = p(x)
    return jax.tree_util.tree_map(lambda v: float(v[0]), out)
"""


def test_device_zeros_copy_read_in_a_tree_map_is_not_a_global_read():
    found = _rules(FIRST_COPY_READ)
    assert (7, "jax-utils-replicate") in found and (7, "numpy-of-global") not in found
    whole = FIRST_COPY_READ.replace("float(v[0])", "float(v.mean())")
    assert (7, "numpy-of-global") in _rules(whole)


GROUPED_PER_DEVICE = """import jax
import jax.numpy as jnp

def grouped(items):
    n = jax.local_device_count()
    held = []
    for i, item in enumerate(items):
        held.append(item)
        if i % n == n - 1:
            yield jax.tree.map(lambda *x: jnp.stack(x), *held)
            held = []

p = jax.pmap(lambda x: x, axis_name='b')
"""


def test_items_collected_one_per_local_device_and_stacked_are_a_local_batch():
    assert (10, "local-batch") in _rules(GROUPED_PER_DEVICE)
    by_four = GROUPED_PER_DEVICE.replace("n = jax.local_device_count()", "n = 4")
    assert (10, "local-batch") not in _rules(by_four)


REPLICATED_SAVED = """import pickle
import jax

step = jax.pmap(lambda p, x: (p, x.sum()), axis_name='b')

def train(params, batches, path):
    params = jax.device_put_replicated(params, jax.local_devices())
    for rows in batches:
        params, loss = step(params, rows)
    with open(path, 'wb') as f:
        pickle.dump(params, f)
        pickle.dump(loss, f)
"""


def test_saving_a_replicated_state_a_step_hands_back_is_a_stack_of_copies_not_a_global_read():
    found = _rules(REPLICATED_SAVED)
    assert (11, "jax-utils-replicate") in found and (11, "numpy-of-global") not in found
    assert (12, "numpy-of-global") in found  # a per-device output, never replicated


HANDED_ROWS_PUT = """import jax
from jax.sharding import NamedSharding, PartitionSpec

class Agent:
    def __init__(self, mesh):
        self.split = NamedSharding(mesh, PartitionSpec('i'))

    def feed(self, rows):
        return jax.device_put(rows, self.split)

    def warm(self, make):
        dummy = make()
        return jax.device_put(dummy, self.split)
"""


def test_rows_a_function_is_handed_put_on_a_split_sharding_are_a_local_batch():
    found = _rules(HANDED_ROWS_PUT)
    assert (9, "local-batch") in found
    assert (13, "local-batch") not in found  # a value the function makes itself, the same on every host
    assembled = HANDED_ROWS_PUT + "\nx = jax.make_array_from_process_local_data(None, None)\n"
    assert (9, "local-batch") not in _rules(assembled)
    mirrored = HANDED_ROWS_PUT.replace("PartitionSpec('i')", "PartitionSpec()")
    assert (9, "local-batch") not in _rules(mirrored)
