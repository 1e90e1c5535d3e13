"""The learner's script as the rules read it: what each imported name stands for, and the parsed tree.

Nothing here imports or runs the script: `ast` only.
"""
from __future__ import annotations

import ast
from typing import Iterator

MESH_MAKERS = {"jax.make_mesh", "jax.sharding.Mesh", "jax.Mesh"}
SPEC_MAKERS = {"jax.sharding.PartitionSpec", "jax.P"}
MESH_AXES = "('host', 'device')"  # how the course names a data-parallel mesh's axes


class Names:
    """What each imported name stands for: `jnp` -> `jax.numpy`, `pmap` -> `jax.pmap`."""

    def __init__(self, tree: ast.AST):
        self.alias: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.alias[a.asname or a.name] = f"{node.module}.{a.name}"

    def of(self, node: ast.AST) -> str:
        """The dotted name an expression stands for ('' if it is not a name)."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return ""
        head = self.alias.get(node.id, node.id)
        return ".".join([head, *reversed(parts)])


def is_name(name: str, *suffixes: str) -> bool:
    return any(name == s or name.endswith("." + s) for s in suffixes)


def code_of(node: ast.AST) -> str:
    return ast.unparse(node)


def strings(node: ast.AST | None) -> tuple[str, ...]:
    """The axis names a string or a tuple of strings spells."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(s for e in node.elts for s in strings(e))
    return ()


def keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def argument(call: ast.Call, position: int, name: str) -> ast.AST | None:
    return call.args[position] if len(call.args) > position else keyword(call, name)


def only_process_zero(test: ast.AST, names: Names) -> bool:
    """`jax.process_index() == 0`, `0 == ...`, `not jax.process_index()`, `... < 1`."""
    def is_index(n):
        return isinstance(n, ast.Call) and is_name(names.of(n.func), "process_index")

    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return is_index(test.operand)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        zero = [s for s in (left, right) if isinstance(s, ast.Constant) and s.value == 0]
        return bool(zero) and isinstance(test.ops[0], ast.Eq) and (is_index(left) or is_index(right))
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(only_process_zero(v, names) for v in test.values)
    return False


def _assignments(tree: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """(name, the expression assigned to it): `a = f()`, and `a, b = f(), g()` item by item."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name):
                yield target.id, node.value
            elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                    and len(target.elts) == len(node.value.elts):
                yield from ((t.id, v) for t, v in zip(target.elts, node.value.elts) if isinstance(t, ast.Name))


class Script:
    """One parsed script and what the rules need to know about it."""

    def __init__(self, tree: ast.AST):
        self.tree = tree
        self.names = Names(tree)
        self.calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        self.assigned = dict(_assignments(tree))
        self.pmap_axes = {axis for call in self._pmaps() for axis in strings(keyword(call, "axis_name"))}
        self.mesh_axes = self._mesh_axes()

    def name(self, node: ast.AST) -> str:
        return self.names.of(node)

    def _pmaps(self) -> Iterator[ast.Call]:
        """Every jax.pmap(...) call, and partial(jax.pmap, ...) (its keywords are pmap's)."""
        for call in self.calls:
            name = self.name(call.func)
            if is_name(name, "jax.pmap"):
                yield call
            elif is_name(name, "functools.partial") and call.args and is_name(self.name(call.args[0]), "jax.pmap"):
                yield call

    def _mesh_axes(self) -> tuple[str, ...]:
        for call in self.calls:
            if self.name(call.func) in MESH_MAKERS:
                axes = strings(argument(call, 1, "axis_names"))
                if axes:
                    return axes
        return ()


