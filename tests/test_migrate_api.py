"""helpers.migrate on API-level patterns of pmap-era and pjit-era code that held-out set 3 showed: pjit through an
alias, old import paths of PartitionSpec, the mesh read back from thread_resources, a project's wrapper that pmaps,
device 0's copy read by hand, device_get of pmap's rows, and gradients applied with no reduction over pmap's axis.
Every snippet here is written for the course."""
from __future__ import annotations

from helpers.migrate.cli import migrate
from migrate_support import rule_list as _rules, first_said as _said


# ------------------------------------------------------------------ pjit-era names and calls

PJIT_ALIAS = """\
from functools import partial
from jax.experimental.pjit import pjit
from jax.experimental import PartitionSpec as P

fast_pjit = pjit
shard = partial(pjit, in_axis_resources=None, out_axis_resources=None)
step = fast_pjit(train_step, in_shardings=None)
init = shard(init_params)

class Trainer:
    def __init__(self, wrap):
        self.step = wrap(train_step, in_axis_resources=(None, P('data', None)), out_axis_resources=None)

    def fit(self, loader):
        for rows in loader:
            self.state = self.step(self.state, rows)
"""


def test_pjit_called_through_an_alias_a_partial_or_a_parameter_is_pjit():
    found = _rules(PJIT_ALIAS)
    assert {(7, "pjit"), (8, "pjit"), (12, "pjit")} <= set(found), found
    assert (6, "pjit") not in found  # the partial is said at its calls
    assert "in_axis_resources and out_axis_resources were deleted" in _said(PJIT_ALIAS, 8, "pjit")


def test_a_pjit_with_old_mesh_axes_and_fed_in_a_loop_names_the_course_axes_and_the_feeding_line():
    said = _said(PJIT_ALIAS, 12, "pjit")
    assert "its specs name the old mesh's axes ('data')" in said
    assert "P('data'), becomes P(('host', 'device'))" in said
    assert "fed in a loop at line 16" in said and "make_array_from_process_local_data" in said


def test_a_pjit_on_the_course_axes_names_no_old_axes():
    source = "from jax.experimental.pjit import pjit\nfrom jax.sharding import PartitionSpec as P\n" \
             "step = pjit(f, in_shardings=P(('host', 'device')))\n"
    assert "old mesh's axes" not in _said(source, 3, "pjit")


def test_partition_spec_from_an_old_internal_path_moved_to_jax_sharding_and_its_uses_are_read():
    source = ("from jax.interpreters.pxla import PartitionSpec\nfrom jax.interpreters import pxla\n"
              "spec = PartitionSpec('data', None)\nmesh = pxla.Mesh(devices, ('data',))\n")
    found = _rules(source)
    assert (1, "experimental-sharding-names") in found and (4, "experimental-sharding-names") in found, found
    assert not [r for _, r in found if r == "not-read"], found
    assert "jax.sharding.PartitionSpec (jax.P)" in _said(source, 1, "experimental-sharding-names")


THREAD_RESOURCES = """\
from jax.experimental.maps import thread_resources

def sizes():
    data = thread_resources.env.shape['data']
    return data
"""


def test_the_mesh_read_from_thread_resources_is_the_mesh_you_build_not_xmap():
    found = _rules(THREAD_RESOURCES)
    assert found == [(1, "experimental-sharding-names"), (4, "experimental-sharding-names")], found
    said = _said(THREAD_RESOURCES, 4, "experimental-sharding-names")
    assert "mesh.shape['data']" in said and "jax.sharding.get_abstract_mesh().shape['data']" in said


def test_thread_resources_in_a_script_that_uses_xmap_stays_with_xmap():
    source = "from jax.experimental import maps\nf = maps.xmap(g, in_axes=['b', ...], out_axes=['b', ...])\n" \
             "n = maps.thread_resources.env.shape['b']\n"
    assert (3, "xmap") in _rules(source)


# ------------------------------------------------------------------ a project's wrapper that pmaps

def test_a_wrapper_in_another_file_of_the_folder_that_calls_pmap_is_a_pmap(tmp_path):
    (tmp_path / "tools.py").write_text("import jax\n\ndef spread(fn, reduce='mean'):\n"
                                       "    return jax.pmap(fn, axis_name='dev')\n")
    (tmp_path / "run.py").write_text("import jax\nimport tools\n\ndef sample(params, x):\n    return x\n\n"
                                     "sampler = tools.spread(sample)\n")
    found = [(f.path.rsplit("/", 1)[-1], f.line, f.rule) for f in migrate(tmp_path, show=False)]
    assert ("run.py", 7, "pmap") in found, found
    assert "defined in another file of this folder, calls jax.pmap" in next(
        f.does for f in migrate(tmp_path, show=False) if f.path.endswith("run.py"))


