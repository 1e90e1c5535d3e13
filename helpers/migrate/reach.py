"""The code a pmapped step runs beyond its own body: the script's functions it calls or hands to a transform
(`jax.lax.scan(update_step, ...)`, `jax.value_and_grad(loss_fn)(...)`), and theirs, a few calls deep.

Inside that code pmap's leading axis of local devices is already stripped: a value is one device's, never the
stack; and a key drawn from there is each device's key.
"""
from __future__ import annotations

import ast
import weakref
from typing import Iterator

from helpers.migrate.bodies import out_of_view_bodies
from helpers.migrate.script import Script

_DEPTH = 3  # calls deep from the pmapped function
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_CACHE: weakref.WeakKeyDictionary[Script, dict[ast.AST, ast.AST]] = weakref.WeakKeyDictionary()
_BODIES: weakref.WeakKeyDictionary[Script, dict[ast.AST, tuple[str, ...]]] = weakref.WeakKeyDictionary()


def _defs(s: Script) -> dict[str, ast.AST]:
    """The script's functions by name, a name defined once only (two defs of one name: neither is followed)."""
    found: dict[str, list[ast.AST]] = {}
    for node in ast.walk(s.tree):
        if isinstance(node, _FUNCTIONS):
            found.setdefault(node.name, []).append(node)
    return {name: nodes[0] for name, nodes in found.items() if len(nodes) == 1}


def referenced(s: Script, function: ast.AST) -> Iterator[ast.AST]:
    """The script's functions a function's body names where it reads a name (calls it, or hands it on), not one
    of its own parameters nor a name it assigns."""
    defs = _defs(s)
    own = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    cls = s.parent.get(function)
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in defs \
                and node.id not in own and s.value(node) is node and defs[node.id] is not function:
            yield defs[node.id]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" \
                and isinstance(cls, ast.ClassDef) and node.attr in defs and defs[node.attr] is not function \
                and s.parent.get(defs[node.attr]) is cls:  # `self._loss_fn`: a method of the same class
            yield defs[node.attr]


def _reach_from(s: Script, tops: list[ast.AST]) -> dict[ast.AST, ast.AST]:
    """Each function the `tops` reach through their calls, a few deep (not the tops, nor what is nested in them),
    with the top it is reached from."""
    nested = {n for f in tops for n in ast.walk(f) if isinstance(n, _FUNCTIONS)}
    found: dict[ast.AST, ast.AST] = {}
    for top in tops:
        todo = [(top, 0)]
        while todo:
            function, depth = todo.pop()
            for callee in referenced(s, function):
                if callee in nested or callee in found or depth >= _DEPTH:
                    continue
                found[callee] = top
                todo.append((callee, depth + 1))
    return found


def pmapped_out_of_view(s: Script) -> dict[ast.AST, tuple[str, ...]]:
    """The per-device bodies a pmap this file does not show maps (`helpers.migrate.bodies`), with the axes their
    collectives name: functions no pmap of the file maps or reaches."""
    if s not in _BODIES:
        pmapped = list(dict.fromkeys(s.pmapped_functions()))
        _BODIES[s] = out_of_view_bodies(s, {*pmapped, *_reach_from(s, pmapped)})
    return _BODIES[s]


def pmapped_bodies(s: Script) -> list[ast.AST]:
    """The functions a pmap maps: handed to one in the file, or pmapped out of view."""
    return list(dict.fromkeys([*s.pmapped_functions(), *pmapped_out_of_view(s)]))


def run_under_pmap(s: Script) -> dict[ast.AST, ast.AST]:
    """Each function of the script that a pmapped function (or a body pmapped out of view) reaches through its calls
    (not the pmapped functions themselves, nor what is nested in them), with the pmapped function it is reached
    from."""
    if s not in _CACHE:
        _CACHE[s] = _reach_from(s, pmapped_bodies(s))
    return _CACHE[s]


def runs_under_pmap(s: Script, node: ast.AST) -> bool:
    """The node is in a pmapped function, or in a function such a function reaches through its calls."""
    under = set(run_under_pmap(s)) | set(pmapped_bodies(s))
    while node in s.parent:
        node = s.parent[node]
        if node in under:
            return True
    return False
