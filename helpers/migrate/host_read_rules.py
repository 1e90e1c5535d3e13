"""The rules for reading a step's results on the host: numpy of a pmap output (one global array over every
host's devices after the port), and a pmap over one device per host that combines each host's values.

Each rule reads a `Script` and yields (node, rule name, what the line does on several hosts, what to write
instead); `LESSONS` names the notebook section that teaches each rule's fix.
"""
from __future__ import annotations

import ast
import re
from typing import Iterator

from helpers.migrate.across_hosts import pmaps_over_hosts
from helpers.migrate.bindings import bound_value, mapped_tree
from helpers.migrate.data_rules import traced as _traced
from helpers.migrate.jax_rules import holds_pmap_stacks, pmapped_out_of_view
from helpers.migrate.once import once
from helpers.migrate.script import MESH_AXES, Script, code_of, first_copy_of, is_name, keyword

# rule -> (notebook, section heading without its number): where the course teaches the fix
LESSONS: dict[str, tuple[str, str]] = {
    "numpy-of-global": ("12", "`process_allgather`: read a global array on every host"),
    "pmap-over-hosts": ("12", "`process_allgather`: read a global array on every host"),
}


def pmap_over_hosts(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for call in pmaps_over_hosts(s):
        yield (call, "pmap-over-hosts",
               f"jax.pmap(..., devices={code_of(keyword(call, 'devices'))}) maps over one device per host to "
               "combine each host's values: a pmap across processes, which the port to a mesh drops",
               "jax.experimental.multihost_utils.process_allgather(values) on every host (a leading axis of "
               "process_count()) and a sum over it; or, inside the step, jax.lax.psum over 'host' of a value that "
               "is the same on each host's devices")


def _numpy_call(s: Script, call: ast.Call) -> bool:
    name = s.name(call.func)
    return name.startswith("numpy.") and not name.startswith("numpy.random.")


@once
def _pmapped(s: Script) -> set[str]:
    """The names of pmapped functions: the script's own pmaps, those the project pmaps out of view, the project's
    functions it imports that run a pmapped step and return its output (`from models import sample`), functions a
    script's function is handed and calls with pmap's stacks, and the script's functions that return what one of
    those gave back (`def sample(...): ...; return predictions`)."""
    pmapped = s.pmapped_names() | {name for names in pmapped_out_of_view(s).values() for name in names}
    pmapped |= imported_pmap_runners(s)
    pmapped |= _handed_pmapped(s, pmapped)
    for _ in range(3):  # a function returning another's output: followed three calls deep
        returning = _returning_outputs(s, pmapped, _outputs_by_scope(s, pmapped))
        if returning <= pmapped:
            break
        pmapped |= returning
    return pmapped


def imported_pmap_runners(s: Script) -> set[str]:
    """The project's functions the script imports by name (and does not define) that run a pmapped step and return
    its output, or are pmapped steps themselves (project.py reads them from their bodies)."""
    return {name for name in s.folder.pmap_runners if name in s.names.alias and name not in s.defined}


def _returning_outputs(s: Script, pmapped: set[str], outputs: set[tuple[ast.AST, str]]) -> set[str]:
    """The script's functions that return a pmap output, or a tuple holding one (`return predictions, real`)."""
    return {f.name for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef) and f.name not in pmapped and any(
        isinstance(r, ast.Return) and r.value is not None and s.enclosing_function(r) is f and any(
            isinstance(v, ast.Name) and (f, v.id) in outputs or _pmap_output_call(s, v, pmapped)
            for v in _items(r.value)) for r in ast.walk(f))}


