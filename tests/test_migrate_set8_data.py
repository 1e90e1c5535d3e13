"""The migration assistant's data rules met on an eighth set of published scripts: a step's outputs read whole on
the host (device_get, pickled) and a batch stacked for pmap read back with device_get. The snippets are written for
these tests."""
from __future__ import annotations

from migrate_support import rule_set as _rules
from migrate_support import said as _said

PICKLED = """import pickle
import jax

@jax.pmap
def play(key):
    return jax.random.normal(key, (8,))

keys = jax.random.split(jax.random.key(0), jax.local_device_count())
games = play(keys)
with open('games.pkl', 'wb') as f:
    pickle.dump((games, keys), f)
rows = jax.device_get(games)
first = jax.device_get(games)[0]
"""


def test_a_pmap_output_pickled_or_fetched_whole_on_the_host_is_a_numpy_of_global():
    found = _rules(PICKLED)
    assert (11, "numpy-of-global") in found and (12, "numpy-of-global") in found
    assert "process_allgather" in _said(PICKLED, 12, "numpy-of-global")
    assert (13, "numpy-of-global") not in found  # device 0's copy: jax_rules says it


def test_host_values_pickled_or_fetched_are_no_global_read():
    plain = PICKLED.replace("(games, keys)", "(keys, 3)").replace("jax.device_get(games)", "jax.device_get(keys)")
    found = _rules(plain)
    assert not {f for f in found if f[1] == "numpy-of-global"}


STACKED_BATCH = """import jax
import numpy as np
from flax.training.common_utils import shard

def loader(data, size):
    for i in range(0, len(data), size):
        yield shard(data[i:i + size])

step = jax.pmap(lambda b: b * 2)
batches = loader(np.zeros((64, 3)), 16)
for _ in range(4):
    batch = next(batches)
    labels = batch["labels"]
    out = step(batch)
    seen = jax.device_get(labels.reshape(-1, 3))
"""


def test_device_get_of_a_batch_shard_stacked_for_pmap_is_a_numpy_of_global():
    assert (15, "numpy-of-global") in _rules(STACKED_BATCH)
    assert "make_array_from_process_local_data" in _said(STACKED_BATCH, 15, "numpy-of-global")


def test_device_get_of_a_loader_batch_never_stacked_is_no_global_read():
    plain = STACKED_BATCH.replace("yield shard(data[i:i + size])", "yield data[i:i + size]")
    assert (15, "numpy-of-global") in _rules(plain)  # handed to pmap, so a stack all the same
    unmapped = plain.replace("out = step(batch)", "out = step(np.ones((2, 3)))")
    assert (15, "numpy-of-global") not in _rules(unmapped)



PRIVATE = """import jax
from jax.experimental import maps
from jax.experimental import pjit

_Semantics = maps._PositionalSemantics
_resources = pjit._prepare_axis_resources
spec = pjit.PartitionSpec('data')
size = jax.numpy._something
"""


def test_a_private_name_of_an_old_experimental_module_is_a_removed_internal_not_xmap():
    found = _rules(PRIVATE)
    assert (5, "removed-internals") in found and (5, "xmap") not in found
    assert (6, "removed-internals") in found
    assert "ModuleNotFoundError" in _said(PRIVATE, 5, "removed-internals")
    assert "ModuleNotFoundError" not in _said(PRIVATE, 6, "removed-internals")
    assert not {f for f in found if f[0] in (7, 8) and f[1] == "removed-internals"}  # public, or no old module's


def test_a_public_name_of_the_same_modules_is_no_removed_internal():
    public = PRIVATE.replace("maps._PositionalSemantics", "maps.xmap").replace("pjit._prepare_axis_resources",
                                                                              "pjit.pjit")
    assert not {f for f in _rules(public) if f[1] == "removed-internals"}


HOST_LOCAL_SAVE = """import jax
from flax.jax_utils import replicate
from orbax.checkpoint.utils import fully_replicated_host_local_array_to_global_array

state = replicate({'w': 1.0})
step = jax.pmap(lambda s: s)
to_save = jax.tree.map(fully_replicated_host_local_array_to_global_array, state)
one = fully_replicated_host_local_array_to_global_array(state['w'])
"""


def test_orbax_host_local_to_global_of_pmap_state_is_said_as_the_old_checkpoint_path():
    found = _rules(HOST_LOCAL_SAVE)
    assert (7, "flax-checkpoints") in found and (8, "flax-checkpoints") in found
    assert (3, "flax-checkpoints") not in found  # the import: each use is said
    assert "already is global" in _said(HOST_LOCAL_SAVE, 7, "flax-checkpoints")


def test_the_same_helper_in_a_script_with_no_pmap_is_left_alone():
    ported = HOST_LOCAL_SAVE.replace("from flax.jax_utils import replicate\n", "").replace(
        "replicate({'w': 1.0})", "{'w': 1.0}").replace("step = jax.pmap(lambda s: s)\n", "")
    assert not {f for f in _rules(ported) if f[1] == "flax-checkpoints"}


