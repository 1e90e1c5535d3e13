"""Exercises of notebook 17: the Flax NNX program of google/flax#4751, from nnx.pmap to nnx.shard_map."""
from __future__ import annotations

import re

import numpy as np
from jax.sharding import AxisType

from helpers.exercises.core import Kernel, Mistake, axis_message, describe, register
from helpers.exercises.kinds import ProgramExercise
from helpers.exercises.processes import ProcessExercise
from helpers.exercises.rules import ErrorRule, OutputRule

KERNEL = Kernel(devices=8)  # the first cell: use_fake_devices(8)
DATA = ("host", "device")
_SETUP = ("from flax import nnx\n"
          "from helpers.training.nnx_dropout import Model, Seen, step_body\n"
          "DATA = ('host', 'device')\n")


def _groups(keys: np.ndarray) -> tuple[int, ...]:
    """For each device, the first device with the same key: (0, 1, 2, ...) when every key differs."""
    return tuple(next(j for j in range(len(keys)) if (keys[j] == keys[i]).all()) for i in range(len(keys)))


# ------------------------------------------------------------- 17.1 per-device state made global

_GLOBAL_DRIVER = '''
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from helpers.training.nnx_dropout import Model
from helpers.devices import first_devices_mesh as _mesh


def output(namespace, layout):
    """[global shape, for each of this host's devices of the mesh: [the global row its block of Seen starts
    at (None: every row), that block] (None: nothing)]."""
    mesh = _mesh(layout)
    model = Model(nnx.Rngs(params=0, dropout=1), devices=layout[1])
    mine = np.arange(2 * layout[1], dtype=np.float32).reshape(layout[1], 2) + 100 * jax.process_index()
    model.seen.set_value(jnp.asarray(mine))  # this host's rows, 100 * host + ...: told apart by host
    namespace["to_global"](model, mesh)
    seen = model.seen[...]
    if not isinstance(seen, jax.Array):
        return ["not a jax.Array", type(seen).__name__]
    held = {s.device: [s.index[0].start, np.asarray(s.data).tolist()] for s in seen.addressable_shards}
    return [list(seen.shape), [held.get(d) for d in mesh.devices.flat if d.process_index == jax.process_index()]]
'''


def _to_global(body: str) -> str:
    return f"def to_global(model, mesh):\n{body}"


_SPEC_ON_DEVICE = _to_global(
    "    rows = NamedSharding(mesh, P('device'))\n"
    "    model.seen.set_value(jax.make_array_from_process_local_data(rows, model.seen[...]))\n")
_SCATTER = _to_global(
    "    rows = NamedSharding(mesh, P(DATA))\n"
    "    model.seen[...] = jax.make_array_from_process_local_data(rows, model.seen[...])\n")
_AXES_SWAPPED = _to_global(
    "    rows = NamedSharding(mesh, P(('device', 'host')))\n"
    "    model.seen.set_value(jax.make_array_from_process_local_data(rows, model.seen[...]))\n")
_REPLICATED = _to_global(
    "    rows = NamedSharding(mesh, P())\n"
    "    model.seen.set_value(jax.make_array_from_process_local_data(rows, model.seen[...]))\n")
_DEVICE_PUT = _to_global(
    "    model.seen.set_value(jax.device_put(model.seen[...], NamedSharding(mesh, P(DATA))))\n")
_HOST_ONLY = _to_global(
    "    rows = NamedSharding(mesh, P('host'))\n"
    "    model.seen.set_value(jax.make_array_from_process_local_data(rows, model.seen[...]))\n")
_LOCAL_SHAPE = _to_global(
    "    rows = NamedSharding(mesh, P(DATA))\n"
    "    model.seen.set_value(jax.make_array_from_process_local_data(rows, model.seen[...], model.seen.shape))\n")
_NOT_SET = _to_global(
    "    rows = NamedSharding(mesh, P(DATA))\n"
    "    return jax.make_array_from_process_local_data(rows, model.seen[...])\n")


def _indivisible(case) -> str:
    """Seen's rows do not split over the mesh: a global_shape of this host's, or a mesh of the learner's own."""
    source = case.source or ""
    if "make_mesh" in source or "Mesh(" in source:
        return ("your function builds a mesh of its own: use the mesh it is given. The check runs it on other "
                "meshes too (2 hosts of 1 device each), where a mesh of every local device has more devices than "
                "Seen has rows")
    if "shape" in source:
        return ("global_shape is the whole array's shape, every host's rows, not this host's (model.seen.shape): "
                "leave it out, and JAX adds up the hosts' parts itself")
    return "the global array's rows do not split evenly over the mesh: one row of Seen per device, P(DATA)"


