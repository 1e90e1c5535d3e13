"""A helper of the script that stacks rows or splits keys one a device is said at each call too: a short one
(`def shard(x): return x.reshape(n_local, -1, ...)`), or a longer one whose `return` makes the stack; and a function
of any length that takes device 0's copy of what it is handed (`params = tree_map(lambda x: x[0], params)`). Each call
is where a stack enters or leaves the program, and each one changes in the port (LABELLING.md rules 4, 10 and 20)."""
from __future__ import annotations

import ast
from typing import Iterable, Iterator

from helpers.migrate.script import Script, own_nodes

HELPER_LINES = 8  # a short helper: a def this short, or a lambda bound to a name
_SAID_AT_CALLS = ("local-batch", "per-device-keys")
_DEPTH = 3  # helpers calling helpers: how many calls deep a finding is carried to the calls


def said_at_calls(s: Script, said: Iterable[tuple[int, str, str, str]]) -> list[tuple[ast.AST, str, str, str]]:
    """(call, rule, does, instead) for each call, on a line with no finding of that rule yet, of a helper whose body
    has a finding of a rule in _SAID_AT_CALLS on a line its calls carry, or a copy taken of a parameter (`said`:
    (line, rule, does, instead) of every finding), also of a helper whose body calls such a helper
    (`tree_map(split_rows, state)`), a few calls deep."""
    said, found = list(said), []
    for _ in range(_DEPTH):
        new = list(_one_round(s, said))
        if not new:
            break
        found += new
        said += [(node.lineno, rule, does, instead) for node, rule, does, instead in new]
    return found


def _one_round(s: Script, said: list[tuple[int, str, str, str]]) -> Iterator[tuple[ast.AST, str, str, str]]:
    spoken = {(line, rule) for line, rule, *_ in said}
    lines_spoken = {line for line, *_ in said}  # a copy helper's call is said on a line with no other finding
    pmapped, pmaps = s.pmapped_names(), set(s.pmaps())
    for name, helper in _helpers(s).items():
        if name in pmapped or pmaps & set(ast.walk(helper)):
            continue  # a step, or a helper that runs its own pmap (a gather): its calls are said as such
        lines, copies = _carried_lines(helper), _parameter_lines(helper)
        body = next(((rule, does, instead) for line, rule, does, instead in sorted(said)
                     if line in lines and rule in _SAID_AT_CALLS or line in copies and rule == "jax-utils-replicate"),
                    None)
        if body is None:
            continue
        rule, does, instead = body
        for call in s.calls:
            inside = helper.lineno <= call.lineno <= helper.end_lineno
            if _calls(s, call, name) and (call.lineno, rule) not in spoken and not inside \
                    and not (rule == "jax-utils-replicate" and call.lineno in lines_spoken):
                yield call, rule, f"{name}(...) (line {helper.lineno}) does it here: {does}", instead


def _carried_lines(helper: ast.AST) -> set[int]:
    """The lines whose findings a helper's calls carry: all of a short one's; a longer function's `return` lines and
    those binding a name a return reads (it hands back what the line makes: `return load(batch_dims=[n_local, ...])`,
    `x = x.reshape((n_local, per) + x.shape[1:])` then `return {"image": x}`)."""
    if isinstance(helper, ast.Assign) or helper.end_lineno - helper.lineno + 1 <= HELPER_LINES:
        return set(range(helper.lineno, helper.end_lineno + 1))
    returns = [node for node in own_nodes(helper) if isinstance(node, ast.Return) and node.value is not None]
    returned = {n.id for r in returns for n in _handed_back(r.value)}
    binding = [node for node in own_nodes(helper) if isinstance(node, ast.Assign) and any(
        isinstance(n, ast.Name) and n.id in returned for t in node.targets for n in ast.walk(t))]
    return {line for node in returns + binding for line in range(node.lineno, node.end_lineno + 1)}


def _handed_back(value: ast.AST) -> list[ast.Name]:
    """The names a return hands back as they are (`x`, `{"image": x}`, `(x, y)`), not those it hands to a call."""
    if isinstance(value, ast.Name):
        return [value]
    parts = value.elts if isinstance(value, (ast.Tuple, ast.List)) else value.values if isinstance(value, ast.Dict) \
        else []
    return [n for part in parts for n in _handed_back(part)]


def _parameter_lines(helper: ast.AST) -> set[int]:
    """The lines of a function (of any length) that take device 0's copy of one of its parameters as it is handed
    (`params = jax.tree_map(lambda x: x[0], params)`, `unreplicate(state)`, `state[0]`): what each call hands it
    leaves as a copy there (not `params['blocks'][0]`, an entry of it, nor a copy the function makes and undoes)."""
    if not isinstance(helper, ast.FunctionDef):
        return set()
    parameters = {a.arg for a in [*helper.args.posonlyargs, *helper.args.args, *helper.args.kwonlyargs]} - {"self"}

    def parameter(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in parameters \
            or isinstance(node, ast.Tuple) and any(parameter(e) for e in node.elts)

    return {node.lineno for node in own_nodes(helper)
            if isinstance(node, ast.Call) and _takes_first(node) and any(parameter(a) for a in node.args)
            or isinstance(node, ast.Subscript) and parameter(node.value) and _zero(node.slice)}


def _takes_first(call: ast.Call) -> bool:
    """`unreplicate(x)`, `get_first(x)`, or a map of `lambda x: x[0]`: a call that takes device 0's copy."""
    named = ast.unparse(call.func).rsplit(".", 1)[-1].lower()
    return "unreplicate" in named or "first" in named or any(
        isinstance(a, ast.Lambda) and any(isinstance(n, ast.Subscript) and _zero(n.slice) for n in ast.walk(a.body))
        for a in call.args)


def _zero(index: ast.AST) -> bool:
    return isinstance(index, ast.Constant) and index.value == 0


def _helpers(s: Script) -> dict[str, ast.AST]:
    """The script's functions and named lambdas, by name (a name defined twice is left out)."""
    found: dict[str, list[ast.AST]] = {}
    for node in ast.walk(s.tree):
        if isinstance(node, ast.FunctionDef):
            found.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            found.setdefault(node.targets[0].id, []).append(node)
    return {name: nodes[0] for name, nodes in found.items() if len(nodes) == 1}


def _calls(s: Script, call: ast.Call, name: str) -> bool:
    """`name(...)`, `self.name(...)` of a method, or a tree map of it (`jax.tree.map(name, tree)`)."""
    func = call.args[0] if s.is_tree_map(call) and call.args else call.func
    return isinstance(func, ast.Name) and func.id == name or isinstance(func, ast.Attribute) and func.attr == name \
        and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls")