WRAPPED = """\
import functools
import jax
import lib

class Experiment:
    def __init__(self):
        self.step = jax.pmap(self.train, 'batch')
        self.draw = functools.partial(self.sample, steps=10)
        self.draw = lib.spread(
            self.draw, gather='concat', axis_name='batch')
        self.stats = lib.sync_stats(self.stats, axis_name='batch')
        self.inner = lib.vmap(self.sample, axis_name='batch')
"""


def test_a_call_out_of_view_handed_a_function_and_pmaps_axis_name_is_a_pmap_said_once():
    found = _rules(WRAPPED)
    assert (9, "pmap") in found and (10, "pmap-collective") not in found, found
    assert (11, "pmap-collective") in found and (11, "pmap") not in found  # a value handed the axis: a rename
    assert (12, "pmap") not in found  # a vmap of another library is no pmap
    assert "handed a function and pmap's keyword axis_name='batch'" in _said(WRAPPED, 9, "pmap")


# ------------------------------------------------------------------ device 0's copy, read by hand

COPY_ZERO = """\
import jax
import helpers

step = jax.pmap(train_step, axis_name='batch')
for batch in batches:
    state, metrics = step(state, batch)
    done = int(state.step[0])
    loss = metrics['loss'][0]
    summary = helpers.get_metrics(history)
    rows = batch.x[0]
    scores = self.get_metrics(history)
"""


def test_a_field_or_entry_of_a_pmap_output_indexed_0_is_device_0s_copy():
    found = _rules(COPY_ZERO)
    assert (7, "jax-utils-replicate") in found and (8, "jax-utils-replicate") in found, found
    assert (10, "jax-utils-replicate") not in found  # the batch is no pmap output


def test_a_projects_get_metrics_in_a_pmap_script_is_flaxs_get_metrics():
    found = _rules(COPY_ZERO)
    assert (9, "flax-get-metrics") in found and (9, "jax-utils-replicate") not in found, found
    assert (11, "flax-get-metrics") not in found  # a method of the script's own object
    assert "helpers.get_metrics is the project's get_metrics" in _said(COPY_ZERO, 9, "flax-get-metrics")
    assert (9, "flax-get-metrics") not in _rules(COPY_ZERO.replace("jax.pmap(", "jax.jit("))


# ------------------------------------------------------------------ pmap's rows read on the host

DEVICE_GET_ROWS = """\
import jax
from flax.jax_utils import pad_shard_unpad

generate = jax.pmap(generate_step, 'batch')
for batch in loader:
    tokens = pad_shard_unpad(generate)(params, batch)
    kept.extend(jax.device_get(
        tokens.reshape(-1, beams, length)))
    ids = generate(params, batch)
    flat = jax.device_get(ids.reshape((-1, length)))
    whole = jax.device_get(loss)
"""


def test_device_get_of_a_pmap_output_reshaped_to_rows_reads_a_global_array_on_one_host():
    found = _rules(DEVICE_GET_ROWS)
    assert (7, "numpy-of-global") in found and (10, "numpy-of-global") in found, found
    assert (8, "numpy-of-global") not in found  # one finding, where the rows are read
    assert (11, "numpy-of-global") not in found  # a value that is no pmap output
    assert "process_allgather" in _said(DEVICE_GET_ROWS, 10, "numpy-of-global")


# ------------------------------------------------------------------ gradients no collective reduces

def _step(body: str, head: str = "") -> str:
    """A pmapped step whose gradients come from jax.value_and_grad, then `body` (indented by the caller)."""
    return ("import jax\nimport optax\nfrom flax.training import common_utils\n" + head
            + "def step(state, opt_state, batch):\n"
            "    loss, grads = jax.value_and_grad(loss_fn)(state.params, batch)\n" + body
            + "p_step = jax.pmap(step, axis_name='batch')\n")


