"""Exercises of notebook 06: porting pmap to shard_map (types and psum, the gradient trap, masked means, RNG)."""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
from jax import P

from helpers.exercises import forms
from helpers.exercises.core import Kernel, Mistake, axis_message, describe, register
from helpers.exercises.kinds import (
    ProgramExercise, ValueExercise, course_mesh, entry, equations, placed, varying_over,
)
from helpers.exercises.rules import CodeRule, ErrorRule, OutputRule, ValueRule

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)
DATA = ("host", "device")
_DATA_SETUP = 'DATA = ("host", "device")\n'
_MODEL_SETUP = _DATA_SETUP + '''LR = 0.1


def loss_fn(params, x, y):
    pred = x @ params["w"] + params["b"]
    return jnp.mean((pred - y) ** 2)
'''
_MISMATCH = re.compile(r"in_specs passed to shard_map: (P\(.*?\)) does not match the specs of the input: "
                       r"(P\(.*?\)) for arg")


# --------------------------------------------------------------------------- 06.1

_PSUMS = {  # each psum of the prompt, as the notebook writes it and as a shard_map body
    "psum(w, DATA)": lambda w, d, x: jax.lax.psum(w, DATA),
    "psum(x, 'device')": lambda w, d, x: jax.lax.psum(x, "device"),
    "psum(d, DATA)": lambda w, d, x: jax.lax.psum(d, DATA),
}
_OUT_SPECS = (P(), P("host"), P())  # each psum's result varies over the axes it leaves out


def _device0_gets(psum: str, out_spec) -> float | None:
    """What device 0 gets from one of _PSUMS, run by JAX on the notebook's w (1.0 on every device), d (device d
    of each host holds d) and x (device k holds k); None when JAX refuses to trace it."""
    mesh = course_mesh((2, 4))
    body = _PSUMS[psum]
    inputs = (placed(mesh, jnp.float32(1.0), P()), placed(mesh, jnp.arange(4.0), P("device")),
              placed(mesh, jnp.arange(8.0)))
    try:
        out = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P("device"), P(DATA)), out_specs=out_spec))(*inputs)
    except ValueError as error:  # the vma check refuses the psum while tracing
        if "psum can only accept axis_name" not in str(error):
            raise
        return None
    return float(np.ravel(np.asarray(out))[0])


register(ValueExercise(
    id="06.1", kernel=KERNEL, answer_name="device0_gets", title="read jax.typeof, predict a psum",
    setup=_DATA_SETUP,
    solution="device0_gets = (8.0, 6.0, None)  # w is added 8 times; x over host 0's 4 devices; d: refused",
    form=forms.or_refused(_PSUMS, forms.number("a psum's result"), like="(1.0, 2.0, None)", per="psum",
                          should_be="a number (what device 0 gets)"),
    right=lambda: tuple(map(_device0_gets, _PSUMS, _OUT_SPECS)),
    rules=(
        ValueRule(entry(0, 1.0), example=(1.0, 6.0, None),
             say="w's type has no {V:...}: it is the same on every device, but psum does not skip it. JAX makes it "
                 "vary first (the pvary above) and then adds every device's copy"),
        ValueRule(entry(0, 2.0, 4.0), example=(4.0, 6.0, None),
             say="psum over DATA adds over both mesh axes: one copy of w from every device of both hosts"),
        ValueRule(lambda v: v[0] is None, example=(None, 6.0, None),
             say="JAX accepts psum(w, DATA): w varies over neither axis, so it is made to vary over both, and "
                 "then summed"),
        ValueRule(entry(1, 28.0), example=(8.0, 28.0, None),
             say="28 is the sum over all 8 devices; psum over 'device' alone adds the 4 devices of device 0's own "
                 "host"),
        ValueRule(entry(1, 22.0), example=(8.0, 22.0, None),
             say="22 is host 1's sum (4 + 5 + 6 + 7); device 0 is on host 0"),
        ValueRule(entry(1, 0.0, None), example=(8.0, 0.0, None),
             say="x varies over (host, device), so psum over 'device' is allowed and adds the x of the devices "
                 "along 'device': device 0 gets the sum over its host's 4 devices"),
        ValueRule(lambda v: v[0] != 8.0, example=(3.0, 6.0, None),
             say=lambda v: f"device 0 does not get {v[0]:g} from psum(w, DATA): add w once for each device of "
                           "the mesh"),
        ValueRule(lambda v: v[1] != 6.0, example=(8.0, 5.0, None),
             say=lambda v: f"device 0 does not get {v[1]:g} from psum(x, 'device'): add the x of host 0's devices"),
        ValueRule(lambda v: v[2] is not None, example=(8.0, 6.0, 12.0),
             say="d's type is {V:device}: it varies over 'device' but not over 'host'. A psum over both mixes an "
                 "axis d varies over with one it does not, and JAX refuses it while tracing (under check_vma)"),
    ),
    hints=(
        "A psum adds one term per device along the axes you name, whatever the value's type says. What the "
        "type changes is whether JAX accepts the call.",
        "float32[] (no V) is the same everywhere: JAX makes it vary, then sums. {V:(host,device)} varies over "
        "both axes: any of them is fine. {V:device} with an axis it does not vary over in the same psum: refused.",
    ),
))


