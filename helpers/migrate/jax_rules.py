"""The rules for JAX's own pmap-era patterns: pmap (its collectives are collective_rules'), removed calls, host-local
batches, specs that leave out the host axis, pmap's copies taken apart by hand. (Per-device keys are
key_rules'; work on process 0 only is process_zero_rules'.)

Each rule reads a `Script` and yields (node, rule name, what the line does on several hosts, what
to write instead); `LESSONS` names the notebook section that teaches each rule's fix.
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.across_hosts import pmaps_over_hosts
from helpers.migrate.batch_rules import shares_a_global_count
from helpers.migrate.bindings import (a_loaders_batch, arguments_for, batch_rows, bound_value, checked_count,
                                      device_count_of, reaches, this_hosts_devices)
from helpers.migrate.key_rules import in_key_split_counts
from helpers.migrate.script import (MESH_AXES, MESH_MAKERS, SPEC_MAKERS, Script, argument, code_of, device_grid,
                                    is_name, is_name_call, keyword, pmap_axis, root_name, strings)

# rule -> (notebook, section heading without its number): where the course teaches the fix
LESSONS: dict[str, tuple[str, str]] = {
    "pmap": ("06", "A line-by-line port"),
    "device-put-replicated": ("04", "What pmap is in jax 0.12"),
    "experimental-shard-map": ("06", "Five more things a real port runs into"),
    "with-mesh": ("06", "Five more things a real port runs into"),
    "local-batch": ("07", "Way three: `shard_map` on a `(host, device)` mesh, with a global batch"),
    "jax-utils-replicate": ("10", "Where the parameters and the optimizer state live"),
    "device-only-spec": ("07", "The question the course started from: `P('device')`"),
}
_TO_GLOBAL = {"jax.make_array_from_process_local_data",
              "jax.experimental.multihost_utils.host_local_array_to_global_array",
              "jax.device_put"}


def _pmap(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for call in s.pmaps():
        if call in pmaps_over_hosts(s):  # host_read_rules says what replaces it
            continue
        devices = keyword(call, "devices")
        local = this_hosts_devices(s, devices)  # mesh_rules says more
        axis = s.axis_names(pmap_axis(call))
        in_axes = keyword(call, "in_axes")
        said = [f"axis_name={axis[0]!r}"] if axis else []
        if in_axes is not None:
            said.append(f"in_axes={code_of(in_axes)}")
        carried = [f"{code_of(k.value)} as {k.arg.replace('static_broadcasted_argnums', 'static_argnums')} on "
                   "jax.jit" for k in call.keywords if k.arg in ("donate_argnums", "static_broadcasted_argnums")]
        yield (call if is_name_call(call) else call.args[0], "pmap",  # partial(\n jax.pmap, ...): at jax.pmap
               (f"jax.pmap({', '.join(said)}, devices={code_of(devices)}) maps this host's devices only"
                if local else f"jax.pmap({', '.join(said)}) maps over every host's devices"
                + (f" (its axis {axis[0]!r} spans every device of every host)" if axis else ""))
               + ", but each host feeds only its own part: a stack with a leading axis of local_device_count(), "
               "built in that host's own Python, so what each host makes there (keys split from the same seed, "
               "its rows) is per host; the parameters are stacked copies",
               f"jax.jit(jax.shard_map(..., mesh=mesh, in_specs=..., out_specs=...)) over a "
               f"{MESH_AXES} mesh with global arrays: "
               + (f"in_specs={specs} (P() for what the script replicated)" if (specs := pmap_in_specs(s, call))
                  else "P(('host', 'device')) where in_axes was 0, P() where it was None or the argument "
                       "was replicated")
               + "".join(f"; {c}" for c in carried)
               + (f"; the keys (argument {keys + 1}, from shard_prng_key): P({MESH_AXES}) keeps the script's "
                  "key per device (the body gets a block of one key: take keys[0]), or one key with P() and "
                  f"fold_in(key, axis_index({MESH_AXES})) for keys of their own"
                  if (keys := _shard_prng_key_argument(s, call)) is not None else "")
               + "; or, for a step that needs nothing per device, a plain jax.jit on the global batch")


def pmapped_out_of_view(s: Script) -> dict[ast.Call, set[str]]:
    """The project's calls that return a function pmapped out of view (`sampler = sampling.make_sampler(...)` in
    another module), each with the names bound to it: in a pmap-era script, a function bound to a call of the project
    (no library's, none the script defines) and called with pmap's stacks (a replicated state, keys split one a
    device, a pmap output)."""
    if not s.pmaps_here():
        return {}
    pmapped, found = s.pmapped_names(), {}
    for call in s.calls:
        if not isinstance(call.func, ast.Name) or call.func.id in pmapped or call.func.id in s.defined:
            continue
        factory = bound_value(s, call.func)
        if isinstance(factory, ast.Call) and _projects_call(s, factory) and any(
                holds_pmap_stacks(s, a, pmapped) for a in call.args):
            found.setdefault(factory, set()).add(call.func.id)
    return found


def _projects_call(s: Script, call: ast.Call) -> bool:
    """A call of the project's own code out of view: neither a library's, nor the script's, nor a pmap wrapper."""
    name = s.name(call.func)
    return bool(name) and not name.startswith(_NOT_PROJECTS) and name.rsplit(".", 1)[-1] not in s.defined \
        and call not in s.wrappers and not set(ast.walk(call)) & set(s.pmaps())


_NOT_PROJECTS = ("jax.", "flax.", "optax.", "numpy.", "functools.", "haiku.", "equinox.", "self.", "tensorflow.",
                 "torch.")


def holds_pmap_stacks(s: Script, arg: ast.AST, pmapped: set[str]) -> bool:
    """An argument that is one of pmap's stacks, by its own history of names: a replicated value (flax's
    replicate), keys split one a device (`split(key, jax.local_device_count() + 1)`, then jnp.asarray or a
    reshape; shard_prng_key), or a pmapped function's output (block_until_ready passes each on)."""
    node = arg
    for _ in range(8):
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            node = node.value
        if isinstance(node, ast.Name):
            node = bound_value(s, node)
        if not isinstance(node, ast.Call):
            return False
        if s.replicates(node) or _splits_per_device(s, node) or _is_shard_prng_key(s, node) or (
                isinstance(node.func, ast.Name) and node.func.id in pmapped):
            return True
        if is_name(s.name(node.func), "asarray", "array", "stack", "block_until_ready") and node.args:
            node = node.args[0]
        elif isinstance(node.func, ast.Attribute) and node.func.attr in ("reshape", "block_until_ready"):
            node = node.func.value
        else:
            return False
    return False


def _splits_per_device(s: Script, call: ast.Call) -> bool:
    """`jax.random.split(key, n)` with n a count of the devices (`jax.local_device_count() + 1`, `len(jax.devices())`)."""
    count = argument(call, 1, "num")
    return is_name(s.name(call.func), "jax.random.split") and count is not None and reaches(
        s, count, lambda n: isinstance(n, ast.Call) and is_name(s.name(n.func), "local_device_count", "device_count",
                                                                  "local_devices", "devices")) is not None


def _pmapped_out_of_view(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for factory, names in pmapped_out_of_view(s).items():
        yield (factory, "pmap",
               f"{code_of(factory.func)}(...) returns a function ({', '.join(sorted(names))}) that this script calls "
               "with pmap's stacks (a replicated state, keys split one a device): the project pmaps it out of view "
               "(each host feeds its own devices), and its outputs are per-device stacks of this host's rows",
               f"port the project's function: jax.jit(jax.shard_map(f, mesh=mesh, in_specs=..., out_specs=...)) over a "
               f"{MESH_AXES} mesh (P() for the state, P({MESH_AXES}) for what it splits), or a plain jax.jit on global "
               "arrays; then hand it the state as it is (no replicate) and one key")


def _pmap_wrapper(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """A project's function that pmaps what it is handed: `utils.dist(sample, axis_name='batch')`."""
    for call in s.wrappers:
        axis = s.axis_names(pmap_axis(call))
        short = s.name(call.func).rsplit(".", 1)[-1]
        where = ("defined in another file of this folder, calls jax.pmap" if short in s.folder.pmappers
                 else f"handed a function and pmap's keyword axis_name={axis[0]!r}, pmaps it" if axis
                 else "named pmap and defined where the tool cannot read it, pmaps what it is handed")
        for said in _pmap_keywords(call) or [call]:  # `train_pmap_kwargs={"axis_name": ...}`: where it is set
            yield (said, "pmap",
                   f"{code_of(call.func)}(...), the project's wrapper {where}: the function it wraps runs under "
                   "pmap, each device fed a slice of its host's stack"
                   + (f" (collectives over {axis[0]!r} inside span every host's devices, and the wrapper may "
                      "gather or unreplicate the result)" if axis else ""),
                   f"port the wrapper itself: jax.jit(jax.shard_map(f, mesh=mesh, in_specs=..., out_specs=...)) over a "
                   f"{MESH_AXES} mesh with global arrays (P({MESH_AXES}) for what it split, P() for what it replicated), "
                   "or a plain jax.jit of f on the global batch; then its gather over the axis and its [0] go")


# published libraries' own helpers that run a jax.pmap: -> (rule, what it does, instead)
_LIBRARY_PMAPS = {
    "brax.training.pmap.assert_is_replicated": (
        "pmap",
        "brax's pmap.assert_is_replicated runs a jax.pmap over this host's devices that checks pmap's stacked copies "
        "agree (a pmin and a pmax of each leaf)",
        "nothing: a P() global array is one value, replicated by construction; to check that hosts agree, "
        "jax.experimental.multihost_utils.assert_equal(x)"),
    "brax.training.pmap.synchronize_hosts": (
        "pmap",
        "brax's pmap.synchronize_hosts is a barrier made of a jax.pmap psum over every device (on several hosts)",
        "jax.experimental.multihost_utils.sync_global_devices(name) on every host"),
}


def _library_pmaps(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """Libraries' helpers that run a jax.pmap, and a library told to run its own (`kfac_jax.Optimizer(...,
    multi_device=True)`, a pipeline's `jit=True` is process_zero_rules')."""
    yield from s.calls_in(_LIBRARY_PMAPS)
    for call in s.calls:
        if call not in s.wrappers:  # a wrapper out of view handed pmap's own keywords in a dict
            for said in _pmap_keywords(call):
                yield (said, "pmap",
                       f"{code_of(call.func)}(..., {_said_keyword(call, said)}=...) hands pmap's keywords (its "
                       "axis_name) to code out of view that runs jax.pmap: the functions it is handed run under pmap, "
                       "each device fed a slice of its host's stack, their collectives over that axis",
                       "port what runs the pmap: jax.jit(jax.shard_map(f, mesh=mesh, in_specs=..., out_specs=...)) "
                       f"over a {MESH_AXES} mesh with global arrays, or a plain jax.jit on the global batch; then drop "
                       "these keywords")
        flag = keyword(call, "multi_device")
        if isinstance(flag, ast.Constant) and flag.value is True:
            yield (flag, "pmap",
                   f"{code_of(call.func)}(..., multi_device=True) runs the library's own jax.pmap over this host's "
                   "devices: its inputs are pmap's per-device stacks and its reductions use pmap's axis",
                   "multi_device=False, and call it inside jax.jit on global arrays (or inside shard_map over the "
                   f"{MESH_AXES} mesh, its axis name the mesh's)")


def _pmap_keywords(call: ast.Call) -> list[ast.AST]:
    """The values of a call's keywords named for pmap's keywords that set its axis (`train_pmap_kwargs={"axis_name":
    "batch", "donate_argnums": (0, 1)}`, `pmap_kwargs=dict(axis_name="i")`)."""
    def names_an_axis(value: ast.AST) -> bool:
        if isinstance(value, ast.Dict):
            return any(isinstance(k, ast.Constant) and k.value == "axis_name" for k in value.keys)
        return isinstance(value, ast.Call) and code_of(value.func) == "dict" and any(
            k.arg == "axis_name" for k in value.keywords)
    return [k.value for k in call.keywords if k.arg and "pmap" in k.arg.lower() and names_an_axis(k.value)]


def _said_keyword(call: ast.Call, value: ast.AST) -> str:
    return next(k.arg for k in call.keywords if k.value is value)


def _shard_prng_key_argument(s: Script, call: ast.Call) -> int | None:
    """The position of the argument that the pmapped function's callers give from shard_prng_key."""
    callers = {name for name, value in s.assigned.items() if value is call}
    callers |= {f.name for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef) and call in f.decorator_list}
    keys = {name for name, value in s.assigned.items() if _is_shard_prng_key(s, value)}
    for site in s.calls:
        if isinstance(site.func, ast.Name) and site.func.id in callers:
            for i, a in enumerate(site.args):
                if _is_shard_prng_key(s, a) or (isinstance(a, ast.Name) and a.id in keys):
                    return i
    return None


def _is_shard_prng_key(s: Script, node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and is_name(s.name(node.func), "flax.training.common_utils.shard_prng_key")


def pmap_in_specs(s: Script, call: ast.Call) -> str | None:
    """The in_specs of a `jax.pmap(f, ...)` call's port: from in_axes, or P() for each argument its
    callers pass replicated (`state = state.replicate()`, `state.params`) and the batch spec for
    the rest; None when they cannot be read."""
    in_axes = keyword(call, "in_axes")
    defs = {n.name: n for n in ast.walk(s.tree) if isinstance(n, ast.FunctionDef)}
    if isinstance(in_axes, ast.Tuple):
        axes = [e.value if isinstance(e, ast.Constant) else "?" for e in in_axes.elts]
    elif (in_axes is None or (isinstance(in_axes, ast.Constant) and in_axes.value == 0)) and call.args \
            and isinstance(call.args[0], ast.Name) and call.args[0].id in defs:
        axes = [0] * len(defs[call.args[0].id].args.args)
    elif in_axes is None and any(call in f.decorator_list for f in defs.values()):
        axes = [0] * len(next(f for f in defs.values() if call in f.decorator_list).args.args)
    else:
        return None
    replicated = {t.id for node in ast.walk(s.tree) if isinstance(node, ast.Assign)
                  and s.replicates(node.value) for t in node.targets if isinstance(t, ast.Name)}
    callers = {name for name, value in s.assigned.items() if value is call}
    callers |= {f.name for f in defs.values() if call in f.decorator_list}  # @partial(jax.pmap, ...)
    for site in s.calls:  # an argument its callers pass replicated is one global value: P()
        if isinstance(site.func, ast.Name) and site.func.id in callers:
            axes = [None if root_name(a) in replicated else axes[i]
                    for i, a in enumerate(site.args[:len(axes)])] + axes[len(site.args):]
    if any(a not in (0, None) for a in axes):
        return None
    specs = ["P()" if a is None else f"P({MESH_AXES})" for a in axes]
    return f"({specs[0]},)" if len(specs) == 1 else f"({', '.join(specs)})"


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


def _old_calls(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """The calls of `_OLD_CALLS`, and those functions handed on uncalled (`jax.tree.map(jax_utils.unreplicate, m)`)."""
    for node, rule, does, instead in s.calls_in(_OLD_CALLS):
        if rule == "jax-utils-replicate" and s.name(node.func).endswith("unreplicate") and node.args \
                and a_loaders_batch(s, node.args[0]):
            yield (node, "local-batch", *batch_rows(f"jax_utils.unreplicate({code_of(node.args[0])})"))
        else:
            yield node, rule, does, instead
    for call in s.calls:
        for arg in call.args:
            name = s.name(arg) if isinstance(arg, (ast.Name, ast.Attribute)) else ""
            yield from ((arg, *said) for old, said in _OLD_CALLS.items() if is_name(name, old))
    for node in getattr(s.tree, "body", ()):  # `replicate = flax.jax_utils.replicate`: the call by another name
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute):
            yield from ((node.value, *said) for old, said in _OLD_CALLS.items() if is_name(s.name(node.value), old))


def experimental_shard_map(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
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


def with_mesh(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for node in ast.walk(s.tree):
        if isinstance(node, ast.With):
            for item in node.items:
                expr = item.context_expr
                if isinstance(expr, (ast.Name, ast.Attribute)) and is_mesh(s, expr):
                    made = s.assigned.get(expr.id) if isinstance(expr, ast.Name) else None
                    old = isinstance(made, ast.Call) and s.name(made.func).endswith("maps.Mesh")
                    yield (node, "with-mesh",
                           f"`with {code_of(expr)}:` is deprecated (since jax 0.10.1)"
                           + (": with a jax.experimental.maps.Mesh it also made pjit read each host's numpy batch as "
                              "that host's part; jax.jit reads a numpy input as the whole global value" if old else ""),
                           f"with jax.set_mesh({code_of(expr)}):"
                           + (" on a mesh from jax.make_mesh, and global inputs made with "
                              "jax.make_array_from_process_local_data" if old else ""))
                elif isinstance(expr, ast.Call) and (s.name(expr.func) in MESH_MAKERS
                                                     or s.name(expr.func).endswith(("maps.Mesh", "maps.mesh"))
                                                     or _a_projects_mesh(s, expr)):
                    yield (node, "with-mesh",
                           f"`with {code_of(expr.func)}(...):` uses a mesh as a context manager, deprecated "
                           "since jax 0.10.1 (and " + _OLD_MESH_GONE.get(s.name(expr.func).rsplit(".", 1)[-1],
                                                                        "jax.experimental.maps.Mesh is gone since "
                                                                        "jax 0.4.11") + ")",
                           "mesh = jax.make_mesh(shape, names), then `with jax.set_mesh(mesh):`")


def _a_projects_mesh(s: Script, call: ast.Call) -> bool:
    """`with self.mesh():`, `with get_mesh(cfg):`: a mesh the project makes, entered as a context manager (not
    JAX's own `jax.set_mesh`/`use_mesh`, the current way)."""
    name = s.name(call.func) or code_of(call.func)
    short = name.rsplit(".", 1)[-1].lower()
    return "mesh" in short.split("_") and not name.startswith("jax.") and short not in ("set_mesh", "use_mesh")


_OLD_MESH_GONE = {"mesh": "jax.experimental.maps.mesh, the old function that made a mesh and entered it, is gone "
                          "with jax.experimental.maps since jax 0.4.31"}


def is_mesh(s: Script, expr: ast.AST) -> bool:
    value = s.assigned.get(expr.id) if isinstance(expr, ast.Name) else None
    if isinstance(value, ast.Call):  # jax.make_mesh, maps.Mesh, or a helper of the project (`get_jax_mp_mesh`)
        return s.name(value.func) in MESH_MAKERS or "mesh" in s.name(value.func).rsplit(".", 1)[-1].lower()
    return "mesh" in code_of(expr).lower()


def _local_batch(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    seen = set()
    pmap_era = s.pmaps_here()
    key_counts = in_key_split_counts(s)  # key_rules: keys a device
    for node in ast.walk(s.tree):
        if node in key_counts:
            continue
        shaping = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                   and node.func.attr == "reshape") or (
            isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.FloorDiv, ast.Div)))
        caller = s.parent.get(node)
        joined = isinstance(caller, ast.BinOp) and isinstance(caller.op, ast.Add) and caller.left is node
        caller = s.parent.get(caller) if isinstance(caller, ast.keyword) or joined else caller
        shape = (pmap_era and isinstance(node, (ast.Tuple, ast.List)) and node.elts and isinstance(caller, ast.Call)
                 and s.name(caller.func) not in MESH_MAKERS)  # jnp.ones((n_local, ...)) for pmap: a stack
        if not (shaping or shape) or device_grid(s, node):  # a grid of devices for a mesh: mesh_rules reads it
            continue
        stacks = shape or (pmap_era and isinstance(node, ast.Call))  # a shape or a reshape for pmap
        for inner in (node.elts[0],) if shape else ast.walk(node):
            if counts_devices(s, inner, local_only=not stacks) and inner.lineno not in seen:
                seen.add(inner.lineno)
                if _rounds_up_to_a_multiple(s, node):
                    yield (inner, "flax-pad-shard-unpad",
                           f"{code_of(node)} pads this host's batch to a multiple of its local devices, so that "
                           "pmap can stack it (pad_shard_unpad by hand); after the port every host must pass the same "
                           "number of rows each step, and a short last batch on one host is a different shape there",
                           "pad the GLOBAL batch to a multiple of jax.device_count() with a mask of real rows (every "
                           "host the same row count), make it global, and weigh each row by the mask")
                elif shape and is_name(s.name(caller.func), "broadcast_to"):
                    yield (caller, "jax-utils-replicate",
                           f"{code_of(caller)} stacks a copy per local device by hand (pmap's replicate)",
                           "jax.device_put(x, NamedSharding(mesh, P())) once: one global value, on every device")
                elif isinstance(node, (ast.Call, ast.Tuple, ast.List)):  # a reshape's line: where it starts
                    yield (node if isinstance(node, ast.Call) else inner, "local-batch",
                           "a leading axis of jax.local_device_count() (reshape or shape) stacks this host's rows one "
                           "slice per local device, the leading axis pmap strips",
                           "no stacking: pass the host's rows as they are to jax.make_array_from_"
                           "process_local_data(NamedSharding(mesh, P(('host', 'device'))), rows), "
                           "and JAX splits them over the devices")
                elif not _knows_the_global_batch(s, node) and "param" not in code_of(node).lower() \
                        and not shares_a_global_count(s, node):  # batch_rules: a global total, not a host's
                    yield (inner, "local-batch",
                           "jax.local_device_count() sizes the batch per host: on several hosts "
                           "the batch a step trains on is process_count() times this number",
                           "choose the GLOBAL batch size; each host loads global_batch // "
                           "jax.process_count() rows of it")


def _stacks_in_a_helper(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`shard_batch(x, num_devices)` with `num_devices = jax.local_device_count()`: a function of the script that
    reshapes its argument to a leading axis of the count it is handed (`x.reshape((n, -1) + x.shape[1:])`)."""
    defs = {f.name: f for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef)}
    for call in s.calls:
        function = defs.get(call.func.id) if isinstance(call.func, ast.Name) else None
        if function is None:
            continue
        params = [a.arg for a in function.args.args]
        handed = [*zip(params, call.args), *((k.arg, k.value) for k in call.keywords if k.arg in params)]
        counted = {param for param, a in handed if any(
            counts_devices(s, side, local_only=True) or count_through_callers(s, side) == "local"
            for side in _either_side(s.value(a)))}
        reshapes = [r for r in ast.walk(function) if isinstance(r, ast.Call) and isinstance(r.func, ast.Attribute)
                    and r.func.attr == "reshape" and _leading(r, counted)] if counted else []
        for reshape in reshapes[:1]:  # the helper's own line makes the stack too (said once: a set of findings)
            yield (reshape, "local-batch",
                   f"{code_of(reshape)} in {function.name} stacks its rows one slice per device of the count "
                   "it is handed (jax.local_device_count() at its callers), the leading axis pmap strips",
                   "no stacking: pass the host's rows as they are to jax.make_array_from_process_local_data("
                   f"NamedSharding(mesh, P({MESH_AXES})), rows), and JAX splits them over the devices")
        if reshapes:
            yield (call, "local-batch",
                   f"{code_of(call)} reshapes this host's rows to a leading axis of jax.local_device_count() "
                   f"({function.name} stacks one slice per local device), the leading axis pmap strips",
                   "no stacking: pass the host's rows as they are to jax.make_array_from_process_local_data("
                   f"NamedSharding(mesh, P({MESH_AXES})), rows), and JAX splits them over the devices")


def _either_side(node: ast.AST) -> list[ast.AST]:
    """Both values of `jax.local_device_count() if use_pmap else 1`; the node itself otherwise."""
    return [node.body, node.orelse] if isinstance(node, ast.IfExp) else [node]


def _leading(reshape: ast.Call, names: set[str]) -> bool:
    """`x.reshape(n, ...)`, `x.reshape((n, -1) + x.shape[1:])`: the first axis is one of `names`."""
    first = reshape.args[0] if reshape.args else None
    while isinstance(first, ast.BinOp):
        first = first.left
    if isinstance(first, (ast.Tuple, ast.List)) and first.elts:
        first = first.elts[0]
    return isinstance(first, ast.Name) and first.id in names


def _knows_the_global_batch(s: Script, sized: ast.AST) -> bool:
    """The script counts every host, so `sized` (a product or quotient with jax.local_device_count()) is meant as
    this host's share: a quotient in a script that calls jax.device_count() (its global batch divided per device
    elsewhere, this a host's batch divided per local device), or anything in a script with no pmap that multiplies
    by jax.process_count() (a pjit-era script that assembles the global batch from each host's). A pmap script
    that multiplies by the process count still sizes pmap's stack per host, which its port replaces."""
    pmap_era = s.pmaps_here()
    divides = isinstance(sized, ast.BinOp) and isinstance(sized.op, (ast.Div, ast.FloorDiv))
    for call in s.calls:
        name = s.name(call.func)
        if divides and is_name(name, "jax.device_count"):
            return True
        if not pmap_era and is_name(name, "jax.process_count") and isinstance(s.parent.get(call), ast.BinOp) \
                and isinstance(s.parent[call].op, ast.Mult):
            return True
    return False


def counts_devices(s: Script, node: ast.AST, *, local_only: bool) -> bool:
    """`jax.local_device_count()`, through the names and shape tuples that hold it (`prefix = (n, b)`); with
    `local_only` False also a count of every device (`jax.device_count()`, `xla_bridge.device_count()`), which a
    shape built for pmap meant as this host's."""
    read = None  # the last name read on the way
    for _ in range(4):  # names and tuples: `shape_prefix` -> `(num_devices, b)` -> `num_devices` -> the call
        if isinstance(node, ast.Name):
            read, node = node, s.value(node)
        elif isinstance(node, (ast.Tuple, ast.List)) and node.elts:
            node = node.elts[0]
    if isinstance(node, ast.Name) and bound_value(s, node) is None:  # a parameter: what its callers hand it
        counted = count_through_callers(s, node)
        return counted == "local" or (not local_only and counted == "every")
    if not isinstance(node, ast.Call):  # a flag the script checks against a count (`if n != jax.device_count()`)
        counted = checked_count(s, read) if read is not None else None
        return counted == "local" or (not local_only and counted == "every")
    name = s.name(node.func)
    return is_name(name, "jax.local_device_count") or (not local_only and is_name(name, "device_count"))


def count_through_callers(s: Script, node: ast.AST, depth: int = 0) -> str | None:
    """bindings.device_count_of, and for a parameter of the script's own function what its callers hand it
    (`def evaluate(..., num_devices)` called with `num_devices = len(jax.local_devices())`): 'local' or 'every'
    when every caller hands the same kind of count, None otherwise."""
    parameter = isinstance(node, ast.Name) and bound_value(s, node) is None
    counted = None if parameter else device_count_of(s, node)  # a parameter: only what its callers hand it
    if counted or not parameter or depth > 3:
        return counted
    handed = {count_through_callers(s, a, depth + 1) for a in arguments_for(s, node)}
    return handed.pop() if len(handed) == 1 else None


def _rounds_up_to_a_multiple(s: Script, node: ast.AST) -> bool:
    """`ceil(n / d) * d` or `(n + d - 1) // d * d` (through int() and ceil()): n rounded up to a multiple of d."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
        return False
    for side in (node.left, node.right):
        while isinstance(side, ast.Call) and side.args and is_name(s.name(side.func), "int", "ceil"):
            side = side.args[0]
        if isinstance(side, ast.BinOp) and isinstance(side.op, (ast.Div, ast.FloorDiv)) \
                and code_of(side.right) in (code_of(node.left), code_of(node.right)):
            return True
    return False


def _device_only_spec(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    if len(s.mesh_axes) < 2:
        return
    used = {n.id for call in s.calls if s.name(call.func) in _TO_GLOBAL
            for arg in [*call.args, *(k.value for k in call.keywords)]
            for n in ast.walk(arg) if isinstance(n, ast.Name)}
    for call in s.calls:
        if s.name(call.func) not in SPEC_MAKERS or not call.args:
            continue
        axes = strings(call.args[0])
        missing = [a for a in s.mesh_axes if a not in axes]
        if not axes or not missing or not set(axes) <= set(s.mesh_axes):
            continue
        if _feeds_global_array(s, call, used):
            yield (call, "device-only-spec",
                   f"{code_of(call)} leaves out {', '.join(map(repr, missing))}: it declares the "
                   "batch the same on every host, but each host loads its own rows, so the hosts "
                   "hold different 'copies', silently",
                   f"P({tuple(s.mesh_axes)!r}) for a batch each host loads its own part of")


def _feeds_global_array(s: Script, spec: ast.Call, used: set[str]) -> bool:
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


READS = {*_OLD_CALLS, "jax.experimental.shard_map.shard_map"}  # besides the collectives and pmap
_JITS = ("jax.jit", "flax.nnx.jit", "equinox.filter_jit")
_COLLECTIVES = ("pmean", "psum", "psum_scatter", "all_gather", "all_reduce", "pmax", "pmin", "ppermute", "all_to_all")


def _jitted_steps(s: Script) -> list[ast.FunctionDef]:
    """The script's functions jitted with a decorator (`@nnx.jit`, `@jax.jit`, `@partial(jax.jit, ...)`), not
    pmapped, that apply gradients (`optimizer.update(grads)`, `state.apply_gradients(grads=grads)`) and call no
    collective."""
    pmapped = set(s.pmapped_functions())
    found = []
    for function in ast.walk(s.tree):
        if not isinstance(function, ast.FunctionDef) or function in pmapped or not any(
                is_name(s.name(d.func if isinstance(d, ast.Call) else d), *_JITS) or (
                    isinstance(d, ast.Call) and is_name(s.name(d.func), "functools.partial") and d.args
                    and is_name(s.name(d.args[0]), *_JITS)) for d in function.decorator_list):
            continue
        calls = [n for n in ast.walk(function) if isinstance(n, ast.Call)]
        if any(s.name(c.func).rsplit(".", 1)[-1] in _COLLECTIVES for c in calls):
            continue
        if any(isinstance(c.func, ast.Attribute) and c.func.attr in ("update", "apply_gradients")
               and any(s.gradient_status(a) == "yes" for a in [*c.args, *(k.value for k in c.keywords)])
               for c in calls):
            found.append(function)
    return found


def jitted_step_on_host_rows(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """In a script that pmaps, a step jitted on its own (no pmap) that applies gradients with no collective, called
    from the host: each host trains its own copy on its own rows, and nothing averages them over the hosts."""
    if not s.pmaps_here():
        return
    steps = {f.name: f for f in _jitted_steps(s)}
    for call in s.calls:
        if isinstance(call.func, ast.Name) and call.func.id in steps \
                and s.enclosing_function(call) not in {*steps.values(), *s.pmapped_functions()}:
            yield (call, "unreduced-gradients",
                   f"{call.func.id}(...) is jitted on its own (not pmapped) and applies gradients with no reduction "
                   "over hosts or devices: fed this host's rows, on several hosts each host steps its own copy of "
                   "the model with its own gradient, and the copies drift apart once the hosts' data differ",
                   "make the batch global (jax.make_array_from_process_local_data(NamedSharding(mesh, "
                   f"P({MESH_AXES})), rows)) and the model state P() on the mesh: the jitted step's gradient then is "
                   "the mean over every host's rows")


RULES = (_pmap, _pmap_wrapper, _pmapped_out_of_view, _library_pmaps, _old_calls, experimental_shard_map, with_mesh, _local_batch,
         _device_only_spec, _stacks_in_a_helper, jitted_step_on_host_rows)
