"""The migration assistant's data and old-API rules met on a ninth set of published scripts: an old Mesh class
built in a `with` statement, a partitioner's pjit called with its axis resources by position, and a pmap bound to an
attribute whose output's field is read on the host. The snippets are written for these tests."""
from __future__ import annotations

from migrate_support import rule_set as _rules
from migrate_support import said as _said

OLD_MESH_ENTERED = """import jax
from jax.experimental import maps

class Trainer:
    def run(self, batch):
        with maps.Mesh(self.grid, ('data', 'model')):
            return self.step(batch)
"""


def test_an_old_mesh_class_built_in_a_with_is_both_the_removed_name_and_the_with():
    found = _rules(OLD_MESH_ENTERED)
    assert (6, "with-mesh") in found and (6, "experimental-sharding-names") in found
    assert "jax.make_mesh" in _said(OLD_MESH_ENTERED, 6, "experimental-sharding-names")


def test_the_old_mesh_function_in_a_with_stays_with_mesh_only():
    found = _rules(OLD_MESH_ENTERED.replace("maps.Mesh(", "maps.mesh("))
    assert (6, "with-mesh") in found and (6, "experimental-sharding-names") not in found


PARTITIONED = """import jax
from jax.sharding import PartitionSpec as P

class Runner:
    def build(self, planner, shapes):
        spec = planner.get_mesh_axes(shapes)
        cast = planner.partition(self.to_half, (spec,), spec)
        self.params = cast(self.params)
        self.run = planner.partition(self.forward, in_axis_resources=(spec, P('data')), out_axis_resources=P('data'))
"""


def test_a_partitioner_call_with_axis_resources_by_position_is_pjit_when_it_takes_the_keywords_elsewhere():
    found = _rules(PARTITIONED)
    assert (7, "pjit") in found and (9, "pjit") in found
    assert "by position" in _said(PARTITIONED, 7, "pjit")


def test_the_same_call_with_no_keyworded_twin_is_no_pjit():
    alone = PARTITIONED.replace(
        "in_axis_resources=(spec, P('data')), out_axis_resources=P('data')", "(spec, P('data')), P('data')")
    assert not {f for f in _rules(alone) if f[1] == "pjit"}


ATTRIBUTE_PMAP = """import jax
import numpy as np
from flax.training.common_utils import shard

class Pipeline:
    def __init__(self, fn):
        self.p_run = jax.pmap(fn, "batch")

    def run(self, params, rows):
        out = self.p_run(params, shard(rows)).sequences
        return jax.device_get(out.reshape(-1, 16))
"""


def test_a_field_of_an_attribute_pmaps_output_folded_and_fetched_is_a_numpy_of_global():
    assert (11, "numpy-of-global") in _rules(ATTRIBUTE_PMAP)
    assert "process_allgather" in _said(ATTRIBUTE_PMAP, 11, "numpy-of-global")


def test_an_attribute_bound_to_a_jit_is_no_pmap_output():
    plain = ATTRIBUTE_PMAP.replace('jax.pmap(fn, "batch")', "jax.jit(fn)")
    assert not {f for f in _rules(plain) if f[1] == "numpy-of-global"}


SLIDING = """import jax
import numpy as np
from flax import nnx

class Inference:
    def __init__(self, fn, devices):
        self.groups = len(devices)
        self.forward = nnx.pmap(fn, in_axes=(None, 0), devices=devices)

    def run(self, model, rows, bs):
        outs = []
        for start in range(0, len(rows), bs):
            x = rows[start:start + bs]
            n = self.groups
            x = x.reshape(n, bs // n, x.shape[1])
            y = self.forward(model, x)
            y_host = np.asarray(jax.device_get(y))
            y_host = y_host.reshape((bs,) + y_host.shape[2:])
            outs.append(y_host)
        return outs
"""


def test_rows_cut_into_groups_and_handed_to_a_pmap_are_a_local_batch():
    assert (15, "local-batch") in _rules(SLIDING)
    assert "make_array_from_process_local_data" in _said(SLIDING, 15, "local-batch")


