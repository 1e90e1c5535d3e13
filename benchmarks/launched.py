"""The script `benchmarks/run.py` starts as real JAX processes with `helpers.launch.run`.

    hello     timestamps at script entry, after `import jax`, after joining the run, after
              the backend started, and after a first psum over every device.
    assemble  time `jax.make_array_from_process_local_data` for per-host batches of growing
              size, then a first psum (compiles) and compiled psums over the assembled global array.

Each host prints one line `BENCH {json}`; run.py reads them. This is only for the benchmark:
nothing here is shown in a notebook, so the timings it prints never reach nbval.
"""
import time

T_ENTRY = time.time()  # noqa: E402  (before anything else is imported)

import json  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

T_NUMPY = time.time()
import jax  # noqa: E402

T_IMPORT = time.time()
from helpers.launch import initialize  # noqa: E402

AXES = ("host", "device")


def _report(**fields) -> None:
    fields["host"] = jax.process_index()
    print("BENCH " + json.dumps(fields), flush=True)


def _mesh():
    return jax.make_mesh((jax.process_count(), jax.local_device_count()), AXES)


def _psum_fn(mesh):
    from jax.sharding import PartitionSpec as P

    return jax.jit(jax.shard_map(lambda block: jax.lax.psum(block, AXES), mesh=mesh,
                                 in_specs=P(AXES), out_specs=P()))


def _barrier(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def hello() -> None:
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    initialize()
    t_joined = time.time()
    jax.devices()
    t_backend = time.time()
    mesh = _mesh()
    ones = np.ones((jax.local_device_count(), 1), np.float32)
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P(AXES)), ones)
    total = _psum_fn(mesh)(x)
    value = float(np.asarray(total.addressable_data(0))[0, 0])
    t_psum = time.time()
    assert value == jax.device_count(), value
    _report(entry=T_ENTRY, numpy=T_NUMPY, imported=T_IMPORT, joined=t_joined,
            backend=t_backend, psum=t_psum, done=time.time())


def assemble(base_rows: int, features: int, multiples: list[int], reps: int,
             psum_multiple: int) -> None:
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    initialize()
    mesh = _mesh()
    sharding = NamedSharding(mesh, P(AXES))
    rng = np.random.default_rng(jax.process_index())
    out = {"assemble": {}, "psum_multiple": psum_multiple}
    arrays = {}
    for m in multiples:
        local = rng.random((base_rows * m, features), dtype=np.float32)
        jax.make_array_from_process_local_data(sharding, local).block_until_ready()  # warm-up
        times = []
        for r in range(reps):
            _barrier(f"assemble-{m}-{r}")  # every host starts together, as in a training step
            t = time.perf_counter()
            x = jax.make_array_from_process_local_data(sharding, local)
            x.block_until_ready()
            times.append(time.perf_counter() - t)
        out["assemble"][str(m)] = times
        arrays[m] = x
    x = arrays[psum_multiple]
    fn = _psum_fn(mesh)
    out["first_psum"], out["psum"] = None, []
    for r in range(reps + 1):  # the first compiles; the rest are the compiled psum
        _barrier(f"psum-{r}")
        t = time.perf_counter()
        fn(x).block_until_ready()
        if r == 0:
            out["first_psum"] = time.perf_counter() - t
        else:
            out["psum"].append(time.perf_counter() - t)
    _report(**out)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "hello":
        hello()
    elif mode == "assemble":
        opts = json.loads(sys.argv[2])
        assemble(**opts)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
