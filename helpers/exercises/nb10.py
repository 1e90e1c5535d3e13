"""Exercises of notebook 10: Flax NNX and Optax on a (host, device) mesh.

10.1 the factor the gradient trap puts into AdamW's nu; 10.2 the HSDP specs of AdamW's moments;
10.3 an init of the train state that every host agrees on, judged in a real 2-process run.
"""
from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass
from typing import Any

from jax import P

from helpers.exercises import forms
from helpers.exercises.core import Kernel, Mistake, NotAttempted, describe, register
from helpers.exercises.kinds import ProcessExercise, Raised, Rule, Slot, SpecExercise, ValueExercise, course_mesh
from helpers.layout import format_spec

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
    id="10.1", kernel=KERNEL,
    title="the gradient trap leaves AdamW's loss alone and makes nu 64 times too large",
    answer_name="nu_factor",
    solution="nu_factor = 64  # the gradient is 8 x too large, and nu averages its square: 8 ** 2",
    form=forms.number("nu_factor"),
    right=_nu_factor,
    wrong={
        8.0: "8 is how much too large the gradient is; nu is the running average of the gradient's "
             "SQUARE, element by element",
        1.0: "the losses agree, but the state does not: the trapped gradient is 8 times too large, and nu "
             "stores what it sees",
    },
    rules=(Rule(lambda v: abs(v - DEVICES ** 0.5) < 0.01, example=2.828,
                say="nu holds squares of the gradient, not square roots: AdamW takes the square root only when it "
                    "divides mu by it"),
           Rule(lambda v: 0 < v < 1, example=0.125,
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
_ACROSS_HOSTS = ("that splits the moment over the hosts too: each host would hold only half of it. HSDP keeps a "
                 "whole copy on every host and splits it over the 4 devices of each host, 'device' only")
_WHOLE = "P() keeps a whole copy on every device: nothing is saved. 4 divides a dimension of this array; split it"
_HOST_ONLY = ("'host' alone splits the array between the two hosts and copies each half on a host's 4 devices: "
              "the hosts must then exchange slices at every update. Split over 'device', inside each host")


register(SpecExercise(
    id="10.2", kernel=KERNEL,
    title="AdamW's moments split over 'device', a whole copy per host (HSDP)",
    answer_name="moment_specs",
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
            P(): _WHOLE,
        }),
        Slot(shape=(16,), right=P("device"), label="hidden.bias (16,)", wrong={
            P(("host", "device")): _ACROSS_HOSTS,
            P("host"): _HOST_ONLY,
            P(): _WHOLE,
        }),
        Slot(shape=(16, 1), right=P("device", None), label="out.kernel (16, 1)", wrong={
            P(("host", "device"), None): _ACROSS_HOSTS,
            P("host", None): _HOST_ONLY,
            P(): _WHOLE,
        }),
        Slot(shape=(1,), right=P(), label="out.bias (1,)", wrong={
            P("device"): "one value cannot be split over 4 devices (JAX refuses): with no dimension that 4 "
                         "divides, the moment stays whole on every device, P()",
        }),
    ),
    hints=(
        "Only 'device' may appear: a copy per host means nothing is split along 'host'. Which dimension of "
        "each shape does 4 divide?",
        "(4, 16): both 4 and 16 divide by 4, and the rule takes the larger, 16. A shape with no such "
        "dimension gets P().",
    ),
))


# --------------------------------------------------------------------------- 10.3 an init every host agrees on

_DRIVER = '''
from helpers.launch import initialize

initialize()

import json

import jax
import numpy as np
from flax import nnx

from helpers import nnx_model

with jax.default_device(jax.local_devices()[0]):  # the reference numbers, on this host alone
    _reference = jax.jit(lambda: nnx.state(nnx_model.create(nnx_model.SEED)))()
_reference = {path: np.asarray(v.get_value()) for path, v in nnx.to_flat_state(_reference)}

{answer}

jax.set_mesh(mesh)
_state = init_state()
_verdict = [0, 0, 0]  # [a train state of the right structure, placed by hsdp, this host holds seed SEED's numbers]
if isinstance(_state, nnx.State):
    _leaves = dict(nnx.to_flat_state(_state))
    _targets = {path: getattr(t, "get_value", lambda: t)() for path, t in nnx.to_flat_state(hsdp)}
    if set(_leaves) == set(_reference) and all(isinstance(v.get_value(), jax.Array) for v in _leaves.values()):
        _verdict[0] = 1
        _verdict[1] = int(all(_leaves[p].get_value().sharding.is_equivalent_to(_targets[p], _reference[p].ndim)
                              for p in _leaves))
        _verdict[2] = int(all(np.array_equal(np.asarray(s.data), _reference[p][s.index])
                              for p, v in _leaves.items() for s in v.get_value().addressable_shards))
print(json.dumps(_verdict))
'''

