"""The rules for Flax's linen-era pmap helpers: `flax.training.common_utils` (`shard`,
`shard_prng_key`, `get_metrics`), `flax.jax_utils` (`prefetch_to_device`, `pad_shard_unpad`),
`.replicate()` methods of train states, `flax.training.checkpoints`, and BatchNorm statistics kept per device.

(`flax.jax_utils.replicate` and `unreplicate` are in jax_rules, with the calls pmap stacks for.)
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.script import MESH_AXES, Script, code_of, is_name, strings

# rule -> (notebook, section heading without its number): where the course teaches the fix
LESSONS: dict[str, tuple[str, str]] = {
    "flax-shard": ("07", "Way three: `shard_map` on a `(host, device)` mesh, with a global batch"),
    "flax-shard-prng-key": ("06", "Per-device randomness: `fold_in(key, axis_index)`"),
    "flax-get-metrics": ("10", "Logging from process 0"),
    "flax-prefetch": ("03", "What each host passes, and the global shape"),
    "flax-pad-shard-unpad": ("11", "Uneven data: drop the remainder, or pad and mask"),
    "replicate-method": ("10", "Where the parameters and the optimizer state live"),
    "flax-checkpoints": ("11", "Orbax: save on 2 x 4, resume on 4 x 2 and 1 x 8"),
    "per-device-state": ("10", "Where the parameters and the optimizer state live"),
}
_ROWS = f"jax.make_array_from_process_local_data(NamedSharding(mesh, P({MESH_AXES})), rows)"
# a call -> (rule, what it does on several hosts, what to write instead)
_CALLS = {
    "flax.training.common_utils.shard": (
        "flax-shard",
        "common_utils.shard reshapes this host's batch to (local_device_count(), -1, ...), the stack "
        "pmap takes",
        f"no reshape: {_ROWS} makes this host's rows its part of the global batch"),
    "flax.training.common_utils.shard_prng_key": (
        "flax-shard-prng-key",
        "common_utils.shard_prng_key splits the key local_device_count() ways: every host with the "
        "same key gets the same keys, so its devices repeat the other hosts' draws",
        f"one key; in shard_map, jax.random.fold_in(key, jax.lax.axis_index({MESH_AXES})); under "
        "jax.jit on global arrays, jax.random as on one device (to port first with the script's own draws, "
        f"pass its keys with P({MESH_AXES}) and change them after)"),
    "flax.training.common_utils.get_metrics": (
        "flax-get-metrics",
        "common_utils.get_metrics device_gets pmap's per-device stacks of metrics and keeps copy [0]",
        "a step's metrics are P() global values: jax.device_get(metrics) (or float(loss)) on every "
        "host, and print on process 0 only"),
    "flax.jax_utils.prefetch_to_device": (
        "flax-prefetch",
        "jax_utils.prefetch_to_device puts each host batch on the local devices as pmap's stack",
        f"make each batch global ({_ROWS}); to overlap input with steps, prefetch in a thread or "
        "with your loader (Grain's prefetch)"),
    "flax.jax_utils.pad_shard_unpad": (
        "flax-pad-shard-unpad",
        "jax_utils.pad_shard_unpad pads this host's batch to a multiple of its local devices, "
        "stacks it for pmap and unpads the outputs",
        "pad the global batch to a multiple of jax.device_count() with a mask of real rows, make it "
        "global, and weigh each row by the mask in the loss and metrics"),
}


def flax_calls(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    return s.calls_in(_CALLS)


def project_get_metrics(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`utils.get_metrics(metrics)` in a pmap-era script: the project's copy of Flax's get_metrics, defined out of this
    script (x[0] of pmap's per-device stacks, then device_get)."""
    if not any(True for _ in [*s.pmaps(), *s.nnx_pmaps(), *s.wrappers]):
        return
    for call in s.calls:
        name = s.name(call.func)
        if name.rsplit(".", 1)[-1] == "get_metrics" and "." in name and call.args and not name.startswith(
                ("flax.", "self.")):
            yield (call, "flax-get-metrics",
                   f"{code_of(call.func)} is the project's get_metrics, as Flax's common_utils.get_metrics: it takes "
                   "copy [0] of pmap's per-device stacks of metrics and device_gets them; after the port [0] would "
                   "take the first row of each global value",
                   _CALLS["flax.training.common_utils.get_metrics"][2])


