"""pmap and its collectives under a library's or a project's own names, spelled out before the rules read a script:
equinox's `eqx.filter_pmap` (jax.pmap's keywords), objax's `Parallel` and `functional.parallel.pmean`, a name bound to
`functools.partial(jax.pmap, axis_name=AXIS)` (or to `jax.pmap`), to a partial of a collective (`jax.lax.pmean`, or a
wrapper named after one: `pmean_if_pmap`) with its axis, and a project module's string constants (`PMAP_AXIS_NAME`).
They may live in the script or in a module of its project (`constants.pmap(f)`, ferminet's style). Each call of such
a name is read as the call it stands for (`constants.pmap(f)` as `jax.pmap(f, axis_name='qmc')`), at its own line."""
from __future__ import annotations

import ast
import copy
from typing import Iterator

from helpers.migrate.script import Names, is_name

_COLLECTIVES = ("pmean", "psum", "pmax", "pmin", "all_gather", "ppermute", "psum_scatter", "all_to_all")
_LIBRARY_PMAPS = ("equinox.filter_pmap",)  # a library's pmap, jax.pmap's keywords (axis_name, devices, in_axes)
LIBRARY_ROOTS = ("jax", "jaxlib", "flax", "haiku", "equinox", "optax", "numpy", "functools", "chex", "kfac_jax",
                  "tensorflow", "torch")


def _constants(tree: ast.AST) -> dict[str, str]:
    """Module-level names bound to a string (`PMAP_AXIS_NAME = 'qmc_pmap_axis'`)."""
    return {t.id: node.value.value for node in getattr(tree, "body", []) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for t in node.targets if isinstance(t, ast.Name)}


def _stands_for(value: ast.AST, names: Names, constants: dict[str, str]) -> ast.AST | None:
    """What a module-level binding spells out to (`functools.partial(jax.pmap, axis_name='qmc')`, `jax.pmap`,
    `functools.partial(jax.lax.pmean, axis_name='qmc')`), or None if it is not pmap nor a collective with its axis."""
    if isinstance(value, (ast.Name, ast.Attribute)) and is_name(names.of(value), "jax.pmap"):
        return ast.parse("jax.pmap", mode="eval").body
    if not (isinstance(value, ast.Call) and is_name(names.of(value.func), "functools.partial") and value.args):
        return None
    target = names.of(value.args[0])
    keywords = [ast.keyword(k.arg, ast.Constant(constants[k.value.id]) if isinstance(k.value, ast.Name)
                            and k.value.id in constants else copy.deepcopy(k.value)) for k in value.keywords if k.arg]
    if is_name(target, "jax.pmap"):
        func = "jax.pmap"
    else:
        short = target.rsplit(".", 1)[-1]
        collective = next((c for c in _COLLECTIVES if short == c or short.startswith(c + "_")), None)
        if collective is None or not any(k.arg == "axis_name" for k in keywords):
            return None
        func = f"jax.lax.{collective}"
    return ast.Call(ast.parse("functools.partial", mode="eval").body,
                    [ast.parse(func, mode="eval").body], keywords)


def _bindings(tree: ast.AST, names: Names, constants: dict[str, str]) -> Iterator[tuple[ast.Assign, str, ast.AST]]:
    """(the assignment, the name, what it spells out) for each module-level alias of pmap or of a collective."""
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.Assign) and (spelled := _stands_for(node.value, names, constants)) is not None:
            yield from ((node, t.id, spelled) for t in node.targets if isinstance(t, ast.Name))


def definitions(tree: ast.AST) -> dict[str, str]:
    """A module's own aliases (name -> the code it stands for) and string constants (name -> repr of the string):
    what a module of the project tells the script that imports it."""
    names, constants = Names(tree), _constants(tree)
    return {name: repr(value) for name, value in constants.items()} | {
        name: ast.unparse(spelled) for _, name, spelled in _bindings(tree, names, constants)}


