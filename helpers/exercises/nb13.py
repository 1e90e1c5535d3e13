"""Exercises of notebook 13: collective puzzles, judged by what they compute and what they send.

Each puzzle is a program exercise: the learner's per-device body runs under shard_map on two
(host, device) meshes with different device counts and is compared with the reference (and the
catalogued wrong programs). Once the numbers are right, `TrafficRule`s read the compiled
program (`helpers.measure.traffic`) on the first mesh: which collectives it uses, and how many bytes
cross hosts compared with the flat psum.
"""
from __future__ import annotations

import functools
from typing import Callable

import jax
import numpy as np
from jax import P

from helpers.exercises.core import MEMO, Kernel, get, register
from helpers.exercises.kinds import PuzzleExercise, course_mesh, placed
from helpers.exercises.rules import ErrorRule, OutputRule, TrafficRule
from helpers.measure.traffic import format_bytes as _b, hosts_along, traffic

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)
DATA = ("host", "device")
MESHES = ((2, 4), (3, 2))  # 8 devices on 2 hosts, 6 devices on 3 hosts
SETUP = 'DATA = ("host", "device")\n'


# ----------------------------------------------------------------------------- inputs and runs

def _grads(mesh):
    """Seeded whole-number gradients: one row of 2n numbers per device (64 bytes on 8 devices)."""
    n = mesh.size
    data = np.random.default_rng(1300 + n).integers(-5, 6, size=(n, 2 * n)).astype(np.float32)
    return placed(mesh, data)


def _batch(mesh):
    """A seeded (2n, 2n) batch split by rows: each device holds 2 whole rows."""
    n = mesh.size
    data = np.random.default_rng(1310 + n).normal(size=(2 * n, 2 * n)).astype(np.float32)
    return placed(mesh, data, P(DATA, None))


def _allreduce_program(body, mesh):
    return jax.shard_map(body, mesh=mesh, in_specs=P(DATA), out_specs=P(DATA)), _grads(mesh)


def _reshard_program(body, mesh):
    return jax.shard_map(body, mesh=mesh, in_specs=P(DATA, None), out_specs=P(None, DATA)), _batch(mesh)


def _runner(program: Callable) -> Callable:
    def run(body, mesh):
        fn, x = program(body, mesh)
        out = fn(x)
        return None if out is None else np.asarray(out)
    return run


def _flat_traffic(mesh):
    """What the flat psum of the course's gradients sends: the traffic the puzzles compare with."""
    fn, x = _allreduce_program(lambda block: jax.lax.psum(block, DATA), mesh)
    return traffic(fn, x, host_of=hosts_along(mesh))


# ----------------------------------------------------------------------------- wrong sums

def _shape_off(case) -> bool:
    return np.shape(case.got) != np.shape(case.want)


