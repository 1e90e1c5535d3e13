"""What a pmapped call hands back, followed on the host (helpers.migrate.host_read_rules): through the script's
functions that return it, lists it is appended to, arithmetic on it and methods pmap decorates; and its per-device
axis folded away."""
from tests.migrate_support import rule_set

THROUGH = """\
import jax
import numpy as np
from functools import partial

p_predict = jax.pmap(predict, axis_name='d')


def sample(params, batch):
    out = p_predict(params, batch)
    return out, batch


def sample_twice(params, batch):
    return sample(params, batch)


def report(params, batches):
    outs, _ = sample_twice(params, batches[0])
    host = jax.device_get(outs)
    scores = []
    for batch in batches:
        scores.append(p_predict(params, batch))
    scores = np.concatenate(scores)
    images = p_predict(params, batches[1])
    images = (images + 1.0) / 2.0
    pixels = np.clip(images * 255, 0, 255)
    return host, scores, pixels


class Sampler:
    @partial(jax.pmap, axis_name='d')
    def denoise(self, x):
        return x

    @partial(jax.pmap, axis_name='d')
    def update(self, x):
        return x


def draw(sampler, x, config):
    x = sampler.denoise(x)
    kept = np.asarray(x)
    config.update({'seen': 1})
    return kept, np.asarray(config)
"""


def test_what_a_function_of_the_script_returns_from_a_pmap_is_its_output():
    assert (19, "numpy-of-global") in rule_set(THROUGH)


def test_a_list_of_pmap_outputs_and_arithmetic_on_one_are_pmap_outputs():
    found = rule_set(THROUGH)
    assert {(23, "numpy-of-global"), (26, "numpy-of-global")} <= found, found


def test_a_method_pmap_decorates_hands_back_pmap_outputs_on_any_instance():
    found = rule_set(THROUGH)
    assert (42, "numpy-of-global") in found, found
    assert (44, "numpy-of-global") not in found  # `update` is also a dict's: not read as the pmapped method


WITHOUT = """\
import jax
import numpy as np

p_predict = jax.pmap(predict, axis_name='d')


def sample(params, batch):
    return batch


def report(params, batches):
    rows = sample(params, batches[0])
    scores = []
    for batch in batches:
        scores.append(batch)
    images = (batches[1] + 1.0) / 2.0
    return jax.device_get(rows), np.concatenate(scores), np.clip(images * 255, 0, 255)
"""


def test_host_values_that_never_held_a_pmap_output_are_not_said():
    assert not {line for line, rule in rule_set(WITHOUT) if rule == "numpy-of-global"}


FOLDED = """\
import jax
import numpy as np

p_sample = jax.pmap(sample_fn, axis_name='d')
images = p_sample(keys, state)
grid = images.reshape((-1, *images.shape[2:]))
flat = np.asarray(images.reshape(-1, 32, 32, 3))
kept = images.reshape((8, 4, 32, 32, 3))
"""


def test_a_pmap_outputs_device_axis_folded_away_is_a_local_batch_and_read_with_numpy_is_global():
    found = rule_set(FOLDED)
    assert (6, "local-batch") in found and (6, "numpy-of-global") not in found, found
    assert (7, "numpy-of-global") in found, found
    assert 8 not in {line for line, _ in found}  # no -1: the device axis kept


ROWS = """\
import jax


def update(params, batch):
    grads, (logits, labels) = jax.grad(loss_fn, has_aux=True)(params, batch)
    grads = jax.lax.pmean(grads, axis_name='i')
    loss = jax.lax.pmean(loss_fn(params, batch)[0], axis_name='i')
    params = apply(params, grads)
    return params, loss, logits, labels


p_update = jax.pmap(update, axis_name='i')
params, loss, logits, labels = p_update(params, batch)
first_logits = logits[0][0]
first_label = labels[0]
now = loss[0]
kept = params[0]
"""


def test_device_zeros_entry_of_an_output_no_collective_reduced_is_its_rows_not_a_copy():
    found = rule_set(ROWS)
    assert {(14, "local-batch"), (15, "local-batch")} <= found, found
    assert not {(14, "jax-utils-replicate"), (15, "jax-utils-replicate")} & found


def test_device_zeros_entry_of_a_reduced_output_or_the_state_stays_a_copy():
    found = rule_set(ROWS)
    assert {(16, "jax-utils-replicate"), (17, "jax-utils-replicate")} <= found, found
    assert not {(16, "local-batch"), (17, "local-batch")} & found


def test_a_per_example_name_the_step_reduced_is_a_copy():
    reduced = ROWS.replace("    return params, loss, logits, labels",
                           "    logits = jax.lax.all_gather(logits, 'i')\n    return params, loss, logits, labels")
    found = rule_set(reduced)
    assert (15, "jax-utils-replicate") in found and (15, "local-batch") not in found, found


NAMED_MAP = """\
import jax

p_step = jax.pmap(step, axis_name='d')
take_first = lambda x: x[0]


def fetch(tree):
    def first_leaf(x):
        return x[0]
    return jax.tree_util.tree_map(first_leaf, tree)


models, opt_states = p_step(models, batch)
model = jax.tree_util.tree_map(take_first, models)
ones = jax.tree_util.tree_map(lambda x: x + 1, models)
"""


def test_a_tree_map_of_a_named_function_taking_each_leafs_first_copy_is_an_unreplicate():
    found = rule_set(NAMED_MAP)
    assert {(4, "jax-utils-replicate"), (9, "jax-utils-replicate"), (14, "jax-utils-replicate")} <= found, found
    assert 15 not in {line for line, _ in found}


