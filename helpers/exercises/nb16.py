"""Exercise of notebook 16: the capstone, a script in the Hugging Face Flax style ported and judged on real hosts."""
from __future__ import annotations

from helpers.exercises.core import Kernel, register
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


def _port(*, keys: str = "keys[0]", keys_spec: str = "P(DATA)", rows: str = "P(DATA)",
          loss: str = "jax.lax.pmean(tiny.dropout_loss_fn(p, x, y, {keys}), DATA)", grads: str = "") -> str:
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

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(DATA), P(DATA), {keys_spec}),
                                 out_specs=(P(), P())), donate_argnums=(0,))

    def train_step(params, batch, dropout_keys):
        params = jax.device_put(params, NamedSharding(mesh, P()))
        x, y, keys = (jax.make_array_from_process_local_data(rows, a)
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
_ROWS_ON_DEVICE = _port(rows="P('device')")
_FOLD_IN = _port(keys="jax.random.fold_in(keys[0], jax.lax.axis_index(DATA))")
_WHOLE_BLOCK = _port(keys="keys")


def _losses(case) -> list:
    """Host 0's losses, [] when the run gave none."""
    got = case.got
    return got[0] if isinstance(got, tuple) and got and isinstance(got[0], list) else []


register(ProcessExercise(
    id="16.1", kernel=KERNEL, answer_name="port", signature="(mesh)",
    title="the Hugging Face-style pmap script, ported: the same losses on 2 real hosts",
    setup=_SETUP, solution=SOLUTION, driver=_DRIVER, together=True, on=(2, 2),
    meshes=((2, 2), (2, 1)), timeout=150.0,
    wrong={
        _GRADIENT_TRAP: "your losses drift from the pmap script's after the first step: the gradient is "
                        "pmean'd after value_and_grad, as pmap did, but under shard_map the gradient of P() "
                        "parameters is already summed over the devices. Take the gradient of the pmean'd loss",
        _ONE_KEY: "every device drew the same dropout mask: you passed one key to all of them. pmap gave each "
                  "local device its own key (shard_prng_key's row d); pass this host's keys as its part of a "
                  "global array, P(DATA), and take the block's key[0] in the body",
        _FOLD_IN: "fold_in(key, axis_index(DATA)) gives every device of every host a key of its own: right for a "
                  "new run, as the tool advises, but other masks than the pmap script's, so other losses from the "
                  "first step. Port with shard_prng_key's keys first (row d for device d), then switch",
        _ROWS_ON_DEVICE: "P('device') names one mesh axis, so it says every host holds the same rows: JAX takes "
                         "each host's batch as its copy of one replicated array, and the hosts' different rows "
                         "give different losses. Each host holds its own rows: P(DATA)",
    },
    errors=(
        ErrorRule(lambda text: "key" in text.lower() and ("shape" in text or "(1, 2)" in text or "(1,2)" in text),
                  example=_WHOLE_BLOCK,
                  say="in the body, keys is this device's block of the global key array, one row of shape "
                      "(1, 2), where pmap handed its function one key of shape (2,): take keys[0]"),
        ErrorRule(lambda text: text.startswith("NameError"),
                  example=_port().replace("    rows = NamedSharding(mesh, P(DATA))\n", ""),
                  say=lambda case: f"{case.got.text.split(' on host')[0]}: on the hosts your function runs alone, "
                                   "with jax, jnp, np, P, NamedSharding, tiny, DATA and LR defined. Build what "
                                   "else it needs inside port, from mesh"),
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
