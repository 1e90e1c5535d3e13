"""Exercises of notebook 04: pmap's collectives, in_axes/out_axes, pmap on several hosts, and many independent
chains as one global array."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from helpers.exercises import forms
from helpers.exercises.core import Kernel, Mistake, describe, register
from helpers.exercises.kinds import ProgramExercise, ValueExercise, alone, entry
from helpers.exercises.rules import OutputRule, ValueRule

KERNEL = Kernel(devices=8)  # the first cell: use_fake_devices(8)


# ------------------------------------------------------------------ 04.1 which copies stay equal

STATE_NAMES = ("w", "b", "step", "mean_x", "mean_all")


def train_body(state, x):
    """The notebook's pmap step: one device's copy of the state, its own 4 examples."""
    g_w = jax.grad(lambda w: jnp.mean((w * x - 1.0) ** 2))(state["w"])
    g_b = jax.grad(lambda b: jnp.mean((x + b) ** 2))(state["b"])
    return {
        "w": state["w"] - 0.1 * jax.lax.pmean(g_w, "i"),
        "b": state["b"] - 0.1 * g_b,
        "step": state["step"] + 1,
        "mean_x": 0.9 * state["mean_x"] + 0.1 * jnp.mean(x),
        "mean_all": 0.9 * state["mean_all"] + 0.1 * jax.lax.pmean(jnp.mean(x), "i"),
    }


@functools.cache
def _equal_after_step() -> tuple[bool, ...]:
    """For each entry of the state: are the 8 copies still equal after one step? Run by JAX."""
    one = {"w": 0.5, "b": 0.0, "step": 0, "mean_x": 0.0, "mean_all": 0.0}
    state = {k: jnp.full((8,), v, jnp.int32 if k == "step" else jnp.float32) for k, v in one.items()}  # 8 copies
    batches = jnp.asarray(np.random.default_rng(4).normal(size=(8, 4)), jnp.float32)  # each device's own 4 rows
    new = jax.pmap(train_body, axis_name="i")(state, batches)
    return tuple(bool(np.all(np.asarray(new[k]) == np.asarray(new[k])[0])) for k in STATE_NAMES)


_OWN = "comes from this device's own 4 examples, and nothing averages it over the devices"
_WHY = (  # per entry of the state, why its copies stay equal or part
    "w's gradient goes through pmean: every device gets the same average and, from the same w, makes the same update",
    f"b's update uses g_b, which {_OWN}: the copies of b part after one step",
    "every copy of step starts at 0 and adds 1: the same number on every device",
    f"mean_x mixes in jnp.mean(x), which {_OWN}",
    "mean_all mixes in pmean(jnp.mean(x)): the mean over all 8 devices, one number they all get",
)

register(ValueExercise(
    id="04.1", kernel=KERNEL, answer_name="still_equal", title="which copies of the state stay equal after a pmap step",
    solution="still_equal = (True, False, True, False, True)  # w, b, step, mean_x, mean_all",
    form=forms.booleans(5, like="(False, True, False, True, False)",
                        what="one per entry (w, b, step, mean_x, mean_all)"),
    right=_equal_after_step,
    wrong={
        (True,) * 5: "pmap never checks that copies agree: out_axes=0 hands back each device's own result, and two "
                     "entries are updated from each device's own batch",
    },
    rules=tuple(ValueRule(lambda v, i=i: v[i] != _equal_after_step()[i], why,
                     example=alone(i))
                for i, why in enumerate(_WHY)),
    hints=(
        "The copies start equal. A copy stays equal when everything that updates it is the same on every device.",
        "A value computed from x alone differs per device; pmean gives every device one common number.",
    ),
))


# ------------------------------------------------------------------ 04.2 out_axes

@functools.cache
def _g_shapes() -> tuple:
    """The shapes of the notebook's g(a, w), run by JAX."""
    g = jax.pmap(lambda a, w: (a @ w, jax.lax.psum(jnp.sum(a), "i")),
                 axis_name="i", in_axes=(0, None), out_axes=(1, None))
    return tuple(tuple(o.shape) for o in g(jnp.ones((8, 5, 3)), jnp.ones((3, 2))))