@once
def _pmapped_methods(s: Script) -> frozenset[str]:
    """Methods of the script's classes that pmap decorates (`@partial(jax.pmap, ...)` over `def denoise(self, ...)`),
    called on an instance under any name; a name that a dict, list, set or str also has is left out (`update`)."""
    pmaps = {*s.pmaps(), *s.nnx_pmaps()}
    builtin = {m for kind in (dict, list, set, str) for m in dir(kind)}
    return frozenset(f.name for c in ast.walk(s.tree) if isinstance(c, ast.ClassDef) for f in c.body
                     if isinstance(f, ast.FunctionDef) and f.name not in builtin
                     and any(d in pmaps or any(n in pmaps for n in ast.walk(d)) for d in f.decorator_list))


def _handed_pmapped(s: Script, pmapped: set[str]) -> set[str]:
    """Parameters called with pmap's stacks (`p_sample_op(config, params=state.params, rng=keys)`, state replicated
    and keys from shard_prng_key): a pmapped function handed in."""
    return {call.func.id for call in s.calls if isinstance(call.func, ast.Name) and _is_parameter(s, call.func)
            and any(holds_pmap_stacks(s, a, pmapped) for a in [*call.args, *(k.value for k in call.keywords)])}


def _is_parameter(s: Script, name: ast.Name) -> bool:
    function = s.enclosing_function(name)
    return function is not s.tree and name.id in {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}


def _pmap_output_call(s: Script, value: ast.AST | None, pmapped: set[str]) -> bool:
    """`step(...)` of a pmapped function, or an item of its output (`step(...)[0]`)."""
    while isinstance(value, ast.Subscript) or _waits_for(value) or _a_field(s, value):
        value = value.func.value if _waits_for(value) else value.value
    return isinstance(value, ast.Call) and _calls_pmapped(s, value.func, pmapped)


def _a_field(s: Script, value: ast.AST | None) -> bool:
    """`generate(...).sequences`: a field of the output (not a method called on it)."""
    holder = s.parent.get(value)
    return isinstance(value, ast.Attribute) and isinstance(value.value, ast.Call) \
        and not (isinstance(holder, ast.Call) and holder.func is value)


def _waits_for(value: ast.AST) -> bool:
    """`out.block_until_ready()`: the output itself, once computed."""
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
        and value.func.attr == "block_until_ready" and not value.args


@once
def _pmap_outputs_by_scope(s: Script) -> set[tuple[ast.AST, str]]:
    return _outputs_by_scope(s, _pmapped(s))


def _outputs_by_scope(s: Script, pmapped: set[str]) -> set[tuple[ast.AST, str]]:
    """(function, name) for each name a function assigns from a call of a pmapped function (or arithmetic on one:
    `sample = (sample + 1) / 2`), each list it appends one to (`rewards.append(p_apply(...))`), and each parameter
    of the script's functions that a call passes such a name to (`tohost(predicted)`)."""
    found = {(s.enclosing_function(node), n.id) for node in ast.walk(s.tree) if isinstance(node, ast.Assign)
             and _pmap_output_call(s, node.value, pmapped)
             for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    for node in ast.walk(s.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.BinOp, ast.UnaryOp)) and any(
                isinstance(n, ast.Name) and (s.enclosing_function(node), n.id) in found for n in ast.walk(node.value)):
            found |= {(s.enclosing_function(node), t.id) for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append" \
                and isinstance(node.func.value, ast.Name) and len(node.args) == 1 and (
                _pmap_output_call(s, node.args[0], pmapped)
                or isinstance(node.args[0], ast.Name) and (s.enclosing_function(node), node.args[0].id) in found):
            found.add((s.enclosing_function(node), node.func.value.id))
    defs = {n.name: n for n in ast.walk(s.tree) if isinstance(n, ast.FunctionDef)}
    for call in s.calls:
        target = defs.get(call.func.id) if isinstance(call.func, ast.Name) else None
        if target is not None:
            params = [a.arg for a in target.args.args]
            found |= {(target, params[i]) for i, arg in enumerate(call.args[:len(params)])
                      if isinstance(arg, ast.Name) and (s.enclosing_function(call), arg.id) in found
                      or _pmap_output_call(s, arg, pmapped)}
    return found


