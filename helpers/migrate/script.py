"""The learner's script as the rules read it: what each imported name stands for, and the parsed tree. Nothing here
imports or runs the script: `ast` only."""
from __future__ import annotations

import ast
from typing import Callable, Iterator

from helpers.migrate.folder import Folder
from helpers.migrate.forwarders import forwarders
from helpers.migrate.gradients import Gradients, whole
from helpers.migrate.once import once

MESH_MAKERS = {"jax.make_mesh", "jax.sharding.Mesh", "jax.Mesh"}
SPEC_MAKERS = {"jax.sharding.PartitionSpec", "jax.P"}
MESH_AXES = "('host', 'device')"  # how the course names a data-parallel mesh's axes


class Names:
    """What each imported name stands for: `jnp` -> `jax.numpy`, `pmap` -> `jax.pmap`, from the imports of
    one or more trees (a notebook cell and the cells before it)."""

    def __init__(self, *trees: ast.AST):
        self.alias: dict[str, str] = {}
        for node in (n for tree in trees for n in ast.walk(tree)):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.alias[a.asname or a.name] = f"{node.module}.{a.name}"
        stars = any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
                    for tree in trees for n in ast.walk(tree))
        if stars and "partial" not in self.alias:  # `from .utils import *` of a module that imports functools' partial
            self.alias["partial"] = "functools.partial"
        for node in (n for tree in trees for n in getattr(tree, "body", ())):  # `replicate = jax_utils.replicate`
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and isinstance(node.value, ast.Attribute) and root_name(node.value) in self.alias:
                self.alias[node.targets[0].id] = self.of(node.value) or node.targets[0].id

    def of(self, node: ast.AST) -> str:
        """The dotted name an expression stands for ('' if it is not a name)."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return ""
        head = self.alias.get(node.id, node.id)
        return ".".join([head, *reversed(parts)])


def is_name(name: str, *suffixes: str) -> bool:
    return any(name == s or name.endswith("." + s) for s in suffixes)


def code_of(node: ast.AST) -> str:
    return ast.unparse(node)


def strings(node: ast.AST | None) -> tuple[str, ...]:
    """The axis names a string or a tuple of strings spells."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(s for e in node.elts for s in strings(e))
    return ()


def keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def argument(call: ast.Call, position: int, name: str) -> ast.AST | None:
    return call.args[position] if len(call.args) > position else keyword(call, name)


def device_grid(s: Script, call: ast.AST) -> bool:
    """`np.asarray(jax.devices()).reshape(...)`: the devices laid out by hand for a mesh, not rows stacked."""
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "reshape" and any(
        isinstance(n, ast.Call) and is_name(s.name(n.func), "jax.devices", "jax.local_devices")
        for n in ast.walk(call.func.value))


def root_name(node: ast.AST) -> str | None:
    """The name an expression starts from: `state` for `state.params`."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def pmap_axis(call: ast.Call) -> ast.AST | None:
    """The axis_name of `jax.pmap(f, "batch")` or `jax.pmap(f, axis_name=...)`, as written."""
    return keyword(call, "axis_name") or (call.args[1] if len(call.args) > 1 and is_name_call(call) else None)


def is_name_call(call: ast.Call) -> bool:
    """A call whose first argument is the function (`pmap(f, ...)`), not `partial(pmap, ...)`."""
    return not (isinstance(call.func, (ast.Name, ast.Attribute)) and code_of(call.func).endswith("partial"))


def _assignments(tree: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """(name, the expression assigned to it): `a = f()`, and `a, b = f(), g()` item by item."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name):
                yield target.id, node.value
            elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                    and len(target.elts) == len(node.value.elts):
                yield from ((t.id, v) for t, v in zip(target.elts, node.value.elts) if isinstance(t, ast.Name))


