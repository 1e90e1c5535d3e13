"""The rule for a contrastive loss inside a pmapped step: a similarity matrix of two embeddings of the batch, with
no all_gather over pmap's axis, compares each device's rows only with its own (its own negatives)."""
from __future__ import annotations

import ast
import re
from typing import Iterator

from helpers.migrate.script import MESH_AXES, Script, code_of, is_name

# rule -> (notebook, section heading without its number): where the course teaches the fix
LESSONS: dict[str, tuple[str, str]] = {
    "per-device-negatives": ("06", "A line-by-line port"),
}
_CONTRASTIVE = re.compile(r"((clip|contrastive|siglip)_?loss|info_?nce(_?loss)?|nt_?xent(_?loss)?)$", re.I)
_PRODUCTS = ("jax.numpy.matmul", "jax.numpy.dot", "numpy.matmul", "numpy.dot")
_PAIRS = re.compile(r"^\s*(\w)(\w)\s*,\s*(\w)\2\s*->\s*\1\3\s*$")  # 'id,jd->ij': every row with every row
_DIAGONAL = ("jax.numpy.arange", "jax.numpy.eye", "jax.numpy.diag", "jax.numpy.diagonal", "numpy.arange",
             "numpy.eye")


def _transposed(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "T"


def _similarity(s: Script, node: ast.AST) -> bool:
    """`a @ b.T`, `jnp.matmul(a, b.T)`, `jnp.einsum('id,jd->ij', a, b)`: every row of a with every row of b."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return _transposed(node.right)
    if not isinstance(node, ast.Call):
        return False
    name = s.name(node.func)
    if is_name(name, *_PRODUCTS) and len(node.args) == 2:
        return _transposed(node.args[1])
    return is_name(name, "jax.numpy.einsum", "numpy.einsum") and bool(node.args) \
        and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
        and _PAIRS.match(node.args[0].value) is not None


def _contrastive_calls(s: Script, function: ast.AST) -> list[ast.Call]:
    """Calls of a loss named for contrast (clip_loss, contrastive_loss, info_nce, nt_xent)."""
    return [n for n in ast.walk(function) if isinstance(n, ast.Call) and n.args
            and _CONTRASTIVE.search(s.name(n.func).rsplit(".", 1)[-1]) is not None]


def _diagonal_targets(s: Script, function: ast.AST) -> bool:
    """The function builds the matrix's targets from its diagonal (`labels = jnp.arange(n)`, jnp.eye)."""
    return any(isinstance(n, ast.Call) and is_name(s.name(n.func), *_DIAGONAL) for n in ast.walk(function))


def _gathers(s: Script, function: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and s.name(n.func).rsplit(".", 1)[-1] == "all_gather" for n in ast.walk(function))


_NEGATIVES = re.compile(r"neg", re.I)


def _defined(s: Script, call: ast.AST) -> ast.AST | None:
    """The script's def of the function a call runs (`compute_contrastive_loss(...)`), if it defines it once."""
    name = call.func.id if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else None
    found = [n for n in ast.walk(s.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    return found[0] if len(found) == 1 else None


def _negatives_picked_in(s: Script, call: ast.AST) -> ast.AST | None:
    """Where the loss a call runs, defined in the script and gathering nothing, takes its negatives by index from
    the rows it was handed (`features.reshape(-1, d)[negative_indices.reshape(-1)]`): the first such index."""
    function = _defined(s, call)
    if function is None or _gathers(s, function):
        return None
    return next((n for n in ast.walk(function) if isinstance(n, ast.Subscript) and any(
        isinstance(r, (ast.Name, ast.Attribute)) and _NEGATIVES.search(r.id if isinstance(r, ast.Name) else r.attr)
        for r in ast.walk(n.slice))), None)


def per_device_negatives(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """A contrastive loss in a pmapped function, on its own rows only: said at the loss's call (once, where a loss
    the script defines picks its negatives by index from the rows it is handed), else at the similarity matrix
    whose targets are its diagonal."""
    said: set[ast.AST | None] = set()
    for function in sorted(set(s.pmapped_functions()), key=lambda f: f.lineno):
        if _gathers(s, function):
            continue
        losses = _contrastive_calls(s, function)
        if not losses and _diagonal_targets(s, function):
            losses = [n for n in ast.walk(function) if _similarity(s, n)]
        for loss in losses:
            defined = _defined(s, loss)
            if defined is not None and _gathers(s, defined):
                continue  # the loss the script defines gathers the rows over the devices first
            picked = _negatives_picked_in(s, loss)
            if picked is not None and picked in said:
                continue
            said.add(picked)
            yield (picked or loss, "per-device-negatives",
                   f"{code_of(picked or loss)} in "
                   + (f"{_defined(s, loss).name}, which {function.name} calls under pmap, picks negatives by index "
                      "among this device's rows only" if picked else
                      f"{function.name}, which pmap runs, contrasts each device's rows only with its own rows")
                   + " (no all_gather of the embeddings over pmap's axis): every device has its own negatives; "
                   "after a port to jax.jit on the global batch the loss sees every row's negatives, another "
                   "objective (and a batch-size-dependent one)",
                   f"to keep the objective, keep the loss per device in shard_map over {MESH_AXES}; to contrast with "
                   f"every row, all_gather the embeddings over {MESH_AXES} (or jit the global batch) on purpose, and "
                   "retune the temperature and the learning rate")


RULES = (per_device_negatives,)
