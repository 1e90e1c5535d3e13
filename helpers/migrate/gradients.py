"""Which values of the learner's script hold gradients: a taint analysis, function scope by function scope.

A gradient comes from a call of a gradient transform (`jax.grad`, `jax.value_and_grad`, `nnx.grad`,
`dynamic_scale.value_and_grad`, called at once or through the name, attribute or method it is bound
to). Whatever derives from one is a gradient too, or may be one (the result of a call that receives
it); a parameter is what its call sites in the script (or in the other files of its folder) hand it.
Everything else is not a gradient: the tool can show where it comes from.
"""
from __future__ import annotations

import ast
import re
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
    """What a name holds when any of these assignments may reach it: what they all hold, else 'unknown' (or 'no'
    when none holds a gradient)."""
    if not statuses:
        return NO
    if all(s == statuses[0] for s in statuses):
        return statuses[0]
    wholes = {whole(s) for s in statuses}
    return wholes.pop() if len(wholes) == 1 else UNKNOWN


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
    """What each value of one parsed script holds: `status(expr)` is 'yes', 'no', 'unknown' (or a tuple's
    `Parts`)."""

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
        self.sites = None  # each function's call sites, found when first asked
        self._returned: dict = {}
        self._busy: set = set()
        self._known: dict = {}  # results no cycle touched: true for good
        self._pass: dict = {}  # results of this pass that a cycle touched
        self._guess: dict = {}  # what a cycle's start held at the end of the pass before
        self._guessed: dict = {}  # what this pass took a cycle's start to hold
        self._cut = False

    def status(self, expr: ast.AST | None) -> object:
        """'yes', 'no', 'unknown', or a tuple's `Parts`, for what an expression holds."""
        return self._settle(lambda: self._of(expr))

    def _settle(self, ask):
        """The answer of `ask` once the values that cycles (a step's state fed back into it) took for granted
        hold at the end of a pass; 'unknown' if they never settle."""
        self._guess = {}
        for _ in range(4):
            self._pass, self._guessed, self._busy, self._cut = {}, {}, set(), False
            try:
                found = ask()
            except RecursionError:  # a chain of values deeper than Python's stack: the tool cannot tell
                return UNKNOWN
            held = {e: self._pass.get(e, self._known.get(e, NO)) for e in self._guessed}
            if held == self._guessed:
                return found
            self._guess = held
        return UNKNOWN

    def _of(self, expr: ast.AST | None) -> object:
        return NO if expr is None else self._once(expr, lambda: self._status(expr))

    def _once(self, key, compute) -> object:
        """`compute()`, kept for `key` (an expression, or a function's parameter): once for good when no cycle
        touched it, once a pass when one did."""
        if key in self._known:
            return self._known[key]
        if key in self._pass or key in self._busy:  # what this pass found, or a cycle's start: a guess
            self._cut = True
            if key in self._pass:
                return self._pass[key]
            self._guessed[key] = self._guess.get(key, NO)
            return self._guessed[key]
        outer, self._cut = self._cut, False
        self._busy.add(key)
        try:
            found = compute()
        finally:
            self._busy.discard(key)
        (self._pass if self._cut else self._known)[key] = found
        self._cut = self._cut or outer
        return found

    def _status(self, expr: ast.AST) -> object:
        if isinstance(expr, ast.Name):
            return self._name(expr)
        if isinstance(expr, (ast.Tuple, ast.List)) and expr.elts:
            statuses = [_shallow(self._of(e)) for e in expr.elts]
            return Parts(statuses[0], statuses[-1], taint(*statuses[1:-1]))
        if isinstance(expr, ast.Subscript):
            index = expr.slice.value if isinstance(expr.slice, ast.Constant) else None
            base = self._of(expr.value)
            return item(base, index, None) if isinstance(index, int) else whole(base)
        if isinstance(expr, ast.Attribute):
            return whole(self._of(expr.value))
        if isinstance(expr, ast.Call):
            return self._call(expr)
        if isinstance(expr, (ast.Lambda, ast.Constant)):
            return NO
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Sub) and whole(self._of(expr.left)) == NO:
            return NO  # `p - lr * g`: parameters stepped by gradients, not a gradient
        return taint(*(self._of(c) for c in ast.iter_child_nodes(expr) if isinstance(c, ast.expr)))

    def _call(self, call: ast.Call) -> object:
        kind = self.transform(call.func)
        if kind is not None:
            return kind
        name = self.s.name(call.func).rsplit(".", 1)[-1]
        args = [*call.args, *(k.value for k in call.keywords)]
        if name in _NEVER_GRADIENTS:
            return NO
        if name in _COLLECTIVES and call.args:
            return self._of(call.args[0])
        if self.s.is_tree_map(call) and call.args:
            mapped, trees = call.args[0], call.args[1:]
            if len(trees) == 1 and isinstance(trees[0], (ast.Tuple, ast.List)) and trees[0].elts and not (
                    isinstance(mapped, ast.Lambda) and whole(self._of(mapped.body)) == NO):
                # `states, metrics, grads = jax.tree.map(f, (states, metrics, grads))`: a tree map keeps the
                # tuple's structure, so each item holds what it held (the aux of grad is no gradient)
                statuses = [whole(self._of(e)) for e in trees[0].elts]
                return Parts(statuses[0], statuses[-1], taint(*statuses[1:-1]))
            return self._of(mapped.body) if isinstance(mapped, ast.Lambda) else taint(
                *map(self._of, call.args[1:]))
        handed = [k for k in (self.transform(a) for a in args) if k is not None]
        if handed:  # a helper handed a gradient transform gives back what it gives, or may
            return _unsure(handed[0])
        if not self.callees(call) and any(_a_loss_function(a) for a in args):
            return UNKNOWN  # `hessian_helper(key, loss_fn, params)`: what it gives may be derivatives of the loss
        callees = self.callees(call)
        if callees:  # the script's own function: what it returns
            return join([self._of(r) for f in callees for r in self.returns(f)])
        given = [self._of(a) for a in args]
        if isinstance(call.func, ast.Attribute):
            given.append(self._of(call.func.value))
        return UNKNOWN if taint(*given) != NO else NO  # a call that receives gradients may give one

    def transform(self, node: ast.AST, depth: int = 0) -> object | None:
        """What calling `node` gives if it is a gradient transform (`jax.value_and_grad(f)`, a name, attribute or
        method bound to one): `Parts(NO, YES)` for value_and_grad's (value, gradients), `Parts(YES, NO)` for
        grad with has_aux, YES for grad; else None."""
        if depth > 4:
            return None
        if isinstance(node, ast.Call):
            name = self.s.name(node.func).rsplit(".", 1)[-1].removeprefix("filter_")  # equinox's filter_grad too
            if name == "value_and_grad":
                return Parts(NO, YES)
            if self.s.name(node.func) == "objax.GradValues":  # objax's: (gradients, values)
                return Parts(YES, NO)
            if name == "grad":  # has_aux=True: (gradients, aux); has_aux read from a setting: aux may be either
                aux = next((k.value for k in node.keywords if k.arg == "has_aux"), None)
                if aux is None or isinstance(aux, ast.Constant):
                    return Parts(YES, NO) if aux is not None and aux.value else YES
                return Parts(YES, UNKNOWN)
            values = [r for f in self.callees(node) for r in self.returns(f)]  # a method that returns one
        elif isinstance(node, ast.Name):
            decorated = self._decorated(node.id, depth)
            if decorated is not None:  # `@jax.value_and_grad def f`: calling f gives what the transform gives
                return decorated
            reaching = self._reaching(node)
            values = [v for _, t, v in reaching if isinstance(t, ast.Name)] if isinstance(reaching, list) else []
        elif isinstance(node, ast.Attribute):  # `self.grad_fn`, bound anywhere in the script
            values = self.attributes.get(ast.unparse(node), [])
        else:
            return None
        return next((k for k in (self.transform(v, depth + 1) for v in values) if k is not None), None)

    def _decorated(self, name: str, depth: int) -> object | None:
        """What calling the script's function `name` gives when a gradient transform decorates it
        (`@jax.value_and_grad`, `@partial(jax.grad, has_aux=True)`, under `@jax.jit` or not); else None."""
        for function in self.defs.get(name, []):
            for decorator in getattr(function, "decorator_list", []):
                if isinstance(decorator, ast.Call) and self.s.name(decorator.func).endswith("partial") \
                        and decorator.args:  # partial(jax.grad, has_aux=True): the transform, with its keywords
                    decorator = ast.Call(func=decorator.args[0], args=[], keywords=decorator.keywords)
                elif not isinstance(decorator, ast.Call):  # @jax.grad: the transform, without keywords
                    decorator = ast.Call(func=decorator, args=[], keywords=[])
                if self.s.name(decorator.func).rsplit(".", 1)[-1] in ("grad", "value_and_grad"):
                    return self.transform(decorator, depth + 1)
        return None

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

    def returns(self, function: ast.AST) -> list[ast.AST]:
        """What a function returns (found once)."""
        if function not in self._returned:
            self._returned[function] = _returns(function)
        return self._returned[function]

    def _is_method(self, function: ast.AST) -> bool:
        return isinstance(self.s.parent.get(function), ast.ClassDef)

    def _name(self, name: ast.Name) -> object:
        loop = _comprehension_binding(self.s.parent, name)
        if loop is not None:
            return whole(self._of(loop.iter))
        reaching = self._reaching(name)
        if reaching is None:
            return NO
        if isinstance(reaching, tuple):  # a parameter
            return self._once(reaching, lambda: self._parameter(*reaching))
        return join([self._bound(name.id, node, target, value) for node, target, value in reaching])

    def _bound(self, name: str, node: ast.AST, target: ast.AST, value: ast.AST) -> object:
        if isinstance(node, (ast.For, ast.AsyncFor)):
            return whole(self._of(value))
        if isinstance(node, ast.AugAssign):
            return taint(self._of(value), self._of(target))
        return _destructure(target, name, self._of(value))

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
                          and not any(_spans(part, name) for part in b[1:])]
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
                return whole(self._of(trees[position])) if position < len(trees) else NO
            return self._handed(function, name, position)
        return taint(YES if {(function.name, position), (function.name, name)} & self.handed else NO,
                     self._handed(function, name, position))

    def _handed(self, function: ast.AST, name: str, position: int) -> object:
        index = position - 1 if self._is_method(function) else position  # `self.f(x)` hands x to f's second
        given = []
        for call, mapped in self._sites().get(function, []):
            if mapped:
                given += [whole(self._of(a)) for a in call.args[1 + position:2 + position]]
            else:
                given += [self._of(a) for a in call.args[index:index + 1] if index >= 0]
                given += [self._of(k.value) for k in call.keywords if k.arg == name]
        return taint(*given)

    def _sites(self) -> dict[ast.AST, list[tuple[ast.Call, bool]]]:
        """Each function's call sites: (call, whether a tree map applies it to the trees after it)."""
        if self.sites is None:
            self.sites = {}
            for call in self.s.calls:
                if self.s.is_tree_map(call) and call.args and isinstance(call.args[0], ast.Name):
                    for f in self.defs.get(call.args[0].id, []):
                        self.sites.setdefault(f, []).append((call, True))
                for f in self.callees(call):
                    self.sites.setdefault(f, []).append((call, False))
        return self.sites

    def takes_gradients(self, function: ast.AST) -> bool:
        """The function calls a gradient transform, or is handed something that is or may be a gradient."""
        if any(isinstance(c, ast.Call) and self.transform(c.func) is not None for c in ast.walk(function)):
            return True
        return any(whole(self._settle(lambda: self._once((function, p), lambda: self._parameter(function, p))))
                   != NO for p in _parameters(function))

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


