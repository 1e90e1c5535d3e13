"""The rules for how big a batch each host loads, and whose rows, where the size is not written as a product with
`jax.device_count()` (data_rules' rule): a global count shared out over this host's devices only
(`self.num_envs // jax.local_device_count()`); a count of every device handed to the project's loader
(`DataGenerator(..., num_devices=jax.device_count())`); rows read in a loop by a batch size the script splits over
every device of its mesh or made global with `jax.device_count()`; a loader whose batches a helper of the script
stacks over every device (its batch size is the global batch); the helper itself (`shard_batch(batch, n)`,
`psplit(x, n)`: a stack per device by hand); and the project's loader feeding a training step with nothing on its
path reading the process index (every host reads the same rows).

Each rule reads a `Script` and yields (node, rule name, what the line does on several hosts, what to write
instead).
"""
from __future__ import annotations

import ast
import re
from typing import Iterator

from helpers.migrate.aliases import LIBRARY_ROOTS
from helpers.migrate.bindings import arguments_for, bound_value, device_count_of, host_index_in, loop_items
from helpers.migrate.data_rules import (global_sizes as _global_sizes, pmap_era as _pmap_era,
                                        reads_by_index as _reads_by_index, reads_host_number as _reads_host_number)
from helpers.migrate.key_rules import splits_per_device
from helpers.migrate.loader_rules import handed_loaded_rows, project_call
from helpers.migrate.script import MESH_AXES, Script, code_of, is_name

LESSONS: dict[str, tuple[str, str]] = {}  # global-batch-per-host, shared-shuffle: data_rules'; local-batch: jax_rules'

_PER_HOST_WORDS = re.compile(r"local|host|process|node|proc|rank|per_|param", re.I)
_HOST_NUMBERS = ("jax.process_count", "jax.process_index", "jax.host_count", "jax.host_id")
_TO_EACH_HOST = ("each host reads its part: global // jax.process_count() (its own rows: split the data by "
                 "jax.process_index()), and jax.make_array_from_process_local_data assembles the global batch")


def _counts_hosts(s: Script) -> bool:
    """The script reads a host number or counts every device: it thinks of hosts (or of the global batch) already."""
    return any(is_name(s.name(c.func), *_HOST_NUMBERS, "jax.device_count") for c in s.calls)


def shares_a_global_count(s: Script, node: ast.AST) -> bool:
    """`self.num_envs_per_device = self.num_envs // num_devices` with `num_devices = jax.local_device_count()`, in a
    script that never counts hosts nor every device: a total the config gives for the whole run (not one named for a
    host, `host_batch // n`) shared out as if this host's devices were all the devices; assigned, not printed."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Div))
            and isinstance(node.left, (ast.Name, ast.Attribute, ast.Subscript))
            and isinstance(node.right, (ast.Name, ast.Call)) and device_count_of(s, node.right) == "local"):
        return False
    holder = s.parent.get(node)
    while isinstance(holder, ast.Call) and s.name(holder.func) in ("int", "round", "math.ceil", "math.floor"):
        holder = s.parent.get(holder)
    return isinstance(holder, ast.Assign) and not _PER_HOST_WORDS.search(code_of(node.left)) \
        and not _counts_hosts(s) and not any(node in set(ast.walk(f)) for f in s.pmapped_functions())


def global_count_over_local_devices(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for node in ast.walk(s.tree):
        if shares_a_global_count(s, node):
            yield (node, "global-batch-per-host",
                   f"{code_of(node)} shares {code_of(node.left)}, a total for the whole run, out over this host's "
                   f"devices only ({code_of(node.right)}): each host makes all of it, so on several hosts the run "
                   f"makes process_count() times {code_of(node.left)}",
                   f"divide by every device: {code_of(node.left)} // jax.device_count() per device (or under jax.jit "
                   f"size it once, global, and let the sharding split it over the {MESH_AXES} mesh)")


def device_count_handed_to_a_loader(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`DataGenerator(..., num_devices=jax.device_count())`: the project's loader told to make a batch for every
    device of every host, on each host; told this host's count (`num_devices=jax.local_device_count()`), to stack
    its rows one slice per local device."""
    if not _pmap_era(s):
        return
    for call in s.calls:
        if not project_call(s, call):
            continue
        for k in call.keywords:
            count = device_count_of(s, k.value) if k.arg and "device" in k.arg.lower() else None
            if count == "local":
                yield (k.value, "local-batch",
                       f"{code_of(call.func)}(..., {k.arg}={code_of(k.value)}) has the project's loader stack each "
                       f"batch one slice per local device ({code_of(k.value)} counts them), the leading axis pmap "
                       "strips",
                       "no stacking: pass the host's rows as they are to jax.make_array_from_process_local_data("
                       f"NamedSharding(mesh, P({MESH_AXES})), rows), and JAX splits them over the devices")
            if count == "every":
                yield (k.value, "global-batch-per-host",
                       f"{code_of(call.func)}(..., {k.arg}={code_of(k.value)}) has the project's loader build batches "
                       f"for every host's devices ({code_of(k.value)} counts them all): every host loads the whole "
                       "global batch",
                       "hand it this host's count, jax.local_device_count(), or better no count: "
                       f"{_TO_EACH_HOST}")


