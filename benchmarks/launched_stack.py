"""Part II's measurements inside real JAX processes, started by `helpers.launch.run`.

    ckpt_save OPTS     save train states of growing size with Orbax (helpers.training.checkpoints)
    ckpt_restore OPTS  restore them onto this run's mesh, and check every number came back
    loaders OPTS       examples per second per host: notebook 07's numpy loader against
                       notebook 11's Grain HostLoader, each then feeding
                       make_array_from_process_local_data
    allreduce OPTS     the flat psum against the hierarchical all-reduce of notebook 13

OPTS is one JSON object. Every host prints one line `BENCH {json}`; a wrong result (a restored
state or an all-reduce that differs from what it should be) prints `WRONG {message}` on the
host that saw it and exits with status 3. Every timed repetition starts after a barrier, so
the slowest host's time is the run's time. Nothing here reaches a notebook.
"""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `benchmarks` from this checkout
from benchmarks import checkpoints, collectives  # noqa: E402
from helpers.launch import initialize  # noqa: E402

initialize()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

AXES = ("host", "device")
COLUMNS = 256  # width of every leaf of a synthetic train state


def report(**fields) -> None:
    fields["host"] = jax.process_index()
    print("BENCH " + json.dumps(fields), flush=True)


def wrong(message: str) -> None:
    print(f"WRONG host {jax.process_index()}: {message}", flush=True)
    sys.exit(3)


def barrier(name: str) -> None:
    multihost_utils.sync_global_devices(name)


def timed(name: str, fn) -> tuple[float, object]:
    """(seconds, result) of `fn()` started together on every host."""
    barrier(name)
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((jax.process_count(), jax.local_device_count()), AXES)


# ------------------------------------------------------------------------------- checkpoints

def train_state(size, on_mesh):
    """(state, abstract state, shardings): notebook 10's state, or a synthetic one of `size` rows.

    A synthetic state is laid out like notebook 10's optimizer-state sharding (ZeRO-1 style):
    `params` replicated, the two AdamW-like moments `mu` and `nu` split over 'device'; its
    numbers depend only on `size`.
    """
    from flax import nnx

    from helpers.training import nnx_model

    if size == checkpoints.COURSE:
        shardings = nnx_model.state_shardings(on_mesh)
        state = jax.jit(lambda: nnx.state(nnx_model.create(nnx_model.SEED)),
                        out_shardings=shardings)()
        return state, nnx_model.abstract_state()[1], shardings
    shape = (int(size), COLUMNS)
    specs = {"params": P(), "mu": P("device", None), "nu": P("device", None)}
    shardings = {k: NamedSharding(on_mesh, s) for k, s in specs.items()}

    def make():
        grid = jnp.arange(shape[0] * shape[1], dtype=jnp.float32).reshape(shape)
        return {k: jnp.sin(grid + i) for i, k in enumerate(specs)}

    abstract = {k: jax.ShapeDtypeStruct(shape, jnp.float32) for k in specs}
    return jax.jit(make, out_shardings=shardings)(), abstract, shardings


def state_bytes(state) -> int:
    return sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(state))


def ckpt_save(directory: str, sizes: list, reps: int) -> None:
    import orbax.checkpoint as ocp

    from helpers.training import checkpoints

    m, out = mesh(), {"save": {}, "bytes": {}, "arrays": {}}
    for size in sizes:
        state, _, _ = train_state(size, m)
        manager = ocp.CheckpointManager(f"{directory}/{size}")
        times = []
        for r in range(reps + 1):  # the first save pays Orbax's first-call costs: a warm-up
            seconds, _ = timed(f"save-{size}-{r}",
                               lambda: checkpoints.save(manager, r, state, {"next_step": r}))
            times.append(seconds)
        manager.close()
        out["save"][str(size)], out["bytes"][str(size)] = times[1:], state_bytes(state)
        out["arrays"][str(size)] = len(jax.tree.leaves(state))
    report(**out)


