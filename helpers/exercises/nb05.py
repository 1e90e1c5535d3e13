"""Exercises of notebook 05: shard_map blocks, collectives over mesh axes, out_specs and check_vma."""
from __future__ import annotations

import re
from typing import Any

from helpers.exercises.core import Exercise, Mistake, WrongAnswer, call_learner, describe, register
from helpers.exercises.judges import require_numbers, require_spec, splits_host_and_device_apart

DATA = ("host", "device")
_W8 = (3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0)
_VARYING = re.compile(r"possibly varying over \{([^}]*)\}")
_CLAIMED = re.compile(r"replicated across mesh ax[ie]s (.*?), but could not infer")


def _judge_host_sums(answer: Any) -> None:
    import numpy as np

    got = np.asarray(require_numbers(answer, 8, "the 8 values of over_hosts(w8)"))
    w = np.asarray(_W8).reshape(2, 4)  # [host, device]
    right = np.tile(w.sum(0), 2)
    if np.allclose(got, right):
        return
    if np.allclose(got, np.repeat(w.sum(1), 4)):
        raise Mistake("those are sums over 'device' (each host's 4 devices added up); a psum over 'host' "
                      "adds device d of host 0 to device d of host 1")
    if np.allclose(got, w.sum()):
        raise Mistake(f"{w.sum():g} everywhere is a psum over BOTH axes; over 'host' only, each device "
                      "adds just its counterpart on the other host")
    pairs = np.asarray(_W8).reshape(4, 2).sum(1)
    if np.allclose(got, np.repeat(pairs, 2)) or np.allclose(got, np.tile(pairs, 2)):
        raise Mistake("'host' does not pair neighbouring devices: device d of host 0 (w8[d]) goes with "
                      "device d of host 1 (w8[4 + d])")
    if np.allclose(got, np.asarray(_W8)):
        raise Mistake("those are the inputs; the psum adds each device's value to its counterpart's on "
                      "the other host")
    raise Mistake(f"not quite: host 0's device 0 holds {_W8[0]:g} and host 1's device 0 holds "
                  f"{_W8[4]:g}; a psum over 'host' gives both of them the sum")


register(Exercise(
    id="05.1",
    title="a psum over 'host' pairs device d of every host",
    answer_name="host_sums",
    solution=("host_sums = [8.0, 10.0, 6.0, 7.0, 8.0, 10.0, 6.0, 7.0]"
              "  # w8[d] + w8[4 + d], on both hosts"),
    judge=_judge_host_sums,
    hints=(
        "Host 0's devices hold w8[0:4] and host 1's hold w8[4:8]. Which devices does the 'host' axis connect?",
        "Along 'host', device d of host 0 meets device d of host 1: both get w8[d] + w8[4 + d].",
    ),
    wrong_answers=(
        WrongAnswer("host_sums = [9.0] * 4 + [22.0] * 4", "sums over 'device'"),
        WrongAnswer("host_sums = [31.0] * 8", "BOTH axes"),
        WrongAnswer("host_sums = [4.0, 4.0, 5.0, 5.0, 14.0, 14.0, 8.0, 8.0]", "neighbouring"),
        WrongAnswer("host_sums = [8.0, 10.0, 6.0, 7.0]", "expected 8 numbers"),
    ),
))


# --------------------------------------------------------------------------- 05.2

def _paired_column_sums(block):
    import jax
    import jax.numpy as jnp

    return jax.lax.psum(jnp.sum(block, axis=0, keepdims=True), "host")


