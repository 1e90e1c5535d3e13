"""Exercise of notebook 16: the capstone, a script in the Hugging Face Flax style ported and judged on real hosts."""
from __future__ import annotations

import re

from helpers.exercises.core import Kernel, axis_message, register
from helpers.exercises.processes import ProcessExercise
from helpers.exercises.rules import ErrorRule, OutputRule

KERNEL = Kernel(devices=8)  # the first cell: use_fake_devices(8)
_SETUP = 'from helpers.training import tiny\nDATA = ("host", "device")\nLR = 0.3\n'

# ------------------------------------------------------------- 16.1 port hf_style_train.py

# notebooks/scripts/hf_style_train.py's loop, with the learner's port in place of jax.pmap: every host
# hands it what `shard` and `shard_prng_key` were given (its own rows, unstacked, and its local devices'
# dropout keys). A layout (2, d) runs on the first d devices of each host, the global batch 16 rows per
# device as in the script. Every host returns the losses it read (rounded: runs of one program agree).
_DRIVER = '''
import jax
import numpy as np

from helpers.training import tiny
from helpers.devices import first_devices_mesh as _mesh

STEPS = 4


def output(namespace, layout):
    mesh = _mesh(layout)
    train_step = namespace["port"](mesh)
    if not callable(train_step):
        return ["not a function", type(train_step).__name__]
    rng, params, losses = jax.random.PRNGKey(0), tiny.init_params(), []
    for step in range(STEPS):
        x, y = tiny.host_batch(step, jax.process_index(), jax.process_count(), 16 * mesh.size)
        rng, dropout_rng = jax.random.split(rng)
        out = train_step(params, {"x": x, "y": y}, jax.random.split(dropout_rng, layout[1]))
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            return ["not (params, loss)", type(out).__name__]
        params, loss = out
        losses.append(round(float(np.asarray(loss).reshape(-1)[0]), 6))
    return losses
'''


def _port(*, keys: str = "keys[0]", keys_spec: str = "P(DATA)", rows: str = "P(DATA)", specs: str = "P(DATA)",
          loss: str = "jax.lax.pmean(tiny.dropout_loss_fn(p, x, y, {keys}), DATA)", grads: str = "",
          options: str = "", loss_spec: str = "P()", make: str = "jax.make_array_from_process_local_data(rows, a)"
          ) -> str:
    """A port of the script's step, with the given choices."""
    return f'''
def port(mesh):
    """The script's step on `mesh`: (params, batch, dropout_keys) -> (params, loss)."""
    rows = NamedSharding(mesh, {rows})

    def body(params, x, y, keys):
        def global_loss(p):
            return {loss.format(keys=keys)}

        loss, grads = jax.value_and_grad(global_loss)(params){grads}
        return jax.tree.map(lambda p, g: p - LR * g, params, grads), loss

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), {specs}, {specs}, {keys_spec}),
                                 out_specs=(P(), {loss_spec}){options}), donate_argnums=(0,))

    def train_step(params, batch, dropout_keys):
        params = jax.device_put(params, NamedSharding(mesh, P()))
        x, y, keys = ({make}
                      for a in (batch["x"], batch["y"], dropout_keys))
        return step(params, x, y, keys)

    return train_step
'''


SOLUTION = _port()
_GRADIENT_TRAP = _port(loss="tiny.dropout_loss_fn(p, x, y, {keys})",
                       grads="\n        grads = jax.lax.pmean(grads, DATA)\n        loss = jax.lax.pmean(loss, DATA)")
