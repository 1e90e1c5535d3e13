"""helpers.migrate on API-level patterns of pmap-era code that held-out set 8 showed: collectives over an axis name
the tool cannot resolve (a constructor's parameter that the pmap and its step share), that name handed by position
to a library's update, state stacked per local device by hand, and a pmap over every host's devices. Every snippet
here is written for the course."""
from __future__ import annotations

from migrate_support import rule_list as _rules
from migrate_support import said as _said

# ------------------------------------------------------------------ an axis name the tool cannot resolve

CLOSURE_AXIS = """\
import jax
import jax.numpy as jnp

class Trainer:
    def __init__(self, model, tx, stats_fns, axis):
        grad_fn = jax.grad(model.loss)

        def inner(params, opt_state, stats, rows):
            stats = stats_fns.refresh(stats, rows, axis)
            grads = grad_fn(params, rows)
            grads = jax.lax.pmean(grads, axis_name=axis)
            scale = jax.lax.pmean(jnp.mean(jnp.abs(rows)), axis)
            sums = jax.lax.psum(self.combine(grads), axis)
            updates, opt_state = tx.update(grads, opt_state)
            return params, opt_state, stats, scale, sums

        self.step = jax.pmap(inner, axis_name=axis)
"""


def test_a_pmean_of_gradients_over_an_unresolved_axis_is_the_trap():
    text = _said(CLOSURE_AXIS, 11, "pmap-collective")
    assert "N times too large" in text and "drop this pmean" in text and "otherwise rename" not in text


def test_a_collective_of_statistics_over_an_unresolved_axis_is_renamed():
    text = _said(CLOSURE_AXIS, 12, "pmap-collective")
    assert "name the mesh axes" in text and "N times too large" not in text


def test_a_collective_whose_value_the_tool_cannot_follow_gives_both_outcomes():
    assert "otherwise rename" in _said(CLOSURE_AXIS, 13, "pmap-collective")


def test_the_unresolved_axis_handed_by_position_to_a_library_is_renamed():
    text = _said(CLOSURE_AXIS, 9, "pmap-collective")
    assert "hands pmap's axis name" in text and "N times too large" not in text


def test_no_pmap_in_the_script_means_no_claim_on_an_unresolved_axis():
    ported = CLOSURE_AXIS.replace("jax.pmap(inner, axis_name=axis)", "jax.jit(jax.shard_map(inner, mesh=mesh))")
    assert not any(rule == "pmap-collective" for _, rule in _rules(ported))


def test_a_name_only_shared_with_an_unresolved_pmap_axis_is_not_handed_when_it_resolves():
    source = CLOSURE_AXIS.replace("stats_fns.refresh(stats, rows, axis)", "stats_fns.refresh(stats, rows, 'rows')")
    assert (9, "pmap-collective") not in _rules(source)


# ------------------------------------------------------------------ state stacked per local device by hand

HAND_STACKED = """\
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from toolkit.utils import get_from_first_device

class Learner:
    def __init__(self, init_fn, update_fn, key):
        self.devices = jax.local_devices()
        self.step_fn = jax.pmap(update_fn, axis_name='d')
        sharding = NamedSharding(Mesh(self.devices, ('d',)), P('d'))
        weights = init_fn(key)
        stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *[weights] * len(self.devices))
        count = jax.device_put(
            jnp.stack([jnp.zeros(())] * len(self.devices)),
            sharding)
        self.state = (jax.device_put(stacked, sharding), count)
        self.cached = get_from_first_device(self.state)
"""


def test_a_tree_map_stacking_copies_per_local_device_is_a_replicate():
    assert (12, "jax-utils-replicate") in _rules(HAND_STACKED)


def test_a_stack_of_copies_counted_by_a_devices_attribute_is_said_where_it_stacks():
    assert (14, "jax-utils-replicate") in _rules(HAND_STACKED)
    assert (13, "jax-utils-replicate") not in _rules(HAND_STACKED)


def test_a_library_helper_taking_the_first_devices_copy_is_an_unreplicate():
    assert "device 0's copy" in _said(HAND_STACKED, 17, "jax-utils-replicate")


def test_copies_over_every_device_or_of_a_list_not_repeated_are_not_a_local_replicate():
    source = HAND_STACKED.replace("self.devices = jax.local_devices()", "self.devices = pick(cfg)")
    assert not {12, 14} & {line for line, rule in _rules(source) if rule == "jax-utils-replicate"}
    listed = HAND_STACKED.replace("*[weights] * len(self.devices)", "*weights_per_member")
    assert (12, "jax-utils-replicate") not in _rules(listed)


# ------------------------------------------------------------------ [0] of a stack the script made

MADE_STACK = """\
import jax
import flax
from project import train_utils

def main(cfg, state, batches):
    step_fn = train_utils.make_step(cfg)
    state = flax.jax_utils.replicate(state)
    keys = jax.random.split(jax.random.PRNGKey(0), jax.local_device_count())
    for batch in batches:
        state, stats, keys = step_fn(keys, state, batch)
        table = state.params['params']
        offsets = table['scales'][0]
        render(state, keys[0])
        print(batch.images.shape[0])
    final = flax.jax_utils.unreplicate(state)
    return final.params['params']['scales'][0]
"""


def test_an_entry_0_of_a_field_of_a_replicated_state_carried_through_a_step_is_device_0s_copy():
    assert (12, "jax-utils-replicate") in _rules(MADE_STACK)


def test_key_0_of_keys_split_per_local_device_is_device_0s_key():
    assert (13, "jax-utils-replicate") in _rules(MADE_STACK)


def test_a_size_read_from_shape_is_no_copy_and_an_unreplicated_value_is_no_stack():
    found = {line for line, rule in _rules(MADE_STACK) if rule == "jax-utils-replicate"}
    assert 14 not in found and 16 not in found


def test_the_step_of_a_dataclass_replace_keeps_the_stack():
    source = MADE_STACK.replace("        table = state.params['params']\n",
                                "        state = state.replace(step=1)\n        table = state.params['params']\n")
    assert (13, "jax-utils-replicate") in _rules(source)


def test_a_script_that_never_replicates_nor_pmaps_has_no_made_stack():
    source = MADE_STACK.replace("flax.jax_utils.replicate(state)", "prepare(state)")
    source = source.replace("jax.local_device_count()", "4").replace("flax.jax_utils.unreplicate(state)", "state")
    assert not any(rule == "jax-utils-replicate" for _, rule in _rules(source))


def test_shape_0_of_a_pmap_output_is_a_size_not_device_0s_copy():
    source = ("import jax\nstep = jax.pmap(f, axis_name='d')\nout = step(x)\nn = out.rows.shape[0]\n"
              "first = out.rows[0]\n")
    found = {line for line, rule in _rules(source) if rule == "jax-utils-replicate"}
    assert 4 not in found and 5 in found