def _still_local(case) -> bool:
    """Every host's Seen still has this host's shape: nothing made it global."""
    return isinstance(case.got, tuple) and all(
        isinstance(out, list) and out[:1] == [[case.mesh[1], 2]] for out in case.got)


register(ProcessExercise(
    id="17.1", kernel=KERNEL, answer_name="to_global", signature="(model, mesh)",
    title="per-device state of shape (local devices, 2), made one global array",
    setup=_SETUP,
    solution='''
def to_global(model, mesh):
    """Make model.seen, this host's rows (one per local device), this host's part of one global array."""
    rows = NamedSharding(mesh, P(DATA))
    model.seen.set_value(jax.make_array_from_process_local_data(rows, model.seen[...]))
''',
    driver=_GLOBAL_DRIVER, together=True, on=(2, 2),
    meshes=((2, 2), (2, 1)),
    timeout=120.0,
    wrong={
        _SPEC_ON_DEVICE: lambda case: (
            f"P('device') names one mesh axis, so it says every host holds the same rows: your global Seen "
            f"has {case.got[0][0][0]} rows, not {case.mesh[0] * case.mesh[1]}, and JAX takes each host's rows "
            "as its copy of one replicated array, so the hosts' copies disagree. Name both axes: P(DATA)"),
        _AXES_SWAPPED: lambda case: (
            f"P(('device', 'host')) numbers the devices 'device' first: on {case.mesh[0]} hosts of {case.mesh[1]} "
            f"devices, host 0's devices hold global rows {[row for row, _ in case.got[0][1]]}, not "
            f"{list(range(case.mesh[1]))}, so device k no longer holds row k and the hosts' rows are interleaved. "
            "Name the mesh's axes in its own order, 'host' first: P(DATA). (16.1 passes this spec: a loss "
            "averaged over every row does not care which global row a device holds, but Seen's rows are each "
            "device's own state)"),
        _REPLICATED: lambda case: (
            f"P() says Seen is replicated, the whole array on every device, so JAX takes each host's "
            f"{case.mesh[1]} rows as its copy of one {case.got[0][0][0]}-row array: your global Seen has "
            f"{case.got[0][0][0]} rows, not {case.mesh[0] * case.mesh[1]}, and the hosts' copies differ, with no "
            "error. Its rows go one per device of every host: P(DATA)"),
        _HOST_ONLY: lambda case: (
            f"P('host') splits Seen's rows over the hosts only: each of a host's {case.mesh[1]} devices holds all "
            f"{case.mesh[1]} of that host's rows, where device k should hold row k alone. Split them over both "
            "axes: P(DATA)"),
    },
    errors=(
        ErrorRule(lambda text: "ShardingTypeError" in text or "Incompatible types for broadcasting" in text,
                  example=_SCATTER,
                  say="model.seen[...] = new puts new in as it is only when it has the shape, dtype and sharding "
                      "of the array Seen holds; the global array has another shape and sharding, so it writes "
                      "into this host's own array instead (a scatter). Replace the array: "
                      "model.seen.set_value(new)"),
        ErrorRule(lambda text: text.startswith("NameError"),
                  example=_to_global("    model.seen.set_value(jax.make_array_from_process_local_data(rows, "
                                     "model.seen[...]))\n"),
                  say=lambda case: f"{case.got.text.split(' on host')[0]}: on the hosts your function runs alone, "
                                   "with jax, jnp, np, P, NamedSharding, nnx and DATA defined. Build what else it "
                                   "needs inside it, from mesh"),
        ErrorRule(lambda text: "evenly divide" in text, example=_DEVICE_PUT,
                  say=lambda case: f"{'jax.reshard' if 'reshard' in (case.source or '') else 'jax.device_put'} "
                                   "takes the whole global array, the same on every host, and each host here has "
                                   "only its own rows. jax.make_array_from_process_local_data takes this host's "
                                   "part"),
        ErrorRule(lambda text: "IndivisibleError" in text, example=_LOCAL_SHAPE, say=_indivisible),
    ),
    families=(
        OutputRule(_still_local, example=_NOT_SET,
                   say="Seen is still this host's own array, of shape (local devices, 2): make it this host's "
                       "part of a global array with jax.make_array_from_process_local_data, and put that in "
                       "the model with model.seen.set_value(...)"),
    ),
    otherwise="make Seen one global array, its rows over every device of every host: P(DATA)",
    hints=(
        "pmap took the leading axis of this host's Seen as this host's devices. On the mesh, that axis is "
        "this host's part of a global array whose rows go one per device of every host.",
        "One jax function makes a global array from each host's part and a NamedSharding; a Variable's "
        "set_value replaces the array it holds.",
    ),
))


