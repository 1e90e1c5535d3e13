"""The rule for pmap's collectives: a psum or pmean over pmap's axis is the gradient trap when it reduces gradients
(drop it: the gradient of the pmean'd loss is already global), a rename of its axis to the mesh's otherwise, and
both outcomes where the tool cannot tell (`helpers.migrate.gradients` decides). Old Flax's `common_utils.pmean`
and pmap's axis handed on to other code are read the same way.
"""
from __future__ import annotations

import ast
import re
from typing import Iterator

from helpers.migrate.across_hosts import in_pmap_over_hosts
from helpers.migrate.gradient_rules import updated_by_gradients
from helpers.migrate.gradients import Parts, whole
from helpers.migrate.bodies import collective_axes, pmap_era
from helpers.migrate.reach import pmapped_out_of_view, runs_under_pmap
from helpers.migrate.script import MESH_AXES, Script, argument, code_of, is_name, keyword, pmap_axis, strings

# rule -> (notebook, section heading without its number): where the course teaches the fix
LESSONS: dict[str, tuple[str, str]] = {"pmap-collective": ("06", "The gradient trap")}
COLLECTIVES = {"pmean", "psum", "pmax", "pmin", "all_gather", "all_to_all", "ppermute",
               "psum_scatter", "axis_index", "pswapaxes"}
FLAX_COLLECTIVES = ("flax.training.common_utils.pmean", "flax.training.common_utils.psum")