def _calls_pmapped(s: Script, func: ast.AST, pmapped: set[str]) -> bool:
    """`step(...)` of a pmapped name, or `pad_shard_unpad(step)(...)`: Flax's wrapper, whose output is pmap's rows."""
    if isinstance(func, ast.Call) and s.name(func.func).endswith("pad_shard_unpad") and func.args:
        func = func.args[0]
    return isinstance(func, ast.Name) and func.id in pmapped or _a_pmapped_attribute(s, func) \
        or isinstance(func, ast.Attribute) and func.attr in _pmapped_methods(s)


def _a_pmapped_attribute(s: Script, func: ast.AST) -> bool:
    """`self.p_generate(...)` where a method binds `self.p_generate = jax.pmap(...)`."""
    pmaps = {*s.pmaps(), *s.nnx_pmaps()}
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" \
        and any(isinstance(node, ast.Assign) and node.value in pmaps and any(
            isinstance(t, ast.Attribute) and code_of(t) == code_of(func) for t in node.targets)
            for node in ast.walk(s.tree))


def pmap_output(s: Script, expr: ast.AST | None) -> bool:
    """A pmap output on the host: a name holding one (or a parameter its callers hand one), or the pmapped call
    itself (or an item of it)."""
    pmapped = _pmapped(s)
    return _is_pmap_output(s, expr, _pmap_outputs_by_scope(s), pmapped) or _pmap_output_call(s, expr, pmapped)


def _is_pmap_output(s: Script, name: ast.AST, outputs: set[tuple[ast.AST, str]], pmapped: set[str]) -> bool:
    """A name read where it holds a pmap output: bound last to a pmapped call (or an item of it), or a parameter its
    function's callers pass one to."""
    if not isinstance(name, ast.Name):
        return False
    value = bound_value(s, name)
    if value is None or isinstance(value, (ast.BinOp, ast.UnaryOp, ast.List)):  # arithmetic on one, a list of them
        return (s.enclosing_function(name), name.id) in outputs
    return _pmap_output_call(s, value, pmapped)


def _read_output(s: Script, read: ast.AST | None, outputs: set[tuple[ast.AST, str]], pmapped: set[str]) -> bool:
    """A pmap output as numpy's argument: the name, arithmetic on it (`samples * 255`), or the pmapped call."""
    if isinstance(read, ast.BinOp):
        return any(_is_pmap_output(s, side, outputs, pmapped) for side in (read.left, read.right))
    return _is_pmap_output(s, read, outputs, pmapped) or (
        isinstance(read, ast.Call) and isinstance(read.func, ast.Name) and read.func.id in pmapped)


def _indexed_at_zero(s: Script, call: ast.Call) -> bool:
    """`np.asarray(out)[0]`: device 0's copy, which jax_rules says (jax-utils-replicate)."""
    held = s.parent.get(call)
    return isinstance(held, ast.Subscript) and held.value is call and isinstance(held.slice, ast.Constant) \
        and held.slice.value == 0


def numpy_of_global(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    pmapped = _pmapped(s)
    outputs = _pmap_outputs_by_scope(s)
    for call in s.calls:
        read = call.args[0] if call.args and _numpy_call(s, call) else None
        if _read_output(s, read, outputs, pmapped) and not _indexed_at_zero(s, call):
            yield (call, "numpy-of-global",
                   f"{code_of(call.func)}({code_of(read)}, ...) reads a pmap output as this host's numpy array; "
                   "after the port a per-example output is one global array over every host's devices, and numpy "
                   "of it raises on several hosts (other hosts hold part of it)",
                   "this host's rows: jax.experimental.multihost_utils.global_array_to_host_local_array(out, mesh, "
                   f"P({MESH_AXES})); every host's: multihost_utils.process_allgather(out); a P() output (a pmean) "
                   "reads as it is")


_READS_ON_HOST = ("item", "tolist", "float", "int")


def _reads_each_leaf(s: Script, function: ast.AST) -> ast.AST | None:
    """A tree map's lambda that reads its leaf on the host: `lambda x: jnp.mean(x).item()`, `lambda x: float(x)`,
    `lambda x: np.asarray(x)`; the reading call, or None."""
    if not isinstance(function, ast.Lambda) or not function.args.args:
        return None
    for node in ast.walk(function.body):
        if isinstance(node, ast.Call) and (isinstance(node.func, ast.Attribute) and node.func.attr in _READS_ON_HOST
                                           and not node.args or s.name(node.func) in _READS_ON_HOST
                                           or _numpy_call(s, node)):
            return node
    return None


def _first_copy(function: ast.Lambda) -> bool:
    """`lambda x: float(x[0])`: the leaf's first row, device 0's copy of pmap's stack, not the whole leaf."""
    param = function.args.args[0].arg
    return any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == param
               and isinstance(n.slice, ast.Constant) and n.slice.value == 0 for n in ast.walk(function.body))


