"""helpers.migrate on API-level patterns of pmap-era and pjit-era code that held-out set 4 showed: Mesh imported from
jax.experimental.maps, device 0's copy read by hand (a script's own unreplicate helper, addressable_shards[0],
np.asarray(out)[0]), copies stacked by hand, pmap's axis handed on under another keyword, the outputs of functions
pmapped out of view read as numpy, and libraries' own pmap helpers. Every snippet here is written for the course."""
from __future__ import annotations

from migrate_support import rule_list as _rules, first_said as _said


# ------------------------------------------------------------------ the old mesh's import

def test_mesh_imported_from_maps_is_the_mesh_not_xmap():
    source = "from jax.experimental.maps import Mesh\nmesh = Mesh(devices, ('dp', 'mp'))\n"
    assert _rules(source) == [(1, "experimental-sharding-names")]


def test_xmap_imported_beside_the_mesh_is_still_xmap():
    found = _rules("from jax.experimental.maps import Mesh, xmap\n")
    assert (1, "xmap") in found and (1, "experimental-sharding-names") in found


# ------------------------------------------------------------------ device 0's copy, and copies stacked, by hand

OWN_UNREPLICATE = """\
import jax
import jax.numpy as jnp
import numpy as np

first = lambda tree: jax.tree_util.tree_map(
    lambda leaf: leaf.addressable_shards[0].data.squeeze(0), tree)


def host_copy(tree):
    return jax.tree_util.tree_map(lambda leaf: leaf[0], tree)


def stacked(value, sharding):
    devices = jax.local_devices()[:2]
    if isinstance(value, jax.Array):
        return jax.device_put(jnp.stack([value] * len(devices)), sharding)
    return jax.device_put(np.stack(len(devices) * [value]), sharding)


devices = jax.local_devices()
step = jax.pmap(update, axis_name='d')
state = step(state, batch)
count = int(first(state.count))
weights = host_copy(
    state.weights)
loss = float(np.asarray(state.loss)[0])
row = np.stack([value] * 3)
"""


def test_a_scripts_own_unreplicate_helper_is_said_in_its_body_and_at_each_call():
    found = _rules(OWN_UNREPLICATE)
    assert {(6, "jax-utils-replicate"), (10, "jax-utils-replicate"), (23, "jax-utils-replicate"),
            (24, "jax-utils-replicate")} <= set(found), found  # the call's line, where a call spans two
    assert "device 0's copy" in _said(OWN_UNREPLICATE, 6, "jax-utils-replicate")
    assert "addressable_shards[0]" in _said(OWN_UNREPLICATE, 6, "jax-utils-replicate")


def test_copies_stacked_one_a_device_by_hand_are_pmaps_replicate():
    found = _rules(OWN_UNREPLICATE)
    assert {(16, "jax-utils-replicate"), (17, "jax-utils-replicate")} <= set(found), found
    assert "P()" in _said(OWN_UNREPLICATE, 16, "jax-utils-replicate")
    assert 27 not in {line for line, _ in found}  # three copies, not one a device


def test_numpy_of_a_pmap_output_indexed_at_zero_is_device_zeros_copy():
    assert (26, "jax-utils-replicate") in _rules(OWN_UNREPLICATE)


SAVE_DEVICE_ZERO = """\
import jax
from flax.training import checkpoints

step = jax.pmap(update, axis_name='d')


def save(state, path):
    if jax.process_index() == 0:
        host_state = jax.device_get(jax.tree_util.tree_map(lambda x: x[0], state))
        checkpoints.save_checkpoint(path, host_state, 0)
        everything = jax.device_get(state)
"""


def test_device_zeros_copy_read_on_process_zero_is_the_copy_not_a_collective():
    found = _rules(SAVE_DEVICE_ZERO)
    assert (9, "jax-utils-replicate") in found and (9, "process-zero-collective") not in found, found
    assert "process_allgather" in _said(SAVE_DEVICE_ZERO, 9, "jax-utils-replicate")
    assert (11, "process-zero-collective") in found  # the whole state, split over the hosts after the port


# ------------------------------------------------------------------ pmap's axis handed on under another keyword

HANDED_AXIS = """\
import jax
from mylib import grads, stats

AXIS = 'dev'


def build(loss_fn, optimizer):
    update = grads.make_update(
        loss_fn, optimizer, pmap_axis_name=AXIS)
    norm = stats.update_moments(moments, rows,
                                pmap_axis_name=AXIS)
    other = stats.update_moments(moments, rows, group_axis_name='model')
    return jax.pmap(step, axis_name=AXIS)
"""


def test_pmaps_axis_handed_under_a_keyword_named_for_an_axis_is_a_pmap_collective_on_its_line():
    found = _rules(HANDED_AXIS)
    assert {(9, "pmap-collective"), (11, "pmap-collective")} <= set(found), found
    assert 12 not in {line for line, _ in found}  # an axis that is not pmap's
    assert "pmap_axis_name=('host', 'device')" in _said(HANDED_AXIS, 11, "pmap-collective")