register(ValueExercise(
    id="04.2", kernel=KERNEL, answer_name="g_shapes", title="out_axes=1 moves the device axis; out_axes=None drops it",
    solution="g_shapes = ((5, 8, 2), ())  # (5, 2) per device, stacked as axis 1; one scalar psum",
    form=forms.tuple_of(forms.shape("the first output's shape"), forms.shape("the second output's shape"),
                        like="((8, 2), (3,))", of="shapes"),
    right=_g_shapes,
    rules=(
        ValueRule(entry(0, (8, 5, 2)), example=((8, 5, 2), ()),
             say="out_axes=1 puts the device axis in position 1 of the first output, not in front"),
        ValueRule(entry(0, (5, 2), (2,)), example=((5, 2), ()),
             say="the device axis does not vanish: out_axes=1 puts it back, in position 1"),
        ValueRule(entry(0, (5, 8, 3)), example=((5, 8, 3), ()),
             say="each device computes a @ w: its a is (5, 3) and w is (3, 2), so its result is (5, 2)"),
        ValueRule(lambda s: s[0] != _g_shapes()[0], example=((5, 16, 2), ()),
             say=lambda s: f"the first output is not {s[0]}: each device's a @ w is (5, 2), and out_axes=1 "
                           "inserts the 8 devices as axis 1"),
        ValueRule(entry(1, (8,)), example=((5, 8, 2), (8,)),
             say="out_axes=None returns ONE copy of a value the devices agree on, with no device axis: the psum "
                 "is a scalar"),
    ),
    otherwise=lambda s: (f"the second output is not {s[1]}: jnp.sum(a) is a scalar on each device, so is its "
                         "psum, and out_axes=None adds no device axis"),
    hints=(
        "In the body, a is one (5, 3) slice (in_axes=0 removes the device axis) and w is the whole (3, 2).",
        "out_axes=1 inserts the device axis (size 8) at position 1; out_axes=None inserts none.",
    ),
))


# ------------------------------------------------------------------ 04.3 pmap on several hosts

HOSTS, PER_HOST = 4, 2


@functools.cache
def _host1() -> tuple:
    """What host 1 of the 4 x 2 run sees: pmap's collectives span all 8 devices, outputs are host-local."""
    every_host = np.concatenate([np.arange(PER_HOST) + 10.0 * h for h in range(HOSTS)])
    f = jax.pmap(lambda v: (jax.lax.psum(v, "i"), jax.lax.axis_index("i")), axis_name="i")
    total, index = (np.asarray(o)[PER_HOST:2 * PER_HOST] for o in f(every_host))  # host 1's devices
    return float(total[0]), tuple(float(i) for i in index), tuple(total.shape)


register(ValueExercise(
    id="04.3", kernel=KERNEL, answer_name="host1", title="pmap on several hosts: local shapes, global collectives",
    solution="host1 = (124.0, [2, 3], (2,))  # psum over all 4 hosts; global positions; local shape",
    form=forms.tuple_of(forms.number("total[0]"), forms.number_list("index.tolist()"), forms.shape("total.shape"),
                        like="(1.0, [0, 1], (2,))", what="(total[0], index.tolist(), total.shape)", of="values"),
    right=_host1,
    rules=(
        ValueRule(entry(0, 21.0), example=(21.0, (2.0, 3.0), (2,)),
             say="21 is host 1's own sum (10 + 11); pmap's psum spans the devices of ALL hosts, so it also adds "
                 "the other hosts' values"),
        ValueRule(entry(0, 1.0), example=(1.0, (2.0, 3.0), (2,)),
             say="1 is host 0's sum only; psum adds the values of all 8 devices on all 4 hosts"),
        ValueRule(entry(0, 52.0), example=(52.0, (4.0, 5.0, 6.0, 7.0), (4,)),
             say="52 is the total of the 2-host run in the next cells; here 4 hosts pass 2 values each: add 0, 1, "
                 "10, 11, 20, 21, 30, 31"),
        ValueRule(lambda v: v[0] != _host1()[0], example=(100.0, (2.0, 3.0), (2,)),
             say=lambda v: f"psum gives {v[0]:g}? Add up all 8 devices' values: host h passes 10h and 10h + 1"),
        ValueRule(entry(1, (0.0, 1.0)), example=(124.0, (0.0, 1.0), (2,)),
             say="axis_index counts devices across all hosts: host 0's devices are 0 and 1, so host 1's are 2 and 3"),
        ValueRule(lambda v: len(v[1]) != PER_HOST and v[2] == (PER_HOST,), example=(124.0, (2.0,), (2,)),
             say=lambda v: f"index has one position per local device of host 1, 2 of them, but your list has "
                           f"{len(v[1])}"),
        ValueRule(lambda v: v[1] != _host1()[1], example=(124.0, (4.0, 5.0), (2,)),
             say=lambda v: f"host 1's axis_index is not {[int(i) if i == int(i) else i for i in v[1]]}: positions "
                           "run 0-7 over the hosts in order, 2 devices per host"),
        ValueRule(entry(2, (8,)), example=(124.0, (2.0, 3.0), (8,)),
             say="pmap's outputs are host-local: host 1 gets one row per LOCAL device, not 8"),
        ValueRule(entry(2, (4,)), example=(124.0, (2.0, 3.0), (4,)),
             say="host 1 has 2 local devices in this run (4 hosts x 2), so it passes and gets back 2 rows, not 4"),
    ),
    otherwise=lambda v: f"total.shape is not {v[2]}: host 1 passed 2 values and gets one psum per local device",
    hints=(
        "The collectives and axis_index see all 8 devices of the run; the shapes are each host's own.",
        "psum adds 0+1, 10+11, 20+21 and 30+31 (one pair per host); host 1's 2 devices come after host "
        "0's 2.",
    ),
))


