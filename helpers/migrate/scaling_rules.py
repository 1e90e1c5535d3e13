"""The rule for a pmean in disguise: a loss divided by `jax.device_count()` whose gradients a pmapped step then psums
over pmap's axis (the sum of N gradients, each of a loss N times too small, is their mean). After the port the
gradient of the global batch's mean loss is already global: the division goes with the psum, or the gradients come
out N times too small.
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.bodies import collective_axes
from helpers.migrate.reach import pmapped_bodies, pmapped_out_of_view, run_under_pmap
from helpers.migrate.script import MESH_AXES, Script, code_of, is_name

# rule -> (notebook, section heading without its number): where the course teaches the fix
LESSONS: dict[str, tuple[str, str]] = {"loss-over-device-count": ("06", "The gradient trap")}
_TRANSFORMS = ("grad", "value_and_grad")


def loss_over_device_count(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    under = {*pmapped_bodies(s), *run_under_pmap(s)}
    axes = s.pmap_axes | {a for found in pmapped_out_of_view(s).values() for a in found}
    summed = {f for f in under if _psums_gradients(s, f, axes)}
    if not summed:
        return
    losses = {loss: f for f in summed for loss in _differentiated(s, f)}
    for node in ast.walk(s.tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _device_count(s, node.right)):
            continue
        step = next((losses[f] for f in _enclosing(s, node) if f in losses), None)
        if step is None:
            continue
        yield (node, "loss-over-device-count",
               f"{code_of(node)} divides the loss by jax.device_count() so that the psum of its gradients over "
               f"pmap's axis in {step.name} is their mean (a pmean in disguise); after the port the gradient of the "
               "global batch's mean loss is already global, and this division would make it N times too small",
               f"drop the division with the psum: take the gradient of jax.lax.pmean(loss, {MESH_AXES}) (the mean "
               "loss of the global batch), and no collective of the gradients")


def _device_count(s: Script, node: ast.AST) -> bool:
    """`jax.device_count()`, or a name bound to it (`n_devices = jax.device_count()`)."""
    node = s.value(node) if isinstance(node, ast.Name) else node
    return isinstance(node, ast.Call) and is_name(s.name(node.func), "jax.device_count")


def _enclosing(s: Script, node: ast.AST) -> Iterator[ast.AST]:
    while node in s.parent:
        node = s.parent[node]
        yield node


def _psums_gradients(s: Script, function: ast.AST, axes: set[str]) -> bool:
    """The function psums (jax.lax.psum, jaxline's tree_psum) what is or may be a gradient over one of `axes`."""
    for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
        op = s.name(call.func).rsplit(".", 1)[-1]
        if op in ("psum", "tree_psum") and call.args and set(collective_axes(s, call)) & axes \
                and s.gradient_status(call.args[0]) != "no":
            return True
    return False


def _differentiated(s: Script, function: ast.AST) -> list[ast.AST]:
    """The functions a gradient transform in `function` differentiates: `jax.grad(loss_fn)`, of `partial(f, ...)`,
    of `self._loss_fn` (a method of its class), of a lambda, of a name bound to a partial; also through a name bound to
    the transform."""
    defs = {n.name: n for n in ast.walk(s.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found = []
    for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
        if s.name(call.func).rsplit(".", 1)[-1] not in _TRANSFORMS or not call.args:
            continue
        target = call.args[0]
        if isinstance(target, ast.Name) and target.id not in defs and isinstance(s.value(target), ast.Call):
            target = s.value(target)  # `loss_fn = partial(_loss, apply)`, then jax.grad(loss_fn)
        if isinstance(target, ast.Call) and s.name(target.func).rsplit(".", 1)[-1] == "partial" and target.args:
            target = target.args[0]
        if isinstance(target, ast.Lambda):
            found.append(target)
        elif isinstance(target, ast.Name) and target.id in defs:
            found.append(defs[target.id])
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self" \
                and target.attr in defs:
            found.append(defs[target.attr])
    return found


RULES = (loss_over_device_count,)