def test_rows_cut_into_groups_for_a_jitted_function_are_no_local_batch():
    plain = SLIDING.replace("nnx.pmap(fn, in_axes=(None, 0), devices=devices)", "nnx.jit(fn)")
    assert (15, "local-batch") not in _rules(plain)
    assert (18, "local-batch") not in _rules(plain)


def test_the_device_axis_folded_on_a_host_copy_of_a_pmap_output_is_a_local_batch():
    found = _rules(SLIDING)
    assert (17, "numpy-of-global") in found and (18, "local-batch") in found
    assert "global_array_to_host_local_array" in _said(SLIDING, 18, "local-batch")


def test_a_reshape_keeping_the_leading_axes_of_a_host_copy_is_no_merge():
    kept = SLIDING.replace("y_host.reshape((bs,) + y_host.shape[2:])", "y_host.reshape(y_host.shape[0], -1)")
    assert (18, "local-batch") not in _rules(kept)


PROJECT_STACKS = """import jax
import jax.numpy as jnp
import loaders as ld
import helpers as hp

train_x, train_y = ld.load_shard(split='train')
valid_x, valid_y = ld.load_shard(split='valid')
wide_x = ld.augment_batches(train_x)
params = hp.replicate(init(jax.random.key(0)))

@jax.pmap
def predict(params, x):
    return jnp.argmax(params['w'] @ x, axis=-1)

@jax.pmap
def update(params, x, y):
    return params, jax.grad(lambda p: ((p['w'] @ x - y) ** 2).mean())(params)

def accuracy(params, x, y):
    return float(jnp.mean(predict(params, x) == y))

params, grads = update(params, wide_x, train_y)
print(accuracy(params, train_x, train_y), accuracy(params, valid_x, valid_y))
"""


def test_every_loader_a_function_s_callers_hand_to_pmap_is_a_local_batch():
    found = _rules(PROJECT_STACKS)
    assert (6, "local-batch") in found and (7, "local-batch") in found


def test_a_project_call_handed_rows_another_loader_read_is_no_loader():
    found = _rules(PROJECT_STACKS)
    assert (8, "local-batch") not in found and (8, "shared-shuffle") not in found


def test_a_project_module_s_replicate_in_a_pmap_script_is_a_replicate():
    assert (9, "jax-utils-replicate") in _rules(PROJECT_STACKS)
    assert "NamedSharding(mesh, P())" in _said(PROJECT_STACKS, 9, "jax-utils-replicate")


def test_a_replicate_of_a_library_or_of_an_object_is_not_the_project_s():
    for other in ("import numpy as hp", "from helpers import model as hp"):
        source = PROJECT_STACKS.replace("import helpers as hp", other)
        said = (9, "jax-utils-replicate") in _rules(source)
        assert said == (other != "import numpy as hp")
    no_pmap = "import helpers as hp\nparams = hp.replicate(w)\n"
    assert not _rules(no_pmap)


JAXLINE = """import jax
from jaxline import experiment
from jaxline import utils as jl

class Trainer(experiment.AbstractExperiment):
    CHECKPOINT_ATTRS = {'_params': 'params'}

    def __init__(self, mode):
        self._step = jax.pmap(self._update, axis_name='i')

    def _start(self, make_input):
        self._input = jl.double_buffer_on_gpu(make_input())

    def _make_input(self, ds):
        ds = ds.batch(jax.local_device_count())
        return iter(ds)
"""


def test_jaxline_s_checkpointed_attributes_and_its_double_buffer_in_a_pmap_experiment():
    found = _rules(JAXLINE)
    assert (6, "flax-checkpoints") in found and (12, "flax-prefetch") in found
    assert "NON_BROADCAST_CHECKPOINT_ATTRS" in _said(JAXLINE, 6, "flax-checkpoints")


def test_a_dataset_batched_by_the_local_device_count_is_a_local_batch():
    assert (15, "local-batch") in _rules(JAXLINE)