_ONE_KEY = '''
def port(mesh):
    rows = NamedSharding(mesh, P(DATA))

    def body(params, x, y, key):
        def global_loss(p):
            return jax.lax.pmean(tiny.dropout_loss_fn(p, x, y, key), DATA)

        loss, grads = jax.value_and_grad(global_loss)(params)
        return jax.tree.map(lambda p, g: p - LR * g, params, grads), loss

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(DATA), P(DATA), P()), out_specs=(P(), P())))

    def train_step(params, batch, dropout_keys):
        params = jax.device_put(params, NamedSharding(mesh, P()))
        x, y = (jax.make_array_from_process_local_data(rows, a) for a in (batch["x"], batch["y"]))
        key = jax.device_put(np.asarray(dropout_keys[0]), NamedSharding(mesh, P()))  # one key for all
        return step(params, x, y, key)

    return train_step
'''
_ROWS_NOT_IN_SPECS = _port(rows="P('device')")  # made with P('device'), passed where in_specs say P(DATA)
_ROWS_ON_DEVICE = _port(rows="P('device')", specs="P('device')", keys_spec="P('device')",
                        loss="jax.lax.pmean(tiny.dropout_loss_fn(p, x, y, {keys}), 'device')")
_MEAN_OVER_DEVICE = _port(loss="jax.lax.pmean(tiny.dropout_loss_fn(p, x, y, {keys}), 'device')",
                          grads="\n        loss = jax.lax.pmean(loss, 'host')")
_MEAN_OVER_HOST = _port(loss="jax.lax.pmean(tiny.dropout_loss_fn(p, x, y, {keys}), 'host')",
                        grads="\n        loss = jax.lax.pmean(loss, 'device')")
_ROWS_ON_DEVICE_REFUSED = _port(rows="P('device')", specs="P('device')", keys_spec="P('device')")
_PMAP_AXIS = _port(loss="jax.lax.pmean(tiny.dropout_loss_fn(p, x, y, {keys}), 'batch')")
_OWN_MESH = _port().replace("    rows = NamedSharding(mesh, P(DATA))\n",
                            "    mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), DATA)\n"
                            "    rows = NamedSharding(mesh, P(DATA))\n")
_NO_VMA = _port(options=", check_vma=False")
_FOLD_IN = _port(keys="jax.random.fold_in(keys[0], jax.lax.axis_index(DATA))")
_WHOLE_BLOCK = _port(keys="keys")
_DEVICE_PUT = _port(make="jax.device_put(a, rows)")
_LOSS_SPLIT = _port(loss_spec="P(DATA)", grads="\n        loss = loss.reshape(1)")
_LOSS_SCALAR_SPLIT = _port(loss_spec="P(DATA)")


def _losses(case) -> list:
    """Host 0's losses, [] when the run gave none."""
    got = case.got
    return got[0] if isinstance(got, tuple) and got and isinstance(got[0], list) else []


def _gradient_trap(case) -> str:
    return (f"your gradient is the sum of the devices' gradients, {case.devices} times the mean's on "
            f"{case.layout[0]} x {case.layout[1]} devices, so the losses drift from the pmap script's after "
            "the first step: under shard_map with check_vma on (the default), the gradient of P() parameters "
            "is already summed over the devices, and a pmean of it afterwards changes nothing. Take the "
            "gradient of jax.lax.pmean(loss, DATA)")


_ON_DEVICE = ("P('device') names one mesh axis, so it says the rows are the same on every host: JAX took each "
              "host's rows as its copy of one replicated batch")
_ON_DEVICE_FIX = "Each host holds its own rows and keys: P(DATA), and the loss pmean'd over DATA"


def _rows_on_device(case) -> str:
    hosts = "; ".join(f"host {h}: {losses[:2]}" for h, losses in enumerate(case.got) if isinstance(losses, list))
    return (f"{_ON_DEVICE}, each host trained on its own rows alone (a pmean over 'device' stays on the host), "
            f"and the hosts' losses parted ({hosts}, ...). {_ON_DEVICE_FIX}")


def _averaged_axis(source: str | None) -> str | None:
    """The one mesh axis ('host' or 'device') the first pmean of `source` that names a single axis averages over."""
    for start in (m.end() for m in re.finditer(r"\bpmean\(", source or "")):
        depth, end = 1, start
        while end < len(source) and depth:
            depth += {"(": 1, ")": -1}.get(source[end], 0)
            end += 1
        last = re.search(r"""(?:,|axis_name\s*=)\s*(['"])(host|device)\1\s*\)$""", source[start - 1:end])
        if last:
            return last.group(2)
    return None


