"""Exercise of notebook 16: the capstone, a script in the Hugging Face Flax style ported and judged on real hosts."""
from __future__ import annotations

import re

from helpers.exercises.core import Kernel, axis_message, register
from helpers.exercises.processes import ProcessExercise
from helpers.exercises.rules import ErrorRule, OutputRule

KERNEL = Kernel(devices=8)  # the first cell: use_fake_devices(8)
_SETUP = 'from helpers.training import tiny\nDATA = ("host", "device")\n'

# ------------------------------------------------------------- 16.1 port hf_style_train.py

# notebooks/scripts/hf_style_train.py's loop, with the learner's port in place of state.replicate() and
# jax.pmap: every host hands `replicate` the script's TrainState (numpy parameters, AdamW, one dropout key)
# and `train_step` its own rows, unstacked. A layout (2, d) runs on the first d devices of each host, the
# global batch 16 rows per device as in the script. Every host returns the losses it read (rounded: runs of
# one program agree) and the state's step.
_DRIVER = """
import jax
import numpy as np
import optax
from flax.training import train_state

from helpers.training import tiny
from helpers.devices import first_devices_mesh as _mesh

STEPS, LR = 4, 0.03


class TrainState(train_state.TrainState):  # the script's
    dropout_rng: jax.Array


def output(namespace, layout):
    mesh = _mesh(layout)
    answer = namespace["port"](mesh)
    if not isinstance(answer, (tuple, list)) or len(answer) != 2 or not all(map(callable, answer)):
        return ["not (replicate, train_step)", type(answer).__name__]
    replicate, train_step = answer
    state = replicate(TrainState.create(apply_fn=tiny.dropout_predict, params=tiny.init_params(),
                                        tx=optax.sgd(LR, momentum=0.9), dropout_rng=jax.random.PRNGKey(0)))
    losses = []
    for step in range(STEPS):
        x, y = tiny.host_batch(step, jax.process_index(), jax.process_count(), 16 * mesh.size)
        out = train_step(state, {"x": x, "y": y})
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            return ["not (state, loss)", type(out).__name__]
        state, loss = out
        losses.append(round(float(np.asarray(loss).reshape(-1)[0]), 6))
    return [losses, int(np.asarray(state.step).reshape(-1)[0])]
"""

SOLUTION = '''
def port(mesh):
    """The script's state.replicate() and p_train_step on `mesh`: (replicate, train_step)."""
    rows = NamedSharding(mesh, P(DATA))

    def replicate(state):
        keys = jax.random.split(state.dropout_rng, mesh.shape["device"])  # shard_prng_key's, one per device
        state = jax.device_put(state, NamedSharding(mesh, P()))
        return state.replace(dropout_rng=jax.make_array_from_process_local_data(rows, keys))

    def body(state, keys, x, y):  # the state without its keys: P(); keys: this device's block, (1, 2)
        dropout_rng, new_dropout_rng = jax.random.split(keys[0])

        def global_loss(params):
            predictions = state.apply_fn(params, x, dropout_rng)
            return jax.lax.pmean(jnp.mean((predictions - y) ** 2), DATA)

        loss, grads = jax.value_and_grad(global_loss)(state.params)
        return state.apply_gradients(grads=grads), new_dropout_rng[None], loss

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(DATA), P(DATA), P(DATA)),
                                 out_specs=(P(), P(DATA), P())), donate_argnums=(0, 1))

    def train_step(state, batch):
        x, y = (jax.make_array_from_process_local_data(rows, a) for a in (batch["x"], batch["y"]))
        state, keys, loss = step(state.replace(dropout_rng=None), state.dropout_rng, x, y)
        return state.replace(dropout_rng=keys), loss

    return replicate, train_step
'''


def _port(*swaps: tuple[str, str]) -> str:
    """The reference with each (old, new) swap made; every `old` occurs in it once."""
    source = SOLUTION
    for old, new in swaps:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


_LOSS = "return jax.lax.pmean(jnp.mean((predictions - y) ** 2), DATA)"
_GRAD = "loss, grads = jax.value_and_grad(global_loss)(state.params)"
_SPECS = "in_specs=(P(), P(DATA), P(DATA), P(DATA))"
_ROWS = "rows = NamedSharding(mesh, P(DATA))\n"