def pmap_collective(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    pmaps = {*s.pmaps(), *s.nnx_pmaps(), *s.wrappers}
    bodies = pmapped_out_of_view(s)
    s = _ParameterAxes(s)
    for call in s.calls:
        axes = set(collective_axes(s, call))
        body = next((f for f in _enclosing(s, call) if f in bodies), None)
        if body is not None and axes and not axes & s.pmap_axes and axes <= set(bodies[body]):
            unseen = _ParameterAxes(s.script, s.pmap_axes | axes)  # the collective names the unseen pmap's axis
            yield from ((node, rule, f"{does}; {_OUT_OF_VIEW}", instead)
                        for node, rule, does, instead in _collective(unseen, call, pmaps))
        else:
            yield from _collective(s, call, pmaps)


_OUT_OF_VIEW = ("this function runs under a pmap this file does not show (a framework's or another module's): its "
                "collectives name that pmap's axis")


def _enclosing(s: Script, node: ast.AST) -> Iterator[ast.AST]:
    while node in s.parent:
        node = s.parent[node]
        yield node


def _collective(s: Script, call: ast.Call, pmaps: set[ast.AST]) -> Iterator[tuple[ast.AST, str, str, str]]:
    """The finding of one call (a collective, or pmap's axis handed on), if any."""
    name = s.name(call.func)
    op = name.rsplit(".", 1)[-1]
    axis = _axis_keyword(s, call)
    if op == "value_and_grad" and (set(s.axis_names(axis)) & s.pmap_axes or _unresolved(s, axis) and pmap_era(s)):
        yield (axis, "pmap-collective",  # said where the axis is: the keyword the port drops
               f"{code_of(call.func)}(..., axis_name={code_of(axis)}) averages the gradients over pmap's axis "
               "itself (a pmean inside); under shard_map with check_vma the gradient of P() parameters is "
               "already summed over the devices, so a renamed axis here makes it N times too large",
               f"no axis_name: take the gradient of jax.lax.pmean(loss, {MESH_AXES}) (with a dynamic "
               "scale, keep its finiteness check global yourself)")
        return
    if set(s.axis_names(axis)) & s.pmap_axes and not (op in COLLECTIVES and is_name(name, f"jax.lax.{op}")) \
            and call not in pmaps and not in_pmap_over_hosts(s, call):
        yield _handed_axis(s, call, axis)
        return
    named = keyword(call, "pmap_axis_name")  # `pmap_axis_name=constants.PMAP_AXIS_NAME`, defined out of view
    if named is not None and not s.axis_names(named) and s.pmaps_here():
        yield _handed_axis(s, call, named)
        return
    handed = _handed_by_position(s, call, pmaps) if axis is None or not s.axis_names(axis) else None
    if handed is not None:
        yield _handed_axis(s, call, handed)
        return
    if axis is None and _gathers_metrics_by_default(s, call):
        yield (call, "pmap-collective",
               f"{code_of(call.func)}(...) of a CLU metrics collection all_gathers the metrics over the axis "
               f"'{_CLU_AXIS}' by default, pmap's axis here, which shard_map does not have",
               f"pass axis_name={MESH_AXES}: the mesh axes reach every device of every host")
        return
    flax = is_name(name, *FLAX_COLLECTIVES)
    if not flax and (op not in COLLECTIVES or not is_name(name, f"jax.lax.{op}")) or in_pmap_over_hosts(s, call):
        return
    axis = argument(call, 0 if op == "axis_index" else 1, "axis_name")
    if flax:  # old Flax's pmean(tree, axis_name='batch'): a psum over 'batch' divided by its size
        yield _flax_collective(s, call, op, axis)
        return
    unresolved = bool(pmaps) and _unresolved(s, axis)
    if not (set(s.axis_names(axis)) & s.pmap_axes or unresolved):
        return
    where = _HELD if unresolved else "pmap's axis"
    operand = code_of(call.args[0]) if call.args and op != "axis_index" else ""
    status = s.gradient_status(call.args[0]) if op in ("pmean", "psum") and call.args else "no"
    if op in ("pmean", "psum") and applied_as_gradients(s, call):
        status = "yes"
    named = status == "no" and op in ("pmean", "psum") and bool(call.args) and named_for_gradients(call.args[0])
    if unresolved and status == "no" and not named and _parameter_of_unused_function(s, axis):
        return  # no gradient, in code the script never runs: nothing says the axis is pmap's
    if status == "no" and op in ("pmean", "psum") and call.args and updated_by_gradients(s, call.args[0]):
        yield (call, "pmap-collective",
               f"{op}({operand}, {code_of(axis)}) averages the parameters each device updated with its own "
               f"gradients, over {where}: the gradient mean in another form (for plain SGD the same step), which "
               f"keeps the copies in step; {_TRAP}, and this {op} of copies that are then the same changes nothing",
               f"take the gradient of jax.lax.pmean(loss, {MESH_AXES}) before the update and drop this {op}; "
               "renaming the axis is not enough")
    elif status == "yes":
        together = isinstance(call.args[0], (ast.Tuple, ast.List)) or _some_not_gradients(s, call.args[0])
        # `pmean((loss, grads), 'batch')`, or of the (loss, grads) pair value_and_grad gave back
        yield (call, "pmap-collective",
               f"{op}({operand}, {code_of(axis)}) {'averages' if op == 'pmean' else 'adds'} the gradients "
               f"over {where}{_MEAN if op == 'psum' else ''}; {_TRAP}",
               f"take the gradient of jax.lax.pmean(loss, {MESH_AXES}) and "
               + (f"keep only what is not a gradient in this {op}" if together else f"drop this {op}")
               + "; renaming the axis is not enough")
    elif status == "unknown" or named:
        yield (call, "pmap-collective",
               f"{op}({operand}, {code_of(axis)}) names {where}, and {_NAMED_MAYBE if named else _MAYBE}",
               _EITHER)
    else:
        yield (call, "pmap-collective",
               f"{op}(..., {code_of(axis)}) names {where}, which shard_map does not have",
               f"name the mesh axes: jax.lax.{op}(..., {MESH_AXES}) reaches every device of "
               "every host")


_HELD = ("an axis held in a name the tool cannot resolve to a string (a parameter), in a script that pmaps: pmap's "
         "axis, unless shown otherwise")


def _unresolved(s: Script, axis: ast.AST | None) -> bool:
    """An axis name the tool cannot read as a string (`axis_name=pmap_axis_name`, a constructor's parameter): in a
    script that pmaps, taken for pmap's axis, so a reduction of gradients over it is never left unsaid."""
    return axis is not None and not isinstance(axis, ast.Constant) and not s.axis_names(axis) \
        and not any(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in ast.walk(axis))


def _parameter_of_unused_function(s: Script, axis: ast.AST) -> bool:
    """The axis is a parameter of the function the collective is in, and the script names that function nowhere
    (never calls it, never hands it on): its callers, if any, are out of view."""
    function = s.scope(axis)
    if not isinstance(axis, ast.Name) or not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) \
            or axis.id not in {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}:
        return False
    return not any(isinstance(n, ast.Name) and n.id == function.name or isinstance(n, ast.Attribute)
                   and n.attr == function.name for n in ast.walk(s.tree))