# ------------------------------------------------------------- 17.2 way one: pmap's step as a shard_map

def _step(*, splits: str = "mesh.size", seen: str = "P(DATA)", axis: str = "DATA",
          vma: str = ", check_vma=False", squeeze: bool = True, put_back: bool = True) -> str:
    """A make_train_step of way one, with the given choices."""
    if squeeze and not put_back:
        body = ("        nnx.update(model, jax.tree.map(lambda a: a[0], nnx.state(model, per_device)))\n"
                f"        return step_body(model, x[0], y[0], axis={axis})\n")
    elif squeeze:
        body = ("        nnx.update(model, jax.tree.map(lambda a: a[0], nnx.state(model, per_device)))\n"
                f"        loss, kept = step_body(model, x[0], y[0], axis={axis})\n"
                "        nnx.update(model, jax.tree.map(lambda a: a[None], nnx.state(model, per_device)))\n"
                "        return loss[None], kept[None]\n")
    else:
        body = f"        return step_body(model, x, y, axis={axis})\n"
    return (
        "def make_train_step(mesh):\n"
        "    per_device = (Seen, nnx.RngState)\n"
        f"    specs = nnx.StateSharding({{Seen: {seen}, nnx.RngState: P(DATA), ...: P()}})\n\n"
        f"    @nnx.split_rngs(splits={splits})\n"
        "    @nnx.jit\n"
        "    @nnx.shard_map(mesh=mesh, in_specs=(specs, P(DATA), P(DATA)), out_specs=(P(DATA), P(DATA))"
        f"{vma})\n"
        "    def train_step(model, x, y):  # x: f32[1, 2, 4], this device's block\n"
        + body +
        "\n    return train_step\n")


_STEPS_RUN = 2


def _trained(fn, course_mesh):
    """Two steps of the learner's step on an Auto mesh: (each step's losses, which devices drew the same
    masks at each step, Seen after them, the parameters' norm)."""
    import jax
    from flax import nnx
    from jax import P
    from jax.sharding import NamedSharding

    from helpers.training import nnx_dropout

    devices = course_mesh.size
    mesh = jax.sharding.Mesh(course_mesh.devices, course_mesh.axis_names, axis_types=(AxisType.Auto,) * 2)
    rows = NamedSharding(mesh, P(DATA))
    model = nnx_dropout.Model(nnx.Rngs(params=0, dropout=1), devices=devices)
    model.seen.set_value(jax.device_put(model.seen[...], rows))
    step = fn(mesh)
    if not callable(step):
        raise Mistake(f"make_train_step(mesh) should return the step function, but returned {describe(step)}")
    losses, masks = [], []
    for n in range(_STEPS_RUN):
        x, y = (jax.device_put(a, rows) for a in nnx_dropout.host_batch(n, 0, 1, devices))
        out = step(model, x, y)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise Mistake(f"the step should return (loss, kept), but returned {describe(out)}")
        loss, kept = (np.asarray(a) for a in out)
        if loss.shape != (devices,) or kept.shape[:1] != (devices,):
            raise Mistake(f"the step should return each device's loss and mask, P(DATA): shapes ({devices},) and "
                          f"({devices}, 2, 8); yours are {loss.shape} and {kept.shape}")
        losses.append(np.round(loss.astype(np.float64), 5))
        masks.append(_groups(kept.reshape(devices, -1)))
    seen = np.asarray(model.seen[...], np.float64).round(4)
    return tuple(losses), tuple(masks), seen, round(nnx_dropout.parameter_norm(model), 5)


# shard_map's error for split keys it cannot spread over the mesh: the counts' array, uint32[n], on m devices
_KEYS_UNEVEN = re.compile(r"of shape uint32\[(\d+)\].*?in_specs\[0\]\.states.*?\(of total size (\d+)\), but \d+ "
                          r"does not evenly divide", re.S)


