"""Exercises of notebook 11: the masked mean, padded rows judged in real processes, restore targets."""
from __future__ import annotations

import jax

from helpers.exercises import forms
from helpers.exercises.core import Kernel, Mistake, call_learner, describe, register
from helpers.exercises.kinds import RETURNED_NONE, ProgramExercise
from helpers.exercises.rules import CodeRule, ErrorRule, OutputRule
from helpers.exercises.processes import ProcessExercise
from helpers.pictures.layout import format_spec

KERNEL = Kernel(devices=8)  # the first cell: use_fake_devices(8); no emulated hosts


# --------------------------------------------------------------------------- 11.1 masked mean

# Each host of a real run (2 processes x 4 devices) builds the global arrays of three padded data
# sets from the same numbers (JAX says which rows each device holds) on a mesh of its first
# `devices` devices, and calls the learner's masked_mean there.
_MEAN_DRIVER = """
import jax
import numpy as np
from jax import P
from jax.sharding import NamedSharding

from helpers.devices import first_devices_mesh as _mesh


def _number(out):
    # one data set's result as JSON: a float, None, or what else it was
    if out is None:
        return None
    if np.ndim(out) != 0:
        return f"not one number: shape {tuple(np.shape(out))}"
    number = float(out)
    return round(number, 4) if np.isfinite(number) else str(number)  # nan: 0 / 0 somewhere


def output(namespace, layout):
    mesh = _mesh(layout)
    sharding = NamedSharding(mesh, P(("host", "device")))
    rng = np.random.default_rng(11)
    out = []
    for real in (mesh.size * 3 - 1, mesh.size + 3, 5):  # none of them divides the devices
        rows = -(-real // mesh.size) * mesh.size
        values = np.full(rows, 7.0, np.float32)  # padding rows hold a value too (a zero row's error)
        values[:real] = rng.uniform(0.0, 2.0, real)
        mask = (np.arange(rows) < real).astype(np.float32)
        v, m = (jax.make_array_from_callback(a.shape, sharding, lambda index, a=a: a[index]) for a in (values, mask))
        out.append(_number(namespace["masked_mean"](v, m)))
    return out
"""


def _not_one_number(case) -> bool:
    """Some host's result for some data set is not one number (None included; nan is one)."""
    return isinstance(case.got, tuple) and any(not isinstance(o, float) and o not in ("nan", "inf", "-inf")
                                               for host in case.got for o in host)


def _one_number(case) -> str:
    host, out = next((h, o) for h, outs in enumerate(case.got) for o in outs
                     if not isinstance(o, float) and o not in ("nan", "inf", "-inf"))
    what = "None" if out is None else out.removeprefix("not one number: ")
    return f"on host {host} masked_mean returned {what}: return one number on every host, the mean of the real rows"


def _hosts_disagree(case) -> bool:
    return isinstance(case.got, tuple) and len({tuple(h) for h in case.got}) > 1


_HOST_0_ONLY = """def masked_mean(values, mask):
    if jax.process_index() == 0:
        return jnp.sum(values * mask) / jnp.sum(mask)
"""
_HOST_0_WAITS = """def masked_mean(values, mask):
    if jax.process_index() == 0:
        jnp.sum(mask).block_until_ready()
    return jnp.sum(values * mask) / jnp.sum(mask)
"""

