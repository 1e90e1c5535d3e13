"""Exercises of notebook 10: Flax NNX and Optax on a (host, device) mesh.

10.1 the factor the gradient trap puts into AdamW's nu; 10.4 a shard_map train step without the trap,
judged in real processes (2 x 4 and 2 x 2 meshes); 10.2 the specs of AdamW's moments split
over 'device' (optimizer-state sharding, ZeRO-1 style); 10.3 weights only host 0 has, broadcast to
every host and placed by those shardings, judged in
real processes (one run judges the reference and every catalogued mistake on both meshes).
"""
from __future__ import annotations

import re
import textwrap

from jax import P

from helpers.exercises import forms
from helpers.exercises.core import Kernel, register
from helpers.exercises.kinds import (
    RETURNED_NONE, Raised, Slot, SpecExercise, ValueExercise, course_mesh, varying_over,
)
from helpers.exercises.rules import CodeRule, ErrorRule, SpecRule, ValueRule
from helpers.exercises.processes import ProcessExercise

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)
MESH = (2, 4)  # 2 hosts x 4 devices, host h's devices in row h
DEVICES = 8


# --------------------------------------------------------------------------- 10.1 nu's factor

def _nu_factor() -> float:
    """How much larger AdamW's nu is after one step when the gradient is DEVICES times too large (Optax)."""
    import jax.numpy as jnp
    import optax

    from helpers.training import nnx_model

    params = {"w": jnp.zeros(3)}
    tx = optax.adamw(nnx_model.LEARNING_RATE, weight_decay=nnx_model.WEIGHT_DECAY)

    def nu_after(scale: float):
        grads = {"w": scale * jnp.array([0.5, -1.0, 2.0])}
        _, state = tx.update(grads, tx.init(params), params)
        return state[0].nu["w"]

    return round(float(jnp.mean(nu_after(DEVICES) / nu_after(1.0))), 3)


register(ValueExercise(
    id="10.1", kernel=KERNEL, answer_name="nu_factor",
    title="the gradient trap leaves AdamW's loss alone and makes nu 64 times too large",
    solution="nu_factor = 64  # the gradient is 8 x too large, and nu averages its square: 8 ** 2",
    form=forms.number("nu_factor"),
    right=_nu_factor,
    wrong={
        8.0: "8 is how much too large the gradient is; nu is the running average of the gradient's "
             "SQUARE, element by element",
        1.0: "the losses agree, but the state does not: the trapped gradient is 8 times too large, and nu "
             "stores what it sees",
    },
    rules=(ValueRule(lambda v: abs(v - DEVICES ** 0.5) < 0.01, example=2.828,
                say="nu holds squares of the gradient, not square roots: AdamW takes the square root only when it "
                    "divides mu by it"),
           ValueRule(lambda v: v <= 0, example=-64.0,
                say="nu is a running average of squares, never negative: the factor between two of them is "
                    "a positive number"),
           ValueRule(lambda v: 0 < v < 1, example=0.125,
                say="a factor below 1 would make nu smaller; the trapped gradient is larger than the right one "
                    "(pmean of a gradient that JAX has already summed over 8 devices)"),),
    otherwise=lambda v: (f"{v:g} is not it: the gradient is 8 times too large (8 devices), and after one step "
                         "nu = (1 - b2) * g ** 2"),
    hints=(
        "With check_vma on, JAX sums the gradient of the replicated parameters over all 8 devices; the "
        "pmean then divides by 8 and adds again: the gradient stays 8 times the right one.",
        "After the first step AdamW's nu is (1 - b2) * g ** 2, element by element. Scale g by 8.",
    ),
))


# --------------------------------------------------------------------------- 10.2 the moments' specs

NAMES = ("hidden.kernel", "hidden.bias", "out.kernel", "out.bias")
_ACROSS_HOSTS = ("that splits the moment over the hosts too: each host would hold only half of it. The rule keeps a "
                 "whole copy on every host and splits it over the 4 devices of each host, 'device' only")
