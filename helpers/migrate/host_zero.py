"""Which code runs on process 0 only: the body of `if jax.process_index() == 0:` (or of a name holding that test,
`is_master = jax.process_index() == 0`), and what follows `if jax.process_index() != 0: return` in its block."""
from __future__ import annotations

import ast

from helpers.migrate.bindings import assigned_attribute
from helpers.migrate.once import once
from helpers.migrate.script import Names, Script, is_name

_EXITS = (ast.Return, ast.Continue, ast.Break, ast.Raise)


def only_process_zero(test: ast.AST, names: Names, value=lambda node: node) -> bool:
    """`jax.process_index() == 0`, `0 == ...`, `not jax.process_index()`, `... < 1` (or `jax.host_id()`), also
    through a name `value` follows to the call (`process_id = jax.process_index()`)."""
    def is_index(n):
        n = value(n) if isinstance(n, (ast.Name, ast.Attribute)) else n
        return isinstance(n, ast.Call) and is_name(names.of(n.func), "process_index", "host_id")

    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return is_index(test.operand)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        zero = [s for s in (left, right) if isinstance(s, ast.Constant) and s.value == 0]
        return bool(zero) and isinstance(test.ops[0], ast.Eq) and (is_index(left) or is_index(right))
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(only_process_zero(v, names, value) for v in test.values)
    return False


def _process_zero_test(s: Script, test: ast.AST, depth: int = 0) -> bool:
    """`process_index() == 0` as `only_process_zero` reads it, also through a name or a `self.` attribute the script
    binds to such a test (`if self.is_master:`)."""
    if only_process_zero(test, s.names, lambda node: held_index(s, node)):
        return True
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):  # `if step % n == 0 and is_master:`
        return any(_process_zero_test(s, v, depth) for v in test.values)
    bound = _bound_test(s, test)
    return bound is not None and depth < 3 and _process_zero_test(s, bound, depth + 1)


def held_index(s: Script, node: ast.AST) -> ast.AST:
    """What a name or attribute stands for, followed to where the process index may come from: its assignment, an
    attribute the script assigns (`args.local_rank = jax.process_index()`), or the item of a tuple that a function
    of the script returns (`count, index = setup_hosts()`, `return jax.process_count(), jax.process_index()`)."""
    for _ in range(6):
        if isinstance(node, ast.Name):
            bound = s.value(node)
            bound = _returned_item(s, node) if bound is node else bound
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            bound = assigned_attribute(s, node)
        else:
            break
        if bound is None or bound is node:
            break
        node = bound
    return node


def _returned_item(s: Script, name: ast.Name) -> ast.AST | None:
    """The item a tuple target takes from a call of the script's own function: what that function returns there."""
    defs = {f.name: f for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef)}
    for node in ast.walk(s.tree):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id in defs):
            continue
        for target in (t for t in node.targets if isinstance(t, ast.Tuple)):
            position = next((i for i, e in enumerate(target.elts) if isinstance(e, ast.Name) and e.id == name.id),
                            None)
            returned = [r.value for r in ast.walk(defs[node.value.func.id]) if isinstance(r, ast.Return)
                        and isinstance(r.value, ast.Tuple) and len(r.value.elts) == len(target.elts)]
            if position is not None and returned:
                return returned[-1].elts[position]
    return None


def _bound_test(s: Script, test: ast.AST) -> ast.AST | None:
    if isinstance(test, ast.Name):
        value = s.value(test)
        return value if value is not test else None
    if isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == "self":
        return assigned_attribute(s, test)
    return None


def _other_hosts_test(s: Script, test: ast.AST) -> bool:
    """A test true on every host but process 0: `process_index() != 0`, `> 0`, `process_index()` itself, `not
    is_master`."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _process_zero_test(s, test.operand)
    index = lambda n: isinstance(n, ast.Call) and is_name(s.name(n.func), "process_index", "host_id")  # noqa: E731
    if index(test) or (isinstance(test, ast.Name) and index(s.value(test))):
        return True
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.NotEq, ast.Gt)):
        left, right = test.left, test.comparators[0]
        return isinstance(right, ast.Constant) and right.value == 0 and (
            index(left) or (isinstance(left, ast.Name) and index(s.value(left))))
    return False


def _guarded_blocks(s: Script) -> list[list[ast.stmt]]:
    """The statement lists that run on process 0 only, by an if or by an early exit of the other hosts."""
    blocks = []
    for node in ast.walk(s.tree):
        if isinstance(node, ast.If) and _process_zero_test(s, node.test):
            blocks.append(node.body)
        for field in ("body", "orelse"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            for i, stmt in enumerate(stmts):
                if isinstance(stmt, ast.If) and not stmt.orelse and _other_hosts_test(s, stmt.test) \
                        and stmt.body and isinstance(stmt.body[-1], _EXITS):
                    blocks.append(stmts[i + 1:])
                    break
    return blocks


@once
def process_zero_nodes(s: Script) -> set[ast.AST]:
    """Every node that runs on process 0 only (kept on the Script: the rules ask often). A function called from
    there is said at its call, not in its body."""
    return {n for block in _guarded_blocks(s) for stmt in block for n in ast.walk(stmt)}