# ------------------------------------------------------------------ 04.4 many independent chains

# The notebook's cells before exercise 04.4, as the judge runs them (the notebook shows the same source).
CHAINS_SETUP = '''
from helpers.emulated import hosts

STEPS = 100
KEY = jax.random.key(0)


def run_chain(key):
    """Random-walk Metropolis on a standard normal: one chain's STEPS samples."""
    u = jax.random.uniform(key, (STEPS + 1, 2))  # all the chain's random numbers, in [0, 1)

    def one_step(x, u_step):
        proposal = x + u_step[0] - 0.5  # a move of at most 0.5 either way
        accept = jnp.log(u_step[1]) < (x**2 - proposal**2) / 2
        x = jnp.where(accept, proposal, x)
        return x, x

    return jax.lax.scan(one_step, 6 * u[0, 0] - 3, u[1:])[1]  # chains start apart, in [-3, 3)


def chain(c):
    """Chain number c, from a key of its own."""
    return run_chain(jax.random.fold_in(KEY, c))
'''
CHAINS_PER_DEVICE = 2


def _chain_parts(mesh) -> list[np.ndarray]:
    """Each emulated host's chain ids: a contiguous block, 2 chains per device of the mesh."""
    return np.split(np.arange(CHAINS_PER_DEVICE * mesh.size, dtype=np.int32), mesh.shape["host"])


def _hosts_mesh(layout) -> jax.sharding.Mesh:
    """A (host, device) mesh of this shape over emulated hosts that split the 8 devices evenly: each host
    gives its first devices (on (2, 2): devices 0, 1 of host 0 and 4, 5 of host 1)."""
    hosts, per_host = layout
    owned = len(jax.devices()) // hosts
    devices = [jax.devices()[h * owned + d] for h in range(hosts) for d in range(per_host)]
    return jax.make_mesh(layout, ("host", "device"), devices=devices)


def _chains_run(all_chains, mesh):
    """What all_chains gives: the samples, and where they are (chains per device, devices used)."""
    mesh = _hosts_mesh(tuple(mesh.axis_sizes))
    out = all_chains(_chain_parts(mesh), mesh)
    if out is None:
        return None
    if not isinstance(out, jax.Array):
        raise Mistake(f"your function returned {describe(out)}; return the jax.Array "
                      "that jit (or shard_map) gives: it says which device ran which chain")
    return {"samples": np.asarray(out),
            "chains per device": max(shard.data.shape[0] for shard in out.addressable_shards) if out.ndim else 0,
            "devices": len(out.sharding.device_set)}


def _all_chains(*body: str) -> str:
    return "def all_chains(parts, mesh):\n" + "".join(f"    {line}\n" for line in body)


def _ids(spec: str = 'P(("host", "device"))') -> str:
    return f"ids = hosts.make_array_from_process_local_data(NamedSharding(mesh, {spec}), parts)"


_RUN = "return jax.jit(jax.vmap(chain))(ids)"
_SPLIT = "P(('host', 'device'))"


def _chains(case) -> int:
    return CHAINS_PER_DEVICE * case.devices


def _rows(case) -> int:
    return case.got["samples"].shape[0] if case.got["samples"].ndim else 0


def _repeats(case) -> bool:
    """Some chains drew the same samples as another."""
    samples = case.got["samples"]
    return samples.ndim == 2 and len(samples) > 1 and len(np.unique(samples, axis=0)) < len(samples)


def _right_samples(case) -> bool:
    return case.got["samples"].shape == case.want["samples"].shape and np.allclose(
        case.got["samples"], case.want["samples"], rtol=1e-4, atol=1e-5)