def _axis_variables(s: Script, pmaps: set[ast.AST]) -> set[str]:
    """The names pmap's axis is handed in when the tool cannot resolve them (`jax.pmap(f, axis_name=axis_name)` with
    `axis_name` a parameter)."""
    return {a.id for call in pmaps if isinstance(call, ast.Call)
            for a in [pmap_axis(call)]
            if isinstance(a, ast.Name) and not s.axis_names(a)}


def _handed_by_position(s: Script, call: ast.Call, pmaps: set[ast.AST]) -> ast.AST | None:
    """`fns.update(stats, observations, pmap_axis_name)`: the name pmap's axis is held in (unresolved), handed to
    code of a library the tool cannot read, by position or under a keyword; never a pmap, a collective (its own
    finding), nor a function of the script (its body is read)."""
    name = s.name(call.func) or ""
    short = name.rsplit(".", 1)[-1]
    if call in pmaps or short in s.defined or name.startswith("jax.") or in_pmap_over_hosts(s, call):
        return None
    s = getattr(s, "script", s)  # the names as written, no parameter's default read
    held = _axis_variables(s, pmaps)
    return next((a for a in [*call.args, *(k.value for k in call.keywords)]
                 if isinstance(a, ast.Name) and a.id in held and not s.axis_names(a)), None)


_MEAN = " (their mean, when the loss was divided by the device count)"
_TRAP = ("under shard_map with check_vma the gradient of P() parameters is already summed over the devices, so a "
         "renamed axis here makes it N times too large, silently")
_MAYBE = ("this may be a gradient (it comes from a call that was handed gradients or a gradient transform, and the "
          "tool cannot see what that call gives back): if it is, " + _TRAP)
_NAMED_MAYBE = ("its name says gradients, and the tool cannot see a gradient transform make it (a parameter, or "
                "the result of code it cannot follow): if it is one, " + _TRAP)
_GRADIENT_NAME = re.compile(r"(^|_)(d?grads?|gradients?)(_|$)", re.IGNORECASE)


def applied_as_gradients(s: Script, call: ast.Call) -> bool:
    """The collective's result is applied as gradients, whatever it was computed from: `apply_gradients(grads=
    pmean(g, 'i'))`, or the updates an optimizer is handed first (`tx.update(psum(g, 'i'), opt_state, params)`)."""
    holder = s.parent.get(call)
    if isinstance(holder, ast.keyword):
        return holder.arg in ("grads", "gradients", "grad")
    return isinstance(holder, ast.Call) and holder.args[:1] == [call] and len(holder.args) >= 2 \
        and isinstance(holder.func, ast.Attribute) and holder.func.attr == "update"


def named_for_gradients(expr: ast.AST) -> bool:
    """The reduced value is named like gradients (`grads`, `accumulated_grads`, `self.grads`, `(loss, grads)`):
    never told just to rename, whatever the taint analysis could trace."""
    if isinstance(expr, (ast.Tuple, ast.List)):
        return any(named_for_gradients(e) for e in expr.elts)
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    name = expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else ""
    return bool(_GRADIENT_NAME.search(name))


_EITHER = (f"if this is a gradient: drop it and take the gradient of jax.lax.pmean(loss, {MESH_AXES}); "
           f"otherwise rename the axis to {MESH_AXES}")


def _flax_collective(s: Script, call: ast.Call, op: str, axis: ast.AST | None) -> tuple[ast.AST, str, str, str]:
    """`common_utils.pmean(x)` of old Flax: jax.lax.pmean over pmap's axis ('batch' unless given); gone from Flax."""
    axis_code = code_of(axis) if axis is not None else "'batch'"
    said = (f"common_utils.{op}({code_of(call.args[0]) if call.args else ''}) of old Flax (gone from flax.training: "
            f"AttributeError) is jax.lax.{op} over pmap's axis {axis_code}")
    status = s.gradient_status(call.args[0]) if call.args else "no"
    return _by_gradient_status(
        call, status, said,
        trap=(f"here of the gradients; {_TRAP}", f"take the gradient of jax.lax.pmean(loss, {MESH_AXES}) and drop "
              f"this {op}; renaming the axis is not enough"),
        rename=(", which shard_map does not have",
                f"jax.lax.{op}(..., {MESH_AXES}) inside shard_map: it reaches every device of every host"))