OWN_TREE_MAP = """\
import jax


def _tree_map(fn, *trees):
    if isinstance(trees[0], dict):
        return {k: _tree_map(fn, *(t[k] for t in trees)) for k in trees[0]}
    return fn(*trees)


def first_replica(tree):
    return _tree_map(lambda x: x[0], tree)


def untouched(tree):
    return _tree_map(lambda x: x + 1, tree)


p_step = jax.pmap(step, axis_name='d')
params, metrics = p_step(params, batch)
metrics = first_replica(metrics)
params = untouched(params)
"""


def test_a_tree_map_of_the_scripts_own_taking_each_leafs_first_copy_is_an_unreplicate():
    found = rule_set(OWN_TREE_MAP)
    assert {(11, "jax-utils-replicate"), (20, "jax-utils-replicate")} <= found, found
    assert not {line for line, _ in found} & {15, 21}, found


BATCH_ROWS = """\
import jax
from flax import jax_utils

p_step = jax.pmap(step, axis_name='d')
state = jax_utils.replicate(state)
batch = next(train_iter)
sample = jax_utils.unreplicate(batch)
first = jax.tree_util.tree_map(lambda x: x[0], next(train_iter))
state, metrics = p_step(state, batch)
kept = jax_utils.unreplicate(state)
"""


def test_device_zeros_entry_of_a_loaders_batch_is_its_rows_not_a_copy():
    found = rule_set(BATCH_ROWS)
    assert {(7, "local-batch"), (8, "local-batch")} <= found, found
    assert not {(7, "jax-utils-replicate"), (8, "jax-utils-replicate")} & found
    assert (10, "jax-utils-replicate") in found


MERGED_BY_HAND = """\
import jax
import numpy as np

p_eval = jax.pmap(evaluate, axis_name='i')
outputs = []
for batch in loader:
    outputs.append(p_eval(params, batch))
logits = np.concatenate(outputs)
logits = np.reshape(logits, (-1,) + logits.shape[2:])
flat = jax.tree.map(lambda x: x.reshape((x.shape[0] * x.shape[1], *x.shape[2:])), stacked)


def body(x):
    return x.reshape((-1,) + x.shape[2:])


p_body = jax.pmap(body)
"""


def test_host_code_merging_the_two_leading_axes_in_a_pmap_script_is_local_batch_not_code_pmap_runs():
    found = rule_set(MERGED_BY_HAND)
    assert {(9, "local-batch"), (10, "local-batch")} <= found, found
    assert (14, "local-batch") not in found  # inside the pmapped function: its own rows
    without_pmap = MERGED_BY_HAND.replace("jax.pmap(evaluate, axis_name='i')", "jax.jit(evaluate)").replace(
        "jax.pmap(body)", "jax.jit(body)")
    assert not {line for line, rule in rule_set(without_pmap) if rule == "local-batch"}


FORWARDED = """\
import jax


class Trainer:
    def __init__(self):
        self.p_step = jax.pmap(self.train_step, axis_name='b')

    def one_step(self, state, batch):
        new_state, loss = self.p_step(state, batch)
        return new_state, loss

    def epoch(self, state, batches):
        for batch in batches:
            state, loss = self.one_step(state, batch)
        return state.step[0]
"""


def test_a_method_that_hands_back_a_pmapped_calls_output_hands_back_pmaps_stacks():
    assert (15, "jax-utils-replicate") in rule_set(FORWARDED)
    made_from = FORWARDED.replace("return new_state, loss", "return unreplicate_all(new_state), loss.mean()")
    assert (15, "jax-utils-replicate") not in rule_set(made_from)


def test_a_fold_in_a_script_whose_pmapped_step_lives_in_its_project_is_local_batch():
    source = ("import flax\nfrom models import train_step\n\nstate = flax.jax_utils.replicate(state)\n"
              "for batch in loader:\n    state = train_step(state, batch)\n"
              "    shown = batch.reshape((-1, *batch.shape[2:]))\n")
    assert (7, "local-batch") in rule_set(source)
    no_pmap_era = source.replace("flax.jax_utils.replicate(state)", "init(state)")
    assert (7, "local-batch") not in rule_set(no_pmap_era)


KEYS_BACK = """\
import jax

p_step = jax.pmap(step, axis_name='b')
keys = jax.random.split(rng, jax.local_device_count())
state, keys = p_step(state, keys)
image = render(params, keys[0])
"""


def test_device_0s_entry_of_the_keys_a_pmapped_step_hands_back_is_a_per_device_key():
    found = rule_set(KEYS_BACK)
    assert (6, "per-device-keys") in found and (6, "jax-utils-replicate") not in found
    counted = KEYS_BACK.replace("keys = jax.random.split(rng, jax.local_device_count())",
                                "n_local = jax.local_device_count()\nkeys = jax.random.split(rng, n_local)")
    assert (7, "per-device-keys") in rule_set(counted)  # the count through a name that does not say "device"
    copies = rule_set(KEYS_BACK.replace("jax.random.split(rng, jax.local_device_count())", "stack_copies(rng)"))
    assert (6, "jax-utils-replicate") in copies and (6, "per-device-keys") not in copies


def test_numpys_reshape_function_folding_a_pmap_output_is_a_fold_like_the_method():
    source = ("import jax\nimport jax.numpy as jnp\np_sample = jax.pmap(sample, axis_name='b')\n"
              "img = p_sample(params, keys)\nimg = jnp.reshape(img, (-1, 32, 32, 3))\n")
    assert (5, "local-batch") in rule_set(source)
    assert (5, "local-batch") not in rule_set(source.replace("(-1, 32, 32, 3)", "(8, -1)"))
    assert (5, "local-batch") not in rule_set(source.replace("p_sample(params, keys)", "make_grid(params)"))