# --------------------------------------------------------------------------- 06.2

def _momentum_inputs(mesh):
    """Seeded params, velocity and a (4 rows per device, 4) batch placed over every device."""
    rng = np.random.default_rng(6)
    n, f = 4 * mesh.size, 4
    x = rng.normal(size=(n, f)).astype(np.float32)
    y = (x @ rng.normal(size=f) + 0.5).astype(np.float32)
    params = {"w": jnp.asarray(rng.normal(size=f), jnp.float32), "b": jnp.asarray(0.2, jnp.float32)}
    velocity = {"w": jnp.asarray(rng.normal(size=f) * 0.1, jnp.float32), "b": jnp.asarray(-0.05, jnp.float32)}
    return params, velocity, placed(mesh, x), placed(mesh, y)


_UNTRACEABLE = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                jax.errors.TracerIntegerConversionError)


def _momentum_step(make_momentum_step, mesh):
    step = make_momentum_step(mesh)
    if not callable(step):
        raise Mistake(f"make_momentum_step(mesh) should return the step function, but returned {describe(step)}")
    inputs = _momentum_inputs(mesh)
    try:  # jitted here too: a step run op by op is slow (a rule names it)
        out = jax.jit(step)(*inputs)
    except _UNTRACEABLE:  # a step that reads its values in Python (a print of the loss) runs as it is
        out = step(*inputs)
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise Mistake(f"step should return (params, velocity, loss), but returned {describe(out)}")
    return jax.tree.map(np.asarray, tuple(out))


def _grad_ratio(case) -> float:
    """How many times the learner's gradient (read from the new velocity) is the true one; nan if no one number."""
    velocity = np.asarray(_momentum_inputs(case.mesh)[1]["w"])
    try:
        got, want = (np.asarray(out[1]["w"], np.float64) - 0.9 * velocity for out in (case.got, case.want))
        ratio = got / want
    except Exception:  # another structure: not a gradient scaling
        return float("nan")
    return float(ratio[0]) if np.allclose(ratio, ratio[0], rtol=1e-3) else float("nan")


def _shard_maps(fn, mesh) -> list | None:
    """(shard_map equation, inside a jit) for each shard_map in the learner's step; None if not traceable."""
    found = equations(fn(mesh), *_momentum_inputs(mesh))
    return None if found is None else [(e, jitted) for e, jitted in found if e.primitive.name == "shard_map"]


_UPDATE = "params = jax.tree.map(lambda p, v: p - LR * v, params, velocity)"


def _momentum(body: str, in_specs: str = "(P(), P(), P(DATA), P(DATA))", extra: str = "", update: str = _UPDATE,
              returns: str = "jax.jit({})", mesh: str = "mesh") -> str:
    """A make_momentum_step with this body (up to the gradient) whose shard_map runs on `mesh`; `returns` wraps
    its shard_map ({} is the call)."""
    call = f"jax.shard_map(body, mesh={mesh}, in_specs={in_specs}, out_specs=(P(), P(), P()){extra})"
    return f'''
def make_momentum_step(mesh):
    def body(params, velocity, x, y):
{body}
        velocity = jax.tree.map(lambda v, g: 0.9 * v + g, velocity, grads)
        {update}
        return params, velocity, loss

    return {returns.format(call)}
'''