def _by_gradient_status(node: ast.AST, status: str, said: str, *, trap: tuple[str, str],
                        rename: tuple[str, str], maybe: str = _MAYBE) -> tuple[ast.AST, str, str, str]:
    """A pmap-collective finding by what the collective reduces: gradients ('yes': the trap), maybe ('unknown':
    both outcomes, `maybe` saying why), or not ('no': a rename); `trap` is (what it does, after `said, `; what to
    write), `rename` (what follows `said`, with its own separator; what to write)."""
    if status == "yes":
        return node, "pmap-collective", f"{said}, {trap[0]}", trap[1]
    if status == "unknown":
        return node, "pmap-collective", f"{said}, and {maybe}", _EITHER
    return node, "pmap-collective", f"{said}{rename[0]}", rename[1]


def _axis_keyword(s: Script, call: ast.Call) -> ast.AST | None:
    """The value of a call's `axis_name=`, or of another keyword named for an axis name (`pmap_axis_name=`) that
    holds one of pmap's axes."""
    named = [k for k in call.keywords if k.arg and k.arg.endswith("axis_name")]
    return next((k.value for k in named if set(s.axis_names(k.value)) & s.pmap_axes), keyword(call, "axis_name"))


_STATUSES = ["no", "unknown", "yes"]
_CLU_AXIS = "batch"  # the axis_name clu.metrics' gather_from_model_output gathers over unless told


def _gathers_metrics_by_default(s: Script, call: ast.Call) -> bool:
    """`state.metrics.gather_from_model_output(loss=loss, ...)` (CLU's metrics: an all_gather over axis_name,
    'batch' unless given) in code a pmap over the axis 'batch' runs."""
    return isinstance(call.func, ast.Attribute) and call.func.attr == "gather_from_model_output" \
        and _CLU_AXIS in s.pmap_axes and runs_under_pmap(getattr(s, "script", s), call)


def _some_not_gradients(s: Script, expr: ast.AST) -> bool:
    """A pair some of whose items are not gradients (`loss_grads = jax.value_and_grad(f)(...)`: the loss first)."""
    status = s.gradients.status(expr)
    return isinstance(status, Parts) and "no" in (whole(status.first), whole(status.last))


class _ParameterAxes:
    """A script whose `axis_names` also reads an axis name a function takes as a parameter (`def loss_fn(params,
    batch, axis_name='i')`): its default, and what the script's calls of the function hand it (by position or
    keyword, also through `jax.value_and_grad(loss_fn)(params, batch, axis_name)`), followed through the callers'
    own parameters; every other attribute is the script's."""

    def __init__(self, s: Script, pmap_axes: set[str] | None = None):
        self._s = self.script = s
        self.pmap_axes = s.pmap_axes if pmap_axes is None else pmap_axes

    def __getattr__(self, name: str):
        return getattr(self._s, name)

    def axis_names(self, node: ast.AST | None, depth: int = 0) -> tuple[str, ...]:
        found = self._s.axis_names(node)
        if found or not isinstance(node, ast.Name) or depth > 4:
            return found
        function = self._s.scope(node)
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or self._s.value(node) is not node:
            return found
        positional = [*function.args.posonlyargs, *function.args.args]
        if node.id not in {a.arg for a in [*positional, *function.args.kwonlyargs]}:
            return found
        axes = list(_default(function, node.id))
        at = next((i for i, a in enumerate(positional) if a.arg == node.id), None)
        for call in self._s.calls:
            if _callee(self._s, call) != function.name:
                continue
            handed = [k.value for k in call.keywords if k.arg == node.id]
            if at is not None and at < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:at]):
                handed.append(call.args[at])
            axes += [a for h in handed for a in self.axis_names(h, depth + 1)]
        return tuple(dict.fromkeys(axes))


_TRANSFORMS = ("jax.grad", "jax.value_and_grad", "jax.jit", "jax.checkpoint", "jax.remat", "jax.vmap")


