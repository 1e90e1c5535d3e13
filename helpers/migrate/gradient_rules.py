"""The rule for a pmapped step that applies each device's own gradient: no pmean or psum of the gradients over pmap's
axis anywhere in the step, so every device steps with the gradient of its own rows. A port to jax.jit on the global
batch takes the gradient of the global loss, the mean over every device: the training changes.

Which values hold gradients is gradients.py's analysis (`Script.gradient_status`).
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.bindings import bound_value
from helpers.migrate.script import MESH_AXES, Script, code_of, keyword

# rule -> (notebook, section heading without its number): where the course teaches the fix
LESSONS: dict[str, tuple[str, str]] = {"unreduced-gradients": ("06", "The gradient trap")}
_APPLY = ("update", "apply_gradients", "apply_gradient")  # optax's and nnx's update, a TrainState's, flax.optim's
_REDUCE = ("pmean", "psum", "psum_scatter", "all_gather", "all_reduce")
_TRANSFORMS = ("grad", "value_and_grad")


def unreduced_gradients(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for function in _pmapped(s):
        reach = _reach(s, function)
        if _reduces_gradients(s, reach):
            continue
        for call in (n for f in reach for n in ast.walk(f) if isinstance(n, ast.Call)):
            how = _applies_own_gradient(s, call)
            if how:
                yield (call, "unreduced-gradients",
                       f"{code_of(call.func)}(...) {how}: nothing in the pmapped {_name(function)} reduces the "
                       "gradients over pmap's axis (no pmean or psum of them), so each device steps with the gradient "
                       "of its own rows only and the copies drift apart; after a port to jax.jit on the global batch "
                       "the gradient is the mean over every device of every host, so the training changes",
                       "choose what the port trains: data parallelism is the global mean (jax.jit on the global "
                       f"batch, or in shard_map the gradient of jax.lax.pmean(loss, {MESH_AXES})), a different run "
                       "from this one; to keep each device's own update on purpose, keep a state per device "
                       f"(stacked, P({MESH_AXES})) and no reduction")


def _name(function: ast.AST) -> str:
    return f"step {function.name}" if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) else "step"


def _pmapped(s: Script) -> list[ast.AST]:
    """The functions handed to jax.pmap or nnx.pmap, found in the script."""
    defs = {n.name: n for n in ast.walk(s.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found = list(dict.fromkeys(s.pmapped_functions()))
    found += [defs[t] for t in (s.pmap_target(c) for c in s.nnx_pmaps()) if t in defs and defs[t] not in found]
    return found


def _reach(s: Script, function: ast.AST) -> list[ast.AST]:
    """The function and the script's functions it calls, through their calls too."""
    reach, todo = [], [function]
    while todo:
        current = todo.pop()
        if current in reach:
            continue
        reach.append(current)
        todo += [f for call in ast.walk(current) if isinstance(call, ast.Call) for f in s.gradients.callees(call)]
        todo += [f for call in ast.walk(current) if isinstance(call, ast.Call) and _is_transform(s, call)
                 for f in s.gradients.callees(ast.Call(func=call.args[0], args=[], keywords=[]))
                 if isinstance(call.args[0], ast.Name)]  # the loss it differentiates
    return reach


def _is_transform(s: Script, call: ast.Call) -> bool:
    return s.name(call.func).rsplit(".", 1)[-1] in _TRANSFORMS and bool(call.args)


def _reduces_gradients(s: Script, reach: list[ast.AST]) -> bool:
    """Somewhere in the step: a collective of what is or may be a gradient (`pmean(grads)`, of a tuple holding them,
    old Flax's common_utils.pmean), a call handed pmap's axis name with them, a gradient transform with an axis_name,
    or any collective inside the loss it differentiates (the reduction may come through the loss)."""
    calls = [n for f in reach for n in ast.walk(f) if isinstance(n, ast.Call)]
    for call in calls:
        op = s.name(call.func).rsplit(".", 1)[-1]
        handed = [*call.args, *(k.value for k in call.keywords)]
        if op in _REDUCE and any(s.gradient_status(a) != "no" or updated_by_gradients(s, a) for a in handed):
            return True  # the gradients, or parameters each device updated with them (averaged: the same step)
        if keyword(call, "axis_name") is not None and (
                op in _TRANSFORMS or any(s.gradient_status(a) != "no" for a in handed)):
            return True
    losses = [f for call in calls if _is_transform(s, call) and isinstance(call.args[0], (ast.Name, ast.Lambda))
              for f in ([call.args[0]] if isinstance(call.args[0], ast.Lambda) else
                        s.gradients.callees(ast.Call(func=call.args[0], args=[], keywords=[])))]
    return any(isinstance(n, ast.Call) and s.name(n.func).rsplit(".", 1)[-1] in _REDUCE
               for f in losses for n in ast.walk(f))


def _applies_own_gradient(s: Script, call: ast.Call) -> str:
    """How a call applies gradients ('' if it does not): an optimizer's update or a state's apply_gradients handed
    them, a tree map that steps parameters by them (`p - lr * g`), or old flax.optim's `optimizer.optimize(loss_fn)`,
    which takes the gradient itself."""
    method = call.func.attr if isinstance(call.func, ast.Attribute) else ""
    handed = [*call.args, *(k.value for k in call.keywords)]
    if method in _APPLY and any(s.gradient_status(a) == "yes" for a in handed):
        return "applies this device's own gradients"
    if method == "optimize" and call.args and isinstance(call.args[0], (ast.Name, ast.Lambda)) \
            and (isinstance(call.args[0], ast.Lambda) or s.gradients.callees(
                ast.Call(func=call.args[0], args=[], keywords=[]))):
        return "of old flax.optim takes this device's own gradient of the loss and applies it"
    if _steps_by_gradients(s, call):
        return "steps the parameters by this device's own gradients"
    return ""


def _steps_by_gradients(s: Script, call: ast.Call) -> bool:
    """`jax.tree.map(lambda p, g: p - lr * g, params, grads)`: parameters stepped by gradients, by hand."""
    return s.is_tree_map(call) and bool(call.args) and isinstance(call.args[0], ast.Lambda) \
        and isinstance(call.args[0].body, ast.BinOp) and isinstance(call.args[0].body.op, ast.Sub) \
        and any(s.gradient_status(a) == "yes" for a in call.args[1:])


_UPDATES = ("apply_updates", "apply_gradients", "apply_gradient")  # optax's, a TrainState's, flax.optim's


def updated_by_gradients(s: Script, expr: ast.AST, depth: int = 0) -> bool:
    """Parameters a step updated with what may be gradients (`new_params = optax.apply_updates(params, updates)` of
    `updates, _ = tx.update(grads, ...)`, a state's `apply_gradients(grads=grads)`, `p - lr * g` in a tree map),
    through names: averaging them over the devices stands in for averaging the gradients (LABELLING.md rule 19)."""
    value = bound_value(s, expr) if isinstance(expr, (ast.Name, ast.Attribute)) and depth < 4 else expr
    if isinstance(value, (ast.Name, ast.Attribute)) and value is not expr:
        return updated_by_gradients(s, value, depth + 1)
    if not isinstance(value, ast.Call):
        return False
    if s.name(value.func).rsplit(".", 1)[-1] in _UPDATES:
        return any(s.gradient_status(a) != "no" for a in [*value.args, *(k.value for k in value.keywords)])
    return _steps_by_gradients(s, value)


RULES = (unreduced_gradients,)
