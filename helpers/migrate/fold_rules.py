"""Host code of a pmap-era script that merges an array's two leading axes by hand (`np.reshape(x, (-1,) +
x.shape[2:])`): pmap's axis of local devices folded into the rows, said even where the array's history is out of the
rules' reach (outputs gathered in a list and concatenated, a helper's parameter, a step pmapped in another module)."""
from __future__ import annotations

import ast
import re
from typing import Iterator

from helpers.migrate.bindings import bound_value
from helpers.migrate.bodies import pmap_era
from helpers.migrate.host_read_rules import THIS_HOSTS_ROWS, pmap_output_on_host, said_fold
from helpers.migrate.reach import runs_under_pmap
from helpers.migrate.script import Script, code_of, is_name

LESSONS: dict[str, tuple[str, str]] = {}  # local-batch: jax_rules'


def _merged_operand(s: Script, call: ast.Call) -> ast.AST | None:
    """The array a reshape merges the two leading axes of: `x.reshape((-1,) + x.shape[2:])`, `np.reshape(x, (-1, *x.
    shape[2:]))`, `x.reshape((x.shape[0] * x.shape[1], ...))`; None for any other call."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "reshape"):
        return None
    function = is_name(s.name(call.func), "numpy.reshape", "jax.numpy.reshape")
    if function and not call.args:
        return None
    operand, shape = (call.args[0], call.args[1:]) if function else (call.func.value, call.args)
    x, text = code_of(operand), " ".join(code_of(a) for a in shape)
    merged = f"{x}.shape[2:]" in text and re.search(r"(?<![\w.])-1\b", text) or f"{x}.shape[0] * {x}.shape[1]" in text
    return operand if merged else None


def leading_axes_merged(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """In a pmap-era script, host code that merges an array's two leading axes (`x.reshape((-1,) + x.shape[2:])`): pmap's
    axis of local devices folded into the rows, whatever the array's history (a list of outputs concatenated, a
    helper's parameter). Said where no rule that follows pmap's outputs says it."""
    if not pmap_era(s):  # also a script whose pmapped step a project module makes
        return
    for call in s.calls:
        operand = _merged_operand(s, call)
        if operand is None or runs_under_pmap(s, call) or said_fold(s, call):
            continue
        tree = _tree_mapped(s, call)
        if tree is not None and pmap_output_on_host(s, tree) or _made_here(s, tree or operand):
            continue  # a tree map of a pmap output: device_axis_merged_in_a_tree_map says it
        yield (call, "local-batch",
               f"{code_of(call)} merges the two leading axes of {code_of(operand)}: in a pmap script, pmap's axis of "
               "local devices folded into the rows (of a stack of outputs, or of a batch); after the port an array has "
               "no device axis, and the merge takes the wrong axes",
               "drop the merge: a global array's first axis already is every device's rows; " + THIS_HOSTS_ROWS)


def _tree_mapped(s: Script, call: ast.Call) -> ast.AST | None:
    """The tree a tree map hands the lambda this call is in (`games` of `tree_map(lambda x: x.reshape(...), games)`)."""
    node = s.parent.get(call)
    while node is not None and not isinstance(node, ast.Lambda):
        node = s.parent.get(node)
    mapped = s.parent.get(node) if node is not None else None
    return mapped.args[1] if isinstance(mapped, ast.Call) and s.is_tree_map(mapped) and len(mapped.args) == 2 \
        and mapped.args[0] is node else None


def _made_here(s: Script, expr: ast.AST) -> bool:
    """A value the host builds from numbers (`jnp.zeros(...)`, a dict or list of such arrays), through names: no
    device axis to fold."""
    value = bound_value(s, expr) if isinstance(expr, ast.Name) else expr
    if isinstance(value, ast.Dict):
        return bool(value.values) and all(_made_here(s, v) for v in value.values)
    if isinstance(value, (ast.List, ast.Tuple)):
        return bool(value.elts) and all(_made_here(s, e) for e in value.elts)
    return isinstance(value, ast.Call) and s.name(value.func).startswith(("numpy.", "jax.numpy.")) \
        and s.name(value.func).rsplit(".", 1)[-1] in ("zeros", "ones", "full", "empty", "arange", "linspace")


RULES = (leading_axes_merged,)
