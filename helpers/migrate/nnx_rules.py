"""The rules for Flax NNX's pmap-era transforms: `nnx.pmap`, `nnx.split_rngs` over local devices,
`nnx.StateAxes` (the program of google/flax#4751, notebook 17)."""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.script import MESH_AXES, Script, code_of, first_copy_of, is_name, keyword

# rule -> (notebook, section heading without its number): where the course teaches the fix
LESSONS: dict[str, tuple[str, str]] = {
    "nnx-pmap": ("17", "Way one: pmap's program, on the mesh"),
    "nnx-split-rngs": ("17", "Why both hosts drew the same masks"),
    "nnx-state-axes": ("17", "The port, error by error"),
}


def _nnx(s: Script, call: ast.Call, name: str) -> bool:
    return is_name(s.name(call.func), f"flax.nnx.{name}", f"nnx.{name}")


def _counts_local_devices(s: Script, expr: ast.AST | None) -> bool:
    """The expression counts this host's devices, or is a name its function (or the module) assigns that
    (`local = jax.local_device_count()`)."""
    if expr is None:
        return False
    expr = s.value(expr)
    return any(isinstance(n, ast.Call) and is_name(s.name(n.func), "jax.local_device_count") for n in ast.walk(expr))


def nnx_pmap(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for call in s.calls:
        if _nnx(s, call, "pmap"):
            axes = _in_axes_tuple(s, call)
            on_its_line = axes is not None and axes.lineno == call.lineno  # said here, once, with the pmap
            yield (call, "nnx-pmap",
                   "nnx.pmap maps every host's devices, but each host feeds only its own part: "
                   + (f"in_axes={code_of(axes)} says which arguments are one copy per local device (None) and which "
                      "carry a leading axis of local_device_count() (0)" if on_its_line else
                      "the state StateAxes maps and the batch carry a leading axis of local_device_count()")
                   + ", made in each host's own Python (keys split from the same seed are the same on every host)",
                   f"nnx.shard_map on a {MESH_AXES} mesh with Auto axes, each block's device axis "
                   "dropped before the body and put back after (check_vma=False), or one key and "
                   "fold_in inside a checked shard_map, or nnx.jit on global arrays"
                   + (f"; shardings for in_axes: P() where it said None, P({MESH_AXES}) where it said 0"
                      if on_its_line else ""))


def _in_axes_tuple(s: Script, call: ast.Call) -> ast.AST | None:
    """nnx.pmap's in_axes when it is a tuple of None and 0 without a StateAxes (`in_axes=(None, None, 0, 0)`)."""
    axes = keyword(call, "in_axes")
    spelled = s.value(axes) if isinstance(axes, ast.Name) else axes
    if not isinstance(spelled, (ast.Tuple, ast.List)) or _has_state_axes(s, spelled):
        return None
    entries = [e.value if isinstance(e, ast.Constant) else e for e in spelled.elts]
    return axes if None in entries and any(e is not None for e in entries) else None


def nnx_split_rngs(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    has_pmap = any(_nnx(s, call, "pmap") for call in s.calls)
    for call in s.calls:
        if not _nnx(s, call, "split_rngs"):
            continue
        splits = keyword(call, "splits")
        if _counts_local_devices(s, splits) or has_pmap:
            yield (call, "nnx-split-rngs",
                   f"split_rngs(splits={code_of(splits) if splits is not None else '...'}) splits the keys "
                   "over this host's devices: every host starts from the same seed, so every host "
                   "draws the same dropout masks, and the loss does not show it",
                   "split over every device of the mesh (splits=mesh.size, keys sharded "
                   f"P({MESH_AXES})), or keep one replicated key and fold_in(key, "
                   f"jax.lax.axis_index({MESH_AXES})) in the body")


_ONE_DEVICE = ("scan", "vmap", "fori_loop", "while_loop", "remat", "cond", "switch")  # transforms within a device


def _for_a_transform_within_a_device(s: Script, state_axes: ast.Call) -> bool:
    """The StateAxes is handed to nnx.scan or nnx.vmap (directly, or through the name it is assigned to), which
    map over an axis inside each device: nothing for a port across hosts."""
    holder = s.parent.get(state_axes)
    names = {t.id for t in getattr(holder, "targets", ()) if isinstance(t, ast.Name)}
    users = [call for call in s.calls if any(n is state_axes or (isinstance(n, ast.Name) and n.id in names)
                                             for arg in [*call.args, *(k.value for k in call.keywords)]
                                             for n in ast.walk(arg))]
    return bool(users) and all(any(_nnx(s, call, t) for t in _ONE_DEVICE) for call in users)


def nnx_state_axes(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for call in s.calls:
        if _nnx(s, call, "StateAxes") and not _for_a_transform_within_a_device(s, call):
            yield (call, "nnx-state-axes",
                   f"{code_of(call)} tells nnx.pmap which state has a leading axis of this host's "
                   "devices",
                   f"nnx.StateSharding with P({MESH_AXES}) where StateAxes said 0 and P() where it "
                   "said None; make such state this host's part of a global array with "
                   "jax.make_array_from_process_local_data and put it in with set_value")


def nnx_pmap_in_axes(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`nnx.pmap(step, in_axes=(None, None, 0, 0))` without a StateAxes: the tuple says, argument by argument, which
    state is one copy per local device (None: the modules and optimizers) and which carries a leading axis of this
    host's devices (0: the batch), what a port says with shardings."""
    for call in s.nnx_pmaps():
        axes = _in_axes_tuple(s, call)
        if axes is not None and axes.lineno != call.lineno:  # on the pmap's own line, nnx-pmap says it
            yield (axes, "nnx-state-axes",
                   f"in_axes={code_of(axes)} tells nnx.pmap which arguments are one copy per local device (None: the "
                   "modules and optimizers, replicated) and which carry a leading axis of this host's devices (0)",
                   f"shardings instead: P() for what in_axes said None, P({MESH_AXES}) for what it said 0, the batch "
                   "made a global array with jax.make_array_from_process_local_data (nnx.shard_map's in_specs, or "
                   "nnx.jit on global arrays)")


def _has_state_axes(s: Script, node: ast.AST) -> bool:
    """An nnx.StateAxes in the expression, or in what a name in it is assigned."""
    return any(isinstance(n, ast.Call) and _nnx(s, n, "StateAxes")
               for part in ast.walk(node) for n in ast.walk(s.value(part) if isinstance(part, ast.Name) else part))


def nnx_split_copy_zero(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`int(nnx.split(optimizer)[-1].step[0])` of a module handed to an nnx.pmapped function: the split state is
    per-device stacked, and [0] of a leaf is device 0's copy, taken by hand."""
    modules = _pmapped_modules(s)
    for node in ast.walk(s.tree):
        if first_copy_of(node, lambda held: _splits_a_module(s, held, modules)):
            yield (node, "jax-utils-replicate",
                   f"{code_of(node)} takes device 0's copy of a state nnx.pmap stacked per device (nnx.split or "
                   "nnx.state of a module the pmapped step was handed); after the port the leaf is one global "
                   "value, and [0] would take its first row",
                   "use the leaf as it is: a replicated value is the same on every device (read it on any host)")


def _pmapped_modules(s: Script) -> set[str]:
    """The names handed to an nnx.pmapped function (`p_step(model, optimizer, batch)`)."""
    if not any(True for _ in s.nnx_pmaps()):
        return set()
    pmapped = s.pmapped_names()
    return {a.id for call in s.calls if isinstance(call.func, ast.Name) and call.func.id in pmapped
            for a in call.args if isinstance(a, ast.Name)}


def _splits_a_module(s: Script, node: ast.AST, modules: set[str]) -> bool:
    """`nnx.split(m)[k]` or `nnx.state(m)` of one of `modules`."""
    if isinstance(node, ast.Subscript):
        node = node.value
    return isinstance(node, ast.Call) and (_nnx(s, node, "split") or _nnx(s, node, "state")) and bool(node.args) \
        and isinstance(node.args[0], ast.Name) and node.args[0].id in modules


RULES = (nnx_pmap, nnx_split_rngs, nnx_state_axes, nnx_pmap_in_axes, nnx_split_copy_zero)