def _uneven_keys(case) -> str:
    keys, devices = _KEYS_UNEVEN.search(case.got.raw).groups()
    return (f"you split the keys into {keys}, and shard_map cannot spread {keys} keys over the mesh's {devices} "
            "devices: each device needs one. (On 2 hosts of 4 devices, splits=jax.local_device_count() meets "
            "this error: 4 keys for 8 devices.) Split them over the mesh's devices: mesh.size")


def _losses_differ_by_host(case) -> bool:
    losses = case.got[0][0] if isinstance(case.got, tuple) else None
    return losses is not None and len(set(np.asarray(losses).tolist())) > 1


register(ProgramExercise(
    id="17.2", kernel=KERNEL, answer_name="make_train_step",
    title="way one: nnx.pmap's step as an nnx.shard_map, the keys split over every device",
    setup=_SETUP,
    solution=_step(),
    run=_trained,
    meshes=((2, 4), (2, 2)),
    wrong={
        _step(splits="jax.local_device_count()"): lambda case: (
            f"you split the keys into {KERNEL.devices}, but this mesh has {case.devices} devices, so each device "
            f"got {KERNEL.devices // case.devices} of them, not its own key of a split over the mesh. "
            f"jax.device_count() and jax.local_device_count() are {KERNEL.devices} in this kernel whatever the "
            "mesh; on 2 hosts of 4 devices, jax.local_device_count() is 4, and shard_map refuses 4 keys for 8 "
            "devices. Split them over the mesh's devices: mesh.size"),
        _step(axis="'device'"): (
            "the hosts' losses differ: your step averages over 'device' alone, so each host averages its own "
            "devices only, and each host applies another gradient. nnx.pmap's axis spanned every device of "
            "every host: DATA"),
        _step(vma=""): lambda case: (
            f"with check_vma on (the default), the gradient of the replicated parameters is already summed over "
            f"the {case.devices} devices, and step_body's pmean of it keeps the sum: each step is "
            f"{case.devices} x too large (the gradient trap, notebook 06). step_body is pmap's body: run it "
            "as pmap did, check_vma=False"),
        _step(axis="'batch'"): axis_message("batch", DATA),
        _step().replace("nnx.RngState: P(DATA)", "nnx.RngState: P()"): (
            "every device drew the same masks: the random state's spec P() gives every device all the split "
            "keys, and each takes the first. The keys go one per device, as Seen's rows do: nnx.RngState: "
            "P(DATA)"),
        _step(seen="P('device')"): (
            "Seen's spec names 'device' alone, so each host's devices got the same rows of Seen: its rows are "
            "one per device of every host, P(DATA)"),
    },
    errors=(
        ErrorRule(lambda text: _KEYS_UNEVEN.search(text) is not None, example=_step(splits="mesh.shape['device']"),
                  say=_uneven_keys),
        ErrorRule(lambda text: "in_specs entry which is too long" in text and "rank 0" in text,
                  example=_step().replace("    @nnx.split_rngs(splits=mesh.size)\n", ""),
                  say="the random state reached shard_map as one key of shape (), and its spec P(DATA) splits "
                      "an axis it does not have: split the keys first, one per device of the mesh, with "
                      "nnx.split_rngs(splits=mesh.size) around the step"),
        ErrorRule(lambda text: "out_specs entry which is too long" in text and "rank 0" in text,
                  example=_step(put_back=False),
                  say="your body dropped each block's device axis but never put it back: shard_map joins the "
                      "devices' blocks along the axis out_specs splits, so every output and every per-device "
                      "variable needs it: return loss[None], kept[None], and update the model with a[None] of "
                      "Seen and the random state"),
        ErrorRule(lambda text: "fold_in accepts a single key" in text, example=_step(squeeze=False),
                  say="the body got each device's block with its device axis kept: a key of shape (1,) where "
                      "nnx.pmap gave a key of shape (). Do what pmap did: take a[0] of each per-device variable "
                      "(and x[0], y[0]) before step_body, and put the axis back after"),
    ),
    families=(
        OutputRule(_losses_differ_by_host, example=_step(axis="'host'"),
                   say="your devices report different losses: average the loss and the gradient over every "
                       "device of every host, DATA"),
    ),
    otherwise="run step_body on each device as nnx.pmap did, its keys split over every device of the mesh",
    hints=(
        "Start from section 3's last attempt: Auto axes, nnx.StateSharding with P(DATA) for Seen and "
        "nnx.RngState, P() for the rest, and a body that first drops each block's device axis.",
        "Wrap nnx.shard_map(..., check_vma=False) in nnx.jit, and that in nnx.split_rngs over the mesh's "
        "devices. In the body, nnx.update the model with each per-device variable's block [0] before "
        "step_body, and with [None] after; return the loss and the mask with their device axis back.",
    ),
))


