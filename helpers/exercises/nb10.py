"""Exercises of notebook 10: Flax NNX and Optax on a (host, device) mesh.

10.1 the factor the gradient trap puts into AdamW's nu; 10.2 the specs of AdamW's moments split
over 'device' (optimizer-state sharding, ZeRO-1 style); 10.3 weights only host 0 has, broadcast to
every host and placed by those shardings, judged in
real processes (one run judges the reference and every catalogued mistake on both meshes).
"""
from __future__ import annotations

import textwrap

from jax import P

from helpers.exercises import forms
from helpers.exercises.core import Kernel, register
from helpers.exercises.kinds import RETURNED_NONE, Raised, Slot, SpecExercise, ValueExercise, course_mesh
from helpers.exercises.rules import SpecRule, ValueRule
from helpers.exercises.processes import ProcessExercise

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)
MESH = (2, 4)  # 2 hosts x 4 devices, host h's devices in row h
DEVICES = 8


# --------------------------------------------------------------------------- 10.1 nu's factor

def _nu_factor() -> float:
    """How much larger AdamW's nu is after one step when the gradient is DEVICES times too large (Optax)."""
    import jax.numpy as jnp
    import optax

    from helpers import nnx_model

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

from helpers import nnx_model
from helpers.layout import format_spec

host = jax.process_index()
_mine = nnx.state(nnx_model.create(nnx_model.SEED + 7 + host))  # what this host loaded
_host0 = {path: np.asarray(v.get_value())  # host 0's numbers, which every host must end up holding
          for path, v in nnx.to_flat_state(nnx.state(nnx_model.create(nnx_model.SEED + 7)))}


def _mesh(layout):
    """(hosts, devices): the first `devices` devices of each process, host by host."""
    per_process = [sorted((d for d in jax.devices() if d.process_index == p), key=lambda d: d.id)
                   for p in range(jax.process_count())]
    return jax.make_mesh(layout, ("host", "device"), devices=[d for ds in per_process for d in ds[:layout[1]]])


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
    from helpers import nnx_model

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
