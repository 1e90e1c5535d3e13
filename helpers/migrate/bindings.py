"""Where a value read in a script came from: the statement that last bound a name (or an attribute such as
`self.train_iter`) before the read, whatever the target's form (`key, sub = split(key)`, `for i, x in enumerate(xs)`),
and whether a value's history reaches some expression (the process index, a loader's call) or counts devices.

`Script.value` follows `name = expression` only; the rules of data_rules and key_rules need tuple targets, loop
targets and attributes too.
"""
from __future__ import annotations

import ast
import weakref
from typing import Callable

from helpers.migrate.script import Script, code_of, is_name

_Bindings = dict[tuple[ast.AST | None, str], list[tuple[tuple[int, int], ast.AST]]]
_CACHE: weakref.WeakKeyDictionary[Script, _Bindings] = weakref.WeakKeyDictionary()


def targets(target: ast.AST, value: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(target, the part of `value` it gets): item by item for `a, b = f(), g()`, the whole value otherwise."""
    if isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
            return [p for t, v in zip(target.elts, value.elts) for p in targets(t, v)]
        return [p for t in target.elts for p in targets(t.value if isinstance(t, ast.Starred) else t, value)]
    return [(target, value)]


def loop_items(loop: ast.For | ast.AsyncFor) -> list[tuple[ast.AST, ast.AST]]:
    """(target, what it runs over) of a for loop: `xs` for x of `for i, x in enumerate(xs)`."""
    return _iterated(loop.target, loop.iter)


def host_index_in(s: Script, expr: ast.AST) -> ast.AST | None:
    """Where jax.process_index() (or jax.host_id()) enters an expression's history (`seed2key(42 + process_index)`
    with `process_index = jax.process_index()`): the call, or the name read that holds it."""
    def host(node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and is_name(s.name(node.func), "process_index", "host_id")

    return reaches(s, expr, lambda n: host(n) or (isinstance(n, ast.Name) and host(s.value(n))))


def _iterated(target: ast.AST, iterated: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(loop target, what it runs over): `xs` for x of `enumerate(xs)`, each of zip's arguments for its item."""
    name = getattr(iterated.func, "id", "") if isinstance(iterated, ast.Call) else ""
    if isinstance(target, ast.Tuple) and name == "enumerate" and len(target.elts) == 2 and iterated.args:
        return [(target.elts[1], iterated.args[0])]
    if isinstance(target, ast.Tuple) and name == "zip" and len(target.elts) == len(iterated.args):
        return list(zip(target.elts, iterated.args))
    return [(target, iterated)]


def _scope_key(s: Script, target: ast.AST) -> ast.AST | None:
    """A name is bound in its function; an attribute (`self.it`) anywhere in the script (None)."""
    return s.scope(target) if isinstance(target, ast.Name) else None


def _bindings(s: Script) -> _Bindings:
    if s not in _CACHE:
        found: _Bindings = {}
        for node in ast.walk(s.tree):
            if isinstance(node, ast.Assign):
                pairs = [p for t in node.targets for p in targets(t, node.value)]
                at = (node.end_lineno, node.end_col_offset)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:  # `samples: Sample = step(data)`
                pairs, at = targets(node.target, node.value), (node.end_lineno, node.end_col_offset)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                pairs = [p for t, it in loop_items(node) for p in targets(t, it)]
                at = (node.target.end_lineno, node.target.end_col_offset)
            else:
                continue
            for target, value in pairs:
                if isinstance(target, (ast.Name, ast.Attribute)):
                    found.setdefault((_scope_key(s, target), code_of(target)), []).append((at, value))
        for values in found.values():
            values.sort(key=lambda pair: pair[0])
        _CACHE[s] = found
    return _CACHE[s]


def bound_value(s: Script, read: ast.AST) -> ast.AST | None:
    """What a name or attribute read here was last bound to before the read (the iterated expression for a loop's
    target), in its own function or the nearest enclosing one that binds it; None if nothing binds it."""
    if not isinstance(read, (ast.Name, ast.Attribute)):
        return None
    bindings, at, code = _bindings(s), (read.lineno, read.col_offset), code_of(read)
    scope = _scope_key(s, read)
    while True:
        values = bindings.get((scope, code), [])
        if values:
            before = [v for where, v in values if where <= at]
            return (before or [v for _, v in values])[-1]
        if scope is None or scope is s.tree:
            return None
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
                and code in {a.arg for a in ast.walk(scope.args) if isinstance(a, ast.arg)}:
            return None  # a parameter: its value comes from the callers
        scope = s.scope(scope)


def assigned_attribute(s: Script, attribute: ast.AST) -> ast.AST | None:
    """What the script assigns to an attribute spelled so (`self.is_master = ...`, `args.rank = ...`), anywhere in
    it (its first assignment); None for anything else, or one nothing assigns."""
    if not isinstance(attribute, ast.Attribute):
        return None
    spelled = code_of(attribute)
    return next((a.value for a in ast.walk(s.tree) if isinstance(a, ast.Assign)
                 and any(code_of(t) == spelled for t in a.targets)), None)


