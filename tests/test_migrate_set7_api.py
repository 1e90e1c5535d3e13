"""helpers.migrate on API-level patterns of pmap-era code that held-out set 7 showed: collectives over an axis name a
function takes as a parameter, a script's own function named unreplicate, an item of a tuple parameter inside the
code a pmapped step runs, a metrics collection that gathers over pmap's axis by default, nnx.pmap's in_axes, keys
drawn in a function the step hands to lax.scan, each key a step draws from, and negatives a contrastive loss picks
from its own rows. Every snippet here is written for the course."""
from __future__ import annotations

from migrate_support import rule_list as _rules
from migrate_support import said as _said

# ------------------------------------------------------------------ an axis name handed as a parameter

AXIS_PARAMETER = """\
import jax
import jax.numpy as jnp

def pair_loss(weights, rows, axis='d'):
    left = encode(weights[0], rows[0])
    right = encode(weights[1], rows[1])
    right = jax.lax.all_gather(right, axis)
    return jnp.mean(left @ right.reshape(-1, left.shape[-1]).T)

def step(weights, moments, rows, axis='d'):
    both = jax.value_and_grad(pair_loss)(weights, rows, axis)
    loss, grads = jax.lax.pmean(both, axis)
    count = jax.lax.psum(1, axis)
    return loss, apply(weights, grads, moments), count

p_step = jax.pmap(step, axis_name='d')
"""


def test_a_collective_over_an_axis_parameter_whose_default_is_pmaps_axis_is_renamed():
    assert (7, "pmap-collective") in _rules(AXIS_PARAMETER)
    assert "name the mesh axes" in _said(AXIS_PARAMETER, 7, "pmap-collective")
    assert "N times too large" not in _said(AXIS_PARAMETER, 13, "pmap-collective")


def test_a_pmean_of_what_value_and_grad_gave_back_over_an_axis_parameter_is_the_trap():
    text = _said(AXIS_PARAMETER, 12, "pmap-collective")
    assert "N times too large" in text and "keep only what is not a gradient" in text


def test_an_axis_parameter_whose_default_is_another_axis_is_no_pmap_axis():
    source = AXIS_PARAMETER.replace("axis='d'", "axis='model'")
    assert not any(rule == "pmap-collective" for _, rule in _rules(source))


def test_an_axis_parameter_without_a_default_is_read_from_what_its_callers_hand_it():
    source = AXIS_PARAMETER.replace("def pair_loss(weights, rows, axis='d')", "def pair_loss(weights, rows, axis)")
    assert (7, "pmap-collective") in _rules(source)
    alone = source.replace("jax.value_and_grad(pair_loss)(weights, rows, axis)", "jax.value_and_grad(other)(weights)")
    assert (7, "pmap-collective") not in _rules(alone)


# ------------------------------------------------------------------ a script's own unreplicate

OWN_UNREPLICATE = """\
import jax

def unreplicate(tree):
    return jax.tree_util.tree_map(lambda leaf: leaf[0], tree)

def fit(state, batches, p_step):
    for rows in batches:
        state, loss = p_step(state, rows)
        print(unreplicate(loss))
    return unreplicate(state)

p_step = jax.pmap(lambda s, r: (s, r.sum()), axis_name='d')
"""


def test_calls_of_a_scripts_own_unreplicate_take_device_zeros_copy():
    rules = _rules(OWN_UNREPLICATE)
    assert {(9, "jax-utils-replicate"), (10, "jax-utils-replicate")} <= set(rules)


def test_a_scripts_own_unreplicate_that_does_not_index_is_no_copy():
    source = OWN_UNREPLICATE.replace("leaf[0]", "leaf")
    assert not any(rule == "jax-utils-replicate" for _, rule in _rules(source))


# ------------------------------------------------------------------ an item of a tuple inside the pmapped code

TUPLE_PARAMETER = """\
import jax

def two_towers(params, rows):
    return encode(params[0], rows) + encode(params[1], rows)

def step(params, rows):
    return jax.grad(two_towers)(params, rows)

p_step = jax.pmap(step, axis_name='d')

def train(params, data):
    for rows in data:
        params = p_step(params, rows)
    return params
"""


def test_an_item_of_a_tuple_parameter_in_a_function_the_step_runs_is_no_device_copy():
    assert not any(rule == "jax-utils-replicate" for _, rule in _rules(TUPLE_PARAMETER))


def test_the_same_index_outside_the_pmapped_code_is_device_zeros_copy():
    source = TUPLE_PARAMETER + "\ndef show(params):\n    print(params[0])\n"
    assert (17, "jax-utils-replicate") in _rules(source)


# ------------------------------------------------------------------ metrics that gather over 'batch' by default