def own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of the functions, lambdas and classes defined in it."""
    todo = list(function.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo += ast.iter_child_nodes(node)


def first_copy(node: ast.AST, names: set[str]) -> bool:
    """Device 0's copy of one of `names`, taken by hand: `x[0]`, `x.addressable_shards[0]`, `np.asarray(x)[0]`, also
    of a field or entry of one (`state.step[0]`, `metrics['loss'][0]`)."""
    return first_copy_of(node, lambda held: isinstance(held, ast.Name) and held.id in names)


def first_copy_of(node: ast.AST, stacked: Callable[[ast.AST], bool], last: bool = False) -> bool:
    """Device 0's copy (with `last`, or the last's) of what `stacked` tells is a per-device stack, or of its field."""
    if last and isinstance(node, ast.Subscript) and code_of(node.slice) == "-1":
        node = ast.Subscript(value=node.value, slice=ast.Constant(0))
    if not (isinstance(node, ast.Subscript) and (_zero(node.slice) or isinstance(node.slice, ast.Slice) and _zero(
            node.slice.lower, True) and isinstance(node.slice.upper, ast.Constant) and node.slice.upper.value == 1
            and node.slice.step is None)):  # `x[0]`, or `x[:1]`: device 0's copy, its leading axis kept
        return False
    held = node.value
    if isinstance(held, ast.Attribute) and held.attr in ("shape", "strides"):  # `x.shape[0]`: a size, no copy
        return False
    if isinstance(held, ast.Attribute) and held.attr == "addressable_shards":
        held = held.value
    elif isinstance(held, ast.Call) and isinstance(held.func, ast.Attribute) and held.func.attr in ("asarray", "array") \
            and len(held.args) == 1:
        held = held.args[0]
    while isinstance(held, ast.Attribute) or (isinstance(held, ast.Subscript) and isinstance(held.slice, ast.Constant)
                                              and isinstance(held.slice.value, str)):
        held = held.value
    return stacked(held)


def _zero(node: ast.AST | None, or_none: bool = False) -> bool:
    return (or_none and node is None) or isinstance(node, ast.Constant) and node.value == 0


def _returned_expressions(function: ast.AST) -> list[ast.AST]:
    """What a function returns, and the values its own body assigns to names it returns as they are (`x = f();
    return x`), nested functions left out: a helper whose result is the copy, not a long function that makes one."""
    if isinstance(function, ast.Lambda):
        return [function.body]
    returns, assigned, todo = [], {}, list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Return) and node.value is not None:
            returns.append(node.value)
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for name in (n for n in ast.walk(target) if isinstance(n, ast.Name)):
                    assigned.setdefault(name.id, []).append(node.value)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo += ast.iter_child_nodes(node)
    as_is = [n for r in returns for n in (r.elts if isinstance(r, ast.Tuple) else [r]) if isinstance(n, ast.Name)]
    through = [v for n in as_is for v in assigned.get(n.id, [])]  # not `return unreplicate(x)` of `x = replicate(v)`
    return returns + through


_LIBRARIES = ("jax.", "flax.", "haiku.", "equinox.", "optax.", "numpy.", "functools.", "self.")  # not a project's
# helpers that published pmap-era projects keep in files of their own (jaxline's utils, acme's, kfac's), by name
KNOWN_COPIES = {"get_first": "unreplicate", "bcast_local_devices": "replicate",
                "replicate_all_local_devices": "replicate", "replicate_on_devices": "replicate",
                "get_from_first_device": "unreplicate"}


class Script:
    """One parsed script (or notebook cell) and what the rules need to know about it; `earlier` are the
    notebook's cells before it, whose imports it uses; `folder` what the other files of its folder tell."""

    def __init__(self, tree: ast.AST, earlier: tuple[ast.AST, ...] = (), folder: Folder = Folder()):
        self.tree = tree
        self.names = Names(*earlier, tree)
        self.calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        self.assigned = dict(_assignments(tree))
        self.parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        self._scoped: dict[tuple[ast.AST, str], list[tuple[tuple[int, int], ast.AST]]] = {}
        for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Assign)),
                           key=lambda n: (n.lineno, n.col_offset)):
            for name, value in _assignments(node):
                self._scoped.setdefault((self.scope(node), name), []).append(((node.lineno, node.col_offset), value))
        self._bare_pmaps = [ast.copy_location(ast.Call(func=d, args=[], keywords=[]), d)
                            for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for d in f.decorator_list
                            if isinstance(d, (ast.Name, ast.Attribute)) and self._names_pmap(d)]
        self.folder = folder
        self.defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.wrappers = [call for call in self.calls if self._wraps_pmap(call)]
        self.pmap_axes = {axis for call in [*self.pmaps(), *self.nnx_pmaps(), *self.wrappers]
                          for axis in self.axis_names(pmap_axis(call))} | folder.pmap_axes
        self.mesh_axes = self._mesh_axes()
        self.gradients = Gradients(self, folder.handed)
        self._own_copies = self.copies()

    def name(self, node: ast.AST) -> str:
        return self.names.of(node)

    def _names_pmap(self, node: ast.AST) -> bool:
        """`jax.pmap`, or a project's `constants.pmap` (a partial of it, most often), read or not."""
        name = self.name(node)
        return is_name(name, "jax.pmap") or "." in name and name.endswith(".pmap") and not name.startswith(_LIBRARIES)

    def copies(self, saves: bool = True) -> dict[str, str]:
        """The script's own functions that make or undo pmap's stack of copies: name -> 'replicate' (copy one
        value to every local device) or 'unreplicate' (take copy [0] of each leaf); with `saves`, also a save that
        takes copy [0] (said where the script calls it; a project module's save is said as a save)."""
        found = {}
        for name, function in self._functions():
            kind = self._copies_in(function, saves)
            if kind:
                found[name] = kind
        return found

    def _functions(self) -> Iterator[tuple[str, ast.AST]]:
        """(name, function) for each def of the script and each name it binds to a lambda (`unpmap = lambda v: ...`)."""
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield node.name, node
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
                yield from ((t.id, node.value) for t in node.targets if isinstance(t, ast.Name))

    def _copies_in(self, function: ast.AST, saves: bool) -> str | None:
        """'unreplicate' for a body that takes device 0's copy of a parameter (`tree_map(lambda x: x[0], xs)`,
        `x.addressable_shards[0]` in such a lambda, `device_get(x[0])`) and returns it, or, named for saves, anywhere
        in its body; 'replicate' for one that stacks copies
        (`device_put_sharded(len(devices) * [x], devices)`, `device_put_replicated`, `jax_utils.replicate`, a repeat
        or broadcast_to over the local device count, `jnp.stack([x] * len(devices))`); None for anything else."""
        returned = _returned_expressions(function)
        for node in (n for r in returned for n in ast.walk(r)):
            if isinstance(node, ast.Call) and self.stacks_copies(node):
                return "replicate"
        def first(node: ast.AST, params: set[str]) -> bool:  # device 0's copy of a parameter
            return any(first_copy(n, params) for n in ast.walk(node))

        own = {a.arg for a in function.args.args}
        saves = saves and any(w in getattr(function, "name", "").lower() for w in ("save", "checkpoint", "ckpt"))
        for node in (n for r in (function.body if saves else returned) for n in ast.walk(r)):  # a save reads it
            if isinstance(node, ast.Call) and self.is_tree_map(node) and node.args \
                    and isinstance(node.args[0], ast.Lambda) \
                    and first(node.args[0].body, {a.arg for a in node.args[0].args.args}):
                return "unreplicate"  # jax.tree.map(lambda x: x[0], tree)
            if isinstance(node, ast.Call) and is_name(self.name(node.func), "jax.device_get") and first(node, own):
                return "unreplicate"  # jax.device_get(x[0])
        return None

    def copy_zero_by_hand(self, expr: ast.AST) -> bool:
        """An expression that is device 0's copy of pmap's stacks, taken by hand or by a project's helper:
        `tree_map(lambda x: x[0], state)`, `loss[0]` of a pmap output, a helper whose body does that (not flax's
        unreplicate, which --diff removes, leaving what it was handed)."""
        if first_copy(expr, self.pmap_outputs()):
            return True
        if not isinstance(expr, ast.Call):
            return False
        if self.is_tree_map(expr) and expr.args and isinstance(expr.args[0], ast.Lambda):
            params = {a.arg for a in expr.args[0].args.args}
            return any(first_copy(n, params) for n in ast.walk(expr.args[0].body))
        return self.copy_helper(expr) == "unreplicate"

    def stacks_copies(self, call: ast.Call) -> bool:
        """A call that stacks copies of one value, one a device: `device_put_sharded(n * [x])` (not of keys split one
        a device), `device_put_replicated`, `jax_utils.replicate`, a repeat over the local devices, `[x] * n` stacked."""
        name = self.name(call.func)
        if is_name(name, "device_put_replicated", "flax.jax_utils.replicate"):
            return True
        if is_name(name, "device_put_sharded"):
            return bool(call.args) and self.copy_per_device(call.args[0])
        if self.broadcasts_a_constant(call):
            return True
        if is_name(name, "repeat", "broadcast_to", "tile") and any(
                isinstance(n, ast.Call) and is_name(self.name(n.func), "local_device_count", "local_devices")
                for a in call.args[1:] for n in ast.walk(a)):
            return True
        return self.stacks_per_device(call)

    def broadcasts_a_constant(self, call: ast.Call) -> bool:
        """`jax.pmap(lambda _: tree)(jnp.empty(n))`: a pmap of a function that ignores its input, which hands back
        one copy of `tree` a device."""
        pmap = call.func
        if not (isinstance(pmap, ast.Call) and is_name(self.name(pmap.func), "jax.pmap") and pmap.args
                and isinstance(pmap.args[0], ast.Lambda)):
            return False
        mapped = pmap.args[0]
        given = {a.arg for a in mapped.args.args}
        return bool(given) and not any(isinstance(n, ast.Name) and n.id in given for n in ast.walk(mapped.body))

    def stacks_per_device(self, call: ast.Call) -> bool:
        """`jnp.stack([x] * len(devices))`, `np.stack(n_devices * [x])` or `jnp.array([x] * jax.device_count())`:
        copies of one value, one a device."""
        return is_name(self.name(call.func), "numpy.stack", "jax.numpy.stack", "numpy.array", "jax.numpy.array",
                       "numpy.asarray", "jax.numpy.asarray") and bool(call.args) \
            and self.copy_per_device(call.args[0])

    def copy_per_device(self, node: ast.AST) -> bool:
        """`[x] * len(devices)` or `n_devices * [x]`: a list of copies of one value, one a device (the count read
        through the names that hold the devices or their number)."""
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
            return False
        sides = (node.left, node.right)
        count = next((b for a, b in (sides, sides[::-1]) if isinstance(a, ast.List) and len(a.elts) == 1), None)
        if count is None:
            return False
        for _ in range(4):  # `len(devices)` -> `devices` -> `jax.local_devices()[:n]`
            count = count.args[0] if isinstance(count, ast.Call) and self.name(count.func) == "len" and count.args \
                else self.value(count) if isinstance(count, ast.Name) else count
        return any(isinstance(n, ast.Call) and is_name(self.name(n.func), "local_devices", "devices",
                                                       "local_device_count", "device_count") for n in ast.walk(count))

    def enclosing_defs(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parent:
            node = self.parent[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield node

    def _wraps_pmap(self, call: ast.Call) -> bool:
        """A project's wrapper that pmaps the function it is handed (`utils.dist(f, axis_name='batch')`): a
        function of another file of the folder that calls jax.pmap, or, defined out of view, any call of the
        project's (not JAX's or a known library's) that takes a function first and pmap's keyword axis_name. Either
        is reached through its module (`utils.dist`, or imported from it), never a name the script binds itself."""
        name = self.name(call.func)
        short = name.rsplit(".", 1)[-1]
        if call.args and self._names_pmap(call.func) and not is_name(name, "jax.pmap"):
            return True  # `utils.pmap(step)`: a project's pmap, read or not (a partial of jax.pmap, most often)
        if "." not in name or name.startswith(_LIBRARIES) or short in self.defined:
            return False
        if short in self.folder.pmappers:
            return True
        if short in ("grad", "value_and_grad") or "map" in short.lower() or "scan" in short.lower():
            return False
        return bool(call.args) and self._is_function(call.args[0]) and bool(strings(keyword(call, "axis_name")))

    def _is_function(self, node: ast.AST, depth: int = 0) -> bool:
        """A lambda, a partial, or a name or `self.` attribute bound to one or to a function of the script."""
        if depth > 4:
            return False
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            spelled = code_of(node)
            return node.attr in self.defined or any(
                self._is_function(a.value, depth + 1) for a in ast.walk(self.tree) if isinstance(a, ast.Assign)
                and any(isinstance(t, ast.Attribute) and code_of(t) == spelled for t in a.targets))
        bound = self.value(node) if isinstance(node, ast.Name) else node
        if isinstance(bound, ast.Name):
            return bound.id in self.defined
        return isinstance(bound, ast.Lambda) or (
            isinstance(bound, ast.Call) and is_name(self.name(bound.func), "functools.partial"))

    def copy_helper(self, call: ast.Call) -> str | None:
        """What a call of a project helper does to pmap's copies: 'replicate', 'unreplicate' or None. Read from
        the helper's body when the script or its folder defines it; else by the names published pmap-era projects
        give them (`utils.get_first`, `bcast_local_devices`), in a script that uses pmap."""
        name = self.name(call.func)
        if name.startswith(("flax.", "jax.")) or not name:
            return None
        short = name.rsplit(".", 1)[-1]
        own_call = isinstance(call.func, ast.Name) and short in self._own_copies
        imported = isinstance(call.func, ast.Name) and short in dict(self.folder.copies)  # the project's own
        if short in ("replicate", "unreplicate", "get_metrics") and not own_call and not imported:
            return None  # flax's own: rules of their own
        if short in self._own_copies or short in self.defined:  # the script's own function: each call replicates
            own = self._own_copies.get(short)  # (or reads device 0's copy) a value of its own
            return own
        if short in dict(self.folder.copies):  # a function of another file of its folder
            return dict(self.folder.copies)[short]
        pmap_era = self.pmaps_here()
        if short in KNOWN_COPIES and pmap_era:
            return KNOWN_COPIES[short]
        if short.startswith(("unreplicate_", "replicate_")) and pmap_era:  # a project's variant: unreplicate_n_dims
            return short.split("_", 1)[0]
        return None

    def value(self, node: ast.AST | None) -> ast.AST | None:
        """What a name stands for where it is read (`AXIS = "batch"`): its last assignment before that line in
        the nearest function (or module) that assigns it, never another function's; else the node."""
        for _ in range(8):  # a chain of names, never a cycle
            bound = self._assignment(node) if isinstance(node, ast.Name) else None
            if bound is None:
                break
            node = bound
        return node

    def _assignment(self, name: ast.Name) -> ast.AST | None:
        scope = self.scope(name)
        while True:
            values = self._scoped.get((scope, name.id), [])
            before = [v for at, v in values if at < (name.lineno, name.col_offset)]
            if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
                    and name.id in {a.arg for a in ast.walk(scope.args) if isinstance(a, ast.arg)}:
                return before[-1] if before else None  # a parameter, unless the function binds it again first
            if values:
                return before[-1] if before else values[-1][1]
            if scope is self.tree:
                return None
            scope = self.scope(scope)

    def scope(self, node: ast.AST) -> ast.AST:
        """The function (def or lambda) a node is in, or the module."""
        while node in self.parent:
            node = self.parent[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return node
        return self.tree

    def axis_names(self, node: ast.AST | None) -> tuple[str, ...]:
        """The axis names an expression spells, through names the script assigns (module constants)."""
        node = self.value(node)
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(a for e in node.elts for a in self.axis_names(e))
        return strings(node)

    def gradient_status(self, expr: ast.AST) -> str:
        """Whether an expression holds gradients, judged by where it comes from, never by its name: 'yes' (a
        gradient transform's gradients, or a collective or tree map of them), 'no' (the tool can show it is
        not: a loss from value_and_grad, what derives only from such values), or 'unknown' (it may be: what a
        call that receives gradients gives back)."""
        return whole(self.gradients.status(expr))

    def takes_gradients(self, node: ast.AST) -> bool:
        """The node is inside a function that calls a gradient transform or is handed gradients (or may be)."""
        while node in self.parent:
            node = self.parent[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
                    and self.gradients.takes_gradients(node):
                return True
        return False

    def is_tree_map(self, call: ast.Call) -> bool:
        """jax's tree map (also the old tree_multimap), or the script's own (`def _tree_map(fn, *trees)`)."""
        name = self.name(call.func)
        return is_name(name, "jax.tree.map", "jax.tree_util.tree_map", "jax.tree_map", "jax.tree_multimap") \
            or name.endswith("tree_map") and name in self.defined

    def pmaps_here(self, nnx: bool = True) -> bool:
        """The script pmaps: jax.pmap, a project's wrapper of it (`utils.pmap(step)`, read or not), or (with `nnx`)
        nnx.pmap."""
        return any(True for _ in self.pmaps()) or bool(self.wrappers) or nnx and any(True for _ in self.nnx_pmaps())

    @once
    def pmaps(self) -> Iterator[ast.Call]:
        """Every jax.pmap(...) call, partial(jax.pmap, ...) (its keywords are pmap's), and a bare `@jax.pmap`
        decorator, as a call without arguments at its place."""
        for call in self.calls:
            name = self.name(call.func)
            if is_name(name, "jax.pmap"):
                yield call
            elif is_name(name, "functools.partial") and call.args and is_name(self.name(call.args[0]), "jax.pmap"):
                yield call
        yield from self._bare_pmaps

    def calls_in(self, table: dict[str, tuple[str, str, str]]) -> Iterator[tuple[ast.AST, str, str, str]]:
        """(call, rule, does, instead) for each call of a name in `table` (name -> (rule, does, instead))."""
        for call in self.calls:
            name = self.name(call.func)
            for old, (rule, does, instead) in table.items():
                if is_name(name, old):
                    yield call, rule, does, instead

    def replicates(self, node: ast.AST) -> bool:
        """`jax_utils.replicate(x)` or `x.replicate()`: pmap's stack of copies."""
        if not isinstance(node, ast.Call):
            return False
        if is_name(self.name(node.func), "flax.jax_utils.replicate"):
            return bool(node.args)
        return isinstance(node.func, ast.Attribute) and node.func.attr == "replicate" and not node.args \
            and not node.keywords

    def used_names(self) -> Iterator[tuple[ast.AST, str, bool]]:
        """Every dotted name the script imports, calls or reads (`maps.thread_resources.env`), with its
        node and whether it is an import."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                yield node, node.module, True
                yield from ((node, f"{node.module}.{a.name}", True) for a in node.names)
            elif isinstance(node, ast.Import):
                yield from ((node, a.name, True) for a in node.names)
            elif isinstance(node, ast.Call):
                yield node, self.name(node.func), False
            elif isinstance(node, ast.Attribute) and not isinstance(self.parent.get(node), ast.Attribute) \
                    and getattr(self.parent.get(node), "func", None) is not node:  # a chain's top, not a callee
                yield node, self.name(node), False

    def enclosing_function(self, node: ast.AST) -> ast.AST:
        """The def or lambda a node is in (the module for a node outside any)."""
        while node in self.parent and not isinstance(node, (ast.FunctionDef, ast.Lambda)):
            node = self.parent[node]
        return node

    @once
    def pmapped_functions(self) -> Iterator[ast.FunctionDef]:
        """The functions handed to pmap: `jax.pmap(f, ...)`, `jax.pmap(partial(f, ...))`, `@jax.pmap`,
        `@partial(jax.pmap, ...)`, followed to their definitions in the script."""
        defs = {n.name: n for n in ast.walk(self.tree) if isinstance(n, ast.FunctionDef)}
        for call in self.pmaps():
            target = self._mapped_def(call, defs)
            if target is not None:
                yield target
        for node in defs.values():
            for d in node.decorator_list:
                head = d.func if isinstance(d, ast.Call) else d
                if self._names_pmap(head) or (
                        isinstance(d, ast.Call) and is_name(self.name(head), "functools.partial")
                        and d.args and is_name(self.name(d.args[0]), "jax.pmap")):
                    yield node

    def _mapped_def(self, call: ast.Call, defs: dict[str, ast.AST]) -> ast.AST | None:
        """The def a pmap maps: `f`, `partial(f, ...)`, a name bound to `partial(f, ...)` (`step = partial(f, ...)`;
        `jax.pmap(step)`), or a method of the class the pmap is in (`jax.pmap(self._update)`)."""
        target = call.args[0] if call.args and not is_name(self.name(call.func), "functools.partial") else None
        if isinstance(target, ast.Name) and target.id not in defs:
            target = self.value(target)
        if isinstance(target, ast.Call) and is_name(self.name(target.func), "functools.partial") and target.args:
            target = target.args[0]
        if isinstance(target, ast.Name):
            return defs.get(target.id)
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
            owner = next((c for c in self.enclosing_defs(call) if isinstance(self.parent.get(c), ast.ClassDef)), None)
            method = defs.get(target.attr)
            if owner is not None and method is not None and self.parent.get(method) is self.parent.get(owner):
                return method
        return None

    def pmap_target(self, call: ast.Call) -> str | None:
        """The name of the function a `jax.pmap(f, ...)` or `jax.pmap(partial(f, ...))` call maps."""
        target = call.args[0] if call.args and not is_name(self.name(call.func), "functools.partial") else None
        if isinstance(target, ast.Call) and is_name(self.name(target.func), "functools.partial") and target.args:
            target = target.args[0]
        return target.id if isinstance(target, ast.Name) else None

    @once
    def pmapped_names(self) -> set[str]:
        """Names that hold a pmapped function: `f = jax.pmap(g)`, `@jax.pmap def f`, `@nnx.pmap(...) def f`, and
        `f = make()` where `make` returns one of those, and `f = utils.dist(g)` of a project's wrapper of pmap."""
        pmaps = [*self.pmaps(), *self.nnx_pmaps(), *self.wrappers]
        found = {name for name, value in self.assigned.items() if isinstance(value, ast.Call) and any(
            any(n is call for n in ast.walk(value)) for call in pmaps)}
        found |= {f.name for f in self.pmapped_functions()}
        found |= {f.name for f in ast.walk(self.tree) if isinstance(f, ast.FunctionDef)
                  and any(d in pmaps for d in f.decorator_list)}
        makers = {node.name for node in ast.walk(self.tree) if isinstance(node, ast.FunctionDef) and any(
            isinstance(r, ast.Return) and isinstance(r.value, ast.Name) and r.value.id in found
            for r in ast.walk(node))}
        return found | {name for name, value in self.assigned.items()
                        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in makers}

    def pmap_outputs(self) -> set[str]:
        """Names assigned from a call of a pmapped function (`step(...)`, or `trainer.p_step(...)` where the script
        binds `self.p_step = jax.pmap(...)`): per-device stacks (tuple targets item by item)."""
        calls = self.pmapped_call_test()
        outputs = {n.id for node in ast.walk(self.tree) if isinstance(node, ast.Assign) and calls(node.value)
                   for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        return outputs | self._unpacked_from(outputs)

    def pmapped_call_test(self) -> Callable[[ast.AST], bool]:
        """A test of whether an expression calls a pmapped function (`step(...)`, `self.p_step(...)`)."""
        pmapped = self.pmapped_names()
        pmaps = {*self.pmaps(), *self.nnx_pmaps()}
        methods = {t.attr for node in ast.walk(self.tree) if isinstance(node, ast.Assign) and node.value in pmaps
                   for t in node.targets if isinstance(t, ast.Attribute)}
        direct = lambda value: isinstance(value, ast.Call) and (  # noqa: E731
            isinstance(value.func, ast.Name) and value.func.id in pmapped
            or isinstance(value.func, ast.Attribute) and value.func.attr in methods)
        handing = forwarders(self.tree, direct) - pmapped  # `def step(self, s, b): return self.p_step(s, b)`
        return lambda value: direct(value) or isinstance(value, ast.Call) and (
            isinstance(value.func, ast.Name) and value.func.id in handing
            or isinstance(value.func, ast.Attribute) and value.func.attr in handing)

    def _unpacked_from(self, names: set[str]) -> set[str]:
        """The names a tuple target takes from one of `names`: `state, loss = outputs`."""
        return {n.id for node in ast.walk(self.tree) if isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Name) and node.value.id in names
                for t in node.targets if isinstance(t, ast.Tuple) for n in t.elts if isinstance(n, ast.Name)}

    @once
    def nnx_pmaps(self) -> Iterator[ast.Call]:
        """Every flax.nnx.pmap(...) call."""
        return (call for call in self.calls if is_name(self.name(call.func), "flax.nnx.pmap"))

    def _mesh_axes(self) -> tuple[str, ...]:
        for call in self.calls:
            if self.name(call.func) in MESH_MAKERS:
                axes = strings(argument(call, 1, "axis_names"))
                if axes:
                    return axes
        return ()


