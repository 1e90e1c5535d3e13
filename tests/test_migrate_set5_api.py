"""helpers.migrate on API-level patterns of pmap-era and pjit-era code that held-out set 5 showed: the old lowercase
`mesh` context manager of jax.experimental.maps, pjit handed on as a function value, pmaps over every host's devices
picked by hand (not one per host), device copies read at another index, device_get of a model-parallel pjit state on
process 0, and pmap outputs reshaped to this host's rows. Every snippet here is written for the course."""
from __future__ import annotations

from helpers.migrate import findings
from migrate_support import rule_list as _rules, first_said as _said


# ------------------------------------------------------------------ the old lowercase mesh context manager

OLD_MESH_FUNCTION = """\
import numpy as np
import jax
from jax.experimental.maps import mesh

grid = np.array(jax.devices()).reshape(2, -1)
with mesh(grid, ('rows', 'cols')):
    run()
"""


def test_the_old_mesh_function_is_the_old_mesh_not_xmap():
    assert _rules(OLD_MESH_FUNCTION) == [(3, "experimental-sharding-names"), (6, "with-mesh")]


def test_the_old_mesh_function_says_what_builds_and_enters_the_mesh():
    assert "jax.make_mesh" in _said(OLD_MESH_FUNCTION, 3, "experimental-sharding-names")
    said = _said(OLD_MESH_FUNCTION, 6, "with-mesh")
    assert "jax.experimental.maps.mesh" in said and "jax.set_mesh(mesh)" in said


def test_the_old_mesh_function_through_its_module_agrees():
    source = "from jax.experimental import maps\nwith maps.mesh(grid, ('a', 'b')):\n    run()\n"
    assert (2, "with-mesh") in _rules(source) and (2, "xmap") not in _rules(source)


# ------------------------------------------------------------------ pjit handed on as a function value

def test_pjit_handed_to_a_helper_is_a_pjit_finding():
    source = ("from jax.experimental import pjit\nfrom jax.sharding import PartitionSpec as P\n"
              "def compile_step(fn, spec):\n    return measure('compile', pjit.pjit, fn, (spec,), P('batch'))\n")
    assert _rules(source) == [(4, "pjit")]
    assert "positional" in _said(source, 4, "pjit")


def test_pjit_handed_with_its_in_spec_names_the_spec_axes():
    source = ("from jax.experimental.pjit import pjit\nfrom jax.experimental.pjit import PartitionSpec\n"
              "step = wrap(pjit, train, PartitionSpec('batch'), None)\n")
    assert (3, "pjit") in _rules(source)
    assert "'batch'" in _said(source, 3, "pjit")


def test_pjit_as_the_last_argument_is_not_a_call_of_it():
    source = "from jax.experimental.pjit import pjit\nregistry.add('jit', pjit)\n"
    assert (2, "pjit") not in _rules(source)


# ------------------------------------------------------------------ pmap over hand-picked devices

EVERY_HOSTS_LEARNERS = """\
import jax

def learner(update, ids):
    per_host = len(jax.local_devices())
    everywhere = [jax.devices()[i + p * per_host] for p in range(jax.process_count()) for i in ids]
    rank = jax.process_index()
    return jax.pmap(update, axis_name='learners', devices=everywhere)
"""


def test_a_pmap_over_every_hosts_learner_devices_is_a_plain_pmap():
    found = _rules(EVERY_HOSTS_LEARNERS)
    assert (7, "pmap") in found and (7, "pmap-over-hosts") not in found
    assert "spans every device of every host" in _said(EVERY_HOSTS_LEARNERS, 7, "pmap")


def test_a_pmap_over_devices_filtered_by_id_is_a_plain_pmap():
    source = ("import jax\nchosen = [d for d in jax.devices() if d.id in wanted]\n"
              "print(jax.process_index())\nf = jax.pmap(g, 'i', devices=chosen)\n")
    assert (4, "pmap") in _rules(source) and (4, "pmap-over-hosts") not in _rules(source)


