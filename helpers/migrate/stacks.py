"""Which host values hold pmap's layout, a leading axis of this host's devices, followed as data through the script.

A value is such a stack where a pmapped call maps it (an argument at a mapped position, or the container it is read
from), where a pmapped call hands it back, or where the script builds it per device (`shard(x)`, a reshape or a
repeat to the device count). Names bound from a stack carry it on: through items and fields, arithmetic, numpy and
`device_get` copies, a function's parameter its callers hand a stack to, and a function that returns one. The rules
of stack_read_rules then read every place the host reads that axis.
"""
from __future__ import annotations

import ast

from helpers.migrate.bindings import bound_value, device_count_of, mapped_tree, targets
from helpers.migrate.data_rules import traced
from helpers.migrate.host_read_rules import pmap_output
from helpers.migrate.once import once
from helpers.migrate.script import Script, code_of, is_name, keyword

# calls that hand back their first argument's layout: a copy on the host, a cast, elementwise numpy
_COPIES = ("jax.device_get", "numpy.asarray", "numpy.array", "jax.numpy.asarray", "jax.numpy.array", "numpy.clip",
           "jax.numpy.clip", "numpy.float32", "numpy.uint8", "numpy.squeeze")
_KEEPS = ("astype", "block_until_ready", "copy", "clip", "squeeze")
# calls that build an array whose first axis is their first argument's first entry
_SIZED = ("jax.numpy.full", "jax.numpy.ones", "jax.numpy.zeros", "numpy.full", "numpy.ones", "numpy.zeros",
          "jax.numpy.empty", "numpy.empty")


def stacked(s: Script, expr: ast.AST | None) -> bool:
    """An expression that holds pmap's stack on the host (see the module's docstring)."""
    return _carries(s, expr, _stacks(s), _returning(s))


def _key(s: Script, read: ast.AST) -> tuple[str, ast.AST]:
    """A name or attribute read, as the binding it reads: (its code, what it was last bound to, or its function
    for a parameter)."""
    return code_of(read), bound_value(s, read) or s.scope(read)


def _carries(s: Script, expr: ast.AST | None, keys: frozenset | set, returning: frozenset | set,
             depth: int = 0) -> bool:
    if expr is None or depth > 12:
        return False
    if isinstance(expr, (ast.Name, ast.Attribute)) and _key(s, expr) in keys or pmap_output(s, expr):
        return True
    mapped = mapped_tree(s, expr)
    if mapped is not None:  # `lambda x: x[:, 0]` mapped over a stacked tree: x is each of its stacked leaves
        return _carries(s, mapped, keys, returning, depth + 1)
    if isinstance(expr, ast.Attribute):  # a field of a stacked container: `out.loss`
        return _carries(s, expr.value, keys, returning, depth + 1)
    if isinstance(expr, ast.Subscript):
        return _keeps_leading_axis(expr.slice) and _carries(s, expr.value, keys, returning, depth + 1)
    if isinstance(expr, ast.BinOp):
        return any(_carries(s, side, keys, returning, depth + 1) for side in (expr.left, expr.right))
    if isinstance(expr, ast.UnaryOp):
        return _carries(s, expr.operand, keys, returning, depth + 1)
    if not isinstance(expr, ast.Call):
        return False
    if isinstance(expr.func, ast.Name) and expr.func.id in returning:
        return True
    if isinstance(expr.func, ast.Attribute) and expr.func.attr in _KEEPS:
        return _carries(s, expr.func.value, keys, returning, depth + 1)
    return is_name(s.name(expr.func), *_COPIES) and bool(expr.args) \
        and _carries(s, expr.args[0], keys, returning, depth + 1)


def _keeps_leading_axis(index: ast.AST) -> bool:
    """`x['image']` (an item of a container), `x[:, 0]` or `x[..., j]`: the leading axis stays; `x[0]` takes one
    device's entry."""
    if isinstance(index, ast.Constant):
        return isinstance(index.value, str)
    first = index.elts[0] if isinstance(index, ast.Tuple) and index.elts else index
    return isinstance(first, ast.Slice) and first.lower is None and first.upper is None \
        or isinstance(first, ast.Constant) and first.value is Ellipsis


def builds_stack(s: Script, value: ast.AST) -> bool:
    """A call that makes a stack one entry a device: flax's `shard`, a reshape to a device count first
    (`x.reshape(n_devices, -1, ...)`), a repeat or broadcast to one, or `jnp.full((n_devices, ...), v)`."""
    if not isinstance(value, ast.Call):
        return False
    name = s.name(value.func)
    if is_name(name, "flax.training.common_utils.shard", "flax.training.common_utils.shard_prng_key"):
        return True
    method = value.func.attr if isinstance(value.func, ast.Attribute) else None
    if method == "reshape" and value.args:
        first = value.args[0].elts[0] if isinstance(value.args[0], ast.Tuple) and value.args[0].elts else value.args[0]
        return device_count_of(s, first) is not None
    if method == "repeat" and value.args or is_name(name, "jax.numpy.repeat", "numpy.repeat", "jax.numpy.tile",
                                                    "numpy.tile", "jax.numpy.broadcast_to", "numpy.broadcast_to"):
        counts = value.args if method == "repeat" else value.args[1:2]
        return any(device_count_of(s, _first_entry(c)) is not None for c in counts)
    return is_name(name, *_SIZED) and bool(value.args) and device_count_of(s, _first_entry(value.args[0])) is not None