def test_without_pmap_or_jaxline_or_with_a_product_nothing_is_said():
    no_pmap = JAXLINE.replace("jax.pmap(self._update, axis_name='i')", "jax.jit(self._update)")
    assert not _rules(no_pmap)
    own_base = JAXLINE.replace("experiment.AbstractExperiment", "object")
    assert (6, "flax-checkpoints") not in _rules(own_base)
    rows = JAXLINE.replace("ds.batch(jax.local_device_count())", "ds.batch(32 * jax.local_device_count())")
    assert "one per local device" not in _said(rows, 15, "local-batch")  # a host's batch size: another rule's words


SAMPLE_SHAPE = """import jax
from sampler import draw_images

def train(loader, state, rng):
    p_step = jax.pmap(step, axis_name='batch')
    for batch in loader:
        state, metrics = p_step(rng, state, batch)
        print(batch['image'].shape, batch['image'].shape[1])
        images = draw_images(rng, state, tuple(batch['image'].shape))
    return images
"""


def test_the_whole_shape_of_a_batch_fed_to_pmap_handed_on_as_a_shape_is_a_local_batch():
    found = _rules(SAMPLE_SHAPE)
    assert (9, "local-batch") in found and (8, "local-batch") not in found
    assert "no device axis" in _said(SAMPLE_SHAPE, 9, "local-batch")


def test_the_shape_of_a_batch_no_pmap_maps_is_not_said():
    for other in ("jax.jit(step)", "jax.pmap(step, axis_name='batch', in_axes=(0, 0, None))",
                  "jax.pmap(step, axis_name='batch', static_broadcasted_argnums=(2,))"):
        assert (9, "local-batch") not in _rules(SAMPLE_SHAPE.replace("jax.pmap(step, axis_name='batch')", other))
    mapped = "jax.pmap(step, axis_name='batch', in_axes=(None, 0, 0))"  # the batch at a mapped position: a stack
    assert (9, "local-batch") in _rules(SAMPLE_SHAPE.replace("jax.pmap(step, axis_name='batch')", mapped))


def test_rows_sliced_by_a_loop_index_and_handed_to_a_pmap_are_the_same_rows_on_every_host():
    assert (13, "global-batch-per-host") in _rules(SLIDING)
    assert "process_index" in _said(SLIDING, 13, "global-batch-per-host")


def test_rows_sliced_by_a_host_s_own_offset_or_for_a_jit_are_not_said():
    own = SLIDING.replace("x = rows[start:start + bs]", "x = rows[start:start + bs][jax.process_index()::2]")
    assert (13, "global-batch-per-host") not in _rules(own)
    plain = SLIDING.replace("nnx.pmap(fn, in_axes=(None, 0), devices=devices)", "nnx.jit(fn)")
    assert (13, "global-batch-per-host") not in _rules(plain)


PJIT_RETURNED = """from jax.experimental.pjit import pjit
from jax.sharding import PartitionSpec as P

class Pipe:
    def build(self, fn):
        self.p_run = pjit(fn, in_axis_resources=(None, P('data')), out_axis_resources=P('data'))

    def run(self, params, x):
        out = self.p_run(params, x).tokens
        return out

    def forward(self, params, x, n):
        ids = self.run(params, x)[:n]
        return decode(ids)
"""


def test_rows_of_a_sharded_pjit_output_a_method_returns_picked_on_the_host_are_a_numpy_of_global():
    assert (13, "numpy-of-global") in _rules(PJIT_RETURNED)
    assert "process_allgather" in _said(PJIT_RETURNED, 13, "numpy-of-global")


def test_a_replicated_pjit_output_or_an_item_is_not_said():
    replicated = PJIT_RETURNED.replace("out_axis_resources=P('data')", "out_axis_resources=None")
    assert (13, "numpy-of-global") not in _rules(replicated)
    item = PJIT_RETURNED.replace("self.run(params, x)[:n]", "self.run(params, x)['ids']")
    assert (13, "numpy-of-global") not in _rules(item)