def test_a_pmap_over_the_first_device_of_each_process_is_over_hosts():
    source = ("import jax\ndef total(x):\n"
              "    firsts = [jax.local_devices(process_index=p)[0] for p in range(jax.process_count())]\n"
              "    return jax.pmap(lambda v: jax.lax.psum(v, 'p'), 'p', devices=firsts)(x)\n")
    assert _rules(source) == [(4, "pmap-over-hosts")]


def test_a_name_read_before_its_binding_is_followed_to_the_binding():
    source = ("import jax\ndef total(x):\n    leads = [ds[0] for ds in grouped.values()]\n"
              "    grouped = {d.process_index: [d] for d in jax.devices()}\n"
              "    return jax.pmap(lambda v: jax.lax.psum(v, 'h'), 'h', devices=leads)(x)\n")
    assert _rules(source) == [(5, "pmap-over-hosts")]


# ------------------------------------------------------------------ a device's copy at another index

REPLICATED_STATE = """\
import jax
import flax
state = flax.jax_utils.replicate(state)
step = jax.pmap(train, axis_name='b')
for batch in data:
    state, loss = step(state, batch)
    log(state.opt_state[1].hyperparams['lr'][-1].item())
    log(int(state.count[2]))
    log(state.opt_state[1], loss[-1].item())
"""


def test_the_last_devices_copy_of_a_replicated_state_is_an_unreplicate():
    found = _rules(REPLICATED_STATE)
    assert (7, "jax-utils-replicate") in found
    assert "the last device's copy" in _said(REPLICATED_STATE, 7, "jax-utils-replicate")


def test_a_devices_copy_read_as_a_number_is_an_unreplicate():
    assert (8, "jax-utils-replicate") in _rules(REPLICATED_STATE)


def test_an_item_of_the_states_tuples_is_no_copy_but_an_outputs_last_entry_is_read_like_its_first():
    said = [f.does for f in findings(REPLICATED_STATE, "t.py") if f.line == 9]
    assert len(said) == 1 and said[0].startswith("loss[-1] takes one device's entry"), said  # as loss[0] (blind set 56)


def test_only_the_devices_index_is_said_once_per_read():
    assert [f.rule for f in findings(REPLICATED_STATE, "t.py") if f.line == 7] == ["jax-utils-replicate"]


NNX_PMAPPED = """\
from flax import nnx

def train_step(model, optimizer, batch):
    pass

p_step = nnx.pmap(train_step, in_axes=(None, None, 0))
for batch in data:
    p_step(model, optimizer, batch)
    assert int(nnx.split(optimizer)[-1].step[0]) > 0
    show(nnx.split(unmapped)[1].step[0])
"""


def test_device_zero_of_an_nnx_split_of_a_pmapped_module_is_an_unreplicate():
    found = _rules(NNX_PMAPPED)
    assert (9, "jax-utils-replicate") in found and (10, "jax-utils-replicate") not in found


# ------------------------------------------------------------------ a pmap output reshaped to this host's rows

HANDED_SAMPLER = """\
import jax
import jax.numpy as jnp
from flax import jax_utils
from flax.training import common_utils

def draw(p_draw, state, rng, cfg):
    state = jax.block_until_ready(jax_utils.replicate(state))
    per_host = cfg.total // jax.process_count()
    keys = common_utils.shard_prng_key(rng)
    out = p_draw(cfg, params=state.params, rng=keys).block_until_ready()
    rows = jnp.reshape(out, [per_host, cfg.length])
    table = jnp.reshape(cfg.table, [per_host, cfg.length])
    return rows, table
"""


def test_a_handed_pmap_output_reshaped_to_this_hosts_count_is_numpy_of_global():
    assert (11, "numpy-of-global") in _rules(HANDED_SAMPLER)


def test_a_reshape_of_what_no_pmap_gave_is_none():
    assert (12, "numpy-of-global") not in _rules(HANDED_SAMPLER)


def test_a_reshape_to_the_local_device_count_of_a_pmap_output():
    source = ("import jax\nimport jax.numpy as jnp\nstep = jax.pmap(f)\nn = jax.local_device_count() * 8\n"
              "out = step(x)\nflat = jnp.reshape(out, (n, -1))\n")
    assert (6, "numpy-of-global") in _rules(source)