def _mean_over(axis: str, then: str) -> str:
    """The reference with its loss averaged over `axis` alone, the gradient's loss then over `then`."""
    return _port((_LOSS, _LOSS.replace("DATA)", f"{axis!r})")),
                 (_GRAD, f"{_GRAD}\n        loss = jax.lax.pmean(loss, {then!r})"))


# The script's state.replicate() and step as the tool's draft leaves them: the whole state P(), its one key too.
_STATE_AS_ONE = '''
def port(mesh):
    rows = NamedSharding(mesh, P(DATA))

    def replicate(state):
        return jax.device_put(state, NamedSharding(mesh, P()))

    def body(state, x, y):
        dropout_rng, new_dropout_rng = jax.random.split(state.dropout_rng){fold}

        def global_loss(params):
            predictions = state.apply_fn(params, x, dropout_rng)
            return jax.lax.pmean(jnp.mean((predictions - y) ** 2), DATA)

        loss, grads = jax.value_and_grad(global_loss)(state.params)
        return state.apply_gradients(grads=grads, dropout_rng=new_dropout_rng), loss

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(DATA), P(DATA)), out_specs=(P(), P())),
                   donate_argnums=(0,))

    def train_step(state, batch):
        x, y = (jax.make_array_from_process_local_data(rows, a) for a in (batch["x"], batch["y"]))
        return step(state, x, y)

    return replicate, train_step
'''
_ONE_KEY = _STATE_AS_ONE.format(fold="")
_FOLD_IN = _STATE_AS_ONE.format(
    fold="\n        dropout_rng = jax.random.fold_in(dropout_rng, jax.lax.axis_index(DATA))")
# replicate made the keys P(DATA), but the step takes the whole state with P()
_KEYS_IN_P = _STATE_AS_ONE.format(fold="").replace(
    "        return jax.device_put(state, NamedSharding(mesh, P()))\n",
    "        keys = jax.random.split(state.dropout_rng, mesh.shape['device'])\n"
    "        state = jax.device_put(state, NamedSharding(mesh, P()))\n"
    "        return state.replace(dropout_rng=jax.make_array_from_process_local_data(rows, keys))\n").replace(
    "jax.random.split(state.dropout_rng)", "jax.random.split(state.dropout_rng[0])").replace(
    "dropout_rng=new_dropout_rng)", "dropout_rng=new_dropout_rng[None])")
_STATE_SPLIT = _port((_SPECS, "in_specs=(P(DATA), P(DATA), P(DATA), P(DATA))"))
_KEYS_OUT_P = _port(("out_specs=(P(), P(DATA), P())", "out_specs=(P(), P(), P())"))
_BY_HAND = _port(("return state.apply_gradients(grads=grads), new_dropout_rng[None], loss",
                  "params = jax.tree.map(lambda p, g: p - 0.3 * g, state.params, grads)\n"
                  "        return state.replace(params=params), new_dropout_rng[None], loss"))
_WHOLE_BLOCK = _port(("jax.random.split(keys[0])", "jax.random.split(keys)"))
_NEW_KEY_UNBLOCKED = _port(("new_dropout_rng[None], loss", "new_dropout_rng, loss"))
_GRADIENT_TRAP = _port((_LOSS, "return jnp.mean((predictions - y) ** 2)"),
                       (_GRAD, f"{_GRAD}\n        grads = jax.lax.pmean(grads, DATA)"
                               "\n        loss = jax.lax.pmean(loss, DATA)"))
_ROWS_NOT_IN_SPECS = _port((_ROWS, _ROWS.replace("P(DATA)", "P('device')")))
_ON_DEVICE_SWAPS = ((_ROWS, _ROWS.replace("P(DATA)", "P('device')")),
                    (_SPECS, "in_specs=(P(), P('device'), P('device'), P('device'))"),
                    ("out_specs=(P(), P(DATA), P())", "out_specs=(P(), P('device'), P())"))