_PMEAN_GRAD = '''        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = jax.lax.pmean(grads, DATA)
        loss = jax.lax.pmean(loss, DATA)'''
_GRAD_PMEAN = '''        loss, grads = jax.value_and_grad(lambda p: jax.lax.pmean(loss_fn(p, x, y), DATA))(params)'''
_GRAD_PSUM = '''        loss, grads = jax.value_and_grad(lambda p: jax.lax.psum(loss_fn(p, x, y), DATA))(params)'''
_GRAD_PSUM_BY_8 = '''        loss, grads = jax.value_and_grad(lambda p: jax.lax.psum(loss_fn(p, x, y), DATA) / 8)(params)'''
_PMEAN_GRAD_ONLY = '''        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = jax.lax.pmean(grads, DATA)'''


def _mismatch(error_text: str, host_placed: bool) -> bool:
    found = _MISMATCH.search(error_text)
    return bool(found) and ("host" in found.group(2)) == host_placed


register(ProgramExercise(
    id="06.2", kernel=KERNEL, answer_name="make_momentum_step",
    title="a momentum step ported to shard_map, gradient and all",
    setup=_MODEL_SETUP,
    solution='''
def make_momentum_step(mesh):
    """A jitted shard_map momentum step on `mesh`: (params, velocity, x, y) -> (params, velocity, loss)."""
    def body(params, velocity, x, y):  # x: one device's block of the batch
        def global_loss(params):
            return jax.lax.pmean(loss_fn(params, x, y), DATA)

        loss, grads = jax.value_and_grad(global_loss)(params)  # the mean gradient: no pmean of grads
        velocity = jax.tree.map(lambda v, g: 0.9 * v + g, velocity, grads)
        params = jax.tree.map(lambda p, v: p - LR * v, params, velocity)
        return params, velocity, loss

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(), P(DATA), P(DATA)),
                                 out_specs=(P(), P(), P())))
''',
    run=_momentum_step,
    wrong={
        _momentum(_PMEAN_GRAD):
            lambda case: f"your gradient is {case.devices}x the true one: under check_vma the grad of replicated "
                         "(P()) params is already summed over the devices, so the grad of each device's own loss "
                         f"adds up {case.devices} gradients (a pmean of it changes nothing). Take grad of the "
                         "pmean'd loss",
        _momentum(_GRAD_PSUM):
            lambda case: f"your loss and gradient are {case.devices}x the true ones: psum adds up the "
                         f"{case.devices} devices' mean losses; average them with pmean",
        _momentum(_GRAD_PSUM_BY_8):
            lambda case: f"right on 8 devices only: on this {case.devices}-device mesh your loss and gradient are "
                         "off, because you divide the psum by 8 whatever the mesh. jax.lax.pmean divides by the "
                         "mesh's device count",
        _momentum(_GRAD_PMEAN, extra=", check_vma=False"):
            "your gradient is device 0's alone (its own slice of the batch): with check_vma=False nothing sums the "
            "devices' gradients, and out_specs=P() returns device 0's. Keep check_vma on and take grad of the "
            "pmean'd loss",
        _momentum(_GRAD_PMEAN, update="params = jax.tree.map(lambda p, g: p - LR * g, params, grads)"):
            "the velocity is right but the parameters are not: params = params - LR * velocity, with the NEW velocity",
        _momentum(_GRAD_PMEAN.replace("DATA", "'batch'")): axis_message("batch", ("host", "device")),
        _momentum(_PMEAN_GRAD_ONLY, extra=", check_vma=False"):
            "your loss is device 0's alone: pmean it over ('host', 'device') (check_vma=False let out_specs=P() "
            "return one device's value)",
    },
    errors=(
        ErrorRule(lambda text: "Received incompatible devices for jitted computation" in text,
             example="notebook_mesh = jax.make_mesh((2, 4), ('host', 'device'))\n"
                     + _momentum(_GRAD_PMEAN, mesh="notebook_mesh"),
             say="your step runs on another mesh than the one it is given (the notebook's global mesh?): the check "
                 "calls make_momentum_step(mesh) with meshes of its own, so build the shard_map with mesh=mesh, "
                 "the argument"),
        ErrorRule(lambda text: _mismatch(text, host_placed=True),
             example=_momentum(_GRAD_PMEAN, in_specs="(P(), P(), P('device'), P('device'))"),
             say=lambda case: "your in_specs {} does not match how the batch is placed, {}. On an Explicit mesh "
                              "shard_map checks in_specs instead of resharding: the batch's spec is "
                              "P(('host', 'device'))".format(*_MISMATCH.search(case.got.raw).groups())),
        ErrorRule(lambda text: _mismatch(text, host_placed=False),
             example=_momentum(_GRAD_PMEAN, in_specs="(P(), {'w': P('device'), 'b': P()}, P(DATA), P(DATA))"),
             say=lambda case: "your in_specs {} is given for an input that is replicated ({}): parameters and "
                              "optimizer state come in with P()".format(*_MISMATCH.search(case.got.raw).groups())),
        ErrorRule(lambda text: "rank 0" in text and "in_specs" in text,
             example=_momentum(_GRAD_PMEAN, in_specs="(P(DATA), P(), P(DATA), P(DATA))"),
             say="an in_specs entry splits a scalar input: parameters and optimizer state are replicated, so their "
                 "in_specs is P()"),
        ErrorRule(lambda text: varying_over(text) is not None,
             example=_momentum('''        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = jax.lax.pmean(grads, DATA)'''),
             say="a result you return with out_specs=P() still differs between devices (check_vma refuses it): "
                 "average it over ('host', 'device') with pmean, e.g. the loss"),
    ),
    families=(
        OutputRule(lambda case: case.devices != 8 and abs(_grad_ratio(case) - case.devices / 8) < 1e-3,
                   example=_momentum('''        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = jax.tree.map(lambda g: g / 8, grads)
        loss = jax.lax.pmean(loss, DATA)'''),
                   say=lambda case: f"on this {case.devices}-device mesh your gradient is {case.devices}/8 of the true "
                                    "one: you divide by 8, a hard-coded device count that fits the 8-device mesh only. "
                                    "Count the devices of the mesh you are given (jax.lax.pmean does)"),
        OutputRule(lambda case: abs(_grad_ratio(case) * case.devices - 1) < 1e-3,
             example=_momentum(_GRAD_PMEAN + "\n"
                               "        grads = jax.tree.map(lambda g: g / jax.lax.psum(1, DATA), grads)"),
             say=lambda case: f"your gradient is 1/{case.devices} of the true one: the grad of the pmean'd loss is "
                              "already the mean gradient; do not divide it again"),
    ),
    checks=(
        CodeRule(lambda fn, mesh: _shard_maps(fn, mesh) == [],
             example=_momentum("        x, y = (jax.reshard(a, NamedSharding(mesh, P())) for a in (x, y))\n"
                               "        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)",
                               returns="jax.jit(body)"),
             say="the numbers are right, but your step does not use jax.shard_map; this exercise is the port to "
                 "shard_map"),
        CodeRule(lambda fn, mesh: any(not e.params.get("check_vma", True) for e, _ in _shard_maps(fn, mesh) or []),
             example=_momentum(_PMEAN_GRAD, extra=", check_vma=False"),
             say="this passes only because check_vma is off (check_vma=False, as in pmap, where each device's "
                 "gradient is its own slice's); keep it on and take grad of the pmean'd loss"),
        CodeRule(lambda fn, mesh: not all(jitted for _, jitted in _shard_maps(fn, mesh) or []),
             example=_momentum(_GRAD_PMEAN, returns="{}"),
             say="the numbers are right, but the step is not jitted: wrap the shard_map in jax.jit, as the prompt "
                 "asks (a bare shard_map runs op by op)"),
    ),
    otherwise="your step does not compute what pmap's step computes: velocity = 0.9 * velocity + grad, with grad "
              "the gradient of the loss on the whole batch, then params = params - LR * velocity, and the loss of "
              "the whole batch",
    hints=(
        "Translate pmap's in_axes=(None, None, 0, 0) and out_axes=None into in_specs and out_specs, and wrap "
        "the shard_map in jax.jit.",
        "With check_vma on, the gradient of P() parameters is already summed over devices: differentiate "
        "lambda p: jax.lax.pmean(loss_fn(p, x, y), DATA) instead of averaging the gradients.",
    ),
))