def _mean_over_one_axis(case) -> str:
    axis = _averaged_axis(case.source)
    hosts, devices = case.layout
    times = case.devices // (hosts if axis == "host" else devices) if axis else 2
    how = {2: "twice", 3: "3 times"}.get(times, f"{times} times")
    return (f"your gradient is {how} the mean's on {hosts} hosts x {devices} devices, so the losses drift after the "
            "first step: the loss you take the gradient of is averaged over one mesh axis only"
            f"{f' ({axis!r})' if axis else ''}, and shard_map sums its gradient over every device of every host. "
            "Take the gradient of the loss pmean'd over DATA")


_MESH_IN_ERROR = re.compile(r"Mesh\('host': (\d+), 'device': (\d+)")


def _own_mesh(case) -> str:
    found = _MESH_IN_ERROR.search(case.got.raw)
    hosts, devices = case.layout
    built = (f"your port splits its arrays over a {found[1]} x {found[2]} mesh while it is given a {hosts} x {devices} "
             "one, and JAX could not split this host's rows and keys over it"
             if found and (int(found[1]), int(found[2])) != (hosts, devices) else
             "JAX could not split this host's rows and keys over the devices "
             f"(IndivisibleError on {hosts} x {devices})")
    return f"{built}: use the mesh you are given (the check runs on other meshes too), never one of your own"


_IN_SPECS = re.compile(r"passed (args\[\d+\]) of shape (\S+), where args\[\d+\] is bound to \w+'s parameter "
                       r"'(\w+)', corresponds to (in_specs\[\d+\]) of value (P\(.*?\)),? which")


def _not_in_specs(case) -> str:
    found = _IN_SPECS.search(case.got.raw)
    if found:
        split = re.search(r"\[\d+@(\([^)]*\)|\w+)", found.group(2))
        how = f"its axis 0 split over {split.group(1)!r}" if split else "no axis split"
        what = f"{found.group(3)} ({found.group(1)}) comes with {how}, but {found.group(4)} is {found.group(5)}"
    else:
        what = "an array you pass is not placed as its in_specs entry says"
    return (f"shard_map refused its input: {what}. On jax.make_mesh's mesh (Explicit axes) shard_map takes each "
            "array as it lies and never moves it: make the batch and the keys with the spec that in_specs names "
            "for them, NamedSharding(mesh, P(DATA)), each host's own rows and keys")


