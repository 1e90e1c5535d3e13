"""Read your own pmap-era training script and say, line by line, what the course teaches about it.

    python -m helpers.migrate path/to/train.py          # or a notebook, or a folder of scripts
    python -m helpers.migrate --diff path/to/train.py   # and a suggested rewrite where it is safe

or `migrate("train.py")` in a notebook. The script is parsed with `ast`: it is never imported
or run. Each finding is one line, `train.py:12: <what the line does on several hosts> -> <what
to write instead> (notebook NN, section "...")`; the sections come from `LESSONS`, which a test
checks against the notebooks' own headings. Exit status: 0 nothing to change, 1 findings, 2 a
file that cannot be read.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import json
import re
import sys
from pathlib import Path
from typing import Iterator

__all__ = ["Finding", "LESSONS", "findings", "migrate", "rewrite", "main", "MigrateError"]

# rule -> (notebook, section heading without its number): where the course teaches the fix
LESSONS: dict[str, tuple[str, str]] = {
    "pmap": ("06", "A line-by-line port"),
    "pmap-collective": ("06", "The gradient trap"),
    "device-put-replicated": ("04", "What pmap is in jax 0.12"),
    "experimental-shard-map": ("06", "Five more things a real port runs into"),
    "with-mesh": ("06", "Five more things a real port runs into"),
    "local-batch": ("07", "Way three: `shard_map` on a `(host, device)` mesh, with a global batch"),
    "jax-utils-replicate": ("10", "Where the parameters and the optimizer state live"),
    "device-only-spec": ("07", "The question the course started from: `P('device')`"),
    "process-zero-collective": ("12", "A collective on host 0 only"),
    "process-zero-save": ("11", "Orbax: save on 2 x 4, resume on 4 x 2 and 1 x 8"),
    "per-device-keys": ("06", "Per-device randomness: `fold_in(key, axis_index)`"),
}
_COLLECTIVES = {"pmean", "psum", "pmax", "pmin", "all_gather", "all_to_all", "ppermute",
                "psum_scatter", "axis_index"}
_TO_GLOBAL = {"jax.make_array_from_process_local_data",
              "jax.experimental.multihost_utils.host_local_array_to_global_array",
              "jax.device_put"}
_HOST_SYNC = {"jax.device_get", "jax.experimental.multihost_utils.process_allgather",
              "jax.experimental.multihost_utils.broadcast_one_to_all",
              "jax.experimental.multihost_utils.sync_global_devices"}
_MESH_MAKERS = {"jax.make_mesh", "jax.sharding.Mesh", "jax.Mesh"}
_SPEC_MAKERS = {"jax.sharding.PartitionSpec", "jax.P"}
MESH_AXES = "('host', 'device')"  # how the course names a data-parallel mesh's axes


class MigrateError(Exception):
    """A path the tool cannot read: the message is one line for the learner."""


@dataclasses.dataclass(frozen=True)
class Finding:
    """One line of the learner's script, what it does across hosts, and what to write instead."""

    path: str
    line: int
    rule: str
    does: str
    instead: str

    @property
    def lesson(self) -> str:
        notebook, section = LESSONS[self.rule]
        return f'notebook {notebook}, section "{section}"'

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.does} -> {self.instead} ({self.lesson})"


# ------------------------------------------------------------------------------ reading

class _Names:
    """What each imported name stands for: `jnp` -> `jax.numpy`, `pmap` -> `jax.pmap`."""

    def __init__(self, tree: ast.AST):
        self.alias: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.alias[a.asname or a.name] = f"{node.module}.{a.name}"

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


def _is(name: str, *suffixes: str) -> bool:
    return any(name == s or name.endswith("." + s) for s in suffixes)


def _text(node: ast.AST) -> str:
    return ast.unparse(node)