def _mesh_shape_codes(s: Script) -> set[str]:
    """The code of each axis size a mesh is built with (`create_device_mesh((args.num_gpu,))`, `jax.make_mesh((n,),
    ...)`): counts of the mesh's devices."""
    codes = set()
    for call in s.calls:
        name = s.name(call.func)
        if call.args and (name.endswith("create_device_mesh") or is_name(name, "jax.make_mesh")) \
                and isinstance(call.args[0], (ast.Tuple, ast.List)):
            codes |= {code_of(e) for e in call.args[0].elts}
    return codes


def _split_over_devices(s: Script) -> set[str]:
    """The code of each batch size the script splits over every device: `args.batch_size % args.num_gpu` with the
    count a mesh's axis size, `batch_size % jax.device_count()`; and the sizes made with jax.device_count()."""
    mesh_sizes = _mesh_shape_codes(s)
    sizes = set(_global_sizes(s))
    for node in ast.walk(s.tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and (
                device_count_of(s, node.right) == "every" or code_of(node.right) in mesh_sizes):
            sizes.add(code_of(node.left))
    return sizes


def _size_of(s: Script, node: ast.AST, sizes: set[str]) -> str | None:
    """The split size a batch size read here is (itself, or what the script's callers hand its parameter)."""
    if code_of(node) in sizes:
        return code_of(node)
    if isinstance(node, ast.Name):
        for handed in arguments_for(s, node):
            if code_of(handed) in sizes:
                return code_of(handed)
    return None


def _batch_of_loop(s: Script, iterated: ast.AST, sizes: set[str]) -> str | None:
    """The split size a loop's index runs by: `perms.reshape((steps, batch_size))` (a row of indices each step),
    `range(0, n, batch_size)` (a slice's start each step), through the names that hold them."""
    value = bound_value(s, iterated) if isinstance(iterated, ast.Name) else iterated
    for _ in range(4):
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "reshape" \
                and value.args:
            shape = value.args[0]
            last = shape.elts[-1] if isinstance(shape, (ast.Tuple, ast.List)) and len(shape.elts) == 2 else None
            return _size_of(s, last, sizes) if last is not None else None
        if isinstance(value, ast.Call) and s.name(value.func) == "range" and len(value.args) == 3:
            return _size_of(s, value.args[2], sizes)
        if not isinstance(value, ast.Name):
            return None
        value = bound_value(s, value)
    return None


def rows_of_a_split_batch(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """A loop that reads the rows of each batch by index or slice (`ds['x'][perm, ...]`, `ds['x'][start:end]`), the
    batch a size the script splits over every device: on several hosts each host reads the whole global batch."""
    if not _pmap_era(s) or _reads_host_number(s, s.tree):
        return
    sizes = _split_over_devices(s)
    for loop in (n for n in ast.walk(s.tree) if isinstance(n, (ast.For, ast.AsyncFor))):
        for target, iterated in loop_items(loop):
            size = _batch_of_loop(s, iterated, sizes) if isinstance(target, ast.Name) else None
            reads = sorted(_reads_by_index(loop, target.id), key=lambda n: (n.lineno, n.col_offset)) if size else []
            if reads and not _reads_host_number(s, s.enclosing_function(loop)):
                yield (reads[0], "global-batch-per-host",
                       f"{code_of(reads[0])} reads the rows of a batch of {size}, the size the script splits over "
                       "every device (all of them, each host's too): on several hosts every host reads the whole "
                       "global batch", _TO_EACH_HOST)
    yield from _global_row_ranges(s)


def _global_row_ranges(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`range(step * bs, (step + 1) * bs)` or `rows[step * bs:(step + 1) * bs]` with `bs = per_device *
    jax.device_count()`: the indices of a whole global batch, on each host."""
    if any(is_name(s.name(c.func), "jax.process_count") for c in s.calls):
        return
    sizes = _global_sizes(s)

    def by_size(node: ast.AST | None) -> str | None:
        return next((n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in sizes), None) \
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) else None

    for node in ast.walk(s.tree):
        bounds = node.args[:2] if isinstance(node, ast.Call) and s.name(node.func) == "range" else \
            [node.lower, node.upper] if isinstance(node, ast.Slice) else []
        size = by_size(bounds[0]) if len(bounds) == 2 else None
        if size and by_size(bounds[1]) == size:
            yield (node, "global-batch-per-host",
                   f"{code_of(node)} picks the rows of step's batch of {size} rows, the global batch ({size} is made "
                   "with jax.device_count(), every host's devices): every host reads the whole global batch",
                   "each host picks its part of the step's rows: [step * global + process_index() * per_host, ...) "
                   "with per_host = global // jax.process_count(); jax.make_array_from_process_local_data assembles "
                   "the global batch")


_SPLITS = ("jax.numpy.split", "numpy.split", "jax.numpy.array_split", "numpy.array_split")


def leading_axis(s: Script, reshape: ast.Call) -> ast.AST | None:
    """The first axis of `x.reshape(n, ...)`, `x.reshape((n, -1) + x.shape[1:])` or `x.reshape(new_shape)` with
    `new_shape = (n, per_device) + x.shape[1:]`; also of the function's spelling, `jnp.reshape(x, (n, ...))`."""
    functional = is_name(s.name(reshape.func), "jax.numpy.reshape", "numpy.reshape", "tensorflow.reshape")
    first = reshape.args[1 if functional else 0] if len(reshape.args) > functional else None
    for _ in range(4):
        if isinstance(first, ast.Name) and isinstance(s.value(first), (ast.Tuple, ast.List, ast.BinOp)):
            first = s.value(first)
        while isinstance(first, ast.BinOp):
            first = first.left
        if isinstance(first, (ast.Tuple, ast.List)):
            first = first.elts[0] if first.elts else None
        if not isinstance(first, ast.Name) or not isinstance(s.value(first), (ast.Tuple, ast.List, ast.BinOp)):
            return first
    return first


def stacked_by(s: Script, function: ast.FunctionDef, params: set[str]) -> str | None:
    """How a function of the script stacks its rows per device by one of `params`: 'split' (`jnp.split(x, n)`),
    'reshape' (a leading axis `n`), through a shape tuple held in a name; None if it does neither."""
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        if is_name(s.name(node.func), *_SPLITS) and len(node.args) > 1 and isinstance(node.args[1], ast.Name) \
                and node.args[1].id in params:
            return "split"
        if isinstance(node.func, ast.Attribute) and node.func.attr == "reshape":
            first = leading_axis(s, node)
            if isinstance(first, ast.Name) and first.id in params:
                return "reshape"
    return None


def _stacking_helpers(s: Script) -> Iterator[tuple[ast.Call, ast.AST, str, str]]:
    """(call, its count, 'local' or 'every', how) for each call of a function of the script that stacks the rows it
    is handed per device by the count it is handed (`shard_batch(batch, jax.device_count())`, `psplit(x, n_local)`)."""
    if not _pmap_era(s):
        return
    defs = {f.name: f for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef)}
    for call in s.calls:
        function = defs.get(call.func.id) if isinstance(call.func, ast.Name) else None
        if function is None or not call.args:
            continue
        params = [a.arg for a in function.args.args]
        for i, a in enumerate(call.args[1:len(params)], start=1):
            whose = device_count_of(s, a)
            how = stacked_by(s, function, {params[i]}) if whose else None
            if how:
                yield call, a, whose, how
                break


def stacked_by_a_helper(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """The call of a script's helper that stacks a host's rows per device: a split, a reshape through a shape held in
    a name, or a count of every device (jax_rules says a plain reshape by jax.local_device_count())."""
    for call, count, whose, how in _stacking_helpers(s):
        if whose == "local" and how == "reshape" and _plainly_local(s, count):
            continue
        yield (call, "local-batch",
               f"{code_of(call)} stacks this host's rows one slice per device ({call.func.id} {how}s them by "
               f"{code_of(count)}, a count of {'this host' if whose == 'local' else 'every host'}'s devices), the "
               "leading axis pmap strips",
               "no stacking: pass the host's rows as they are to jax.make_array_from_process_local_data("
               f"NamedSharding(mesh, P({MESH_AXES})), rows), and JAX splits them over the devices")


def _plainly_local(s: Script, count: ast.AST) -> bool:
    value = s.value(count)
    return isinstance(value, ast.Call) and is_name(s.name(value.func), "jax.local_device_count")


_PASS_ON = ("next", "iter", "tqdm", "enumerate", "list", "asarray", "array", "prefetch_to_device", "shard",
            "device_put", "as_numpy_iterator", "numpy", "__next__", "tolist")


def batch_source(s: Script, expr: ast.AST, depth: int = 0) -> ast.Call | None:
    """The call of the project's loader the rows of `expr` come from: through names, items, loops, `next`/`iter`,
    prefetching and tree maps, a function of the script (what it returns, else what it is handed first), a
    method of an object the project's loader made (`gen.genDS()`, the call returned), and that object called."""
    if depth > 12 or expr is None:
        return None
    if isinstance(expr, ast.Subscript):
        return batch_source(s, expr.value, depth + 1)
    if isinstance(expr, (ast.Name, ast.Attribute)):
        bound = bound_value(s, expr)
        if bound is not None:
            return batch_source(s, bound, depth + 1)
        if isinstance(expr, ast.Name):
            return next(filter(None, (batch_source(s, a, depth + 1) for a in arguments_for(s, expr))), None)
        return None
    if not isinstance(expr, ast.Call):
        return None
    if project_call(s, expr):
        return expr
    name = s.name(expr.func)
    short = name.rsplit(".", 1)[-1]
    if isinstance(expr.func, ast.Attribute) and not name.startswith(("jax.", "numpy.", "flax.")):
        owner = batch_source(s, expr.func.value, depth + 1)
        made = expr.func.value if isinstance(expr.func.value, ast.Call) else bound_value(s, expr.func.value)
        if owner is not None:  # `gen.genDS()` of `gen = DataGenerator(...)`: the method makes the batches
            return expr if owner is made and short not in _PASS_ON else owner
    made = batch_source(s, expr.func, depth + 1) if isinstance(expr.func, ast.Name) else None
    if made is not None:  # `train_dl()` of `train_dl = DataLoader(...)`, also of a loader a function is handed
        return made
    if s.is_tree_map(expr) and len(expr.args) == 2:
        return batch_source(s, expr.args[1], depth + 1)
    if short in _PASS_ON and expr.args:
        return batch_source(s, expr.args[0], depth + 1)
    defs = {f.name: f for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef)}
    function = defs.get(expr.func.id) if isinstance(expr.func, ast.Name) else None
    if function is not None:
        returned = [r.value for r in ast.walk(function) if isinstance(r, ast.Return) and r.value is not None]
        found = next(filter(None, (batch_source(s, r, depth + 1) for r in returned)), None)
        return found or (batch_source(s, expr.args[0], depth + 1) if expr.args else None)
    return None


def _batch_keywords(call: ast.Call) -> list[ast.keyword]:
    """The batch-size keywords of a loader's call, or of a call it is handed (`load(Config(batch_size=b))`)."""
    return [k for c in ast.walk(call) if isinstance(c, ast.Call) for k in c.keywords
            if k.arg and "batch" in k.arg.lower() and "device" not in k.arg.lower()]


def loader_batch_stacked_over_every_device(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`load(batch_size=cfg.batch_size)` whose batches the script stacks over jax.device_count() devices
    (`shard_batch(batch, jax.device_count())`): the loader's batch is the global one, and every host loads it."""
    said = set()
    for call, count, whose, _ in _stacking_helpers(s):
        loader = batch_source(s, call.args[0]) if whose == "every" else None
        for k in _batch_keywords(loader) if loader is not None else []:
            if k.value not in said:
                said.add(k.value)
                yield (k.value, "global-batch-per-host",
                       f"{code_of(loader.func)}(..., {k.arg}={code_of(k.value)}) loads batches that {code_of(call)} "
                       f"(line {call.lineno}) splits over {code_of(count)}, every host's devices: the global batch, "
                       "loaded whole on every host", _TO_EACH_HOST)


def _trains(s: Script, call: ast.Call) -> bool:
    """A call of a pmapped function that takes gradients (a training step, not an evaluation)."""
    defs = {f.name: f for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef)}
    target = call.func.id if isinstance(call.func, ast.Name) else None
    value = s.value(call.func) if target else None
    if isinstance(value, ast.Call) and value.args and isinstance(value.args[0], ast.Name):
        target = value.args[0].id
    function = defs.get(target)
    return function is not None and any(isinstance(n, ast.Call) and s.name(n.func).endswith("grad")
                                        for n in ast.walk(function))


def stacks_per_local_device(s: Script, function: ast.AST) -> bool:
    """A function of a project module whose body cuts rows into this host's devices: a reshape with a leading axis
    of jax.local_device_count() (`x.reshape((jax.local_device_count(), -1) + x.shape[1:])`), also in a tree map."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "reshape"
               and (first := leading_axis(s, n)) is not None and device_count_of(s, first) == "local"
               for n in ast.walk(function))


def project_stacking_helper(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`data_utils.shard(batch)`: a function of the script's project, read to its body, that stacks the rows it is
    handed one slice per local device (the leading axis pmap strips), also when the script hands it on
    (`ds.map(split_batch)`) or hands it the device count it stacks by (`shard_batch(batch, n_devices)`)."""
    if not _pmap_era(s) or not s.folder.stackers | s.folder.count_stackers | s.folder.placers:
        return
    by_count = dict(s.folder.count_stackers)
    handed_on = {a for c in s.calls for a in c.args if isinstance(a, ast.Name)}
    for node in [*s.calls, *handed_on]:
        called = node.func if isinstance(node, ast.Call) else node
        root = called
        while isinstance(root, ast.Attribute):
            root = root.value
        module = s.names.alias.get(root.id, "") if isinstance(root, ast.Name) else ""
        short = code_of(called).rsplit(".", 1)[-1]
        if not module or module.split(".")[0] in LIBRARY_ROOTS or short in s.folder.prefetchers:
            continue  # a loader that prefetches its stacks is flax-prefetch (loader_rules)
        count = node.args[by_count[short]] if isinstance(node, ast.Call) and short in by_count \
            and by_count[short] < len(node.args) else None
        if short in s.folder.stackers and (node in handed_on or node.args):
            how = "stacks the rows it is handed one slice per local device"
        elif count is not None and device_count_of(s, count):
            how = f"stacks the rows it is handed one slice per device (by {code_of(count)}, a device count)"
        elif short in s.folder.placers and isinstance(node, ast.Call) and node.args:
            how = "puts the stack it is handed on this host's devices, one slice a device (a pmap of the identity)"
            if _placed_copies(s, node.args[0]):
                yield (node, "jax-utils-replicate",
                       f"{code_of(node)} (in the project) puts copies of one value on this host's devices, one a "
                       "device (a pmap of the identity of a stack of copies): pmap's replicate",
                       "jax.device_put(x, NamedSharding(mesh, P())) once: one global value, on every device")
                continue
        else:
            continue
        if isinstance(node, ast.Call) and _split_keys(s, node.args[0] if node.args else None):
            yield (node, "per-device-keys",
                   f"{code_of(called)}(...) (in the project) places keys split one a device on this host's devices, "
                   "one key a device for pmap",
                   "one key, and inside shard_map jax.random.fold_in(key, jax.lax.axis_index("
                   f"{MESH_AXES})): a different stream on every device of every host")
            continue
        yield (node, "local-batch",
               f"{code_of(called)}{'' if node in handed_on else '(...)'} (in the project) {how}, the leading axis "
               "pmap strips",
               "no stacking: pass the host's rows as they are to jax.make_array_from_process_local_data("
               f"NamedSharding(mesh, P({MESH_AXES})), rows), and JAX splits them over the devices")


def _placed_copies(s: Script, handed: ast.AST) -> bool:
    """Copies of one value, one a device: a stack made by a replicate (`tree_map(jnp.zeros_like, params)` of
    replicated params, through names), or zeros of a bare device count (`jnp.zeros(num_devices)`, an accumulator)."""
    value = bound_value(s, handed) if isinstance(handed, ast.Name) else handed
    if not isinstance(value, ast.Call):
        return False
    if is_name(s.name(value.func), "jax.numpy.zeros", "numpy.zeros", "jax.numpy.ones", "numpy.ones") \
            and len(value.args) == 1 and device_count_of(s, value.args[0]):
        return True
    if s.copy_helper(value) == "replicate" or s.stacks_copies(value):
        return True
    return s.is_tree_map(value) and any(isinstance(a, ast.Name) and _placed_copies(s, a) for a in value.args[1:])


def _split_keys(s: Script, handed: ast.AST | None, depth: int = 0) -> bool:
    """Keys split one a device (`key = random.split(key, cfg.num_devices)`), as handed or through the name, also
    stacked again (`key, *subkeys = split(key, n + 1)`, then `jnp.stack(subkeys)`)."""
    value = bound_value(s, handed) if isinstance(handed, ast.Name) else handed
    if isinstance(value, ast.Call) and is_name(s.name(value.func), "jax.numpy.stack", "numpy.stack") \
            and value.args and depth < 2:
        return _split_keys(s, value.args[0], depth + 1)
    return isinstance(value, ast.Call) and splits_per_device(s, value)


def _handed_a_batch(s: Script, call: ast.Call) -> bool:
    """A project call handed the batches of another loader call (`model_input_from_chunk(batch)` of a batch that
    `get_chunks(...)` made, through the script's functions): it transforms rows, it loads none."""
    return any(batch_source(s, a) not in (None, call) for a in [*call.args, *(k.value for k in call.keywords)])


def _first_loader(s: Script, source: ast.Call | None) -> ast.Call | None:
    """The loader call the rows come from, past the project calls that transform rows another call loaded
    (`shard_batch(numpy_from_torch(batch), n)` of a batch of `create_loader(...)`)."""
    for _ in range(4):
        if source is None or not _handed_a_batch(s, source):
            return source
        source = next(filter(None, (batch_source(s, a) for a in [*source.args, *(k.value for k in source.keywords)])),
                      None)
    return None


def _host_split_off(s: Script, call: ast.Call, named: str) -> str | None:
    """How a call of a project loader that splits by host only in a branch on a parameter (`if is_training:`) turns
    the split off (`is_training is true (here False)`), else None."""
    return next(filter(None, (w.off_at(call, s.value) for w in s.folder.host_switches if w.function == named)), None)


def shared_project_loader(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """The project's loader whose batches feed a pmapped step, told nothing of the host it runs on: every host loads
    the same whole batches. Read to its body when the project is (a body that reads the process index splits by host
    itself); out of view, only for a training step in a script where nothing reads the process index as data."""
    if not _pmap_era(s):
        return
    pmapped_call, script_reads_host = s.pmapped_call_test(), _reads_host_number(s, s.tree)
    said = set()
    for call in s.calls:
        if not pmapped_call(call):
            continue
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            loader = _first_loader(s, batch_source(s, argument))
            if loader is None or loader in said or host_index_in(s, loader) is not None \
                    or handed_loaded_rows(s, loader) is not None:
                continue
            named = code_of(loader.func).rsplit(".", 1)[-1]
            switched_off = _host_split_off(s, loader, named)
            host_aware = named in s.folder.host_aware and not switched_off
            read = named in s.folder.read and not host_aware
            if host_aware or not read and (script_reads_host or not _trains(s, call)):
                continue
            said.add(loader)
            yield (loader, "global-batch-per-host",
                   f"{code_of(loader.func)}(...) makes the batches a pmapped step reads, and nothing the script hands "
                   "it reads jax.process_index()" + (
                       f": its body (in the project) splits them by host only when {switched_off}, so every host "
                       "loads the same whole batches" if switched_off else
                       f": nor does its body (in the project), so every host loads the same whole batches" if read
                       else ": unless it splits the data by host on its own, every host loads the same rows"),
                   "give each host its own part: shard the files or rows by jax.process_index() out of "
                   "jax.process_count() (or read a shared order and take rows [process_index() * per_host, ...) of "
                   "each global batch)")


def blocks_per_device_in_a_step(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`images.reshape((jax.device_count(), -1) + images.shape[1:])` inside a function of a pmap- or pjit-era script:
    the global batch a pjit'd step sees, cut one slice per device (to keep work on each device); in shard_map the body
    sees one device's block, which has not jax.device_count() slices. Only in a pjit-era script with no pmap: there
    the batch a function reshapes so is a pjit'd step's (a pmap-era host stacks its rows by its own devices)."""
    if s.pmaps_here() or not any(
            name.startswith(("jax.experimental.pjit", "jax.experimental.maps")) for _, name, _ in s.used_names()):
        return
    for call in s.calls:
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "reshape") \
                or s.enclosing_function(call) is s.tree:
            continue
        first = leading_axis(s, call)
        if first is not None and device_count_of(s, first) == "every":
            yield (first, "local-batch",
                   f"{code_of(call.func.value)}.reshape(...) cuts the step's batch into {code_of(first)} slices, "
                   "one a device (under pjit or jit the step sees the global batch); in shard_map the body sees one "
                   f"device's block, which has no {code_of(first)} slices (the reshape fails or mixes rows)",
                   "in the shard_map body the block already is this device's rows: a leading axis of 1 "
                   "(x[None]) where the code wants one per device, or no reshape; or keep this step under jax.jit "
                   "with shardings, where the global reshape stays right")


def _split_in_groups(call: ast.Call) -> ast.AST | None:
    """`x.reshape(n, bs // n, ...)` or `x.reshape((n, bs // n) + rest)`: rows cut into n groups; n (its leading axis)."""
    shape = call.args if len(call.args) > 1 else call.args[:1]
    first = shape[0] if shape else None
    while isinstance(first, ast.BinOp) and isinstance(first.op, ast.Add):
        first = first.left
    parts = first.elts if isinstance(first, (ast.Tuple, ast.List)) else shape
    if len(parts) < 2 or not isinstance(parts[0], (ast.Name, ast.Attribute)):
        return None
    second = parts[1]
    return parts[0] if isinstance(second, ast.BinOp) and isinstance(second.op, (ast.FloorDiv, ast.Div)) \
        and code_of(second.right) == code_of(parts[0]) else None


def stacked_for_a_pmapped_call(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`x = x.reshape(n, bs // n, ...)` then `self._forward(model, x)` of a pmap: this host's rows cut into one group
    per mapped device, the leading axis pmap strips, whatever names the count (one the other rules do not follow)."""
    pmapped_call = s.pmapped_call_test()
    for call in s.calls:
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "reshape"):
            continue
        leading = _split_in_groups(call)
        holder = s.parent.get(call)
        if leading is None or device_count_of(s, leading) is not None or not (
                isinstance(holder, ast.Assign) and len(holder.targets) == 1 and isinstance(holder.targets[0], ast.Name)):
            continue
        name, function = holder.targets[0].id, s.enclosing_function(call)
        if any(pmapped_call(c) and c.lineno > call.lineno and s.enclosing_function(c) is function
               and any(isinstance(a, ast.Name) and a.id == name for a in c.args) for c in s.calls):
            yield (call, "local-batch",
                   f"{code_of(call)} cuts this host's rows into {code_of(leading)} groups, one a device, and hands "
                   "the stack to a pmapped function: the leading axis pmap strips, of this host's devices only",
                   "no stacking: pass the host's rows as they are to jax.make_array_from_process_local_data("
                   f"NamedSharding(mesh, P({MESH_AXES})), rows), and JAX splits them over the devices")


def batched_by_local_devices(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`ds = ds.batch(jax.local_device_count())` in a script that pmaps: a dataset's batches grouped one a local
    device, the leading axis pmap strips (tf.data, grain)."""
    if not s.pmaps_here():
        return
    for call in s.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr == "batch" and call.args \
                and device_count_of(s, call.args[0]) == "local":
            yield (call, "local-batch",
                   f"{code_of(call)} groups this host's batches one per local device ({code_of(call.args[0])}), "
                   "the stack pmap takes",
                   "no grouping: batch this host's rows (global_batch // jax.process_count()) and pass them to "
                   f"jax.make_array_from_process_local_data(NamedSharding(mesh, P({MESH_AXES})), rows)")


def _slice_from(node: ast.AST, start: str) -> bool:
    """`rows[start:start + bs]`: the rows from a loop's index on."""
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) \
        and isinstance(node.slice.lower, ast.Name) and node.slice.lower.id == start \
        and isinstance(node.slice.upper, ast.BinOp) and isinstance(node.slice.upper.op, ast.Add) \
        and isinstance(node.slice.upper.left, ast.Name) and node.slice.upper.left.id == start


def same_rows_to_a_pmap(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`for start in range(0, total, bs): batch = chunks[start:start + bs]` whose rows (through the loop's names)
    go to a pmapped call, in a script that never reads the process index: every host runs the same rows, the whole
    batch (a size split over every device is rows_of_a_split_batch's)."""
    if not _pmap_era(s) or _reads_host_number(s, s.tree):
        return
    pmapped_call, sizes = s.pmapped_call_test(), _split_over_devices(s)
    for loop in (n for n in ast.walk(s.tree) if isinstance(n, ast.For) and isinstance(n.target, ast.Name)):
        ranged = loop.iter
        if not (isinstance(ranged, ast.Call) and s.name(ranged.func) == "range" and len(ranged.args) == 3) \
                or code_of(ranged.args[2]) in sizes:
            continue
        assigns = [n for n in ast.walk(loop) if isinstance(n, ast.Assign)]
        first = next((a for a in assigns if _slice_from(a.value, loop.target.id)), None)
        if first is None:
            continue
        held = {t.id for t in first.targets if isinstance(t, ast.Name)}
        for _ in range(4):  # `x = jnp.asarray(batch)`, `x = x.reshape(...)`
            held |= {t.id for a in assigns for t in a.targets if isinstance(t, ast.Name)
                     and any(isinstance(n, ast.Name) and n.id in held for n in ast.walk(a.value))}
        if any(pmapped_call(c) and any(isinstance(a, ast.Name) and a.id in held for a in c.args)
               for c in ast.walk(loop) if isinstance(c, ast.Call)):
            yield (first.value, "global-batch-per-host",
                   f"{code_of(first.value)} takes the same rows on every host (nothing here reads "
                   "jax.process_index()) and hands them to pmap: every host runs the whole batch, and after the port "
                   "the global batch would hold each host's copy of it", _TO_EACH_HOST)


RULES = (global_count_over_local_devices, device_count_handed_to_a_loader, rows_of_a_split_batch,
         stacked_by_a_helper, loader_batch_stacked_over_every_device, shared_project_loader,
         blocks_per_device_in_a_step, stacked_for_a_pmapped_call, batched_by_local_devices,
         same_rows_to_a_pmap, project_stacking_helper)
