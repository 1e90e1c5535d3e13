"""helpers.migrate on per-device bodies pmapped out of view, which held-out set 9 showed (experiments whose update
functions a framework pmaps): their collectives, their key draws, and a loss divided by the device count whose
gradients are psum'd (a pmean in disguise); and none of it where a shard_map port or a vmap runs the same code.
Every snippet here is written for the course."""
from __future__ import annotations

from migrate_support import rule_set as _rules
from migrate_support import said as _said

# ------------------------------------------------------------------ a body a framework pmaps

FRAMEWORK_STEP = """\
import jax
import optax
from ourlib import utils

class Experiment:
    def __init__(self, net, opt):
        self.net, self.opt = net, opt

    def _cost(self, params, rows, key):
        noise_key, drop_key = jax.random.split(key)
        out = self.net.apply(params, rows, rngs={'dropout': drop_key})
        return out.mean() / jax.device_count(), out.std()

    def _train_step(self, params, opt_state, rows, key):
        grads, spread = jax.grad(self._cost, has_aux=True)(params, rows, key)
        grads = jax.lax.psum(grads, axis_name='r')
        updates, opt_state = self.opt.update(grads, opt_state)
        spread = jax.lax.pmean(spread, axis_name='r')
        return optax.apply_updates(params, updates), opt_state, spread

    def report(self, spread):
        return utils.get_first(spread)
"""


def test_a_psum_of_gradients_in_a_body_pmapped_out_of_view_is_the_trap_and_says_so():
    text = _said(FRAMEWORK_STEP, 16, "pmap-collective")
    assert "N times too large" in text and "drop this psum" in text and "otherwise rename" not in text
    assert "a pmap this file does not show" in text


def test_a_metric_pmean_in_a_body_pmapped_out_of_view_is_renamed():
    text = _said(FRAMEWORK_STEP, 18, "pmap-collective")
    assert "name the mesh axes" in text and "N times too large" not in text and "does not show" in text


def test_a_key_drawn_in_a_body_pmapped_out_of_view_is_each_devices_key():
    text = _said(FRAMEWORK_STEP, 10, "pmap-body-keys")
    assert "_cost (which _train_step calls)" in text and "does not show" in text and "fold_in" in text


def test_a_loss_over_the_device_count_with_a_psum_of_its_gradients_is_a_pmean_in_disguise():
    text = _said(FRAMEWORK_STEP, 12, "loss-over-device-count")
    assert "psum" in text and "_train_step" in text and "drop the division" in text


def test_a_gradient_the_tool_cannot_see_in_such_a_body_gets_both_outcomes():
    source = FRAMEWORK_STEP.replace("grads = jax.lax.psum(grads, axis_name='r')",
                                    "grads = jax.lax.psum(utils.clip(grads), axis_name='r')")
    text = _said(source, 16, "pmap-collective")
    assert "if this is a gradient" in text and "otherwise rename" in text


# ------------------------------------------------------------------ the same code where no pmap runs it

SHARD_MAP_PORT = FRAMEWORK_STEP.replace("    def report(self, spread):\n        return utils.get_first(spread)\n", """\
    def build(self, mesh):
        return jax.shard_map(self._train_step, mesh=mesh, in_specs=P(), out_specs=P())
""")

VMAPPED = FRAMEWORK_STEP.replace("    def report(self, spread):\n        return utils.get_first(spread)\n", """\
    def report(self, params, opt_state, rows, keys):
        step = jax.vmap(self._train_step, in_axes=(None, None, 0, 0), axis_name='r')
        return utils.get_first(step(params, opt_state, rows, keys))
""")

NO_PMAP = FRAMEWORK_STEP.replace("        return utils.get_first(spread)\n", "        return spread\n")

_SAID = {"pmap-collective", "pmap-body-keys", "loss-over-device-count"}


def test_a_shard_map_port_of_the_same_body_gets_none_of_these():
    assert not {rule for _, rule in _rules(SHARD_MAP_PORT)} & _SAID, _rules(SHARD_MAP_PORT)


