"""equinox's pmap, the GlobalDeviceArray era, pjit's old keywords on their own lines, device grids laid out by hand for
one host, a pmap told this host's devices, and a loader's rows put on a sharding split over every host's devices."""
from tests.migrate_support import rule_set, said

EQUINOX = """\
import equinox as eqx
import jax


@eqx.filter_pmap(axis_name='data', donate='all')
def train_step(model, batch):
    loss, grads = eqx.filter_value_and_grad(loss_fn)(model, batch)
    grads = jax.lax.pmean(grads, axis_name='data')
    loss = jax.lax.pmean(loss, axis_name='data')
    return model, loss


model, loss = train_step(model, batch)
print(float(loss[0]))
"""


def test_equinoxs_filter_pmap_is_a_pmap_and_its_filter_value_and_grad_gives_gradients():
    found = rule_set(EQUINOX)
    assert {(5, "pmap"), (8, "pmap-collective"), (9, "pmap-collective"), (14, "jax-utils-replicate")} <= found
    assert "N times too large" in said(EQUINOX, 8, "pmap-collective")
    assert "N times too large" not in said(EQUINOX, 9, "pmap-collective")


def test_without_equinox_its_names_are_nobodys():
    assert not rule_set(EQUINOX.replace("import equinox as eqx", "import mylib as eqx")) & {(5, "pmap")}


PJIT_ERA = """\
import jax
import numpy as np
from jax.experimental.pjit import pjit
from jax.experimental.global_device_array import GlobalDeviceArray

grid = np.array(jax.devices()).reshape(1, jax.local_device_count())
picked = np.asarray(jax.devices()[:4]).reshape(2, 2)
whole = np.asarray(jax.devices()).reshape(jax.process_count(), -1)
p_init = pjit(
    init_fn,
    in_axis_resources=None,
    out_axis_resources=spec,
)
jax.config.update('jax_parallel_functions_output_gda', True)
g = GlobalDeviceArray.from_callback(shape, mesh, spec, callback)
"""


def test_a_device_grid_of_one_hosts_count_or_picked_by_index_is_a_mesh_of_local_devices():
    found = rule_set(PJIT_ERA.replace("whole = np.asarray(jax.devices()).reshape(jax.process_count(), -1)", ""))
    assert {(6, "mesh-of-local-devices"), (7, "mesh-of-local-devices")} <= found
    assert (6, "local-batch") not in found  # devices laid out, not rows stacked


def test_a_grid_in_a_script_that_counts_hosts_is_left_alone():
    assert (8, "mesh-of-local-devices") not in rule_set(PJIT_ERA)


def test_pjits_old_keywords_are_said_where_they_are_written_and_gda_is_gone():
    found = rule_set(PJIT_ERA)
    assert {(9, "pjit"), (11, "pjit"), (12, "pjit"), (14, "pjit"), (4, "experimental-sharding-names")} <= found
    assert "TypeError" in said(PJIT_ERA, 11, "pjit")
    assert "make_array_from_callback" in said(PJIT_ERA, 4, "experimental-sharding-names")
    assert not any(rule == "not-read" for _, rule in found)


LOCAL_PMAP = """\
import jax

local = jax.local_devices()
update = jax.pmap(update_fn, axis_name='local', devices=local)
step = jax.pmap(step_fn, axis_name='all', devices=jax.devices())
other = jax.pmap(f, axis_name='o', devices=jax.local_devices(process_index=1))
"""


def test_a_pmap_told_this_hosts_devices_never_reaches_the_others():
    found = rule_set(LOCAL_PMAP)
    assert (4, "mesh-of-local-devices") in found
    assert "maps this host's devices only" in said(LOCAL_PMAP, 4, "pmap")
    assert not {(5, "mesh-of-local-devices"), (6, "mesh-of-local-devices")} & found
    assert "spans every device of every host" in said(LOCAL_PMAP, 5, "pmap")


OBJAX = """\
import objax


class Trainer:
    def __init__(self):
        self.compute_grads_loss = objax.GradValues(self.loss_fn, self.model_vars)
        self.train_op_parallel = objax.Parallel(self.train_op, self.all_vars, reduce=lambda x: x[0])

    def train_op(self, images, labels):
        grads, losses = self.compute_grads_loss(images, labels)
        grads = objax.functional.parallel.pmean(grads)
        losses = objax.functional.parallel.pmean(losses)
        return losses
"""


def test_objaxs_parallel_is_a_pmap_over_its_device_axis_and_its_pmean_of_gradients_the_trap():
    found = rule_set(OBJAX)
    assert {(7, "pmap"), (11, "pmap-collective"), (12, "pmap-collective")} <= found
    assert "'device'" in said(OBJAX, 7, "pmap")
    assert "N times too large" in said(OBJAX, 11, "pmap-collective")
    assert "N times too large" not in said(OBJAX, 12, "pmap-collective")