def _per_device(shape: tuple[int, ...], devices: int, axis: int) -> tuple[int, ...]:
    """The shape of one device's block of a global output that out_specs splits along `axis` over every device."""
    return tuple(n // devices if i == axis else n for i, n in enumerate(shape))


def _shapes_told(case, axis: int, expected: str) -> str:
    """What each device returned against what it should return (`expected` names the right shape)."""
    yours = _per_device(np.shape(case.got), case.devices, axis)
    right = _per_device(np.shape(case.want), case.devices, axis)
    return f"each device returns shape {yours}, but should return {right}: {expected}"


def _multiple(case) -> float | None:
    """k when the learner's result is k times the sum (k != 1), else None."""
    if _shape_off(case):
        return None
    got, want = np.asarray(case.got, float), np.asarray(case.want, float)
    nonzero = want != 0
    if not nonzero.any() or not np.allclose(got[~nonzero], 0):
        return None
    ratios = got[nonzero] / want[nonzero]
    k = float(ratios[0])
    return k if np.allclose(ratios, k) and not np.isclose(k, 1) else None


def _sum_families(name: str) -> tuple[OutputRule, ...]:
    """Mistakes of any all-reduce puzzle, named from the numbers it computed."""
    return (
        OutputRule(_shape_off,
             lambda case: _shapes_told(case, 0, "a sum of blocks has one block's shape, (1, F)"),
             _body("return jnp.concatenate([block, block], axis=1)", name)),
        OutputRule(lambda case: 0 < (_multiple(case) or 0) < 1,
             lambda case: f"your result is {_multiple(case):g} times the sum on the {case.devices}-device mesh: "
                          "you divide or average (pmean?) where a sum is asked",
             _body("return jax.lax.pmean(block, DATA)", name)),
        OutputRule(lambda case: _multiple(case) is not None,
             lambda case: f"your result is {_multiple(case):g} times the sum on the {case.devices}-device mesh: "
                          "some blocks are added more than once (or scaled)",
             _body("return 2 * jax.lax.psum(block, DATA)", name)),
    )


def _pieces_kept(case) -> int | None:
    """k > 1 when every device returns k whole pieces of the sum (1/n of its row each), fewer than n:
    an all_gather over fewer devices than the psum_scatter that cut the pieces."""
    try:
        got, want = np.asarray(case.got, float), np.asarray(case.want, float)
    except (TypeError, ValueError):
        return None
    n = case.devices
    if got.ndim != 2 or want.ndim != 2 or got.shape[0] != want.shape[0] or not 0 < got.shape[1] < want.shape[1]:
        return None
    width = want.shape[1] // n
    if width == 0 or want.shape[1] % n or got.shape[1] % width:
        return None
    pieces = [want[0, i * width:(i + 1) * width] for i in range(n)]  # every row of the sum is the same
    k = got.shape[1] // width
    if k < 2 or not all(any(np.allclose(row[j * width:(j + 1) * width], p) for p in pieces)
                        for row in got for j in range(k)):
        return None
    return k


SUM_OTHERWISE = ("your numbers are not the sum of every device's block: compare your function with "
                 "jax.lax.psum(block, DATA) on the same input")


# ----------------------------------------------------------------------------- traffic rules

def _kinds(report) -> set[str]:
    return set(report.kinds())


def _body(lines: str, name: str) -> str:
    """A catalogued program: `def name(block):` with these lines as its body."""
    indented = "\n".join("    " + line for line in lines.strip().splitlines())
    return f"def {name}(block):\n{indented}\n"


# ----------------------------------------------------------------------------- 13.1

_two_steps = functools.partial(_body, name="allreduce_two_steps")

register(PuzzleExercise(
    id="13.1", kernel=KERNEL, setup=SETUP, meshes=MESHES, answer_name="allreduce_two_steps",
    title="an all-reduce is a reduce-scatter, then an all-gather",
    solution='''
def allreduce_two_steps(block):
    """The sum of every device's block, from psum_scatter and all_gather."""
    piece = jax.lax.psum_scatter(block, DATA, scatter_dimension=1, tiled=True)  # (1, F / n): my piece of the sum
    return jax.lax.all_gather(piece, DATA, axis=1, tiled=True)  # (1, F): every piece, in order
''',
    run=_runner(_allreduce_program), program=_allreduce_program, baseline=_flat_traffic,
    families=(OutputRule(lambda case: _pieces_kept(case) is not None,
                         lambda case: f"each device returns {_pieces_kept(case)} of the sum's {case.devices} pieces: "
                                      "your all_gather covers fewer devices than your psum_scatter, which cut the "
                                      "sum into one piece per device. Gather over the same axes you scattered over",
                         _two_steps('''
piece = jax.lax.psum_scatter(block, DATA, scatter_dimension=1, tiled=True)
return jax.lax.all_gather(piece, "device", axis=1, tiled=True)''')),
              *_sum_families("allreduce_two_steps")),
    otherwise=SUM_OTHERWISE,
    errors=(ErrorRule(lambda text: "scatter dimension size" in text and "must match shard count" in text,
                 example=_two_steps('''
piece = jax.lax.psum_scatter(block, DATA, scatter_dimension=1)
return jax.lax.all_gather(piece, DATA, axis=1, tiled=True)'''),
                 say="without tiled=True, psum_scatter needs the scattered dimension to be exactly as long as the "
                     "number of devices, and drops it: pass tiled=True, so each device gets a piece of the row"),),
    wrong={
        _two_steps('''
piece = jax.lax.psum_scatter(block, "device", scatter_dimension=1, tiled=True)
return jax.lax.all_gather(piece, "device", axis=1, tiled=True)'''):
            "your sums cover the devices of one host only: name both mesh axes, DATA = ('host', 'device'), "
            "in both collectives",
        _two_steps('''
return jax.lax.psum_scatter(block, DATA, scatter_dimension=1, tiled=True)'''):
            "each device returns only its own piece of the sum (1/n of it): gather the pieces back with "
            "all_gather",
        _two_steps('''
piece = jax.lax.psum_scatter(block, DATA, scatter_dimension=1, tiled=True)
return jax.lax.all_gather(piece, DATA, axis=0, tiled=True)'''):
            "your all_gather glues the pieces along dimension 0 (rows); the pieces are columns of the sum: "
            "gather along axis=1",
        _two_steps('''
piece = jax.lax.psum_scatter(block, DATA, scatter_dimension=1, tiled=True)
return jax.lax.all_gather(piece, DATA, axis=1)'''):
            "without tiled=True, all_gather stacks the pieces along a new axis instead of gluing them into "
            "one row: pass tiled=True",
        _two_steps('''
piece = jax.lax.psum_scatter(block, ("device", "host"), scatter_dimension=1, tiled=True)
return jax.lax.all_gather(piece, ("host", "device"), axis=1, tiled=True)'''):
            "your psum_scatter and all_gather name the mesh axes in different orders, so each piece comes "
            "back in another device's place: use the same DATA in both",
        _two_steps('''
piece = jax.lax.psum_scatter(block, DATA, scatter_dimension=1, tiled=True)
return jax.lax.all_gather(piece, ("device", "host"), axis=1, tiled=True)'''):
            "your psum_scatter and all_gather name the mesh axes in different orders, so each piece comes "
            "back in another device's place: use the same DATA in both",
        _two_steps('''
piece = jax.lax.psum_scatter(block, DATA, scatter_dimension=0, tiled=True)
return jax.lax.all_gather(piece, DATA, axis=0, tiled=True)'''):
            "a block has a single row, so dimension 0 cannot be cut into one piece per device: scatter along "
            "dimension 1, the gradient's numbers",
    },
    traffic=(
        TrafficRule(
            lambda yours, flat: "all-reduce" in _kinds(yours),
            lambda yours, flat: "the numbers are right, but your program still runs an all-reduce (a psum): "
                                "build it from psum_scatter and all_gather only",
            _two_steps("return jax.lax.psum(block, DATA)")),
        TrafficRule(
            lambda yours, flat: "reduce-scatter" not in _kinds(yours),
            lambda yours, flat: f"the numbers are right, but no psum_scatter: your program sends "
                                f"{_b(yours.across_hosts + yours.inside_hosts)} in all, psum {_b(flat.across_hosts + flat.inside_hosts)}. "
                                "Sum with psum_scatter first, so each device gathers only summed pieces",
            _two_steps("return jnp.sum(jax.lax.all_gather(block, DATA), axis=0)")),
    ),
    hints=(
        "psum_scatter(block, DATA, scatter_dimension=1, tiled=True) gives each device one piece of the sum; "
        "which collective puts the pieces back together?",
        "all_gather(piece, DATA, axis=1, tiled=True) glues the pieces of every device in order, along the same "
        "dimension you scattered.",
    ),
))


# ----------------------------------------------------------------------------- 13.2

_ring = functools.partial(_body, name="ring_allreduce")

_RING = '''
def ring_allreduce(block):
    """The sum of every device's block: a reduce-scatter, then an all-gather, around the ring in chunks."""
    n = jax.lax.axis_size(DATA)
    me = jax.lax.axis_index(DATA)
    right = [(i, (i + 1) % n) for i in range(n)]
    mine = jnp.roll(block.reshape(block.shape[0], n, -1), -me, axis=1)  # n chunks; mine[:, k] is chunk me + k
    message = mine[:, 0]  # reduce-scatter: send a running sum on, add your own part of the chunk that arrives
    for step in range(1, n):
        message = jax.lax.ppermute(message, DATA, right) + mine[:, n - step]  # chunk me - step
    summed = [None] * n  # now `message` is the whole sum of chunk me + 1
    summed[1] = message
    for step in range(1, n):  # all-gather: pass the summed chunks on around the ring, keep each one
        message = jax.lax.ppermute(message, DATA, right)
        summed[(1 - step) % n] = message  # chunk me + 1 - step
    return jnp.roll(jnp.stack(summed, axis=1), me, axis=1).reshape(block.shape)
'''
_WHOLE_RING = _ring('''
n = jax.lax.axis_size(DATA)
right = [(i, (i + 1) % n) for i in range(n)]
total, message = block, block
for _ in range(n - 1):
    message = jax.lax.ppermute(message, DATA, right)
    total = total + message
return total''')
_DIRECT = _ring('''
n = jax.lax.axis_size(DATA)
total = block
for shift in range(1, n):
    total = total + jax.lax.ppermute(block, DATA, [(i, (i + shift) % n) for i in range(n)])
return total''')


def _ring_report(source: str):
    """The traffic of a catalogued ring program on the first mesh (the one traffic rules are tried on)."""
    exercise, mesh = get("13.2"), course_mesh(MESHES[0])
    return MEMO.get(("13.2", "traffic", source, mesh.devices.shape),  # the key PuzzleExercise.catalogue uses
                    lambda: exercise.traffic_of(exercise.run_source(source), mesh))


def _sent(report) -> int:
    return report.inside_hosts + report.across_hosts


def _shifts(report) -> list[int]:
    """How far the ppermutes of a report send along DATA, in positions (1 and n - 1: to a neighbour),
    on the first mesh (the one traffic rules are tried on)."""
    mesh = course_mesh(MESHES[0])
    position = {d: i for i, d in enumerate(mesh.devices.flat)}
    return sorted({(position[t] - position[s]) % mesh.size for c in report.collectives for s, t in c.pairs
                   if s != t})


def _not_a_ring(report) -> bool:
    return any(k not in (1, course_mesh(MESHES[0]).size - 1) for k in _shifts(report))


def _bytes_told(yours, flat) -> str:
    """Your bytes against the chunked ring's, which are psum's (the reference sends exactly those)."""
    return (f"the numbers are right, but your program sends {_b(_sent(yours))} ({_b(yours.across_hosts)} across "
            f"hosts), where the chunked ring sends {_b(_sent(flat))} ({_b(flat.across_hosts)} across hosts)")


register(PuzzleExercise(
    id="13.2", kernel=KERNEL, setup=SETUP, meshes=MESHES, answer_name="ring_allreduce",
    title="a ring all-reduce in chunks: a reduce-scatter, then an all-gather, with ppermute",
    solution=_RING,
    run=_runner(_allreduce_program), program=_allreduce_program,
    baseline=_flat_traffic,
    families=_sum_families("ring_allreduce"), otherwise=SUM_OTHERWISE,
    wrong={
        _ring('''
n = jax.lax.axis_size(DATA)
total, message = block, block
for _ in range(n):
    message = jax.lax.ppermute(message, DATA, [(i, (i + 1) % n) for i in range(n)])
    total = total + message
return total'''):
            lambda case: f"one step too many: after {case.devices - 1} steps on {case.devices} devices every block "
                         "has arrived once; one more step brings your own block back and adds it twice",
        _ring('''
n = jax.lax.axis_size(DATA)
total = block
for _ in range(n - 1):
    total = total + jax.lax.ppermute(block, DATA, [(i, (i + 1) % n) for i in range(n)])
return total'''):
            "you send your own block at every step, so you keep receiving your neighbour's; forward the message "
            "you just received, so that each block travels on around the ring",
        _ring('''
n = jax.lax.axis_size("device")
total, message = block, block
for _ in range(n - 1):
    message = jax.lax.ppermute(message, "device", [(i, (i + 1) % n) for i in range(n)])
    total = total + message
return total'''):
            "your ring runs inside each host only (over 'device'): the sums miss the other hosts. Make the ring "
            "over DATA = ('host', 'device')",
        _ring('''
total, message = block, block
for _ in range(7):
    message = jax.lax.ppermute(message, DATA, [(i, (i + 1) % 8) for i in range(8)])
    total = total + message
return total'''):
            lambda case: f"your ring assumes 8 devices; the check's second mesh has {case.devices}. Ask "
                         "jax.lax.axis_size(DATA) for the number of devices",
    },
    traffic=(
        TrafficRule(
            lambda yours, flat: _kinds(yours) - {"collective-permute"} != set(),
            lambda yours, flat: "the numbers are right, but your program uses "
                                f"{', '.join(sorted(_kinds(yours) - {'collective-permute'}))}: build the ring "
                                "from ppermute alone",
            _ring("return jax.lax.psum(block, DATA)")),
        TrafficRule(
            lambda yours, flat: _sent(yours) > _sent(flat) and yours.across_hosts == _ring_report(_WHOLE_RING).across_hosts,
            lambda yours, flat: _bytes_told(yours, flat) + ": you forward whole blocks, n - 1 times. Pass chunks "
                                "(1/n of a block) instead: n - 1 steps that add up one chunk each as it goes "
                                "round, then n - 1 steps that pass the summed chunks on",
            _WHOLE_RING),
        TrafficRule(
            lambda yours, flat: _sent(yours) > _sent(flat),
            lambda yours, flat: _bytes_told(yours, flat) + ". Sending each whole block to every other device (or "
                                "around the ring) moves n - 1 whole blocks per device; the ring passes chunks, "
                                "1/n of a block, to its neighbour only",
            _DIRECT),
        TrafficRule(
            lambda yours, flat: _not_a_ring(yours),
            lambda yours, flat: f"the numbers are right and you send psum's {_b(_sent(yours))} in all, but "
                                f"{_b(yours.across_hosts)} cross hosts, where the ring sends {_b(flat.across_hosts)}: "
                                "your ppermutes send chunks "
                                f"{', '.join(map(str, _shifts(yours)))} positions along DATA. You send chunks "
                                "straight to their owners, not around the ring: every step of a ring sends to a "
                                "neighbour only, as [(i, (i + 1) % n) for i in range(n)] does",
            _ring('''
n = jax.lax.axis_size(DATA)
me = jax.lax.axis_index(DATA)
chunks = block.reshape(block.shape[0], n, -1)
mine = jnp.take(chunks, me, axis=1)  # reduce-scatter: each chunk straight to its owner
for k in range(1, n):
    shift = [(i, (i + k) % n) for i in range(n)]
    mine = mine + jax.lax.ppermute(jnp.take(chunks, (me + k) % n, axis=1), DATA, shift)
summed = jax.lax.dynamic_update_index_in_dim(jnp.zeros_like(chunks), mine, me, axis=1)
for k in range(1, n):  # all-gather: each summed chunk straight to every device
    arrived = jax.lax.ppermute(mine, DATA, [(i, (i + k) % n) for i in range(n)])
    summed = jax.lax.dynamic_update_index_in_dim(summed, arrived, (me - k) % n, axis=1)
return summed.reshape(block.shape)''')),
    ),
    hints=(
        "Cut the block into n chunks of its columns (block.reshape(1, n, -1)); device `me = "
        "jax.lax.axis_index(DATA)` starts by sending its chunk me to the right. At each of the next n - 1 "
        "steps, add your own part of the chunk that arrived, and send the running sum on.",
        "After those n - 1 steps, device me holds the whole sum of chunk (me + 1) % n. n - 1 more ppermutes "
        "pass the summed chunks around; jax.lax.dynamic_update_index_in_dim puts each arriving chunk in its "
        "place (chunk (me + 1 - step) % n at step `step`).",
    ),
))


# ----------------------------------------------------------------------------- 13.3

_to_features = functools.partial(_body, name="batch_to_features")

register(PuzzleExercise(
    id="13.3", kernel=KERNEL, setup=SETUP, meshes=MESHES, answer_name="batch_to_features",
    title="all_to_all reshards rows into columns, each piece straight to its owner",
    solution='''
def batch_to_features(block):
    """This device's rows in, this device's columns (of every row) out, with all_to_all."""
    # (R, F): cut the columns into n pieces, send piece k to device k, stack what arrives as rows
    return jax.lax.all_to_all(block, DATA, split_axis=1, concat_axis=0, tiled=True)  # (R * n, F / n)
''',
    run=_runner(_reshard_program), program=_reshard_program, baseline=_flat_traffic,
    families=(OutputRule(_shape_off,
                   lambda case: _shapes_told(case, 1, "every row of its columns, (R * n, F / n)"),
                   _to_features("return block")),),
    otherwise="your blocks hold other numbers than the batch's columns: piece k of your columns must reach device k",
    wrong={
        _to_features("return jax.lax.all_to_all(block, DATA, split_axis=0, concat_axis=1, tiled=True)"):
            "you cut the rows and glue columns; it is the other way round: split_axis=1 (the features you "
            "hand out), concat_axis=0 (the rows you collect)",
        _to_features("return jax.lax.all_to_all(block, DATA, split_axis=1, concat_axis=1, tiled=True)"):
            "you glue the pieces you receive side by side (concat_axis=1); they are other devices' rows: "
            "stack them with concat_axis=0",
        _to_features('return jax.lax.all_to_all(block, "device", split_axis=1, concat_axis=0, tiled=True)'):
            "your all_to_all runs inside each host only (over 'device'); the rows of the other hosts never "
            "arrive. Use DATA = ('host', 'device')",
        _to_features("return jax.lax.all_to_all(block, DATA, split_axis=1, concat_axis=0)"):
            "without tiled=True, all_to_all needs the split dimension to be exactly n long and stacks on a "
            "new axis: pass tiled=True",
    },
    traffic=(
        TrafficRule(
            lambda yours, flat: "all-gather" in _kinds(yours),
            lambda yours, flat: f"the numbers are right, but you gather the whole batch on every device and keep "
                                f"a slice: {_b(yours.across_hosts)} cross hosts. all_to_all sends each device only "
                                "the piece it keeps",
            _to_features('''
full = jax.lax.all_gather(block, DATA, axis=0, tiled=True)
width = full.shape[1] // jax.lax.axis_size(DATA)
return jax.lax.dynamic_slice_in_dim(full, jax.lax.axis_index(DATA) * width, width, axis=1)''')),
        TrafficRule(
            lambda yours, flat: _kinds(yours) != {"all-to-all"},
            lambda yours, flat: f"the numbers are right, but your program runs {', '.join(sorted(_kinds(yours))) or 'no collective'}: "
                                "this puzzle is one all_to_all",
            _to_features('''
n, me = jax.lax.axis_size(DATA), jax.lax.axis_index(DATA)
rows, width = block.shape[0], block.shape[1] // n
everything = jax.lax.dynamic_update_slice_in_dim(jnp.zeros((rows * n, block.shape[1])), block, me * rows, axis=0)
everything = jax.lax.psum(everything, DATA)
return jax.lax.dynamic_slice_in_dim(everything, me * width, width, axis=1)''')),
    ),
    hints=(
        "all_to_all(block, DATA, split_axis, concat_axis, tiled=True): which dimension do you hand out to "
        "the other devices, and along which do you stack what you receive?",
        "Hand out the features (split_axis=1) and stack the rows you receive (concat_axis=0): block (R, F) "
        "becomes (R * n, F / n).",
    ),
))


# ----------------------------------------------------------------------------- 13.4

_hier = functools.partial(_body, name="hierarchical_allreduce")

register(PuzzleExercise(
    id="13.4", kernel=KERNEL, setup=SETUP, meshes=MESHES, answer_name="hierarchical_allreduce",
    title="a hierarchical all-reduce sends only a piece across hosts",
    solution='''
def hierarchical_allreduce(block):
    """The sum of every device's block: inside each host, then across hosts, then back."""
    piece = jax.lax.psum_scatter(block, "device", scatter_dimension=1, tiled=True)  # inside: my host's sum of my piece
    piece = jax.lax.psum(piece, "host")  # across: device d of every host adds up piece d
    return jax.lax.all_gather(piece, "device", axis=1, tiled=True)  # inside: the whole sum again
''',
    run=_runner(_allreduce_program), program=_allreduce_program, baseline=_flat_traffic,
    families=_sum_families("hierarchical_allreduce"), otherwise=SUM_OTHERWISE,
    wrong={
        _hier('''
piece = jax.lax.psum_scatter(block, "device", scatter_dimension=1, tiled=True)
return jax.lax.psum(piece, "host")'''):
            "each device returns only its piece of the sum: finish with an all_gather over 'device' inside "
            "the host",
        _hier('''
piece = jax.lax.psum_scatter(block, "device", scatter_dimension=1, tiled=True)
return jax.lax.all_gather(piece, "device", axis=1, tiled=True)'''):
            "your sum covers one host's devices only: between the two steps inside the host, add each piece "
            "across hosts with psum over 'host'",
        _hier('''
piece = jax.lax.psum_scatter(block, "device", scatter_dimension=1, tiled=True)
piece = jax.lax.psum(piece, "device")
return jax.lax.all_gather(piece, "device", axis=1, tiled=True)'''):
            "your second step adds over 'device' again, inside the host: the other hosts' gradients never "
            "arrive. The step across hosts is over 'host'",
        _hier('''
piece = jax.lax.psum_scatter(block, "device", scatter_dimension=1, tiled=True)
piece = jax.lax.psum(piece, DATA)
return jax.lax.all_gather(piece, "device", axis=1, tiled=True)'''):
            "your second step adds the pieces over both axes, so different pieces of one host get added "
            "together; device d must meet only device d of the other hosts: psum over 'host'",
        _hier('''
piece = jax.lax.psum_scatter(block, "device", scatter_dimension=1, tiled=True)
piece = jax.lax.psum(piece, "host")
return jax.lax.all_gather(piece, "host", axis=1, tiled=True)'''):
            "your last step gathers over 'host', but the pieces were cut over 'device': gather them back "
            "over 'device', inside the host",
    },
    traffic=(
        TrafficRule(
            lambda yours, flat: yours.kinds() == ["all-reduce"] and len(yours.collectives[0].groups) == 1,
            lambda yours, flat: "that is the flat psum itself, one ring over all devices: split it into the three "
                                "steps (inside, across, back)",
            _hier("return jax.lax.psum(block, DATA)")),
        TrafficRule(
            lambda yours, flat: ("all-reduce" in _kinds(yours) and "reduce-scatter" not in _kinds(yours)
                                and yours.across_hosts >= flat.across_hosts),
            lambda yours, flat: f"the numbers are right, but {_b(yours.across_hosts)} cross hosts, more than the "
                                f"flat psum's {_b(flat.across_hosts)}: after a psum inside the host every device "
                                "holds the whole gradient, and each sends all of it across. Scatter first "
                                "(psum_scatter), so only a piece crosses",
            _hier('return jax.lax.psum(jax.lax.psum(block, "device"), "host")')),
        TrafficRule(
            lambda yours, flat: (yours.across_hosts >= flat.across_hosts and yours.kinds()[0] == "all-reduce"
                                 and yours.split(yours.collectives[0])[1] == 0),
            lambda yours, flat: f"the numbers are right, but {_b(yours.across_hosts)} cross hosts, not fewer than "
                                f"the flat psum's {_b(flat.across_hosts)}: your first step, a psum inside the host, "
                                "leaves the whole gradient on every device, and your steps across hosts then move "
                                "the whole gradient, in pieces, from every device. Scatter inside the host first "
                                "(psum_scatter over 'device'): each device then holds one piece of its host's sum, "
                                "and only that piece crosses",
            _hier('''
total = jax.lax.psum(block, "device")
piece = jax.lax.psum_scatter(total, "host", scatter_dimension=1, tiled=True)
return jax.lax.all_gather(piece, "host", axis=1, tiled=True)''')),
        TrafficRule(
            lambda yours, flat: yours.across_hosts >= flat.across_hosts,
            lambda yours, flat: f"the numbers are right, but {_b(yours.across_hosts)} cross hosts, not fewer than "
                                f"the flat psum's {_b(flat.across_hosts)}: reduce inside each host first (over "
                                "'device'), then cross hosts with the smaller piece",
            _hier('''
piece = jax.lax.psum_scatter(block, "host", scatter_dimension=1, tiled=True)
piece = jax.lax.psum(piece, "device")
return jax.lax.all_gather(piece, "host", axis=1, tiled=True)''')),
    ),
    hints=(
        "Three steps. Inside each host, a reduce-scatter: each of a host's devices ends with the host's sum of "
        "one piece of the gradient. Across hosts, an all-reduce of those pieces: device d of every host adds up "
        "piece d. Inside each host, an all-gather of the pieces back into a whole gradient.",
        "Step 1 is puzzle 13.1's first step, but over 'device' only; step 3 is its second step, over 'device' "
        "only. What runs in between, and over which axis?",
        "psum_scatter over 'device' (scatter_dimension=1), then psum over 'host', then all_gather over "
        "'device' (axis=1), each with tiled=True where it applies.",
    ),
))

