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