class _Expand(ast.NodeTransformer):
    def __init__(self, own: dict[str, ast.AST], imported: dict[str, ast.AST], names: Names, kept: set[int]):
        self.own, self.imported, self.names, self.kept = own, imported, names, kept
        self.made: set[int] = set()  # the nodes this expansion put in

    def _meant(self, node: ast.AST) -> ast.AST | None:
        """What a reference stands for: a library's pmap (`eqx.filter_pmap`), a name of the script's own,
        `module.name` of a project module, or a name imported from one."""
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load) \
                and is_name(self.names.of(node), *_LIBRARY_PMAPS):
            return ast.parse("jax.pmap", mode="eval").body
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in self.own:
                return self.own[node.id]
            origin = self.names.alias.get(node.id, "")
            if origin and origin.split(".")[0] not in LIBRARY_ROOTS and node.id in self.imported:
                return self.imported[node.id]
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name) \
                and node.attr in self.imported:
            module = self.names.alias.get(node.value.id)
            if module is not None and module.split(".")[0] not in LIBRARY_ROOTS:
                return self.imported[node.attr]
        return None

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        return node if id(node) in self.kept else self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        spelled = _objax(node, self.names)
        if spelled is not None:
            return spelled
        meant = node.func if id(node.func) in self.made else None
        if not (isinstance(meant, ast.Call) and _is_partial(meant, self.names)):
            return node  # not an alias, or a plain one (`pmap = jax.pmap`) already spelled out
        merged = ast.Call(meant.args[0], node.args, [*meant.keywords, *node.keywords])
        return ast.copy_location(merged, node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        meant = self._meant(node)
        return node if meant is None else self._replaced(node, meant)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        meant = self._meant(node)
        return self.generic_visit(node) if meant is None else self._replaced(node, meant)

    def _replaced(self, node: ast.AST, meant: ast.AST) -> ast.AST:
        made = _located(copy.deepcopy(meant), node)
        self.made.add(id(made))
        return made


def _objax(call: ast.Call, names: Names) -> ast.AST | None:
    """objax's pmap and collectives as JAX's: `objax.Parallel(f, vc, axis_name='device')` is jax.pmap of f over its
    axis ('device' unless told), `objax.functional.parallel.pmean(x)` jax.lax.pmean over the same default axis."""
    name = names.of(call.func)
    if not name.startswith("objax.") or not call.args:
        return None
    axis = next((k.value for k in call.keywords if k.arg == "axis_name"), ast.Constant("device"))
    short = name.rsplit(".", 1)[-1]
    if name == "objax.Parallel":
        made = ast.Call(ast.parse("jax.pmap", mode="eval").body, [call.args[0]], [ast.keyword("axis_name", axis)])
        made.splits_its_inputs = True  # Parallel splits the host's rows itself: its arguments are no stacks
    elif name.startswith("objax.functional.parallel.") and short in _COLLECTIVES:
        made = ast.Call(ast.parse(f"jax.lax.{short}", mode="eval").body, [call.args[0]],
                        [ast.keyword("axis_name", axis)])
    else:
        return None
    return _located(made, call)


def _is_partial(call: ast.Call, names: Names) -> bool:
    return is_name(names.of(call.func), "functools.partial") or (
        isinstance(call.func, ast.Attribute) and call.func.attr == "partial")


def _located(node: ast.AST, at: ast.AST) -> ast.AST:
    for inner in ast.walk(node):
        ast.copy_location(inner, at)
    return node


def _flatten_partials(tree: ast.AST, names: Names) -> ast.AST:
    """`partial(partial(jax.pmap, axis_name=a), donate_argnums=1)` as one partial with both keywords."""
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        if _is_partial(call, names) and call.args and isinstance(call.args[0], ast.Call) \
                and _is_partial(call.args[0], names) and call.args[0].args:
            inner = call.args[0]
            call.keywords = [*inner.keywords, *call.keywords]
            call.args = [inner.args[0], *inner.args[1:], *call.args[1:]]
    return tree


def expand(tree: ast.AST, imported: dict[str, str] | None = None) -> ast.AST:
    """The script's tree with its (and its project's) aliases of pmap and of collectives spelled out; the tree as it
    was when it has none. The aliases' own definitions are left as they are."""
    names = Names(tree)
    bound = list(_bindings(tree, names, _constants(tree)))
    own, kept = {name: spelled for _, name, spelled in bound}, {id(node) for node, _, _ in bound}
    parsed = {name: ast.parse(code, mode="eval").body for name, code in (imported or {}).items()}
    libraries = {p.split(".")[0] for p in _LIBRARY_PMAPS} | {"objax"}
    if not own and not parsed and not any(value.split(".")[0] in libraries for value in names.alias.values()):
        return tree
    tree = _Expand(own, parsed, names, kept).visit(tree)
    return ast.fix_missing_locations(_flatten_partials(tree, names))
