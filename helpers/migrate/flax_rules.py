"""The rules for Flax's linen-era pmap helpers: `flax.training.common_utils` (`shard`,
`shard_prng_key`, `get_metrics`), `flax.jax_utils` (`prefetch_to_device`, `pad_shard_unpad`),
`.replicate()` methods of train states, `flax.training.checkpoints`, and BatchNorm statistics kept per device.

(`flax.jax_utils.replicate` and `unreplicate` are in jax_rules, with the calls pmap stacks for.)
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.script import MESH_AXES, Script, code_of, is_name, keyword, strings

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
    if not s.pmaps_here():
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
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "replicate" and not call.args
                and not call.keywords and not is_name(s.name(call.func), "flax.jax_utils.replicate")):
            continue
        if _positional_sharding(s, call.func.value):
            yield (call, "experimental-sharding-names",
                   f"{code_of(call)} replicates over a PositionalSharding, removed before jax 0.12 (ImportError)",
                   "NamedSharding(mesh, P()) on a mesh of every host's devices from jax.make_mesh")
        else:
            yield (call, "replicate-method",
                   f"{code_of(call)} stacks a copy of the state per local device (flax.jax_utils.replicate), "
                   "the leading axis pmap strips",
                   "jax.device_put(state, NamedSharding(mesh, P())) once: one global value, on every "
                   "device; and no unreplicate later")


def _positional_sharding(s: Script, held: ast.AST) -> bool:
    """`sharding` of `sharding = jax.sharding.PositionalSharding(devices)` (removed: its .replicate() is no state's)."""
    made = s.value(held) if isinstance(held, ast.Name) else held
    return isinstance(made, ast.Call) and s.name(made.func).endswith("PositionalSharding")


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
        if is_name(name, "clu.checkpoint.MultihostCheckpoint"):
            yield (call, "flax-checkpoints",
                   "clu's MultihostCheckpoint keeps one checkpoint per host, each of that host's copy of a "
                   "replicated (unreplicated, host-local) state: not a checkpoint of global arrays split over "
                   "the hosts, and one it cannot restore onto another mesh",
                   _ORBAX_ON_EVERY_HOST)
        elif _of_a_multihost_checkpoint(s, call):
            yield (call, "flax-checkpoints",
                   f"{code_of(call.func)}(...) saves or restores this host's copy of the state in clu's "
                   "MultihostCheckpoint (one checkpoint per host, of a host-local state), not global arrays",
                   _ORBAX_ON_EVERY_HOST)


def _of_a_multihost_checkpoint(s: Script, call: ast.Call) -> bool:
    """`ckpt.save(state)` or `ckpt.restore_or_initialize(state)` with `ckpt = checkpoint.MultihostCheckpoint(...)`."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in ("save", "restore", "restore_or_initialize")
            and isinstance(func.value, ast.Name)):
        return False
    made = s.value(func.value)
    return isinstance(made, ast.Call) and is_name(s.name(made.func), "clu.checkpoint.MultihostCheckpoint")


def _host_local_to_global(s: Script, node: ast.AST) -> str | None:
    """Orbax's helper that makes pmap's per-host copies one global array for a save
    (`fully_replicated_host_local_array_to_global_array`), called or read (a call's callee is not said twice)."""
    if isinstance(node, ast.Call):
        name = s.name(node.func)
    elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load) \
            and not isinstance(s.parent.get(node), ast.Attribute) and getattr(s.parent.get(node), "func", None) is not node:
        name = s.name(node)
    else:
        return None
    return name.rsplit(".", 1)[-1] if name.startswith("orbax.") and name.endswith("host_local_array_to_global_array") \
        else None


def host_local_checkpoints(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """A pmap-era script that makes its per-device state global by hand for Orbax: after the port it already is."""
    if not s.pmaps_here() and not any(s.replicates(c) for c in s.calls):
        return
    for node in ast.walk(s.tree):
        if (name := _host_local_to_global(s, node)) is not None:
            yield (node, "flax-checkpoints",
                   f"{name} turns this host's copy of pmap's replicated state into a global array by hand, so "
                   "Orbax can save what pmap kept per host: a bridge from the per-host copies of the old "
                   "checkpoint path",
                   "nothing to convert after the port: the state already is global arrays (P() or sharded over the "
                   f"mesh); {_ORBAX_ON_EVERY_HOST}")


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
    """The statistics went through a pmean or psum: `jax.lax.pmean(stats, 'batch')`, an entry of one
    (`pmean(new_state, 'batch')['batch_stats']`), or a name bound to one."""
    value = s.value(stats) if isinstance(stats, ast.Name) else stats
    while isinstance(value, (ast.Subscript, ast.Attribute)):
        value = value.value
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


_GRAD_PREFIX = {"jax.grad": (1,), "jax.value_and_grad": (0, 1)}  # where has_aux puts the function's aux


def _makes_state(s: Script, call: ast.Call) -> bool:
    """An apply that gives back the model's new state second: linen's `apply(..., mutable=[...])`, a model function
    with `update_batch_norm=True`, haiku's `apply` of a transform_with_state."""
    mutable = keyword(call, "mutable")
    if mutable is not None and not (isinstance(mutable, ast.Constant) and not mutable.value):
        return True
    update = keyword(call, "update_batch_norm")
    if isinstance(update, ast.Constant) and update.value is True:
        return True
    owner = s.value(call.func.value) if isinstance(call.func, ast.Attribute) and call.func.attr == "apply" else None
    return owner is not None and any(isinstance(n, ast.Call) and is_name(s.name(n.func), "haiku.transform_with_state")
                                     for n in ast.walk(owner))


def _at(target: ast.AST, path: tuple[int, ...]) -> tuple[ast.AST | None, tuple[int, ...]]:
    """The part of an unpacking target at `path`, and the rest of the path below a name."""
    while path and isinstance(target, (ast.Tuple, ast.List)):
        if path[0] >= len(target.elts):
            return None, ()
        target, path = target.elts[path[0]], path[1:]
    return target, path


def _state_names(s: Script, function: ast.AST, depth: int = 0) -> dict[str, tuple[tuple[int, ...], int]]:
    """Names of the function's own body bound to a model's new state, with where in them it sits (`aux` of a
    value_and_grad holds it at (1, 0)), and the line it is bound on; through the loss functions it hands jax.grad or
    value_and_grad with has_aux."""
    defs = {n.name: n for n in ast.walk(s.tree) if isinstance(n, ast.FunctionDef)}
    names: dict[str, tuple[tuple[int, ...], int]] = {}
    assigns = sorted((n for n in ast.walk(function) if isinstance(n, ast.Assign) and s.enclosing_function(n) is function),
                     key=lambda n: n.lineno)
    for node in assigns:
        for path in _state_paths(s, node.value, defs, names, depth):
            for target in node.targets:
                part, rest = _at(target, path)
                if isinstance(part, ast.Name):
                    names[part.id] = rest, node.end_lineno
    return names


def _state_paths(s: Script, value: ast.AST, defs: dict, names: dict, depth: int) -> list[tuple[int, ...]]:
    """Where a model's new state sits in an assigned value: second of a state-making apply, inside a name that holds
    it (`aux[1]`), or in the aux of a has_aux gradient of a function whose return holds it."""
    if isinstance(value, ast.Call) and _makes_state(s, value):
        return [(1,)]
    index = ()
    while isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) \
            and isinstance(value.slice.value, int):
        index, value = (value.slice.value, *index), value.value
    if isinstance(value, ast.Name) and value.id in names and names[value.id][0][:len(index)] == index:
        return [names[value.id][0][len(index):]]
    if not (isinstance(value, ast.Call) and depth < 3):
        return []
    grad = s.value(value.func) if isinstance(value.func, ast.Name) else value.func
    if not (isinstance(grad, ast.Call) and s.name(grad.func) in _GRAD_PREFIX and grad.args
            and isinstance(grad.args[0], ast.Name) and grad.args[0].id in defs and _is_true(keyword(grad, "has_aux"))):
        return []
    loss = defs[grad.args[0].id]
    inner = _state_names(s, loss, depth + 1)
    return [_GRAD_PREFIX[s.name(grad.func)] + path[1:] for ret in ast.walk(loss)
            if isinstance(ret, ast.Return) and ret.value is not None and s.enclosing_function(ret) is loss
            for path in _returned_paths(ret.value, inner) if path[:1] == (1,)]


def _returned_paths(value: ast.AST, names: dict, path: tuple[int, ...] = ()) -> list[tuple[int, ...]]:
    """Where names holding a state sit in a returned tuple."""
    if isinstance(value, ast.Name) and value.id in names:
        return [path + names[value.id][0]]
    if isinstance(value, (ast.Tuple, ast.List)):
        return [p for i, e in enumerate(value.elts) for p in _returned_paths(e, names, path + (i,))]
    return []


def _is_true(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _statement(s: Script, node: ast.AST) -> ast.AST:
    while not isinstance(node, ast.stmt) and node in s.parent:
        node = s.parent[node]
    return node


def returned_state(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """A pmapped step that keeps or returns the model's new state (linen's mutable=, haiku's (out, state), a model
    function's update_batch_norm=True) with no pmean or psum over it: each device's own BatchNorm statistics."""
    for function in _pmapped_steps(s):
        bound = {n: line for n, (rest, line) in _state_names(s, function).items() if not rest}
        reads = sorted((n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id in bound
                        and isinstance(n.ctx, ast.Load) and s.enclosing_function(n) is function
                        and n.lineno > bound[n.id]),
                       key=lambda n: (n.lineno, n.col_offset))
        averaged = {n.id for n in reads if _in_a_collective(s, n, function)}
        read = next((n for n in reads if n.id not in averaged and not _handed_as_batch_stats(s, n)), None)
        if read is not None:
            yield (_statement(s, read), "per-device-state",
                   f"{read.id} is the model state the apply gave back on each device (BatchNorm statistics of this "
                   f"device's rows), kept by {function.name} with no collective over it: under pmap every device kept "
                   "its own; after the port the state is one P() value, which statistics that differ per device "
                   "cannot be",
                   f"in shard_map, average it first: jax.lax.pmean({read.id}, {MESH_AXES}) (or give BatchNorm "
                   "axis_name); under jax.jit on the global batch the statistics are the global batch's, one value "
                   "already, and the sync step (a pmapped cross-replica mean) goes")


def _in_a_collective(s: Script, node: ast.AST, function: ast.AST) -> bool:
    while node in s.parent and node is not function:
        node = s.parent[node]
        if isinstance(node, ast.Call) and s.name(node.func).rsplit(".", 1)[-1] in ("pmean", "psum"):
            return True
    return False


def _handed_as_batch_stats(s: Script, name: ast.Name) -> bool:
    """`apply_gradients(..., batch_stats=updates['batch_stats'])`: per_device_state says it there."""
    holder = s.parent.get(name)
    while isinstance(holder, (ast.Subscript, ast.Attribute)):
        holder = s.parent.get(holder)
    return isinstance(holder, ast.keyword) and holder.arg == "batch_stats"


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
_JAXLINE_PREFETCH = ("double_buffer_on_gpu", "double_buffer")


def jaxline_helpers(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """jaxline's own pmap-era machinery in an experiment that pmaps: `double_buffer_on_gpu(it)` (device_put_sharded of
    each per-device stack, flax's prefetch_to_device), and a class's `CHECKPOINT_ATTRS` (jaxline saves those
    attributes as pmap's per-device copies: device 0's on save, broadcast to the local devices on restore)."""
    if not s.pmaps_here():
        return
    for call in s.calls:
        name = s.name(call.func)
        if name.startswith("jaxline.") and name.rsplit(".", 1)[-1] in _JAXLINE_PREFETCH and call.args:
            yield (call, "flax-prefetch",
                   f"{code_of(call.func)}(...) (jaxline) puts each of the iterator's per-device stacks on this host's "
                   "devices ahead of the step (device_put_sharded), as flax's prefetch_to_device",
                   f"make each batch global ({_ROWS}); to overlap input with steps, prefetch in a thread or with your "
                   "loader (Grain's prefetch)")
    for cls in (n for n in ast.walk(s.tree) if isinstance(n, ast.ClassDef)):
        if not any(s.name(b).startswith("jaxline.") for b in cls.bases):
            continue
        for node in cls.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CHECKPOINT_ATTRS"
                                                    for t in node.targets):
                yield (node, "flax-checkpoints",
                       f"{cls.name}.CHECKPOINT_ATTRS tells jaxline's checkpointer that these attributes are pmap's "
                       "per-device copies: it saves device 0's copy and broadcasts it to this host's devices on "
                       "restore; after the port they are global arrays, and [0] would take the first row of each",
                       "list global state in NON_BROADCAST_CHECKPOINT_ATTRS (saved as it is), or save it with "
                       f"{_ORBAX_ON_EVERY_HOST}")


RULES = (flax_calls, project_get_metrics, replicate_method, flax_checkpoints, host_local_checkpoints, per_device_state,
         returned_state, stateful_state, jaxline_helpers)