METRICS_BY_DEFAULT = """\
import jax
from clu import metrics

def step(state, rows):
    loss, grads = jax.value_and_grad(loss_of)(state.params, rows)
    state = state.apply_gradients(grads=jax.lax.pmean(grads, 'batch'))
    update = state.metrics.gather_from_model_output(loss=loss)
    return state.replace(metrics=state.metrics.merge(update))

def summary(state, loss):
    return state.metrics.gather_from_model_output(loss=loss)

p_step = jax.pmap(step, axis_name='batch')
"""


def test_metrics_gathered_in_a_pmapped_step_over_the_default_axis_are_renamed():
    rules = _rules(METRICS_BY_DEFAULT)
    assert (7, "pmap-collective") in rules and "axis_name=('host', 'device')" in _said(
        METRICS_BY_DEFAULT, 7, "pmap-collective")
    assert "N times too large" not in _said(METRICS_BY_DEFAULT, 7, "pmap-collective")


def test_metrics_gathered_outside_the_pmapped_code_or_over_another_axis_are_not():
    assert (11, "pmap-collective") not in _rules(METRICS_BY_DEFAULT)
    other = METRICS_BY_DEFAULT.replace("axis_name='batch'", "axis_name='devices'").replace("'batch')", "'devices')")
    assert (7, "pmap-collective") not in _rules(other)


# ------------------------------------------------------------------ nnx.pmap's in_axes without a StateAxes

NNX_IN_AXES = """\
from flax import nnx

def fit_step(model, optimizer, rows, targets):
    grads = nnx.grad(lambda m: ((m(rows) - targets) ** 2).mean())(model)
    optimizer.update(grads)

p_fit = nnx.pmap(
    fit_step,
    in_axes=(None, None, 0, 0),
    axis_name='d')
"""


def test_nnx_pmaps_in_axes_of_replicated_modules_and_a_stacked_batch_is_said_where_written():
    assert (9, "nnx-state-axes") in _rules(NNX_IN_AXES) and (7, "nnx-pmap") in _rules(NNX_IN_AXES)


def test_nnx_pmaps_in_axes_through_a_name_is_said_where_handed():
    source = NNX_IN_AXES.replace("p_fit = nnx.pmap(", "AXES = (None, None, 0, 0)\np_fit = nnx.pmap(").replace(
        "in_axes=(None, None, 0, 0)", "in_axes=AXES")
    assert (10, "nnx-state-axes") in _rules(source)


def test_in_axes_all_mapped_or_with_a_state_axes_get_no_second_finding():
    mapped = NNX_IN_AXES.replace("None, None, 0, 0", "0, 0, 0, 0")
    assert not any(rule == "nnx-state-axes" for _, rule in _rules(mapped))
    axes = "axes = nnx.StateAxes({nnx.Param: None, ...: 0})\n"
    source = NNX_IN_AXES.replace("p_fit = nnx.pmap(", axes + "p_fit = nnx.pmap(")
    source = source.replace("in_axes=(None, None, 0, 0)", "in_axes=(axes, None, 0, 0)")
    assert [line for line, rule in _rules(source) if rule == "nnx-state-axes"] == [7]


def test_in_axes_of_a_vmap_inside_a_device_is_nothing_for_the_port():
    source = "import jax\nf = jax.vmap(g, in_axes=(None, 0))\n"
    assert not any(rule == "nnx-state-axes" for _, rule in _rules(source))


# ------------------------------------------------------------------ a tree map of [0] over two lines

SAVED_COPIES = """\
import pickle
import jax

p_step = jax.pmap(lambda w, m: (w, m), axis_name='d')

def save(path, weights, moments):
    with open(path, 'wb') as out:
        pickle.dump(jax.tree_util.tree_map(
            lambda leaf: leaf[0], (weights, moments)), out)

def train(weights, moments, batches, path):
    for rows in batches:
        weights, moments = p_step(weights, moments)
    host_weights, host_moments = jax.tree_util.tree_map(
        lambda leaf: leaf[0], (weights, moments))
    return host_weights, host_moments
"""


def test_a_tree_map_of_the_scripts_values_is_said_at_its_call_a_helpers_at_the_index():
    rules = _rules(SAVED_COPIES)
    assert (14, "jax-utils-replicate") in rules and (15, "jax-utils-replicate") not in rules
    assert (9, "jax-utils-replicate") in rules and (8, "jax-utils-replicate") not in rules


# ------------------------------------------------------------------ keys a pmapped step draws from

