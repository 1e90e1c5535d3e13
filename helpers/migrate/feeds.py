"""What a script hands its pmapped functions: the calls of each, and their arguments (pmap's stacks come in here)."""
from __future__ import annotations

import ast

from helpers.migrate.script import Script


def pmapped_calls(s: Script) -> list[ast.Call]:
    """Calls of a pmapped function: `p_step(...)`, or `self.p_step(...)` where the script binds `self.p_step =
    jax.pmap(...)`; not of a function that hands a pmapped call's output back (Script.pmapped_call_test's too):
    what that one is handed is not fed to pmap as it is."""
    names = s.pmapped_names()
    pmaps = {*s.pmaps(), *s.nnx_pmaps()}
    attributes = {t.attr for node in ast.walk(s.tree) if isinstance(node, ast.Assign) and node.value in pmaps
                  for t in node.targets if isinstance(t, ast.Attribute)}
    return [c for c in s.calls if isinstance(c.func, ast.Name) and c.func.id in names
            or isinstance(c.func, ast.Attribute) and c.func.attr in attributes]


def fed_to_pmap(s: Script) -> list[ast.AST]:
    """The arguments of every call of a pmapped function."""
    return [a for c in pmapped_calls(s) for a in [*c.args, *(k.value for k in c.keywords)]]
