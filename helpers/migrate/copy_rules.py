"""The rules for pmap's copies taken apart or made by hand: `x[0]` (or another device's index) of a pmap output,
a tree map of `lambda x: x[0]`, the project's own get_first / replicate helpers, copies stacked or repeated per local
device, and a project checkpointer handed pmap's stacks. After the port each is one global value.
"""
from __future__ import annotations

import ast
from typing import Callable, Iterator

from helpers.migrate.across_hosts import in_pmap_over_hosts
from helpers.migrate.bindings import a_loaders_batch, batch_rows, bound_value, device_count_of, reaches
from helpers.migrate.device_rows import holds_rows
from helpers.migrate.host_read_rules import imported_pmap_runners
from helpers.migrate.jax_rules import counts_devices
from helpers.migrate.key_rules import splits_per_device
from helpers.migrate.reach import runs_under_pmap
from helpers.migrate.script import MESH_AXES, Script, code_of, first_copy, first_copy_of, is_name, root_name

LESSONS: dict[str, tuple[str, str]] = {}  # jax-utils-replicate, process-zero-save, per-device-keys: other families'


def entries_of(s: Script, stacks: set[str]) -> set[str]:
    """The loop names that take a pmap output's entries: `value` in `for name, value in metrics.items():`."""
    return {target.id for loop in ast.walk(s.tree) if isinstance(loop, ast.For)
            for target in [_entry_target(loop, stacks)] if target is not None}


def _entry_target(loop: ast.For | ast.comprehension, stacks: set[str]) -> ast.Name | None:
    method = loop.iter.func if isinstance(loop.iter, ast.Call) else None
    if not (isinstance(method, ast.Attribute) and root_name(method.value) in stacks):  # also `stats['fine'].items()`
        return None
    target = loop.target.elts[-1] if method.attr == "items" and isinstance(loop.target, ast.Tuple) \
        else loop.target if method.attr == "values" else None
    return target if isinstance(target, ast.Name) else None


def entry_in_comprehension(s: Script, name: ast.AST, stacks: set[str]) -> bool:
    """`v` in `{k: v[0] for k, v in metrics.items()}`: a pmap output's entry, named in the comprehension that takes
    it."""
    node = name
    while isinstance(name, ast.Name) and node in s.parent:
        node = s.parent[node]
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            if any((t := _entry_target(g, stacks)) is not None and t.id == name.id for g in node.generators):
                return True
    return False


