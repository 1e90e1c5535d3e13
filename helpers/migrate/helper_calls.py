"""A small helper of the script that stacks rows or splits keys one a device (`def shard(x): return
x.reshape(n_local, -1, ...)`) is said at each call too: each call is where a stack enters the program, and
each one changes in the port (LABELLING.md rules 10 and 20)."""
from __future__ import annotations

import ast
from typing import Iterable, Iterator

from helpers.migrate.script import Script

HELPER_LINES = 8  # a helper: a def this short, or a lambda bound to a name
_SAID_AT_CALLS = ("local-batch", "per-device-keys")
_DEPTH = 3  # helpers calling helpers: how many calls deep a finding is carried to the calls


def said_at_calls(s: Script, said: Iterable[tuple[int, str, str, str]]) -> list[tuple[ast.AST, str, str, str]]:
    """(call, rule, does, instead) for each call, on a line with no finding of its own, of a helper whose body has a
    finding of a rule in _SAID_AT_CALLS (`said`: (line, rule, does, instead) of every finding), also of a helper
    whose body calls such a helper (`tree_map(split_rows, state)`), a few calls deep."""
    said, found = list(said), []
    for _ in range(_DEPTH):
        new = list(_one_round(s, said))
        if not new:
            break
        found += new
        said += [(node.lineno, rule, does, instead) for node, rule, does, instead in new]
    return found


def _one_round(s: Script, said: list[tuple[int, str, str, str]]) -> Iterator[tuple[ast.AST, str, str, str]]:
    spoken = {line for line, *_ in said}
    pmapped, pmaps = s.pmapped_names(), set(s.pmaps())
    for name, helper in _helpers(s).items():
        if name in pmapped or pmaps & set(ast.walk(helper)):
            continue  # a step, or a helper that runs its own pmap (a gather): its calls are said as such
        body = next(((rule, does, instead) for line, rule, does, instead in sorted(said)
                     if helper.lineno <= line <= helper.end_lineno and rule in _SAID_AT_CALLS), None)
        if body is None:
            continue
        rule, does, instead = body
        for call in s.calls:
            inside = helper.lineno <= call.lineno <= helper.end_lineno
            if _calls(s, call, name) and call.lineno not in spoken and not inside:
                yield call, rule, f"{name}(...) (line {helper.lineno}) does it here: {does}", instead


def _helpers(s: Script) -> dict[str, ast.AST]:
    """The script's short functions and named lambdas, by name (a name defined twice is left out)."""
    found: dict[str, list[ast.AST]] = {}
    for node in ast.walk(s.tree):
        if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 <= HELPER_LINES:
            found.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            found.setdefault(node.targets[0].id, []).append(node)
    return {name: nodes[0] for name, nodes in found.items() if len(nodes) == 1}


def _calls(s: Script, call: ast.Call, name: str) -> bool:
    """`name(...)`, `self.name(...)` of a method, or a tree map of it (`jax.tree.map(name, tree)`)."""
    func = call.args[0] if s.is_tree_map(call) and call.args else call.func
    return isinstance(func, ast.Name) and func.id == name or isinstance(func, ast.Attribute) and func.attr == name \
        and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls")