def test_a_removed_positional_sharding_and_its_replicate_are_old_sharding_names():
    source = ("import jax\nsharding = jax.sharding.PositionalSharding(jax.devices())\n"
              "agent = jax.device_put(agent, sharding.replicate())\nstate = state.replicate()\n")
    found = rule_set(source)
    assert {(2, "experimental-sharding-names"), (3, "experimental-sharding-names"), (4, "replicate-method")} <= found
    assert (3, "replicate-method") not in found


def test_saves_and_restores_through_clus_multihost_checkpoint_are_flax_checkpoints():
    source = ("import jax\nfrom clu import checkpoint\nfrom flax import jax_utils\n\n"
              "ckpt = checkpoint.MultihostCheckpoint(workdir)\nstate = ckpt.restore_or_initialize(state)\n"
              "ckpt.save(jax_utils.unreplicate(state))\nother.save(state)\n")
    found = rule_set(source)
    assert {(5, "flax-checkpoints"), (6, "flax-checkpoints"), (7, "flax-checkpoints")} <= found
    assert (8, "flax-checkpoints") not in found


APPLIED = """\
import jax
from functools import partial


@partial(jax.pmap, axis_name='pmap')
def step(state, batch):
    grads = jax.grad(loss_fn)(state.params, batch)
    state = accumulate(state, grads, lambda s, g: s.apply_gradients(grads=jax.lax.pmean(g, axis_name='pmap')))
    updates, opt_state = tx.update(jax.lax.psum(batch, 'pmap'), state.opt_state, state.params)
    metrics = jax.lax.pmean(batch, axis_name='pmap')
    return state, metrics
"""


def test_a_collective_applied_as_gradients_is_the_trap_whatever_it_reduces():
    for line in (8, 9):  # apply_gradients(grads=...) of a lambda's parameter; an optimizer's updates
        assert "the gradients" in said(APPLIED, line, "pmap-collective")
        assert "renaming the axis is not enough" in said(APPLIED, line, "pmap-collective")
    assert "name the mesh axes" in said(APPLIED, 10, "pmap-collective")  # metrics: a rename


DERIVATIVES = """\
import jax
from functools import partial


@partial(jax.pmap, axis_name='batch')
def step(state, batch, key):
    (_, aux), grads, hvp = hessian_helper(key, loss_fn, state.params, batch)
    hvp = jax.lax.pmean(hvp, axis_name='batch')
    stats = jax.lax.pmean(batch, axis_name='batch')
    return state, hvp, stats
"""


def test_what_a_helper_handed_the_loss_function_gives_back_is_never_just_renamed():
    assert "if this is a gradient" in said(DERIVATIVES, 8, "pmap-collective")  # a Hessian-vector product, maybe
    assert "name the mesh axes" in said(DERIVATIVES, 9, "pmap-collective")
    unhanded = DERIVATIVES.replace("hessian_helper(key, loss_fn, state.params, batch)",
                                   "hessian_helper(key, state.params, batch)")
    assert "name the mesh axes" in said(unhanded, 8, "pmap-collective")


LOADED_ROWS_PUT = """\
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from mylib.dataloaders import TextDataLoader

mesh = Mesh(jax.devices(), ["devices"])
data_sharding = NamedSharding(mesh, PartitionSpec("devices"))
train_dl = TextDataLoader(batch_size=64)
val_dl = TextDataLoader(batch_size=64)


def validate(model, loader, sharding):
    x, y = loader()
    x = jax.device_put(x.squeeze(), sharding)
    return model(x, y)


for step in range(10):
    x, y = train_dl()
    x = jax.device_put(x.squeeze(), data_sharding)
    params = jax.device_put(params, NamedSharding(mesh, PartitionSpec()))
    validate(model, val_dl, data_sharding)
"""


def test_a_loaders_rows_put_on_a_split_sharding_are_said_also_through_a_function_handed_both():
    found = rule_set(LOADED_ROWS_PUT)
    assert {(13, "local-batch"), (19, "local-batch")} <= found, found
    assert (20, "local-batch") not in found
    assert "each host's loader" in said(LOADED_ROWS_PUT, 19, "local-batch")


FED_TO_PJIT = """\
import jax
from jax.experimental.pjit import pjit
from jax.sharding import PartitionSpec as P

train_step = pjit(step, in_shardings=(state_spec, P('data')), out_shardings=state_spec)
eval_step = jax.jit(evaluate, in_shardings=(state_spec, P('data')))
for epoch in range(3):
    for batch in train_loader:
        batch = batch.reshape(-1, 128)
        state = train_step(state, batch)
    scores = eval_step(state, next(eval_iter))
for name, leaves in params.items():
    params[name] = train_step(state, leaves)
"""


def test_a_loaders_rows_handed_as_they_are_to_a_step_compiled_over_the_mesh_are_local_batch():
    found = rule_set(FED_TO_PJIT)
    assert {(10, "local-batch"), (11, "local-batch")} <= found, found
    assert (13, "local-batch") not in found  # a dict's entries, not a loader's rows
    assert "Passing non-trivial shardings" in said(FED_TO_PJIT, 10, "local-batch")
    made_global = FED_TO_PJIT + "rows = jax.make_array_from_process_local_data(sharding, batch)\n"
    assert not {line for line, rule in rule_set(made_global) if rule == "local-batch"}