register(ProcessExercise(
    id="11.1", kernel=KERNEL, answer_name="masked_mean", signature="(values, mask)",
    title="the masked sum over the mask's sum: the exact mean of the real rows",
    solution="""
def masked_mean(values, mask):
    \"\"\"The mean of `values` over the rows where mask == 1.0.\"\"\"
    return jnp.sum(values * mask) / jnp.sum(mask)
""",
    driver=_MEAN_DRIVER, together=True, on=(2, 4), apart=(_HOST_0_ONLY, _HOST_0_WAITS),
    meshes=((2, 4), (2, 2)),
    timeout=120.0,
    wrong={
        "def masked_mean(values, mask):\n    return jnp.mean(values * mask)\n":
            "the mask zeroes the padding rows' values, but you divide by every row (as jnp.mean does), "
            "padding included: divide the masked sum by the number of real rows, jnp.sum(mask)",
        "def masked_mean(values, mask):\n    return jnp.mean(values)\n":
            "that is the plain mean: it counts the padding rows, and their values, as examples",
        "def masked_mean(values, mask):\n    return jnp.sum(values) / jnp.sum(mask)\n":
            "the denominator counts only real rows, but the sum still adds the padding rows' values "
            "(a zero row's error is not zero): multiply by the mask before summing",
        "def masked_mean(values, mask):\n"
        "    body = lambda v, m: jax.lax.pmean(jnp.sum(v * m) / jnp.sum(m), ('host', 'device'))\n"
        "    return jax.shard_map(body, mesh=values.sharding.mesh, in_specs=P(('host', 'device')), "
        "out_specs=P())(values, mask)\n":
            "you average the devices' own masked means: a device with 1 real row weighs as much as one with 3, "
            "and a device holding only padding divides 0 by 0. Sum over every device first, then divide once "
            "by the number of real rows",
        "def masked_mean(values, mask):\n"
        "    count = sum(float(np.sum(np.asarray(s.data))) for s in mask.addressable_shards)\n"
        "    return jnp.sum(values * mask) / count\n":
            "the sum is global but the count is this host's own (addressable_shards holds only this process's "
            "part of the mask), so the hosts disagree and neither is the mean: count the real rows of the "
            "global mask too",
        _HOST_0_ONLY:
            "host 0 computed the sums, reductions over every host's devices, and waited for host 1, which "
            "skipped them (and returned None): every host must compute a global array's reductions. Only "
            "what you do with the result, like printing it, may depend on jax.process_index()",
    },
    errors=(
        ErrorRule(lambda raw: "unbound axis name" in raw, example=(
            "def masked_mean(values, mask):\n"
            "    return jax.lax.psum(jnp.sum(values * mask), 'device') / jax.lax.psum(jnp.sum(mask), 'device')\n"),
            say="masked_mean gets global arrays, outside any shard_map, so there is no axis to psum over: "
                "jnp.sum of a global array already adds the rows of every device"),
        ErrorRule(lambda raw: "non-addressable" in raw, example=(
            "def masked_mean(values, mask):\n"
            "    return float(np.sum(np.asarray(values) * np.asarray(mask)) / np.sum(np.asarray(mask)))\n"),
            say="no host could read the array's numbers (np.asarray, float(), or indexing by a boolean mask, "
                "which needs them): it spans the devices of both processes, and a process can read only its own "
                "(notebook 03). No need to pick rows: multiply by the mask, so a padding row adds 0, and reduce "
                "the global arrays with jnp, whose result every host can read"),
        ErrorRule(lambda raw: raw.startswith("the run hung"), example=_HOST_0_WAITS, say=lambda case: case.got.text),
    ),
    families=(OutputRule(_not_one_number, example="def masked_mean(values, mask):\n    return values * mask / jnp.sum(mask)\n",
                   say=_one_number),
              OutputRule(_hosts_disagree, example=(
                  "def masked_mean(values, mask):\n"
                  "    return jnp.sum(values * mask) / jnp.sum(mask) + jax.process_index()\n"),
                  say="the hosts returned different means: a global metric must be the same number on every host")),
    otherwise=lambda case: (f"on {case.layout[0]} hosts x {case.layout[1]} devices your function returned "
                            f"{case.got[0]} for three padded data sets, not the means of their real rows: a "
                            "padding row must add nothing to the sum and nothing to the count"),
    hints=(
        "A padding row must add nothing to the sum and nothing to the count.",
        "values * mask keeps the real rows' values; jnp.sum(mask) counts the real rows.",
    ),
))


# --------------------------------------------------------------------------- 11.2 padded rows

def _whole_rows(eval_rows) -> None:
    """Called in the kernel before any real run: the function returns a whole number of rows."""
    rows = call_learner(eval_rows, 1001, 2, 4)
    if rows is None:
        raise Mistake(RETURNED_NONE)
    try:
        forms.whole("rows")(rows)  # 504, np.int64(504) and 504.0 are whole numbers
    except Mistake:
        raise Mistake(f"expected a whole number of rows, but eval_rows(1001, 2, 4) returned {describe(rows)}") from None