def _comprehension_binding(parent: dict, name: ast.Name) -> ast.comprehension | None:
    """The `for ... in ...` of a comprehension whose target binds this name, if any."""
    node = parent.get(name)
    while node is not None and not isinstance(node, ast.stmt):
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            for loop in node.generators:
                if any(isinstance(t, ast.Name) and t.id == name.id for t in ast.walk(loop.target)) \
                        and not any(n is name for n in ast.walk(loop.iter)):
                    return loop
        node = parent.get(node)
    return None


def _a_loss_function(node: ast.AST) -> bool:
    """A loss function handed on by name: `loss_fn`, `self.compute_loss_func`."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return bool(re.search(r"loss", name, re.I)) and name.endswith(("fn", "func", "function"))


def _shallow(status: object) -> object:
    """A tuple's item as a tuple of plain statuses at most (`(loss, aux)`), so that statuses stay small."""
    if isinstance(status, Parts):
        return Parts(whole(status.first), whole(status.last), whole(status.middle))
    return status


def _unsure(status: object) -> object:
    """A transform's result as a helper that was handed the transform gives it back: its gradients stay
    gradients; what is not a gradient there may be one here."""
    if isinstance(status, Parts):
        return Parts(*(s if s == YES else UNKNOWN for s in (status.first, status.last, status.middle)))
    return status


def _spans(outer: ast.AST, node: ast.AST) -> bool:
    """The node is written inside `outer` (by their places in the source)."""
    return (outer.lineno, outer.col_offset) <= (node.lineno, node.col_offset) \
        and (node.end_lineno, node.end_col_offset) <= (outer.end_lineno, outer.end_col_offset)


def _returns(function: ast.AST) -> list[ast.AST]:
    """What a function returns: a lambda's body, a def's return values (not those of functions inside it)."""
    if isinstance(function, ast.Lambda):
        return [function.body]
    found, todo = [], list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Return) and node.value is not None:
            found.append(node.value)
        if not isinstance(node, _FUNCTIONS):
            todo += ast.iter_child_nodes(node)
    return found


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
