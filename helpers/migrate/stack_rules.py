"""Batches a loader stacks per device: `ds.batch(per_device).batch(n_devices)`, a dataset batched a second time by a
count of devices, which makes pmap's leading axis on the host (imported by mesh_rules, whose RULES hold these)."""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.batch_rules import batch_source
from helpers.migrate.bindings import arguments_for, bound_value, device_count_of, host_index_in
from helpers.migrate.data_rules import pmap_era
from helpers.migrate.feeds import fed_to_pmap
from helpers.migrate.jax_rules import count_through_callers
from helpers.migrate.old_api_rules import pjit_calls
from helpers.migrate.script import MESH_AXES, Script, code_of, is_name

LESSONS: dict[str, tuple[str, str]] = {}


def _batch_size(call: ast.AST) -> ast.AST | None:
    """The size of `ds.batch(size, ...)` (or `batch_size=`), None for anything else."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "batch"):
        return None
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "batch_size"), None)


def _count(s: Script, node: ast.AST) -> str | None:
    return count_through_callers(s, node) if isinstance(node, (ast.Name, ast.Call)) else None


def _divided_by_every_device(s: Script, size: ast.AST) -> ast.AST | None:
    """Where a per-device size is made from a batch divided by a count of every device (`per_core, rem =
    divmod(batch_size, len(jax.devices()))`, `bs // jax.device_count()`): that expression, else None."""
    made = bound_value(s, size) if isinstance(size, ast.Name) else size
    if isinstance(made, ast.Subscript):  # `divmod(...)[0]`
        made = made.value
    if isinstance(made, ast.Call) and code_of(made.func) == "divmod" and len(made.args) == 2:
        divisor = made.args[1]
    elif isinstance(made, ast.BinOp) and isinstance(made.op, (ast.FloorDiv, ast.Div)):
        divisor = made.right
    else:
        return None
    return made if _count(s, divisor) == "every" else None


def batched_per_device(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`ds.batch(per_device).batch(n)` with n a count of devices, in a script that pmaps: the loader makes the leading
    device axis pmap strips (both batch() calls make the stack); when n counts every device and per_device is a batch
    divided by every device, each host loads the whole global batch."""
    if not s.pmaps_here():
        return
    for call in s.calls:
        size = _batch_size(call)
        counted = _count(s, size) if size is not None else None
        if counted is None:
            continue
        inner = _batch_size(call.func.value)
        said = call.args and device_count_of(s, call.args[0]) == "local"  # batch_rules says it
        for node in [*([] if said else [size]), *([inner] if inner is not None else [])]:
            yield (node, "local-batch",
                   f".batch({code_of(node)}) stacks this host's rows per device, the leading axis of "
                   f"{code_of(size)} devices that pmap strips",
                   "one .batch(global_batch // jax.process_count()) per host, no device axis: pass the rows to "
                   f"jax.make_array_from_process_local_data(NamedSharding(mesh, P({MESH_AXES})), rows)")
        made = _divided_by_every_device(s, inner) if inner is not None and counted == "every" else None
        if made is not None:
            yield (made, "global-batch-per-host",
                   f"{code_of(made)} sizes a batch per device of every host, and this host stacks one for each of "
                   "jax.device_count() devices: every host loads the whole global batch",
                   "each host loads global_batch // jax.process_count() rows, its own part (a shard of the data "
                   "per host), and they make one global array")



def _counts_hosts(s: Script, node: ast.AST | None) -> bool:
    node = bound_value(s, node) if isinstance(node, ast.Name) else node
    return isinstance(node, ast.Call) and is_name(s.name(node.func), "jax.process_count", "host_count")


_AS_ARRAY = ("numpy.asarray", "numpy.array", "jax.numpy.asarray", "jax.numpy.array")


def _loaded_at(s: Script, array: ast.AST) -> ast.AST | None:
    """The statement that binds what `array` holds, back through names and np.asarray(): where it was loaded."""
    for _ in range(8):
        while isinstance(array, ast.Call) and is_name(s.name(array.func), *_AS_ARRAY) and array.args:
            array = array.args[0]
        bound = bound_value(s, array) if isinstance(array, ast.Name) else None
        if bound is None:
            break
        statement = bound
        while statement is not None and not isinstance(statement, ast.stmt):
            statement = s.parent.get(statement)
        if not (isinstance(bound, ast.Call) and is_name(s.name(bound.func), *_AS_ARRAY)):
            return statement
        array = bound
    return None