TWO_KEYS = """\
import jax

def step(state, rows, noise_key, mask_key):
    noise_key, next_noise = jax.random.split(noise_key)
    mask_key, next_mask = jax.random.split(mask_key)
    noise = jax.random.normal(noise_key, rows.shape)
    keep = jax.random.bernoulli(mask_key, 0.9, rows.shape)
    return update(state, rows * keep + noise), next_noise, next_mask

p_step = jax.pmap(step, axis_name='d')
"""


def test_each_key_a_pmapped_step_is_handed_is_said_at_its_first_draw():
    assert [line for line, rule in _rules(TWO_KEYS) if rule == "pmap-body-keys"] == [4, 5]


def test_draws_from_keys_split_off_one_key_are_one_stream():
    source = TWO_KEYS.replace("mask_key, next_mask = jax.random.split(mask_key)",
                              "mask_key, next_mask = jax.random.split(noise_key)")
    assert [line for line, rule in _rules(source) if rule == "pmap-body-keys"] == [4]


def test_a_step_that_folds_in_the_device_index_draws_its_own_numbers():
    source = TWO_KEYS.replace("    noise_key, next_noise", "    noise_key = jax.random.fold_in(noise_key, "
                              "jax.lax.axis_index('d'))\n    noise_key, next_noise")
    assert not any(rule == "pmap-body-keys" for _, rule in _rules(source))


SCANNED_BODY = """\
import jax
from functools import partial

def one_update(carry, rows):
    weights, key = carry
    key, drop_key = jax.random.split(key)
    kept = rows * jax.random.bernoulli(drop_key, 0.9, rows.shape)
    return (weights - 0.1 * kept.mean(), key), kept.sum()

@partial(jax.pmap, axis_name='d')
def several_updates(weights, key, chunks):
    carry, sums = jax.lax.scan(one_update, (weights, key), chunks)
    return carry, sums
"""


def test_a_draw_in_the_function_a_pmapped_step_hands_to_scan_is_the_steps():
    found = [line for line, rule in _rules(SCANNED_BODY) if rule == "pmap-body-keys"]
    assert found == [6]
    assert "one_update (which several_updates calls)" in _said(SCANNED_BODY, 6, "pmap-body-keys")


def test_a_function_no_pmapped_step_reaches_is_not_read_for_its_keys():
    source = SCANNED_BODY.replace("jax.lax.scan(one_update,", "jax.lax.scan(other_update,")
    assert not any(rule == "pmap-body-keys" for _, rule in _rules(source))


def test_a_helper_of_a_step_that_draws_itself_is_not_said_again():
    source = SCANNED_BODY.replace("    carry, sums = jax.lax.scan", "    key, other = jax.random.split(key)\n"
                                  "    carry, sums = jax.lax.scan")
    assert [line for line, rule in _rules(source) if rule == "pmap-body-keys"] == [12]


# ------------------------------------------------------------------ negatives a loss picks by index

SAMPLED_NEGATIVES = """\
import jax
import jax.numpy as jnp

def contrastive_loss(anchors, targets, neg_ids):
    width = targets.shape[-1]
    others = targets.reshape(-1, width)[neg_ids.reshape(-1)]
    scores = jnp.einsum('nd,nkd->nk', anchors, others.reshape(anchors.shape[0], -1, width))
    return -jax.nn.log_softmax(scores)[:, 0].mean()

def train_step(params, rows):
    anchors, targets = encode(params, rows)
    return jax.grad(lambda p: contrastive_loss(anchors, targets, rows['neg_ids']))(params)

def eval_step(params, rows):
    anchors, targets = encode(params, rows)
    return contrastive_loss(anchors, targets, rows['neg_ids'])

p_train = jax.pmap(train_step, axis_name='d')
p_eval = jax.pmap(eval_step, axis_name='d')
"""


def test_negatives_a_scripts_loss_picks_by_index_are_said_once_where_picked():
    found = [line for line, rule in _rules(SAMPLED_NEGATIVES) if rule == "per-device-negatives"]
    assert found == [6]
    assert "picks negatives by index" in _said(SAMPLED_NEGATIVES, 6, "per-device-negatives")


def test_a_loss_that_gathers_the_rows_first_picks_from_every_device():
    source = SAMPLED_NEGATIVES.replace("    width = targets.shape[-1]\n",
                                       "    targets = jax.lax.all_gather(targets, 'd', tiled=True)\n"
                                       "    width = targets.shape[-1]\n")
    assert not any(rule == "per-device-negatives" for _, rule in _rules(source))


def test_a_loss_without_an_index_of_negatives_is_said_at_its_calls():
    source = SAMPLED_NEGATIVES.replace("[neg_ids.reshape(-1)]", "[:8]")
    assert [line for line, rule in _rules(source) if rule == "per-device-negatives"] == [12, 16]