def _strings(node: ast.AST | None) -> tuple[str, ...]:
    """The axis names a string or a tuple of strings spells."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(s for e in node.elts for s in _strings(e))
    return ()


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _argument(call: ast.Call, position: int, name: str) -> ast.AST | None:
    return call.args[position] if len(call.args) > position else _keyword(call, name)


def _only_process_zero(test: ast.AST, names: _Names) -> bool:
    """`jax.process_index() == 0`, `0 == ...`, `not jax.process_index()`, `... < 1`."""
    def is_index(n):
        return isinstance(n, ast.Call) and _is(names.of(n.func), "process_index")

    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return is_index(test.operand)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        zero = [s for s in (left, right) if isinstance(s, ast.Constant) and s.value == 0]
        return bool(zero) and isinstance(test.ops[0], ast.Eq) and (is_index(left) or is_index(right))
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_only_process_zero(v, names) for v in test.values)
    return False


class _Script:
    """One parsed script and what the rules need to know about it."""

    def __init__(self, tree: ast.AST):
        self.tree = tree
        self.names = _Names(tree)
        self.calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        self.assigned = {t.id: node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                         for t in node.targets if isinstance(t, ast.Name)}
        self.pmap_axes = {axis for call in self._pmaps() for axis in _strings(_keyword(call, "axis_name"))}
        self.mesh_axes = self._mesh_axes()

    def name(self, node: ast.AST) -> str:
        return self.names.of(node)

    def _pmaps(self) -> Iterator[ast.Call]:
        """Every jax.pmap(...) call, and partial(jax.pmap, ...) (its keywords are pmap's)."""
        for call in self.calls:
            name = self.name(call.func)
            if _is(name, "jax.pmap"):
                yield call
            elif _is(name, "functools.partial") and call.args and _is(self.name(call.args[0]), "jax.pmap"):
                yield call

    def _mesh_axes(self) -> tuple[str, ...]:
        for call in self.calls:
            if self.name(call.func) in _MESH_MAKERS:
                axes = _strings(_argument(call, 1, "axis_names"))
                if axes:
                    return axes
        return ()


# ------------------------------------------------------------------------------- rules

def _pmap(s: _Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for call in s._pmaps():
        axis = _strings(_keyword(call, "axis_name"))
        in_axes = _keyword(call, "in_axes")
        said = [f"axis_name={axis[0]!r}"] if axis else []
        if in_axes is not None:
            said.append(f"in_axes={_text(in_axes)}")
        yield (call, "pmap",
               f"jax.pmap({', '.join(said)}) maps over this host's devices only: each host feeds a "
               "stack with a leading axis of local_device_count(), and the parameters are stacked "
               "copies",
               f"jax.jit(jax.shard_map(..., mesh=mesh, in_specs=..., out_specs=...)) over a "
               f"{MESH_AXES} mesh with global arrays: P(('host', 'device')) where in_axes was 0, "
               "P() where it was None")


def _pmap_collective(s: _Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for call in s.calls:
        name = s.name(call.func)
        op = name.rsplit(".", 1)[-1]
        if op not in _COLLECTIVES or not _is(name, f"jax.lax.{op}"):
            continue
        axis = _argument(call, 0 if op == "axis_index" else 1, "axis_name")
        if not set(_strings(axis)) & s.pmap_axes:
            continue
        operand = _text(call.args[0]) if call.args and op != "axis_index" else ""
        if op == "pmean" and "grad" in operand:
            yield (call, "pmap-collective",
                   f"pmean({operand}, {_text(axis)}) averages the gradients over pmap's axis; under "
                   "shard_map with check_vma the gradient of P() parameters is already summed over "
                   "the devices, so this one comes out N times too large, silently",
                   f"take the gradient of jax.lax.pmean(loss, {MESH_AXES}) and drop the pmean of "
                   "the gradients")
        else:
            yield (call, "pmap-collective",
                   f"{op}(..., {_text(axis)}) names pmap's axis, which shard_map does not have",
                   f"name the mesh axes: jax.lax.{op}(..., {MESH_AXES}) reaches every device of "
                   "every host")


# calls that no longer exist, or only stack copies for pmap: -> (rule, what it does, instead)
_OLD_CALLS = {
    "jax.device_put_replicated": (
        "device-put-replicated",
        "jax.device_put_replicated was removed in jax 0.10 (AttributeError); it made pmap's "
        "stacked copies",
        "jax.device_put(x, NamedSharding(mesh, P())): one global array with a copy on every "
        "device of the mesh"),
    "jax.device_put_sharded": (
        "device-put-replicated",
        "jax.device_put_sharded was removed in jax 0.10 (AttributeError); it stacked one slice "
        "per local device",
        "jax.make_array_from_process_local_data(NamedSharding(mesh, P(('host', 'device'))), "
        "this_hosts_rows)"),
    "flax.jax_utils.replicate": (
        "jax-utils-replicate",
        "flax.jax_utils.replicate stacks a copy per local device (a leading axis that pmap strips)",
        "jax.device_put(tree, NamedSharding(mesh, P())) once: one global value, on every device"),
    "flax.jax_utils.unreplicate": (
        "jax-utils-replicate",
        "flax.jax_utils.unreplicate takes copy [0] of pmap's stack",
        "nothing: a P() array already is the value (read it on any host)"),
}


def _old_calls(s: _Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for call in s.calls:
        name = s.name(call.func)
        for old, (rule, does, instead) in _OLD_CALLS.items():
            if _is(name, old):
                yield call, rule, does, instead


def _experimental_shard_map(s: _Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    does = "jax.experimental.shard_map is deprecated (since jax 0.8) and warns on import"
    instead = ("jax.shard_map(f, mesh=..., in_specs=..., out_specs=...), keyword arguments only; "
               "check_rep is now check_vma")
    for node in ast.walk(s.tree):
        if isinstance(node, ast.ImportFrom) and node.module == "jax.experimental.shard_map" or (
                isinstance(node, ast.ImportFrom) and node.module == "jax.experimental"
                and any(a.name == "shard_map" for a in node.names)) or (
                isinstance(node, ast.Import) and any(a.name == "jax.experimental.shard_map"
                                                     for a in node.names)):
            yield node, "experimental-shard-map", does, instead


def _with_mesh(s: _Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for node in ast.walk(s.tree):
        if isinstance(node, ast.With):
            for item in node.items:
                expr = item.context_expr
                if isinstance(expr, (ast.Name, ast.Attribute)) and _is_mesh(s, expr):
                    yield (node, "with-mesh",
                           f"`with {_text(expr)}:` is deprecated (since jax 0.10.1)",
                           f"with jax.set_mesh({_text(expr)}):")


def _is_mesh(s: _Script, expr: ast.AST) -> bool:
    value = s.assigned.get(expr.id) if isinstance(expr, ast.Name) else None
    if isinstance(value, ast.Call):
        return s.name(value.func) in _MESH_MAKERS or _is(s.name(value.func), "create_device_mesh")
    return "mesh" in _text(expr).lower()


def _local_batch(s: _Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    seen = set()
    for node in ast.walk(s.tree):
        shaping = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                   and node.func.attr == "reshape") or (
            isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.FloorDiv, ast.Div)))
        if not shaping:
            continue
        for inner in ast.walk(node):
            if (isinstance(inner, ast.Call) and _is(s.name(inner.func), "jax.local_device_count")
                    and inner.lineno not in seen):
                seen.add(inner.lineno)
                if isinstance(node, ast.Call):
                    yield (inner, "local-batch",
                           "reshape(jax.local_device_count(), ...) stacks this host's rows one "
                           "slice per local device, the leading axis pmap strips",
                           "no stacking: pass the host's rows as they are to jax.make_array_from_"
                           "process_local_data(NamedSharding(mesh, P(('host', 'device'))), rows), "
                           "and JAX splits them over the devices")
                else:
                    yield (inner, "local-batch",
                           "jax.local_device_count() sizes the batch per host: on several hosts "
                           "the batch a step trains on is process_count() times this number",
                           "choose the GLOBAL batch size; each host loads global_batch // "
                           "jax.process_count() rows of it")


def _device_only_spec(s: _Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    if len(s.mesh_axes) < 2:
        return
    used = {n.id for call in s.calls if s.name(call.func) in _TO_GLOBAL
            for arg in [*call.args, *(k.value for k in call.keywords)]
            for n in ast.walk(arg) if isinstance(n, ast.Name)}
    for call in s.calls:
        if s.name(call.func) not in _SPEC_MAKERS or not call.args:
            continue
        axes = _strings(call.args[0])
        missing = [a for a in s.mesh_axes if a not in axes]
        if not axes or not missing or not set(axes) <= set(s.mesh_axes):
            continue
        if _feeds_global_array(s, call, used):
            yield (call, "device-only-spec",
                   f"{_text(call)} leaves out {', '.join(map(repr, missing))}: it declares the "
                   "batch the same on every host, but each host loads its own rows, so the hosts "
                   "hold different 'copies', silently",
                   f"P({tuple(s.mesh_axes)!r}) for a batch each host loads its own part of")


def _feeds_global_array(s: _Script, spec: ast.Call, used: set[str]) -> bool:
    """The spec is inside a call that builds a global array, or in a name passed to one."""
    for call in s.calls:
        if s.name(call.func) in _TO_GLOBAL and any(n is spec for n in ast.walk(call)):
            return True
    for name, value in s.assigned.items():
        if any(n is spec for n in ast.walk(value)):
            if name in used:
                return True
            if any(isinstance(v, ast.Call) and any(isinstance(n, ast.Name) and n.id == name
                                                   for n in ast.walk(v)) and t in used
                   for t, v in s.assigned.items()):
                return True
    return False


def _process_zero(s: _Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """Collectives, compiled steps, device_get and checkpoint saves under `if process_index() == 0`."""
    compiled = {name for name, value in s.assigned.items() if isinstance(value, ast.Call) and (
        _is(s.name(value.func), "jax.pmap", "jax.jit", "jax.shard_map"))}
    compiled |= {node.name for node in ast.walk(s.tree) if isinstance(node, ast.FunctionDef)
                 and any(_is(s.name(d.func if isinstance(d, ast.Call) else d), "jax.pmap", "jax.jit",
                             "functools.partial") for d in node.decorator_list)}
    for node in ast.walk(s.tree):
        if not (isinstance(node, ast.If) and _only_process_zero(node.test, s.names)):
            continue
        for inner in (n for stmt in node.body for n in ast.walk(stmt)):
            if not isinstance(inner, ast.Call):
                continue
            name = s.name(inner.func)
            called = inner.func.id if isinstance(inner.func, ast.Name) else ""
            if _is_checkpoint_save(s, inner):
                yield (inner, "process-zero-save",
                       f"{_text(inner.func)}(...) runs on process 0 only: a checkpoint of global "
                       "arrays is saved by every process (each writes its own shards), so process 0 "
                       "waits for hosts that never call it",
                       "call the save on every host; Orbax lets process 0 write the shared metadata")
            elif name in _HOST_SYNC or called in compiled:
                yield (inner, "process-zero-collective",
                       f"{_text(inner.func)}(...) runs on process 0 only: a collective (or a compiled "
                       "step) there waits for hosts that never join it, and device_get of an array "
                       "other hosts hold part of raises",
                       "compute on every host, outside the if; keep only the print or the write "
                       "under it")


def _is_checkpoint_save(s: _Script, call: ast.Call) -> bool:
    """`checkpoints.save_checkpoint(...)`, `ocp....save(...)`, or `.save(...)` on a name made by
    an Orbax or checkpoint call (`manager = ocp.CheckpointManager(...)`)."""
    name = s.name(call.func)
    if "save" not in name.rsplit(".", 1)[-1].lower():
        return False
    if "checkpoint" in name.lower() or "orbax" in name or "ckpt" in _text(call).lower():
        return True
    owner = call.func.value if isinstance(call.func, ast.Attribute) else None
    made = s.assigned.get(owner.id) if isinstance(owner, ast.Name) else None
    return isinstance(made, ast.Call) and any(w in s.name(made.func).lower()
                                              for w in ("orbax", "checkpoint"))


def _per_device_keys(s: _Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for call in s.calls:
        if not _is(s.name(call.func), "jax.random.split") or len(call.args) < 2:
            continue
        count = call.args[1]
        by_device = any(isinstance(n, ast.Call) and _is(s.name(n.func), "jax.local_device_count",
                                                          "jax.device_count")
                        for n in ast.walk(count))
        if by_device or re.search(r"dev", _text(count)):
            yield (call, "per-device-keys",
                   f"jax.random.split(key, {_text(count)}) makes one key per local device for "
                   "pmap; every host splits the same key, so host 1's devices repeat host 0's draws",
                   "one key, and inside shard_map jax.random.fold_in(key, jax.lax.axis_index("
                   f"{MESH_AXES})): a different stream on every device of every host")


_RULES = (_pmap, _pmap_collective, _old_calls, _experimental_shard_map, _with_mesh, _local_batch,
          _device_only_spec, _process_zero, _per_device_keys)


def findings(source: str, path: str = "<script>", *, first_line: int = 1) -> list[Finding]:
    """What the course says about each line of `source` (Python text), in line order.

    Raises SyntaxError for text that is not Python. `first_line` numbers a notebook cell's lines.
    """
    script = _Script(ast.parse(source, filename=path))
    found = {(node.lineno, rule, does): Finding(path, node.lineno + first_line - 1, rule, does, instead)
             for check in _RULES for node, rule, does, instead in check(script)}
    return sorted(found.values(), key=lambda f: (f.line, f.rule, f.does))


# ------------------------------------------------------------------------------ rewriting

def rewrite(source: str) -> tuple[str, list[str]]:
    """The source with the findings it can rewrite safely rewritten, and what it rewrote.

    Safe: the `jax.experimental.shard_map` import (when every call already passes mesh, in_specs
    and out_specs by keyword; check_rep becomes check_vma), `with mesh:` -> `with
    jax.set_mesh(mesh):` (when `jax` is imported as jax), and `jax.device_put_replicated(x, ...)`
    -> `jax.device_put(x, NamedSharding(mesh, P()))` (when the script defines `mesh`).
    """
    script = _Script(ast.parse(source))
    edits: list[tuple[int, int, int, int, str]] = []
    done: list[str] = []
    has_jax = script.names.alias.get("jax") == "jax"

    def replace(node: ast.AST, text: str) -> None:
        edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, text))

    shard_map_calls = [c for c in script.calls if _is(script.name(c.func), "shard_map")
                       and "experimental" in script.name(c.func)]
    keywords_only = all(not c.args[1:] and {"mesh", "in_specs", "out_specs"} <= {k.arg for k in c.keywords}
                        for c in shard_map_calls)
    for node, *_ in _experimental_shard_map(script):
        if keywords_only and isinstance(node, ast.ImportFrom) and [a.name for a in node.names] == ["shard_map"]:
            alias = node.names[0].asname
            replace(node, "from jax import shard_map" + (f" as {alias}" if alias else ""))
            for call in shard_map_calls:
                for k in call.keywords:
                    if k.arg == "check_rep":
                        edits.append((k.lineno, k.col_offset, k.lineno, k.col_offset + len("check_rep"),
                                      "check_vma"))
            done.append("the jax.experimental.shard_map import")
    if has_jax:
        for node, *_ in _with_mesh(script):
            for item in node.items:
                expr = item.context_expr
                if isinstance(expr, (ast.Name, ast.Attribute)) and _is_mesh(script, expr):
                    replace(expr, f"jax.set_mesh({ast.get_source_segment(source, expr)})")
            done.append(f"`with` on line {node.lineno}")
    if "mesh" in script.assigned:
        for call in script.calls:
            if _is(script.name(call.func), "jax.device_put_replicated") and call.args:
                value = ast.get_source_segment(source, call.args[0])
                replace(call, f"jax.device_put({value}, NamedSharding(mesh, P()))")
                done.append(f"device_put_replicated on line {call.lineno}")
    lines = source.splitlines(keepends=True)
    for start, col, end, end_col, text in sorted(edits, reverse=True):
        head, tail = lines[start - 1][:col], lines[end - 1][end_col:]
        lines[start - 1:end] = [head + text + tail]
    out = "".join(lines)
    if any("device_put_replicated" in d for d in done):
        out = _with_sharding_import(out, script)
    return out, done


def _with_sharding_import(source: str, script: _Script) -> str:
    """Import NamedSharding and P (as PartitionSpec) from jax.sharding, where the script lacks them."""
    alias = script.names.alias
    missing = [name for name, ok in (("NamedSharding", alias.get("NamedSharding", "").endswith("NamedSharding")),
                                     ("PartitionSpec as P", alias.get("P") in _SPEC_MAKERS)) if not ok]
    if not missing:
        return source
    imports = [n for n in script.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    at = imports[-1].end_lineno if imports else 0
    lines = source.splitlines(keepends=True)
    lines.insert(at, f"from jax.sharding import {', '.join(missing)}\n")
    return "".join(lines)


# ------------------------------------------------------------------------------ files

def _sources(path: Path, shown: Path) -> Iterator[tuple[str, str, int]]:
    """(text, the name findings give, first line) for a script, each cell of a notebook, or
    every .py file under a folder; `shown` is how the path is written in the findings."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.py") if not any(
            part.startswith(".") or part in ("__pycache__", "site-packages") for part in p.parts))
        if not files:
            raise MigrateError(f"{path}: a folder with no .py file in it")
        for file in files:
            yield from _sources(file, shown / file.relative_to(path))
        return
    if not path.exists():
        raise MigrateError(f"{path}: no such file; check the path")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise MigrateError(f"{path}: cannot be read as text ({error})") from None
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(text)["cells"]
        except (ValueError, KeyError, TypeError):
            raise MigrateError(f"{path}: not a Jupyter notebook (no cells in its JSON)") from None
        number = 0
        for cell in cells:
            if cell.get("cell_type") != "code":
                continue
            number += 1
            source = "".join(cell.get("source", []))
            # IPython's own syntax (%magic, !shell) is not Python: blank it, keeping line numbers
            source = re.sub(r"^\s*[%!].*$", "", source, flags=re.MULTILINE)
            yield source, f"{shown} cell {number}", 1
        return
    yield text, str(shown), 1


def migrate(path: str | Path, *, show: bool = True, relative_to: str | Path | None = None) -> list[Finding]:
    """Every finding for a script, a notebook (cell by cell) or a folder; printed when `show`.

    Findings name the path as given, or relative to `relative_to`.
    """
    found: list[Finding] = []
    path = Path(path)
    shown = path.relative_to(relative_to) if relative_to is not None else path
    for text, name, first in _sources(path, shown):
        try:
            found += findings(text, name, first_line=first)
        except SyntaxError as error:
            raise MigrateError(f"{name}:{error.lineno}: not valid Python ({error.msg}); fix that "
                               "line first (the tool reads the script, it never runs it)") from None
    if show:
        print("\n".join(map(str, found)) if found else "nothing to change")
    return found


def _diff(path: Path) -> str:
    """A unified diff of the safe rewrites of one script ('' if none)."""
    if path.suffix != ".py":
        return ""
    old = path.read_text(encoding="utf-8")
    new, _ = rewrite(old)
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        f"{path}", f"{path} (suggested)"))


def main(argv: list[str] | None = None) -> int:
    """Command line: the findings, one a line; exit 0 (none), 1 (some) or 2 (a bad path)."""
    parser = argparse.ArgumentParser(
        prog="python -m helpers.migrate",
        description="Say what the course teaches about each pmap-era line of your script "
                    "(read with ast, never run).")
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="a .py script, a .ipynb notebook, or a folder of scripts")
    parser.add_argument("--diff", action="store_true",
                        help="also print a suggested rewrite of what can be rewritten safely")
    opts = parser.parse_args(argv)
    found: list[Finding] = []
    try:
        for path in opts.paths:
            found += migrate(path, show=False)
    except MigrateError as error:
        print(f"migrate: {error}", file=sys.stderr)
        return 2
    print("\n".join(map(str, found)) if found else "nothing to change")
    if opts.diff:
        files = [Path(p) for p in opts.paths]
        files = [f for d in files for f in (sorted(d.rglob("*.py")) if d.is_dir() else [d])]
        diffs = [d for d in map(_diff, files) if d]
        print("\n" + ("".join(diffs) if diffs else "(no finding here can be rewritten safely; "
                                                    "the lines above say what to write)"), end="")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