# --------------------------------------------------------------------------- 06.3

def _real_rows(device: int, per_host: int) -> int:
    """Real rows (of 4) on a device: host 0's are full, host 1's devices hold 3, 2, 1, 1, ..."""
    return 4 if device < per_host else max(1, 3 - (device - per_host))


_BLOCK_ROWS = 4  # rows per device in the checks' batches (the notebook's have 8)


def _regression_batch(mesh, seed: int) -> tuple:
    """Seeded x (_BLOCK_ROWS rows per device, 3 features) and y, placed over every device."""
    rng = np.random.default_rng(seed)
    n = _BLOCK_ROWS * mesh.size
    x, y = rng.normal(size=(n, 3)).astype(np.float32), rng.normal(size=n).astype(np.float32)
    return placed(mesh, x), placed(mesh, y)


def _masked_inputs(mesh):
    """Seeded params and a padded batch (4 rows per device) with its mask, placed over every device."""
    per_host = mesh.shape["device"]
    mask = np.concatenate([np.arange(4) < _real_rows(k, per_host) for k in range(mesh.size)]).astype(np.float32)
    params = {"w": jnp.asarray([0.5, -1.0, 2.0], jnp.float32), "b": jnp.float32(0.3)}
    return params, *_regression_batch(mesh, 16), placed(mesh, mask)