def test_a_body_a_vmap_with_that_axis_name_maps_gets_none_of_these():
    assert not {rule for _, rule in _rules(VMAPPED)} & _SAID, _rules(VMAPPED)
    other = VMAPPED.replace("0, 0), axis_name='r')", "0, 0), axis_name='other')")  # a vmap of another axis
    assert {(16, "pmap-collective"), (10, "pmap-body-keys")} <= _rules(other)


def test_a_script_with_no_sign_of_pmap_gets_none_of_these():
    assert not {rule for _, rule in _rules(NO_PMAP)} & _SAID, _rules(NO_PMAP)


# ------------------------------------------------------------------ pmaps of the file the tool now follows

METHOD_PMAPPED = """\
import jax

class Trainer:
    def __init__(self, net):
        self.net = net
        self._step = jax.pmap(self._update, axis_name='d')

    def _objective(self, params, rows, rng):
        logits = self.net.apply(params, rows, is_training=True, rng=rng)
        jitter = jax.random.normal(rng, logits.shape)
        return (logits + jitter).mean()

    def _update(self, params, rows, rng):
        grads = jax.grad(self._objective)(params, rows, rng)
        return jax.lax.pmean(grads, 'd')
"""


def test_a_method_pmapped_by_its_class_reaches_the_methods_it_calls():
    assert (9, "pmap-body-keys") in _rules(METHOD_PMAPPED)  # the apply draws first, from the key drawn at 10
    assert "which pmap runs" in _said(METHOD_PMAPPED, 9, "pmap-body-keys")


def test_an_apply_in_evaluation_draws_nothing():
    source = METHOD_PMAPPED.replace("is_training=True", "is_training=False")
    assert (10, "pmap-body-keys") in _rules(source) and (9, "pmap-body-keys") not in _rules(source)


PARTIAL_NAMED = """\
import functools
import jax

def train_step(key, state, rows, scale):
    key, noise_key = jax.random.split(key)
    return state, rows * scale

step = functools.partial(train_step, scale=2.0)
p_step = jax.pmap(step, axis_name='b')
"""


def test_a_partial_bound_to_a_name_then_pmapped_is_followed_to_its_function():
    assert (5, "pmap-body-keys") in _rules(PARTIAL_NAMED)
    assert (5, "pmap-body-keys") not in _rules(PARTIAL_NAMED.replace("jax.pmap(step, axis_name='b')", "jax.jit(step)"))


def test_a_device_count_bound_to_a_name_is_read_through_it():
    source = FRAMEWORK_STEP.replace("return out.mean() / jax.device_count(), out.std()",
                                    "n_dev = jax.device_count()\n        return out.mean() / n_dev, out.std()")
    assert (13, "loss-over-device-count") in _rules(source)


def test_a_tree_psum_of_gradients_in_a_body_pmapped_out_of_view_is_the_trap():
    source = FRAMEWORK_STEP.replace("grads = jax.lax.psum(grads, axis_name='r')",
                                    "grads = utils.tree_psum(grads, axis_name='r')")
    text = _said(source, 16, "pmap-collective")
    assert "N times too large" in text and "otherwise rename" not in text
    assert (12, "loss-over-device-count") in _rules(source)


def test_a_vmap_naming_its_axis_by_position_maps_the_body_too():
    source = VMAPPED.replace("in_axes=(None, None, 0, 0), axis_name='r')", "(None, None, 0, 0), 0, 'r')")
    assert not {rule for _, rule in _rules(source)} & _SAID, _rules(source)


def test_a_body_over_an_axis_a_pmap_of_the_file_names_is_not_said_to_be_out_of_view():
    source = FRAMEWORK_STEP + "\nshow = jax.pmap(lambda v: jax.lax.psum(v, 'r'), axis_name='r')\n"
    assert "does not show" not in _said(source, 16, "pmap-collective")
    assert "which pmap runs" in _said(source, 10, "pmap-body-keys")