def rows_of_every_host(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`np.reshape(batch, (jax.process_count(), jax.local_device_count(), ...))` in a pmap-era script: the batch a
    host loaded holds every host's rows (said where it is loaded), and `batch[jax.process_index()]` handed to a
    pmapped function keeps this host's part of it."""
    if not pmap_era(s):
        return
    said = set()
    for call in s.calls:
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "reshape"):
            continue
        array, shape = (call.args[:2] if len(call.args) >= 2 and is_name(s.name(call.func), "numpy.reshape",
                                                                        "jax.numpy.reshape")
                        else (call.func.value, call.args[0] if len(call.args) == 1 else None))
        shape = bound_value(s, shape) if isinstance(shape, ast.Name) else shape
        first = shape.elts[0] if isinstance(shape, (ast.Tuple, ast.List)) and shape.elts else None
        loaded = _loaded_at(s, array) if _counts_hosts(s, first) else None
        if loaded is not None and loaded.lineno not in said:
            said.add(loaded.lineno)
            yield (loaded, "global-batch-per-host",
                   f"{code_of(array)} is reshaped to a leading axis of jax.process_count(): every host loads the "
                   "rows of every host, the whole global batch, and keeps its own part",
                   "each host loads only its global_batch // jax.process_count() rows (a shard of the data per "
                   "host) and hands them to jax.make_array_from_process_local_data")
    for fed in fed_to_pmap(s):
        if isinstance(fed, ast.Subscript) and host_index_in(s, fed.slice) is not None:
            yield (fed, "global-batch-per-host",
                   f"{code_of(fed)} keeps this host's row of a batch that holds every host's: each host loaded "
                   "the whole global batch",
                   "each host loads only its own rows and hands them to jax.make_array_from_process_local_data "
                   f"(NamedSharding(mesh, P({MESH_AXES}))): no row picked by jax.process_index()")


_STACKS = ("numpy.stack", "jax.numpy.stack", "numpy.array", "jax.numpy.array", "numpy.asarray", "jax.numpy.asarray")


def _groups_by_local_devices(s: Script, function: ast.AST) -> bool:
    """The function counts its items by this host's devices: `i % n_devices`, `len(items) == n_devices` with
    n_devices a count of local devices (it collects one item a local device)."""
    for node in ast.walk(function):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            sides = [node.right]
        elif isinstance(node, ast.Compare) and len(node.comparators) == 1 \
                and isinstance(node.ops[0], (ast.Eq, ast.GtE)) and isinstance(node.left, ast.Call) \
                and code_of(node.left.func) == "len":
            sides = node.comparators
        else:
            continue
        if any(device_count_of(s, side) == "local" for side in sides):
            return True
    return False


def stacked_per_local_device(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`if i % n_devices == n_devices - 1: yield jax.tree.map(lambda *x: jnp.stack(x), *items)` in a pmap script: a
    function that collects one item a local device and stacks them, the leading axis pmap strips."""
    if not s.pmaps_here():
        return
    said = set()
    for call in s.calls:
        if not is_name(s.name(call.func), *_STACKS[:2]):
            continue
        function = s.enclosing_function(call)
        while isinstance(function, ast.Lambda):
            function = s.enclosing_function(s.parent.get(function, s.tree))
        if function is s.tree or function in said or not _groups_by_local_devices(s, function):
            continue
        said.add(function)
        yield (call, "local-batch",
               f"{code_of(call)} stacks items collected one per local device, the leading axis pmap strips",
               "no stacking: batch this host's rows (global_batch // jax.process_count()) and pass them to "
               f"jax.make_array_from_process_local_data(NamedSharding(mesh, P({MESH_AXES})), rows)")


_MAKES_GLOBAL = ("make_array_from_process_local_data", "host_local_array_to_global_array",
                 "make_array_from_single_device_arrays", "make_array_from_callback")


def _split_sharding(s: Script, node: ast.AST, depth: int = 0) -> bool:
    """`NamedSharding(mesh, P('i'))` (through names, `self.` attributes and what callers hand a parameter): a
    sharding that splits the leading axis of what it places over a mesh axis."""
    while isinstance(node, (ast.Name, ast.Attribute)) and depth < 6:
        bound = bound_value(s, node)
        if bound is None and isinstance(node, ast.Name):  # a parameter: what the callers hand it
            return any(_split_sharding(s, a, depth + 1) for a in arguments_for(s, node))
        if bound is None:
            return False
        node, depth = bound, depth + 1
    if not (isinstance(node, ast.Call) and is_name(s.name(node.func), "NamedSharding") and len(node.args) == 2):
        return False
    spec = node.args[1]
    return isinstance(spec, ast.Call) and is_name(s.name(spec.func), "PartitionSpec") and bool(spec.args) \
        and not (isinstance(spec.args[0], ast.Constant) and spec.args[0].value is None)


def handed_rows_put_on_a_split_sharding(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`jax.device_put(data, NamedSharding(mesh, P('i')))` of what the function is handed (a host's loaded rows, not
    a value it makes), in a script that never assembles a global array from each host's part: device_put reads its
    input as the whole global array, the same on every host, but each host hands its own rows."""
    if any(is_name(s.name(c.func), *_MAKES_GLOBAL) for c in s.calls):
        return
    for call in s.calls:
        if not (is_name(s.name(call.func), "jax.device_put") and len(call.args) == 2):
            continue
        put = call.args[0]
        handed = isinstance(put, ast.Name) and bound_value(s, put) is None and "param" not in put.id.lower() \
            and s.enclosing_function(call) is not s.tree
        loaded = not handed and _loaded_rows(s, put)
        if not ((handed or loaded) and _split_sharding(s, call.args[1])):
            continue
        rows = "rows this function is handed" if handed else "rows each host's loader gives"
        yield (call, "local-batch",
               f"{code_of(call)} places {rows} as the whole global array, split over the mesh: on several hosts "
               "each host holds its own rows (or all of them, loaded again), which device_put takes for everyone's",
               "jax.make_array_from_process_local_data(sharding, rows): each host's rows become its part of the "
               f"global batch (a mesh over every host's devices, P({MESH_AXES}))")


_SHARDING_KEYWORDS = ("in_shardings", "out_shardings", "in_axis_resources", "out_axis_resources")


def _sharded_steps(s: Script) -> set[str]:
    """What the script calls its steps compiled over a mesh: the names (and `self.` attributes) bound to a pjit, or to
    a jax.jit or nnx.jit given shardings, one alias on (`self._p_step = p_step`), and functions decorated so."""
    compiled = set(pjit_calls(s)) | {c for c in s.calls if is_name(s.name(c.func), "jax.jit", "flax.nnx.jit")
                                     and any(k.arg in _SHARDING_KEYWORDS for k in c.keywords)}
    names = {code_of(t) for node in ast.walk(s.tree) if isinstance(node, ast.Assign) and node.value in compiled
             for t in node.targets}
    names |= {f.name for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef) and compiled & set(f.decorator_list)}
    return names | {code_of(t) for node in ast.walk(s.tree) if isinstance(node, ast.Assign)
                    and isinstance(node.value, (ast.Name, ast.Attribute)) and code_of(node.value) in names
                    for t in node.targets}


