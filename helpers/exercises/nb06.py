"""Exercises of notebook 06: porting pmap to shard_map (specs, the gradient trap, ranks, RNG)."""
from __future__ import annotations

import re

from jax import P

from helpers.exercises import forms
from helpers.exercises.core import Kernel, Mistake, describe, register
from helpers.exercises.kinds import (
    ProgramExercise, Rule, Slot, SpecExercise, axes_apart, course_mesh, equations,
)
from helpers.layout import format_spec

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)
DATA = ("host", "device")
_DATA_SETUP = 'DATA = ("host", "device")\n'
_MODEL_SETUP = '''DATA = ("host", "device")
LR = 0.1


def loss_fn(params, x, y):
    pred = x @ params["w"] + params["b"]
    return jnp.mean((pred - y) ** 2)
'''
_MISMATCH = re.compile(r"in_specs passed to shard_map: (P\(.*?\)) does not match the specs of the input: (P\(.*?\)) for arg")
_VARYING = re.compile(r"possibly varying over \{([^}]*)\}|replicated across mesh ax[ie]s (.*?), but could not infer")


def _placed(mesh, data, spec=P(DATA)):
    import jax
    from jax.sharding import NamedSharding

    return jax.device_put(data, NamedSharding(mesh, spec))


# --------------------------------------------------------------------------- 06.1

def _split_apart(spec) -> str:
    split = " and ".join(f"dimension {i} over {e!r}" for i, e in enumerate(spec) if e is not None)
    return f"{format_spec(spec)} splits {split}; to split dimension 0 over both, group them in one tuple: P(('host', 'device'))"


def _whole_value(spec) -> str:
    return f"None means every device has the whole value, which is P(), not {format_spec(spec)}"


_SPLIT = {
    P("device"): "P('device') splits over one host's 4 devices and copies the result across hosts, so each host "
                 "would hold the same rows. Split over both axes: P(('host', 'device'))",
    P(("device", "host")): "P(('device', 'host')) numbers the devices device-first, unlike pmap's host-by-host "
                           "order: write P(('host', 'device'))",
    P("host"): "P('host') splits over the 2 hosts only; in_axes=0 / out_axes=0 give every device its own slice: "
               "P(('host', 'device'))",
}
_GROUP = (Rule(axes_apart, _split_apart, example=P("host", "device")),)
_NOT_PMAPS = "{} does not split dimension 0 over every device in pmap's order; use P(('host', 'device'))"


def _split_slot(label: str, shape: tuple[int, ...], replicated: str) -> Slot:
    return Slot(shape=shape, right=P(DATA), label=label, wrong={**_SPLIT, P(): replicated}, rules=_GROUP,
                otherwise=lambda spec: _NOT_PMAPS.format(format_spec(spec)))


def _specs_form(answer):
    if not isinstance(answer, tuple) or len(answer) != 2:
        raise Mistake(f"expected a pair (in_specs, out_specs), but got {describe(answer)}")
    in_specs, out_specs = answer
    if not isinstance(in_specs, tuple) or len(in_specs) != 3:
        raise Mistake("in_specs should be a tuple of 3 PartitionSpecs, one per argument (params, x, y), but got "
                      f"{describe(in_specs)}")
    if not isinstance(out_specs, tuple) or len(out_specs) != 2:
        raise Mistake("out_specs should be a tuple of 2 PartitionSpecs, one per output (new params, one number per "
                      f"device), but got {describe(out_specs)}")
    if any(isinstance(s, int) or s is None for s in in_specs + out_specs):
        raise Mistake("those are pmap's in_axes/out_axes numbers; shard_map wants a PartitionSpec for each, like "
                      "P() or P(('host', 'device'))")
    return tuple(forms.spec("P(...)")(s) for s in in_specs + out_specs)


_IN_P = ("in_axes=0 splits the batch over the devices; P() gives every device all of it. Use "
         "P(('host', 'device'))")

