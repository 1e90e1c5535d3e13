"""Per-device bodies pmapped out of view: in a pmap-era script, a function that runs a collective over a named axis
(`jax.lax.psum(grads, axis_name='i')`) that no pmap, vmap(axis_name=) or xmap of the file maps. A framework
(jaxline's experiments), a trainer of another module or a caller elsewhere pmaps it; its code is per-device code all
the same: its collectives name pmap's axis, its keys are each device's own.

Never in a shard_map port (a script that calls shard_map, or whose collectives name its own mesh's axes), never
where a vmap (or hk.vmap, nn.vmap) with that axis_name maps the function, never in a script with no sign of pmap.
"""
from __future__ import annotations

import ast

from helpers.migrate.script import KNOWN_COPIES, Script, argument, is_name, strings

COLLECTIVES = {"pmean", "psum", "pmax", "pmin", "all_gather", "all_to_all", "ppermute", "psum_scatter", "axis_index",
               "pswapaxes"}
_TREE_COLLECTIVES = ("tree_psum", "tree_pmean")  # jaxline's utils: a psum or pmean of each leaf
_PMAP_ERA = ("flax.jax_utils.", "jax.device_put_replicated", "jax.device_put_sharded",
             "flax.training.common_utils.shard")  # names only pmap-era code calls


def collective_axes(s: Script, call: ast.Call) -> tuple[str, ...]:
    """The axis names a collective over a named axis spells (`jax.lax.psum(x, 'i')`, `axis_index('i')`, jaxline's
    `tree_psum(x, axis_name='i')`), through module constants and a parameter's default; () for any other call."""
    name = s.name(call.func)
    op = name.rsplit(".", 1)[-1]
    if not (op in COLLECTIVES and is_name(name, f"jax.lax.{op}") or op in _TREE_COLLECTIVES):
        return ()
    axis = argument(call, 0 if op == "axis_index" else 1, "axis_name")
    return s.axis_names(axis) or _default(s, axis)


def _default(s: Script, axis: ast.AST | None) -> tuple[str, ...]:
    """The axes a parameter's default spells (`def loss(params, axis_name='i')`) when the axis is that parameter."""
    function = s.scope(axis) if axis is not None else None
    if not isinstance(axis, ast.Name) or not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return ()
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    pairs = [*zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults),
             *((a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None)]
    return next((strings(d) for a, d in pairs if a.arg == axis.id), ())


def pmap_era(s: Script) -> bool:
    """The script pmaps (jax.pmap, nnx.pmap, a project's pmap wrapper, its folder's pmaps) or calls what only pmap-era
    code calls (flax's jax_utils, device_put_replicated, jaxline's get_first), and never shard_map nor xmap."""
    used = {name for _, name, _ in s.used_names()}
    if any("shard_map" in name or is_name(name, "xmap") for name in used):
        return False
    return s.pmaps_here() \
        or bool(s.folder.pmap_axes or s.folder.pmappers) \
        or any(name.startswith(_PMAP_ERA) or name.rsplit(".", 1)[-1] in KNOWN_COPIES for name in used)


def vmapped_axes(s: Script) -> set[str]:
    """The axis names a vmap of the script binds (`jax.vmap(f, axis_name='i')`, `partial(jax.vmap, axis_name=...)`,
    hk.vmap, nn.vmap): a collective over one of them may run under that vmap, not a pmap."""
    axes = set()
    for call in s.calls:
        names = [s.name(call.func), *(s.name(a) for a in call.args[:1])]
        if any(name.rsplit(".", 1)[-1] == "vmap" for name in names):  # jax.vmap(f, in_axes, out_axes, axis_name)
            direct = names[0].rsplit(".", 1)[-1] == "vmap" and is_name(names[0], "jax.vmap")
            axes |= set(s.axis_names(argument(call, 3 if direct else 99, "axis_name")))
    return axes


def out_of_view_bodies(s: Script, in_view: set[ast.AST]) -> dict[ast.AST, tuple[str, ...]]:
    """Each function (a def; a lambda's def around it) that calls a collective over a named axis, is not among
    `in_view` (the functions a pmap of the file maps or reaches) nor nested in one, in a pmap-era script, with the
    axes its collectives name; never one whose axes a vmap binds or the script's own mesh has."""
    if not pmap_era(s):
        return {}
    mine = vmapped_axes(s) | set(s.mesh_axes)
    nested = {n for f in in_view for n in ast.walk(f)}
    found: dict[ast.AST, tuple[str, ...]] = {}
    for call in s.calls:
        axes = collective_axes(s, call)
        body = s.parent.get(call)
        while body is not None and not isinstance(body, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = s.parent.get(body)
        if not axes or body is None or body in nested or set(axes) & mine:
            continue
        found[body] = tuple(dict.fromkeys([*found.get(body, ()), *axes]))
    return found