def _masked_run(global_loss, mesh):
    """loss and gradient of global_loss, taken inside a jitted shard_map with check_vma on."""
    step = jax.jit(jax.shard_map(jax.value_and_grad(global_loss), mesh=mesh,
                                 in_specs=(P(), P(DATA), P(DATA), P(DATA)), out_specs=(P(), P())))
    return jax.tree.map(np.asarray, step(*_masked_inputs(mesh)))


def _loss(body: str) -> str:
    return ("def global_loss(params, x, y, mask):\n"
            "    err = mask * (x @ params['w'] + params['b'] - y) ** 2\n"
            f"    return {body}\n")


register(ProgramExercise(
    id="06.3", kernel=KERNEL, answer_name="global_loss",
    title="the global mean loss when hosts hold different numbers of real rows",
    setup=_DATA_SETUP,
    solution='''
def global_loss(params, x, y, mask):
    """Mean squared error over the real rows (mask 1) of the whole global batch; x: one device's block."""
    err = mask * (x @ params["w"] + params["b"] - y) ** 2
    return jax.lax.psum(jnp.sum(err), DATA) / jax.lax.psum(jnp.sum(mask), DATA)
''',
    run=_masked_run,
    wrong={
        _loss("jax.lax.pmean(jnp.sum(err) / jnp.sum(mask), DATA)"):
            "you average the devices' means, so each device counts the same; but host 1's devices hold fewer real "
            "rows, so their rows weigh more than host 0's. Add up the errors and the real rows over every device, "
            "then divide",
        _loss("jax.lax.pmean(jnp.mean(err), DATA)"):
            "you divide by every row, padding included: the loss (and its gradient) comes out too small. Divide by "
            "the number of real rows, summed over every device",
        "def global_loss(params, x, y, mask):\n"
        "    err = (x @ params['w'] + params['b'] - y) ** 2\n"
        "    return jax.lax.psum(jnp.sum(err), DATA) / jax.lax.psum(jnp.sum(mask), DATA)\n":
            "the padding rows' errors are in your sum: multiply the squared errors by mask before adding them up",
        _loss("jax.lax.psum(jnp.sum(err), DATA) / jax.lax.psum(jnp.sum(mask), DATA) / jax.lax.psum(1, DATA)"):
            lambda case: f"your loss is 1/{case.devices} of the global mean: the two psums already give the sum "
                         "and the count over every device; do not divide by the number of devices again",
    },
    errors=(ErrorRule(lambda text: varying_over(text) is not None,
                 example=_loss("jnp.sum(err) / jax.lax.psum(jnp.sum(mask), DATA)"),
                 say="your loss still differs between devices, so out_specs=P() refuses it: both the sum of the "
                     "errors and the count of real rows must be summed over ('host', 'device') with psum"),),
    otherwise="your loss is not the mean squared error over the real rows of the whole global batch: sum the "
              "masked errors over every device, and divide by the real rows counted over every device",
    hints=(
        "The global mean is (sum of every real row's error) / (number of real rows), both over the whole batch. "
        "A device only holds its block: which collective adds a number over all devices?",
        "With check_vma on, take the loss as it is: its gradient with respect to P() parameters is then the true "
        "gradient, with nothing to divide or average afterwards. jax.lax.psum(jnp.sum(mask), DATA) counts the "
        "real rows.",
    ),
))


