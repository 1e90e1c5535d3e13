"""pmap's device axis followed as data (helpers/migrate/stacks.py) and every host read of it
(stack_read_rules.py): each source of a stack and each reader, on code that has it and code that does not."""
from tests.migrate_support import first_said, rule_set, said

SAMPLER = """\
import jax
import jax.numpy as jnp
import numpy as np

p_denoise = jax.pmap(denoise, axis_name='d', in_axes=(None, 0, 0))


def sample(params, start, steps):
    x = start
    for i in range(steps):
        t = jnp.full((x.shape[0], x.shape[1]), steps - i)
        x = p_denoise(params, x, t)
    picked = x[:, :4]
    flat = x.flatten()
    both = np.concatenate([x, start], axis=1)
    return flat
"""


def test_the_shape_of_an_argument_pmap_maps_is_a_read_of_its_device_axis():
    found = rule_set(SAMPLER)
    assert (11, "local-batch") in found
    assert "axis 0 is this host's devices" in first_said(SAMPLER, 11, "local-batch")
    unmapped = SAMPLER.replace("in_axes=(None, 0, 0)", "in_axes=(None, None, 0)")
    assert (11, "local-batch") not in rule_set(unmapped)  # x is handed whole: no stack of x to read


def test_a_cut_behind_the_device_axis_a_fold_and_a_join_along_axis_1_are_local_batch():
    found = rule_set(SAMPLER)
    assert {(13, "local-batch"), (14, "local-batch"), (15, "local-batch")} <= found
    assert "axis 1 is each device's rows" in said(SAMPLER, 13, "local-batch")
    jitted = SAMPLER.replace("jax.pmap(denoise, axis_name='d', in_axes=(None, 0, 0))", "jax.jit(denoise)")
    assert not {(11, "local-batch"), (13, "local-batch"), (14, "local-batch"), (15, "local-batch")} & rule_set(jitted)


def test_reads_that_keep_the_device_axis_or_take_one_device_are_not_cuts():
    kept = SAMPLER.replace("x[:, :4]", "x[:, :]").replace("axis=1", "axis=0").replace("x.flatten()", "x.sum()")
    assert not {(13, "local-batch"), (14, "local-batch"), (15, "local-batch")} & rule_set(kept)


BUILT = """\
import jax
import jax.numpy as jnp
from flax.training.common_utils import shard


def prepare(batch):
    return shard(batch)


def run(state, rows, step):
    n = jax.local_device_count()
    xs = rows.reshape(n, -1, rows.shape[-1])
    first = xs.shape[1]
    batch = prepare(rows)
    per_device = batch['image'].shape[1]
    noise = jnp.zeros(3).repeat(jax.device_count())
    log(noise.shape[0])
    kept = xs.reshape(xs.shape[0], -1)
    return first, per_device
"""


def test_stacks_built_by_a_reshape_a_shard_a_repeat_and_a_function_returning_one_are_followed():
    found = rule_set(BUILT)
    assert {(13, "local-batch"), (15, "local-batch")} <= found
    assert (17, "local-batch") not in found  # logged, nothing computed from it
    assert (18, "local-batch") not in found  # its own axis kept in place: still right after the port
    unbuilt = BUILT.replace("rows.reshape(n, -1, rows.shape[-1])", "rows.reshape(4, -1, rows.shape[-1])") \
        .replace("return shard(batch)", "return batch")
    assert not {(13, "local-batch"), (15, "local-batch")} & rule_set(unbuilt)


HANDED = """\
import jax
import numpy as np

p_eval = jax.pmap(eval_step, axis_name='batch')


def summarise(outputs):
    return outputs.reshape(-1, outputs.shape[-1]).mean()


def evaluate(state, loader):
    for batch in loader:
        logits = p_eval(state, batch)
        labels = np.asarray(batch['label'])
        count = labels.shape[0] * labels.shape[1]
        summarise(labels)
    return count
"""


def test_a_stack_is_followed_through_items_numpy_copies_and_a_function_it_is_handed_to():
    found = rule_set(HANDED)
    assert (15, "local-batch") in found
    assert (8, "local-batch") in found  # the fold in the function `labels` is handed to
    apart = HANDED.replace("summarise(labels)", "summarise(np.zeros((4, 3)))").replace("p_eval(state, batch)",
                                                                                        "p_eval(state, other)")
    assert not {(8, "local-batch"), (15, "local-batch")} & rule_set(apart)


TRACED = """\
import jax


@jax.pmap
def step(x):
    return x.reshape(-1) * x.shape[0]


def run(xs):
    out = step(xs)
    return out
"""


def test_shapes_read_inside_the_mapped_function_are_its_block_not_the_stack():
    assert not {f for f in rule_set(TRACED) if f[1] == "local-batch"}


OBJAX = """\
import objax

parallel = objax.Parallel(evaluate, model.vars())


def run(batch):
    correct = parallel(batch['images'])
    return correct / batch['images'].shape[0]
"""


def test_objax_parallel_splits_the_host_rows_itself_so_its_inputs_are_no_stacks():
    assert (8, "local-batch") not in rule_set(OBJAX)
    assert (8, "local-batch") in rule_set(OBJAX.replace("objax.Parallel(evaluate, model.vars())",
                                                        "jax.pmap(evaluate)").replace("import objax", "import jax"))


REARRANGED = """\
import functools
import einops
import jax

n_devices = jax.local_device_count()
p_step = jax.pmap(step, axis_name='d')
x = einops.rearrange(rows, "(device batch) ... -> device batch ...", device=n_devices)
split = functools.partial(einops.rearrange, pattern="(d b) n -> d b n", d=n_devices)
state = p_step(state, split(tokens))
"""


def test_an_einops_pattern_that_splits_rows_over_the_devices_is_pmaps_stack():
    found = rule_set(REARRANGED)
    assert {(7, "local-batch"), (8, "local-batch"), (9, "local-batch")} <= found, found
    assert "leading axis of devices" in first_said(REARRANGED, 7, "local-batch")
    by_rows = REARRANGED.replace("device=n_devices", "device=4").replace("d=n_devices", "b=n_devices")
    assert not {line for line, rule in rule_set(by_rows) if rule == "local-batch"} & {7, 8, 9}
    no_pmap = REARRANGED.replace("jax.pmap(step, axis_name='d')", "jax.jit(step)")
    assert not {line for line, rule in rule_set(no_pmap) if rule == "local-batch"} & {7, 8, 9}