register(SpecExercise(
    id="06.1", kernel=KERNEL,
    title="in_axes/out_axes become in_specs/out_specs",
    answer_name="specs",
    setup=_DATA_SETUP,
    solution='''specs = (
    (P(), P(DATA), P(DATA)),  # in_axes=(None, 0, 0)
    (P(), P(DATA)),           # out_axes=(None, 0)
)''',
    mesh=lambda: course_mesh((2, 4)),
    slots=(
        Slot(shape=(16,), right=P(), label="in_specs[0] (params, in_axes=None)", otherwise=_whole_value),
        _split_slot("in_specs[1] (x, in_axes=0)", (16, 3), _IN_P),
        _split_slot("in_specs[2] (y, in_axes=0)", (16,), _IN_P),
        Slot(shape=(16,), right=P(), label="out_specs[0] (params, out_axes=None)", otherwise=_whole_value),
        _split_slot("out_specs[1] (per-device numbers, out_axes=0)", (8,),
                    "out_axes=0 keeps one number per device, stacked; P() would claim they are all the same. Use "
                    "P(('host', 'device'))"),
    ),
    form=_specs_form,
    assemble=lambda s: (s[:3], s[3:]),
    hints=(
        "None (the same on every device) becomes P(); 0 (split over the devices) becomes a spec that "
        "splits dimension 0 over the mesh axes.",
        "pmap's one device axis spans both hosts; on the (host, device) mesh that is both axes together, "
        "host first: P(('host', 'device')), i.e. P(DATA).",
    ),
))


# --------------------------------------------------------------------------- 06.2

def _momentum_inputs(mesh):
    """Seeded params, velocity and a (4 rows per device, 4) batch placed over every device."""
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(6)
    n, f = 4 * mesh.size, 4
    x = rng.normal(size=(n, f)).astype(np.float32)
    y = (x @ rng.normal(size=f) + 0.5).astype(np.float32)
    params = {"w": jnp.asarray(rng.normal(size=f), jnp.float32), "b": jnp.asarray(0.2, jnp.float32)}
    velocity = {"w": jnp.asarray(rng.normal(size=f) * 0.1, jnp.float32), "b": jnp.asarray(-0.05, jnp.float32)}
    return params, velocity, _placed(mesh, x), _placed(mesh, y)


def _momentum_step(make_momentum_step, mesh):
    import jax
    import numpy as np

    step = make_momentum_step(mesh)
    if not callable(step):
        raise Mistake(f"make_momentum_step(mesh) should return the step function, but returned {describe(step)}")
    out = step(*_momentum_inputs(mesh))
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise Mistake(f"step should return (params, velocity, loss), but returned {describe(out)}")
    return jax.tree.map(np.asarray, tuple(out))


def _grad_ratio(case) -> float | None:
    """How many times the learner's gradient (read from the new velocity) is the true one."""
    import numpy as np

    params, velocity, *_ = _momentum_inputs(case.mesh)
    try:
        got = np.asarray(case.got[1]["w"], np.float64) - 0.9 * np.asarray(velocity["w"])
        want = np.asarray(case.want[1]["w"], np.float64) - 0.9 * np.asarray(velocity["w"])
        ratio = got / want
    except Exception:  # another structure: not a gradient scaling
        return None
    return float(ratio[0]) if np.allclose(ratio, ratio[0], rtol=1e-3) else None


def _shard_maps(fn, mesh) -> list | None:
    """(shard_map equation, inside a jit) for each shard_map in the learner's step; None if not traceable."""
    found = equations(fn(mesh), *_momentum_inputs(mesh))
    return None if found is None else [(e, jitted) for e, jitted in found if e.primitive.name == "shard_map"]


_UPDATE = "params = jax.tree.map(lambda p, v: p - LR * v, params, velocity)"


def _momentum(body: str, specs: str = "in_specs=(P(), P(), P(DATA), P(DATA)), out_specs=(P(), P(), P())",
              extra: str = "", update: str = _UPDATE, jit: bool = True) -> str:
    call = f"jax.shard_map(body, mesh=mesh, {specs}{extra})"
    return f'''
def make_momentum_step(mesh):
    def body(params, velocity, x, y):
{body}
        velocity = jax.tree.map(lambda v, g: 0.9 * v + g, velocity, grads)
        {update}
        return params, velocity, loss

    return {f"jax.jit({call})" if jit else call}
'''


_PMEAN_GRAD = '''        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = jax.lax.pmean(grads, DATA)
        loss = jax.lax.pmean(loss, DATA)'''
_GRAD_PMEAN = '''        loss, grads = jax.value_and_grad(lambda p: jax.lax.pmean(loss_fn(p, x, y), DATA))(params)'''


def _mismatch(error_text: str, host_placed: bool) -> bool:
    found = _MISMATCH.search(error_text)
    return bool(found) and ("host" in found.group(2)) == host_placed