def leaves_read_on_host(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`jax.tree_map(lambda x: jnp.mean(x).item(), losses)` of a pmap output: each leaf read as a Python number or
    numpy on this host."""
    pmapped = _pmapped(s)
    outputs = _pmap_outputs_by_scope(s)
    for call in s.calls:
        if not (s.is_tree_map(call) and len(call.args) == 2 and _is_pmap_output(s, call.args[1], outputs, pmapped)):
            continue
        read = _reads_each_leaf(s, call.args[0])
        if read is not None and not _first_copy(call.args[0]):  # x[0]: device 0's copy, jax-utils-replicate's
            yield (call, "numpy-of-global",
                   f"{code_of(call.func)}(lambda ...: {code_of(read)}, {code_of(call.args[1])}) reads each leaf of a "
                   "pmap output on this host; after the port a per-device output is one global array over every "
                   "host's devices, which this host cannot read whole (other hosts hold part of it)",
                   "reduce inside the step (jax.lax.pmean over the mesh's axes, out_specs P()) and read the "
                   "replicated value; or multihost_utils.process_allgather(out) first")


def host_rows_by_size(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`jnp.reshape(out, [local_batch_size, n])` of a pmap output, the size counted per host: this host's rows."""
    pmapped = _pmapped(s)
    outputs = _pmap_outputs_by_scope(s)
    for call in s.calls:
        if not is_name(s.name(call.func), "jax.numpy.reshape", "numpy.reshape") or len(call.args) < 2:
            continue
        shape = call.args[1]
        first = shape.elts[0] if isinstance(shape, (ast.List, ast.Tuple)) and shape.elts else shape
        if _is_pmap_output(s, call.args[0], outputs, pmapped) and _counts_per_host(s, first):
            yield (call, "numpy-of-global",
                   f"{code_of(call)} reshapes pmap's output to this host's {code_of(first)} rows; after the port the "
                   "output is one global array over every host's rows, and a reshape to one host's count fails "
                   "(or mixes hosts' rows)",
                   f"{THIS_HOSTS_ROWS}, then the reshape; every host's: multihost_utils.process_allgather(out)")


def _counts_per_host(s: Script, size: ast.AST) -> bool:
    """A count of one host's share: from jax.local_device_count(), or a total divided by jax.process_count()."""
    size = s.value(size)
    for node in ast.walk(size):
        if isinstance(node, ast.Call) and is_name(s.name(node.func), "jax.local_device_count"):
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Div)) and any(
                isinstance(n, ast.Call) and is_name(s.name(n.func), "jax.process_count") for n in ast.walk(node.right)):
            return True
    return False


def _flattens_devices(call: ast.Call, shape: list[ast.AST] | None = None) -> bool:
    """`out.reshape((-1, d))` or `out.reshape(-1, d)` (or a new `shape` given apart): the leading (device) axes
    merged into rows."""
    shape = call.args if shape is None else shape
    first = shape[0] if shape else None
    if isinstance(first, ast.Tuple) and first.elts:
        first = first.elts[0]
    return isinstance(first, ast.UnaryOp) and isinstance(first.op, ast.USub) and isinstance(first.operand, ast.Constant)


