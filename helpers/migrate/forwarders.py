"""Functions of a script that hand a pmapped call's output back to their caller (`def train_step(self, state, batch):
new_state, loss = self.p_step(state, batch); return new_state, loss`): a call of one returns pmap's per-device
stacks as the pmapped function does."""
from __future__ import annotations

import ast
from typing import Callable


def forwarders(tree: ast.AST, pmapped_call: Callable[[ast.AST], bool]) -> set[str]:
    """The names of the functions that return a pmapped call's output as it is, or a name bound to one (in a
    returned tuple too), not a value made from it (`unreplicate(state)`, `float(loss)`)."""
    names = set()
    for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        outputs = {n.id for node in ast.walk(function) if isinstance(node, ast.Assign) and pmapped_call(node.value)
                   for target in node.targets for n in ast.walk(target) if isinstance(n, ast.Name)}
        for returned in (n.value for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None):
            items = returned.elts if isinstance(returned, ast.Tuple) else [returned]
            if any(pmapped_call(i) or isinstance(i, ast.Name) and i.id in outputs for i in items):
                names.add(function.name)
    return names