_ROWS_DRIVER = '''
import grain
import jax
import numpy as np
from jax import P
from jax.sharding import NamedSharding

from helpers.training.data import pad_with_mask

hosts, devices = jax.process_count(), jax.local_device_count()
shard = grain.sharding.ShardByJaxProcess()
sharding = NamedSharding(jax.make_mesh((hosts, devices), ("host", "device")), P(("host", "device")))


def output(namespace, layout):
    """Per held-out set: [records, global rows, masked mean]; rows -1 / -2 when it fails."""
    out = []
    for n in (1001, 998, 13):  # record i has the value i + 1
        mine = np.asarray(list(grain.MapDataset.source(np.arange(1, n + 1, dtype=np.float32))[shard.shard_index::hosts]))
        rows = int(namespace["eval_rows"](n, hosts, devices))
        biggest = -(-n // hosts)  # host 0's share; every host can tell, so all take the same branch
        if rows < biggest:
            out.append([n, -1, 0.0])
            continue
        part = pad_with_mask({"v": mine}, rows)
        try:
            v, m = (jax.make_array_from_process_local_data(sharding, part[k]) for k in ("v", "mask"))
        except Exception:  # IndivisibleError: the same on every host, before any collective
            out.append([n, -2, 0.0])
            continue
        out.append([n, int(v.shape[0]), round(float((v * m).sum() / m.sum()), 3)])
    return out
'''

def _rows_otherwise(case) -> str:
    """The first held-out set where host 0's run differs from the reference's, in words."""
    hosts, devices = case.layout
    for (n, rows, mean), (_, want_rows, _) in zip(case.got[0], case.want[0]):
        if rows == want_rows:
            continue
        what = {-1: "some host's share did not fit in the rows you pass",
                -2: "JAX refused the rows: they do not split over a host's devices"}.get(
            rows, f"the global array had {rows} rows, more than it needs ({want_rows})" if rows > want_rows else
            f"the global array had {rows} rows")
        return (f"for {n} records on {hosts} host(s) x {devices} devices, {what}: pass the fewest rows that "
                "hold every host's share, a multiple of local_devices")
    return "the hosts' masked means differ from the reference's: every record must be kept, once"


register(ProcessExercise(
    id="11.2", kernel=KERNEL,
    title="each host's share rounded up to a multiple of its devices: equal rows, every record kept",
    answer_name="eval_rows", signature="(num_records, num_hosts, local_devices)", precheck=_whole_rows,
    solution='''
import math


def eval_rows(num_records, num_hosts, local_devices):
    """Rows each host passes: its share of num_records, padded to a multiple of local_devices."""
    share = math.ceil(num_records / num_hosts)  # the biggest share, the first hosts'
    return math.ceil(share / local_devices) * local_devices
''',
    setup="import math\n",
    driver=_ROWS_DRIVER, together=True,
    meshes=((2, 4), (1, 2)),
    timeout=120.0,
    wrong={
        "def eval_rows(num_records, num_hosts, local_devices):\n"
        "    return math.ceil(num_records / num_hosts)\n":
            "that is each host's share (501 of 1001 on 2 hosts), but 501 rows do not split over a "
            "host's 4 devices: make_array_from_process_local_data refused them in the real run. "
            "Round the share up to a multiple of local_devices",
        "def eval_rows(num_records, num_hosts, local_devices):\n"
        "    return math.ceil(num_records // num_hosts / local_devices) * local_devices\n":
            "num_records // num_hosts rounds the share down: with 1001 records host 0 holds 501, one more "
            "than 1001 // 2. Round the share up (math.ceil of a true division), then up to a multiple of "
            "local_devices",
        "def eval_rows(num_records, num_hosts, local_devices):\n"
        "    return math.ceil(math.ceil(num_records / 2) / local_devices) * local_devices\n":
            lambda case: f"you divide by 2, the prompt's host count, but this run has {case.layout[0]} host(s): "
                         "divide by num_hosts",
        "def eval_rows(num_records, num_hosts, local_devices):\n"
        "    return num_records // num_hosts // local_devices * local_devices\n":
            "rounding down loses records: host 0 holds 501 of the 1001 records, more rows than you "
            "give it. Round the share up, and then up to a multiple of local_devices",
    },
    errors=(ErrorRule(lambda raw: "padded_rows" in raw, example=(
        "def eval_rows(num_records, num_hosts, local_devices):\n"
        "    return padded_rows(num_records, num_hosts, local_devices)\n"),
        say="the check runs your function in processes that have no padded_rows: write the "
            "arithmetic yourself, with math"),),
    otherwise=_rows_otherwise,
    hints=(
        "With 1001 records on 2 hosts, host 0 holds 501 and host 1 holds 500; every host must pass "
        "the same number of rows.",
        "Take the biggest share, math.ceil(num_records / num_hosts), and round it up to a multiple "
        "of local_devices.",
    ),
))


