"""Code on process 0 only, however the script says it (helpers.migrate.host_zero): an if on a name holding the test,
an early return of the other hosts; and pmap's stacks reduced there."""
from tests.migrate_support import rule_set, said

GUARDS = """\
import jax
import jax.numpy as jnp
from flax.training import checkpoints

p_step = jax.pmap(step, axis_name='batch')
is_master = jax.process_index() == 0


class Trainer:
    def __init__(self):
        self.is_chief = jax.process_index() == 0

    def run(self, state, batch):
        state, metrics = p_step(state, batch)
        if is_master:
            summary = jax.device_get(metrics)
        if self.is_chief:
            checkpoints.save_checkpoint('ckpt', state, 0)
        return state


def finish(state):
    if jax.process_index() != 0:
        return
    stats = jax.tree_util.tree_map(lambda x: jnp.mean(x, axis=0), state.batch_stats)
    checkpoints.save_checkpoint('ckpt', state, 1)


def everyone(state):
    stats = jax.tree_util.tree_map(lambda x: jnp.mean(x, axis=0), state.batch_stats)
    if jax.process_index() != 0:
        print('not host 0')
    checkpoints.save_checkpoint('ckpt', state, 2)
"""


def test_an_if_on_a_name_or_attribute_holding_the_test_is_process_zero():
    found = rule_set(GUARDS)
    assert (16, "process-zero-collective") in found
    assert (18, "process-zero-save") in found


def test_what_follows_the_other_hosts_early_return_runs_on_process_zero_only():
    found = rule_set(GUARDS)
    assert (25, "process-zero-collective") in found
    assert "reduces pmap's per-device stack on process 0 only" in said(GUARDS, 25, "process-zero-collective")
    assert (26, "process-zero-save") in found


def test_code_every_host_runs_is_not_process_zero():
    found = rule_set(GUARDS)
    assert not {(30, "process-zero-collective"), (33, "process-zero-save")} & found


REDUCED = """\
import jax
from flax import jax_utils

p_step = jax.pmap(step, axis_name='batch')
state, metrics = p_step(state, batch)
if jax.process_index() == 0:
    mean_loss = metrics['loss'].mean()
    scalars = jax.tree_util.tree_map(lambda x: x.mean(), metrics)
    first = jax_utils.unreplicate(state)
    print(float(metrics['loss'][0]))
"""


def test_a_stack_reduced_on_process_zero_is_a_collective_and_device_zeros_copy_is_not():
    found = rule_set(REDUCED)
    assert {(8, "process-zero-collective")} <= found
    assert (9, "jax-utils-replicate") in found and (9, "process-zero-collective") not in found
    assert (10, "jax-utils-replicate") in found and (10, "process-zero-collective") not in found


SAVE_HELPER = """\
import jax
import flax

p_step = jax.pmap(step, axis_name='batch')


def save_checkpoint(state, milestone=False):
    step = int(jax.device_get(state.step[0]))
    with open(f'ckpt_{step}', 'wb') as f:
        f.write(flax.serialization.to_bytes(state))


def log(state):
    write(state)


state, metrics = p_step(state, batch)
if jax.process_index() == 0:
    save_checkpoint(state, milestone=True)
    log(state)
"""


def test_a_save_helper_reading_device_zeros_copy_anywhere_in_its_body_is_said_at_its_call():
    found = rule_set(SAVE_HELPER)
    assert (19, "jax-utils-replicate") in found and (20, "jax-utils-replicate") not in found
    assert (8, "jax-utils-replicate") in found and (8, "numpy-of-global") not in found  # [0], not the whole stack


AND_TEST = """\
import jax

p_sample = jax.pmap(sample, axis_name='d')
is_main = jax.process_index() == 0


def draw(state, keys):
    return p_sample(state, keys)


def report(state, keys):
    return draw(state, keys)


def log(state, keys, step):
    if step % 100 == 0 and is_main:
        report(state, keys)
        print(step)
    if step % 100 == 0:
        report(state, keys)
"""


def test_a_test_that_ands_a_name_holding_process_zero_guards_process_zero_code():
    found = rule_set(AND_TEST)
    assert (17, "process-zero-collective") in found, found
    assert not {18, 20} & {line for line, _ in found}


def test_a_function_that_runs_a_pmapped_step_calls_deep_is_a_compiled_step_on_process_zero():
    assert "compiled" in said(AND_TEST, 17, "process-zero-collective")


FOLLOWED = """\
import jax
import pickle

p_step = jax.pmap(step, axis_name='d')


def setup_hosts():
    index = jax.process_index()
    return jax.process_count(), index


COUNT, INDEX = setup_hosts()
is_main = INDEX == 0
args.rank = jax.process_index()
args.width = 4
if is_main:
    checkpoints.save_checkpoint('ckpt', state, 0)
if args.rank == 0:
    checkpoints.save_checkpoint('ckpt', state, 1)
if args.width == 0:
    checkpoints.save_checkpoint('ckpt', state, 2)
if COUNT == 0:
    checkpoints.save_checkpoint('ckpt', state, 3)
"""


def test_the_index_followed_through_a_tuple_a_function_returns_and_an_attribute_assigned():
    found = rule_set(FOLLOWED)
    assert {(17, "process-zero-save"), (19, "process-zero-save")} <= found, found
    assert not {(21, "process-zero-save"), (23, "process-zero-save")} & found