# --------------------------------------------------------------------------- 06.5

def _summed_grad(scaled_loss, mesh):
    """jax.grad(scaled_loss) of P() params inside a jitted shard_map with check_vma on: what JAX sums over devices."""
    params = {"w": jnp.asarray([1.0, -0.5, 0.25], jnp.float32), "b": jnp.float32(0.1)}
    grad = jax.jit(jax.shard_map(jax.grad(scaled_loss), mesh=mesh, in_specs=(P(), P(DATA), P(DATA)),
                                 out_specs=P()))
    return jax.tree.map(np.asarray, grad(params, *_regression_batch(mesh, 65)))


def _scaled(denominator: str) -> str:
    return ("def scaled_loss(params, x, y):\n"
            "    err = (x @ params['w'] + params['b'] - y) ** 2\n"
            f"    return jnp.sum(err) / {denominator}\n")


register(ProgramExercise(
    id="06.5", kernel=KERNEL, answer_name="scaled_loss",
    title="a device's loss scaled so that the summed gradient is the global mean's",
    setup=_DATA_SETUP,
    solution='''
def scaled_loss(params, x, y):
    """This device's share of the global mean loss; x, y: one device's block."""
    err = (x @ params["w"] + params["b"] - y) ** 2
    return jnp.sum(err) / (x.shape[0] * jax.lax.psum(1, DATA))  # divide by the global batch size
''',
    run=_summed_grad,
    wrong={
        _scaled("x.shape[0]"):
            lambda case: f"your gradient is {case.devices}x the true one: JAX adds up the {case.devices} devices' "
                         "gradients of the P() parameters, so each device's loss must be its share of the global "
                         "mean: divide by the number of examples in the whole batch, not in the block",
        _scaled("1"):
            "your gradient is the whole batch's size times too large: the loss is a sum of squared errors; divide "
            "it by the number of examples in the global batch",
        _scaled("(x.shape[0] * 8)"):
            lambda case: f"right on 8 devices only: on this {case.devices}-device mesh your gradient is off, because "
                         "your device count is 8 on any mesh: a number you wrote, or jax.device_count(), which "
                         "counts every device JAX has, not the mesh's. jax.lax.psum(1, DATA) counts the mesh's "
                         "devices",
        _scaled("64"):
            lambda case: "you wrote the global batch size as a number, 64 (the notebook's batch), but the check's "
                         f"batches have other sizes ({case.devices * _BLOCK_ROWS} rows on its {case.devices}-device "
                         "mesh): compute it, x.shape[0] * jax.lax.psum(1, DATA)",
        _scaled("(x.shape[0] * jax.lax.psum(1, 'device'))"):
            "jax.lax.psum(1, 'device') counts one host's devices only; the gradient is summed over every device of "
            "every host: count over ('host', 'device')",
    },
    otherwise="the gradient JAX sums over the devices is not the mean gradient of the global batch: each device's "
              "loss should be its sum of squared errors divided by the global batch size",
    hints=(
        "With check_vma on, the gradient of P() parameters is summed over every device. So the devices' losses "
        "should add up to the global mean: each is its sum of errors over the global batch size.",
        "The global batch size is x.shape[0] times the number of devices; jax.lax.psum(1, DATA) counts the "
        "devices.",
    ),
))