register(ProgramExercise(
    id="06.2", kernel=KERNEL,
    title="a momentum step ported to shard_map, gradient and all",
    answer_name="make_momentum_step",
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
                         "(P()) params is already summed over devices; take the pmean of the loss, not of the grad",
        _momentum(_GRAD_PMEAN, extra=", check_vma=False"):
            "your gradient is device 0's alone (its own slice of the batch): with check_vma=False nothing sums the "
            "devices' gradients, and out_specs=P() returns device 0's. Keep check_vma on and take grad of the "
            "pmean'd loss",
        _momentum(_GRAD_PMEAN, update="params = jax.tree.map(lambda p, g: p - LR * g, params, grads)"):
            "the velocity is right but the parameters are not: params = params - LR * velocity, with the NEW velocity",
        _momentum(_PMEAN_GRAD.replace("        loss = jax.lax.pmean(loss, DATA)", ""), extra=", check_vma=False"):
            "your loss is device 0's alone: pmean it over ('host', 'device') (check_vma=False let out_specs=P() "
            "return one device's value)",
    },
    errors=(
        Rule(lambda text: _mismatch(text, host_placed=True),
             example=_momentum(_GRAD_PMEAN, specs="in_specs=(P(), P(), P('device'), P('device')), out_specs=(P(), P(), P())"),
             say=lambda case: "your in_specs {} does not match how the batch is placed, {}. On an Explicit mesh "
                              "shard_map checks in_specs instead of resharding: the batch's spec is "
                              "P(('host', 'device'))".format(*_MISMATCH.search(case.got.raw).groups())),
        Rule(lambda text: _mismatch(text, host_placed=False),
             example=_momentum(_GRAD_PMEAN, specs="in_specs=(P(), {'w': P('device'), 'b': P()}, P(DATA), P(DATA)), "
                                                  "out_specs=(P(), P(), P())"),
             say=lambda case: "your in_specs {} is given for an input that is replicated ({}): parameters and "
                              "optimizer state come in with P()".format(*_MISMATCH.search(case.got.raw).groups())),
        Rule(lambda text: "rank 0" in text and "in_specs" in text,
             example=_momentum(_GRAD_PMEAN, specs="in_specs=(P(DATA), P(), P(DATA), P(DATA)), out_specs=(P(), P(), P())"),
             say="an in_specs entry splits a scalar input: parameters and optimizer state are replicated, so their "
                 "in_specs is P()"),
        Rule(lambda text: bool(_VARYING.search(text)),
             example=_momentum('''        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = jax.lax.pmean(grads, DATA)'''),
             say="a result you return with out_specs=P() still differs between devices (check_vma refuses it): "
                 "average it over ('host', 'device') with pmean, e.g. the loss"),
    ),
    families=(
        Rule(lambda case: _grad_ratio(case) is not None and abs(_grad_ratio(case) * case.devices - 1) < 1e-3,
             example=_momentum(_GRAD_PMEAN + "\n        grads = jax.tree.map(lambda g: g / jax.lax.psum(1, DATA), grads)"),
             say=lambda case: f"your gradient is 1/{case.devices} of the true one: the grad of the pmean'd loss is "
                              "already the mean gradient; do not divide it again"),
    ),
    checks=(
        Rule(lambda fn, mesh: _shard_maps(fn, mesh) == [],
             example=_momentum("        x, y = (jax.reshard(a, NamedSharding(mesh, P())) for a in (x, y))\n"
                               "        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)", jit=False).replace(
                 "return jax.shard_map(body, mesh=mesh, in_specs=(P(), P(), P(DATA), P(DATA)), "
                 "out_specs=(P(), P(), P()))", "return jax.jit(body)"),
             say="the numbers are right, but your step does not use jax.shard_map; this exercise is the port to "
                 "shard_map"),
        Rule(lambda fn, mesh: any(not e.params.get("check_vma", True) for e, _ in _shard_maps(fn, mesh) or []),
             example=_momentum(_PMEAN_GRAD, extra=", check_vma=False"),
             say="this passes only because check_vma is off (check_vma=False, as in pmap, where each device's "
                 "gradient is its own slice's); keep it on and take grad of the pmean'd loss"),
        Rule(lambda fn, mesh: not all(jitted for _, jitted in _shard_maps(fn, mesh) or []),
             example=_momentum(_GRAD_PMEAN, jit=False),
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

def _rows_per_device() -> int:
    return 3


def _batch(mesh, integers: bool = False):
    import numpy as np

    rng = np.random.default_rng(4 if integers else 3)
    shape = (_rows_per_device() * mesh.size, 5)
    data = rng.integers(0, 4, size=shape) if integers else rng.normal(size=shape)
    return _placed(mesh, data.astype(np.float32))


def _per_block(body, mesh, *args):
    """jit(shard_map(body)) over the batch, split over every device, as pmap would split it."""
    import jax
    import numpy as np

    in_specs = tuple(P() for _ in args) + (P(DATA),)
    mapped = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=P(DATA)))
    return np.asarray(mapped(*args, _batch(mesh, integers=bool(args))))


def _sq(body: str) -> str:
    return f"def sq_body(block):\n    return {body}\n"


register(ProgramExercise(
    id="06.3", kernel=KERNEL,
    title="a rank-preserving body: one sum per device, shape (1,)",
    answer_name="sq_body",
    setup=_DATA_SETUP,
    solution='''
def sq_body(block):
    """One device's block of the global batch -> its sum of squares, shape (1,)."""
    return jnp.sum(block**2).reshape(1)  # a kept axis of length 1: 8 blocks glue into (8,)
''',
    run=_per_block,
    wrong={
        _sq("jnp.sum(block ** 2, keepdims=True)"):
            "your result is (8, 1): keepdims=True kept both axes of the 2-D block. Keep just one, e.g. "
            "jnp.sum(block ** 2).reshape(1)",
        _sq("jnp.sum(block ** 2, axis=1)"):
            lambda case: f"you return one sum per row ({_rows_per_device() * case.devices} in all), not one per "
                         "device: sum over the whole block",
        _sq("jnp.sum(block ** 2, axis=0)"):
            "you return one sum per column, shape (8, 5); sum over the whole block, both axes",
        _sq("jax.lax.psum(jnp.sum(block ** 2), DATA)[None]"):
            "every device returns the total over all devices: you added a psum. Each device's own sum is wanted, "
            "as pmap computed it",
        _sq("jnp.sum(block[0] ** 2)[None]"):
            "you summed only the first row of each block: the block is (B, F) with no device axis in front, so "
            "there is nothing to index away with block[0]",
    },
    errors=(Rule(lambda text: "has rank 0" in text, example=_sq("jnp.sum(block ** 2)"),
                 say="your body returns a scalar, and shard_map glues the blocks' results along an axis: keep one "
                     "of length 1, e.g. jnp.sum(block ** 2)[None] or .reshape(1)"),),
    otherwise=lambda case: (f"for a global batch of shape {(_rows_per_device() * case.devices, 5)} on a mesh "
                            f"{dict(case.mesh.shape)} the result has shape {case.got.shape} and differs from pmap's "
                            "per-device sums of squares"),
    hints=(
        "The block is 2-D, (B, F). Sum everything, then give the scalar one axis of length 1.",
        "jnp.sum(block ** 2) is a scalar; .reshape(1) or [None] makes it (1,). keepdims=True would keep "
        "(1, 1).",
    ),
))


# --------------------------------------------------------------------------- 06.4

def _noise(noisy_body, mesh):
    """noisy_body's noise on every device (block + noise, minus the block), for key(11)."""
    import jax
    import numpy as np

    return _per_block(noisy_body, mesh, jax.random.key(11)) - np.asarray(_batch(mesh, integers=True))


def _noisy(index: str, ret: str = "block + jax.random.uniform(k, block.shape)") -> str:
    return f"def noisy_body(key, block):\n    k = {index}\n    return {ret}\n"


register(ProgramExercise(
    id="06.4", kernel=KERNEL,
    title="per-device randomness that matches pmap's",
    answer_name="noisy_body",
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
    },
    otherwise="each device's noise differs from what pmap's device at the same position draws: use "
              "jax.random.uniform(jax.random.fold_in(key, jax.lax.axis_index(('host', 'device'))), block.shape)",
    hints=(
        "pmap_noise folds the device's position along 'batch' into the key. What numbers the devices the "
        "same way on the (host, device) mesh?",
        "jax.lax.axis_index(DATA) counts 0..7 over both axes, host first, like pmap's axis_index('batch').",
    ),
))
