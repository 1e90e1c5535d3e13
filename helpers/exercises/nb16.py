"""Exercises of notebook 16: a finding of helpers.migrate on the pmap script, and the learner's fix."""
from __future__ import annotations

import jax
import numpy as np
from jax import P

from helpers.training import tiny
from helpers.exercises.core import Kernel, Mistake, describe, register
from helpers.exercises.kinds import ProgramExercise, course_mesh, placed, varying_over
from helpers.exercises.rules import ErrorRule, OutputRule

KERNEL = Kernel(devices=8)  # the first cell: use_fake_devices(8)
DATA = ("host", "device")
_SETUP = 'from helpers.training import tiny\nDATA = ("host", "device")\nLR = 0.3\n'


# ------------------------------------------------------------- 16.1 replicate -> one global value

def _held(leaf, mesh) -> list[int]:
    """How many of the leaf's elements each device of the mesh holds, from JAX's own shards."""
    shards = getattr(leaf, "addressable_shards", [])
    return [sum(s.data.size for s in shards if s.device == d) for d in mesh.devices.flat]


def _placed_params(fn, mesh):
    """The learner's params on the mesh: each leaf's values and how much of it each device holds."""
    out = fn(tiny.init_params(), mesh)
    if not isinstance(out, dict) or sorted(out) != sorted(tiny.init_params()):
        raise Mistake(f"place_params should return the params dict (keys {sorted(tiny.init_params())}), "
                      f"but returned {describe(out)}")
    return {name: (np.asarray(leaf), np.asarray(_held(leaf, mesh))) for name, leaf in out.items()}


def _placement_of(case) -> str:
    """Where the learner's w1 is, for a message: 'on 4 of the 8 devices only', 'split between ...'."""
    values, held = case.got["w1"]
    if (held < values.size).any() and held.any():
        return "split between the devices (no device holds a whole copy)"
    return f"on {np.count_nonzero(held)} of the mesh's {held.size} devices only"


register(ProgramExercise(
    id="16.1", kernel=KERNEL, answer_name="place_params",
    title="flax.jax_utils.replicate becomes one global value on every device",
    setup=_SETUP,
    solution='''
def place_params(params, mesh):
    """The parameters as global arrays with a whole copy on every device of the mesh."""
    return jax.device_put(params, NamedSharding(mesh, P()))
''',
    run=_placed_params,
    wrong={
        '''
def place_params(params, mesh):
    return jax.tree.map(lambda x: jnp.stack([x] * mesh.size), params)
''': lambda case: f"that is pmap's stack of copies: each leaf gains a leading axis of {case.devices}. With "
                  "shard_map the parameters stay one value, and the sharding says where its copies are: P()",
        '''
def place_params(params, mesh):
    return jax.device_put(params)
''': "your parameters sit on one device only (jax.device_put without a sharding): give it "
     "NamedSharding(mesh, P()) so every device of the mesh holds a copy",
    },
    errors=(
        ErrorRule(lambda text: "evenly divide" in text or "rank" in text,
                  example='''
def place_params(params, mesh):
    return jax.device_put(params, NamedSharding(mesh, P(DATA)))
''',
                  say="P(DATA) splits each parameter over the devices (and a bias of 1 number cannot be "
                      "split): parameters are replicated, P()"),
    ),
    families=(
        OutputRule(lambda case: isinstance(case.got, dict) and all(
            np.array_equal(v[0], w[0]) for v, w in zip(case.got.values(), case.want.values())),
                   example='''
def place_params(params, mesh):
    first_host = jax.make_mesh((mesh.shape["device"],), ("device",), devices=mesh.devices[0])
    return jax.device_put(params, NamedSharding(first_host, P()))
''',
                   say=lambda case: f"the values are right, but they are {_placement_of(case)}: every device "
                                    "of the mesh needs a whole copy, which NamedSharding(mesh, P()) says"),
    ),
    otherwise="return the params dict, each leaf a global array with a whole copy on every device of the mesh",
    hints=(
        "pmap needed a stack, one copy per device. shard_map takes one global array per parameter, and its "
        "sharding says where the copies are.",
        "jax.device_put takes a whole pytree and one sharding for all of it; the spec that names no mesh axis "
        "places a whole copy on every device.",
    ),
))