def a_loaders_batch(s: Script, expr: ast.AST) -> bool:
    """The next batch of a loader (`next(train_iter)`, or a name bound to one): rows stacked per device, which differ
    from device to device, not copies of one value."""
    value = bound_value(s, expr) if isinstance(expr, ast.Name) else expr
    return isinstance(value, ast.Call) and s.name(value.func) == "next"


def batch_rows(what: str) -> tuple[str, str]:
    """What a finding says of device 0's entry of a loader's batch stack, and what to write instead."""
    return (f"{what} takes device 0's rows of a batch stacked per local device (each device's rows differ: no copy); "
            "after the port the batch has no device axis, and [0] would take its first row",
            "take the rows you need from the host's batch before it is made global (batch[:n]), or the batch itself")


def arguments_for(s: Script, read: ast.Name) -> list[ast.AST]:
    """What the script's calls of a function it defines hand the parameter `read` names (`ds` of `def evaluate(state,
    ds)` at `evaluate(state, val_ds)`: `val_ds`), by position or keyword; [] for a read that is no parameter."""
    function = s.scope(read)
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    if read.id not in positional and read.id not in {a.arg for a in function.args.kwonlyargs}:
        return []
    handed = []
    for call in s.calls:
        if isinstance(call.func, ast.Name) and call.func.id == function.name:
            handed += [k.value for k in call.keywords if k.arg == read.id]
            at = positional.index(read.id) if read.id in positional else len(call.args)
            if at < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:at + 1]):
                handed.append(call.args[at])
    return handed


def reaches(s: Script, expr: ast.AST, found: Callable[[ast.AST], bool], depth: int = 12) -> ast.AST | None:
    """The first node of `expr`, or of the values its names were bound to (and theirs, `depth` deep), for which
    `found` holds; None if none does."""
    seen: set[ast.AST] = set()
    todo = [(expr, 0)]
    while todo:
        node, level = todo.pop(0)
        if node in seen:
            continue
        seen.add(node)
        for inner in ast.walk(node):
            if found(inner):
                return inner
            if level < depth and isinstance(inner, (ast.Name, ast.Attribute)) and isinstance(inner.ctx, ast.Load):
                value = bound_value(s, inner)
                if value is not None:
                    todo.append((value, level + 1))
    return None


def mapped_tree(s: Script, name: ast.AST) -> ast.AST | None:
    """The tree a lambda's only parameter stands for the leaves of, where a tree map maps the lambda over one tree
    (`jax.tree.map(lambda x: x[:, 0], inputs)`: `inputs` for x); None for any other read."""
    lam = s.scope(name) if isinstance(name, ast.Name) else None
    call = s.parent.get(lam) if isinstance(lam, ast.Lambda) else None
    if not (isinstance(call, ast.Call) and s.is_tree_map(call) and len(call.args) == 2 and call.args[0] is lam
            and [a.arg for a in lam.args.args] == [name.id]):
        return None
    return call.args[1]


def device_count_of(s: Script, node: ast.AST, depth: int = 0) -> str | None:
    """'local' or 'every' when the expression counts devices, through the names that hold the count:
    jax.local_device_count() or jax.device_count(), the len() of jax.local_devices() or jax.devices() (or of the
    devices a pmap is handed), either side of min(count, cap) or of `count if ... else 1`; None otherwise."""
    if depth > 8:
        return None
    if isinstance(node, (ast.Name, ast.Attribute)):
        bound = bound_value(s, node)
        if bound is None and isinstance(node, ast.Name) and _splits_rngs_per_device(s, node):
            return "local"
        counted = device_count_of(s, bound, depth + 1) if bound is not None else None
        if counted is None and isinstance(bound, ast.Constant):  # `n = jax.local_device_count()` / `else: n = 1`
            others = _other_branch(s, node, bound)
            counted = next(filter(None, (device_count_of(s, other, depth + 1) for other in others)), None)
        return counted or checked_count(s, node, depth)
    if isinstance(node, ast.IfExp):
        return device_count_of(s, node.body, depth + 1) or device_count_of(s, node.orelse, depth + 1)
    if not isinstance(node, ast.Call):
        return None
    name = s.name(node.func)
    if is_name(name, "jax.local_device_count", "jax.device_count"):
        return "local" if "local" in name else "every"
    if name in ("min", "max", "int"):
        return next(filter(None, (device_count_of(s, a, depth + 1) for a in node.args)), None)
    if name == "len" and len(node.args) == 1:
        return _devices_of(s, node.args[0], depth + 1)
    return None


