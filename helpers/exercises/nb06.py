"""Exercises of notebook 06: porting pmap to shard_map (specs, the gradient trap, ranks, RNG)."""
from __future__ import annotations

import functools
import re
from typing import Any

from helpers.exercises.kinds import Judged, WrongAnswer
from helpers.exercises.core import Kernel

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)
from helpers.exercises.core import Mistake, call_learner, describe, register
from helpers.exercises.judges import placement, require_spec, splits_host_and_device_apart

DATA = ("host", "device")
LR = 0.1
_DATA_SETUP = 'DATA = ("host", "device")\n'
_MODEL_SETUP = '''DATA = ("host", "device")
LR = 0.1


def loss_fn(params, x, y):
    pred = x @ params["w"] + params["b"]
    return jnp.mean((pred - y) ** 2)
'''
_MISMATCH = re.compile(r"in_specs passed to shard_map: (P\(.*?\)) does not match the specs of the input: (P\(.*?\)) for arg")
_VARYING = re.compile(r"possibly varying over \{([^}]*)\}|replicated across mesh ax[ie]s (.*?), but could not infer")


def _judge_mesh(shape=(4, 2)):
    import jax

    return jax.make_mesh(shape, DATA)


def _shard_map_mistake(error_text: str) -> str | None:
    """A learner-facing reason for shard_map's in_specs / out_specs errors, or None."""
    mismatch = _MISMATCH.search(error_text)
    if mismatch:
        wanted, placed = mismatch.groups()
        if "host" in placed:
            return (f"your in_specs {wanted} does not match how the batch is placed, {placed}. On an "
                    "Explicit mesh shard_map checks in_specs instead of resharding: the batch's spec is "
                    "P(('host', 'device'))")
        return (f"your in_specs {wanted} is given for an input that is replicated ({placed}): parameters "
                "and optimizer state come in with P()")
    if "rank 0" in error_text and "in_specs" in error_text:
        return ("an in_specs entry splits a scalar input: parameters and optimizer state are replicated, so "
                "their in_specs is P()")
    if _VARYING.search(error_text):
        return ("a result you return with out_specs=P() still differs between devices (check_vma refuses "
                "it): average it over ('host', 'device') with pmean, e.g. the loss")
    return None


def _spy(fn):
    """Wrap a learner's function so shard_map's spec errors become named mistakes."""
    def call(*args):
        try:
            return fn(*args)
        except ValueError as error:
            message = _shard_map_mistake(str(error))
            if message:
                raise Mistake(message) from None
            raise
    return call


# --------------------------------------------------------------------------- 06.1

def _judge_specs(answer: Any) -> None:
    from jax import P

    if not isinstance(answer, tuple) or len(answer) != 2:
        raise Mistake(f"expected a pair (in_specs, out_specs), but got {describe(answer)}")
    in_specs, out_specs = answer
    if not isinstance(in_specs, tuple) or len(in_specs) != 3:
        raise Mistake("in_specs should be a tuple of 3 PartitionSpecs, one per argument "
                      f"(params, x, y), but got {describe(in_specs)}")
    if not isinstance(out_specs, tuple) or len(out_specs) != 2:
        raise Mistake("out_specs should be a tuple of 2 PartitionSpecs, one per output "
                      f"(new params, one number per device), but got {describe(out_specs)}")
    if any(isinstance(s, int) or s is None for s in in_specs + out_specs):
        raise Mistake("those are pmap's in_axes/out_axes numbers; shard_map wants a PartitionSpec for each, "
                      "like P() or P(('host', 'device'))")
    specs = [require_spec(s) for s in in_specs + out_specs]
    mesh = _judge_mesh((2, 4))
    slots = [("in_specs[0] (params, in_axes=None)", (16,), False),
             ("in_specs[1] (x, in_axes=0)", (16, 3), True),
             ("in_specs[2] (y, in_axes=0)", (16,), True),
             ("out_specs[0] (params, out_axes=None)", (16,), False),
             ("out_specs[1] (per-device numbers, out_axes=0)", (8,), True)]
    for (what, _, _), spec in zip(slots, specs):
        if splits_host_and_device_apart(tuple(spec)):
            split = " and ".join(f"dimension {i} over {e!r}" for i, e in enumerate(spec) if e is not None)
            raise Mistake(f"{what}: {spec} splits {split}; to split dimension 0 over both, group them in "
                          "one tuple: P(('host', 'device'))")
    for (what, shape, split), spec in zip(slots, specs):
        got = placement(mesh, spec, shape)
        if not split:
            if got != placement(mesh, P(), shape):
                raise Mistake(f"{what}: None means every device has the whole value, which is P(), "
                              f"not {spec}")
            continue
        if got == placement(mesh, P(DATA), shape):
            continue
        if got == placement(mesh, P("device"), shape):
            raise Mistake(f"{what}: P('device') splits over one host's 4 devices and copies the result "
                          "across hosts, so each host would hold the same rows. Split over both axes: "
                          "P(('host', 'device'))")
        if got == placement(mesh, P(("device", "host")), shape):
            raise Mistake(f"{what}: P(('device', 'host')) numbers the devices device-first, unlike pmap's "
                          "host-by-host order: write P(('host', 'device'))")
        if got == placement(mesh, P("host"), shape):
            raise Mistake(f"{what}: P('host') splits over the 2 hosts only; in_axes=0 / out_axes=0 give "
                          "every device its own slice: P(('host', 'device'))")
        if got == placement(mesh, P(), shape):
            if what.startswith("out"):
                raise Mistake(f"{what}: out_axes=0 keeps one number per device, stacked; P() would claim "
                              "they are all the same. Use P(('host', 'device'))")
            raise Mistake(f"{what}: in_axes=0 splits the batch over the devices; P() gives every device "
                          "all of it. Use P(('host', 'device'))")
        raise Mistake(f"{what}: {spec} does not split dimension 0 over every device in pmap's order; "
                      "use P(('host', 'device'))")