_WHOLE = "P() keeps a whole copy on every device: nothing is saved. 4 divides a dimension of this array; split it"


def _splits_only_course_axes(spec) -> bool:
    """Every axis `spec` names is 'host' or 'device' (a misspelt axis gets the engine's message)."""
    names = [a for e in spec if e is not None for a in (e if isinstance(e, tuple) else (e,))]
    return all(a in ("host", "device") for a in names)


def _over_hosts(example) -> SpecRule:
    """Any other spec that names 'host' (a mistake the slot's table does not list); `example` is one."""
    def names_host(spec) -> bool:
        return any("host" in (e if isinstance(e, tuple) else (e,)) for e in spec if e is not None)
    return SpecRule(names_host, example=example,
                say="'host' appears in that spec, so the hosts split the moment: each host would hold only part "
                    "of it. The rule keeps a whole copy on every host: split over 'device' only")


_HOST_ONLY = ("'host' alone splits the array between the two hosts and copies each half on a host's 4 devices: "
              "the hosts must then exchange slices at every update. Split over 'device', inside each host")


register(SpecExercise(
    id="10.2", kernel=KERNEL, answer_name="moment_specs",
    title="AdamW's moments split over 'device', a whole copy per host (optimizer-state sharding)",
    solution=textwrap.dedent("""\
        moment_specs = {
            "hidden.kernel": P(None, "device"),  # (4, 16): split the 16 columns
            "hidden.bias": P("device"),          # (16,)
            "out.kernel": P("device", None),     # (16, 1): split the 16 rows
            "out.bias": P(),                     # (1,): nothing to split, a copy everywhere
        }"""),
    mesh=lambda: course_mesh(MESH),
    form=forms.keys(NAMES, forms.spec("P(None, 'device')"), "a PartitionSpec"),
    assemble=lambda specs: dict(zip(NAMES, specs)),
    slots=(
        Slot(shape=(4, 16), right=P(None, "device"), label="hidden.kernel (4, 16)", wrong={
            P("device", None): "that splits the 4 rows, one per device; the rule splits the LARGEST dimension "
                               "that 4 divides: the 16 columns",
            P(None, ("host", "device")): _ACROSS_HOSTS,
            P(None, "host"): _HOST_ONLY,
            P("host", "device"): "that splits the 4 rows over the hosts too: each host would hold only half "
                                 "of the moment. Keep a whole copy per host: only 'device' may appear",
            P(): _WHOLE,
        }, rules=(_over_hosts(P(None, ("device", "host"))),)),
        Slot(shape=(16,), right=P("device"), label="hidden.bias (16,)", wrong={
            P(("host", "device")): _ACROSS_HOSTS,
            P("host"): _HOST_ONLY,
            P(): _WHOLE,
        }, rules=(_over_hosts(P(("device", "host"))),)),
        Slot(shape=(16, 1), right=P("device", None), label="out.kernel (16, 1)", wrong={
            P(("host", "device"), None): _ACROSS_HOSTS,
            P("host", None): _HOST_ONLY,
            P(): _WHOLE,
        }, rules=(SpecRule(lambda spec: _splits_only_course_axes(spec) and len(spec) == 2 and spec[1] is not None,
                       example=P(None, "device"),
                       say="the second dimension has size 1: it cannot be split (JAX refuses). Split the "
                           "one that 4 divides, the 16 rows"),
                 _over_hosts(P(("device", "host"), None)))),
        Slot(shape=(1,), right=P(), label="out.bias (1,)", wrong={
            P("device"): "one value cannot be split over 4 devices (JAX refuses): with no dimension that 4 "
                         "divides, the moment stays whole on every device, P()",
        }, rules=(SpecRule(lambda spec: _splits_only_course_axes(spec) and len(spec) == 1 and spec[0] is not None,
                       example=P("host"),
                       say="one value cannot be split (JAX refuses), over the hosts or the devices: with no "
                           "dimension that 4 divides, the moment stays whole on every device, P()"),)),
    ),
    hints=(
        "Only 'device' may appear: a copy per host means nothing is split along 'host'. Which dimension of "
        "each shape does 4 divide?",
        "(4, 16): both 4 and 16 divide by 4, and the rule takes the larger, 16. A shape with no such "
        "dimension gets P().",
    ),
))