# ------------------------------------------------------------- 16.2 pmean(grads) -> grad of pmean

def _step_output(fn, mesh):
    """One step of the learner's make_train_step(mesh) on a global batch: (new params, loss)."""
    step = fn(mesh)
    if not callable(step):
        raise Mistake(f"make_train_step(mesh) should return the step function, but returned {describe(step)}")
    x, y = tiny.global_batch_at(3)
    params = placed(mesh, tiny.init_params(), P())
    out = step(params, placed(mesh, x, P(DATA)), placed(mesh, y, P(DATA)))
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise Mistake(f"the step should return (params, loss), but returned {describe(out)}")
    return jax.tree.map(np.asarray, tuple(out))


def _gradient_ratio(case) -> float:
    """How many times the learner's gradient step is the true one (nan if not one number)."""
    start = tiny.init_params()["b2"]
    try:
        ratio = (np.asarray(case.got[0]["b2"], np.float64) - start) / (case.want[0]["b2"] - start)
    except Exception:  # another structure
        return float("nan")
    return float(ratio[0]) if np.allclose(ratio, ratio[0], rtol=1e-3) else float("nan")


def _step(body: str, extra: str = "") -> str:
    return f'''
def make_train_step(mesh):
    def body(params, x, y):
{body}
        return jax.tree.map(lambda p, g: p - LR * g, params, grads), loss

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(DATA), P(DATA)), out_specs=(P(), P()){extra}))
'''


register(ProgramExercise(
    id="16.2", kernel=KERNEL, answer_name="make_train_step",
    title="pmap's pmean of the gradients, ported: the gradient of the pmean'd loss",
    setup=_SETUP,
    solution=_step('''        def global_loss(p):
            return jax.lax.pmean(tiny.loss_fn(p, x, y), DATA)

        loss, grads = jax.value_and_grad(global_loss)(params)'''),
    run=_step_output,
    meshes=((2, 4), (2, 2)),
    wrong={
        _step('''        loss, grads = jax.value_and_grad(tiny.loss_fn)(params, x, y)
        grads = jax.lax.pmean(grads, DATA)
        loss = jax.lax.pmean(loss, DATA)'''):
            lambda case: f"that is pmap's step with the axis renamed, and its gradient is {case.devices}x the "
                         "true one: under check_vma the gradient of P() parameters is already summed over the "
                         "devices, and a pmean of it changes nothing. Take the gradient of the pmean'd loss",
        _step('''        loss, grads = jax.value_and_grad(lambda p: jax.lax.psum(tiny.loss_fn(p, x, y), DATA))(params)'''):
            lambda case: f"your loss and gradient are {case.devices}x the true ones: psum adds up the devices' "
                         "mean losses; average them with pmean",
    },
    errors=(
        ErrorRule(lambda text: varying_over(text) is not None,
                  example=_step('''        loss, grads = jax.value_and_grad(lambda p: jax.lax.pmean(tiny.loss_fn(p, x, y), "device"))(params)'''),
                  say="your loss still differs between the hosts (check_vma refuses out_specs=P()): pmap's "
                      "axis 'batch' spanned every device of every host, so average over both mesh axes, DATA"),
    ),
    families=(
        OutputRule(lambda case: case.devices != 8 and abs(_gradient_ratio(case) - case.devices / 8) < 1e-3,
                   example=_step('''        loss, grads = jax.value_and_grad(lambda p: jax.lax.psum(tiny.loss_fn(p, x, y), DATA) / 8)(params)'''),
                   say=lambda case: f"right on 8 devices only: on this {case.devices}-device mesh your step is "
                                    f"{case.devices}/8 of the true one, because you divide by 8. jax.lax.pmean "
                                    "divides by the mesh's device count"),
    ),
    otherwise="take one step of plain gradient descent on the mean loss over every device of every host",
    hints=(
        "Write the loss of the whole global batch first: jax.lax.pmean of each device's loss over DATA. "
        "pmap's 'batch' axis was every device of every host; on the mesh that is both axes.",
        "Then take jax.value_and_grad of that function, and use its gradient as it is: under check_vma it "
        "already is the mean gradient. No pmean of the gradients.",
    ),
))