def replicate_method(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for call in s.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr == "replicate" and not call.args \
                and not call.keywords and not is_name(s.name(call.func), "flax.jax_utils.replicate"):
            yield (call, "replicate-method",
                   f"{code_of(call)} stacks a copy of the state per local device (flax.jax_utils.replicate), "
                   "the leading axis pmap strips",
                   "jax.device_put(state, NamedSharding(mesh, P())) once: one global value, on every "
                   "device; and no unreplicate later")


_ORBAX_ON_EVERY_HOST = ("an orbax.checkpoint.CheckpointManager, called on every host: each writes its own shards of "
                        "the global arrays, and a restore takes the target shardings")


def flax_checkpoints(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for call in s.calls:
        name = s.name(call.func)
        if is_name(name, "flax.config.update") and len(call.args) > 1 \
                and strings(call.args[0]) == ("flax_use_orbax_checkpointing",) \
                and isinstance(call.args[1], ast.Constant) and call.args[1].value is False:
            yield (call, "flax-checkpoints",
                   f"{code_of(call)} keeps flax.training.checkpoints on its legacy path, written for one host's copy "
                   "of the state",
                   _ORBAX_ON_EVERY_HOST)
        if is_name(name, "flax.training.checkpoints.save_checkpoint", "flax.training.checkpoints.save_checkpoint_multiprocess",
                   "flax.training.checkpoints.restore_checkpoint"):
            yield (call, "flax-checkpoints",
                   f"{name.rsplit('.', 1)[-1]} of flax.training.checkpoints: Flax's old checkpoint API, "
                   "written for one host's copy of the state (deprecated in favour of Orbax)",
                   _ORBAX_ON_EVERY_HOST)


def _pmapped_steps(s: Script) -> set[ast.FunctionDef]:
    """The functions pmap maps, also through a jit bound to a name (`jitted = jax.jit(step)`, then
    `jax.pmap(partial(jitted, ...))`)."""
    defs = {n.name: n for n in ast.walk(s.tree) if isinstance(n, ast.FunctionDef)}
    steps = set(s.pmapped_functions())
    for call in s.pmaps():
        target = call.args[0] if call.args else None
        if isinstance(target, ast.Call) and is_name(s.name(target.func), "functools.partial") and target.args:
            target = target.args[0]
        jitted = s.value(target) if isinstance(target, ast.Name) and target.id not in defs else None
        if isinstance(jitted, ast.Call) and is_name(s.name(jitted.func), "jax.jit") and jitted.args \
                and isinstance(jitted.args[0], ast.Name) and jitted.args[0].id in defs:
            steps.add(defs[jitted.args[0].id])
    return steps


def _averaged(s: Script, stats: ast.AST) -> bool:
    """The statistics went through a pmean or psum: `jax.lax.pmean(stats, 'batch')`, or a name bound to one."""
    value = s.value(stats) if isinstance(stats, ast.Name) else stats
    return isinstance(value, ast.Call) and s.name(value.func).rsplit(".", 1)[-1] in ("pmean", "psum")


def per_device_state(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`state.apply_gradients(..., batch_stats=new_stats)` in a pmapped step (linen's `mutable=['batch_stats']`),
    with statistics no collective averaged: each device keeps its own (BatchNorm without axis_name), which a P()
    state cannot hold."""
    for function in _pmapped_steps(s):
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            stats = next((k.value for k in call.keywords if k.arg == "batch_stats"), None)
            if stats is not None and not _averaged(s, stats):
                yield (stats, "per-device-state",
                       f"batch_stats={code_of(stats)} puts each device's own BatchNorm statistics into the state: "
                       "under pmap every device kept its copy (synced by a cross-replica mean before evaluation or "
                       "a save); after the port the state is one P() value, which statistics that differ per device "
                       "cannot be",
                       "under jax.jit on the global batch BatchNorm's statistics are the global batch's, one value "
                       "already: the sync step (sync_batch_stats, a pmapped cross-replica mean) goes; in shard_map, "
                       f"give BatchNorm axis_name={MESH_AXES} or average them in the step: "
                       f"batch_stats=jax.lax.pmean({code_of(stats)}, {MESH_AXES})")


def stateful_state(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """A pmapped step of old Flax (`with flax.nn.stateful(state) as new_state:`) that returns the new state with no
    collective over it: each device's own BatchNorm statistics, which a P() state cannot hold."""
    for function in set(s.pmapped_functions()):
        bound = {item.optional_vars.id for node in ast.walk(function) if isinstance(node, ast.With)
                 for item in node.items if isinstance(item.context_expr, ast.Call)
                 and is_name(s.name(item.context_expr.func), "flax.nn.stateful")
                 and isinstance(item.optional_vars, ast.Name)}
        averaged = {t.id for node in ast.walk(function) if isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Call)
                    and s.name(node.value.func).rsplit(".", 1)[-1] in ("pmean", "psum")
                    for t in node.targets if isinstance(t, ast.Name)}
        for ret in (n for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None
                    and s.enclosing_function(n) is function):
            kept = sorted({n.id for n in ast.walk(ret.value) if isinstance(n, ast.Name)} & bound - averaged)
            if kept:
                yield (ret, "per-device-state",
                       f"returns {', '.join(kept)}, the state flax.nn.stateful collected on each device (BatchNorm "
                       "statistics of this device's rows), with no collective over it: under pmap every device kept "
                       "its own; after the port the state is one P() value, which statistics that differ per device "
                       "cannot be",
                       f"in shard_map, average it before returning: jax.lax.pmean({kept[0]}, {MESH_AXES}); under "
                       "jax.jit on the global batch BatchNorm's statistics are the global batch's, one value already")


READS = {*_CALLS, "flax.jax_utils.replicate", "flax.jax_utils.unreplicate"}
RULES = (flax_calls, project_get_metrics, replicate_method, flax_checkpoints, per_device_state, stateful_state)
