"""A few data-parallel train steps on a (host, device) mesh, with a profiler trace on every host.

    python -m helpers.launch --hosts 2 --devices-per-host 4 notebooks/scripts/traced_steps.py \
        --trace-dir /tmp/traces

Host i writes its trace under <trace-dir>/host<i>: each host its own directory, because every
host names its folder after the same timestamp. Each step is a `jax.profiler.StepTraceAnnotation`
("train", step_num=s); the host's input (numpy rows to a global array) is a `TraceAnnotation`
("input"). `--collectives` adds notebook 13's two all-reduces, each run inside a TraceAnnotation
named after it. `--slow-host H --sleep S` makes host H sleep S seconds in every step before its
input, a straggler on purpose. Each host prints one JSON line of its own wall-clock timings.
"""
import argparse
import json
import time

from helpers.launch import initialize

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--trace-dir", required=True, help="each host writes under <trace-dir>/host<i>")
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--slow-host", type=int, default=-1, help="this host sleeps in every step")
parser.add_argument("--sleep", type=float, default=0.2, help="seconds the slow host sleeps")
parser.add_argument("--collectives", action="store_true",
                    help="also run notebook 13's flat and hierarchical all-reduce, 3 times each")
parser.add_argument("--cache-dir", default="", help="a persistent compilation cache; none if empty")
args = parser.parse_args()

initialize()

import jax
import numpy as np
from jax import P
from jax.sharding import NamedSharding

from helpers.training import tiny
from helpers.measure.allreduce import BODIES  # notebook 13's flat psum and hierarchical all-reduce

jax.config.update("jax_enable_compilation_cache", bool(args.cache_dir))
if args.cache_dir:
    jax.config.update("jax_compilation_cache_dir", args.cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)

host, num_hosts = jax.process_index(), jax.process_count()
mesh = jax.make_mesh((num_hosts, jax.local_device_count()), ("host", "device"))
batch = NamedSharding(mesh, P(("host", "device")))  # each device its own rows


@jax.jit
def train_step(params, x, y):  # x, y: the global batch; XLA adds the all-reduce of the gradients
    loss, grads = jax.value_and_grad(tiny.loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - tiny.LEARNING_RATE * g, params, grads), loss


params = jax.device_put(tiny.init_params(), NamedSharding(mesh, P()))
if args.collectives:  # 1 MiB of float32 per device, summed over every device two ways
    rows = P(("host", "device"))
    grads = jax.make_array_from_process_local_data(
        NamedSharding(mesh, rows), np.ones((jax.local_device_count(), 2**18), np.float32))
    allreduces = {name: jax.jit(jax.shard_map(body, mesh=mesh, in_specs=rows, out_specs=rows))
                  for name, body in BODIES.items()}
    for allreduce in allreduces.values():
        allreduce(grads).block_until_ready()  # compiled before the trace starts
timings = {"host": host, "devices": [d.id for d in jax.local_devices()], "input_s": [], "step_s": []}
jax.profiler.start_trace(f"{args.trace_dir}/host{host}", create_perfetto_trace=True)
for step in range(args.steps):
    with jax.profiler.StepTraceAnnotation("train", step_num=step):
        if host == args.slow_host:
            time.sleep(args.sleep)
        start = time.perf_counter()
        with jax.profiler.TraceAnnotation("input"):
            x_local, y_local = tiny.host_batch(step, host, num_hosts, tiny.GLOBAL_BATCH)
            x = jax.make_array_from_process_local_data(batch, x_local)
            y = jax.make_array_from_process_local_data(batch, y_local)
            jax.block_until_ready((x, y))
        middle = time.perf_counter()
        params, loss = jax.block_until_ready(train_step(params, x, y))  # waits for every device
        timings["input_s"].append(middle - start)
        timings["step_s"].append(time.perf_counter() - middle)
if args.collectives:
    for name, allreduce in allreduces.items():
        for _ in range(3):
            with jax.profiler.TraceAnnotation(name):
                jax.block_until_ready(allreduce(grads))
jax.profiler.stop_trace()
print(json.dumps(timings))