PJIT_STEP = """import jax
from jax.experimental import pjit

def mixup_step(state, images, labels):
    images = images.reshape((jax.device_count(), -1) + images.shape[1:])
    labels = labels.reshape((jax.local_device_count(), -1) + labels.shape[1:])
    return state, images, labels

step = pjit.pjit(mixup_step, in_shardings=None, out_shardings=None)
grid = jax.numpy.zeros(8).reshape((jax.device_count(), -1))
"""


def test_a_reshape_to_every_devices_slices_in_a_pjit_era_step_is_a_local_batch():
    found = _rules(PJIT_STEP)
    assert (5, "local-batch") in found
    assert "one device's block" in _said(PJIT_STEP, 5, "local-batch")
    assert (10, "local-batch") not in found  # at module level: no step's batch


def test_the_same_reshape_with_no_pjit_or_in_a_pmap_script_is_left_to_the_other_rules():
    jitted = PJIT_STEP.replace("from jax.experimental import pjit\n", "").replace(
        "pjit.pjit(mixup_step, in_shardings=None, out_shardings=None)", "jax.jit(mixup_step)")
    assert (4, "local-batch") not in _rules(jitted)  # a jit step over global arrays: the global reshape is right


MERGED = """import jax

@jax.pmap
def play(key):
    return {'obs': jax.random.normal(key, (4, 2, 3))}

keys = jax.random.split(jax.random.key(0), jax.local_device_count())
games = jax.device_get(play(keys))
rows = jax.tree_util.tree_map(lambda x: x.reshape((-1, *x.shape[2:])), games)
kept = jax.tree_util.tree_map(lambda x: x.reshape((-1, 3)), {'obs': keys})
"""


def test_pmaps_device_axis_folded_into_rows_in_a_tree_map_is_a_local_batch():
    found = _rules(MERGED)
    assert (9, "local-batch") in found
    assert "no device axis" in _said(MERGED, 9, "local-batch")
    assert (10, "local-batch") not in found  # no pmap output


def test_a_tree_map_reshape_of_host_values_is_no_local_batch():
    plain = MERGED.replace("games = jax.device_get(play(keys))", "games = {'obs': jax.numpy.zeros((8, 4, 3))}")
    assert (9, "local-batch") not in _rules(plain)


JITTED_BESIDE_PMAP = """import jax
import optax
from flax import nnx

@nnx.jit
def fit(model, opt, x, y):
    def loss_of(model, x, y):
        return ((model(x) - y) ** 2).mean()
    loss, grads = nnx.value_and_grad(loss_of)(model, x, y)
    opt.update(grads)
    return loss

@nnx.jit
def score(model, x):
    return model(x).mean()

rollout = jax.pmap(lambda k: jax.random.normal(k, (4,)))
for x, y in batches:
    loss = fit(model, opt, x, y)
    s = score(model, x)
"""


def test_a_step_jitted_beside_a_pmap_that_applies_unreduced_gradients_is_said_where_it_is_fed():
    found = _rules(JITTED_BESIDE_PMAP)
    assert (19, "unreduced-gradients") in found
    assert "make_array_from_process_local_data" in _said(JITTED_BESIDE_PMAP, 19, "unreduced-gradients")
    assert (20, "unreduced-gradients") not in found  # no gradient applied


def test_a_jitted_step_that_reduces_or_a_script_with_no_pmap_is_left_alone():
    reduced = JITTED_BESIDE_PMAP.replace("opt.update(grads)", "opt.update(jax.lax.pmean(grads, 'd'))")
    assert (19, "unreduced-gradients") not in _rules(reduced)
    no_pmap = JITTED_BESIDE_PMAP.replace("rollout = jax.pmap(lambda k: jax.random.normal(k, (4,)))",
                                         "rollout = jax.jit(lambda k: jax.random.normal(k, (4,)))")
    assert (19, "unreduced-gradients") not in _rules(no_pmap)


MASKED = """import jax

@jax.pmap
def play(key):
    return {'length': jax.random.randint(key, (4,), 0, 9), 'terminated': jax.random.bernoulli(key, 0.5, (4,)),
            'order': jax.random.permutation(key, 4)}

def report(out):
    finished = out['length'][out['terminated']]
    long = out['length'][out['length'] > 3]
    picked = out['length'][out['order']]
    return finished, long, picked

keys = jax.random.split(jax.random.key(0), jax.local_device_count())
report(play(keys))
"""


def test_rows_of_a_pmap_output_picked_by_a_mask_on_the_host_are_a_numpy_of_global():
    found = _rules(MASKED)
    assert (9, "numpy-of-global") in found and (10, "numpy-of-global") in found
    assert "jnp.where" in _said(MASKED, 9, "numpy-of-global")
    assert (11, "numpy-of-global") not in found  # integer positions: a gather, which runs on a global array


def test_a_mask_of_host_values_is_no_global_read():
    plain = MASKED.replace("report(play(keys))", "report({'length': keys, 'terminated': keys, 'order': keys})")
    assert not {f for f in _rules(plain) if f[1] == "numpy-of-global"}
