"""The rules for work a pmap-era script does on process 0 only: a collective, a computation on a step's
outputs, or a checkpoint save that the other hosts never join.

Each rule reads a `Script` and yields (node, rule name, what the line does on several hosts, what
to write instead); `LESSONS` names the notebook section that teaches each rule's fix.
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.copy_rules import entries_of, entry_in_comprehension
from helpers.migrate.host_read_rules import imported_pmap_runners
from helpers.migrate.host_zero import process_zero_nodes
from helpers.migrate.script import Script, code_of, is_name

# rule -> (notebook, section heading without its number): where the course teaches the fix
LESSONS: dict[str, tuple[str, str]] = {
    "process-zero-collective": ("12", "A collective on host 0 only"),
    "process-zero-save": ("11", "Orbax: save on 2 x 4, resume on 4 x 2 and 1 x 8"),
}
_HOST_SYNC = {"jax.device_get", "jax.experimental.multihost_utils.process_allgather",
              "jax.experimental.multihost_utils.broadcast_one_to_all",
              "jax.experimental.multihost_utils.sync_global_devices"}


def _process_zero(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """Collectives, compiled steps, device_get and checkpoint saves on process 0 only (host_zero says where)."""
    compiled = {name for name, value in s.assigned.items() if isinstance(value, ast.Call) and (
        is_name(s.name(value.func), "jax.pmap", "jax.jit", "jax.shard_map"))}
    compiled |= {node.name for node in ast.walk(s.tree) if isinstance(node, ast.FunctionDef)
                 and any(is_name(s.name(d.func if isinstance(d, ast.Call) else d), "jax.pmap", "jax.jit",
                             "functools.partial") for d in node.decorator_list)}
    compiled |= {node.name for node in ast.walk(s.tree) if isinstance(node, ast.FunctionDef)  # and their callers
                 and any(isinstance(c, ast.Call) and (is_name(s.name(c.func), "jax.pmap", "jax.jit")
                                                      or (isinstance(c.func, ast.Name) and c.func.id in compiled))
                         for c in ast.walk(node))}
    global_outputs = _compiled_outputs(s, compiled - s.pmapped_names())
    compiled = _and_their_callers(s, compiled | s.pmapped_names() | imported_pmap_runners(s))
    for inner in sorted((n for n in process_zero_nodes(s) if isinstance(n, ast.Call)),
                        key=lambda n: (n.lineno, n.col_offset)):
        name = s.name(inner.func)
        called = _called(inner)
        if is_checkpoint_save(s, inner):
            yield (inner, "process-zero-save",
                   f"{code_of(inner.func)}(...) runs on process 0 only: a checkpoint of global "
                   "arrays is saved by every process (each writes its own shards), so process 0 "
                   "waits for hosts that never call it",
                   "call the save on every host; Orbax lets process 0 write the shared metadata")
        elif is_name(name, "jax.device_get") and _scalar(s, inner):
            continue  # `jax.device_get(state.step).item()`: a scalar, P() after the port, whole on every host
        elif is_name(name, "jax.device_get") and inner.args and s.copy_zero_by_hand(inner.args[0]):
            continue  # device 0's copy, on this host: jax-utils-replicate says what the port reads instead
        elif is_name(name, "jax.device_get"):
            yield (inner, "process-zero-collective",
                   f"{code_of(inner.func)}(...) runs on process 0 only: harmless on this host's own pmap "
                   "stack or on a P() value, which every host holds whole, but after the port device_get "
                   "of an array split over the hosts raises there",
                   "under the if, read only P() values (float(loss)); gather what is split over the hosts "
                   "(process_allgather) on every host, outside the if, and keep only the print under it")
        elif name in _HOST_SYNC or called in compiled:
            yield (inner, "process-zero-collective",
                   f"{code_of(inner.func)}(...) runs on process 0 only: a collective (or a compiled "
                   "step) there waits for hosts that never join it",
                   "compute on every host, outside the if; keep only the print or the write "
                   "under it")
        elif (array := _computes_on(s, inner, global_outputs)) is not None:
            yield (inner, "process-zero-collective",
                   f"{code_of(inner.func)}(...) runs on process 0 only, and computes on {array}, a global "
                   "array out of a compiled step: when it is split over the hosts, that computation needs "
                   "every host, and host 0 waits for hosts that never join it",
                   "compute it on every host, outside the if (or in the step, returned with out_specs "
                   "P()); keep only the print or the write under it")


def _called(call: ast.Call) -> str:
    """The script's function a call runs: `f(...)` or `self.f(...)`."""
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _and_their_callers(s: Script, compiled: set[str]) -> set[str]:
    """The script's functions that run a compiled step, followed three calls deep (a sampler calling a helper that
    calls the pmapped step), with those that hand a library `jit=True` (a pipeline that pmaps inside)."""
    defs = [f for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef)]
    for _ in range(3):
        callers = {f.name for f in defs if f.name not in compiled and any(
            isinstance(c, ast.Call) and (_called(c) in compiled or any(
                k.arg == "jit" and isinstance(k.value, ast.Constant) and k.value.value is True for k in c.keywords))
            for c in ast.walk(f))}
        if not callers:
            break
        compiled = compiled | callers
    return compiled