_READS_ROWS = ("asarray", "array", "numpy", "squeeze", "detach", "cpu", "astype", "reshape")


def _loaded_rows(s: Script, node: ast.AST, depth: int = 0) -> bool:
    """Rows a loader gives this host: from the project's loader, `next(...)` of an iterator, or a loop over one (not a
    range), through names, items and the calls that only convert them (`jnp.array(batch.numpy())`)."""
    if depth > 8:
        return False
    if batch_source(s, node) is not None:
        return True
    if isinstance(node, ast.Subscript):
        return _loaded_rows(s, node.value, depth + 1)
    if isinstance(node, ast.Call):
        short = s.name(node.func).rsplit(".", 1)[-1]
        if short == "next":
            return True
        function = s.name(node.func).startswith(("numpy.", "jax.numpy.", "torch.")) or isinstance(node.func, ast.Name)
        inner = (node.args[0] if node.args else None) if function else getattr(node.func, "value", None)
        return short in _READS_ROWS and inner is not None and _loaded_rows(s, inner, depth + 1)
    if not isinstance(node, ast.Name):
        return False
    bound = bound_value(s, node)
    if bound is None:
        return False
    holder = s.parent.get(bound)
    if isinstance(holder, ast.Call) and getattr(holder.func, "id", "") in ("enumerate", "zip", "tqdm"):
        holder = s.parent.get(holder)
    if isinstance(holder, ast.For):  # a loop over a loader, not over a range or a dict's entries
        return not (isinstance(bound, ast.Call) and (getattr(bound.func, "id", "") == "range" or isinstance(
            bound.func, ast.Attribute) and bound.func.attr in ("items", "values", "keys")))
    return _loaded_rows(s, bound, depth + 1)


def rows_fed_to_a_sharded_step(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`state, metrics = p_step(state, next(loader))` where `p_step = pjit(...)` (or a jax.jit given shardings): a
    host's loaded rows handed to a step compiled over every host's devices, in a script that never makes a global
    array from them. pjit before jax.Array took them as this host's part; jit takes a numpy input as the whole value
    (and raises for one split over several processes)."""
    if any(is_name(s.name(c.func), *_MAKES_GLOBAL) for c in s.calls):
        return
    steps = _sharded_steps(s)
    for call in s.calls:
        if code_of(call.func) not in steps:
            continue
        fed = next((a for a in call.args if "param" not in code_of(a).lower() and _loaded_rows(s, a)), None)
        if fed is not None:
            yield (call, "local-batch",
                   f"{code_of(call.func)}(...) is handed {code_of(fed)}, rows this host's loader gives, as they are: "
                   "pjit before jax 0.4.1 took them as this host's part of the batch; jax.jit (pjit today) takes a numpy "
                   "input as the whole global value, and with several processes raises ValueError for one whose "
                   "in_shardings split it ('Passing non-trivial shardings for numpy inputs is not allowed')",
                   f"batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P({MESH_AXES})), rows) "
                   "before the call: each host's rows become its part of one global batch")


RULES = (batched_per_device, rows_of_every_host, stacked_per_local_device, handed_rows_put_on_a_split_sharding,
         rows_fed_to_a_sharded_step)