# --------------------------------------------------------------------------- 10.3 host 0's weights on every host

# Host 0 "loaded" the model of seed SEED + 7; host h holds that of seed SEED + 7 + h. One real run of
# 2 processes x 4 devices judges several init_state sources on several meshes (sub-meshes of the
# processes' devices): `output` gives one source's verdict on one of them.
_DRIVER = '''
import jax
import numpy as np
from flax import nnx

from helpers.training import nnx_model
from helpers.pictures.layout import format_spec
from helpers.devices import first_devices_mesh as _mesh

host = jax.process_index()
_mine = nnx.state(nnx_model.create(nnx_model.SEED + 7 + host))  # what this host loaded
_host0 = {path: np.asarray(v.get_value())  # host 0's numbers, which every host must end up holding
          for path, v in nnx.to_flat_state(nnx.state(nnx_model.create(nnx_model.SEED + 7)))}


def _host0s(leaves):
    """Whether these leaves (numpy, not global arrays) hold host 0's numbers."""
    try:
        return all(np.array_equal(np.asarray(v.get_value()), _host0[p]) for p, v in leaves.items())
    except Exception:
        return False


def _placement(path, got, want):
    """'params.w1 is placed with P() where opt_sharded places it with P(None, 'device')' (the first wrong leaf)."""
    spec = lambda sharding: format_spec(sharding.spec) if hasattr(sharding, "spec") else type(sharding).__name__
    name = ".".join(str(part) for part in path)
    return f"{name} is placed with {spec(got)}, where opt_sharded places it with {spec(want)}"


def _verdict(state, opt_sharded):
    """[an nnx.State of global arrays shaped like the train state, placed by opt_sharded, holding host 0's numbers];
    [-2, 0, 0]: None; [-1, 0, 0]: no state shaped like it; [0, 0, 0 or -1]: one off the devices, with host 0's
    numbers or not"""
    if state is None:
        return [-2, 0, 0]
    if not isinstance(state, nnx.State):
        return [-1, 0, 0]
    leaves = dict(nnx.to_flat_state(state))
    if set(leaves) != set(_host0):
        return [-1, 0, 0]
    if not all(isinstance(v.get_value(), jax.Array) for v in leaves.values()):
        return [0, 0, 0 if _host0s(leaves) else -1]
    targets = dict(nnx.to_flat_state(opt_sharded))  # path -> NamedSharding
    wrong = next((p for p in sorted(leaves, key=str)
                  if not leaves[p].get_value().sharding.is_equivalent_to(targets[p], _host0[p].ndim)), None)
    placed = 1 if wrong is None else _placement(wrong, leaves[wrong].get_value().sharding, targets[wrong])
    numbers = all(np.array_equal(np.asarray(s.data), _host0[p][s.index])
                  for p, v in leaves.items() for s in v.get_value().addressable_shards)
    return [1, placed, int(numbers)]


def output(namespace, layout):
    mesh = _mesh(layout)
    opt_sharded = namespace["opt_sharded"] = nnx_model.state_shardings(mesh)  # this layout's, and its mesh
    namespace["mesh"] = mesh
    with jax.set_mesh(mesh):  # the host's numbers come as numpy, like loaded weights
        state = namespace["init_state"](jax.tree.map(np.asarray, _mine))
    return _verdict(state, opt_sharded)
'''

_SETUP = textwrap.dedent("""\
    from flax import nnx
    from jax.experimental import multihost_utils
    from helpers.training import nnx_model

    SEED = nnx_model.SEED
    mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), ("host", "device"))
    opt_sharded = nnx_model.state_shardings(mesh)
    """)

