"""The gradient trap without pmap: a psum or pmean of gradients over a named axis inside a step that a script with no
pmap, no shard_map and no xmap compiles with jit or pjit (`grads = jax.lax.pmean(grads, axis_name='data')` in a
pjit'd train step, the pmap habit carried over). Under jit with shardings the gradient of the global batch's mean
loss is already global; in a shard_map port a reduction of the gradients of replicated parameters makes them N
times too large. Never the advice to rename: the trap, or both outcomes where the tool cannot tell a gradient.
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.bodies import COLLECTIVES, collective_axes, vmapped_axes
from helpers.migrate.collective_rules import named_for_gradients
from helpers.migrate.script import MESH_AXES, Script, code_of, is_name

# the lesson is collective_rules' for the same rule id
LESSONS: dict[str, tuple[str, str]] = {}
_JITS = ("jax.jit", "pjit", "jax.experimental.pjit.pjit")
_TRAP = ("under jax.jit with shardings the gradient of the global batch's mean loss is already global (a collective "
         "over a mesh axis is bound only inside shard_map), and in a shard_map port with check_vma the gradient of "
         "P() parameters is already summed over the devices, so this reduction makes it N times too large")


def _jit_era(s: Script) -> bool:
    """The script compiles with jit or pjit and never pmaps, shard_maps nor xmaps."""
    used = {name for _, name, _ in s.used_names()}
    if any("shard_map" in name or is_name(name, "xmap", "pmap") for name in used):
        return False
    if s.pmaps_here() \
            or s.folder.pmap_axes or s.folder.pmappers:
        return False
    return any(is_name(name, *_JITS) for name in used)


def gradient_collective_under_jit(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    if not _jit_era(s):
        return
    vmapped = vmapped_axes(s)
    for call in s.calls:
        name = s.name(call.func)
        op = name.rsplit(".", 1)[-1]
        if op not in ("psum", "pmean") or op not in COLLECTIVES or not is_name(name, f"jax.lax.{op}") \
                or not call.args:
            continue
        axes = set(collective_axes(s, call))
        if not axes or axes & vmapped:
            continue
        status = s.gradient_status(call.args[0])
        operand = code_of(call.args[0])
        said = (f"{op}({operand}, ...) over {', '.join(sorted(axes))} in a step this script compiles with jit or pjit "
                "(no pmap here)")
        if status == "yes":
            yield (call, "pmap-collective", f"{said} reduces the gradients: {_TRAP}",
                   f"drop this {op}: take the gradient of the mean loss of the global batch (in shard_map, of "
                   f"jax.lax.pmean(loss, {MESH_AXES})); renaming the axis is not enough")
        elif status == "unknown" or named_for_gradients(call.args[0]):
            yield (call, "pmap-collective", f"{said}, and this may be a gradient (the tool cannot see what makes {operand}): if it is, "
                   f"{_TRAP}",
                   f"if this is a gradient: drop it (take the gradient of jax.lax.pmean(loss, {MESH_AXES}) in "
                   f"shard_map); otherwise, inside shard_map, name the mesh axes: jax.lax.{op}(..., {MESH_AXES})")


RULES = (gradient_collective_under_jit,)
