"""Which values of the learner's script hold gradients: a taint analysis, function scope by function scope.

A gradient comes from a call of a gradient transform (`jax.grad`, `jax.value_and_grad`, `nnx.grad`,
`dynamic_scale.value_and_grad`, called at once or through the name, attribute or method it is bound
to). Whatever derives from one is a gradient too, or may be one (the result of a call that receives
it); a parameter is what its call sites in the script (or in the other files of its folder) hand it.
Everything else is not a gradient: the tool can show where it comes from.
"""
from __future__ import annotations

import ast
import dataclasses
from typing import Iterator

YES, NO, UNKNOWN = "yes", "no", "unknown"
# a number made from gradients, and parameters or a train state they update: never a gradient
_NEVER_GRADIENTS = {"global_norm", "norm", "apply_gradients", "apply_gradient", "apply_updates"}
_COLLECTIVES = {"pmean", "psum", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute", "all_to_all"}
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclasses.dataclass(frozen=True)
class Parts:
    """A tuple's status item by item: its first item, its last, and those between."""

    first: object
    last: object
    middle: object = NO


def whole(status: object) -> str:
    """'yes' when any part holds gradients, 'unknown' when any part may, else 'no'."""
    if isinstance(status, Parts):
        return taint(whole(status.first), whole(status.last), whole(status.middle))
    return status


def taint(*statuses: object) -> str:
    """What a value made from these values holds: a gradient if any is one."""
    flat = {whole(s) for s in statuses}
    return YES if YES in flat else UNKNOWN if UNKNOWN in flat else NO


def join(statuses: list) -> object:
    """What a name holds when any of these assignments may reach it: the same, or 'unknown' if they differ."""
    if not statuses:
        return NO
    if all(s == statuses[0] for s in statuses):
        return statuses[0]
    return taint(*statuses) if {whole(s) for s in statuses} != {YES} else YES


def item(status: object, index: int, count: int | None) -> object:
    """The status of item `index` of a tuple of `count` items (None: of a length the script does not say)."""
    if not isinstance(status, Parts):
        return status
    if index == 0:
        return status.first
    if index == -1 or (count is not None and index == count - 1):
        return status.last
    return status.middle if count is not None else join([status.middle, status.last])


class Gradients:
    """What each value of one parsed script holds: `status(expr)` is 'yes', 'no' or 'unknown'."""

    def __init__(self, script, handed: frozenset[tuple[str, object]] = frozenset()):
        self.s = script
        self.handed = handed  # (function name, position or keyword) given gradients in other files
        self.bindings: dict[tuple[ast.AST, str], list[tuple[ast.AST, ast.AST, ast.AST]]] = {}
        for node in ast.walk(script.tree):
            for target, value in _binds(node):
                for name in (n for n in ast.walk(target) if isinstance(n, ast.Name)):
                    self.bindings.setdefault((self.s.scope(node), name.id), []).append((node, target, value))
        self.defs = {}
        for node in ast.walk(script.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.defs.setdefault(node.name, []).append(node)
        self.attributes: dict[str, list[ast.AST]] = {}  # `self.grad_fn` -> what the script binds it to
        for node in ast.walk(script.tree):
            if isinstance(node, ast.Assign):
                for target in (t for t in node.targets if isinstance(t, ast.Attribute)):
                    self.attributes.setdefault(ast.unparse(target), []).append(node.value)
        self._busy: set = set()
        self._known: dict = {}
        self._cut = False  # a result met a cycle, so it may be less than the whole truth: not kept

    def status(self, expr: ast.AST | None) -> object:
        """'yes', 'no', 'unknown', or a tuple's `Parts`, for what an expression holds."""
        if expr is None:
            return NO
        if expr in self._known:
            return self._known[expr]
        if expr in self._busy:  # a cycle adds no gradient of its own
            self._cut = True
            return NO
        outer, self._cut = self._cut, False
        self._busy.add(expr)
        try:
            found = self._status(expr)
        finally:
            self._busy.discard(expr)
        if not self._cut:
            self._known[expr] = found
        self._cut = self._cut or outer
        return found

    def _status(self, expr: ast.AST) -> object:
        if isinstance(expr, ast.Name):
            return self._name(expr)
        if isinstance(expr, (ast.Tuple, ast.List)) and expr.elts:
            statuses = [self.status(e) for e in expr.elts]
            return Parts(statuses[0], statuses[-1], taint(*statuses[1:-1]))
        if isinstance(expr, ast.Subscript):
            index = expr.slice.value if isinstance(expr.slice, ast.Constant) else None
            base = self.status(expr.value)
            return item(base, index, None) if isinstance(index, int) else whole(base)
        if isinstance(expr, ast.Attribute):
            return whole(self.status(expr.value))
        if isinstance(expr, ast.Call):
            return self._call(expr)
        if isinstance(expr, (ast.Lambda, ast.Constant)):
            return NO
        return taint(*(self.status(c) for c in ast.iter_child_nodes(expr) if isinstance(c, ast.expr)))

    def _call(self, call: ast.Call) -> object:
        kind = self.transform(call.func)
        if kind is not None:
            return kind
        name = self.s.name(call.func).rsplit(".", 1)[-1]
        args = [*call.args, *(k.value for k in call.keywords)]
        if name in _NEVER_GRADIENTS:
            return NO
        if name in _COLLECTIVES and call.args:
            return self.status(call.args[0])
        if self.s.is_tree_map(call) and call.args:
            mapped = call.args[0]
            return self.status(mapped.body) if isinstance(mapped, ast.Lambda) else taint(
                *map(self.status, call.args[1:]))
        handed = [k for k in (self.transform(a) for a in args) if k is not None]
        if handed:  # a helper handed a gradient transform gives back what it gives, or may
            return _unsure(handed[0])
        callees = self.callees(call)
        if callees:  # the script's own function: what it returns
            return join([self.status(r) for f in callees for r in _returns(f)])
        given = [self.status(a) for a in args]
        if isinstance(call.func, ast.Attribute):
            given.append(self.status(call.func.value))
        return UNKNOWN if taint(*given) != NO else NO  # a call that receives gradients may give one

    def transform(self, node: ast.AST, depth: int = 0) -> object | None:
        """What calling `node` gives if it is a gradient transform (`jax.value_and_grad(f)`, a name, attribute or
        method bound to one): `Parts(NO, YES)` for value_and_grad's (value, gradients), `Parts(YES, NO)` for
        grad with has_aux, YES for grad; else None."""
        if depth > 4:
            return None
        if isinstance(node, ast.Call):
            name = self.s.name(node.func).rsplit(".", 1)[-1]
            if name == "value_and_grad":
                return Parts(NO, YES)
            if name == "grad":
                aux = next((k.value for k in node.keywords if k.arg == "has_aux"), None)
                return Parts(YES, NO) if isinstance(aux, ast.Constant) and aux.value else YES
            values = [r for f in self.callees(node) for r in _returns(f)]  # a method that returns one
        elif isinstance(node, ast.Name):
            reaching = self._reaching(node)
            values = [v for _, t, v in reaching if isinstance(t, ast.Name)] if isinstance(reaching, list) else []
        elif isinstance(node, ast.Attribute):  # `self.grad_fn`, bound anywhere in the script
            values = self.attributes.get(ast.unparse(node), [])
        else:
            return None
        return next((k for k in (self.transform(v, depth + 1) for v in values) if k is not None), None)

    def callees(self, call: ast.Call) -> list[ast.AST]:
        """The script's functions a call runs: `f(...)`, `self.f(...)`, or a name bound to `jax.pmap(f)`."""
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
            return [f for f in self.defs.get(func.attr, []) if self._is_method(f)]
        if not isinstance(func, ast.Name):
            return []
        if func.id in self.defs:
            return self.defs[func.id]
        target = self.s.value(func)
        if isinstance(target, ast.Call) and self.s.name(target.func).rsplit(".", 1)[-1] == "pmap":
            mapped = self.s.pmap_target(target)
            if isinstance(target.args[0] if target.args else None, ast.Lambda):
                return [target.args[0]]
            return self.defs.get(mapped, [])
        return []

    def _is_method(self, function: ast.AST) -> bool:
        return isinstance(self.s.parent.get(function), ast.ClassDef)

    def _name(self, name: ast.Name) -> object:
        loop = self.s.comprehension_binding(name)
        if loop is not None:
            return whole(self.status(loop.iter))
        reaching = self._reaching(name)
        if reaching is None:
            return NO
        if isinstance(reaching, tuple):  # a parameter
            return self._parameter(*reaching)
        return join([self._bound(name.id, node, target, value) for node, target, value in reaching])

    def _bound(self, name: str, node: ast.AST, target: ast.AST, value: ast.AST) -> object:
        if isinstance(node, (ast.For, ast.AsyncFor)):
            return whole(self.status(value))
        if isinstance(node, ast.AugAssign):
            return taint(self.status(value), self.status(target))
        return _destructure(target, name, self.status(value))

    def _reaching(self, name: ast.Name):
        """The bindings of a name that may reach this use, from the nearest scope that binds it ((scope,
        parameter) for a parameter; None for a name bound nowhere in the script)."""
        scope = self.s.scope(name)
        while True:
            if isinstance(scope, _FUNCTIONS) and name.id in _parameters(scope):
                return scope, name.id
            bound = self.bindings.get((scope, name.id))
            if bound:
                before = [b for b in bound if (b[0].lineno, b[0].col_offset) < (name.lineno, name.col_offset)
                          and not any(n is name for part in b[1:] for n in ast.walk(part))]
                return before or bound
            if scope is self.s.tree:
                return None
            scope = self.s.scope(scope)

    def _parameter(self, function: ast.AST, name: str) -> object:
        """What the call sites hand a parameter: a tree map's trees to its lambda, the arguments to a def."""
        params = _parameters(function)
        position = params.index(name)
        if isinstance(function, ast.Lambda):
            mapped = self.s.parent.get(function)
            if isinstance(mapped, ast.Call) and self.s.is_tree_map(mapped) and mapped.args[:1] == [function]:
                trees = mapped.args[1:]
                return whole(self.status(trees[position])) if position < len(trees) else NO
            return self._handed(function, name, position)
        return taint(YES if {(function.name, position), (function.name, name)} & self.handed else NO,
                     self._handed(function, name, position))

    def _handed(self, function: ast.AST, name: str, position: int) -> object:
        index = position - 1 if self._is_method(function) else position  # `self.f(x)` hands x to f's second
        given = []
        for call in self.s.calls:
            if self.s.is_tree_map(call) and call.args and isinstance(call.args[0], ast.Name) \
                    and function in self.defs.get(call.args[0].id, []):
                given += [whole(self.status(a)) for a in call.args[1 + position:2 + position]]
            elif function in self.callees(call):
                given += [self.status(a) for a in call.args[index:index + 1] if index >= 0]
                given += [self.status(k.value) for k in call.keywords if k.arg == name]
        return taint(*given)

    def takes_gradients(self, function: ast.AST) -> bool:
        """The function calls a gradient transform, or is handed something that is or may be a gradient."""
        if any(isinstance(c, ast.Call) and self.transform(c.func) is not None for c in ast.walk(function)):
            return True
        return any(whole(self._parameter(function, p)) != NO for p in _parameters(function))

    def handed_out(self) -> Iterator[tuple[str, object]]:
        """(function name, position or keyword) for each call of a function this script does not define that
        hands it something that is or may be a gradient: what the other files of a folder learn."""
        for call in self.s.calls:
            if self.callees(call) or self.transform(call.func) is not None:
                continue
            name = call.func.id if isinstance(call.func, ast.Name) else \
                call.func.attr if isinstance(call.func, ast.Attribute) else None
            if name is None:
                continue
            yield from ((name, i) for i, a in enumerate(call.args) if whole(self.status(a)) != NO)
            yield from ((name, k.arg) for k in call.keywords if k.arg and whole(self.status(k.value)) != NO)


def _unsure(status: object) -> object:
    """A transform's result as a helper that was handed the transform gives it back: its gradients stay
    gradients; what is not a gradient there may be one here."""
    if isinstance(status, Parts):
        return Parts(*(s if s == YES else UNKNOWN for s in (status.first, status.last, status.middle)))
    return status


def _returns(function: ast.AST) -> list[ast.AST]:
    """What a function returns: a lambda's body, a def's return values (not those of functions inside it)."""
    if isinstance(function, ast.Lambda):
        return [function.body]
    inner = {n for f in ast.walk(function) if f is not function and isinstance(f, _FUNCTIONS) for n in ast.walk(f)}
    return [r.value for r in ast.walk(function) if isinstance(r, ast.Return) and r.value is not None
            and r not in inner]


def _parameters(function: ast.AST) -> list[str]:
    a = function.args
    return [p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]] + \
        [p.arg for p in (a.vararg, a.kwarg) if p is not None]


def _binds(node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(target, value) for each binding a statement makes."""
    if isinstance(node, ast.Assign):
        yield from ((t, node.value) for t in node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
        yield node.target, node.value
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        yield node.target, node.iter


def _destructure(target: ast.AST, name: str, status: object) -> object:
    """The status of `name` in an assignment of a value with this status to `target` (`(loss, aux), grads`)."""
    if isinstance(target, ast.Name):
        return status
    if isinstance(target, ast.Starred):
        return _destructure(target.value, name, whole(status))
    if isinstance(target, (ast.Tuple, ast.List)):
        for i, element in enumerate(target.elts):
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(element)):
                return _destructure(element, name, item(status, i, len(target.elts)))
    return whole(status)