# --------------------------------------------------------------------------- 06.4

def _noise(noisy_body, mesh):
    """noisy_body's noise on every device (block + noise, minus the block), for key(11), on a seeded batch
    of (3 rows per device, 5) split over every device, as pmap would split it."""
    batch = np.random.default_rng(4).integers(0, 4, size=(3 * mesh.size, 5)).astype(np.float32)
    mapped = jax.jit(jax.shard_map(noisy_body, mesh=mesh, in_specs=(P(), P(DATA)), out_specs=P(DATA)))
    return np.asarray(mapped(jax.random.key(11), placed(mesh, batch))) - batch


def _noisy(index: str, ret: str = "block + jax.random.uniform(k, block.shape)") -> str:
    return f"def noisy_body(key, block):\n    k = {index}\n    return {ret}\n"


register(ProgramExercise(
    id="06.4", kernel=KERNEL, answer_name="noisy_body", title="per-device randomness that matches pmap's",
    setup=_DATA_SETUP,
    solution='''
def noisy_body(key, block):
    """block plus uniform noise; each device draws what pmap's device at the same position draws."""
    device_key = jax.random.fold_in(key, jax.lax.axis_index(DATA))  # 0..7, host by host, as in pmap
    return block + jax.random.uniform(device_key, block.shape)
''',
    run=_noise,
    wrong={
        _noisy("key"): "every device drew the same numbers: the key comes in replicated (P()), so fold the device's "
                       "position into it with jax.random.fold_in",
        _noisy("jax.random.fold_in(key, jax.lax.axis_index('device'))"):
            "device d of every host drew the same numbers as device d of host 0: axis_index('device') restarts on "
            "each host. Fold in the index over both axes: axis_index(('host', 'device'))",
        _noisy("jax.random.fold_in(key, jax.lax.axis_index('host'))"):
            "the devices of one host drew the same numbers: axis_index('host') only tells hosts apart. Fold in "
            "axis_index(('host', 'device'))",
        _noisy("jax.random.fold_in(key, jax.lax.axis_index(('device', 'host')))"):
            "each device draws its own numbers, but not pmap's: axis_index(('device', 'host')) numbers the devices "
            "device-first. pmap counts host by host: ('host', 'device')",
        _noisy("jax.random.fold_in(key, jax.lax.axis_index(DATA))", ret="jax.random.uniform(k, block.shape)"):
            "you return the noise alone; add it to the block",
        _noisy("jax.random.fold_in(key, jax.lax.axis_index('host') * 4 + jax.lax.axis_index('device'))"):
            lambda case: f"right with 4 devices per host only: on this {case.layout[0]} x {case.layout[1]} mesh "
                         "your device numbers skip some, because you wrote a host's device count as 4. "
                         "jax.lax.axis_size('device') gives it; or let axis_index(('host', 'device')) count for you",
        _noisy("jax.random.fold_in(key, jax.lax.axis_index(DATA))", ret="block + jax.random.normal(k, block.shape)"):
            "each device folds in the right number, but draws from jax.random.normal; pmap_noise draws "
            "jax.random.uniform",
        _noisy("jax.random.fold_in(key, jax.lax.axis_index(DATA) + 1)"):
            "your device k folds in k + 1, so it draws what pmap's device k + 1 draws; pmap's device k folds in k",
    },
    otherwise="each device's noise differs from what pmap's device at the same position draws: fold into the key "
              "the number pmap gives that device, and draw uniform noise of the block's shape",
    hints=(
        "pmap_noise folds the device's position along 'batch' into the key. What numbers the devices the "
        "same way on the (host, device) mesh?",
        "jax.lax.axis_index(DATA) counts 0..7 over both axes, host first, like pmap's axis_index('batch').",
    ),
))