# --------------------------------------------------------------------------- 11.3 restore targets

_TARGET_SETUP = """\
from helpers.training import checkpoints, nnx_model
"""


def _leaf_name(path) -> str:
    name = jax.tree_util.keystr(path, simple=True, separator=".").removesuffix(".value")
    owner, _, rest = name.partition(".")
    return f"{ {'0': 'model', '1': 'optimizer'}.get(owner, owner)}.{rest}"


def _targets(targets_for, mesh) -> str:
    """What is wrong with the restore targets targets_for makes for `mesh` (its first wrong leaf), or 'right'."""
    from helpers.training import nnx_model  # Flax: imported when a check needs it

    _, abstract = nnx_model.abstract_state()
    got = targets_for(abstract, mesh)
    if jax.tree.structure(got) == jax.tree.structure(nnx_model.state_shardings(mesh)):
        if all(isinstance(leaf, jax.sharding.Sharding) for leaf in jax.tree.leaves(got)):
            return ("targets_for returned the shardings themselves: a target is a "
                    "jax.ShapeDtypeStruct(shape, dtype, sharding=...), one per array")
        return ("your targets sit where nnx_model.state_shardings(mesh) has its shardings, not where "
                "abstract_state has its arrays: there each array is inside an nnx variable, under .value, "
                "and Orbax matches targets to saved arrays by that path. Build them in "
                "jax.tree.structure(abstract_state)")
    if jax.tree.structure(got) != jax.tree.structure(abstract):
        return (f"targets_for returned {describe(got)}, not a tree shaped like the train state: "
                "Orbax matches each target to a saved array by its path in the tree (the nnx "
                "variables included) and refuses ('tree structures do not match'). Put your "
                "targets back into jax.tree.structure(abstract_state)")
    want = jax.tree.leaves(nnx_model.state_shardings(mesh))
    flat = jax.tree_util.tree_flatten_with_path(got)[0]
    for (path, leaf), template, right in zip(flat, jax.tree.leaves(abstract), want):
        name = _leaf_name(path)
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            return f"{name} is {describe(leaf)}: a target is a jax.ShapeDtypeStruct(shape, dtype, sharding=...)"
        if leaf.shape != template.shape:
            return (f"{name}: the target has shape {leaf.shape}, the saved array {template.shape}: "
                    "take the shape from the abstract state's leaf")
        if leaf.dtype != template.dtype:
            return (f"{name}: the target's dtype is {leaf.dtype}, the saved array's {template.dtype}: "
                    f"Orbax converts to the target's dtype without a word, so it would come back as "
                    f"{leaf.dtype}. Take the dtype from the abstract state's leaf")
        sharding = leaf.sharding
        if sharding is None:
            return (f"{name} has no sharding: Orbax then places it as the checkpoint says, on the "
                    "mesh it was saved from (2 x 4, across 2 processes), and on any other topology "
                    "it refuses ('Topology mismatch detected'). Give every leaf its sharding on `mesh`")
        if getattr(sharding, "mesh", None) is not None and sharding.mesh.shape != mesh.shape:
            return (f"{name} is placed on a mesh {dict(sharding.mesh.shape)}, not on the mesh "
                    f"you were given, {dict(mesh.shape)}: take the shardings of the mesh you restore onto")
        if sharding.devices_indices_map(template.shape) != right.devices_indices_map(template.shape):
            spec = getattr(sharding, "spec", sharding)
            return (f"{name} is placed with {format_spec(spec)} on {dict(mesh.shape)}, but "
                    f"nnx_model.state_shardings(mesh) places it with {format_spec(right.spec)}: "
                    "moments split over 'device', everything else replicated")
    return "right"