_SETUP = textwrap.dedent("""\
    from flax import nnx
    from helpers import nnx_model

    SEED = nnx_model.SEED
    mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), ("host", "device"))
    hsdp = nnx_model.state_shardings(mesh)
    """)

_SOLUTION = textwrap.dedent('''\
    def init_state():
        """The train state of seed SEED, placed by hsdp, the same on every host."""
        return jax.jit(lambda: nnx.state(nnx_model.create(SEED)), out_shardings=hsdp)()
    ''')

_SEED_PER_HOST = textwrap.dedent('''\
    def init_state():
        model, optimizer = nnx_model.create(seed=SEED + jax.process_index())
        return jax.device_put(nnx.state((model, optimizer)), hsdp)
    ''')

_NO_OUT_SHARDINGS = textwrap.dedent('''\
    def init_state():
        return jax.jit(lambda: nnx.state(nnx_model.create(SEED)))()
    ''')

_DEVICE_PUT = textwrap.dedent('''\
    def init_state():
        return jax.device_put(nnx.state(nnx_model.create(SEED)), hsdp)
    ''')


def _which_hosts(case, index: int) -> list[int]:
    """The hosts whose verdict has a 0 at `index`."""
    return [host for host, verdict in enumerate(case.got) if not verdict[index]]


def _otherwise(case) -> str:
    if isinstance(case.got, Raised):
        return f"in the real run, {case.got.text}"
    if any(not verdict[0] for verdict in case.got):
        return ("init_state must return the train state, an nnx.State of (model, optimizer) like "
                "nnx.state((model, optimizer)), with every leaf a jax.Array")
    if any(not verdict[1] for verdict in case.got):
        return "the state is not placed by hsdp: pass out_shardings=hsdp to jax.jit"
    hosts = _which_hosts(case, 2)
    return (f"on {case.layout[0]} hosts x {case.layout[1]} devices, host(s) {hosts} hold numbers that are not "
            "those of seed SEED: every host must build the state from SEED itself")


@dataclass(frozen=True, kw_only=True)
class _InitExercise(ProcessExercise):
    """ProcessExercise for a function named init_state: stubs and non-functions are told apart before any run."""

    def run_source(self, source: str) -> Any:
        """The function `source` defines, carrying its source (exec'd code has no file to read it from)."""
        fn = super().run_source(source)
        if callable(fn):
            fn.__course_source__ = source
        return fn

    def judge(self, answer: Any) -> None:
        self._screen(answer)  # before any run: a stub or a non-function costs no processes
        super().judge(answer)

    def _screen(self, answer: Any) -> None:
        if isinstance(answer, str) or not inspect.isfunction(answer) or answer.__name__ != self.answer_name:
            raise Mistake(f"expected your function {self.answer_name}() (def {self.answer_name}(): ...), "
                          f"but got {describe(answer)}")
        if answer.__code__.co_names == ("NotImplementedError",):
            raise NotAttempted

    def output_of_answer(self, answer: Any, layout) -> Any:
        source = getattr(answer, "__course_source__", None)
        return super().output_of_answer(source if source is not None else answer, layout)

    def catalogue(self) -> list[tuple[Any, str]]:
        """ProgramExercise's catalogue without running anything (its messages are fixed text):
        listing the mistakes must not start real processes; judging them does."""
        return ([(source, message) for source, message in self.wrong.items()]
                + [(rule.example, rule.say) for rule in self.errors + self.families + self.checks])


register(_InitExercise(
    id="10.3", kernel=KERNEL,
    title="one seed, jit with out_shardings: every host builds its part of the same train state",
    answer_name="init_state",
    setup=_SETUP,
    solution=_SOLUTION,
    driver=_DRIVER,
    timeout=120.0,
    meshes=((2, 4), (2, 2)),
    wrong={
        _SEED_PER_HOST: "host 1 holds other numbers than seed SEED's, though the state is placed right: each "
                        "host used its own seed, and jax.device_put took each host's numbers as its copies "
                        "without checking. Use the same seed, SEED, on every host",
        _NO_OUT_SHARDINGS: "the numbers are right on every host, but the state is not placed by hsdp: without "
                           "out_shardings, jit decides where the state goes. Pass out_shardings=hsdp",
    },
    checks=(Rule(lambda fn, layout: "device_put" in fn.__code__.co_names, example=_DEVICE_PUT,
                 say="the numbers and the placement are right, but every host first builds the whole state and "
                     "then copies it to its devices with device_put, trusting that the hosts built the same. "
                     "Build it inside jax.jit with out_shardings=hsdp: each device computes only its part"),),
    otherwise=_otherwise,
    hints=(
        "Every host runs init_state(). What must be the same on every host for their copies to agree, and "
        "what decides where each array goes?",
        "Section 6 built the HSDP state in one line: jax.jit(lambda: nnx.state(nnx_model.create(SEED)), "
        "out_shardings=hsdp)().",
    ),
))