def _reshaped(s: Script, call: ast.Call) -> tuple[ast.AST | None, list[ast.AST]]:
    """The array a reshape reshapes and the arguments of its new shape: `x.reshape(...)`, `jnp.reshape(x, ...)`."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "reshape"):
        return None, []
    if is_name(s.name(call.func), "numpy.reshape", "jax.numpy.reshape"):
        return (call.args[0], call.args[1:]) if call.args else (None, [])
    return call.func.value, call.args


def host_rows_of_global(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`emb = emb.reshape((-1, d))` of a pmap output: its per-device stack folded into this host's rows (read with
    numpy there: the read is said), which the host then indexes with its own (host-local) positions."""
    pmapped = _pmapped(s)
    outputs = _pmap_outputs_by_scope(s)
    for call in s.calls:
        owner, shape = _reshaped(s, call)
        if not (_is_pmap_output(s, owner, outputs, pmapped) and _flattens_devices(call, shape)):
            continue
        reader = s.parent.get(call)
        if isinstance(reader, ast.Call) and reader.args[:1] == [call] and (
                _numpy_call(s, reader) or is_name(s.name(reader.func), "jax.device_get")):
            yield (reader, "numpy-of-global",
                   f"{code_of(reader.func)}({code_of(call)}) reads pmap's per-example output as this "
                   "host's rows; after the port the output is one global array over every host's rows, and "
                   f"{code_of(reader.func)} of it raises on several hosts (other hosts hold part of it)",
                   f"{THIS_HOSTS_ROWS}; every host's: multihost_utils.process_allgather(out)")
        else:
            yield (call, "local-batch",
                   f"{code_of(call)} folds pmap's leading axis of local devices into this host's rows; after the port "
                   "the output has no device axis (its first axis already is every host's rows), so the merge takes "
                   "the wrong axes, and this host's positions (a permutation, an index) no longer pick its own rows",
                   f"drop the merge; {THIS_HOSTS_ROWS}; or keep the computation global and index with global "
                   "positions")


_STRIPS = ("reshape", "astype", "squeeze", "block_until_ready", "copy", "flatten", "ravel", "transpose")


def _root(node: ast.AST | None) -> ast.AST | None:
    """The value an expression reads pmap's arrays from: `out` of `out.metrics`, `out[1]`, `out.reshape(-1, d)`."""
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _STRIPS:
            node = node.func.value
        else:
            return node


def _yielded_by(s: Script, function: ast.FunctionDef) -> list[ast.AST]:
    return [n.value for n in ast.walk(function) if isinstance(n, (ast.Yield, ast.Return)) and n.value is not None]


def _stacked_input(s: Script, node: ast.AST | None, depth: int = 0) -> ast.Call | None:
    """Flax's `shard(batch)` that a value's rows come from: a batch stacked per local device for pmap, through names,
    items, `next(loader)` and the script's own loader functions (what they yield or return)."""
    node = _root(node)
    if depth > 8 or node is None:
        return None
    if isinstance(node, ast.Name):
        return _stacked_input(s, bound_value(s, node), depth + 1)
    if not isinstance(node, ast.Call):
        return None
    name = s.name(node.func)
    if is_name(name, "flax.training.common_utils.shard"):
        return node
    if is_name(name, "next", "iter") and node.args:
        return _stacked_input(s, node.args[0], depth + 1)
    defs = {f.name: f for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef)}
    function = defs.get(node.func.id) if isinstance(node.func, ast.Name) else None
    if function is not None:
        return next(filter(None, (_stacked_input(s, v, depth + 1) for v in _yielded_by(s, function))), None)
    return None


_SAVES = ("pickle.dump", "pickle.dumps", "numpy.save", "numpy.savez", "numpy.savez_compressed")