_SOLUTION = textwrap.dedent('''\
    def init_state(local_state):
        """The train state placed by opt_sharded, holding host 0's local_state on every host."""
        return jax.device_put(multihost_utils.broadcast_one_to_all(local_state), opt_sharded)
    ''')

_DEVICE_PUT_OWN = textwrap.dedent('''\
    def init_state(local_state):
        return jax.device_put(local_state, opt_sharded)
    ''')

_FRESH_SEED = textwrap.dedent('''\
    def init_state(local_state):
        return jax.jit(lambda: nnx.state(nnx_model.create(SEED)), out_shardings=opt_sharded)()
    ''')

_NOT_PLACED = textwrap.dedent('''\
    def init_state(local_state):
        return multihost_utils.broadcast_one_to_all(local_state)
    ''')

_REPLICATED = textwrap.dedent('''\
    def init_state(local_state):
        return jax.device_put(multihost_utils.broadcast_one_to_all(local_state), NamedSharding(mesh, P()))
    ''')

_OWN_AS_IS = textwrap.dedent('''\
    def init_state(local_state):
        return local_state
    ''')


def _otherwise(case) -> str:
    if isinstance(case.got, Raised):
        return f"in the real run, {case.got.text}"
    where = f"on {case.layout[0]} hosts x {case.layout[1]} devices"
    if any(verdict[0] == -2 for verdict in case.got):
        return RETURNED_NONE
    if any(verdict[0] != 1 for verdict in case.got):
        return (f"{where}, init_state did not return the train state: an nnx.State shaped like "
                "local_state whose every leaf is a jax.Array on the mesh")
    wrong = next((verdict[1] for verdict in case.got if verdict[1] != 1), None)
    if wrong is not None:
        return f"{where}, the state is not placed by opt_sharded: {wrong}"
    hosts = [host for host, verdict in enumerate(case.got) if not verdict[2]]
    return f"{where}, host(s) {hosts} do not hold host 0's numbers: every host must end with host 0's local_state"


register(ProcessExercise(
    id="10.3", kernel=KERNEL, answer_name="init_state", signature="(local_state)",
    title="weights only host 0 has: broadcast them, then place them by opt_sharded",
    setup=_SETUP,
    solution=_SOLUTION,
    driver=_DRIVER, together=True, on=(2, 4),
    timeout=180.0,
    meshes=((2, 4), (2, 2)),
    wrong={
        _DEVICE_PUT_OWN: "jax.device_put compared the hosts' local_state (numpy) across the hosts and refused: "
                         "they differ, and device_put cannot tell which host is right. Send host 0's numbers "
                         "to every host first",
        _FRESH_SEED: "every host holds the same numbers, placed by opt_sharded, but not host 0's local_state (a "
                     "fresh model of seed SEED is not the weights host 0 loaded): every host must end with "
                     "host 0's local_state as it is",
        _NOT_PLACED: "every host has host 0's numbers, but as numpy arrays on the host: place them on the "
                     "devices by opt_sharded",
        _REPLICATED: _otherwise,
        _OWN_AS_IS: "each host returned its own local_state as it is: host 1 keeps its own numbers, and "
                    "they stay numpy arrays on the host. Send host 0's numbers to every host, then place them "
                    "by opt_sharded",
    },
    otherwise=_otherwise,
    hints=(
        "Only host 0's local_state is right, and jax.device_put refuses numpy values that differ between "
        "hosts. Something must carry host 0's numbers to the other hosts first: "
        "jax.experimental.multihost_utils has a function for exactly that.",
        "multihost_utils.broadcast_one_to_all(local_state) returns host 0's numbers on every host (as "
        "numpy); jax.device_put(..., opt_sharded) then places them.",
    ),
))


# --------------------------------------------------------------------------- 10.4 the trap, in real processes