# ------------------------------------------------------------- 17.3 a BatchNorm in way one

_FEATURES = 3


def _rows(mesh):
    """4 rows a device, each row's scale its own, so every device's statistics differ: f32[4 * devices, 3]."""
    import jax
    import jax.numpy as jnp
    n = 4 * mesh.size
    return jax.random.normal(jax.random.key(0), (n, _FEATURES)) * jnp.arange(1.0, n + 1)[:, None]


def _statistics(fn, course_mesh):
    """The running mean and variance of the learner's BatchNorm after one training call in way one's
    shard_map (check_vma=False, its state out with P(), as the port's parameters are)."""
    import jax
    from flax import nnx
    from jax import P

    mesh = jax.sharding.Mesh(course_mesh.devices, course_mesh.axis_names, axis_types=(AxisType.Auto,) * 2)
    norm = fn(nnx.Rngs(0))
    if not isinstance(norm, nnx.BatchNorm):
        raise Mistake(f"make_norm(rngs) should return an nnx.BatchNorm, but returned {describe(norm)}")
    if norm.num_features != _FEATURES:
        raise Mistake(f"the model's features are {_FEATURES} wide: nnx.BatchNorm({_FEATURES}, ...), not "
                      f"{norm.num_features}")
    graphdef, state = nnx.split(norm)

    def body(state, x):  # x: this device's 4 rows
        norm = nnx.merge(graphdef, state)
        norm(x)
        return nnx.state(norm)

    new = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(DATA)), out_specs=P(), check_vma=False))(
        state, _rows(mesh))
    return np.asarray(new["mean"][...]), np.asarray(new["var"][...])


def _kept_one_device(case) -> str:
    return (f"each device normalised by its own 4 rows' statistics, and out_specs P() kept one device's: running "
            f"mean {np.round(case.got[0].astype(float), 3).tolist()}, where the global batch gives "
            f"{np.round(case.want[0].astype(float), 3).tolist()}. With check_vma=False nothing checks that what you call "
            "replicated is: give the BatchNorm the mesh axes, axis_name=DATA")


register(ProgramExercise(
    id="17.3", kernel=KERNEL, answer_name="make_norm",
    title="a BatchNorm in way one: statistics of the global batch",
    solution='''
def make_norm(rngs):
    """The port's BatchNorm: its statistics over every device's rows, of every host."""
    return nnx.BatchNorm(3, axis_name=DATA, rngs=rngs)
''',
    setup="from flax import nnx\nDATA = ('host', 'device')\n",
    run=_statistics,
    wrong={
        "def make_norm(rngs):\n    return nnx.BatchNorm(3, rngs=rngs)\n": _kept_one_device,
        "def make_norm(rngs):\n    return nnx.BatchNorm(3, axis_name='device', rngs=rngs)\n":
            "the statistics are averaged over one host's devices only ('device'): each host has its own, and "
            "out_specs P() kept host 0's. Average over every device of every host: axis_name=DATA",
        "def make_norm(rngs):\n    return nnx.BatchNorm(3, axis_name='host', rngs=rngs)\n":
            "the statistics are averaged over the hosts only ('host'): device k of each host is averaged with "
            "device k of the others, not with its neighbours. Average over both axes: axis_name=DATA",
        "def make_norm(rngs):\n    return nnx.BatchNorm(3, axis_name=DATA, use_running_average=True, "
        "rngs=rngs)\n":
            "use_running_average=True normalises with the stored statistics and never updates them: the running "
            "mean is still 0 after a training step. Leave it False for training (model.eval() sets it for "
            "evaluation)",
        "def make_norm(rngs):\n    return nnx.BatchNorm(3, axis_name='batch', rngs=rngs)\n": axis_message("batch", DATA),
    },
    otherwise="the running statistics after one step should be the global batch's: nnx.BatchNorm(3, "
              "axis_name=..., rngs=rngs) with the mesh axes",
    hints=(
        "pmap's program wrote nnx.BatchNorm(..., axis_name='batch'): the statistics were averaged over pmap's "
        "axis. On the mesh, which axes hold the devices of every host?",
        "axis_name takes a tuple of mesh axes, as jax.lax.pmean does.",
    ),
))