def _judge_out_specs(answer: Any) -> None:
    import jax
    import numpy as np
    from jax.sharding import NamedSharding

    spec = require_spec(answer)
    entries = tuple(spec)
    while entries and entries[-1] is None:
        entries = entries[:-1]
    if entries == ():
        raise Mistake("P() claims every device holds the same sums, but they differ between the devices "
                      "of a host: the psum ran over 'host' only")
    if splits_host_and_device_apart(entries):
        raise Mistake(f"{spec} splits over two dimensions, a mesh axis on each: P('host', 'device') "
                      "splits dimension 0 over 'host' and dimension 1 over 'device' (one dimension over "
                      "both is P(('host', 'device'))). After the psum over 'host', name only the axis the "
                      "sums still vary over, on dimension 0")
    mesh = jax.make_mesh((2, 4), DATA)
    rng = np.random.default_rng(52)
    data = rng.integers(0, 10, size=(24, 3)).astype(np.float32)
    x = jax.device_put(data, NamedSharding(mesh, jax.P(DATA)))
    try:
        out = jax.shard_map(_paired_column_sums, mesh=mesh, in_specs=jax.P(DATA), out_specs=spec)(x)
    except ValueError as error:
        varying = _VARYING.search(str(error)) or _CLAIMED.search(str(error))
        if varying and "device" in varying.group(1):
            raise Mistake(f"{spec} leaves out 'device', which claims the 4 devices of a host hold the same "
                          "sums; they do not (the psum ran over 'host' only), so check_vma refuses it") from None
        last = (str(error).strip().splitlines() or [""])[-1]
        raise Mistake(f"shard_map rejects out_specs={spec}: {last}") from None
    got = np.asarray(out)
    right = data.reshape(2, 4, -1, 3).sum((0, 2))  # [host, device, row, column] -> one row per device position
    if got.shape == right.shape and np.allclose(got, right):
        return
    if got.shape == (8, 3):
        raise Mistake("naming 'host' too stores each host's copy: the rows come twice, shape (8, C). After "
                      "the psum over 'host' both hosts hold the same sums, so leave 'host' out")
    if got.shape == (1, 12):
        raise Mistake("that spec puts the 4 rows side by side along dimension 1, shape (1, 4C); stack them "
                      "along dimension 0 instead")
    raise Mistake(f"with out_specs={spec} the result has shape {got.shape}, not (4, C) with one row of "
                  "column sums per device position")


register(Exercise(
    id="05.2",
    title="out_specs names the axes a result still varies over",
    answer_name="sums_out_specs",
    solution="sums_out_specs = P('device')  # after the psum over 'host' the sums vary over 'device' only",
    judge=_judge_out_specs,
    hints=(
        "After the psum over 'host', do the 2 hosts still hold different sums? Do the 4 devices of one host?",
        "Name in out_specs exactly the mesh axes the result still varies over, on dimension 0, where the "
        "rows stack.",
    ),
    wrong_answers=(
        WrongAnswer("sums_out_specs = P()", "differ between the devices of a host"),
        WrongAnswer("sums_out_specs = P(('host', 'device'))", "leave 'host' out"),
        WrongAnswer("sums_out_specs = P('host')", "leaves out 'device'"),
        WrongAnswer("sums_out_specs = P(None, 'device')", "side by side"),
        WrongAnswer("sums_out_specs = P('host', 'device')", "splits over two dimensions"),
        WrongAnswer("sums_out_specs = 'device'", "expected a PartitionSpec"),
    ),
))


# --------------------------------------------------------------------------- 05.3

def _vma_message(error_text: str) -> str | None:
    varying = _VARYING.search(error_text)
    if not varying:
        return None
    axes = varying.group(1)
    if axes.strip() == "host":
        return ("your result still differs between hosts (check_vma refuses out_specs=P()): you reduced "
                "over 'device' only; reduce over both 'host' and 'device'")
    if axes.strip() == "device":
        return ("your result still differs between the devices of a host (check_vma refuses "
                "out_specs=P()): you reduced over 'host' only; reduce over both axes")
    return ("your result still differs from device to device, so check_vma refuses out_specs=P(): "
            "combine the blocks with a collective over ('host', 'device')")