# One real run of 2 processes x 4 devices judges train_step sources on the 2 x 4 mesh and on a
# 2 x 2 one (the first two devices of each process): one AdamW step from the seed's state on a
# global batch of 16 rows per device. After one step from zeros, AdamW's mu is (1 - b1) times
# the gradient, so each device's copy of mu says which gradient that device applied.
_TRAP_DRIVER = '''
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax import P
from jax.sharding import NamedSharding

from helpers.training import nnx_model, tiny
from helpers.devices import first_devices_mesh as _mesh

_B1 = 0.9  # optax.adamw's default b1
_graphdef, _abstract = nnx_model.abstract_state(nnx_model.SEED)


def _flat(leaves):
    return np.concatenate([np.ravel(np.asarray(leaf, np.float64)) for leaf in leaves])


def _reference(x, y):
    """One device's loss and gradient on the whole batch."""
    with jax.set_mesh(None), jax.default_device(jax.local_devices()[0]):
        loss, grads = _one_device(x, y)
    return float(loss), _flat(jax.tree.leaves(grads))


@jax.jit
def _one_device(x, y):
    model, _ = nnx_model.create(nnx_model.SEED)
    return nnx.value_and_grad(nnx_model.loss_fn)(model, x, y)


def _local_copies(array):
    """This host's devices' copies of a replicated array (None if some device holds only a part)."""
    shards = sorted(array.addressable_shards, key=lambda s: s.device.id)
    if any(s.data.shape != array.shape for s in shards):
        return None
    return [np.asarray(s.data, np.float64) for s in shards]


def _verdict(out, loss_ref, grad_ref):
    """[loss factor, gradient factor of this host's first device, its devices agree (1/0), the gradient is a
    multiple of the right one (1/0)]; [-1, 0, 0, 0]: not (new state, loss) on every device"""
    try:
        state, loss = out
        mu = nnx.merge(_graphdef, state)[1].opt_state[0].mu
        copies = [_local_copies(leaf) for leaf in jax.tree.leaves(mu)]
        losses = _local_copies(loss)
    except Exception:
        return [-1, 0, 0, 0]
    if losses is None or any(c is None for c in copies) or np.size(losses[0]) != 1:
        return [-1, 0, 0, 0]
    grads = [_flat(leaves) / (1 - _B1) for leaves in zip(*copies)]  # one gradient per local device
    factor = float(grads[0] @ grad_ref / (grad_ref @ grad_ref))
    agree = all(np.allclose(g, grads[0], rtol=1e-4, atol=1e-6) for g in grads)
    multiple = np.allclose(grads[0], factor * grad_ref, rtol=1e-3, atol=1e-6)
    return [round(float(losses[0].ravel()[0]) / loss_ref, 3), round(factor, 3), int(agree), int(multiple)]


@functools.cache
def _inputs(layout):
    """The layout's mesh, its global batch (16 rows a device), the seed's state replicated on it, and one
    device's loss and gradient on that batch; the same for every program."""
    mesh = _mesh(layout)
    x, y = tiny.global_batch_at(0, 16 * mesh.size)
    rows = NamedSharding(mesh, P(("host", "device")))
    xs, ys = (jax.make_array_from_callback(a.shape, rows, lambda index, a=a: a[index]) for a in (x, y))
    replicated = jax.tree.map(lambda _: NamedSharding(mesh, P()), _abstract)
    state = jax.jit(lambda: nnx.state(nnx_model.create(nnx_model.SEED)), out_shardings=replicated)()
    return mesh, (state, xs, ys), _reference(x, y)


def output(namespace, layout):
    mesh, args, reference = _inputs(layout)
    with jax.set_mesh(mesh):
        step = namespace["make_train_step"]()
        if step is None:
            return [-2, 0, 0, 0]
        out = jax.jit(step)(*args) if callable(step) else None  # jitted here too: a step run eagerly is slow
    return _verdict(out, *reference)
'''

_TRAP_SETUP = textwrap.dedent("""\
    from functools import partial
    from flax import nnx
    from helpers.training import nnx_model

    BOTH = ("host", "device")
    graphdef, _ = nnx_model.abstract_state(nnx_model.SEED)
    """)