def _callee(s: Script, call: ast.Call) -> str | None:
    """The name of the script's function a call runs: `f(...)`, or `jax.value_and_grad(f)(...)`."""
    func = call.func
    if isinstance(func, ast.Call) and is_name(s.name(func.func), *_TRANSFORMS) and func.args:
        func = func.args[0]
    return func.id if isinstance(func, ast.Name) else None


def _default(function: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> tuple[str, ...]:
    """The axis names a parameter's default spells (`axis_name='i'`)."""
    positional = [*function.args.posonlyargs, *function.args.args]
    pairs = list(zip(positional[len(positional) - len(function.args.defaults):], function.args.defaults))
    pairs += [(a, d) for a, d in zip(function.args.kwonlyargs, function.args.kw_defaults) if d is not None]
    return next((strings(d) for a, d in pairs if a.arg == name), ())


def _handed_axis(s: Script, call: ast.Call, axis: ast.AST) -> tuple[ast.AST, str, str, str]:
    """pmap's axis name handed to code that runs collectives over it: `sync(grads, axis_name='batch')`,
    `jax.tree.map(partial(jax.lax.pmean, axis_name='batch'), grads)`, or a function named for gradients or an
    optimizer (`make_gradient_update(loss_fn, opt, pmap_axis_name=AXIS)`, `kfac.Optimizer(..., pmap_axis_name=AXIS)`),
    which may reduce the gradients it takes."""
    mapping = s.parent.get(call)
    handed = [*call.args, *(k.value for k in call.keywords if k.value is not axis)]
    if isinstance(mapping, ast.Call) and s.is_tree_map(mapping) and mapping.args[:1] == [call]:
        handed += mapping.args[1:]
    status = max((s.gradient_status(a) for a in handed), key=_STATUSES.index, default="no")
    held = next((k.arg for k in call.keywords if k.value is axis), None)
    spelled = f"{held}={code_of(axis)}" if held else code_of(axis)  # or handed by position
    callee = call.args[0] if is_name(s.name(call.func), "functools.partial") and call.args else call.func
    short = (s.name(callee) or code_of(callee)).rsplit(".", 1)[-1].lower()
    trains = status == "no" and not any(word in short for word in _GRADIENT_WORDS) and _trains(s, call, short)
    for_gradients = status == "no" and any(word in short for word in _GRADIENT_WORDS)
    said = f"{code_of(call.func)}(..., {spelled}) hands pmap's axis name to code that runs " \
           "collectives over it"
    return _by_gradient_status(
        axis, "unknown" if for_gradients or trains else status, said,
        trap=(f"on gradients; {_TRAP}", f"no collective here: take the gradient of jax.lax.pmean(loss, {MESH_AXES}); "
              "renaming the axis is not enough"),
        rename=(" (a key bound to each device, statistics synced), and shard_map has no such axis",
                (f"{held}={MESH_AXES}" if held else f"hand it {MESH_AXES}")
                + ": the mesh axes reach every device of every host"),
        maybe=_NAMED_FOR_GRADIENTS if for_gradients else _TRAINS if trains else _MAYBE)


def _trains(s: Script, call: ast.Call, short: str) -> bool:
    """Code that trains: a training step (`training_step`), or code handed a loss or an optimizer
    (`partial(step, loss_fn=..., optimizer=...)`, `make_update(loss_fn, opt, ...)`), which may reduce the gradients
    it takes."""
    handed = [*(k.arg or "" for k in call.keywords),
              *(code_of(a) for a in [*call.args, *(k.value for k in call.keywords)])]
    return any(word in short for word in ("step", "train")) \
        or any(re.search(r"loss|optim", word, re.IGNORECASE) for word in handed)


_GRADIENT_WORDS = ("grad", "optim", "kfac", "shampoo", "sgd", "adam")  # an optimizer reduces them
_TRAINS = ("this may be a gradient reduction: the code it is handed to trains (a training step, or code handed a loss "
           "or an optimizer), and the tool cannot see its body; if it reduces gradients over this axis, " + _TRAP)
_NAMED_FOR_GRADIENTS = ("the function is named for gradients (or for an optimizer, which reduces the gradients it "
                        "takes), so it may reduce gradients over this axis (the tool cannot see its body): if it does, "
                        f"{_TRAP}")


READS = set(FLAX_COLLECTIVES)
RULES = (pmap_collective,)