def _what_it_does(case) -> str:
    return case.got


def _uses_restore_targets(fn, mesh) -> bool:
    """True when the function calls checkpoints.restore_targets (the exercise builds targets without it)."""
    return "restore_targets" in getattr(getattr(fn, "__code__", None), "co_names", ())


def _per_leaf(make: str) -> str:
    """A targets_for that builds one target per leaf with the expression `make` (of a, s)."""
    return ("def targets_for(abstract_state, mesh):\n"
            "    shardings = jax.tree.leaves(nnx_model.state_shardings(mesh))\n"
            f"    targets = [{make} for a, s in zip(jax.tree.leaves(abstract_state), shardings)]\n"
            "    return jax.tree.unflatten(jax.tree.structure(abstract_state), targets)\n")


register(ProgramExercise(
    id="11.3", kernel=KERNEL, answer_name="targets_for", title="restore targets carry the new mesh's shardings",
    setup=_TARGET_SETUP,
    solution='''
def targets_for(abstract_state, mesh):
    """Restore targets for the train state on `mesh`: one ShapeDtypeStruct per array."""
    shardings = jax.tree.leaves(nnx_model.state_shardings(mesh))  # one per array, in leaf order
    targets = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)
               for a, s in zip(jax.tree.leaves(abstract_state), shardings)]
    return jax.tree.unflatten(jax.tree.structure(abstract_state), targets)
''',
    run=_targets,
    meshes=((4, 2), (1, 8), (2, 2)),
    wrong=dict.fromkeys((
        "def targets_for(abstract_state, mesh):\n"
        "    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), abstract_state)\n",
        _per_leaf("jax.ShapeDtypeStruct(a.shape, jnp.float32, sharding=s)"),
        "def targets_for(abstract_state, mesh):\n"
        "    old = jax.make_mesh((2, 4), ('host', 'device'))\n"
        "    shardings = jax.tree.leaves(nnx_model.state_shardings(old))\n"
        "    targets = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)\n"
        "               for a, s in zip(jax.tree.leaves(abstract_state), shardings)]\n"
        "    return jax.tree.unflatten(jax.tree.structure(abstract_state), targets)\n",
        "def targets_for(abstract_state, mesh):\n"
        "    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, P())),\n"
        "                        abstract_state)\n",
        "def targets_for(abstract_state, mesh):\n"
        "    shardings = jax.tree.leaves(nnx_model.state_shardings(mesh, axis='host'))\n"
        "    targets = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)\n"
        "               for a, s in zip(jax.tree.leaves(abstract_state), shardings)]\n"
        "    return jax.tree.unflatten(jax.tree.structure(abstract_state), targets)\n",
        "def targets_for(abstract_state, mesh):\n"
        "    shardings = jax.tree.leaves(nnx_model.state_shardings(mesh))\n"
        "    return [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)\n"
        "            for a, s in zip(jax.tree.leaves(abstract_state), shardings)]\n",
        "def targets_for(abstract_state, mesh):\n"
        "    return nnx_model.state_shardings(mesh)\n",
        "def targets_for(abstract_state, mesh):\n"
        "    return jax.tree.map(lambda s, a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),\n"
        "                        nnx_model.state_shardings(mesh), abstract_state)\n",
    ), _what_it_does),
    errors=(
        ErrorRule(lambda raw: "pytree structure error" in raw, example=(
            "def targets_for(abstract_state, mesh):\n"
            "    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),\n"
            "                        abstract_state, nnx_model.state_shardings(mesh))\n"),
            say="jax.tree.map pairs two trees of the same structure, and these differ: in abstract_state "
                "each array is inside an nnx variable, under .value; in state_shardings(mesh) each sharding "
                "stands where that variable is. Pair the leaves instead: zip jax.tree.leaves of both, then "
                "jax.tree.unflatten(jax.tree.structure(abstract_state), targets)"),
        ErrorRule(lambda raw: "only valid for values of rank at least" in raw, example=(
            "def targets_for(abstract_state, mesh):\n"
            "    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, "
            "P('device'))), abstract_state)\n"),
            say="one sharding for every leaf does not fit them all: the step counters have shape (), with no "
                "dimension to split. Give each leaf its own sharding, from nnx_model.state_shardings(mesh)"),
        ErrorRule(lambda raw: "context mesh cannot be empty" in raw, example=_per_leaf(
            "jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s.spec)"),
            say="a PartitionSpec alone does not say which devices: give each target the NamedSharding "
                "itself (sharding=s), which carries the mesh"),
    ),
    checks=(CodeRule(_uses_restore_targets, example=(
        "def targets_for(abstract_state, mesh):\n"
        "    return checkpoints.restore_targets(abstract_state, nnx_model.state_shardings(mesh))\n"),
        say="your targets are right, but checkpoints.restore_targets built them: build one "
            "jax.ShapeDtypeStruct per leaf yourself, to see what a target is"),),
    otherwise=_what_it_does,
    hints=(
        "A target is jax.ShapeDtypeStruct(shape, dtype, sharding=...): the shape and dtype of the "
        "abstract state's leaf, the sharding of the mesh you restore onto.",
        "jax.tree.leaves(abstract_state) and jax.tree.leaves(nnx_model.state_shardings(mesh)) "
        "list the arrays and their shardings in the same order; zip them, then "
        "jax.tree.unflatten(jax.tree.structure(abstract_state), targets).",
    ),
))


