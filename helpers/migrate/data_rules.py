"""The rules for host-local data in a pmap-era script: a loader that shuffles with a key or seed
every host shares (and never looks at its process index), or data drawn with a leading device axis from such a key;
a per-host batch sized with `jax.device_count()` or `len(jax.devices())`, which count every host's devices, or
collated in full from an index list of that size; and stacks per device through a count held in a name
(`len(devices)`). A project's own loader is loader_rules'."""
from __future__ import annotations

import ast
import re
from typing import Iterator

from helpers.migrate.bindings import arguments_for, bound_value, device_count_of, host_index_in, loop_items, reaches
from helpers.migrate.feeds import fed_to_pmap
from helpers.migrate.key_rules import splits_per_device
from helpers.migrate.script import Script, argument, code_of, is_name, keyword

# rule -> (notebook, section heading without its number): where the course teaches the fix
LESSONS: dict[str, tuple[str, str]] = {
    "shared-shuffle": ("11", "The same shuffle on every host, a new one each epoch"),
    "global-batch-per-host": ("11", "The global batch of step `s` does not depend on the number of hosts"),
}
_SHUFFLES = ("jax.random.permutation", "numpy.random.permutation", "numpy.random.shuffle")
_HOST_NUMBERS = ("jax.process_index", "jax.process_count", "jax.host_id", "jax.host_count")


def _pmap_era(s: Script) -> bool:
    """The script feeds pmap or an older parallel API (xmap's jax.experimental.maps, old pjit, which took each
    host's batch as its part): it calls one, or stacks batches per local device."""
    return s.pmaps_here() or any(
        is_name(s.name(c.func), "flax.training.common_utils.shard", "jax.local_device_count") for c in s.calls) or any(
        name.startswith(("jax.experimental.maps", "jax.experimental.pjit")) for _, name, _ in s.used_names())


def _reads_host_number(s: Script, scope: ast.AST) -> bool:
    """The scope uses a process index or count as data (a slice, an offset, a shard number), not only in a
    comparison such as `if jax.process_index() == 0:` around logging."""
    def compared(node: ast.AST) -> bool:
        while node in s.parent and node is not scope:
            node = s.parent[node]
            if isinstance(node, ast.Compare):
                return True
        return False

    return any(isinstance(n, ast.Call) and is_name(s.name(n.func), *_HOST_NUMBERS) and not compared(n)
               for n in ast.walk(scope))


