"""The rules for JAX's own pmap-era patterns: pmap and its collectives, removed calls, host-local
batches, specs that leave out the host axis, pmap's copies taken apart by hand. (Per-device keys are
key_rules'; work on process 0 only is process_zero_rules'.)

Each rule reads a `Script` and yields (node, rule name, what the line does on several hosts, what
to write instead); `LESSONS` names the notebook section that teaches each rule's fix.
"""
from __future__ import annotations

import ast
import re
from typing import Callable, Iterator

from helpers.migrate.bindings import bound_value, reaches
from helpers.migrate.script import (MESH_AXES, MESH_MAKERS, SPEC_MAKERS, Script, argument, code_of, first_copy, is_name,
                                    is_name_call, keyword, only_process_zero, pmap_axis, strings)

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
}
_COLLECTIVES = {"pmean", "psum", "pmax", "pmin", "all_gather", "all_to_all", "ppermute",
                "psum_scatter", "axis_index", "pswapaxes"}
_FLAX_COLLECTIVES = ("flax.training.common_utils.pmean", "flax.training.common_utils.psum")
_TO_GLOBAL = {"jax.make_array_from_process_local_data",
              "jax.experimental.multihost_utils.host_local_array_to_global_array",
              "jax.device_put"}


def _pmap(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for call in s.pmaps():
        if call in s.pmaps_over_hosts():  # host_read_rules says what replaces it
            continue
        axis = s.axis_names(pmap_axis(call))
        in_axes = keyword(call, "in_axes")
        said = [f"axis_name={axis[0]!r}"] if axis else []
        if in_axes is not None:
            said.append(f"in_axes={code_of(in_axes)}")
        carried = [f"{code_of(k.value)} as {k.arg.replace('static_broadcasted_argnums', 'static_argnums')} on "
                   "jax.jit" for k in call.keywords if k.arg in ("donate_argnums", "static_broadcasted_argnums")]
        yield (call if is_name_call(call) else call.args[0], "pmap",  # partial(\n jax.pmap, ...): at jax.pmap
               f"jax.pmap({', '.join(said)}) maps over every host's devices"
               + (f" (its axis {axis[0]!r} spans every device of every host)" if axis else "")
               + ", but each host feeds only its own part: a stack with a leading axis of local_device_count(), "
               "built in that host's own Python, so what each host makes there (keys split from the same seed, "
               "its rows) is per host; the parameters are stacked copies",
               f"jax.jit(jax.shard_map(..., mesh=mesh, in_specs=..., out_specs=...)) over a "
               f"{MESH_AXES} mesh with global arrays: "
               + (f"in_specs={specs} (P() for what the script replicated)" if (specs := s.pmap_in_specs(call))
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
    if not any(True for _ in [*s.pmaps(), *s.nnx_pmaps()]):
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
               "with pmap's stacks (a replicated state, keys split one a device): the project pmaps it out of view, "
               "over this host's devices, and its outputs are per-device stacks of this host's rows",
               f"port the project's function: jax.jit(jax.shard_map(f, mesh=mesh, in_specs=..., out_specs=...)) over a "
               f"{MESH_AXES} mesh (P() for the state, P({MESH_AXES}) for what it splits), or a plain jax.jit on global "
               "arrays; then hand it the state as it is (no replicate) and one key")


def _pmap_wrapper(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """A project's function that pmaps what it is handed: `utils.dist(sample, axis_name='batch')`."""
    for call in s.wrappers:
        axis = s.axis_names(pmap_axis(call))
        where = ("defined in another file of this folder, calls jax.pmap" if s.name(call.func).rsplit(".", 1)[-1]
                 in s.folder.pmappers else f"handed a function and pmap's keyword axis_name={axis[0]!r}, pmaps it")
        yield (call, "pmap",
               f"{code_of(call.func)}(...) is the project's wrapper that {where}: the function it wraps runs under "
               "pmap over this host's devices, each fed a slice of a per-host stack"
               + (f" (collectives over {axis[0]!r} inside reach this host's devices only, and the wrapper may "
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
    yield from s.calls_in(_LIBRARY_PMAPS)


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


def _pmap_collective(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    pmaps = {*s.pmaps(), *s.nnx_pmaps(), *s.wrappers}
    for call in s.calls:
        name = s.name(call.func)
        op = name.rsplit(".", 1)[-1]
        axis = _axis_keyword(s, call)
        if op == "value_and_grad" and set(s.axis_names(axis)) & s.pmap_axes:
            yield (call, "pmap-collective",
                   f"{code_of(call.func)}(..., axis_name={code_of(axis)}) averages the gradients over pmap's axis "
                   "itself (a pmean inside); under shard_map with check_vma the gradient of P() parameters is "
                   "already summed over the devices, so a renamed axis here makes it N times too large",
                   f"no axis_name: take the gradient of jax.lax.pmean(loss, {MESH_AXES}) (with a dynamic "
                   "scale, keep its finiteness check global yourself)")
            continue
        if set(s.axis_names(axis)) & s.pmap_axes and not (op in _COLLECTIVES and is_name(name, f"jax.lax.{op}")) \
                and call not in pmaps and not s.in_pmap_over_hosts(call):
            yield _handed_axis(s, call, axis)
            continue
        flax = is_name(name, *_FLAX_COLLECTIVES)
        if not flax and (op not in _COLLECTIVES or not is_name(name, f"jax.lax.{op}")) or s.in_pmap_over_hosts(call):
            continue
        axis = argument(call, 0 if op == "axis_index" else 1, "axis_name")
        if flax:  # old Flax's pmean(tree, axis_name='batch'): a psum over 'batch' divided by its size
            yield _flax_collective(s, call, op, axis)
            continue
        if not set(s.axis_names(axis)) & s.pmap_axes:
            continue
        operand = code_of(call.args[0]) if call.args and op != "axis_index" else ""
        status = s.gradient_status(call.args[0]) if op in ("pmean", "psum") and call.args else "no"
        named = status == "no" and op in ("pmean", "psum") and bool(call.args) and named_for_gradients(call.args[0])
        if status == "yes":
            together = isinstance(call.args[0], (ast.Tuple, ast.List))  # `pmean((loss, grads), 'batch')`
            yield (call, "pmap-collective",
                   f"{op}({operand}, {code_of(axis)}) {'averages' if op == 'pmean' else 'adds'} the gradients "
                   f"over pmap's axis{_MEAN if op == 'psum' else ''}; {_TRAP}",
                   f"take the gradient of jax.lax.pmean(loss, {MESH_AXES}) and "
                   + (f"keep only what is not a gradient in this {op}" if together else f"drop this {op}")
                   + "; renaming the axis is not enough")
        elif status == "unknown" or named:
            yield (call, "pmap-collective",
                   f"{op}({operand}, {code_of(axis)}) names pmap's axis, and {_NAMED_MAYBE if named else _MAYBE}",
                   _EITHER)
        else:
            yield (call, "pmap-collective",
                   f"{op}(..., {code_of(axis)}) names pmap's axis, which shard_map does not have",
                   f"name the mesh axes: jax.lax.{op}(..., {MESH_AXES}) reaches every device of "
                   "every host")


_MEAN = " (their mean, when the loss was divided by the device count)"
_TRAP = ("under shard_map with check_vma the gradient of P() parameters is already summed over the devices, so a "
         "renamed axis here makes it N times too large, silently")
_MAYBE = ("this may be a gradient (it comes from a call that was handed gradients or a gradient transform, and the "
          "tool cannot see what that call gives back): if it is, " + _TRAP)
_NAMED_MAYBE = ("its name says gradients, and the tool cannot see a gradient transform make it (a parameter, or "
                "the result of code it cannot follow): if it is one, " + _TRAP)
_GRADIENT_NAME = re.compile(r"(^|_)(d?grads?|gradients?)(_|$)", re.IGNORECASE)


def named_for_gradients(expr: ast.AST) -> bool:
    """The reduced value is named like gradients (`grads`, `accumulated_grads`, `self.grads`, `(loss, grads)`):
    never told just to rename, whatever the taint analysis could trace."""
    if isinstance(expr, (ast.Tuple, ast.List)):
        return any(named_for_gradients(e) for e in expr.elts)
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    name = expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else ""
    return bool(_GRADIENT_NAME.search(name))


_EITHER = (f"if this is a gradient: drop it and take the gradient of jax.lax.pmean(loss, {MESH_AXES}); "
           f"otherwise rename the axis to {MESH_AXES}")


def _flax_collective(s: Script, call: ast.Call, op: str, axis: ast.AST | None) -> tuple[ast.AST, str, str, str]:
    """`common_utils.pmean(x)` of old Flax: jax.lax.pmean over pmap's axis ('batch' unless given); gone from Flax."""
    axis_code = code_of(axis) if axis is not None else "'batch'"
    said = (f"common_utils.{op}({code_of(call.args[0]) if call.args else ''}) of old Flax (gone from flax.training: "
            f"AttributeError) is jax.lax.{op} over pmap's axis {axis_code}")
    status = s.gradient_status(call.args[0]) if call.args else "no"
    return _by_gradient_status(
        call, status, said,
        trap=(f"here of the gradients; {_TRAP}", f"take the gradient of jax.lax.pmean(loss, {MESH_AXES}) and drop "
              f"this {op}; renaming the axis is not enough"),
        rename=(", which shard_map does not have",
                f"jax.lax.{op}(..., {MESH_AXES}) inside shard_map: it reaches every device of every host"))


def _by_gradient_status(node: ast.AST, status: str, said: str, *, trap: tuple[str, str],
                        rename: tuple[str, str], maybe: str = _MAYBE) -> tuple[ast.AST, str, str, str]:
    """A pmap-collective finding by what the collective reduces: gradients ('yes': the trap), maybe ('unknown':
    both outcomes, `maybe` saying why), or not ('no': a rename); `trap` is (what it does, after `said, `; what to
    write), `rename` (what follows `said`, with its own separator; what to write)."""
    if status == "yes":
        return node, "pmap-collective", f"{said}, {trap[0]}", trap[1]
    if status == "unknown":
        return node, "pmap-collective", f"{said}, and {maybe}", _EITHER
    return node, "pmap-collective", f"{said}{rename[0]}", rename[1]


def _axis_keyword(s: Script, call: ast.Call) -> ast.AST | None:
    """The value of a call's `axis_name=`, or of another keyword named for an axis name (`pmap_axis_name=`) that
    holds one of pmap's axes."""
    named = [k for k in call.keywords if k.arg and k.arg.endswith("axis_name")]
    return next((k.value for k in named if set(s.axis_names(k.value)) & s.pmap_axes), keyword(call, "axis_name"))


_STATUSES = ["no", "unknown", "yes"]


def _handed_axis(s: Script, call: ast.Call, axis: ast.AST) -> tuple[ast.AST, str, str, str]:
    """pmap's axis name handed to code that runs collectives over it: `sync(grads, axis_name='batch')`,
    `jax.tree.map(partial(jax.lax.pmean, axis_name='batch'), grads)`, or a function named for gradients
    (`make_gradient_update(loss_fn, opt, pmap_axis_name=AXIS)`), which may reduce the gradients it takes."""
    mapping = s.parent.get(call)
    handed = [*call.args, *(k.value for k in call.keywords if k.value is not axis)]
    if isinstance(mapping, ast.Call) and s.is_tree_map(mapping) and mapping.args[:1] == [call]:
        handed += mapping.args[1:]
    status = max((s.gradient_status(a) for a in handed), key=_STATUSES.index, default="no")
    held = next(k.arg for k in call.keywords if k.value is axis)
    for_gradients = status == "no" and "grad" in (s.name(call.func) or code_of(call.func)).rsplit(".", 1)[-1].lower()
    said = f"{code_of(call.func)}(..., {held}={code_of(axis)}) hands pmap's axis name to code that runs " \
           "collectives over it"
    return _by_gradient_status(
        axis, "unknown" if for_gradients else status, said,
        trap=(f"on gradients; {_TRAP}", f"no collective here: take the gradient of jax.lax.pmean(loss, {MESH_AXES}); "
              "renaming the axis is not enough"),
        rename=(" (a key bound to each device, statistics synced), and shard_map has no such axis",
                f"{held}={MESH_AXES}: the mesh axes reach every device of every host"),
        maybe=_NAMED_FOR_GRADIENTS if for_gradients else _MAYBE)


_NAMED_FOR_GRADIENTS = ("the function is named for gradients, so it may take gradients and reduce them over this "
                        f"axis (the tool cannot see its body): if it does, {_TRAP}")


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
    yield from s.calls_in(_OLD_CALLS)
    for call in s.calls:
        for arg in call.args:
            name = s.name(arg) if isinstance(arg, (ast.Name, ast.Attribute)) else ""
            yield from ((arg, *said) for old, said in _OLD_CALLS.items() if is_name(name, old))


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
                                                     or s.name(expr.func).endswith(("maps.Mesh", "maps.mesh"))):
                    yield (node, "with-mesh",
                           f"`with {code_of(expr.func)}(...):` uses a mesh as a context manager, deprecated "
                           "since jax 0.10.1 (and " + _OLD_MESH_GONE.get(s.name(expr.func).rsplit(".", 1)[-1],
                                                                        "jax.experimental.maps.Mesh is gone since "
                                                                        "jax 0.4.11") + ")",
                           "mesh = jax.make_mesh(shape, names), then `with jax.set_mesh(mesh):`")


_OLD_MESH_GONE = {"mesh": "jax.experimental.maps.mesh, the old function that made a mesh and entered it, is gone "
                          "with jax.experimental.maps since jax 0.4.31"}


def is_mesh(s: Script, expr: ast.AST) -> bool:
    value = s.assigned.get(expr.id) if isinstance(expr, ast.Name) else None
    if isinstance(value, ast.Call):  # jax.make_mesh, maps.Mesh, or a helper of the project (`get_jax_mp_mesh`)
        return s.name(value.func) in MESH_MAKERS or "mesh" in s.name(value.func).rsplit(".", 1)[-1].lower()
    return "mesh" in code_of(expr).lower()


def _local_batch(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    seen = set()
    pmap_era = any(True for _ in [*s.pmaps(), *s.nnx_pmaps()])
    for node in ast.walk(s.tree):
        shaping = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                   and node.func.attr == "reshape") or (
            isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.FloorDiv, ast.Div)))
        caller = s.parent.get(node)
        joined = isinstance(caller, ast.BinOp) and isinstance(caller.op, ast.Add) and caller.left is node
        caller = s.parent.get(caller) if isinstance(caller, ast.keyword) or joined else caller
        shape = (pmap_era and isinstance(node, (ast.Tuple, ast.List)) and node.elts and isinstance(caller, ast.Call)
                 and s.name(caller.func) not in MESH_MAKERS)  # jnp.ones((n_local, ...)) for pmap: a stack
        if not (shaping or shape):
            continue
        stacks = shape or (pmap_era and isinstance(node, ast.Call))  # a shape or a reshape for pmap
        for inner in (node.elts[0],) if shape else ast.walk(node):
            if _counts_devices(s, inner, local_only=not stacks) and inner.lineno not in seen:
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
                elif isinstance(node, (ast.Call, ast.Tuple, ast.List)):
                    yield (inner, "local-batch",
                           "a leading axis of jax.local_device_count() (reshape or shape) stacks this host's rows one "
                           "slice per local device, the leading axis pmap strips",
                           "no stacking: pass the host's rows as they are to jax.make_array_from_"
                           "process_local_data(NamedSharding(mesh, P(('host', 'device'))), rows), "
                           "and JAX splits them over the devices")
                elif not _knows_the_global_batch(s, node) and "param" not in code_of(node).lower():
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
        counted = {params[i] for i, a in enumerate(call.args[:len(params)]) if any(
            _counts_devices(s, side, local_only=True) for side in _either_side(s.value(a)))}
        if counted and any(_leading(r, counted) for r in ast.walk(function) if isinstance(r, ast.Call)
                           and isinstance(r.func, ast.Attribute) and r.func.attr == "reshape"):
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
    pmap_era = any(True for _ in [*s.pmaps(), *s.nnx_pmaps()])
    divides = isinstance(sized, ast.BinOp) and isinstance(sized.op, (ast.Div, ast.FloorDiv))
    for call in s.calls:
        name = s.name(call.func)
        if divides and is_name(name, "jax.device_count"):
            return True
        if not pmap_era and is_name(name, "jax.process_count") and isinstance(s.parent.get(call), ast.BinOp) \
                and isinstance(s.parent[call].op, ast.Mult):
            return True
    return False


def _counts_devices(s: Script, node: ast.AST, *, local_only: bool) -> bool:
    """`jax.local_device_count()`, through the names and shape tuples that hold it (`prefix = (n, b)`); with
    `local_only` False also a count of every device (`jax.device_count()`, `xla_bridge.device_count()`), which a
    shape built for pmap meant as this host's."""
    for _ in range(4):  # names and tuples: `shape_prefix` -> `(num_devices, b)` -> `num_devices` -> the call
        if isinstance(node, ast.Name):
            node = s.value(node)
        elif isinstance(node, (ast.Tuple, ast.List)) and node.elts:
            node = node.elts[0]
    if not isinstance(node, ast.Call):
        return False
    name = s.name(node.func)
    return is_name(name, "jax.local_device_count") or (not local_only and is_name(name, "device_count"))


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


def _entries_of(s: Script, stacks: set[str]) -> set[str]:
    """The loop names that take a pmap output's entries: `value` in `for name, value in metrics.items():`."""
    found = set()
    for loop in (n for n in ast.walk(s.tree) if isinstance(n, ast.For) and isinstance(n.iter, ast.Call)):
        method = loop.iter.func
        if isinstance(method, ast.Attribute) and isinstance(method.value, ast.Name) and method.value.id in stacks:
            target = loop.target.elts[-1] if method.attr == "items" and isinstance(loop.target, ast.Tuple) \
                else loop.target if method.attr == "values" else None
            found |= {target.id} if isinstance(target, ast.Name) else set()
    return found


def _copy_zero(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`jax.tree.map(lambda x: x[0], state)`, `loss[0]` or `np.asarray(loss)[0]` of a pmap output: pmap's
    unreplicate, by hand (said where the [0] is)."""
    if not any(True for _ in [*s.pmaps(), *s.nnx_pmaps()]):
        return
    stacks = s.pmap_outputs() | _entries_of(s, s.pmap_outputs())
    pmapped_call = s.pmapped_call_test()
    for node in ast.walk(s.tree):
        if first_copy(node, stacks) and not s.in_pmap_over_hosts(node) \
                and not _not_yet_an_output(s, node, stacks, pmapped_call):
            yield (node, "jax-utils-replicate",
                   f"{code_of(node)} takes device 0's entry of pmap's per-device output; after the port it is "
                   "one global value, and [0] would index into it",
                   "use the value as it is: a P() result is the same on every device")
    for call in s.calls:
        if not (s.is_tree_map(call) and call.args and isinstance(call.args[0], ast.Lambda)):
            continue
        lam = call.args[0]
        params = {a.arg for a in lam.args.args}
        first = next((n for n in ast.walk(lam.body) if first_copy(n, params)), None)
        if first is not None and not s.in_pmap_over_hosts(call):
            yield (first, "jax-utils-replicate",
                   f"{code_of(call)} takes device 0's copy of pmap's stack by hand ({code_of(first)} of each leaf); "
                   "after the port each leaf is one global value, and [0] would take its first row",
                   "nothing: a P() array already is the value (read it on any host, device_get it to save or print); "
                   "a leaf sharded over the hosts is read with multihost_utils.process_allgather on every host")


def _not_yet_an_output(s: Script, node: ast.AST, stacks: set[str],
                       pmapped_call: Callable[[ast.AST], bool]) -> bool:
    """`model[0]` read outside any loop where `model` was bound before, in its scope, only by something other
    than a pmapped call (`model = init(...)`; a pmapped step's output only later): not yet pmap's stack."""
    name = next(n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in stacks)
    scope = s.scope(name)
    if _in_a_loop(s, name, scope):
        return False
    bindings = [a for a in ast.walk(scope) if isinstance(a, ast.Assign) and s.scope(a) is scope
                and a.lineno < name.lineno and any(isinstance(n, ast.Name) and n.id == name.id
                                                   for target in a.targets for n in ast.walk(target))]
    return bool(bindings) and not any(pmapped_call(a.value) or isinstance(a.value, ast.Name) and a.value.id in stacks
                                      for a in bindings)


def _in_a_loop(s: Script, node: ast.AST, scope: ast.AST) -> bool:
    while node is not scope and node in s.parent:
        node = s.parent[node]
        if isinstance(node, (ast.For, ast.While, ast.comprehension)):
            return True
    return False


def _copy_at_another_index(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`state.opt_state[2][1].hyperparams['lr'][-1]` of a replicated state that a pmap gives back: device k's copy,
    taken by hand as [0] is (the last index that reaches the leaf is the device's: one from the end, or one read
    as a number, `int(state.step[1])`; other indices may pick an item of the state's tuples)."""
    if not any(True for _ in s.pmaps()):
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


def _copy_helpers(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """The project's own helpers that make or undo pmap's copies (`utils.get_first`, `bcast_local_devices`,
    followed to their bodies in the script or its folder), a repeat or broadcast of `x[None]` over the local
    devices, and a checkpointer of the project handed pmap's stacks."""
    for call in s.calls:
        kind = s.copy_helper(call)
        short = s.name(call.func).rsplit(".", 1)[-1].lower()
        if kind == "unreplicate" and ("save" in short or "checkpoint" in short):
            yield (call, "jax-utils-replicate",
                   f"{code_of(call.func)}(...) saves device 0's copy of pmap's stacks (its body takes x[0] and "
                   "device_gets it); after the port the state is global arrays, split over the hosts when sharded, "
                   "and [0] would take the first row of each",
                   "save the global state on every host with an orbax.checkpoint.CheckpointManager (each host writes "
                   "its shards), without [0]")
        elif kind == "unreplicate":
            yield (call, "jax-utils-replicate",
                   f"{code_of(call.func)}(...) takes device 0's copy of pmap's per-device stacks (a project helper "
                   "that is flax's unreplicate by hand: x[0] of each leaf); after the port each leaf is one global "
                   "value, and [0] would take its first row",
                   "nothing: a P() array already is the value (read it on any host; device_get it to print)")
        elif kind == "replicate":
            yield (call, "jax-utils-replicate",
                   f"{code_of(call.func)}(...) copies one value to every local device (a project helper: "
                   "device_put_sharded of len(devices) * [x], pmap's replicate): one value replicated, not a "
                   "batch split",
                   "jax.device_put(x, NamedSharding(mesh, P())) once: one global value, on every device")
        elif s.stacks_per_device(call):
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
            yield (call, "process-zero-save",
                   f"{code_of(call.func)}(...) hands pmap's per-device stacks to the project's checkpointer, whose "
                   "code is not in this folder: a pmap-era checkpointer takes copy [0] (device_get(x[0])) and "
                   "writes on process 0 only; after the port the state is global arrays that every host must "
                   "save its shards of",
                   "an orbax.checkpoint.CheckpointManager called on every host with the global state (no [0]); "
                   "Orbax lets process 0 write the shared metadata")


def _repeats_over_local_devices(s: Script, call: ast.Call) -> bool:
    """`jnp.repeat(x[None], n_local_devices, axis=0)` (or jnp.tile): copies per local device, by hand."""
    return is_name(s.name(call.func), "repeat", "tile") and len(call.args) > 1 \
        and s.name(call.func).startswith(("jax.numpy.", "numpy.")) \
        and _counts_devices(s, call.args[1], local_only=True)


def _saves_stacks_out_of_view(s: Script, call: ast.Call) -> bool:
    """`self._checkpointer.maybe_save_checkpoint(self._state, ...)`: a save of the project's own (neither Flax's
    nor Orbax's, and defined in no file the tool reads) handed a pmap output, in a pmap-era script."""
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
    pmaps = {*s.pmaps(), *s.nnx_pmaps()}
    methods = {code_of(t) for node in ast.walk(s.tree) if isinstance(node, ast.Assign) and node.value in pmaps
               for t in node.targets if isinstance(t, ast.Attribute)}
    pmapped = s.pmapped_names()
    return {code_of(n) for node in ast.walk(s.tree) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call) and (code_of(node.value.func) in methods or isinstance(
                node.value.func, ast.Name) and node.value.func.id in pmapped)
            for t in node.targets for n in ([t] if isinstance(t, ast.Attribute) else getattr(t, "elts", []))
            if isinstance(n, ast.Attribute)}


READS = {*_OLD_CALLS, *_FLAX_COLLECTIVES, "jax.experimental.shard_map.shard_map"}  # besides the collectives and pmap
RULES = (_pmap, _pmap_wrapper, _pmapped_out_of_view, _library_pmaps, _pmap_collective, _old_calls, experimental_shard_map, with_mesh, _local_batch,
         _device_only_spec, _copy_zero, _copy_at_another_index, _copy_helpers, _stacks_in_a_helper)