def copy_zero(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`jax.tree.map(lambda x: x[0], state)`, `loss[0]` or `np.asarray(loss)[0]` of a pmap output: pmap's
    unreplicate, by hand (said where the [0] is: in a helper's body at the [0], where the script's values are
    mapped at the tree map's call)."""
    if not s.pmaps_here():
        return
    outputs = s.pmap_outputs() | _runner_outputs(s)
    stacks = outputs | entries_of(s, outputs)
    in_view = s.pmapped_call_test()
    pmapped_call = lambda value: in_view(value) or isinstance(value, ast.Call) \
        and _a_projects_pmap_runner(s, value.func)  # noqa: E731
    stacked = lambda held: isinstance(held, ast.Name) and (  # noqa: E731
        held.id in stacks or entry_in_comprehension(s, held, outputs)) or pmapped_call(held)
    for node in ast.walk(s.tree):
        if first_copy_of(node, stacked, last=True) and not in_pmap_over_hosts(s, node) \
                and not _not_yet_an_output(s, node, stacks, pmapped_call) \
                and not _a_parameter_under_pmap(s, node, stacks):
            held = node.value if isinstance(node.value, ast.Name) else None
            if held is not None and holds_rows(s, held):
                yield (node, "local-batch",
                       f"{code_of(node)} takes device 0's rows of {held.id}, a per-example output the step did not "
                       "reduce (each device returns its own rows); after the port it is one global array over every "
                       "host's rows, and [0] would take its first row",
                       "this host's rows: multihost_utils.global_array_to_host_local_array(out, mesh, P(('host', "
                       "'device'))), then any row of it; or every host's with multihost_utils.process_allgather(out)")
                continue
            if held is not None and _a_key_stack(s, held):
                yield (node, "per-device-keys",
                       f"{code_of(node)} takes device 0's key of {held.id}, keys split one a local device (each device's "
                       "differs: no copy); after the port there is one key, and [0] would index into it",
                       "the one key itself (jax.random.split(key) for a fresh one on the host); inside shard_map, "
                       f"jax.random.fold_in(key, jax.lax.axis_index({MESH_AXES})) for each device's")
                continue
            yield (node, "jax-utils-replicate",
                   f"{code_of(node)} takes one device's entry of pmap's per-device output; after the port it is "
                   "one global value, and the index would index into it",
                   "use the value as it is: a P() result is the same on every device")
    said = set()
    for call in s.calls:
        mapped = mapped_function(s, call) if s.is_tree_map(call) and call.args else None
        if mapped is None:
            continue
        params = {a.arg for a in mapped.args.args}
        first = next((n for body in _bodies(mapped) for n in ast.walk(body) if first_copy(n, params)), None)
        if first is None or in_pmap_over_hosts(s, call):
            continue
        if len(call.args) > 1 and a_loaders_batch(s, call.args[1]):
            yield (call, "local-batch", *batch_rows(f"{code_of(first)} of each leaf of {code_of(call.args[1])}"))
            continue
        if mapped is not call.args[0] and first not in said:  # a helper of the script's: said in its body too
            said.add(first)
            yield (first, "jax-utils-replicate",
                   f"{code_of(first)} in {code_of(call.args[0])} takes device 0's copy of each leaf of pmap's stacks it "
                   "is mapped over; after the port each leaf is one global value, and [0] would take its first row",
                   "return the leaf as it is: a P() array already is the value")
        yield (first if _maps_a_parameter(s, call) else call, "jax-utils-replicate",
               f"{code_of(call)} takes device 0's copy of pmap's stack by hand ({code_of(first)} of each leaf); "
               "after the port each leaf is one global value, and [0] would take its first row",
               "nothing: a P() array already is the value (read it on any host, device_get it to save or print); "
               "a leaf sharded over the hosts is read with multihost_utils.process_allgather on every host")


def _runner_outputs(s: Script) -> set[str]:
    """Names bound from a call of the project's pmapped step, or of its function that runs one
    (`keys, x, rate = src.vmc.sample(...)`): pmap's per-device stacks, made out of view."""
    return {n.id for node in ast.walk(s.tree) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
            and _a_projects_pmap_runner(s, node.value.func) for t in node.targets for n in ast.walk(t)
            if isinstance(n, ast.Name)}


def _a_projects_pmap_runner(s: Script, func: ast.AST) -> bool:
    """A pmapped step of the project, or its function that runs one and hands back the output, imported by name
    (`from src.vmc import sample`) or read from its module (`src.vmc.sample(...)`), not defined here."""
    if isinstance(func, ast.Name):
        return func.id in imported_pmap_runners(s)
    return isinstance(func, ast.Attribute) and func.attr in s.folder.pmap_runners \
        and root_name(func) in s.names.alias and s.name(func).split(".")[0] not in _NOT_A_PROJECT


def mapped_function(s: Script, call: ast.Call) -> ast.Lambda | ast.FunctionDef | None:
    """What a tree map maps: a lambda written there, or a function or lambda named there that the script (or the
    function the map is in) defines (`tree_map(select_first, models)`, `tree_map(fetch_fn, x)`)."""
    mapped = call.args[0]
    if isinstance(mapped, ast.Lambda):
        return mapped
    if not isinstance(mapped, ast.Name):
        return None
    value = bound_value(s, mapped)
    if isinstance(value, ast.Lambda):
        return value
    return next((d for d in ast.walk(s.tree) if isinstance(d, ast.FunctionDef) and d.name == mapped.id
                 and len(d.args.args) == 1), None)


def _bodies(function: ast.Lambda | ast.FunctionDef) -> list[ast.AST]:
    return [function.body] if isinstance(function, ast.Lambda) else function.body


def _maps_a_parameter(s: Script, call: ast.Call) -> bool:
    """A tree map over what its function was handed (`lambda tree: jax.tree.map(lambda x: x[0], tree)`): a helper's
    body, not the script's own values."""
    function = s.scope(call)
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return False
    params = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    return any(isinstance(n, ast.Name) and n.id in params and bound_value(s, n) is None
               for a in call.args[1:] for n in ast.walk(a))


def _a_key_stack(s: Script, held: ast.Name) -> bool:
    """Its function also binds the name to keys split one a local device (`keys = random.split(rng, n_devices)`,
    handed through the pmapped step and back): device 0's entry of it is a key, not a copy."""
    return any(isinstance(node, ast.Assign) and splits_per_device(s, node.value) and any(
        isinstance(n, ast.Name) and n.id == held.id for target in node.targets for n in ast.walk(target))
        for node in ast.walk(s.scope(held)))


def _not_yet_an_output(s: Script, node: ast.AST, stacks: set[str],
                       pmapped_call: Callable[[ast.AST], bool]) -> bool:
    """`model[0]` read outside any loop where `model` was bound before, in its scope, only by something other
    than a pmapped call (`model = init(...)`; a pmapped step's output only later): not yet pmap's stack."""
    name = next((n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in stacks), None)
    if name is None:  # `step(x)[0]`: the pmapped call itself
        return False
    scope = s.scope(name)
    if _in_a_loop(s, name, scope):
        return False
    bindings = [a for a in ast.walk(scope) if isinstance(a, ast.Assign) and s.scope(a) is scope
                and a.lineno < name.lineno and any(isinstance(n, ast.Name) and n.id == name.id
                                                   for target in a.targets for n in ast.walk(target))]
    return bool(bindings) and not any(pmapped_call(a.value) or isinstance(a.value, ast.Name) and a.value.id in stacks
                                      for a in bindings)


def _a_parameter_under_pmap(s: Script, node: ast.AST, stacks: set[str]) -> bool:
    """`params[0]` where `params` is a parameter of a function pmap runs (pmapped, or called from a pmapped step:
    `def loss_fn(params, batch)` of `jax.value_and_grad(loss_fn)` in the step): one device's value, pmap's axis
    stripped, that only shares its name with a pmap output (the index takes an item of its tuple)."""
    name = next((n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in stacks), None)
    if name is None:
        return False
    function = s.scope(name)
    return isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
        and name.id in {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)} \
        and bound_value(s, name) is None and runs_under_pmap(s, name)


def _in_a_loop(s: Script, node: ast.AST, scope: ast.AST) -> bool:
    while node is not scope and node in s.parent:
        node = s.parent[node]
        if isinstance(node, (ast.For, ast.While, ast.comprehension)):
            return True
    return False


def copy_at_another_index(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`state.opt_state[2][1].hyperparams['lr'][-1]` of a replicated state that a pmap gives back: device k's copy,
    taken by hand as [0] is (the last index that reaches the leaf is the device's: one from the end, or one read
    as a number, `int(state.step[1])`; other indices may pick an item of the state's tuples)."""
    if not s.pmaps_here(nnx=False):
        return
    states = s.pmap_outputs() & {t.id for node in ast.walk(s.tree) if isinstance(node, ast.Assign)
                                 and s.replicates(node.value) for t in node.targets if isinstance(t, ast.Name)}
    found = [node for node in ast.walk(s.tree) if _device_index(node) not in (None, 0)
             and _leaf_root(node.value) in states]
    inner = {id(n) for node in found for n in ast.walk(node.value)}
    found = [n for n in found if _device_index(n) < 0 or _read_as_number(s, n)]
    for node in (n for n in found if id(n) not in inner):
        yield (node, "jax-utils-replicate",
               f"{code_of(node)} takes "
               + ("the last device's" if _device_index(node) == -1 else f"device {_device_index(node)}'s")
               + " copy of a replicated state that pmap gives "
               "back, by hand; after the port the leaf is one global value, and the index would take its row",
               "use the leaf as it is: a P() value is the same on every device (read it on any host)")


def _device_index(node: ast.AST) -> int | None:
    """The integer a subscript takes (`x[-1]`, `x[2]`), if it is one."""
    if not isinstance(node, ast.Subscript):
        return None
    index = node.slice
    if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub):
        index = index.operand
        sign = -1
    else:
        sign = 1
    return sign * index.value if isinstance(index, ast.Constant) and type(index.value) is int else None


def _read_as_number(s: Script, node: ast.AST) -> bool:
    """`x.item()`, `int(x)` or `float(x)`: the value read as a Python number."""
    parent = s.parent.get(node)
    return isinstance(parent, ast.Attribute) and parent.attr == "item" or isinstance(parent, ast.Call) \
        and isinstance(parent.func, ast.Name) and parent.func.id in ("int", "float") and node in parent.args


def _leaf_root(node: ast.AST) -> str | None:
    """The name a chain of fields and entries starts from (`state` of `state.opt_state[2].hyperparams['lr']`)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def copy_helpers(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """The project's own helpers that make or undo pmap's copies (`utils.get_first`, `bcast_local_devices`,
    followed to their bodies in the script or its folder), a repeat or broadcast of `x[None]` over the local
    devices, and a checkpointer of the project handed pmap's stacks."""
    for call in s.calls:
        kind = s.copy_helper(call) or _a_project_module_copy(s, call)
        short = s.name(call.func).rsplit(".", 1)[-1].lower()
        if kind == "unreplicate" and ("save" in short or "checkpoint" in short):
            yield (call, "jax-utils-replicate",
                   f"{code_of(call.func)}(...) saves device 0's copy of pmap's stacks (its body takes x[0] and "
                   "device_gets it); after the port the state is global arrays, split over the hosts when sharded, "
                   "and [0] would take the first row of each",
                   "save the global state on every host with an orbax.checkpoint.CheckpointManager (each host writes "
                   "its shards), without [0]")
        elif kind == "unreplicate" and call.args and a_loaders_batch(s, call.args[0]):
            yield (call, "local-batch", *batch_rows(f"{code_of(call.func)}(...) of {code_of(call.args[0])}"))
        elif kind == "unreplicate":
            yield (call, "jax-utils-replicate",
                   f"{code_of(call.func)}(...) takes device 0's copy of pmap's per-device stacks (a project helper "
                   "that is flax's unreplicate by hand: x[0] of each leaf); after the port each leaf is one global "
                   "value, and [0] would take its first row",
                   "nothing: a P() array already is the value (read it on any host; device_get it to print)")
        elif kind == "replicate":
            yield (call, "jax-utils-replicate",
                   f"{code_of(call.func)}(...) copies one value to every local device (a project helper that is "
                   "pmap's replicate: device_put_replicated, device_put_sharded of len(devices) * [x], or a pmap that "
                   "hands back one value): one value replicated, not a batch split",
                   "jax.device_put(x, NamedSharding(mesh, P())) once: one global value, on every device")
        elif s.stacks_per_device(call) or _stacks_local_copies(s, call):
            yield (call, "jax-utils-replicate",
                   f"{code_of(call)} stacks a copy of one value per device by hand (pmap's replicate; put on a "
                   "sharding over the devices' axis, it is device_put_sharded of the copies)",
                   "jax.device_put(x, NamedSharding(mesh, P())) once: one global value, on every device")
        elif _repeats_over_local_devices(s, call):
            yield (call, "jax-utils-replicate",
                   f"{code_of(call.func)}({code_of(call.args[0])}, ...) stacks a copy per local device by hand "
                   "(pmap's replicate)",
                   "jax.device_put(x, NamedSharding(mesh, P())) once: one global value, on every device")
        elif _saves_stacks_out_of_view(s, call):
            short = s.name(call.func).rsplit(".", 1)[-1]
            whose = ("whose body (in the project) tests the process index: it" if short in s.folder.host_aware
                     else "whose code is not in this folder: a pmap-era checkpointer")
            yield (call, "process-zero-save",
                   f"{code_of(call.func)}(...) hands pmap's per-device stacks to the project's checkpointer, {whose} "
                   "takes copy [0] (device_get(x[0])) and writes on process 0 only; after the port the state is "
                   "global arrays that every host must save its shards of",
                   "an orbax.checkpoint.CheckpointManager called on every host with the global state (no [0]); "
                   "Orbax lets process 0 write the shared metadata")


_NOT_A_PROJECT = ("jax", "jaxlib", "flax", "haiku", "equinox", "optax", "numpy", "chex", "torch", "tensorflow",
                  "functools", "copy", "ray", "dask", "multiprocessing")


def _a_project_module_copy(s: Script, call: ast.Call) -> str | None:
    """`u.replicate(params)` with `import util as u` (or `replicate` imported from it), a module of the script's own
    project (not flax's jax_utils, not a method of an object), in a script that pmaps: the project's replicate (or
    unreplicate) of pmap's copies."""
    func = call.func
    short = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if short not in ("replicate", "unreplicate") or not call.args or len(call.args) != 1 or call.keywords:
        return None
    if isinstance(func, ast.Attribute):
        module = s.names.alias.get(func.value.id) if isinstance(func.value, ast.Name) else None
    else:  # `from myproject.utils import replicate`
        module = s.names.alias.get(func.id, "").rpartition(".")[0] or None
    if module is None or module.split(".")[0] in _NOT_A_PROJECT or not s.pmaps_here(nnx=False):
        return None
    return short


def _copies_per_local_device(s: Script, node: ast.AST) -> bool:
    """`[x] * len(self.local_devices)` or `n * [x]` (also starred), its count one of this host's devices (through
    names and attributes the script binds)."""
    node = node.value if isinstance(node, ast.Starred) else node
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
        return False
    sides = (node.left, node.right)
    count = next((b for a, b in (sides, sides[::-1]) if isinstance(a, ast.List) and len(a.elts) == 1), None)
    return count is not None and device_count_of(s, count) == "local"


def _stacks_local_copies(s: Script, call: ast.Call) -> bool:
    """In a pmap-era script, copies of one value stacked per local device by hand: `jnp.stack([x] * n_local)`, or a
    tree map of a function that stacks what it is handed over copies per device (`jax.tree.map(lambda *xs:
    jnp.stack(xs), *[tree] * len(local_devices))`): pmap's replicate."""
    if not s.pmaps_here():
        return False
    if is_name(s.name(call.func), "numpy.stack", "jax.numpy.stack") and call.args:
        return _copies_per_local_device(s, call.args[0])
    if not (s.is_tree_map(call) and call.args and isinstance(call.args[0], ast.Lambda)):
        return False
    stacks = any(isinstance(n, ast.Call) and is_name(s.name(n.func), "numpy.stack", "jax.numpy.stack")
                 for n in ast.walk(call.args[0].body))
    return stacks and any(_copies_per_local_device(s, a) for a in call.args[1:])


def copy_of_a_made_stack(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`params[...][0]` or `keys[0]` of a stack the script made itself (flax's replicate, copies stacked per local
    device, keys split one a local device), also of a field of one (`params = state.params`), of what a method such
    as `.replace(...)` makes of one, and of what a call it is handed gives back under the same name (`state, keys =
    step(keys, state, batch)`: a step out of view carries the stacks): device 0's copy, by hand."""
    if not s.pmaps_here() and not any(s.replicates(c) for c in s.calls):
        return
    outputs = s.pmap_outputs()
    for node in ast.walk(s.tree):
        if isinstance(node, ast.Subscript) and not first_copy(node, outputs) \
                and first_copy_of(node, lambda held: True) and _of_a_made_stack(s, node.value) \
                and not runs_under_pmap(s, node):
            yield (node, "jax-utils-replicate",
                   f"{code_of(node)} takes device 0's copy of a stack made one a local device (pmap's replicate, or "
                   "keys split per local device); after the port it is one global value, and [0] would take its "
                   "first row",
                   "use the value as it is: a P() array is the same on every device (one key: fold in "
                   "jax.lax.axis_index inside the step where each device needs its own)")


def _of_a_made_stack(s: Script, node: ast.AST) -> bool:
    """The chain of fields and entries `[0]` is taken of (`self.state.num_steps`, `np.asarray(keys)`) starts at, or
    passes, a stack the script made."""
    if isinstance(node, ast.Call) and len(node.args) == 1:  # np.asarray(x)[0]
        node = node.args[0]
    while True:
        if _made_stack(s, node):
            return True
        if isinstance(node, ast.Attribute) or isinstance(node, ast.Subscript) and isinstance(
                node.slice, ast.Constant) and isinstance(node.slice.value, str):
            node = node.value
        else:
            return False


def _made_stack(s: Script, held: ast.AST, depth: int = 0) -> bool:
    """A name or `self.` attribute whose value, where it is read, is a stack of copies one a local device."""
    if depth > 6 or not isinstance(held, (ast.Name, ast.Attribute)):
        return False
    value = bound_value(s, held)
    if value is None:
        return False
    if s.replicates(value) or isinstance(value, ast.Call) and (s.stacks_copies(value) or _stacks_local_copies(
            s, value) or _splits_per_local_device(s, value)):
        return True
    while isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) and isinstance(
            value.slice.value, str) or isinstance(value, ast.Attribute):  # a field or entry: `state.params['p']`
        value = value.value
    if isinstance(value, (ast.Name, ast.Attribute)):
        return _made_stack(s, value, depth + 1)
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Attribute) and func.attr in ("replace", "_replace", "copy"):  # a dataclass's new copy
        return _made_stack(s, func.value, depth + 1)
    name = (s.name(func) or code_of(func)).rsplit(".", 1)[-1].lower()
    if "unreplicate" in name or "first" in name or "get" in name or s.copy_helper(value) is not None:
        return False
    carried = [a for a in [*value.args, *(k.value for k in value.keywords)]
               if isinstance(a, (ast.Name, ast.Attribute)) and code_of(a) == code_of(held)]
    return any(_made_stack(s, a, depth + 1) for a in carried)


def _splits_per_local_device(s: Script, call: ast.Call) -> bool:
    """`jax.random.split(key, jax.local_device_count())`: one key a local device."""
    return is_name(s.name(call.func), "jax.random.split") and len(call.args) > 1 \
        and device_count_of(s, call.args[1]) == "local"


def _repeats_over_local_devices(s: Script, call: ast.Call) -> bool:
    """`jnp.repeat(x[None], n_local_devices, axis=0)` (or jnp.tile): copies per local device, by hand."""
    return is_name(s.name(call.func), "repeat", "tile") and len(call.args) > 1 \
        and s.name(call.func).startswith(("jax.numpy.", "numpy.")) \
        and counts_devices(s, call.args[1], local_only=True)


def _saves_stacks_out_of_view(s: Script, call: ast.Call) -> bool:
    """`self._checkpointer.maybe_save_checkpoint(self._state, ...)`: a save of the project's own (neither Flax's
    nor Orbax's, nor a copy helper the tool read) handed a pmap output, in a pmap-era script."""
    name = s.name(call.func)
    short = name.rsplit(".", 1)[-1].lower()
    if not ("save" in short and ("checkpoint" in short or "ckpt" in short)) or name.startswith(
            ("flax.", "orbax", "jax.")) or s.copy_helper(call) is not None or isinstance(call.func, ast.Name):
        return False
    stacks = s.pmap_outputs() | _stack_attributes(s)
    return any(isinstance(a, ast.Name) and a.id in stacks or isinstance(a, ast.Attribute) and code_of(a) in stacks
               for a in [*call.args, *(k.value for k in call.keywords)])


def _stack_attributes(s: Script) -> set[str]:
    """`self._state` where the script assigns it the result of a pmapped function or method."""
    pmapped_call = s.pmapped_call_test()
    return {code_of(n) for node in ast.walk(s.tree) if isinstance(node, ast.Assign) and pmapped_call(node.value)
            for t in node.targets for n in ([t] if isinstance(t, ast.Attribute) else getattr(t, "elts", []))
            if isinstance(n, ast.Attribute)}


RULES = (copy_zero, copy_at_another_index, copy_helpers, copy_of_a_made_stack)