def _step(loss: str, grads: str = "", vma: str = "", returned: str = "loss") -> str:
    """A make_train_step whose step differentiates `loss` of m (then computes `grads`, if given)."""
    grad_lines = (f"        loss, grads = nnx.value_and_grad(lambda m: {loss})(model)\n" + grads)
    return (
        "def make_train_step():\n"
        "    @jax.jit\n"
        f"    @partial(jax.shard_map, in_specs=(P(), P(BOTH), P(BOTH)), out_specs=(P(), P()){vma})\n"
        "    def train_step(state, x, y):\n"
        "        model, optimizer = nnx.merge(graphdef, state)\n"
        + grad_lines +
        "        optimizer.update(model, grads)\n"
        f"        return nnx.state((model, optimizer)), {returned}\n"
        "    return train_step\n")


_LOCAL = "nnx_model.loss_fn(m, x, y)"
_GLOBAL = "jax.lax.pmean(nnx_model.loss_fn(m, x, y), BOTH)"
_TRAP_SOLUTION = _step(_GLOBAL)
_PMEAN_GRADS = _step(_LOCAL, "        grads = jax.lax.pmean(grads, BOTH)\n", returned="jax.lax.pmean(loss, BOTH)")
_PSUM_LOSS = _step("jax.lax.psum(nnx_model.loss_fn(m, x, y), BOTH)")
_PSUM_GRADS = _step(_LOCAL, "        grads = jax.lax.psum(grads, BOTH)\n", returned="jax.lax.pmean(loss, BOTH)")
_NO_COLLECTIVE = _step(_LOCAL)
_VMA_OFF = _step(_GLOBAL, vma=", check_vma=False")
_VMA_OFF_NO_COLLECTIVE = _step(_LOCAL, vma=", check_vma=False")
_VMA_OFF_TRAP = _step(_LOCAL, "        grads = jax.lax.pmean(grads, BOTH)\n", vma=", check_vma=False",
                      returned="jax.lax.pmean(loss, BOTH)")
_PSUM_OVER_8 = _step("jax.lax.psum(nnx_model.loss_fn(m, x, y), BOTH) / 8")
_PMEAN_GRADS_OVER_8 = _step(_LOCAL, "        grads = jax.tree.map(lambda g: jax.lax.pmean(g, BOTH) / 8, grads)\n",
                            returned="jax.lax.pmean(loss, BOTH)")


def _where(case) -> str:
    return f"on {case.layout[0]} hosts x {case.layout[1]} devices ({case.devices} devices)"


def _factor(case) -> float:
    """The factor between host 0's gradient and the right one, as measured."""
    return case.got[0][1]


def _turns_check_vma_off(source, layout) -> bool:
    return bool(re.search(r"check_vma\s*=\s*False", source))


def _trap_otherwise(case) -> str:
    if any(verdict[0] == -2 for verdict in case.got):
        return RETURNED_NONE
    if any(verdict[0] == -1 for verdict in case.got):
        return (f"{_where(case)}, make_train_step did not return a step that returns (new state, loss): the "
                "state of (model, optimizer) after the update and one loss, each the same on every device")
    if len({tuple(verdict) for verdict in case.got}) > 1 or not all(verdict[2] for verdict in case.got):
        return (f"{_where(case)}, the devices applied different gradients (host 0's first device: "
                f"{_factor(case):g} x the right one, host 1's: {case.got[1][1]:g} x): every device must apply "
                "the gradient of the global batch's loss")
    loss, factor, _, multiple = case.got[0]
    if not multiple:
        return (f"{_where(case)}, the gradient your step applied is not the gradient of the mean squared error "
                "over the global batch (nor a multiple of it)")
    return (f"{_where(case)}, your step's loss is {loss:g} x and its gradient {factor:g} x the right ones: "
            "the loss is the mean squared error over the whole global batch, and the gradient its gradient")


