"""helpers.migrate on old keywords and flags that held-out sets 10 and 11 showed: the old shard_map's check_rep,
pjit's axis-resources keywords handed to jax.jit after the jit/pjit merge (said on the keyword's line), and the
merge's config flag; and none of it on the current API. Every snippet here is written for the course."""
from __future__ import annotations

from migrate_support import rule_set as _rules
from migrate_support import said as _said

OLD_SHARD_MAP = """\
import functools
import jax
from jax.sharding import PartitionSpec as P

def build(step, mesh):
    from jax.experimental.shard_map import shard_map
    fast = shard_map(
        step, mesh, (P(), P('d')), P('d'),
        check_rep=False)
    other = functools.partial(shard_map, mesh=mesh, in_specs=P('d'), out_specs=P('d'), check_rep=False)
    return fast, other
"""

NEW_SHARD_MAP = """\
import jax
from jax.sharding import PartitionSpec as P

def build(step, mesh):
    return jax.shard_map(step, mesh=mesh, in_specs=(P(), P('d')), out_specs=P('d'), check_vma=False)
"""


def test_check_rep_of_the_old_shard_map_is_said_on_its_own_line():
    found = _rules(OLD_SHARD_MAP)
    assert (9, "experimental-shard-map") in found and (10, "experimental-shard-map") in found
    assert "check_vma=False" in _said(OLD_SHARD_MAP, 9, "experimental-shard-map")


def test_check_vma_of_jax_shard_map_is_no_finding():
    assert not any(rule == "experimental-shard-map" for _, rule in _rules(NEW_SHARD_MAP))


MERGED_JIT = """\
import functools
import jax

class Runner:
    def __init__(self, state_spec, batch_spec):
        print(jax.config.jax_jit_pjit_api_merge)

        @functools.partial(
            jax.jit,
            out_axis_resources=state_spec,
        )
        def create(params):
            return params

        self.create = create
        self.step = jax.jit(
            self._step, out_axis_resources=(state_spec, None)
        )

    def _step(self, state, batch):
        return state, batch.sum()
"""

CURRENT_JIT = """\
import jax

class Runner:
    def __init__(self, state_sharding):
        self.step = jax.jit(
            self._step, out_shardings=(state_sharding, None)
        )

    def _step(self, state, batch):
        return state, batch.sum()
"""


def test_pjit_keywords_handed_to_jax_jit_are_said_where_the_keyword_is():
    found = _rules(MERGED_JIT)
    assert {(6, "pjit"), (10, "pjit"), (17, "pjit")} <= found
    assert (8, "pjit") not in found and (16, "pjit") not in found
    assert "jax_jit_pjit_api_merge" in _said(MERGED_JIT, 6, "pjit")


def test_jax_jit_with_out_shardings_is_no_pjit_finding():
    assert not any(rule == "pjit" for _, rule in _rules(CURRENT_JIT))


JIT_STEP = """\
import jax
from jax.experimental.pjit import pjit

def train_step(state, batch):
    def loss_of(params):
        return ((state.apply_fn(params, batch['x']) - batch['y']) ** 2).mean()
    loss, grads = jax.value_and_grad(loss_of)(state.params)
    grads = jax.lax.pmean(grads, axis_name='data')
    return state.apply_gradients(grads=grads), loss

step = pjit(train_step, in_shardings=None, out_shardings=None)
"""

JIT_STEP_NO_COLLECTIVE = """\
import jax

def train_step(state, batch):
    def loss_of(params):
        return ((state.apply_fn(params, batch['x']) - batch['y']) ** 2).mean()
    loss, grads = jax.value_and_grad(loss_of)(state.params)
    return state.apply_gradients(grads=grads), loss

step = jax.jit(train_step)
"""

SHARD_MAP_STEP = """\
import jax
from jax.sharding import PartitionSpec as P

def train_step(params, batch):
    loss, grads = jax.value_and_grad(lambda p: (p * batch).mean())(params)
    loss = jax.lax.pmean(loss, ('host', 'device'))
    return params - grads, loss

step = jax.jit(jax.shard_map(train_step, mesh=None, in_specs=(P(), P(('host', 'device'))), out_specs=P()))
"""


def test_a_pmean_of_gradients_in_a_pjit_step_without_pmap_is_the_trap():
    text = _said(JIT_STEP, 8, "pmap-collective")
    assert "N times too large" in text and "drop this pmean" in text and "rename" not in text