def shared_shuffle(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    if not _pmap_era(s):
        return
    for call in s.calls:
        name = s.name(call.func)
        shuffles = is_name(name, *_SHUFFLES) or (
            isinstance(call.func, ast.Attribute) and call.func.attr in ("permutation", "shuffle")
            and not name.startswith("jax.random."))
        if shuffles and not _reads_host_number(s, s.enclosing_function(call)) and not _unseeded(s, call) \
                and not _traced(s, call) and not _subset(s, call) and not _of_pmap_outputs(s, call):
            yield (call, "shared-shuffle",
                   f"{code_of(call.func)}(...) shuffles with a key or seed every host shares, and this loader "
                   "never reads jax.process_index(): every host reads the same rows",
                   "keep the shared shuffle (the same order on every host) and let each host take its own "
                   "part of each global batch: rows [process_index() * per_host, ...) of it")


_SHARED_ORDER_FIX = ("keep the shared seed (the same order on every host) and let each host read its own part of each "
                     "global batch: rows [process_index() * per_host, ...) of it (a DistributedSampler with "
                     "num_replicas=jax.process_count(), rank=jax.process_index() for a torch DataLoader)")


def shared_loader_order(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """A loader asked to shuffle with a seed every host shares, nothing on its path reading the process index:
    `iter_batches(..., shuffle=True, seed=config.seed + epoch)`, a torch `DataLoader(shuffle=True)` under a seed
    set for the whole program (`set_seed(args.seed)`)."""
    if not _pmap_era(s):
        return
    for call in s.calls:
        seed = keyword(call, "seed")
        if _is_true(keyword(call, "shuffle")) and seed is not None and not _splits_by_host(s, call):
            yield (call, "shared-shuffle",
                   f"{code_of(call.func)}(..., shuffle=True, seed={code_of(seed)}) shuffles with a seed every host "
                   "shares, and nothing on the loader's path reads jax.process_index(): every host reads the same "
                   "rows", _SHARED_ORDER_FIX)
    seeded = _global_seeds(s)
    for call in s.calls:
        if is_name(s.name(call.func), "torch.utils.data.DataLoader") and _is_true(keyword(call, "shuffle")) \
                and (seeded or keyword(call, "generator") is not None) and not _splits_by_host(s, call):
            said = f"{code_of(seeded[0])} seeds" if seeded else "its generator= seeds"
            yield (call, "shared-shuffle",
                   f"{code_of(call.func)}(..., shuffle=True) with no sampler: {said} its shuffle alike on every "
                   "host, and nothing reads jax.process_index(): every host reads the same rows", _SHARED_ORDER_FIX)


def _is_true(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _global_seeds(s: Script) -> list[ast.Call]:
    """Calls that seed the whole program (`transformers.set_seed(args.seed)`, `torch.manual_seed(0)`,
    `seed_everything(seed)`) with a seed that has no process index in it."""
    return [c for c in s.calls if s.name(c.func).rsplit(".", 1)[-1] in ("set_seed", "manual_seed", "seed_everything")
            and c.args and host_index_in(s, c) is None]


_SPLITS_THE_DATA = re.compile(r"shard|process|host|rank|replica|sampler", re.I)


def _splits_by_host(s: Script, call: ast.Call) -> bool:
    """Something on the loader's path gives each host its part: a keyword for it (`shard_index=`, `sampler=`), the
    process index in an argument's history, or a host number read as data where it is called or in the script's
    own loader function it calls."""
    defs = {f.name: f for f in ast.walk(s.tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    callee = defs.get(call.func.id) if isinstance(call.func, ast.Name) else None
    return any(k.arg and _SPLITS_THE_DATA.search(k.arg) for k in call.keywords) \
        or host_index_in(s, call) is not None or _reads_host_number(s, s.enclosing_function(call)) \
        or (callee is not None and _reads_host_number(s, callee))


def _unseeded(s: Script, call: ast.Call) -> bool:
    """`ds.map(f).shuffle(10_000)`: a dataset's shuffle of a buffer size with no seed, a different order on each host
    (not a shuffle every host shares); numpy's and jax.random's always take the array or key they shuffle, and a
    loader's `shuffle(jax.random.key(0))` is seeded."""
    if is_name(s.name(call.func), *_SHUFFLES) or getattr(call.func, "attr", "") != "shuffle" \
            or any(k.arg == "seed" for k in call.keywords):
        return False
    if any(k.arg == "buffer_size" for k in call.keywords):  # tf.data's `ds.shuffle(buffer_size=1000)`
        return True
    if len(call.args) != 1 or _makes_a_key(s, call.args[0]):
        return False
    return isinstance(call.args[0], ast.Constant) or isinstance(getattr(call.func, "value", None), ast.Call)


_TRANSFORMS = ("jax.jit", "jax.pmap", "jax.vmap", "jax.grad", "jax.value_and_grad", "jax.checkpoint", "jax.remat",
               "jax.shard_map", "jax.experimental.shard_map.shard_map", "equinox.filter_jit", "equinox.filter_vmap",
               "equinox.filter_grad", "equinox.filter_value_and_grad")


def _traced(s: Script, node: ast.AST) -> bool:
    """The node is in a function JAX traces: pmapped or jitted (called or as a decorator), or handed to a
    transform or a jax.lax loop (`jax.lax.scan(_update_epoch, ...)`), or nested in such a function. A shuffle
    there permutes arrays on the device (a PPO minibatch), not a loader's rows."""
    handed = {a.id for c in s.calls if s.name(c.func).startswith(("jax.lax.", "flax.nnx."))
              or is_name(s.name(c.func), *_TRANSFORMS) for a in c.args if isinstance(a, ast.Name)}
    pmapped = set(s.pmapped_functions())
    while node in s.parent:
        node = s.parent[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                node.name in handed or node in pmapped or any(_transforms(s, d) for d in node.decorator_list)):
            return True
    return False


def _transforms(s: Script, decorator: ast.AST) -> bool:
    """`@jax.jit`, `@jax.jit(...)`'s kind, `@partial(jax.jit, static_argnums=...)`."""
    head = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(decorator, ast.Call) and is_name(s.name(head), "functools.partial") and decorator.args:
        head = decorator.args[0]
    return is_name(s.name(head), *_TRANSFORMS)


def _of_pmap_outputs(s: Script, call: ast.Call) -> bool:
    """`jax.random.permutation(key, jnp.arange(samples.obs.shape[0]))` with `samples` a pmapped function's output
    (through device_get, tree maps): rows the host computed, no loader's rows read alike on every host."""
    pmapped = s.pmapped_names()
    return any(reaches(s, a, lambda n: isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                       and n.func.id in pmapped) is not None for a in call.args[1:])


def _subset(s: Script, call: ast.Call) -> bool:
    """`ds.shuffle(seed=seed).select(range(n))`, `.take(n)`, `[:n]`: a shuffle that picks a sample of the data, the
    same on every host (as it should be), not the order batches are read in."""
    holder = s.parent.get(call)
    if isinstance(holder, ast.Subscript) and holder.value is call and isinstance(holder.slice, ast.Slice):
        return True
    return isinstance(holder, ast.Attribute) and holder.attr in ("select", "take") \
        and isinstance(s.parent.get(holder), ast.Call)


def _makes_a_key(s: Script, node: ast.AST) -> bool:
    """`jax.random.key(0)`, `jax.random.PRNGKey(seed)`: a shuffle handed one is seeded."""
    return isinstance(node, ast.Call) and is_name(s.name(node.func), "jax.random.key", "jax.random.PRNGKey")


def _call_handed(s: Script, product: ast.BinOp) -> ast.Call | None:
    """The call a product is an argument of, through sums, tuples, keywords and a dict's values (`Loader(batch=(steps,
    n * b))`, `wandb.log({"rows": step * n * b})`)."""
    holder = s.parent.get(product)
    while isinstance(holder, (ast.BinOp, ast.Tuple, ast.List, ast.keyword, ast.Dict)):
        holder = s.parent.get(holder)
    return holder if isinstance(holder, ast.Call) else None


def _handed_to_jax(s: Script, product: ast.BinOp) -> bool:
    """A product handed to JAX itself (how many keys a split makes): it sizes what each host builds in JAX, which
    the name that holds the count is told about, not a loader's size."""
    call = _call_handed(s, product)
    return call is not None and s.name(call.func).startswith("jax.")


_PROGRESS = ("update", "set_postfix", "print", "log", "info", "debug", "write", "add_scalar")


def _only_counted_with(s: Script, product: ast.BinOp) -> bool:
    """`total = per_device * jax.device_count()` that the script only does arithmetic with (steps per epoch, a
    learning rate) or logs (an f-string), or a product handed to a progress bar or a log (`bar.update(n * b)`): the
    global batch used as such, not a size handed to a loader."""
    call = _call_handed(s, product)
    if call is not None:
        return (call.func.attr if isinstance(call.func, ast.Attribute) else s.name(call.func)) in _PROGRESS
    holder = s.parent.get(product)
    while isinstance(holder, ast.BinOp):  # `steps * (per_replica * devices // mp)`
        holder = s.parent.get(holder)
    if not (isinstance(holder, ast.Assign) and len(holder.targets) == 1 and isinstance(holder.targets[0], ast.Name)):
        return False
    name = holder.targets[0].id
    uses = [n for n in ast.walk(s.tree) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    return bool(uses) and all(isinstance(s.parent.get(n), (ast.BinOp, ast.FormattedValue)) and not _picks_rows(s, n)
                              for n in uses)


def _picks_rows(s: Script, use: ast.Name) -> bool:
    """`range(step * bs, (step + 1) * bs)`, `order[i * bs:(i + 1) * bs]`: arithmetic that bounds the rows a step
    reads, not a count."""
    holder = s.parent.get(use)
    while isinstance(holder, ast.BinOp):
        use, holder = holder, s.parent.get(holder)
    return isinstance(holder, ast.Slice) or isinstance(holder, ast.Call) and s.name(holder.func) == "range" \
        and use in holder.args


def global_batch_per_host(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    if not _pmap_era(s) or any(is_name(s.name(c.func), "jax.process_count") for c in s.calls):
        return  # a script that divides by the process count splits the global batch itself
    for read, size in _collations(s):
        yield (read, "global-batch-per-host",
               f"{code_of(read)} collates a batch by an index list of {size} rows, the global batch "
               "(jax.device_count() counts every host's devices): every host collates the whole global batch",
               "each host collates its own part of each index list, [process_index() * per_host:(process_index() + 1) "
               "* per_host] with per_host = global_batch // jax.process_count(), and "
               "jax.make_array_from_process_local_data assembles the global batch")
    named: dict[ast.AST, ast.AST] = {}  # a name's count of every device -> what it sizes, a stack before a product
    shares: dict[ast.AST, ast.Call] = {}  # `per_device = total // jax.device_count()` -> a stack it sizes
    for reshape, leading in _device_stacks(s):
        if device_count_of(s, leading) == "every":
            share = _share_of_every_device(s, reshape)
            if share is not None:
                shares.setdefault(share, reshape)
            else:
                named.setdefault(s.value(leading), reshape)
    for share, reshape in sorted(shares.items(), key=lambda pair: pair[0].lineno):
        yield (share, "global-batch-per-host",
               f"{code_of(share)} is each device's share of {code_of(share.left)} over every host's devices, and "
               f"this host stacks that share for each of them ({code_of(reshape)}, line {reshape.lineno}): every "
               f"host builds all of {code_of(share.left)}",
               "each host builds its part: total // jax.process_count() (jax.local_device_count() shares of it), or "
               "under jax.jit build the global value once and let jax.make_array_from_process_local_data take each "
               "host's part")
    for product, side in _every_device_products(s):
        if isinstance(side, ast.Name) and _handed_to_jax(s, product):  # `split(key, n_devices * num_envs + 1)`
            named.setdefault(s.value(side), product)
        else:
            yield (side, "global-batch-per-host",
                   f"{code_of(product)} is the global batch ({code_of(side)} counts every host's devices), and a "
                   "per-host loader that reads this many rows reads the whole global batch on every host",
                   "each host reads its part: global_batch // jax.process_count() rows, and "
                   "jax.make_array_from_process_local_data assembles the global batch")
    for count, sized in sorted(named.items(), key=lambda pair: pair[0].lineno):
        yield (count, "global-batch-per-host",
               f"{code_of(count)} counts every host's devices, and sizes what each host builds ({code_of(sized)}, "
               f"line {sized.lineno}): every host makes the share of every device, its own and the other hosts'",
               "size each host's part with jax.local_device_count() (global_batch // jax.process_count() rows), or "
               "build the global value once and let jax.make_array_from_process_local_data take each host's part")
    yield from _shared_out_per_device(s)
    checked = {n.left.id for n in ast.walk(s.tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)
               and isinstance(n.left, ast.Name) and isinstance(n.right, ast.Call)
               and is_name(s.name(n.right.func), "jax.device_count")}  # `batch_size % jax.device_count()`
    for call in s.calls:
        for k in call.keywords:
            if k.arg and "batch" in k.arg and isinstance(k.value, ast.Name) and k.value.id in checked:
                yield (k.value, "global-batch-per-host",
                       f"{code_of(call.func)}(..., {k.arg}={k.value.id}) hands a per-host loader the batch size the "
                       "script checks against jax.device_count(), the global one: every host reads the whole "
                       "global batch",
                       "each host reads its part: global_batch // jax.process_count() rows (its own rows: split "
                       "the data by jax.process_index()), and jax.make_array_from_process_local_data assembles "
                       "the global batch")


def _share_of_every_device(s: Script, reshape: ast.Call) -> ast.BinOp | None:
    """`total // jax.device_count()` held in the name a stack's second axis reads (`x.reshape(jax.device_count(),
    per_device, ...)` with `per_device = total // jax.device_count()`): a total shared out over every host's
    devices, of which this host stacks every share."""
    function = is_name(s.name(reshape.func), "jax.numpy.reshape", "numpy.reshape")
    axes = reshape.args[1:2] if function else reshape.args
    first = axes[0] if len(axes) == 1 else None
    while isinstance(first, ast.BinOp) and isinstance(first.op, ast.Add):
        first = first.left
    axes = first.elts if isinstance(first, (ast.Tuple, ast.List)) else axes
    second = axes[1] if len(axes) > 1 else None
    share = s.value(second) if isinstance(second, ast.Name) else None
    return share if isinstance(share, ast.BinOp) and isinstance(share.op, (ast.FloorDiv, ast.Div)) \
        and device_count_of(s, share.right) == "every" else None


def _shared_out_per_device(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`batch_size = config.batch_size // num_devices` in a function pmap runs, with a count of this host's devices:
    each device sizes its share of a batch shared out over one host's devices, so every host makes the whole."""
    for function in set(s.pmapped_functions()):
        for node in ast.walk(function):
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Div)) \
                    and isinstance(node.right, (ast.Name, ast.Call)) and device_count_of(s, node.right) == "local":
                yield (node, "global-batch-per-host",
                       f"{code_of(node)} inside {function.name}, which pmap runs, shares {code_of(node.left)} out over "
                       f"this host's devices ({code_of(node.right)}): each host's devices make all of it, so every "
                       "host makes the whole batch",
                       "under jax.jit size the batch once, global (the per-device share is the sharding's), or in "
                       f"shard_map divide by jax.device_count(): {code_of(node.left)} // jax.device_count()")


def _every_device_products(s: Script) -> Iterator[tuple[ast.BinOp, ast.AST]]:
    """(product, its factor) for each product with a count of every device (`per_device * jax.device_count()`,
    `n_devices * num_envs` with `n_devices = len(jax.devices())`) that sizes something: not one only counted with
    or logged (the size of rows a host collates is said at both: where it is made and where the rows are read)."""
    for node in ast.walk(s.tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and not _only_counted_with(s, node) \
                and not _only_a_dummy_shape(s, node):
            for side in (node.left, node.right):
                if isinstance(side, (ast.Name, ast.Call)) and device_count_of(s, side) == "every" \
                        and isinstance(s.value(side), ast.Call):
                    yield node, side


def stacked_through_a_count(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """A reshape for pmap whose leading axis is a count of devices held where the plain local-batch rule does not
    look: `x.reshape(device_count, per_device, ...)` with `device_count = len(devices)`, a count capped by
    min(count, cap), len(jax.devices()); keys split per device and reshaped are said where they are split."""
    for reshape, leading in _device_stacks(s):
        if not _counted_plainly(s, leading):
            whose = "this host's" if device_count_of(s, leading) == "local" else "every host's"
            for node in {reshape.lineno: reshape, leading.lineno: leading}.values():  # and the count's own line
                yield (node, "local-batch",
                       f"{code_of(reshape)} gives this host's rows a leading axis of {code_of(leading)}, a count of "
                       f"{whose} devices: one slice per device, the leading axis pmap strips",
                       "no stacking: pass the host's rows as they are to jax.make_array_from_process_local_data("
                       "NamedSharding(mesh, P(('host', 'device'))), rows), and JAX splits them over the devices")


_SPLITS = ("jax.numpy.split", "numpy.split", "jax.numpy.array_split", "numpy.array_split")


def split_per_device(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`jnp.split(jnp.stack(xs), len(devices), axis=1)`, `np.split(x, jax.local_device_count())` in a pmap-era
    script: a host's rows cut one piece per device, for pmap or device_put_sharded (a split handed straight to
    device_put_sharded is said there)."""
    if not _pmap_era(s):
        return
    for call in s.calls:
        pieces = call.args[1] if len(call.args) > 1 else keyword(call, "indices_or_sections")
        holder = s.parent.get(call)
        if is_name(s.name(call.func), *_SPLITS) and pieces is not None and device_count_of(s, pieces) \
                and not (isinstance(holder, ast.Call) and is_name(s.name(holder.func), "jax.device_put_sharded")):
            yield (call, "local-batch",
                   f"{code_of(call.func)}(..., {code_of(pieces)}) cuts this host's rows into one piece per device, "
                   "the stack pmap (or device_put_sharded) takes",
                   "no pieces: pass the host's rows as they are to jax.make_array_from_process_local_data("
                   f"NamedSharding(mesh, P(('host', 'device'))), rows), and JAX splits them over the devices")


def _device_stacks(s: Script) -> Iterator[tuple[ast.Call, ast.AST]]:
    """(reshape, its leading axis) for each reshape, in a script that pmaps, whose leading axis counts devices
    (through names), of anything but keys split per device."""
    if not s.pmaps_here():
        return
    for call in s.calls:
        array, heads = _reshaped(s, call)
        leading = next((h for h in heads if isinstance(h, (ast.Name, ast.Attribute, ast.Call))
                        and device_count_of(s, h)), None)
        if leading is not None and not _keys_split_per_device(s, array):
            yield call, leading


def _reshaped(s: Script, call: ast.Call) -> tuple[ast.AST | None, list[ast.AST]]:
    """(the array, the axes a device count may lead) of `x.reshape(n, ...)`, `x.reshape((n, -1) + x.shape[1:])` or
    `jnp.reshape(x, (n, -1) + ...)`: the first axis, and the second of three or more (`(steps, n, -1)`, a stack of
    per-device stacks); (None, []) for any other call."""
    if is_name(s.name(call.func), "jax.numpy.reshape", "numpy.reshape") and len(call.args) == 2:
        array, shape = call.args
    elif isinstance(call.func, ast.Attribute) and call.func.attr == "reshape" and call.args:
        array, shape = call.func.value, call.args[0]
    else:
        return None, []
    while isinstance(shape, ast.BinOp):
        shape = shape.left
    if not isinstance(shape, (ast.Tuple, ast.List)):
        return array, [shape]
    return array, shape.elts[:2] if len(shape.elts) > 2 else shape.elts[:1]


def _counted_plainly(s: Script, leading: ast.AST) -> bool:
    """jax.local_device_count() or jax.device_count() as written or in a name assigned from it: the plain
    local-batch rule (jax_rules) says those (an attribute, `self.num_devices`, it does not read)."""
    if isinstance(leading, ast.Attribute):
        return False
    count = s.value(leading)
    return isinstance(count, ast.Call) and is_name(s.name(count.func), "jax.local_device_count", "device_count")


def _keys_split_per_device(s: Script, array: ast.AST | None, depth: int = 0) -> bool:
    """The array is keys split per device (`jnp.stack(keys)` with `key, *keys = split(key, n_devices + 1)`)."""
    if array is None or depth > 6:
        return False
    if isinstance(array, ast.Name):
        return _keys_split_per_device(s, bound_value(s, array), depth + 1)
    if isinstance(array, ast.Call) and is_name(s.name(array.func), "jax.numpy.stack", "jax.numpy.asarray",
                                               "numpy.stack", "numpy.asarray") and array.args:
        return _keys_split_per_device(s, array.args[0], depth + 1)
    return splits_per_device(s, array)


_FILLED = ("jax.numpy.ones", "jax.numpy.zeros", "jax.numpy.empty", "numpy.ones", "numpy.zeros", "numpy.empty")


def _only_a_dummy_shape(s: Script, product: ast.BinOp) -> bool:
    """`input_shape = (jax.device_count() * per_device, length)` read only as the shape of `jnp.ones(input_shape)`
    (an initialisation's dummy input): a shape, no rows any host reads."""
    shape = s.parent.get(product)
    if not isinstance(shape, ast.Tuple):
        return False
    holder = s.parent.get(shape)
    if isinstance(holder, ast.Call):
        return is_name(s.name(holder.func), *_FILLED)
    if not (isinstance(holder, ast.Assign) and len(holder.targets) == 1 and isinstance(holder.targets[0], ast.Name)):
        return False
    name = holder.targets[0].id
    uses = [n for n in ast.walk(s.scope(holder)) if isinstance(n, ast.Name) and n.id == name
            and isinstance(n.ctx, ast.Load)]
    return bool(uses) and all(isinstance(s.parent.get(n), ast.Call) and is_name(s.name(s.parent[n].func), *_FILLED)
                              for n in uses)


def _assigned_name(s: Script, node: ast.AST) -> str | None:
    """The name `size = <node>` assigns the expression to, alone or in a product (`size = <node> * steps`)."""
    holder = s.parent.get(node)
    while isinstance(holder, ast.BinOp):
        holder = s.parent.get(holder)
    if isinstance(holder, ast.Assign) and len(holder.targets) == 1 and isinstance(holder.targets[0], ast.Name):
        return holder.targets[0].id
    return None


def _global_sizes(s: Script) -> set[str]:
    """Names that hold a global batch size: `bs = per_device * jax.device_count()`, and products of those
    (`per_update = bs * accumulation_steps`)."""
    sizes: set[str] = set()
    while True:
        more = {name for name, value in s.assigned.items() if name not in sizes and isinstance(value, ast.BinOp)
                and isinstance(value.op, ast.Mult) and any(
                    _counts_devices(s, n, "jax.device_count") or (isinstance(n, ast.Name) and n.id in sizes)
                    for n in ast.walk(value))}
        if not more:
            return sizes
        sizes |= more


def _collations(s: Script) -> Iterator[tuple[ast.AST, str]]:
    """(the first read by index, the size) of each loop over index lists made with a global batch size
    (`for idx in generate_batch_splits(order, bs): rows = [ds[int(i)] for i in idx]`): a host collating the rows
    of a whole global batch."""
    sizes = _global_sizes(s)
    for loop in (n for n in ast.walk(s.tree) if isinstance(n, (ast.For, ast.AsyncFor))):
        for target, iterated in loop_items(loop):
            sized = reaches(s, iterated, lambda n: isinstance(n, ast.Call) and any(
                isinstance(a, ast.Name) and a.id in sizes for a in n.args), depth=3)
            if isinstance(target, ast.Name) and sized is not None:
                size = next(a.id for a in sized.args if isinstance(a, ast.Name) and a.id in sizes)
                reads = sorted(_reads_by_index(loop, target.id), key=lambda n: (n.lineno, n.col_offset))
                if reads:
                    yield reads[0], size


def _reads_by_index(loop: ast.AST, index: str) -> list[ast.Subscript]:
    """Subscripts in a loop's body whose index reads `index` or a comprehension's name that runs over it
    (`ds[int(i)] for i in index`)."""
    names = {index} | {n.id for c in ast.walk(loop) if isinstance(c, ast.comprehension)
                       and isinstance(c.iter, ast.Name) and c.iter.id == index
                       for n in ast.walk(c.target) if isinstance(n, ast.Name)}
    return [n for statement in loop.body for n in ast.walk(statement) if isinstance(n, ast.Subscript)
            and any(isinstance(i, ast.Name) and i.id in names for i in ast.walk(n.slice))]


_NOT_DRAWS = ("split", "fold_in", "key", "PRNGKey", "key_data", "wrap_key_data", "clone", "permutation", "shuffle")


def _draws_a_device_stack(s: Script, call: ast.Call) -> bool:
    """`jax.random.normal(key, (jax.device_count(), ...))`: a draw whose shape leads with a count of devices."""
    name = s.name(call.func)
    if not name.startswith("jax.random.") or is_name(name, *_NOT_DRAWS):
        return False
    shapes = [a for a in [*call.args[1:], *(k.value for k in call.keywords)] if isinstance(a, (ast.Tuple, ast.List))]
    return any(shape.elts and _counts_devices(s, shape.elts[0]) for shape in shapes)


def _counts_devices(s: Script, node: ast.AST, *counts: str) -> bool:
    """A call of one of `counts` (default `jax.device_count()` or `jax.local_device_count()`), or a name assigned
    from one (`tpu_size = jax.device_count()`)."""
    count = s.value(node)
    return isinstance(count, ast.Call) and is_name(s.name(count.func),
                                                   *(counts or ("jax.device_count", "jax.local_device_count")))


def shared_draws(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """Data drawn with a leading device axis from a key every host shares, and fed to pmap as it is."""
    if not _pmap_era(s):
        return
    fed = {bound_value(s, a) for a in fed_to_pmap(s) if isinstance(a, ast.Name)}
    for call in s.calls:
        key = argument(call, 0, "key")
        if call in fed and key is not None and _draws_a_device_stack(s, call) and host_index_in(s, key) is None \
                and not _reads_host_number(s, s.enclosing_function(call)):
            yield (call, "shared-shuffle",
                   f"{code_of(call.func)}({code_of(key)}, ...) draws the data pmap is fed from a key every "
                   "host shares (nothing here reads jax.process_index()): every host feeds the same rows",
                   "draw the global batch from the shared key (the same numbers on every host) and let each host "
                   "pass its own rows, [process_index() * per_host, ...), to jax.make_array_from_process_local_data; "
                   "or fold jax.process_index() into the key for rows of each host's own")


_GLOBAL_SIZE = re.compile(r"global_?batch", re.I)


def _global_rows(s: Script, call: ast.Call) -> ast.AST | None:
    """The leading size of a draw's shape= when its name says it is the global batch (`self._global_batch_size`)."""
    shape = keyword(call, "shape")
    shape = shape if shape is not None else (call.args[1] if len(call.args) > 1 else None)
    first = shape.elts[0] if isinstance(shape, (ast.Tuple, ast.List)) and shape.elts else None
    named = first.attr if isinstance(first, ast.Attribute) else first.id if isinstance(first, ast.Name) else ""
    return first if _GLOBAL_SIZE.search(named) else None


def drawn_global_batches(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """A loader's `__next__` that draws each batch with jax.random at the global batch size from a key every host
    shares: every host makes the whole global batch, and the same one."""
    if not _pmap_era(s):
        return
    for call in s.calls:
        function = s.enclosing_function(call)
        size = _global_rows(s, call) if s.name(call.func).startswith("jax.random.") else None
        if size is None or getattr(function, "name", "") != "__next__" or _traced(s, call) \
                or _reads_host_number(s, function):
            continue
        yield (call, "global-batch-per-host",
               f"{code_of(call.func)}(..., shape=[{code_of(size)}, ...]) draws the whole global batch in this "
               "host's loader: every host makes every host's rows",
               "each host draws its part: global_batch // jax.process_count() rows, and "
               "jax.make_array_from_process_local_data assembles the global batch")
        yield (call, "shared-shuffle",
               f"{code_of(call.func)}({code_of(call.args[0]) if call.args else ''}, ...) draws from a key every host "
               "shares (nothing here reads jax.process_index()): every host draws the same rows",
               "fold jax.process_index() into the key for rows of each host's own, or draw the global batch once "
               "and let each host pass its part to jax.make_array_from_process_local_data")


# for batch_rules, which reads batch sizes and rows the same way
pmap_era, reads_host_number = _pmap_era, _reads_host_number
global_sizes, reads_by_index, traced, splits_by_host = _global_sizes, _reads_by_index, _traced, _splits_by_host

# the roots of libraries whose loaders the other rules read (or that load no batches): not a project's own library
RULES = (shared_shuffle, shared_loader_order, global_batch_per_host, shared_draws, drawn_global_batches,
         stacked_through_a_count, split_per_device)
