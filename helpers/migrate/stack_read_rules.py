"""The rules for host code that reads pmap's device axis off a stack (stacks.py says which values are stacks): its
shape (`x.shape[0]` counts this host's devices, `x.shape[1]` each device's rows), a split along axis 1 (`x[:, :n]`),
a fold of the axis into the rows (`x.flatten()`), or a join along axis 1. After the port the array has no device
axis, and its first axis is every host's rows.

Each rule reads a `Script` and yields (node, rule name, what the line does on several hosts, what to write
instead).
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.data_rules import traced
from helpers.migrate.host_read_rules import said_fold
from helpers.migrate.script import MESH_AXES, Script, code_of, is_name
from helpers.migrate.stacks import stacked

LESSONS: dict[str, tuple[str, str]] = {}  # local-batch is batch_rules'

_ROWS_GLOBALLY = ("count rows on the global array: its first axis is every host's rows (x.shape[0]), this host's "
                  "part x.shape[0] // jax.process_count(); per device, the shard_map body's own x.shape[0]")
_NOT_SIZED = ("print", "len", "str", "repr")


def device_axes_read(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`x.shape[0]`, `x.shape[1]` or `x.shape[:2]` of a stack on the host: this host's device count, or each
    device's rows, read off pmap's layout."""
    for node in ast.walk(s.tree):
        read = s.parent.get(node)
        if not (isinstance(node, ast.Attribute) and node.attr == "shape" and isinstance(read, ast.Subscript)
                and read.value is node and _device_axes(read.slice)):
            continue
        if stacked(s, node.value) and not traced(s, node) and not _only_shown(s, read) \
                and not _keeps_its_own_axis(s, read, node.value):
            yield (read, "local-batch",
                   f"{code_of(read)} reads pmap's layout off {code_of(node.value)} (axis 0 is this host's devices, "
                   "axis 1 each device's rows); after the port the array has no device axis", _ROWS_GLOBALLY)


def _keeps_its_own_axis(s: Script, read: ast.Subscript, owner: ast.AST) -> bool:
    """`x.reshape(x.shape[0], -1)`: the stack's own leading axis kept in place, which still holds after the port."""
    holder = s.parent.get(read)
    if isinstance(holder, ast.Tuple) and holder.elts[:1] == [read]:
        read, holder = holder, s.parent.get(holder)
    return isinstance(holder, ast.Call) and isinstance(holder.func, ast.Attribute) and holder.func.attr == "reshape" \
        and holder.args[:1] == [read] and code_of(holder.func.value) == code_of(owner)


