"""The rules for host-local data in a pmap-era script: a loader that shuffles with a key or seed
every host shares (and never looks at its process index), and a per-host batch sized with
`jax.device_count()`, which counts every host's devices."""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.script import Script, code_of, is_name

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
    return any(True for _ in s.pmaps()) or any(
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
        if shuffles and not _reads_host_number(s, s.enclosing_function(call)) and not _unseeded(s, call):
            yield (call, "shared-shuffle",
                   f"{code_of(call.func)}(...) shuffles with a key or seed every host shares, and this loader "
                   "never reads jax.process_index(): every host reads the same rows",
                   "keep the shared shuffle (the same order on every host) and let each host take its own "
                   "part of each global batch: rows [process_index() * per_host, ...) of it")


def _unseeded(s: Script, call: ast.Call) -> bool:
    """`ds.map(f).shuffle(10_000)`: a dataset's shuffle of a buffer size with no seed, a different order on each host
    (not a shuffle every host shares); numpy's and jax.random's always take the array or key they shuffle."""
    if is_name(s.name(call.func), *_SHUFFLES) or getattr(call.func, "attr", "") != "shuffle" \
            or any(k.arg == "seed" for k in call.keywords) or len(call.args) != 1:
        return False
    return isinstance(call.args[0], ast.Constant) or isinstance(getattr(call.func, "value", None), ast.Call)


def _only_counted_with(s: Script, product: ast.BinOp) -> bool:
    """`total = per_device * jax.device_count()` that the script only does arithmetic with (steps per epoch, a
    learning rate) or logs (an f-string): the global batch used as such, not a size handed to a loader."""
    holder = s.parent.get(product)
    while isinstance(holder, ast.BinOp):  # `steps * (per_replica * devices // mp)`
        holder = s.parent.get(holder)
    if not (isinstance(holder, ast.Assign) and len(holder.targets) == 1 and isinstance(holder.targets[0], ast.Name)):
        return False
    name = holder.targets[0].id
    uses = [n for n in ast.walk(s.tree) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    return bool(uses) and all(isinstance(s.parent.get(n), (ast.BinOp, ast.FormattedValue)) for n in uses)


def global_batch_per_host(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    if not _pmap_era(s) or any(is_name(s.name(c.func), "jax.process_count") for c in s.calls):
        return  # a script that divides by the process count splits the global batch itself
    for node in ast.walk(s.tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and not _only_counted_with(s, node):
            for side in (node.left, node.right):
                count = s.value(side)  # `tpu_size = jax.device_count()` counts every device too
                if isinstance(count, ast.Call) and is_name(s.name(count.func), "jax.device_count"):
                    yield (side, "global-batch-per-host",
                           f"{code_of(node)} is the global batch (jax.device_count() counts every host's "
                           "devices), and a per-host loader that reads this many rows reads the whole "
                           "global batch on every host",
                           "each host reads its part: global_batch // jax.process_count() rows, and "
                           "jax.make_array_from_process_local_data assembles the global batch")
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


RULES = (shared_shuffle, global_batch_per_host)
