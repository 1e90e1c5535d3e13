"""A few data-parallel train steps on a (host, device) mesh, with a profiler trace on every host.

    python -m helpers.launch --hosts 2 --devices-per-host 4 notebooks/scripts/traced_steps.py \
        --trace-dir /tmp/traces

Host i writes its trace under <trace-dir>/host<i>: each host its own directory, because every
host names its folder after the same timestamp. Each step is a `jax.profiler.StepTraceAnnotation`
("train", step_num=s); the host's input (numpy rows to a global array) is a `TraceAnnotation`
("input"). `--collectives` adds notebook 13's two all-reduces, each run inside a TraceAnnotation
named after it. `--slow-host H --sleep S` makes host H sleep S seconds in every step before its
input, a straggler on purpose. `--no-block` drops the per-step `block_until_ready`, as a real
loop would: the host dispatches the steps and waits only at the end. `--warm` runs one train
step before the trace starts, so that no traced step compiles. `--one-dir` makes every
host write into <trace-dir> itself, still with create_perfetto_trace (notebook 15, section 1:
what that does). `--share-binary-ms` turns on JAX's jax_share_binary_between_hosts (it acts only
with `--cache-dir`). With `--cache-dir`, each host also reports what JAX's compiler logged about
`train_step` and the persistent cache: the key, the hash of each part of it, and whether it hit,
missed or was written. Each host prints one JSON line of its own wall-clock timings (and that
report).
"""
import argparse
import json
import logging
import time
from pathlib import Path

from helpers.launch import initialize

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--trace-dir", required=True, help="each host writes under <trace-dir>/host<i>")
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--slow-host", type=int, default=-1, help="this host sleeps in every step")
parser.add_argument("--sleep", type=float, default=0.2, help="seconds the slow host sleeps")
parser.add_argument("--collectives", action="store_true",
                    help="also run notebook 13's flat and hierarchical all-reduce, 3 times each")
parser.add_argument("--cache-dir", default="", help="a persistent compilation cache; none if empty")
parser.add_argument("--no-block", action="store_true", help="no block_until_ready in the loop, only after it")
parser.add_argument("--warm", action="store_true",
                    help="run one train step before the trace starts: step 0 does not compile")
parser.add_argument("--one-dir", action="store_true", help="every host writes into <trace-dir> itself")
parser.add_argument("--share-binary-ms", type=int, default=0,
                    help="with --cache-dir: process 0 compiles and shares each program it misses in the cache "
                         "(jax_share_binary_between_hosts); the others wait for it at most this long")
args = parser.parse_args()


class CacheLog(logging.Handler):
    """What JAX logs at DEBUG while it looks a program up in the persistent compilation cache.

    jax._src.cache_key logs the hash of each part of the key ("get_cache_key hash of serialized
    <part>: <hex>"); jax._src.compiler then logs a hit or a miss with the key, and, on a host
    other than process 0, that it does not write the entry.
    """

    def __init__(self, module: str):
        super().__init__(logging.DEBUG)
        self.module, self.parts, self.report, self.last = module, {}, {}, ""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("get_cache_key hash of serialized "):
            part, digest = message.removeprefix("get_cache_key hash of serialized ").rsplit(": ", 1)
            self.parts[part] = digest
        elif message.startswith(("Persistent compilation cache hit", "PERSISTENT COMPILATION CACHE MISS")):
            self.last, key = record.args
            if self.last == self.module:
                self.report = {"key": key, "parts": self.parts, "hit": message.startswith("Persistent")}
            self.parts = {}
        elif message.startswith("Not writing persistent cache entry since process_id != 0") and self.last == self.module:
            self.report["not_written"] = True

initialize()

import jax
import numpy as np
from jax import P
from jax.sharding import NamedSharding

from helpers.training import tiny
from helpers.measure.allreduce import BODIES  # notebook 13's flat psum and hierarchical all-reduce

jax.config.update("jax_enable_compilation_cache", bool(args.cache_dir))
cache_log = CacheLog("jit_train_step")
if args.cache_dir:
    jax.config.update("jax_compilation_cache_dir", args.cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    for name in ("jax._src.cache_key", "jax._src.compiler"):  # JAX's own loggers, at DEBUG
        logging.getLogger(name).setLevel(logging.DEBUG)
        logging.getLogger(name).addHandler(cache_log)
if args.share_binary_ms:
    jax.config.update("jax_share_binary_between_hosts", True)
    jax.config.update("jax_share_binary_between_hosts_timeout_ms", args.share_binary_ms)

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
if args.warm:  # compiled, and every host past it, before the trace starts
    x_local, y_local = tiny.host_batch(0, host, num_hosts, tiny.GLOBAL_BATCH)
    jax.block_until_ready(train_step(params, jax.make_array_from_process_local_data(batch, x_local),
                                     jax.make_array_from_process_local_data(batch, y_local)))
timings = {"host": host, "devices": [d.id for d in jax.local_devices()], "input_s": [], "step_s": []}
jax.profiler.start_trace(args.trace_dir if args.one_dir else f"{args.trace_dir}/host{host}",
                         create_perfetto_trace=True)
for step in range(args.steps):
    with jax.profiler.StepTraceAnnotation("train", step_num=step):
        if host == args.slow_host:
            time.sleep(args.sleep)
        start = time.perf_counter()
        with jax.profiler.TraceAnnotation("input"):
            x_local, y_local = tiny.host_batch(step, host, num_hosts, tiny.GLOBAL_BATCH)
            x = jax.make_array_from_process_local_data(batch, x_local)
            y = jax.make_array_from_process_local_data(batch, y_local)
            if not args.no_block:
                jax.block_until_ready((x, y))
        middle = time.perf_counter()
        params, loss = train_step(params, x, y)
        if not args.no_block:
            jax.block_until_ready((params, loss))  # waits for every device
        timings["input_s"].append(middle - start)
        timings["step_s"].append(time.perf_counter() - middle)
jax.block_until_ready((params, loss))
if args.collectives:
    for name, allreduce in allreduces.items():
        for _ in range(3):
            with jax.profiler.TraceAnnotation(name):
                jax.block_until_ready(allreduce(grads))
try:
    jax.profiler.stop_trace()
finally:
    if args.one_dir:  # what the hosts' stop_trace left in the one directory, so far
        sessions = list(Path(args.trace_dir).glob("plugins/profile/*"))
        print(f"{len(sessions)} session folder(s), files:", sorted(f.name for s in sessions for f in s.iterdir()))
print(json.dumps(timings | {"cache": cache_log.report}))