def test_a_jit_step_without_a_collective_or_a_shard_map_port_gets_no_collective_finding():
    assert not any(rule == "pmap-collective" for _, rule in _rules(JIT_STEP_NO_COLLECTIVE))
    assert not any(rule == "pmap-collective" for _, rule in _rules(SHARD_MAP_STEP))


OWN_REPLICATE = """\
import functools
import jax
import jax.numpy as jnp

def _copies_everywhere(tree):
    return jax.tree.map(lambda a: jax.device_put_replicated(a, jax.local_devices()), tree)

def _cost(apply, params, rows):
    total = apply(params, rows).sum()
    return total / jax.device_count()

def build(apply):
    def update(params, rows):
        cost = functools.partial(_cost, apply)
        grads = jax.grad(cost)(params, rows)
        grads = jax.lax.psum(grads, axis_name='d')
        return jax.tree.map(lambda p, g: p - g, params, grads)
    return jax.pmap(update, axis_name='d')

def restore(saved):
    params = _copies_everywhere(saved)
    step = _copies_everywhere(jnp.zeros((), jnp.int32))
    return params, step
"""


def test_calls_of_the_scripts_own_replicate_helper_are_each_said():
    found = _rules(OWN_REPLICATE)
    assert (21, "jax-utils-replicate") in found and (22, "jax-utils-replicate") in found


def test_a_loss_over_the_device_count_through_a_partial_held_in_a_name_is_said():
    assert (10, "loss-over-device-count") in _rules(OWN_REPLICATE)
    assert not any(rule == "loss-over-device-count" for _, rule in _rules(JIT_STEP_NO_COLLECTIVE))


SAVE_OPTION = """\
import jax

def run(cfg, saver, state):
    lead = jax.process_index() == 0
    writes = cfg.save_on_all_hosts or lead
    logs = cfg.log_everywhere or lead
    if writes:
        saver.save_checkpoint(state)
    if logs:
        print(state)
"""


def test_a_save_on_process_zero_unless_an_option_is_said_on_the_process_zero_half():
    found = _rules(SAVE_OPTION)
    assert (5, "process-zero-save") in found
    assert (6, "process-zero-save") not in found  # guards a print, no save
    assert "writes = True" in _said(SAVE_OPTION, 5, "process-zero-save")


def test_a_save_on_every_host_is_no_process_zero_finding():
    source = SAVE_OPTION.replace("cfg.save_on_all_hosts or lead", "True")
    assert not any(rule == "process-zero-save" for _, rule in _rules(source))


CLU_CHECKPOINT = """\
from clu import checkpoint

def resume(workdir, state):
    ckpt = checkpoint.MultihostCheckpoint(workdir, max_to_keep=3)
    return ckpt.restore_or_initialize(state)
"""


def test_clus_multihost_checkpoint_is_a_flax_checkpoints_finding():
    assert "one checkpoint per host" in _said(CLU_CHECKPOINT, 4, "flax-checkpoints")


def test_an_orbax_manager_is_no_flax_checkpoints_finding():
    source = ("import orbax.checkpoint as ocp\n\ndef resume(workdir, state):\n"
              "    return ocp.CheckpointManager(workdir)\n")
    assert not any(rule == "flax-checkpoints" for _, rule in _rules(source))


NNX_PMAP_ONE_LINE = """\
from flax import nnx

@nnx.pmap(in_axes=(None, 0), out_axes=None, axis_name='d')
def step(model, rows):
    return model(rows).mean()
"""

NNX_PMAP_OWN_LINE = """\
from flax import nnx

@nnx.pmap(
    in_axes=(None, 0),
    axis_name='d')
def step(model, rows):
    return model(rows).mean()
"""


def test_nnx_pmaps_in_axes_on_its_own_line_is_said_there_and_on_the_pmaps_line_with_the_pmap():
    assert (4, "nnx-state-axes") in _rules(NNX_PMAP_OWN_LINE)
    found = _rules(NNX_PMAP_ONE_LINE)
    assert (3, "nnx-state-axes") not in found
    assert "P() where it said None" in _said(NNX_PMAP_ONE_LINE, 3, "nnx-pmap")


REFUSAL = """\
import jax

def main():
    if jax.local_device_count() < jax.device_count():
        raise SystemExit("one host only")
    if jax.process_count() > 1:
        raise RuntimeError("one process only")
    if jax.process_count() > 1:
        print("several hosts")
"""


def test_a_refusal_to_run_on_several_hosts_is_host_count():
    found = _rules(REFUSAL)
    assert (4, "host-count") in found and (6, "host-count") in found
    assert (8, "host-count") not in found  # no refusal: a print