# --------------------------------------------------------------------------- 11.4 a Grain loader per host

# Each host of a real run calls host_rows for two steps with a fresh ArrayRecords (which lists the records
# read), builds the global batch from what it returns, and reports: [rows it passed, global rows, distinct
# records, equal to one host's global batch, records it read]; rows -1 when JAX refused them.
_GRAIN_DRIVER = '''
import grain
import jax
import numpy as np
from jax import P
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding

from helpers.training import tiny
from helpers.training.data import ArrayRecords, HostLoader

mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), ("host", "device"))
sharding = NamedSharding(mesh, P(("host", "device")))


def output(namespace, layout):
    out = []
    for step in (0, 3):
        source = ArrayRecords(*tiny.dataset())
        ids = np.asarray(namespace["host_rows"](source, step)["id"])
        try:
            every = multihost_utils.process_allgather(jax.make_array_from_process_local_data(sharding, ids), tiled=True)
        except ValueError:  # rows that do not split over the devices: the same on every host
            out.append([len(ids), -1, 0, False, len(source.reads)])
            continue
        alone = HostLoader(ArrayRecords(*tiny.dataset()), 256, grain.sharding.ShardOptions(0, 1), seed=0)
        out.append([len(ids), int(every.shape[0]), len(set(every.tolist())),
                    bool(np.array_equal(every, alone.batch(step)["id"])), len(source.reads)])
    return out
'''


def _host_rows(body: str) -> str:
    return f"def host_rows(source, step):\n{body}"


_READS_EVERYTHING = _host_rows(
    "    rows = HostLoader(source, GLOBAL_BATCH, grain.sharding.ShardOptions(0, 1), seed=0).batch(step)\n"
    "    per_host = GLOBAL_BATCH // jax.process_count()\n"
    "    mine = slice(jax.process_index() * per_host, (jax.process_index() + 1) * per_host)\n"
    "    return {key: value[mine] for key, value in rows.items()}\n")
_SHARDS_TWICE = _host_rows(
    "    rows = HostLoader(source, GLOBAL_BATCH, grain.sharding.ShardByJaxProcess(), seed=0).batch(step)\n"
    "    per_host = len(rows['id']) // jax.process_count()\n"
    "    mine = slice(jax.process_index() * per_host, (jax.process_index() + 1) * per_host)\n"
    "    return {key: value[mine] for key, value in rows.items()}\n")