register(ProgramExercise(
    id="04.4", kernel=KERNEL, answer_name="all_chains", setup=CHAINS_SETUP,
    title="many independent chains: one global array, each chain on one device, each with its own key",
    solution='''
def all_chains(parts, mesh):
    """Every chain's samples, (chains, STEPS), each chain run on one device."""
    ids = hosts.make_array_from_process_local_data(NamedSharding(mesh, P(("host", "device"))), parts)
    return jax.jit(jax.vmap(chain))(ids)  # jit runs each device's own ids
''',
    run=_chains_run,
    meshes=((2, 4), (2, 2)),
    wrong={
        _all_chains(_ids(), "return jax.jit(jax.vmap(lambda c: run_chain(KEY)))(ids)"):
            "every chain drew the same samples: they all run from KEY. Give chain c a key of its own, "
            "jax.random.fold_in(KEY, c), which is what chain(c) does",
        _all_chains(_ids(), 'body = jax.vmap(lambda c: run_chain(jax.random.fold_in(KEY, jax.lax.axis_index(("host", '
                            '"device")))))',
                    'return jax.shard_map(body, mesh=mesh, in_specs=P(("host", "device")), '
                    'out_specs=P(("host", "device")))(ids)'):
            lambda case: f"the {CHAINS_PER_DEVICE} chains of each device drew the same samples: axis_index numbers "
                         "the devices, not the chains, so the chains of one device share a key. Fold in the "
                         "chain's own number c, as chain(c) does",
        _all_chains(_ids(), 'ids = jax.device_put(ids, NamedSharding(mesh, P()))', _RUN):
            lambda case: f"the samples are right, but every one of the {case.devices} devices ran all "
                         f"{_chains(case)} chains: the ids reached jit replicated (P()), so each device computed "
                         f"every chain. Keep the chain axis split, {_SPLIT}, and each device runs its "
                         f"{CHAINS_PER_DEVICE}",
        _all_chains(_ids("P()"), _RUN):
            lambda case: f"with P() JAX takes the hosts' parts as copies of one array: your result has "
                         f"{_rows(case)} chains (one host's ids), not {_chains(case)}, and each host's devices hold "
                         "a different 'copy'. The other hosts' chains are lost, with no error. Name 'host' in the "
                         f"spec: {_SPLIT}",
        _all_chains(_ids('P("device")'), _RUN):
            lambda case: f"P('device') splits each host's ids over its own devices, but leaves 'host' out, so JAX "
                         f"takes the hosts' parts as copies of one array: your result has {_rows(case)} chains, not "
                         f"{_chains(case)}, with no error. Split over both axes: {_SPLIT}",
        _all_chains(_RUN.replace("(ids)", "(parts[0])")):
            lambda case: f"your result is host 0's {_rows(case)} chains only, run on one device: a host that runs "
                         f"its own ids has its own chains, not all {_chains(case)}. Every host passes its part to "
                         "make_array_from_process_local_data, and jit runs the global array",
        _all_chains(_RUN.replace("(ids)", "(np.concatenate(parts))")):
            lambda case: f"the samples are right, but one device ran all {_chains(case)} chains, and in a real run "
                         "no host has np.concatenate(parts): each has its own part only. Build the global array "
                         f"with hosts.make_array_from_process_local_data and {_SPLIT}",
    },
    families=(
        OutputRule(lambda case: _repeats(case),
                   example=_all_chains(_ids(), "return jax.jit(jax.vmap(lambda c: chain(c % 2)))(ids)"),
                   say="some chains drew exactly the same samples as another chain: two chains with the same key "
                       "are one chain counted twice. Give chain c the key jax.random.fold_in(KEY, c)"),
        OutputRule(lambda case: 0 < _rows(case) < _chains(case),
                   example=_all_chains(_RUN.replace("(ids)", "(parts[-1])")),
                   say=lambda case: f"your result has {_rows(case)} chains, not {_chains(case)}: one host's share. "
                                    "Every host's part goes into one global array "
                                    "(hosts.make_array_from_process_local_data), and jit runs all of it"),
        OutputRule(lambda case: _right_samples(case) and case.got["chains per device"] > CHAINS_PER_DEVICE,
                   example=_all_chains(_ids('P("host")'), _RUN),
                   say=lambda case: f"the samples are right, but each device ran {case.got['chains per device']} "
                                    f"chains, not its {CHAINS_PER_DEVICE}: your spec leaves a mesh axis out, so "
                                    f"the devices along it compute the same chains. Split over both axes: {_SPLIT}"),
    ),
    otherwise=lambda case: (f"on a {case.layout[0]} x {case.layout[1]} mesh your samples are not the {_chains(case)} "
                            "chains chain(0), chain(1), ..., one row each, in order"),
    hints=(
        "Build the global array of chain ids from every host's part (hosts.make_array_from_process_local_data, "
        "as in notebook 03), with a spec that splits the ids over both mesh axes.",
        "Then jax.jit(jax.vmap(chain)) runs each device's own ids, each chain from its own key.",
    ),
))