def _other_branch(s: Script, read: ast.AST, value: ast.AST) -> list[ast.AST]:
    """What the other branch of the `if` that binds `read` to `value` binds it to (`n = 1` in one, `n = count` in the
    other): the name holds either."""
    binding = s.parent.get(value)
    branch = s.parent.get(binding)
    if not isinstance(binding, ast.Assign) or not isinstance(branch, ast.If):
        return []
    other = branch.orelse if binding in branch.body else branch.body
    return [node.value for node in other if isinstance(node, ast.Assign)
            and [code_of(t) for t in node.targets] == [code_of(read)]]


def checked_count(s: Script, read: ast.AST, depth: int = 0) -> str | None:
    """'local' or 'every' for a count the script stops without (`if num_devices != jax.device_count(): raise`,
    `assert n == jax.local_device_count()`), checked in the scope it is read in: a flag's value that must equal it."""
    scope, spelled = s.scope(read), code_of(read)
    for check in ast.walk(scope):
        if isinstance(check, ast.If) and any(isinstance(n, ast.Raise) for n in ast.walk(check)):
            test = check.test
        elif isinstance(check, ast.Assert):
            test = check.test
        else:
            continue
        for compare in (n for n in ast.walk(test) if isinstance(n, ast.Compare) and len(n.ops) == 1
                        and isinstance(n.ops[0], (ast.Eq, ast.NotEq)) and s.scope(n) is scope):
            sides = (compare.left, compare.comparators[0])
            for mine, other in (sides, sides[::-1]):
                counted = device_count_of(s, other, depth + 1) if code_of(mine) == spelled else None
                if counted:
                    return counted
    return None


def _splits_rngs_per_device(s: Script, name: ast.Name) -> bool:
    """A parameter the function also hands to `nnx.split_rngs(splits=name)`: the count nnx.pmap splits keys into,
    one a local device."""
    return any(isinstance(c, ast.Call) and is_name(s.name(c.func), "flax.nnx.split_rngs")
               and any(k.arg == "splits" and isinstance(k.value, ast.Name) and k.value.id == name.id
                       for k in c.keywords)
               for c in ast.walk(_binding_scope(s, name)))


def _binding_scope(s: Script, name: ast.Name) -> ast.AST:
    """The function whose parameter `name` is, out through the functions and lambdas it is read in; else its own."""
    scope = s.scope(name)
    while scope is not s.tree:
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
                and name.id in {a.arg for a in ast.walk(scope.args) if isinstance(a, ast.arg)}:
            return scope
        scope = s.scope(scope)
    return s.scope(name)


# calls whose devices= are this host's own, one copy or piece each
_PLACES_PER_DEVICE = ("jax.device_put_sharded", "jax.device_put_replicated", "flax.jax_utils.replicate")


def _devices_of(s: Script, node: ast.AST, depth: int) -> str | None:
    """'local' or 'every' for a list of devices: jax.local_devices() or jax.devices() (through list(), a slice and
    names), or a parameter the function hands to a pmap or a per-device placement as its devices= (a host's own)."""
    if depth > 8:
        return None
    while isinstance(node, ast.Subscript) or isinstance(node, ast.Call) and s.name(node.func) == "list" and node.args:
        node = node.value if isinstance(node, ast.Subscript) else node.args[0]
    if isinstance(node, ast.BoolOp):  # `devices = devices or jax.local_devices()`
        return next(filter(None, (_devices_of(s, v, depth + 1) for v in node.values)), None)
    if isinstance(node, ast.Call):
        name = s.name(node.func)
        return ("local" if "local" in name else "every") if is_name(name, "jax.local_devices", "jax.devices") else None
    if not isinstance(node, (ast.Name, ast.Attribute)):
        return None
    bound = bound_value(s, node)  # `self.devices = jax.local_devices()` too
    if bound is not None or not isinstance(node, ast.Name):
        return _devices_of(s, bound, depth + 1) if bound is not None else None
    pmaps = {*s.pmaps(), *s.nnx_pmaps()}
    handed = any(isinstance(k.value, ast.Name) and k.value.id == node.id and k.arg == "devices"
                 for c in ast.walk(_binding_scope(s, node)) if c in pmaps or isinstance(c, ast.Call)
                 and is_name(s.name(c.func), *_PLACES_PER_DEVICE) for k in c.keywords)
    return "local" if handed else None


def this_hosts_devices(s: Script, devices: ast.AST | None) -> bool:
    """A device list that is this host's own: `jax.local_devices()`, a slice of it, or a name bound to one (not
    another host's, `jax.local_devices(process_index=p)`, nor a list merely counted by it)."""
    for _ in range(4):
        if isinstance(devices, ast.Subscript):
            devices = devices.value
        elif isinstance(devices, ast.Name) and s.value(devices) is not devices:
            devices = s.value(devices)
        else:
            break
    return isinstance(devices, ast.Call) and is_name(s.name(devices.func), "jax.local_devices") \
        and not devices.args and not devices.keywords