UNREDUCED = {
    "optax": "    updates, opt_state = tx.update(grads, opt_state)\n    return optax.apply_updates(state, updates)\n",
    "state": "    return state.apply_gradients(grads=grads)\n",
    "by hand": "    return jax.tree.map(lambda p, g: p - 0.1 * g, state.params, grads)\n",
}
REDUCED = {
    "pmean": "    grads = jax.lax.pmean(grads, 'batch')\n    return state.apply_gradients(grads=grads)\n",
    "psum": "    grads = jax.lax.psum(grads, axis_name='batch')\n    return state.apply_gradients(grads=grads)\n",
    "old flax": "    grads = common_utils.pmean(grads)\n    return state.apply_gradients(grads=grads)\n",
    "a tuple": "    loss, grads = jax.lax.pmean((loss, grads), 'batch')\n    return state.apply_gradients(grads=grads)\n",
    "a helper": "    grads = average(grads)\n    return state.apply_gradients(grads=grads)\n",
    "the axis handed on": "    grads = sync(grads, axis_name='batch')\n    return state.apply_gradients(grads=grads)\n",
    "a tree map": "    grads = jax.tree.map(lambda g: jax.lax.pmean(g, 'batch'), grads)\n"
                  "    return state.apply_gradients(grads=grads)\n",
}
HELPER = "def average(g):\n    return jax.lax.pmean(g, axis_name='batch')\n"


def test_a_pmapped_step_that_applies_each_devices_own_gradient_is_unreduced_gradients():
    for name, body in UNREDUCED.items():
        source = _step(body)
        assert (6, "unreduced-gradients") in _rules(source), (name, _rules(source))
        assert "the gradient is the mean over every device of every host" in _said(source, 6, "unreduced-gradients")


def test_gradients_reduced_over_pmaps_axis_anywhere_in_the_step_are_not_unreduced():
    for name, body in REDUCED.items():
        rules = {r for _, r in _rules(_step(body, HELPER))}
        assert "unreduced-gradients" not in rules, name


def test_gradients_applied_outside_pmap_or_reduced_through_the_loss_are_not_unreduced():
    jitted = _step(UNREDUCED["state"]).replace("jax.pmap(step, axis_name='batch')", "jax.jit(step)")
    assert "unreduced-gradients" not in {r for _, r in _rules(jitted)}
    loss = "def loss_fn(params, batch):\n    return jax.lax.pmean(jnp.mean(params * batch), 'batch')\n"
    assert "unreduced-gradients" not in {r for _, r in _rules(_step(UNREDUCED["state"], loss))}


def test_an_nnx_pmapped_step_and_old_flax_optimize_apply_their_own_gradients():
    nnx_step = ("from flax import nnx\n\ndef train(model, optimizer, batch):\n"
                "    loss, grads = nnx.value_and_grad(lambda m: ((m(batch) - batch) ** 2).mean())(model)\n"
                "    optimizer.update(grads)\n    return loss\n\n"
                "step = nnx.pmap(train, axis_name='data', in_axes=(None, None, 0))\n")
    assert (5, "unreduced-gradients") in _rules(nnx_step), _rules(nnx_step)
    optimize = ("import jax\n\ndef train(optimizer, batch):\n    def loss_fn(model):\n"
                "        return ((model(batch) - batch) ** 2).mean()\n"
                "    optimizer, loss = optimizer.optimize(loss_fn, learning_rate=0.1)\n    return optimizer\n\n"
                "step = jax.pmap(train, axis_name='batch')\n")
    assert (6, "unreduced-gradients") in _rules(optimize), _rules(optimize)
    assert "of old flax.optim takes this device's own gradient" in _said(optimize, 6, "unreduced-gradients")


def test_the_new_rule_names_a_section_the_notebook_has():
    import re
    from pathlib import Path

    from helpers.migrate import LESSONS
    notebook, section = LESSONS["unreduced-gradients"]
    source = next((Path(__file__).resolve().parents[1] / "notebooks" / "src").glob(f"{notebook}_*.md")).read_text()
    assert section in {re.sub(r"^#+ (\d+\. )?", "", line) for line in source.splitlines() if line.startswith("#")}


def test_a_wrapper_is_a_call_through_a_module_never_a_name_the_script_binds(tmp_path):
    (tmp_path / "tools.py").write_text("import jax\n\ndef step(f):\n    return jax.pmap(f)\n")
    (tmp_path / "run.py").write_text("import tools\nstep = make_step(mesh)\nloss = step(model, x)\n")
    assert not [f for f in migrate(tmp_path, show=False) if f.path.endswith("run.py") and f.rule == "pmap"]


def test_spec_axes_held_in_constants_are_named_by_their_strings():
    source = "from jax.experimental.pjit import pjit\nfrom jax.experimental import PartitionSpec as P\n" \
             "DATA = 'dp'\nstep = pjit(f, in_axis_resources=P(DATA), out_axis_resources=None)\n"
    assert "its specs name the old mesh's axes ('dp')" in _said(source, 4, "pjit")
