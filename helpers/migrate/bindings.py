"""Where a value read in a script came from: the statement that last bound a name (or an attribute such as
`self.train_iter`) before the read, whatever the target's form (`key, sub = split(key)`, `for i, x in enumerate(xs)`),
and whether a value's history reaches some expression (the process index, a loader's call).

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


def _targets(target: ast.AST, value: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(target, the part of `value` it gets): item by item for `a, b = f(), g()`, the whole value otherwise."""
    if isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
            return [p for t, v in zip(target.elts, value.elts) for p in _targets(t, v)]
        return [p for t in target.elts for p in _targets(t.value if isinstance(t, ast.Starred) else t, value)]
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
                pairs = [p for t in node.targets for p in _targets(t, node.value)]
                at = (node.end_lineno, node.end_col_offset)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                pairs = [p for t, it in loop_items(node) for p in _targets(t, it)]
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