register(ProcessExercise(
    id="16.1", kernel=KERNEL, answer_name="port", signature="(mesh)",
    title="the Hugging Face-style pmap script, ported: the same losses on 2 real hosts",
    setup=_SETUP, solution=SOLUTION, driver=_DRIVER, together=True, on=(2, 2),
    meshes=((2, 2), (2, 1)), timeout=150.0,
    wrong={
        _GRADIENT_TRAP: _gradient_trap,
        _ONE_KEY: "every device drew the same dropout mask: you passed one key to all of them. pmap gave each "
                  "local device its own key (shard_prng_key's row d); pass this host's keys as its part of a "
                  "global array, P(DATA), and take the block's key[0] in the body",
        _FOLD_IN: "fold_in(key, axis_index(DATA)) gives every device of every host a key of its own: right for a "
                  "new run, as the tool advises, but other masks than the pmap script's, so other losses from the "
                  "first step. Port with shard_prng_key's keys first (row d for device d), then switch",
        _ROWS_ON_DEVICE: _rows_on_device,
        _MEAN_OVER_DEVICE: _mean_over_one_axis,
        _MEAN_OVER_HOST: _mean_over_one_axis,  # the same losses on 2 x 2: the message reads the axis in the source
        _PMAP_AXIS: axis_message("batch", ("host", "device")),
        _NO_VMA: "with check_vma=False, shard_map does not track that the parameters are the same on every device, "
                 "so it does not sum the gradient of the pmean'd loss over the devices: each device steps with the "
                 "gradient of its own rows' loss alone, and out_specs P() passes on parameters that now differ "
                 "between devices. Keep check_vma on (the default); with it off, take the gradient of each "
                 "device's own loss and pmean the gradients, as pmap did",
    },
    errors=(
        ErrorRule(lambda text: "can only accept axis_name" in text, example=_ROWS_ON_DEVICE_REFUSED,
                  say=f"{_ON_DEVICE}, and refused your pmean over DATA of a loss that does not vary over 'host'. "
                      f"{_ON_DEVICE_FIX}"),
        ErrorRule(lambda text: text.startswith("IndivisibleError"), example=_OWN_MESH, say=_own_mesh),
        ErrorRule(lambda text: "corresponds to in_specs" in text or "does not match the specs" in text,
                  example=_ROWS_NOT_IN_SPECS, say=_not_in_specs),
        ErrorRule(lambda text: "single key" in text or "key array of shape (1, 2)" in text,
                  example=_WHOLE_BLOCK,
                  say="in the body, keys is this device's block of the global key array, one row of shape "
                      "(1, 2), where pmap handed its function one key of shape (2,): take keys[0]"),
        ErrorRule(lambda text: text.startswith("NameError"),
                  example=_port().replace("    rows = NamedSharding(mesh, P(DATA))\n", ""),
                  say=lambda case: f"{case.got.text.split(' on host')[0]}: on the hosts your function runs alone, "
                                   "with jax, jnp, np, P, NamedSharding, tiny, DATA and LR defined. Build what "
                                   "else it needs inside port, from mesh"),
        ErrorRule(lambda text: "passed to device_put is not the same on each process" in text,
                  example=_DEVICE_PUT,
                  say="jax.device_put(a, sharding) takes a as the whole global array, the same on every host, "
                      "but each host has its own rows (JAX checked, and they differ): make the batch and the keys "
                      "with jax.make_array_from_process_local_data(NamedSharding(mesh, P(DATA)), a), which takes "
                      "a as this host's part"),
        ErrorRule(lambda text: "spans non-addressable" in text,
                  example=_LOSS_SPLIT,
                  say="the check could not read your loss on a host (np.asarray(loss) raised 'Fetching value "
                      "for jax.Array that spans non-addressable devices'): you return it split over the hosts "
                      "(out_specs P(DATA)), one block per device, so no host holds it all. Averaged over DATA, the "
                      "loss is one value, the same on every device: return it with out_specs P(), as the script's "
                      "metrics are"),
        ErrorRule(lambda text: "out_specs[1]" in text and "rank 0" in text,
                  example=_LOSS_SCALAR_SPLIT,
                  say="out_specs P(DATA) for the loss asks to split it over the devices, but it is a scalar, with "
                      "no axis to split: averaged over DATA, it is one value, the same on every device. Return it "
                      "with out_specs P()"),
    ),
    families=(
        OutputRule(lambda case: bool(_losses(case)) and abs(_losses(case)[0] - case.want[0][0]) > 1e-4,
                   example=_port(loss="jax.lax.pmean(tiny.loss_fn(p, x, y), DATA)"),
                   say="your first step's loss already differs from the pmap script's: the step is the "
                       "script's own, tiny.dropout_loss_fn of this device's rows with this device's key, "
                       "averaged over every device of every host"),
    ),
    otherwise="your port trains, but not as the pmap script does: compare each part with the script's "
              "(rows, keys, the gradient of the averaged loss)",
    hints=(
        "Three parts: the batch (shard's rows become this host's part of a global array), the keys "
        "(shard_prng_key's rows too: one per device), and the step (jax.jit(jax.shard_map(...)) whose loss is "
        "pmean'd before the gradient).",
        "jax.make_array_from_process_local_data(NamedSharding(mesh, P(DATA)), a) for x, y and the keys; the "
        "body's keys are a (1, 2) block, so keys[0] is this device's key; the loss is "
        "jax.lax.pmean(tiny.dropout_loss_fn(p, x, y, keys[0]), DATA).",
    ),
))