_TWO_HOSTS = _host_rows("    shard = grain.sharding.ShardOptions(jax.process_index(), 2)\n"
                        "    return HostLoader(source, GLOBAL_BATCH, shard, seed=0).batch(step)\n")


def _grain_otherwise(case) -> str:
    hosts = case.layout[0]
    passed, rows, distinct, same, read = case.got[0][0]
    if rows == -1:
        return (f"on {hosts} hosts each host passed {passed} rows, which JAX refused: a host passes its "
                f"GLOBAL_BATCH // {hosts} rows of the step")
    if rows != 256 or distinct != 256:
        return (f"on {hosts} hosts the global batch has {rows} rows of {distinct} distinct records, not the 256 "
                "records of the step: every host must read its own block of the same shuffled order")
    return (f"on {hosts} hosts the global batch holds the step's 256 records, but not in the order one host "
            "would read them: host h's block comes h-th")


register(ProcessExercise(
    id="11.4", kernel=KERNEL, answer_name="host_rows", signature="(source, step)",
    title="Grain reads only this host's block: ShardByJaxProcess, and nothing sharded twice",
    setup="import grain\nfrom helpers.training.data import HostLoader\nGLOBAL_BATCH = 256\n",
    solution='''
def host_rows(source, step):
    """This host's rows of global batch `step`: Grain reads only this host's block of it."""
    shard = grain.sharding.ShardByJaxProcess(drop_remainder=True)  # this host, of jax.process_count()
    return HostLoader(source, GLOBAL_BATCH, shard, seed=0).batch(step)
''',
    driver=_GRAIN_DRIVER, together=True, apart=(_TWO_HOSTS,),  # it fails on some hosts only
    meshes=((2, 4), (4, 1)),
    timeout=150.0,
    wrong={
        _READS_EVERYTHING:
            lambda case: (f"the global batch is right, but each host read {case.got[0][0][4]} records to keep "
                          f"{case.got[0][0][0]}: every host reads the whole global batch and slices its part. "
                          "Let Grain read only this host's block: give HostLoader ShardByJaxProcess() as its shard"),
        _SHARDS_TWICE:
            lambda case: (f"the data is sharded twice: ShardByJaxProcess already gave this host its "
                          f"{256 // case.layout[0]} rows, and you split them by host again, so each host passed "
                          f"{case.got[0][0][0]} rows and the global batch has {case.got[0][0][1]}, not 256. "
                          "make_array_from_process_local_data takes a host's rows as its part, as they are"),
        _host_rows("    return HostLoader(source, GLOBAL_BATCH, grain.sharding.ShardOptions(0, 1), seed=0).batch(step)\n"):
            lambda case: (f"each host passed the whole global batch ({case.got[0][0][0]} rows), so the global array "
                          f"has {case.got[0][0][1]} rows, every record {case.layout[0]} times: each host passes "
                          "only its own block, and ShardByJaxProcess tells Grain which one"),
        _TWO_HOSTS:
            lambda case: (f"you tell Grain there are 2 hosts; this run has {case.layout[0]}: "
                          "ShardByJaxProcess() reads the number of hosts (and this host's index) from JAX"),
        _host_rows("    shard = grain.sharding.ShardByJaxProcess()\n"
                   "    return HostLoader(source, GLOBAL_BATCH, shard, seed=jax.process_index()).batch(step)\n"):
            "each host shuffles with its own seed, so the hosts' blocks come from different orders: some records "
            "appear twice in the global batch and others never. Every host uses the same seed",
    },
    otherwise=_grain_otherwise,
    hints=(
        "HostLoader(source, GLOBAL_BATCH, shard, seed=0).batch(step) returns the rows of the host `shard` "
        "names; in a real run, grain.sharding.ShardByJaxProcess() names this host.",
        "The loader already reads only this host's block: pass its rows on as they are, without slicing "
        "them by jax.process_index() again.",
    ),
))