_ROWS_ON_DEVICE = _port(*_ON_DEVICE_SWAPS, (_LOSS, _LOSS.replace("DATA)", "'device')")))
_ROWS_ON_DEVICE_REFUSED = _port(*_ON_DEVICE_SWAPS)
_MEAN_OVER_DEVICE = _mean_over("device", "host")
_MEAN_OVER_HOST = _mean_over("host", "device")
_PMAP_AXIS = _port((_LOSS, _LOSS.replace("DATA)", "'batch')")))
_OWN_MESH = _port((_ROWS, "mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), DATA)\n    " + _ROWS))
_NO_VMA = _port(("out_specs=(P(), P(DATA), P()))", "out_specs=(P(), P(DATA), P()), check_vma=False)"))
_DEVICE_PUT = _port(("(jax.make_array_from_process_local_data(rows, a) for a", "(jax.device_put(a, rows) for a"))
_LOSS_SPLIT = _port(("out_specs=(P(), P(DATA), P())", "out_specs=(P(), P(DATA), P(DATA))"),
                    (_GRAD, f"{_GRAD}\n        loss = loss.reshape(1)"))
_LOSS_SCALAR_SPLIT = _port(("out_specs=(P(), P(DATA), P())", "out_specs=(P(), P(DATA), P(DATA))"))


def _host(got, host: int = 0) -> tuple[list, int | None]:
    """(losses, the state's last step) of one host's output; ([], None) when the run gave none."""
    mine = got[host] if isinstance(got, tuple) and len(got) > host else None
    if isinstance(mine, list) and len(mine) == 2 and isinstance(mine[0], list):
        return mine[0], mine[1]
    return [], None


def _losses(case) -> list:
    """Host 0's losses, [] when the run gave none."""
    return _host(case.got)[0]


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
    hosts = "; ".join(f"host {h}: {_host(case.got, h)[0][:2]}" for h in range(len(case.got or ())))
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


_ONE_STATE = ("the script's state.replicate() gave each local device a key of its own (shard_prng_key's row d). "
              "The state is P() but for its dropout_rng: make that this host's keys, P(DATA), and give the "
              "step the keys with P(DATA) and the rest of the state with P() (or a spec per field of the state)")


def _step_stayed(case) -> str:
    return (f"your state's step is still {_host(case.got)[1]} after {len(_losses(case))} steps, and the optimizer's "
            "momentum never moved: you updated the parameters yourself. The script's step returns "
            "state.apply_gradients(grads=grads), which moves the parameters, the optimizer state and the step "
            "together; call it in the body, where the state is P()")


