"""Exercises of notebook 11: the masked mean, padded rows judged in real processes, restore targets."""
from __future__ import annotations

import jax
import numpy as np

from helpers.exercises import forms
from helpers.exercises.core import Kernel, Mistake, call_learner, describe, register
from helpers.exercises.kinds import RETURNED_NONE, ProgramExercise, placed
from helpers.exercises.rules import CodeRule, ErrorRule, OutputRule
from helpers.exercises.processes import ProcessExercise
from helpers.layout import format_spec

KERNEL = Kernel(devices=8)  # the first cell: use_fake_devices(8); no emulated hosts


# --------------------------------------------------------------------------- 11.1 masked mean

def _masked_mean_case(masked_mean, mesh):
    """The learner's masked mean of padded values on `mesh`: 3 data sets of uneven sizes."""
    rng = np.random.default_rng(11)
    results = []
    for real in (mesh.size * 3 - 1, mesh.size + 3, 5):  # none of them divides the devices
        rows = -(-real // mesh.size) * mesh.size
        values = np.full(rows, 7.0, np.float32)  # padding rows hold a value too (a zero row's error)
        values[:real] = rng.uniform(0.0, 2.0, real)
        mask = (np.arange(rows) < real).astype(np.float32)
        results.append(masked_mean(placed(mesh, values), placed(mesh, mask)))
    return results


def _not_one_number(case) -> bool:
    """Some data set's result is not one number (None aside: the engine names it)."""
    return any(out is not None and (isinstance(out, (str, bytes)) or np.ndim(out) != 0) for out in case.got)


def _one_number(case) -> str:
    out = next(o for o in case.got if o is not None and (isinstance(o, (str, bytes)) or np.ndim(o) != 0))
    return f"masked_mean returned {describe(out)}: return one number, the mean of the real rows"


register(ProgramExercise(
    id="11.1", kernel=KERNEL, answer_name="masked_mean",
    title="the masked sum over the mask's sum: the exact mean of the real rows",
    solution='''
def masked_mean(values, mask):
    """The mean of `values` over the rows where mask == 1.0."""
    return jnp.sum(values * mask) / jnp.sum(mask)
''',
    run=_masked_mean_case,
    wrong={
        "def masked_mean(values, mask):\n    return jnp.mean(values * mask)\n":
            "the mask zeroes the padding rows' values, but you divide by every row (as jnp.mean does), "
            "padding included: divide the masked sum by the number of real rows, jnp.sum(mask)",
        "def masked_mean(values, mask):\n    return jnp.mean(values)\n":
            "that is the plain mean: it counts the padding rows, and their values, as examples",
        "def masked_mean(values, mask):\n    return jnp.sum(values) / jnp.sum(mask)\n":
            "the denominator counts only real rows, but the sum still adds the padding rows' values "
            "(a zero row's error is not zero): multiply by the mask before summing",
    },
    errors=(
        ErrorRule(lambda raw: "gather indexing" in raw, example=(
            "def masked_mean(values, mask):\n    return values[mask == 1].mean()\n"),
            say="values[...] picks some rows of an array split over the devices, and JAX refuses to guess "
                "how to split the rows it picks (ShardingTypeError). No need to pick them: multiply by the "
                "mask, so a padding row adds 0, and divide by jnp.sum(mask)"),
        ErrorRule(lambda raw: "unbound axis name" in raw, example=(
            "def masked_mean(values, mask):\n"
            "    return jax.lax.psum(jnp.sum(values * mask), 'device') / jax.lax.psum(jnp.sum(mask), 'device')\n"),
            say="masked_mean gets global arrays, outside any shard_map, so there is no axis to psum over: "
                "jnp.sum of a global array already adds the rows of every device"),
    ),
    families=(OutputRule(_not_one_number, example="def masked_mean(values, mask):\n    return values * mask / jnp.sum(mask)\n",
                   say=_one_number),),
    otherwise=lambda case: (f"on {case.devices} devices your function returned {[round(float(v), 4) for v in case.got]} "
                            "for three padded data sets, not the means of their real rows, "
                            f"{[round(float(v), 4) for v in case.want]}: a padding row "
                            "must add nothing to the sum and nothing to the count"),
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

from helpers.stack_data import pad_with_mask

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
        "    return num_records // num_hosts // local_devices * local_devices\n":
            "rounding down loses records: host 0 holds 501 of the 1001 records, more rows than you "
            "give it. Round the share up, and then up to a multiple of local_devices",
    },
    errors=(ErrorRule(lambda raw: "padded_rows" in raw, example=(
        "def eval_rows(num_records, num_hosts, local_devices):\n"
        "    return padded_rows(num_records, num_hosts, local_devices)\n"),
        say="the check runs your function in processes that have no padded_rows: write the "
            "arithmetic yourself, with math"),),
    otherwise=lambda case: (f"on {case.layout[0]} host(s) x {case.layout[1]} devices the hosts "
                            f"printed {case.got}, the reference {case.want} ([records, global rows, "
                            "masked mean; rows -1: a share did not fit, -2: JAX refused the rows]); "
                            "pass the fewest rows that hold every host's share"),
    hints=(
        "With 1001 records on 2 hosts, host 0 holds 501 and host 1 holds 500; every host must pass "
        "the same number of rows.",
        "Take the biggest share, math.ceil(num_records / num_hosts), and round it up to a multiple "
        "of local_devices.",
    ),
))


# --------------------------------------------------------------------------- 11.3 restore targets

_TARGET_SETUP = """\
from helpers import nnx_model, stack_ckpt
"""


def _leaf_name(path) -> str:
    name = jax.tree_util.keystr(path, simple=True, separator=".").removesuffix(".value")
    owner, _, rest = name.partition(".")
    return f"{ {'0': 'model', '1': 'optimizer'}.get(owner, owner)}.{rest}"


def _targets(targets_for, mesh) -> str:
    """What is wrong with the restore targets targets_for makes for `mesh` (its first wrong leaf), or 'right'."""
    from helpers import nnx_model  # Flax: imported when a check needs it

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
    """True when the function calls stack_ckpt.restore_targets (the exercise builds targets without it)."""
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
        "    return stack_ckpt.restore_targets(abstract_state, nnx_model.state_shardings(mesh))\n"),
        say="your targets are right, but stack_ckpt.restore_targets built them: build one "
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