def shape_of_a_stack_handed_on(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`sample_loop(key, state, tuple(batch['image'].shape), ...)` of a stack: the whole shape of pmap's stack (its
    leading axis of this host's devices) made the shape of something else."""
    for node in ast.walk(s.tree):
        if not (isinstance(node, ast.Attribute) and node.attr == "shape" and stacked(s, node.value)
                and not traced(s, node)):
            continue
        handed = s.parent.get(node)
        if isinstance(handed, ast.Call) and s.name(handed.func) in ("tuple", "list") and handed.args == [node]:
            node_or_tuple, handed = handed, s.parent.get(handed)
        else:
            node_or_tuple = node
        if isinstance(handed, ast.keyword):
            handed = s.parent.get(handed)
        if isinstance(handed, ast.Call) and handed.func is not node_or_tuple and node_or_tuple is not handed \
                and not s.name(handed.func).startswith(("logging.", "absl.logging")) \
                and s.name(handed.func) not in _NOT_SIZED and not s.name(handed.func).startswith("jax.random."):
            yield (node, "local-batch",
                   f"{code_of(node)} is the shape of pmap's stack: its leading axis is this host's devices, handed "
                   f"to {code_of(handed.func)} as a shape; after the port the array has no device axis (and its "
                   "first axis is every host's rows)",
                   "take the shape from the global array (rows first, no device axis), or build it from the global "
                   "batch size: (global_batch, *rest)")


def device_axis_split(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`x[:, :n]` or `x[:, :, j]` of a stack on the host: a cut along axis 1, each device's rows."""
    for node in ast.walk(s.tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _behind_the_device_axis(node.slice) \
                and stacked(s, node.value) and not traced(s, node):
            yield (node, "local-batch",
                   f"{code_of(node)} cuts pmap's stack behind its device axis (axis 1 is each device's rows); after "
                   "the port the array has no device axis, so the cut takes the wrong axis",
                   "index the global array's rows (axis 0), or this host's rows: "
                   "jax.experimental.multihost_utils.global_array_to_host_local_array(x, mesh, "
                   f"P({MESH_AXES}))")


def device_axis_folded(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`x.flatten()`, `x.ravel()` or `x.reshape(-1, ...)` of a stack on the host (not a pmap output's reshape, which
    host_read_rules says): the device axis merged into the rows by hand; read whole at once (`device_get(...)`,
    numpy of it), the read is said."""
    for call in s.calls:
        owner = call.func.value if isinstance(call.func, ast.Attribute) else None
        if owner is None or not _folds(call) or said_fold(s, call) or not stacked(s, owner) \
                or traced(s, call):
            continue
        reader = s.parent.get(call)
        if isinstance(reader, ast.Call) and reader.args[:1] == [call] and (
                is_name(s.name(reader.func), "jax.device_get") or s.name(reader.func).startswith("numpy.")):
            yield (reader, "numpy-of-global",
                   f"{code_of(reader.func)}({code_of(call)}) reads pmap's stack whole on this host, its device axis "
                   "folded into rows; after the port it is one global array over every host's devices, and reading "
                   "it whole raises on several hosts (other hosts hold part of it)",
                   "this host's rows: jax.experimental.multihost_utils.global_array_to_host_local_array(x, mesh, "
                   f"P({MESH_AXES})); every host's: multihost_utils.process_allgather(x)")
            continue
        yield (call, "local-batch",
               f"{code_of(call)} folds pmap's leading axis of this host's devices into the rows; after the port the "
               "array has no device axis (its first axis already is every host's rows), so the fold is not needed, "
               "and the rows it gives are no longer this host's",
               "drop the fold: the global array's rows are one axis; this host's rows are "
               f"jax.experimental.multihost_utils.global_array_to_host_local_array(x, mesh, P({MESH_AXES}))")


def device_axis_joined(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`np.concatenate([x, y], axis=1)` of stacks on the host: joined along each device's rows."""
    for call in s.calls:
        axis = next((k.value for k in call.keywords if k.arg == "axis"), call.args[1] if len(call.args) > 1 else None)
        if not (is_name(s.name(call.func), "numpy.concatenate", "jax.numpy.concatenate") and call.args
                and isinstance(axis, ast.Constant) and axis.value == 1):
            continue
        parts = call.args[0].elts if isinstance(call.args[0], (ast.List, ast.Tuple)) else [call.args[0]]
        if any(stacked(s, p) for p in parts) and not traced(s, call):
            yield (call, "local-batch",
                   f"{code_of(call.func)}(..., axis=1) joins pmap's stacks along each device's rows (axis 0 is this "
                   "host's devices); after the port the arrays have no device axis, and axis 1 is no longer rows",
                   "join the host's rows (axis 0) before they are made global: jax.make_array_from_process_local_data("
                   f"NamedSharding(mesh, P({MESH_AXES})), rows)")


def _folds(call: ast.Call) -> bool:
    """`.flatten()`, `.ravel()`, `.reshape(-1, ...)` or `.reshape((-1, ...))`."""
    name = call.func.attr
    if name in ("flatten", "ravel"):
        return not call.args and not call.keywords
    first = call.args[0] if name == "reshape" and call.args else None
    if isinstance(first, ast.Tuple) and first.elts:
        first = first.elts[0]
    return isinstance(first, ast.UnaryOp) and isinstance(first.op, ast.USub) and isinstance(first.operand, ast.Constant)


def _behind_the_device_axis(index: ast.AST) -> bool:
    """`[:, a:b]`, `[:, :, j]`: the whole leading axis, then a cut of a later one."""
    if not (isinstance(index, ast.Tuple) and len(index.elts) >= 2):
        return False
    first, rest = index.elts[0], index.elts[1:]
    whole = isinstance(first, ast.Slice) and first.lower is None and first.upper is None and first.step is None
    return whole and not all(isinstance(e, ast.Slice) and e.lower is None and e.upper is None for e in rest) \
        and not any(isinstance(e, ast.Constant) and e.value is None for e in rest)


def _only_shown(s: Script, node: ast.AST) -> bool:
    """The value is printed or logged, nothing computed from it."""
    holder = s.parent.get(node)
    while isinstance(holder, (ast.FormattedValue, ast.JoinedStr, ast.Tuple)):
        holder = s.parent.get(holder)
    return isinstance(holder, ast.Call) and (s.name(holder.func) == "print" or "logging" in s.name(holder.func)
                                             or code_of(holder.func).endswith(("log", "info", "write")))


def _device_axes(index: ast.AST) -> bool:
    """`[0]`, `[1]` or `[:2]` of a shape."""
    if isinstance(index, ast.Constant):
        return index.value in (0, 1)
    return isinstance(index, ast.Slice) and index.lower is None and index.step is None \
        and isinstance(index.upper, ast.Constant) and index.upper.value == 2


RULES = (device_axes_read, shape_of_a_stack_handed_on, device_axis_split, device_axis_folded, device_axis_joined)