def ckpt_restore(directory: str, sizes: list, reps: int) -> None:
    import orbax.checkpoint as ocp

    from helpers.training import checkpoints

    m, out = mesh(), {"restore": {}}
    same = jax.jit(lambda a, b: jnp.all(jnp.asarray([jnp.array_equal(x, y) for x, y in
                                                     zip(jax.tree.leaves(a), jax.tree.leaves(b))])))
    for size in sizes:
        expected, abstract, shardings = train_state(size, m)  # built on this run's mesh
        targets = checkpoints.restore_targets(abstract, shardings)
        manager = ocp.CheckpointManager(f"{directory}/{size}")
        times = []
        for r in range(reps + 1):
            seconds, (state, position) = timed(
                f"restore-{size}-{r}", lambda: jax.block_until_ready(
                    checkpoints.restore(manager, r, targets)))
            times.append(seconds)
            if position != {"next_step": r} or not bool(same(state, expected)):
                wrong(f"the {size} state restored from step {r} differs from the one saved")
            if jax.tree.leaves(state)[-1].sharding != jax.tree.leaves(shardings)[-1]:
                wrong(f"the {size} state was not restored onto this run's mesh")
        manager.close()
        out["restore"][str(size)] = times[1:]
    report(**out)


# ----------------------------------------------------------------------------------- loaders

def loaders(global_batches: list[int], steps: int, reps: int) -> None:
    import grain

    from helpers.training import tiny
    from helpers.training.data import ArrayRecords, HostLoader

    host, hosts = jax.process_index(), jax.process_count()
    sharding = NamedSharding(mesh(), P(AXES))
    out = {"read": {}, "assembled": {}}
    for batch in global_batches:
        grain_loader = HostLoader(ArrayRecords(*tiny.dataset()), batch,
                                  grain.sharding.ShardByJaxProcess(), seed=0)
        read = {
            "numpy": lambda s: dict(zip("xy", tiny.host_batch(s, host, hosts, batch))),
            "grain": grain_loader.batch,
        }
        for name, read_step in read.items():
            def only_read():
                for s in range(steps):
                    read_step(s)

            def assembled():
                for s in range(steps):
                    rows = read_step(s)
                    jax.block_until_ready([jax.make_array_from_process_local_data(
                        sharding, rows[k]) for k in "xy"])

            key = f"{batch}/{name}"
            for label, fn in (("read", only_read), ("assembled", assembled)):
                fn()  # warm-up: compiles nothing, but fills caches and Grain's first pass
                out[label][key] = [timed(f"{label}-{key}-{r}", fn)[0] for r in range(reps)]
    report(rows_per_host={str(b): b // hosts for b in global_batches}, steps=steps, **out)


# ------------------------------------------------------------------------------ all-reduces

def allreduce_inputs(m, columns: int) -> jax.Array:
    """Seeded whole numbers, one row of `columns` float32 per device (sums are exact)."""
    n = m.size
    data = np.random.default_rng(columns).integers(-5, 6, size=(n, columns)).astype(np.float32)
    return jax.make_array_from_callback(data.shape, NamedSharding(m, P(AXES)), lambda i: data[i])


def allreduce(columns: list[int], reps: int) -> None:
    m, out = mesh(), {"time": {}}
    for cols in columns:
        x = allreduce_inputs(m, cols)
        results = {}
        for name in collectives.PROGRAMS:
            fn = collectives.program(m, name)
            results[name] = fn(x).block_until_ready()  # compiles
            out["time"][f"{cols}/{name}"] = [
                timed(f"{name}-{cols}-{r}", lambda: fn(x).block_until_ready())[0]
                for r in range(reps)]
        equal = jax.jit(lambda a, b: jnp.array_equal(a, b))(*results.values())
        if not bool(equal):
            wrong(f"the hierarchical all-reduce of {cols} columns differs from the flat psum")
    report(**out)


if __name__ == "__main__":
    modes = {"ckpt_save": ckpt_save, "ckpt_restore": ckpt_restore, "loaders": loaders,
             "allreduce": allreduce}
    if len(sys.argv) != 3 or sys.argv[1] not in modes:
        raise SystemExit(f"usage: launched_stack.py {{{','.join(modes)}}} JSON")
    modes[sys.argv[1]](**json.loads(sys.argv[2]))
