"""The pjit era's flags and a project's mesh entered with `with`, and pmap's copies read in more spellings: `[:1]`,
a pmapped call indexed at once, entries taken in a comprehension."""
from tests.migrate_support import rule_set, said

PJIT_ERA = """\
import jax
from jax.experimental.pjit import pjit


class Trainer:
    def run(self, batch):
        with self.mesh():
            out = pjit(f, in_shardings=None, out_shardings=None)(batch)
        if not jax.config.jax_array:
            raise ValueError('needs jax.Array')
        jax.config.update('jax_array', True)
        with jax.spmd_mode('allow_all'):
            write(out)
        with jax.set_mesh(self.build_mesh()):
            out = jax.jit(f)(batch)
        with self.meshless_context():
            pass
"""


def test_a_projects_mesh_entered_with_with_is_with_mesh_and_jaxs_own_set_mesh_is_not():
    found = rule_set(PJIT_ERA)
    assert (7, "with-mesh") in found
    assert not {(14, "with-mesh"), (16, "with-mesh")} & found


def test_the_jax_array_flag_and_spmd_mode_are_pjit_era():
    found = rule_set(PJIT_ERA)
    assert {(9, "pjit"), (11, "pjit"), (12, "pjit")} <= found
    assert "AttributeError" in said(PJIT_ERA, 12, "pjit")
    assert not {(13, "pjit"), (15, "pjit")} & found


READS = """\
import jax

p_step = jax.pmap(step, axis_name='batch')
all_psum = jax.pmap(lambda x: jax.lax.psum(x, 'i'), 'i')
state, metrics = p_step(state, batch)
mets = {k: v[0] for k, v in metrics.items()}
n = all_psum(batch['mask'])[0].sum()
one = jax.tree_util.tree_map(lambda x: x[:1], state)
if jax.process_index() == 0:
    print([f'{k}={v.mean():.4f}' for k, v in metrics['coarse'].items()])
rows = {k: v[0] for k, v in config.items()}
two = jax.tree_util.tree_map(lambda x: x[:2], state)
"""


def test_device_zeros_copy_in_more_spellings_is_read_as_one():
    found = rule_set(READS)
    assert {(6, "jax-utils-replicate"), (7, "jax-utils-replicate"), (8, "jax-utils-replicate")} <= found
    assert not {(11, "jax-utils-replicate"), (12, "jax-utils-replicate")} & found


def test_entries_of_a_stack_reduced_on_process_zero_in_a_comprehension():
    assert (10, "process-zero-collective") in rule_set(READS)


DEVICE_AXES = """\
import jax
import jax.numpy as jnp

p_eval = jax.pmap(eval_step, axis_name='batch')


def evaluate(state, loader):
    count = 0
    for batch in loader:
        metrics = p_eval(state, batch)
        count += jnp.prod(batch['labels'].shape[:2])
        per_device = batch['labels'].shape[1]
        rows = batch['labels'].shape[0]
    return count
"""


def test_the_per_device_axes_read_off_a_batch_handed_to_pmap_are_local_batch():
    found = rule_set(DEVICE_AXES)
    assert {(11, "local-batch"), (12, "local-batch"), (13, "local-batch")} <= found  # axis 0: this host's devices
    unfed = DEVICE_AXES.replace("metrics = p_eval(state, batch)", "metrics = eval_step(state, batch)")
    assert not {(11, "local-batch"), (12, "local-batch"), (13, "local-batch")} & rule_set(unfed)