def _scalar(s: Script, call: ast.Call) -> bool:
    """The call's result is read as one number at once: `.item()` of it, or float() / int() around it."""
    holder = s.parent.get(call)
    if isinstance(holder, ast.Attribute) and holder.attr == "item":
        return True
    return isinstance(holder, ast.Call) and isinstance(holder.func, ast.Name) and holder.func.id in ("float", "int")


_REDUCTIONS = {"mean", "sum", "max", "min", "std", "var", "prod", "argmax", "argmin", "all", "any"}


def _compiled_outputs(s: Script, compiled: set[str]) -> set[str]:
    """Names assigned from a call of a jax.jit or jax.shard_map step (not pmap's host-local stacks)."""
    return {n.id for node in ast.walk(s.tree) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
            and node.value.func.id in compiled
            for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _computes_on(s: Script, call: ast.Call, outputs: set[str]) -> str | None:
    """The step output a call computes on: `loss.mean()` (a reduction method) or `jnp.f(loss, ...)`."""
    if isinstance(call.func, ast.Attribute) and call.func.attr in _REDUCTIONS \
            and isinstance(call.func.value, ast.Name) and call.func.value.id in outputs:
        return call.func.value.id
    if s.name(call.func).startswith("jax.numpy."):
        return next((a.id for a in call.args if isinstance(a, ast.Name) and a.id in outputs), None)
    return None


def is_checkpoint_save(s: Script, call: ast.Call, seen: frozenset[str] = frozenset()) -> bool:
    """`checkpoints.save_checkpoint(...)`, `ocp....save(...)`, `.save(...)` on a name made by an Orbax or
    checkpoint call (`manager = ocp.CheckpointManager(...)`), or a function of the script whose body makes
    one of those (not one that only writes host bytes: `save_pretrained`, `to_bytes`)."""
    name = s.name(call.func)
    if "save" not in name.rsplit(".", 1)[-1].lower():
        return False
    defined = next((f for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef) and isinstance(call.func, ast.Name)
                    and f.name == call.func.id and f.name not in seen), None)
    if defined is not None:
        return any(is_checkpoint_save(s, inner, seen | {defined.name}) for inner in ast.walk(defined)
                   if isinstance(inner, ast.Call))
    if "checkpoint" in name.lower() or "orbax" in name or "ckpt" in code_of(call).lower():
        return True
    owner = call.func.value if isinstance(call.func, ast.Attribute) else None
    made = s.assigned.get(owner.id) if isinstance(owner, ast.Name) else None
    return isinstance(made, ast.Call) and any(w in s.name(made.func).lower()
                                              for w in ("orbax", "checkpoint"))


def _stack_reads(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """pmap's per-device stacks reduced on process 0 only (a mean over the device axis, a tree map of `.mean()`):
    harmless today, each host holding its own stack; after the port a value split over the hosts cannot be reduced
    by host 0 alone. Device 0's copy read there (`loss[0]`, an unreplicate) is no collective: copy_rules say it."""
    if not s.pmaps_here():
        return
    outputs, said = s.pmap_outputs(), set()
    entries = entries_of(s, outputs)
    for node in sorted((n for n in process_zero_nodes(s) if isinstance(n, ast.Call)),
                       key=lambda n: (n.lineno, n.col_offset)):
        if node.lineno in said or not _device_mean(s, node, outputs, entries):
            continue
        said.add(node.lineno)
        yield (node, "process-zero-collective",
               f"{code_of(node)} reduces pmap's per-device stack on process 0 only: after the port it is a global "
               "array, and a value split over the hosts (per-device metrics, batch statistics) cannot be reduced "
               "by host 0 alone",
               "reduce it on every host: in the step (jax.lax.pmean over the mesh axes, returned with out_specs "
               "P()), or outside the if; keep only the print or the write under the if")


def _device_mean(s: Script, node: ast.AST, outputs: set[str], entries: set[str]) -> bool:
    """`loss.mean()` of a pmap output (or of an entry of one: `entries`), a tree map of a reduction over one, or a
    tree map whose lambda reduces over axis 0 (`jnp.mean(x, axis=0)`)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in _REDUCTIONS and isinstance(func.value, ast.Name) and (
            func.value.id in outputs | entries or entry_in_comprehension(s, func.value, outputs)):
        return True
    if not (s.is_tree_map(node) and node.args and isinstance(node.args[0], ast.Lambda)):
        return False
    mapped = node.args[1] if len(node.args) > 1 else None
    if isinstance(mapped, ast.Name) and mapped.id in outputs:  # tree_map(lambda x: x.mean(), metrics)
        return any(isinstance(n, ast.Call) and s.name(n.func).rsplit(".", 1)[-1] in _REDUCTIONS
                   for n in ast.walk(node.args[0].body))
    return any(isinstance(n, ast.Call) and (s.name(n.func).rsplit(".", 1)[-1] in _REDUCTIONS)
               and any(isinstance(a, ast.Constant) and a.value == 0 for a in [*n.args[1:], *(
                   k.value for k in n.keywords if k.arg == "axis")])
               for n in ast.walk(node.args[0].body))


RULES = (_process_zero, _stack_reads)
