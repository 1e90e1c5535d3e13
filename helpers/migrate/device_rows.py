"""Which outputs of a pmapped step are per-device rows and which are copies, read off the step's body: an output that
no collective reduced, named as a per-example value (`logits`, `samples`), holds each device's own rows, so its
`[0]` is device 0's rows (a batch read), not the value every device holds (an unreplicate)."""
from __future__ import annotations

import ast
import re

from helpers.migrate.script import Script

_ROW_WORDS = re.compile(r"(^|_)(logits|preds?|predictions?|samples|images|labels|targets|tokens|embeddings|features"
                        r"|probs|energies|rewards|sequences|latents|activations|reconstructions?)(_|$)")
_COLLECTIVES = ("pmean", "psum", "pmax", "pmin", "all_gather", "all_to_all", "ppermute")


def holds_rows(s: Script, name: ast.Name) -> bool:
    """A host name bound from a pmapped step's output (`..., logits, labels = p_update(...)`) at a position where
    the step returns per-example values that no collective reduced."""
    if not _ROW_WORDS.search(name.id):
        return False
    binding = _binding(s, name)
    if binding is None:
        return False
    target, call = binding
    step = _step_def(s, call)
    if step is None:
        return False
    returned = [r.value for r in ast.walk(step) if isinstance(r, ast.Return) and r.value is not None]
    if len(returned) != 1:
        return False
    position = _position(target, name.id)
    values = returned[0].elts if isinstance(returned[0], ast.Tuple) else [returned[0]]
    if position is None or position >= len(values) or len(values) != _width(target):
        return False
    value = values[position]
    return isinstance(value, ast.Name) and _ROW_WORDS.search(value.id) is not None \
        and not _reduced(s, step, value.id, returned[0].lineno)


def _binding(s: Script, name: ast.Name) -> tuple[ast.AST, ast.Call] | None:
    """The assignment target and pmapped call a host name was last bound by, in its own function."""
    scope = s.scope(name)
    test = s.pmapped_call_test()
    found = None
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and s.scope(node) is scope and node.lineno <= name.lineno and test(node.value) \
                and any(isinstance(n, ast.Name) and n.id == name.id for t in node.targets for n in ast.walk(t)):
            if found is None or node.lineno > found[1].lineno:
                found = (node.targets[0], node.value)
    return found


def _step_def(s: Script, call: ast.Call) -> ast.FunctionDef | None:
    """The def a pmapped call runs: `p_step(...)` with `p_step = jax.pmap(step)`, `self._update(...)` with
    `self._update = jax.pmap(self._update)`, or a def pmap decorates."""
    func = call.func
    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    steps = list(s.pmapped_functions())
    for step in steps:
        if step.name == called:
            return step
    for node in ast.walk(s.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.value in set(s.pmaps()) and any(
                (t.id if isinstance(t, ast.Name) else getattr(t, "attr", None)) == called for t in node.targets):
            mapped = node.value.args[0] if node.value.args else None
            mapped_name = mapped.id if isinstance(mapped, ast.Name) else getattr(mapped, "attr", None)
            return next((f for f in steps if f.name == mapped_name), None)
    return None


def _position(target: ast.AST, name: str) -> int | None:
    elements = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
    return next((i for i, e in enumerate(elements) if isinstance(e, ast.Name) and e.id == name), None)


def _width(target: ast.AST) -> int:
    return len(target.elts) if isinstance(target, (ast.Tuple, ast.List)) else 1


def _reduced(s: Script, step: ast.FunctionDef, name: str, before: int, depth: int = 0) -> bool:
    """A name of the step that, before line `before`, a collective made or that was computed from one (followed
    three names back; a parameter of the step is no collective's)."""
    if depth > 3:
        return True  # too far to tell: not said to be rows
    bindings = [n for n in ast.walk(step) if isinstance(n, ast.Assign) and n.lineno < before
                and any(isinstance(m, ast.Name) and m.id == name for t in n.targets for m in ast.walk(t))]
    for node in [max(bindings, key=lambda n: n.lineno)] if bindings else []:
        for read in ast.walk(node.value):
            if isinstance(read, ast.Call) and s.name(read.func).rsplit(".", 1)[-1] in _COLLECTIVES:
                return True
            if isinstance(read, ast.Name) and read.id != name \
                    and _reduced(s, step, read.id, node.lineno, depth + 1):
                return True
    return False