register(ProcessExercise(
    id="16.1", kernel=KERNEL, answer_name="port", signature="(mesh)",
    title="the Hugging Face-style pmap script, ported: the same losses on 2 real hosts",
    setup=_SETUP, solution=SOLUTION, driver=_DRIVER, together=True, on=(2, 2),
    meshes=((2, 2), (2, 1)), timeout=240.0,
    wrong={
        _GRADIENT_TRAP: _gradient_trap,
        _ONE_KEY: "every device drew the same dropout mask: you placed the whole state with P(), its one key "
                  f"too, so every device split the same key. {_ONE_STATE}",
        _FOLD_IN: "fold_in(key, axis_index(DATA)) gives every device of every host a key of its own: right for a "
                  "new run, as the tool advises, but other masks than the pmap script's, so other losses from the "
                  "first step. Port with shard_prng_key's keys first (row d for device d), then switch",
        _OWN_MESH: "on the check's 2 x 1 mesh (the first device of each host) your step ran on a mesh of its own, "
                   "with other devices, rows and keys: use the mesh you are given (the check runs on other meshes "
                   "too), never one of your own",
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
        ErrorRule(lambda text: "does not match the specs of the input" in text and "uint32[" in text,
                  example=_KEYS_IN_P,
                  say="shard_map refused your state: its dropout_rng is this host's keys, split over the devices "
                      "(P(DATA)), but the in_specs entry for the state says P() for all of it. Only the keys are "
                      "per device: give the step the keys with P(DATA) and the rest of the state with P() (or a "
                      "spec per field of the state), and the new keys back with P(DATA) too"),
        ErrorRule(lambda text: "in_specs" in text and "].step," in text and "rank 0" in text,
                  example=_STATE_SPLIT,
                  say="in_specs P(DATA) for the state asks to split all of it over the devices, but its step count "
                      "is a scalar, and the parameters and the momentum are one value for every device: the state "
                      "is P(), as jax_utils.replicate made it, and only its dropout_rng is per device, P(DATA)"),
        ErrorRule(lambda text: text.startswith("ValueError: out_specs[") and "is P() which implies" in text,
                  example=_KEYS_OUT_P,
                  say="out_specs P() says what you return is the same on every device, but the new dropout keys "
                      "differ between devices (each split its own key): return them with P(DATA), as they came in"),
        ErrorRule(lambda text: "corresponds to in_specs" in text or "does not match the specs" in text,
                  example=_ROWS_NOT_IN_SPECS, say=_not_in_specs),
        ErrorRule(lambda text: "single key" in text or "key array of shape (1, 2)" in text,
                  example=_WHOLE_BLOCK,
                  say="in the body, keys is this device's block of the global key array, one row of shape "
                      "(1, 2), where pmap handed its function one key of shape (2,): take keys[0]"),
        ErrorRule(lambda text: "invalid PRNG key data" in text,
                  example=_NEW_KEY_UNBLOCKED,
                  say="the new keys you return come back as one long row: each device returned a key of shape "
                      "(2,) with out_specs P(DATA), so the next step's block held no whole key. Return each "
                      "device's new key as a block of one key, new_dropout_rng[None] (shape (1, 2))"),
        ErrorRule(lambda text: text.startswith("NameError"),
                  example=_port((_ROWS, "")),
                  say=lambda case: f"{case.got.text.split(' on host')[0]}: on the hosts your function runs alone, "
                                   "with jax, jnp, np, P, NamedSharding, tiny and DATA defined. Build what else it "
                                   "needs inside port, from mesh"),
        ErrorRule(lambda text: "passed to device_put is not the same on each process" in text,
                  example=_DEVICE_PUT,
                  say="jax.device_put(a, sharding) takes a as the whole global array, the same on every host, "
                      "but each host has its own rows (JAX checked, and they differ): make the batch with "
                      "jax.make_array_from_process_local_data(NamedSharding(mesh, P(DATA)), a), which takes "
                      "a as this host's part"),
        ErrorRule(lambda text: "spans non-addressable" in text,
                  example=_LOSS_SPLIT,
                  say="the check could not read your loss on a host (np.asarray(loss) raised 'Fetching value "
                      "for jax.Array that spans non-addressable devices'): you return it split over the hosts "
                      "(out_specs P(DATA)), one block per device, so no host holds it all. Averaged over DATA, the "
                      "loss is one value, the same on every device: return it with out_specs P(), as the script's "
                      "metrics are"),
        ErrorRule(lambda text: text.startswith("ValueError: out_specs[") and "rank 0" in text,
                  example=_LOSS_SCALAR_SPLIT,
                  say="out_specs P(DATA) for the loss asks to split it over the devices, but it is a scalar, with "
                      "no axis to split: averaged over DATA, it is one value, the same on every device. Return it "
                      "with out_specs P()"),
    ),
    families=(
        OutputRule(lambda case: bool(_losses(case)) and _host(case.got)[1] != _host(case.want)[1],
                   example=_BY_HAND, say=_step_stayed),
        OutputRule(lambda case: bool(_losses(case)) and abs(_losses(case)[0] - _host(case.want)[0][0]) > 1e-4,
                   example=_port(("predictions = state.apply_fn(params, x, dropout_rng)",
                                  "predictions = tiny.predict(params, x)")),
                   say="your first step's loss already differs from the pmap script's: the step is the "
                       "script's own, the mean squared error of state.apply_fn(params, x, key) on this device's "
                       "rows with this device's key, averaged over every device of every host"),
    ),
    otherwise="your port trains, but not as the pmap script does: compare each part with the script's "
              "(the state, its keys, the rows, the gradient of the averaged loss)",
    hints=(
        "Four parts: replicate (what state.replicate() did: the state on every device, and a key per device), "
        "the batch (shard's rows become this host's part of a global array), the step "
        "(jax.jit(jax.shard_map(...)) whose loss is pmean'd before the gradient), and what the step takes and "
        "returns: look at which fields of the state are the same on every device and which are not.",
        "The parameters, the momentum and the step count are one value for every device: P(). The dropout key "
        "is not: replicate makes this host's keys (jax.random.split(key, mesh.shape['device'])) its part of a "
        "P(DATA) array. state.replace(dropout_rng=None) is a state that is P() throughout; the body gets its "
        "keys as a (1, 2) block.",
    ),
))