def _first_entry(node: ast.AST) -> ast.AST:
    return node.elts[0] if isinstance(node, (ast.Tuple, ast.List)) and node.elts else node


def mapped_arguments(s: Script, call: ast.Call) -> list[ast.AST]:
    """The arguments a pmapped call hands pmap to split (in_axes 0 or an axis, not None, not static); [] for a call
    of no pmap the script shows, or one whose in_axes it cannot read."""
    pmap = _pmap_of(s, call)
    if pmap is None or getattr(pmap, "splits_its_inputs", False):  # objax's Parallel (aliases.py)
        return []
    in_axes = keyword(pmap, "in_axes")
    static = keyword(pmap, "static_broadcasted_argnums")
    fixed = {e.value for e in ast.walk(static) if isinstance(e, ast.Constant)} if static is not None else set()
    args = []
    for position, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        args.append((position + _bound_self(s, pmap), arg))
    if in_axes is None or isinstance(in_axes, ast.Constant) and isinstance(in_axes.value, int):
        return [a for p, a in args if p not in fixed] + [k.value for k in call.keywords if k.arg]
    if isinstance(in_axes, (ast.Tuple, ast.List)):
        return [a for p, a in args if p not in fixed and p < len(in_axes.elts)
                and not (isinstance(in_axes.elts[p], ast.Constant) and in_axes.elts[p].value is None)]
    return []


def _bound_self(s: Script, pmap: ast.Call) -> int:
    """1 for a pmap that decorates a method (its `self` is position 0, not handed at the call), else 0."""
    holder = s.parent.get(pmap)
    return int(isinstance(holder, ast.FunctionDef) and pmap in holder.decorator_list
               and bool(holder.args.args) and holder.args.args[0].arg == "self")


def _pmap_of(s: Script, call: ast.Call) -> ast.Call | None:
    """The pmap a call runs: `p(...)` with `p = jax.pmap(f, ...)`, `self.p(...)` with `self.p = jax.pmap(...)`, or a
    def that `@jax.pmap` / `@partial(jax.pmap, ...)` decorates."""
    pmaps = set(s.pmaps())
    func = call.func
    bound = bound_value(s, func) if isinstance(func, (ast.Name, ast.Attribute)) else None
    if bound in pmaps:
        return bound
    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return next((d for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef) and f.name == called
                 for d in f.decorator_list if d in pmaps), None)


@once
def _returning(s: Script) -> frozenset[str]:
    """The script's functions that return a stack they build (`return shard(batch)`)."""
    return frozenset(f.name for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef) and any(
        isinstance(r, ast.Return) and r.value is not None and s.enclosing_function(r) is f and builds_stack(s, r.value)
        for r in ast.walk(f)))


@once
def _stacks(s: Script) -> frozenset[tuple[str, ast.AST]]:
    """The bindings (code, value) that hold a stack: what pmapped calls map, what a builder makes, and what is bound
    from those (three passes over the script's assignments and its calls of its own functions)."""
    keys = set()
    pmapped = s.pmapped_call_test()
    for call in s.calls:
        if pmapped(call):
            for arg in mapped_arguments(s, call):
                while isinstance(arg, ast.Subscript) or isinstance(arg, ast.Attribute) and bound_value(s, arg) is None:
                    arg = arg.value  # `batch['image']`, `batch.image`: the container
                if isinstance(arg, (ast.Name, ast.Attribute)):
                    keys.add(_key(s, arg))
    pairs = [(t, v) for node in ast.walk(s.tree) if isinstance(node, ast.Assign)
             for target in node.targets for t, v in targets(target, node.value) if isinstance(t, (ast.Name, ast.Attribute))]
    keys |= {(code_of(t), v) for t, v in pairs if builds_stack(s, v)}
    defs = {f.name: f for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef)}
    returning = _returning(s)
    for _ in range(3):
        before = len(keys)
        keys |= {(code_of(t), v) for t, v in pairs if _carries(s, v, keys, returning)}
        for call in s.calls:
            function = defs.get(call.func.id) if isinstance(call.func, ast.Name) and not traced(s, call) else None
            if function is not None:
                params = [a.arg for a in function.args.args]
                keys |= {(params[i], function) for i, arg in enumerate(call.args[:len(params)])
                         if not isinstance(arg, ast.Starred) and _carries(s, arg, keys, returning)}
        if len(keys) == before:
            break
    return frozenset(keys)