register(ProcessExercise(
    id="10.4", kernel=KERNEL, answer_name="make_train_step", signature="()",
    title="the gradient trap, in real processes: a shard_map step whose gradient is the global batch's",
    setup=_TRAP_SETUP,
    solution=_TRAP_SOLUTION,
    driver=_TRAP_DRIVER, together=True, on=(2, 4),
    timeout=180.0,
    meshes=((2, 4), (2, 2)),
    wrong={
        _PMEAN_GRADS: lambda case: (
            f"the gradient trap: {_where(case)} your gradient is {_factor(case):g} x the right one, the number "
            "of devices. With check_vma on, nnx.grad of a device's own loss already sums the gradient of the "
            "replicated parameters over every device, and a pmean of those sums is still the sum. Average the "
            "losses before you take the gradient, not the gradients after"),
        _PSUM_GRADS: lambda case: (
            f"{_where(case)} your gradient is {_factor(case):g} x the right one, the number of devices squared: "
            "with check_vma on, nnx.grad of a device's own loss already sums the gradient over every device, "
            "and your psum multiplies that sum by the device count again"),
        _PSUM_LOSS: lambda case: (
            f"{_where(case)} your loss and gradient are {_factor(case):g} x the right ones: psum adds the "
            "devices' losses, each already a mean over its own rows. The global batch's loss is their mean"),
        _VMA_OFF: lambda case: (
            f"with check_vma=False, each device applied the gradient of its own rows only ({_where(case)}, host "
            f"0's first device's is {_factor(case):g} x the right one, host 1's {case.got[1][1]:g} x), so "
            "the devices, and the hosts, hold different models after one step: without the check, JAX no "
            "longer sums the gradient of the replicated parameters, and nothing checks that out_specs=P() "
            "is the same everywhere. Keep check_vma on (the default)"),
        _VMA_OFF_NO_COLLECTIVE: lambda case: (
            f"with no collective and check_vma=False, each device trained on its own rows: {_where(case)}, host "
            f"0's first device's loss is {case.got[0][0]:g} x and its gradient {_factor(case):g} x the right "
            f"ones, host 1's {case.got[1][0]:g} x and {case.got[1][1]:g} x, so the devices, and the hosts, hold "
            "different models after one step. With check_vma on, JAX refuses out_specs=P() for that loss: "
            "keep it on, and make the loss the global batch's before you take the gradient"),
        _PSUM_OVER_8: lambda case: (
            f"{_where(case)} your loss and gradient are {_factor(case):g} x the right ones: you divide by 8, the "
            "device count of the 2 x 4 mesh, not of this one. Let a collective count the devices for you"),
        _PMEAN_GRADS_OVER_8: lambda case: (
            f"{_where(case)} your gradient is {_factor(case):g} x the right one: dividing the trap's gradient by "
            "8 undoes it on 8 devices only (the trap makes it the device count times too large). Average the "
            "losses before you take the gradient, and there is nothing to undo"),
    },
    errors=(ErrorRule(lambda raw: varying_over(raw) is not None, example=_NO_COLLECTIVE,
                 say="JAX refused out_specs=P() for a result that differs from device to device: the loss each "
                     "device computed over its own rows, with no collective to make it the global batch's. "
                     "Turning check_vma off only hides it: each device then applies its own rows' gradient"),),
    checks=(CodeRule(_turns_check_vma_off, example=_VMA_OFF_TRAP,
                 say="the gradients are right, but only because check_vma=False: with it off, JAX does not sum "
                     "the replicated parameters' gradient, so the pmean of the devices' gradients happens to be "
                     "the mean, and nothing checks that what out_specs=P() returns is the same on every device "
                     "(the gradient of the pmean'd loss then gives each device its own rows' gradient). Keep "
                     "check_vma on, and average the losses before you take the gradient"),),
    otherwise=_trap_otherwise,
    hints=(
        "Each device's loss is the mean over its own rows; the global batch's loss is the mean of those "
        "losses over every device. Which of the two does nnx.value_and_grad have to see?",
        "Inside the body, take nnx.value_and_grad of a function of the model that returns jax.lax.pmean of "
        "nnx_model.loss_fn(m, x, y) over BOTH; no collective on the gradients afterwards.",
    ),
))