def _judge_column_mean(column_mean: Any) -> None:
    import jax
    import numpy as np
    from jax.sharding import NamedSharding

    if not callable(column_mean):
        raise Mistake(f"expected a function column_mean(x, mesh), but got {describe(column_mean)}")

    def spy(x, mesh):
        try:
            return column_mean(x, mesh)
        except ValueError as error:
            message = _vma_message(str(error))
            if message:
                raise Mistake(message) from None
            raise

    rng = np.random.default_rng(7)
    for mesh_shape, rows, cols in (((2, 4), 24, 3), ((4, 2), 32, 5)):
        mesh = jax.make_mesh(mesh_shape, DATA)
        data = rng.normal(size=(rows, cols)).astype(np.float32) + 3.0
        x = jax.device_put(data, NamedSharding(mesh, jax.P(DATA)))
        result = call_learner(spy, x, mesh)
        got = np.asarray(result, dtype=np.float32) if hasattr(result, "shape") else None
        if got is None:
            raise Mistake(f"column_mean should return an array of shape (C,), but returned {describe(result)}")
        right = data.mean(0)
        blocks = data.reshape(mesh_shape[0], -1, cols)
        if got.shape == (1, cols):
            raise Mistake(f"your result has shape (1, C); return shape (C,) (drop the kept axis, e.g. "
                          "result[0], or do not keepdims)")
        if got.shape[0] == mesh.size and got.ndim == 2:
            raise Mistake(f"your result has one row per device, shape {got.shape}: out_specs splits it "
                          "over the devices. The mean is one replicated result: out_specs=P()")
        if got.shape != right.shape:
            raise Mistake(f"expected shape (C,) = {right.shape} for x of shape {data.shape}, but got {got.shape}")
        if np.allclose(got, right, rtol=1e-5, atol=1e-5):
            break
        n_dev = mesh.size
        if np.allclose(got, data.sum(0), rtol=1e-5):
            raise Mistake("that is the column SUM; divide by the total number of rows N")
        if np.allclose(got, n_dev * right, rtol=1e-5):
            raise Mistake(f"your result is {n_dev}x the mean: you added the {n_dev} block means (psum); "
                          "take their mean (pmean) instead")
        if np.allclose(got, blocks[0].mean(0), rtol=1e-5):
            raise Mistake("your result is host 0's mean only: the reduction covered 'device' but not "
                          "'host' (and check_vma=False let out_specs=P() hide it)")
        if np.allclose(got, data[: rows // n_dev].mean(0), rtol=1e-5):
            raise Mistake("your result is device 0's block mean only: without a collective, "
                          "out_specs=P() with check_vma=False silently returns device 0's block")
        for n in (16, 8):
            if np.allclose(got, data.sum(0) / n, rtol=1e-5):
                raise Mistake(f"you divide by {n}, a number that fits the prompt's array only; here "
                              f"x has {rows} rows. Use the block's shape times the number of devices, "
                              "or pmean")
        raise Mistake(f"for x of shape {data.shape} on a mesh {dict(mesh.shape)} your column means are "
                      f"{np.round(got, 3).tolist()}, expected {np.round(right, 3).tolist()}")
    mesh = jax.make_mesh((2, 4), DATA)
    x = jax.device_put(np.ones((16, 2), np.float32), NamedSharding(mesh, jax.P(DATA)))
    try:
        jaxpr = str(jax.make_jaxpr(lambda a: column_mean(a, mesh))(x))
    except Exception:  # not traceable (e.g. uses numpy on the result): judged on values alone
        return
    if "shard_map" not in jaxpr:
        raise Mistake("the numbers are right, but your function does not use jax.shard_map; this "
                      "exercise is about writing the per-block body and the collective")


register(Exercise(
    id="05.3",
    title="a global mean: block sums, then a collective over both axes",
    answer_name="column_mean",
    solution='''
def column_mean(x, mesh):
    """Column means of a global (N, C) array, via shard_map."""
    def body(block):  # block: (N / devices, C)
        return jax.lax.pmean(jnp.mean(block, axis=0), ("host", "device"))  # (C,), the same everywhere

    return jax.shard_map(body, mesh=mesh, in_specs=P(("host", "device")), out_specs=P())(x)
''',
    judge=_judge_column_mean,
    hints=(
        "In the body, jnp.mean(block, axis=0) is this device's mean over its own rows; every block has "
        "the same number of rows.",
        "Average the block means over every device: jax.lax.pmean(..., ('host', 'device')), and return it "
        "with out_specs=P().",
    ),
    wrong_answers=(
        WrongAnswer('''
def column_mean(x, mesh):
    body = lambda b: jax.lax.pmean(jnp.mean(b, axis=0), "device")
    return jax.shard_map(body, mesh=mesh, in_specs=P(("host", "device")), out_specs=P())(x)
''', "reduced over 'device' only"),
        WrongAnswer('''
def column_mean(x, mesh):
    body = lambda b: jax.lax.psum(jnp.mean(b, axis=0), ("host", "device"))
    return jax.shard_map(body, mesh=mesh, in_specs=P(("host", "device")), out_specs=P())(x)
''', "block means (psum)"),
        WrongAnswer('''
def column_mean(x, mesh):
    body = lambda b: jax.lax.psum(jnp.sum(b, axis=0), ("host", "device")) / 16
    return jax.shard_map(body, mesh=mesh, in_specs=P(("host", "device")), out_specs=P())(x)
''', "fits the prompt's array only"),
        WrongAnswer('''
def column_mean(x, mesh):
    body = lambda b: jnp.mean(b, axis=0)
    return jax.shard_map(body, mesh=mesh, in_specs=P(("host", "device")), out_specs=P(), check_vma=False)(x)
''', "device 0's block mean only"),
        WrongAnswer('''
def column_mean(x, mesh):
    body = lambda b: jax.lax.pmean(jnp.mean(b, axis=0, keepdims=True), ("host", "device"))
    return jax.shard_map(body, mesh=mesh, in_specs=P(("host", "device")), out_specs=P(("host", "device")))(x)
''', "one row per device"),
        WrongAnswer('''
def column_mean(x, mesh):
    return jnp.mean(x, axis=0)
''', "does not use jax.shard_map"),
    ),
))
