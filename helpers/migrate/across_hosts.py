"""pmaps across hosts: a pmap over devices picked one per host (`devices=[one per host]`), the old way to run a
function once on every host; a port replaces the function that builds one as a whole."""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.script import Script, code_of, keyword


def pmaps_over_hosts(s: Script) -> list[ast.Call]:
    """pmaps over devices picked one per host (`devices=[one per host]`): a map across hosts."""
    return [call for call in s.pmaps() if keyword(call, "devices") is not None
            and _one_per_host(s, keyword(call, "devices"))]


def _one_per_host(s: Script, devices: ast.AST) -> bool:
    """The devices are evidently one per host: values of a dict keyed by process_index
    (`{d.process_index: d for d in jax.devices()}`), or a comprehension with one loop, over the processes."""
    for node in _reached(s, devices):
        if isinstance(node, ast.DictComp) and "process_index" in code_of(node.key):
            return True
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and len(node.generators) == 1 \
                and "process_count" in code_of(node.generators[0].iter):
            return True
    return False


def _reached(s: Script, expr: ast.AST, depth: int = 3) -> Iterator[ast.AST]:
    """The nodes of an expression and of what the names it reads hold, a few names deep."""
    for node in ast.walk(expr):
        yield node
        held = s.value(node) if isinstance(node, ast.Name) and depth else node
        if held is not node:
            yield from _reached(s, held, depth - 1)


def in_pmap_over_hosts(s: Script, node: ast.AST) -> bool:
    """The node is inside a function that builds a pmap across hosts (a port replaces it as a whole)."""
    scopes = {s.enclosing_function(call) for call in pmaps_over_hosts(s)} - {s.tree}
    while node not in scopes and node in s.parent:
        node = s.parent[node]
    return node in scopes