def _items(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, (ast.Tuple, ast.List)):
        return [i for e in node.elts for i in _items(e)]
    if isinstance(node, ast.Dict):
        return [i for e in node.values for i in _items(e)]
    return [node]


def global_read_whole(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`jax.device_get(out)` or `pickle.dump((out.metrics, ...), f)` of a pmap output, or device_get of a batch flax's
    shard() stacked for pmap: after the port each is one global array over every host's devices, which no host holds
    whole."""
    pmapped = _pmapped(s)
    outputs = _pmap_outputs_by_scope(s)
    for call in s.calls:
        name = s.name(call.func)
        if is_name(name, "jax.device_get") and call.args:
            read = call.args[0]
            holder = s.parent.get(call)
            unreplicated = isinstance(holder, ast.Call) and s.name(holder.func).endswith("unreplicate")
            if _indexed_at_zero(s, call) or first_copy_of(read, lambda held: True) or unreplicated or (
                    isinstance(read, ast.Call) and _flattens_devices(read)
                    and _is_pmap_output(s, _root(read), outputs, pmapped)):
                continue  # device 0's copy (jax_rules), or a reshape of the stack host_rows_of_global says
            items = [read]
        elif is_name(name, *_SAVES) and call.args:
            items = _items(call.args[1] if name.startswith("numpy.") and len(call.args) > 1 else call.args[0])
        else:
            continue
        output = next((i for i in items if _is_pmap_output(s, _root(i), outputs, pmapped)
                       or _pmap_output_call(s, _root(i), pmapped)), None)
        stacked = None if output is not None or not name.endswith("device_get") else _stacked_input(s, items[0])
        if output is not None and _replicated_before(s, _root(output)):
            yield (call, "jax-utils-replicate",
                   f"{code_of(call.func)}(...) reads {code_of(output)}, which the script copied onto every local "
                   "device (a replicate) and a pmapped step hands back: pmap's stack of copies, one per device",
                   "keep one copy: the state as one global array replicated over the mesh (jax.device_put(x, "
                   "NamedSharding(mesh, P()))), which each host reads (or saves) as it is")
        elif output is not None:
            yield (call, "numpy-of-global",
                   f"{code_of(call.func)}(...) reads {code_of(output)}, a pmap output, whole on this host; after "
                   "the port a per-device output is one global array over every host's devices, and reading it "
                   "whole raises on several hosts (other hosts hold part of it)",
                   f"{THIS_HOSTS_ROWS}; every host's: multihost_utils.process_allgather(out); a P() output (a "
                   "pmean) reads as it is")
        elif stacked is not None:
            yield (call, "numpy-of-global",
                   f"{code_of(call.func)}({code_of(items[0])}) reads rows of a batch {code_of(stacked.func)}() "
                   "stacked for pmap; after the port the batch is one global array over every host's devices "
                   "(jax.make_array_from_process_local_data), and reading it whole raises on several hosts",
                   "keep this host's rows from before the batch is made global (the loader's numpy batch), or "
                   "multihost_utils.process_allgather(batch) for every host's")


_REPLICATES = ("jax.device_put_replicated", "flax.jax_utils.replicate", "jax_utils.replicate")


def _replicated_before(s: Script, read: ast.AST) -> bool:
    """`params = jax.device_put_replicated(params, devices)` somewhere in the read's function, the name a pmapped
    step hands back: a stack of copies of the state, not a per-device output."""
    if not isinstance(read, ast.Name):
        return False
    scope = s.scope(read)
    return any(isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and is_name(s.name(n.value.func),
                                                                                        *_REPLICATES)
               and any(isinstance(t, ast.Name) and t.id == read.id for t in n.targets)
               for n in ast.walk(scope))


def _through_host_copies(s: Script, node: ast.AST | None, outputs, pmapped, depth: int = 0) -> bool:
    """A pmap output, or its copy on the host (`jax.device_get(out)`, `np.asarray(out)`), through names."""
    if depth > 6 or node is None:
        return False
    if _is_pmap_output(s, node, outputs, pmapped) or _pmap_output_call(s, node, pmapped):
        return True
    value = bound_value(s, node) if isinstance(node, ast.Name) else node
    if isinstance(value, ast.Call) and value.args and (
            is_name(s.name(value.func), "jax.device_get") or _numpy_call(s, value)):
        return _through_host_copies(s, value.args[0], outputs, pmapped, depth + 1)
    return False


def device_axis_merged_in_a_tree_map(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`tree_map(lambda x: x.reshape((-1, *x.shape[3:])), samples)` of a pmap output (or its device_get): pmap's
    leading device axis folded into the rows by hand."""
    pmapped = _pmapped(s)
    outputs = _pmap_outputs_by_scope(s)
    for call in s.calls:
        if not (s.is_tree_map(call) and len(call.args) == 2 and isinstance(call.args[0], ast.Lambda)
                and _through_host_copies(s, call.args[1], outputs, pmapped)):
            continue
        merge = next((n for n in ast.walk(call.args[0].body) if isinstance(n, ast.Call)
                      and isinstance(n.func, ast.Attribute) and n.func.attr == "reshape" and _flattens_devices(n)), None)
        if merge is not None:
            yield (call, "local-batch",
                   f"{code_of(merge)} folds pmap's leading axis of local devices into the rows of each leaf of "
                   f"{code_of(call.args[1])}, by hand; after the port the output has no device axis (its first axis "
                   "already is every device's rows), so the merge takes the wrong axes",
                   "drop the merge: the global output's rows are one axis; this host's rows are "
                   "multihost_utils.global_array_to_host_local_array(out, mesh, P(('host', 'device')))")


def _merges_two_leading(call: ast.Call, owner: ast.AST) -> bool:
    """`y.reshape((bs,) + y.shape[2:])` or `y.reshape(bs, *y.shape[2:])`: the two leading axes merged into one."""
    return any(isinstance(n, ast.Subscript) and code_of(n.value) == f"{code_of(owner)}.shape"
               and isinstance(n.slice, ast.Slice) and n.slice.upper is None and isinstance(n.slice.lower, ast.Constant)
               and n.slice.lower.value == 2 for a in call.args for n in ast.walk(a)) and bool(call.args) and not any(
        isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value in (0, 1)
        and code_of(n.value) == f"{code_of(owner)}.shape" for a in call.args for n in ast.walk(a))


def device_axis_merged_on_a_host_copy(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`y_np = np.asarray(jax.device_get(y))` of a pmap output, then `y_np.reshape((bs,) + y_np.shape[2:])` or
    `y_np.reshape(-1, ...)`: pmap's leading axis of local devices folded into the rows by hand, on the host."""
    pmapped = _pmapped(s)
    outputs = _pmap_outputs_by_scope(s)
    for call in s.calls:
        owner = call.func.value if isinstance(call.func, ast.Attribute) and call.func.attr == "reshape" else None
        if not isinstance(owner, ast.Name) or _is_pmap_output(s, owner, outputs, pmapped) \
                or not (_flattens_devices(call) or _merges_two_leading(call, owner)):
            continue  # a reshape of the output itself: host_rows_of_global
        if _host_copy_of_output(s, owner):
            yield (call, "local-batch",
                   f"{code_of(call)} folds pmap's leading axis of local devices into the rows of {code_of(owner)}, "
                   "this host's copy of a pmap output, by hand; after the port the output has no device axis (its "
                   "first axis already is every device's rows), so the merge takes the wrong axes",
                   "drop the merge: the global output's rows are one axis; this host's rows are "
                   f"multihost_utils.global_array_to_host_local_array(out, mesh, P({MESH_AXES}))")


def said_fold(s: Script, call: ast.Call) -> bool:
    """A `.reshape(-1, ...)` (or `jnp.reshape(x, (-1, ...))`) these rules say: of a pmap output
    (host_rows_of_global), of this host's numpy copy of one (device_axis_merged_on_a_host_copy), or read by device_get
    from a batch flax's shard() stacked (global_read_whole)."""
    owner, shape = _reshaped(s, call)
    if owner is None or not _flattens_devices(call, shape):
        return False
    owner = mapped_tree(s, owner) or owner  # `tree_map(lambda x: x.reshape(-1, ...), outputs)`: the outputs
    reader = s.parent.get(call)
    if pmap_output(s, owner) or isinstance(reader, ast.Call) and is_name(s.name(reader.func), "jax.device_get") \
            and reader.args[:1] == [call] and _stacked_input(s, call) is not None:
        return True
    return isinstance(owner, ast.Name) and _host_copy_of_output(s, owner)


def _host_copy_of_output(s: Script, name: ast.Name) -> bool:
    """A name bound to this host's copy of a pmap output: `y_np = np.asarray(jax.device_get(y))`."""
    copy = bound_value(s, name)
    return isinstance(copy, ast.Call) and bool(copy.args) and (
        is_name(s.name(copy.func), "jax.device_get") or _numpy_call(s, copy)) \
        and _through_host_copies(s, copy.args[0], _pmap_outputs_by_scope(s), _pmapped(s))


_MASK_WORDS = re.compile(r"(^|_)(mask|masks|valid|done|dones|terminated|truncated|keep)$|^is_")


def _a_mask(s: Script, index: ast.AST, outputs, pmapped) -> bool:
    """An index that is an array of booleans: a comparison (`x == 1`), `~m`, `a & b`, or an array of a pmap output
    named as a mask (`out.terminated`, `batch_mask`)."""
    if isinstance(index, ast.Compare) or isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.Invert) \
            or isinstance(index, ast.BinOp) and isinstance(index.op, (ast.BitAnd, ast.BitOr)):
        return True
    last = index.attr if isinstance(index, ast.Attribute) else index.id if isinstance(index, ast.Name) else ""
    if isinstance(index, ast.Subscript) and isinstance(index.slice, ast.Constant):  # out['terminated']
        last = str(index.slice.value)
    return bool(_MASK_WORDS.search(last)) and _through_host_copies(s, _root(index), outputs, pmapped)


def masked_rows_of_global(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`out.lengths[out.terminated]` on the host, of a pmap output: boolean indexing, whose result's shape depends on
    the data, reads the mask's values on this host."""
    pmapped = _pmapped(s)
    outputs = _pmap_outputs_by_scope(s)
    for node in ast.walk(s.tree):
        if not (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)) or _traced(s, node):
            continue
        if _through_host_copies(s, _root(node.value), outputs, pmapped) and _a_mask(s, node.slice, outputs, pmapped):
            yield (node, "numpy-of-global",
                   f"{code_of(node)} picks rows of a pmap output by a mask on the host: a shape that depends on the "
                   "mask's values, which the host must read whole; after the port the output and the mask are global "
                   "arrays over every host's devices, which no host holds whole (it raises on several hosts)",
                   "reduce with the mask instead of selecting (jnp.where(mask, x, 0).sum() / mask.sum(), in the step "
                   f"or under jit); or select on {THIS_HOSTS_ROWS}")


THIS_HOSTS_ROWS = ("this host's rows: jax.experimental.multihost_utils.global_array_to_host_local_array(out, mesh, "
                    f"P({MESH_AXES}))")


def pmap_output_on_host(s: Script, expr: ast.AST) -> bool:
    """A pmap output, or its copy on the host (`jax.device_get(out)`), as these rules follow them."""
    return _through_host_copies(s, expr, _pmap_outputs_by_scope(s), _pmapped(s))


RULES = (pmap_over_hosts, numpy_of_global, host_rows_of_global, host_rows_by_size, leaves_read_on_host,
         global_read_whole, device_axis_merged_in_a_tree_map, masked_rows_of_global,
         device_axis_merged_on_a_host_copy)