def test_pmaps_axis_handed_to_a_function_named_for_gradients_gets_both_outcomes():
    said = _said(HANDED_AXIS.replace("make_update", "make_gradient_update"), 9, "pmap-collective")
    assert "named for gradients" in said and "if this is a gradient" in said


def test_pmaps_axis_handed_with_a_loss_and_an_optimizer_gets_both_outcomes():
    said = _said(HANDED_AXIS, 9, "pmap-collective")  # make_update(loss_fn, optimizer, ...) trains: it may reduce them
    assert "handed a loss" in said and "if this is a gradient" in said
    assert "if this is a gradient" not in _said(HANDED_AXIS, 11, "pmap-collective")  # moments: statistics, a rename
    step = HANDED_AXIS.replace("grads.make_update(\n        loss_fn, optimizer,", "grads.training_step(\n        rows,")
    assert "if this is a gradient" in _said(step, 9, "pmap-collective")


# ------------------------------------------------------------------ libraries' own pmap helpers

def test_brax_pmap_helpers_are_pmaps_with_their_replacements():
    source = "from brax.training import pmap\n\npmap.assert_is_replicated(state)\npmap.synchronize_hosts()\n"
    assert _rules(source) == [(3, "pmap"), (4, "pmap")]
    assert "assert_equal" in _said(source, 3, "pmap")
    assert "sync_global_devices" in _said(source, 4, "pmap")


def test_a_save_under_a_process_index_held_in_a_name_is_on_process_zero_only():
    source = ("import jax\nfrom mylib import checkpoint\n\nprocess_id = jax.process_index()\nif process_id == 0:\n"
              "    checkpoint.save(path, step, params)\n")
    assert (6, "process-zero-save") in _rules(source)


def test_a_projects_unreplicate_variant_named_so_is_device_zeros_copy():
    source = ("import jax\nfrom mylib.utils import unreplicate_leading_dims\n\nstep = jax.pmap(f, axis_name='d')\n"
              "state = step(state)\nsaved = unreplicate_leading_dims(state)\n")
    assert (6, "jax-utils-replicate") in _rules(source)
    assert (6, "jax-utils-replicate") not in _rules(source.replace("jax.pmap(f, axis_name='d')", "jax.jit(f)"))


def test_numpy_of_an_nnx_pmapped_steps_output_at_zero_is_device_zeros_copy():
    source = ("import numpy as np\nfrom flax import nnx\n\n\ndef fit(model, rows):\n"
              "    @nnx.pmap(axis_name='d', in_axes=(None, 0))\n    def step(model, rows):\n        return loss(model, rows)\n\n"
              "    out = step(model, rows)\n    return float(np.asarray(out)[0])\n")
    assert (11, "jax-utils-replicate") in _rules(source)


# ------------------------------------------------------------------ functions the project pmaps out of view

OUT_OF_VIEW = """\
import jax
import jax.numpy as jnp
import numpy as np
from flax import jax_utils
from mylib import sampling, scoring

train = jax.pmap(step, axis_name='batch')
pstate = jax_utils.replicate(state)
sampler = sampling.make_sampler(config, model)
scorer = scoring.make_scorer(model)
plain = scoring.make_plain(model)
for i in range(steps):
    pstate, loss = train(pstate, batch)
    rng, *keys = jax.random.split(rng, jax.local_device_count() + 1)
    keys = jnp.asarray(keys)
    images, count = sampler(keys, pstate)
    grid = images.reshape((-1, *images.shape[2:]))
    images = np.clip(images * 255, 0, 255)
    images = images.reshape((-1, 32, 32, 3))
    bits = scorer(keys, pstate, batch)[0]
    bits = bits.reshape(-1)
    words = plain(batch)
"""


def test_a_function_the_project_pmaps_out_of_view_is_a_pmap_where_it_is_made():
    found = _rules(OUT_OF_VIEW)
    assert {(9, "pmap"), (10, "pmap")} <= set(found), found
    assert 11 not in {line for line, _ in found}  # called with the host's batch only: nothing says it pmaps
    assert "sampler" in _said(OUT_OF_VIEW, 9, "pmap") and "out of view" in _said(OUT_OF_VIEW, 9, "pmap")


def test_its_outputs_folded_to_rows_are_local_batches_and_read_as_numpy_are_global():
    found = _rules(OUT_OF_VIEW)
    assert {(17, "local-batch"), (18, "numpy-of-global"), (21, "local-batch")} <= set(found), found
    assert (19, "numpy-of-global") not in found  # numpy's array by then, reshaped on the host


def test_numpy_of_a_pmap_output_at_zero_is_said_once_as_device_zeros_copy():
    source = ("import jax\nimport numpy as np\n\nstep = jax.pmap(f, axis_name='d')\nout = step(rows)\n"
              "loss = float(np.asarray(out)[0])\n")
    assert [rule for line, rule in _rules(source) if line == 6] == ["jax-utils-replicate"]