register(Judged(
    id="06.1", kernel=KERNEL,
    title="in_axes/out_axes become in_specs/out_specs",
    answer_name="specs",
    setup=_DATA_SETUP,
    solution='''specs = (
    (P(), P(DATA), P(DATA)),  # in_axes=(None, 0, 0)
    (P(), P(DATA)),           # out_axes=(None, 0)
)''',
    judged_by=_judge_specs,
    hints=(
        "None (the same on every device) becomes P(); 0 (split over the devices) becomes a spec that "
        "splits dimension 0 over the mesh axes.",
        "pmap's one device axis spans both hosts; on the (host, device) mesh that is both axes together, "
        "host first: P(('host', 'device')), i.e. P(DATA).",
    ),
    wrong_answers=(
        WrongAnswer("specs = ((P(), P('device'), P('device')), (P(), P('device')))", "copies the result across hosts"),
        WrongAnswer("specs = ((P(DATA), P(DATA), P(DATA)), (P(), P(DATA)))", "which is P()"),
        WrongAnswer("specs = ((P(), P(DATA), P(DATA)), (P(), P()))", "one number per device"),
        WrongAnswer("specs = ((P(), P(('device', 'host')), P(('device', 'host'))), (P(), P(DATA)))", "device-first"),
        WrongAnswer("specs = ((None, 0, 0), (None, 0))", "pmap's in_axes/out_axes"),
        WrongAnswer("specs = ((P(), P('host', 'device'), P('host', 'device')), (P(), P('host', 'device')))",
                    "group them in one tuple"),
        WrongAnswer("specs = ((P(), P(*DATA), P(*DATA)), (P(), P(DATA)))", "group them in one tuple"),
        WrongAnswer("specs = ((P(), P(DATA), P(DATA)), P())", "a tuple of 2"),
    ),
))


# --------------------------------------------------------------------------- 06.2

def _shard_maps(jaxpr, inside_jit: bool = False):
    """Yield (shard_map equation, whether a jit encloses it) for every shard_map in a jaxpr, nested ones too."""
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "shard_map":
            yield eqn, inside_jit
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                sub = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr holds its Jaxpr in .jaxpr
                if hasattr(sub, "eqns"):
                    yield from _shard_maps(sub, inside_jit or name in ("jit", "pjit"))


def _value_and_grad_np(w, b, x, y):
    """Loss and gradients of the notebook's linear model, in float64 numpy (no JAX compiles)."""
    import numpy as np

    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    r = x @ np.asarray(w, np.float64) + float(b) - y
    return float(np.mean(r**2)), 2 * x.T @ r / len(y), 2 * float(np.mean(r))


def _judge_momentum(make_momentum_step: Any) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding

    if not callable(make_momentum_step):
        raise Mistake(f"expected a function make_momentum_step(mesh), but got {describe(make_momentum_step)}")
    mesh = _judge_mesh((4, 2))
    step = call_learner(make_momentum_step, mesh)
    if not callable(step):
        raise Mistake(f"make_momentum_step(mesh) should return the step function, but returned {describe(step)}")
    rng = np.random.default_rng(6)
    n, f = 32, 4
    x = rng.normal(size=(n, f)).astype(np.float32)
    y = (x @ rng.normal(size=f) + 0.5).astype(np.float32)
    params = {"w": jnp.asarray(rng.normal(size=f), jnp.float32), "b": jnp.asarray(0.2, jnp.float32)}
    velocity = {"w": jnp.asarray(rng.normal(size=f) * 0.1, jnp.float32), "b": jnp.asarray(-0.05, jnp.float32)}
    xg = jax.device_put(x, NamedSharding(mesh, jax.P(DATA)))
    yg = jax.device_put(y, NamedSharding(mesh, jax.P(DATA)))
    out = call_learner(_spy(step), params, velocity, xg, yg)
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise Mistake(f"step should return (params, velocity, loss), but returned {describe(out)}")
    new_params, new_velocity, loss = out
    for name, tree in (("params", new_params), ("velocity", new_velocity)):
        if not isinstance(tree, dict) or set(tree) != {"w", "b"}:
            raise Mistake(f"the returned {name} should be a dict with 'w' and 'b' like the input, but is "
                          f"{describe(tree)}")
    true_loss, true_grad, _ = _value_and_grad_np(params["w"], params["b"], x, y)
    v_w = np.asarray(velocity["w"])
    got_grad = np.asarray(new_velocity["w"], dtype=np.float64) - 0.9 * v_w
    if np.shape(got_grad) != true_grad.shape:
        raise Mistake(f"the returned velocity['w'] has shape {np.shape(new_velocity['w'])}, expected {true_grad.shape}")
    devices = mesh.size
    rows0 = slice(0, n // devices)  # device 0's block of the batch
    local_loss0, local0, _ = _value_and_grad_np(params["w"], params["b"], x[rows0], y[rows0])
    if not np.allclose(got_grad, true_grad, rtol=1e-4, atol=1e-5):
        ratio = got_grad / true_grad
        if np.allclose(ratio, devices, rtol=1e-3):
            raise Mistake(f"your gradient is {devices}x the true one: under check_vma the grad of "
                          "replicated (P()) params is already summed over devices; take the pmean of the "
                          "loss, not of the grad")
        if np.allclose(ratio, 1 / devices, rtol=1e-3):
            raise Mistake(f"your gradient is 1/{devices} of the true one: the grad of the pmean'd loss is "
                          "already the mean gradient; do not divide it again")
        if np.allclose(got_grad, local0, rtol=1e-4, atol=1e-5):
            raise Mistake("your gradient is device 0's alone (its own slice of the batch): with "
                          "check_vma=False nothing sums the devices' gradients, and out_specs=P() returns "
                          "device 0's. Keep check_vma on and take grad of the pmean'd loss")
        raise Mistake("your velocity update does not match pmap's: velocity = 0.9 * velocity + grad, with "
                      "grad the gradient of the loss on the whole batch")
    want_w = np.asarray(params["w"]) - LR * (0.9 * v_w + true_grad)
    if not np.allclose(np.asarray(new_params["w"]), want_w, rtol=1e-4, atol=1e-5):
        raise Mistake("the velocity is right but the parameters are not: params = params - LR * velocity, "
                      "with the NEW velocity")
    got_loss = float(np.asarray(loss).reshape(-1)[0]) if np.size(loss) else float("nan")
    if np.size(loss) != 1:
        raise Mistake(f"the loss should be one number (out_specs=P()), but has shape {np.shape(loss)}")
    if not np.isclose(got_loss, true_loss, rtol=1e-4):
        if np.isclose(got_loss, local_loss0, rtol=1e-4):
            raise Mistake("your loss is device 0's alone: pmean it over ('host', 'device') (check_vma=False "
                          "let out_specs=P() return one device's value)")
        raise Mistake(f"your loss {got_loss:.4f} is not the loss on the whole batch, {true_loss:.4f}")
    # The numbers are right. Now how: a jitted shard_map with check_vma on (a faithful pmap copy,
    # pmean of the gradients under check_vma=False, also gives the right numbers).
    try:
        jaxpr = jax.make_jaxpr(step)(params, velocity, xg, yg).jaxpr
    except Exception:  # not traceable (e.g. converts to numpy inside): judged on the numbers alone
        return
    found = list(_shard_maps(jaxpr))
    if not found:
        raise Mistake("the numbers are right, but your step does not use jax.shard_map; this exercise is "
                      "the port to shard_map")
    if any(not eqn.params.get("check_vma", True) for eqn, _ in found):
        raise Mistake("this passes only because check_vma is off (check_vma=False, as in pmap, where each "
                      "device's gradient is its own slice's); keep it on and take grad of the pmean'd loss")
    if not all(jitted for _, jitted in found):
        raise Mistake("the numbers are right, but the step is not jitted: wrap the shard_map in jax.jit, "
                      "as the prompt asks (a bare shard_map runs op by op)")


_MOMENTUM_SOLUTION = '''
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
'''


def _momentum_variant(body: str, specs: str = "in_specs=(P(), P(), P(DATA), P(DATA)), out_specs=(P(), P(), P())",
                      extra: str = "") -> str:
    return f'''
def make_momentum_step(mesh):
    def body(params, velocity, x, y):
{body}
        velocity = jax.tree.map(lambda v, g: 0.9 * v + g, velocity, grads)
        params = jax.tree.map(lambda p, v: p - LR * v, params, velocity)
        return params, velocity, loss

    return jax.jit(jax.shard_map(body, mesh=mesh, {specs}{extra}))
'''


_PMEAN_GRAD = '''        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = jax.lax.pmean(grads, DATA)
        loss = jax.lax.pmean(loss, DATA)'''
_GRAD_PMEAN = '''        loss, grads = jax.value_and_grad(lambda p: jax.lax.pmean(loss_fn(p, x, y), DATA))(params)'''

register(Judged(
    id="06.2", kernel=KERNEL,
    title="a momentum step ported to shard_map, gradient and all",
    answer_name="make_momentum_step",
    setup=_MODEL_SETUP,
    solution=_MOMENTUM_SOLUTION,
    judged_by=_judge_momentum,
    hints=(
        "Translate pmap's in_axes=(None, None, 0, 0) and out_axes=None into in_specs and out_specs, and wrap "
        "the shard_map in jax.jit.",
        "With check_vma on, the gradient of P() parameters is already summed over devices: differentiate "
        "lambda p: jax.lax.pmean(loss_fn(p, x, y), DATA) instead of averaging the gradients.",
    ),
    wrong_answers=(
        WrongAnswer(_momentum_variant(_PMEAN_GRAD), "your gradient is 8x the true one"),
        WrongAnswer(_momentum_variant(_GRAD_PMEAN, extra=", check_vma=False"), "device 0's alone"),
        WrongAnswer(_momentum_variant(
            _GRAD_PMEAN,
            specs="in_specs=(P(), P(), P('device'), P('device')), out_specs=(P(), P(), P())"),
            "does not match how the batch is placed"),
        WrongAnswer(_momentum_variant(
            _GRAD_PMEAN,
            specs="in_specs=(P(), P(DATA), P(DATA), P(DATA)), out_specs=(P(), P(), P())"),
            "replicated"),
        WrongAnswer(_momentum_variant('''        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = jax.lax.pmean(grads, DATA)'''), "still differs between devices"),
        WrongAnswer(_momentum_variant(_PMEAN_GRAD, extra=", check_vma=False"), "passes only because check_vma is off"),
        WrongAnswer('''
def make_momentum_step(mesh):
    def body(params, velocity, x, y):
        loss, grads = jax.value_and_grad(lambda p: jax.lax.pmean(loss_fn(p, x, y), DATA))(params)
        velocity = jax.tree.map(lambda v, g: 0.9 * v + g, velocity, grads)
        params = jax.tree.map(lambda p, v: p - LR * v, params, velocity)
        return params, velocity, loss

    return jax.shard_map(body, mesh=mesh, in_specs=(P(), P(), P(DATA), P(DATA)), out_specs=(P(), P(), P()))
''', "not jitted"),
    ),
))


# --------------------------------------------------------------------------- 06.3

def _judge_sq_body(sq_body: Any) -> None:
    import jax
    import numpy as np
    from jax.sharding import NamedSharding

    if not callable(sq_body):
        raise Mistake(f"expected a function sq_body(block), but got {describe(sq_body)}")
    mesh = _judge_mesh((4, 2))
    rng = np.random.default_rng(3)
    b, f = 3, 5
    data = rng.normal(size=(8 * b, f)).astype(np.float32)
    x = jax.device_put(data, NamedSharding(mesh, jax.P(DATA)))

    def run(x):
        try:
            return jax.jit(jax.shard_map(sq_body, mesh=mesh, in_specs=jax.P(DATA), out_specs=jax.P(DATA)))(x)
        except ValueError as error:
            if "has rank 0" in str(error):
                raise Mistake("your body returns a scalar, and shard_map glues the blocks' results along an "
                              "axis: keep one of length 1, e.g. jnp.sum(block ** 2)[None] or "
                              ".reshape(1)") from None
            raise

    got = np.asarray(call_learner(run, x))
    blocks = data.reshape(8, b, f)
    right = (blocks**2).sum((1, 2))
    if got.shape == right.shape and np.allclose(got, right, rtol=1e-5):
        return
    if got.shape == (8, 1) and np.allclose(got[:, 0], right, rtol=1e-5):
        raise Mistake("your result is (8, 1): keepdims=True kept both axes of the 2-D block. Keep just one, "
                      "e.g. jnp.sum(block ** 2).reshape(1)")
    if got.shape == (8 * b,):
        raise Mistake(f"you return one sum per row ({8 * b} in all), not one per device: sum over the whole "
                      "block")
    if got.shape == (8, f):
        raise Mistake(f"you return one sum per column, shape (8, {f}); sum over the whole block, both axes")
    if got.shape == (8,) and np.allclose(got, right.sum(), rtol=1e-5):
        raise Mistake("every device returns the total over all devices: you added a psum. Each device's "
                      "own sum is wanted, as pmap computed it")
    if got.shape == (8,) and np.allclose(got, (blocks[:, 0] ** 2).sum(1), rtol=1e-5):
        raise Mistake("you summed only the first row of each block: the block is (B, F) with no device "
                      "axis in front, so there is nothing to index away with block[0]")
    raise Mistake(f"for a global batch of shape {data.shape} on a mesh {dict(mesh.shape)} the result has "
                  f"shape {got.shape} and differs from pmap's per-device sums of squares")


register(Judged(
    id="06.3", kernel=KERNEL,
    title="a rank-preserving body: one sum per device, shape (1,)",
    answer_name="sq_body",
    setup=_DATA_SETUP,
    solution='''
def sq_body(block):
    """One device's block of the global batch -> its sum of squares, shape (1,)."""
    return jnp.sum(block**2).reshape(1)  # a kept axis of length 1: 8 blocks glue into (8,)
''',
    judged_by=_judge_sq_body,
    hints=(
        "The block is 2-D, (B, F). Sum everything, then give the scalar one axis of length 1.",
        "jnp.sum(block ** 2) is a scalar; .reshape(1) or [None] makes it (1,). keepdims=True would keep "
        "(1, 1).",
    ),
    wrong_answers=(
        WrongAnswer("def sq_body(block):\n    return jnp.sum(block ** 2)", "returns a scalar"),
        WrongAnswer("def sq_body(block):\n    return jnp.sum(block ** 2, keepdims=True)", "kept both axes"),
        WrongAnswer("def sq_body(block):\n    return jnp.sum(block ** 2, axis=1)", "one sum per row"),
        WrongAnswer("def sq_body(block):\n    return jax.lax.psum(jnp.sum(block ** 2), DATA)[None]", "you added a psum"),
        WrongAnswer("def sq_body(block):\n    return jnp.sum(block[0] ** 2)[None]", "first row"),
    ),
))


# --------------------------------------------------------------------------- 06.4

@functools.lru_cache(maxsize=None)
def _pmap_noise(b: int, f: int):
    """What pmap's device i draws with fold_in(key(11), i), for i = 0..7: shape (8, b, f)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    key = jax.random.key(11)
    draw = jax.jit(lambda i: jax.random.uniform(jax.random.fold_in(key, i), (b, f)))  # one compile, 8 calls
    return np.stack([np.asarray(draw(jnp.int32(i))) for i in range(8)])


def _judge_noise(noisy_body: Any) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding

    if not callable(noisy_body):
        raise Mistake(f"expected a function noisy_body(key, block), but got {describe(noisy_body)}")
    mesh = _judge_mesh((4, 2))
    b, f = 3, 5
    key = jax.random.key(11)
    data = np.random.default_rng(4).integers(0, 4, size=(8 * b, f)).astype(np.float32)
    x = jax.device_put(data, NamedSharding(mesh, jax.P(DATA)))

    def run(key, x):
        return jax.jit(jax.shard_map(noisy_body, mesh=mesh, in_specs=(jax.P(), jax.P(DATA)),
                                     out_specs=jax.P(DATA)))(key, x)

    got = np.asarray(call_learner(run, key, x))
    if got.shape != data.shape:
        raise Mistake(f"the result should have the block's shape, glued to {data.shape}, but is {got.shape}")
    want = _pmap_noise(b, f)
    noise = (got - data).reshape(8, b, f)
    if np.allclose(noise, want, atol=1e-5):
        return
    if np.allclose(got.reshape(8, b, f), want, atol=1e-5):
        raise Mistake("you return the noise alone; add it to the block")
    same = lambda i, j: np.allclose(noise[i], noise[j], atol=1e-5)  # noqa: E731
    if all(same(0, i) for i in range(8)):
        raise Mistake("every device drew the same numbers: the key comes in replicated (P()), so fold the "
                      "device's position into it with jax.random.fold_in")
    hosts, per_host = mesh.shape["host"], mesh.shape["device"]
    if all(same(d, h * per_host + d) for h in range(hosts) for d in range(per_host)):
        raise Mistake("device d of every host drew the same numbers as device d of host 0: axis_index('device') "
                      "restarts on each host. Fold in the index over both axes: axis_index(('host', 'device'))")
    if all(same(h * per_host, h * per_host + d) for h in range(hosts) for d in range(per_host)):
        raise Mistake("the devices of one host drew the same numbers: axis_index('host') only tells hosts "
                      "apart. Fold in axis_index(('host', 'device'))")
    swapped = [d * hosts + h for h in range(hosts) for d in range(per_host)]
    if np.allclose(noise, want[swapped], atol=1e-5):
        raise Mistake("each device draws its own numbers, but not pmap's: axis_index(('device', 'host')) "
                      "numbers the devices device-first. pmap counts host by host: ('host', 'device')")
    raise Mistake("each device's noise differs from what pmap's device at the same position draws: use "
                  "jax.random.uniform(jax.random.fold_in(key, jax.lax.axis_index(('host', 'device'))), block.shape)")


register(Judged(
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
    judged_by=_judge_noise,
    hints=(
        "pmap_noise folds the device's position along 'batch' into the key. What numbers the devices the "
        "same way on the (host, device) mesh?",
        "jax.lax.axis_index(DATA) counts 0..7 over both axes, host first, like pmap's axis_index('batch').",
    ),
    wrong_answers=(
        WrongAnswer("def noisy_body(key, block):\n    return block + jax.random.uniform(key, block.shape)",
                    "every device drew the same numbers"),
        WrongAnswer("def noisy_body(key, block):\n    k = jax.random.fold_in(key, jax.lax.axis_index('device'))\n"
                    "    return block + jax.random.uniform(k, block.shape)", "restarts on each host"),
        WrongAnswer("def noisy_body(key, block):\n    k = jax.random.fold_in(key, jax.lax.axis_index('host'))\n"
                    "    return block + jax.random.uniform(k, block.shape)", "only tells hosts apart"),
        WrongAnswer("def noisy_body(key, block):\n    k = jax.random.fold_in(key, jax.lax.axis_index(('device', 'host')))\n"
                    "    return block + jax.random.uniform(k, block.shape)", "device-first"),
        WrongAnswer("def noisy_body(key, block):\n    k = jax.random.fold_in(key, jax.lax.axis_index(DATA))\n"
                    "    return jax.random.uniform(k, block.shape)", "noise alone"),
    ),
))
