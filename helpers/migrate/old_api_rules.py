"""The rules for JAX's older parallel APIs: xmap and `jax.experimental.maps`, pjit with
`in_axis_resources`, `jax.experimental.PartitionSpec`, `jax.host_count` and `jax.host_id`, and the device and
host counts of `jax.lib.xla_bridge`.

Each says since which jax it is gone (from JAX's changelog) and what replaces it.
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.script import MESH_AXES, Script, code_of, is_name

# rule -> (notebook, section heading without its number): where the course teaches the fix
LESSONS: dict[str, tuple[str, str]] = {
    "xmap": ("05", "The body sees one block"),
    "pjit": ("09", "The same computation with `jax.jit` and shardings"),
    "experimental-sharding-names": ("01", "`jax.make_mesh`"),
    "host-count": ("04", "pmap on several hosts"),
    "removed-internals": ("04", "What pmap is in jax 0.12"),
}
_MOVED = {  # removed in jax 0.4.11 (deprecated in 0.4.1)
    "jax.experimental.PartitionSpec": "jax.sharding.PartitionSpec (jax.P)",
    "jax.experimental.pjit.PartitionSpec": "jax.sharding.PartitionSpec (jax.P)",
    "jax.experimental.pjit.NamedSharding": "jax.sharding.NamedSharding",
    "jax.experimental.maps.Mesh": "jax.make_mesh(shape, names) or jax.sharding.Mesh",
    "jax.experimental.maps.mesh": "mesh = jax.make_mesh(shape, names) (or jax.sharding.Mesh(devices, names)), entered "
                                  "with `with jax.set_mesh(mesh):`",
    "jax.experimental.pjit.with_sharding_constraint": "jax.lax.with_sharding_constraint(x, NamedSharding(mesh, "
                                                      "spec)); and pjit itself is jax.jit",
    "jax.interpreters.pxla.PartitionSpec": "jax.sharding.PartitionSpec (jax.P)",
    "jax.interpreters.pxla.Mesh": "jax.make_mesh(shape, names) or jax.sharding.Mesh",
    "jax.interpreters.sharded_jit.PartitionSpec": "jax.sharding.PartitionSpec (jax.P)",
    "jax.experimental.global_device_array.GlobalDeviceArray": "a jax.Array: jax.make_array_from_callback(shape, "
                                                               "NamedSharding(mesh, spec), callback)",
    "jax.experimental.gda_serialization": "orbax.checkpoint (it saves and restores global jax.Arrays)",
    "jax.sharding.PositionalSharding": "NamedSharding(mesh, P(...)) on a mesh from jax.make_mesh (NamedSharding(mesh, "
                                       "P()) for .replicate())",
}
_ENTERED_ONLY = {"jax.experimental.maps.mesh"}  # a function that only made and entered a mesh: with-mesh says it all
_FROM_INTERNALS = "a jax 0.4 release from JAX's internals (ImportError on jax 0.12: it lives in jax.sharding)"
_GONE_FROM = {"jax.experimental.maps.mesh": "jax 0.4.31 with jax.experimental.maps (ModuleNotFoundError): the old "
                                           "context manager that made a mesh and entered it",
              "jax.experimental.pjit.with_sharding_constraint": "jax 0.4.x (ImportError on jax 0.12: it moved "
                                                                "to jax.lax)",
              "jax.interpreters.pxla.PartitionSpec": _FROM_INTERNALS, "jax.interpreters.pxla.Mesh": _FROM_INTERNALS,
              "jax.interpreters.sharded_jit.PartitionSpec": _FROM_INTERNALS,
              "jax.experimental.global_device_array.GlobalDeviceArray": "jax 0.4.x, replaced by jax.Array (ImportError "
                                                                         "on jax 0.12)",
              "jax.experimental.gda_serialization": "jax 0.4.x with GlobalDeviceArray (ModuleNotFoundError on jax "
                                                    "0.12)",
              "jax.sharding.PositionalSharding": "a jax release before 0.12 (ImportError on jax 0.12)"}
_THREAD_RESOURCES = "jax.experimental.maps.thread_resources"  # the mesh entered with `with mesh:`, read back
# JAX internals that pmap-era libraries imported: gone, so the import fails before any line runs
_INTERNALS = {
    "jax.interpreters.pxla.xla_pmap_p": "pmap's primitive, removed in jax 0.10 with pmap's own implementation "
                                        "(pmap is jit of shard_map since 0.8)",
    "jax.interpreters.pxla.xla_pmap": "pmap's primitive, removed in jax 0.10",
    "jax.interpreters.pxla.PmapSharding": "PmapSharding, removed in jax 0.10",
    "jax.sharding.PmapSharding": "PmapSharding, removed in jax 0.10",
    "jax.interpreters.pxla.ShardedDeviceArray": "ShardedDeviceArray, removed with jax.Array (jax 0.4.1)",
    "jax.interpreters.pxla.parallel_callable": "pmap's compile path, removed in jax 0.10",
}
_RENAMED = {"jax.host_count": "jax.process_count()", "jax.host_id": "jax.process_index()",
            "jax.host_ids": "range(jax.process_count())"}
_XLA_BRIDGE = {  # jax.lib.xla_bridge: not in jax 0.12 (ImportError, on the pinned version)
    "device_count": "jax.device_count() (every host's devices; pmap mapped jax.local_device_count(), this host's)",
    "local_device_count": "jax.local_device_count()", "process_index": "jax.process_index()",
    "host_id": "jax.process_index()", "process_count": "jax.process_count()", "host_count": "jax.process_count()",
    "devices": "jax.devices()", "local_devices": "jax.local_devices()"}


def old_names(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    private_lines = set()  # one finding a line for names of jax._src
    for node, name, imported in s.used_names():
        if name in _ENTERED_ONLY and _entered_by_with(s, node):
            continue  # with_mesh says what replaces `with maps.mesh(...):`; a Mesh class built there is both
        if name in _MOVED and (imported or _module_attribute(s, node, name)):  # each use would repeat an
            yield (node, "experimental-sharding-names",  # imported name: the import is what changes
                   f"{name} was removed in {_GONE_FROM.get(name, 'jax 0.4.11 (ImportError or AttributeError)')}"
                   + _hand_grid(s, node), _MOVED[name])
        elif name in _INTERNALS and (imported or _module_attribute(s, node, name)):
            yield (node, "removed-internals",
                   f"{name}: {_INTERNALS[name]}; importing it raises ImportError or AttributeError on jax 0.12, "
                   "so the script (or the library that imports it) breaks at import",
                   "drop the internal: read pmap's work as jax.jit(jax.shard_map(...)) over a mesh (no primitive of "
                   "its own to match), and use the public jax.sharding / jax.Array APIs; for a library, a release "
                   "that no longer imports it")
        elif _private_name(name) and (imported or _module_attribute(s, node, name)):
            module, private = name.rsplit(".", 1)
            gone = ("; the module itself was deleted in jax 0.4.31 (ModuleNotFoundError)"
                    if module == "jax.experimental.maps" else "")
            yield (node, "removed-internals",
                   f"{name}: {private} is a private name of {module}, no part of JAX's API: JAX removes or changes "
                   f"such names between releases without notice{gone}, so the line breaks at import on jax 0.12",
                   "drop the internal and do with public APIs what it did: jax.jit's in_shardings/out_shardings with "
                   "NamedSharding(mesh, P(...)) for pjit's axis resources, jax.shard_map over a mesh for xmap's "
                   "named axes; for a library, a release that no longer reaches it")
        elif (name == "jax._src" or name.startswith("jax._src.")) and node.lineno not in private_lines \
                and not (isinstance(node, ast.ImportFrom) and name == node.module):  # its names say more
            private_lines.add(node.lineno)
            yield (node, "removed-internals",
                   f"{name} is in jax._src, JAX's private package: no part of its API, moved or deleted between "
                   "releases without notice (jax._src.lib.xla_bridge and xla_extension are gone on jax 0.12)",
                   "the public API that does the same: jax.distributed.initialize(coordinator_address, "
                   "num_processes, process_id) to join the hosts into one runtime, jax.devices() and jax.config for "
                   "backends; nothing that resets or registers JAX's backends by hand")
        elif name.startswith("jax.lib.xla_bridge.") and name.rsplit(".", 1)[-1] in _XLA_BRIDGE and not imported:
            yield (node, "host-count",
                   f"{name}: jax.lib.xla_bridge is not in jax 0.12 (ImportError)", _XLA_BRIDGE[name.rsplit(".", 1)[-1]])
        elif name in _RENAMED:
            yield (node, "host-count",
                   f"{name} is the old name of {_RENAMED[name].split('(')[0]}; jax 0.12 still has it and "
                   "warns that it will be removed", _RENAMED[name])
        elif _reads_the_mesh(name) and not _uses_xmap(s):
            yield _mesh_read(s, node, name, imported)
        elif name == "jax.experimental.maps" and imported and not _imports_from_maps(node) \
                and _maps_only_for_the_mesh(s):
            yield (node, "experimental-sharding-names",
                   "jax.experimental.maps was deleted in jax 0.4.31 (ModuleNotFoundError); the script uses it only "
                   "for the mesh (maps.Mesh, maps.mesh), which lives in jax.sharding",
                   "drop the import: mesh = jax.make_mesh(shape, names) (or jax.sharding.Mesh(devices, names)), "
                   "entered with `with jax.set_mesh(mesh):`")
        elif (name == "jax.experimental.maps" or name.startswith("jax.experimental.maps.")) \
                and name not in _MOVED and not (imported and _imports_only_named(s, node)):
            yield (node, "xmap",
                   f"{name}: xmap and jax.experimental.maps (xmap, mesh, thread_resources) were deleted in "
                   "jax 0.4.31 (ModuleNotFoundError)",
                   f"jax.shard_map(f, mesh=jax.make_mesh(..., {MESH_AXES}), in_specs=..., out_specs=...): "
                   "xmap's named axes become mesh axes, its axis resources the specs")


_INTERNAL_MODULES = ("jax.experimental.", "jax.interpreters.", "jax.lib.")


def _private_name(name: str) -> bool:
    """`jax.experimental.pjit._prepare_axis_resources`: a private name (one leading underscore) of one of JAX's old
    experimental or internal modules, reached from the script."""
    module, _, last = name.rpartition(".")
    return module.startswith(_INTERNAL_MODULES) and last.startswith("_") and not last.startswith("__") \
        and "._" not in module


def _reads_the_mesh(name: str) -> bool:
    return name == _THREAD_RESOURCES or name.startswith(_THREAD_RESOURCES + ".")


def _uses_xmap(s: Script) -> bool:
    """The script uses xmap, whose resource environment thread_resources is: the port replaces the two together."""
    return any(name == "jax.experimental.maps.xmap" for _, name, _ in s.used_names())


def _maps_only_for_the_mesh(s: Script) -> bool:
    """Every name the script reaches in jax.experimental.maps is a mesh's (maps.Mesh, maps.mesh): no xmap to port."""
    used = {name for _, name, _ in s.used_names() if name.startswith("jax.experimental.maps.")}
    return bool(used) and used <= set(_MOVED)


def _imports_from_maps(node: ast.AST) -> bool:
    """`from jax.experimental.maps import Mesh`: each name imported has its own finding."""
    return isinstance(node, ast.ImportFrom) and node.module == "jax.experimental.maps"


def _entered_by_with(s: Script, node: ast.AST) -> bool:
    """`with maps.mesh(devices, names):`: the call is a with statement's context manager."""
    item = s.parent.get(node)
    return isinstance(node, ast.Call) and isinstance(item, ast.withitem) and item.context_expr is node


def _imports_only_named(s: Script, node: ast.AST) -> bool:
    """`from jax.experimental.maps import Mesh` (or thread_resources, in a script without xmap): each imported name
    has a finding of its own (the mesh), so the module's xmap finding would be wrong advice."""
    return isinstance(node, ast.ImportFrom) and all(
        f"{node.module}.{a.name}" in _MOVED or (_reads_the_mesh(f"{node.module}.{a.name}") and not _uses_xmap(s))
        for a in node.names)


def _mesh_read(s: Script, node: ast.AST, name: str, imported: bool) -> tuple[ast.AST, str, str, str]:
    """thread_resources (the mesh a `with mesh:` entered) or a read of it (`.env.shape['dp']`): the mesh you build."""
    read = s.parent.get(node)
    axis = code_of(read.slice) if isinstance(read, ast.Subscript) and read.value is node else ""
    mesh_size = f"mesh.shape[{axis}]" if axis else "mesh.shape"
    return (node, "experimental-sharding-names",
            f"{name}: jax.experimental.maps, which held the mesh entered with `with mesh:` (thread_resources.env), "
            "was deleted in jax 0.4.31 (ModuleNotFoundError)"
            + ("" if imported else "; this reads the " + (f"size of the old mesh axis {axis}" if axis else "old mesh shape")),
            f"read the mesh you build: mesh = jax.make_mesh(shape, names), {mesh_size} (an axis name -> its size); "
            "inside a function traced under jax.set_mesh(mesh), jax.sharding.get_abstract_mesh()"
            + (f".shape[{axis}]" if axis else ".shape")
            + f"; a data axis split over the course's {MESH_AXES} mesh has size jax.device_count()")


def _module_attribute(s: Script, node: ast.AST, name: str) -> bool:
    """`maps.Mesh(...)`: the name reached as an attribute of its module (the module was imported, not the name),
    once a call or a read (the call's callee is not read twice)."""
    return isinstance(node, (ast.Call, ast.Attribute)) and not (
        isinstance(node, ast.Attribute) and isinstance(s.parent.get(node), ast.Call)) \
        and "." in code_of(node.func if isinstance(node, ast.Call) else node)


def _hand_grid(s: Script, node: ast.AST) -> str:
    """What a mesh built from `np.asarray(jax.devices()).reshape(...)` adds: the device grid made by hand."""
    devices = s.value(node.args[0]) if isinstance(node, ast.Call) and node.args else None
    if isinstance(devices, ast.Call) and isinstance(devices.func, ast.Attribute) and devices.func.attr == "reshape" \
            and any(isinstance(n, ast.Call) and is_name(s.name(n.func), "jax.devices") for n in ast.walk(devices)):
        return (f"; its devices, {code_of(devices)}, are a grid built by hand: jax.make_mesh(shape, names) builds "
                "it (each host's devices together) and gives the axes their types")
    return ""


def pjit(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for call in pjit_calls(s):
        keywords = _keywords(s, call)
        old = [k.arg for k in keywords if k.arg in _OLD_KEYWORDS]
        handed = _handed_pjit(s, call)
        by_position = not old and not _is_pjit(s, call.func) and handed is None
        axes = _spec_axes(s, [k.value for k in keywords if k.arg in ("in_axis_resources", "in_shardings")]
                          + _positional_in_spec(s, call, handed))
        data = next((a for a in axes if any(w in a.lower() for w in ("dp", "data", "batch"))), None)
        fed = _fed_in_loops(s, call)
        yield (_said_at(s, call), "pjit",
               ("pjit's " + " and ".join(old) + " were deleted in jax 0.4.14 (TypeError); " if old else "")
               + (f"{code_of(call.func)}, called elsewhere with pjit's in_axis_resources, is handed the function and "
                  "its in and out axis resources by position (pjit's old signature); " if by_position else "")
               + (f"pjit is handed to {code_of(call.func)} with the function and its in and out axis resources "
                  "as positional arguments (pjit's old signature); " if handed is not None else "")
               + "pjit before jax 0.4.1 (jax.Array) took each host's numpy batch as that host's part; "
               "jax.experimental.pjit.pjit now takes jax.jit's arguments, and a numpy input is the whole "
               "global value on every host"
               + (f" (the step is fed in a loop at line{'s' * (len(fed) > 1)} {', '.join(map(str, fed))}: each "
                  "host's own rows, which "
                  "jax.jit takes for the whole batch)" if fed else "")
               + (f"; its specs name the old mesh's axes ({', '.join(axes)})" if axes else ""),
               "jax.jit(f, in_shardings=..., out_shardings=...) with NamedSharding(mesh, spec), and "
               f"global inputs: jax.make_array_from_process_local_data(NamedSharding(mesh, P({MESH_AXES})), "
               "rows) for each host's rows"
               + (f"; on the course's {MESH_AXES} mesh a batch spec over the data axis"
                  + (f", P({data})," if data else "") + f" becomes P({MESH_AXES}) (an axis that splits the model "
                  "needs a mesh axis of that name: jax.make_mesh(shape, names))" if axes else ""))


_OLD_KEYWORDS = ("in_axis_resources", "out_axis_resources")  # pjit's own: no other API took them


def _said_at(s: Script, call: ast.Call) -> ast.AST:
    """Where a pjit call is said: the call, or for `jax.jit(f, out_axis_resources=...)` (jax.jit after the jit/pjit
    merge, handed pjit's old keywords) the first old keyword's value, the text to change."""
    partial = is_name(s.name(call.func), "functools.partial") and call.args
    target = call.args[0] if partial else call.func
    if not is_name(s.name(target), "jax.jit"):
        return call
    return next((k.value for k in call.keywords if k.arg in _OLD_KEYWORDS), call)


def old_keywords_on_their_lines(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`in_axis_resources=...` on a line of its own in a pjit call written over several lines: the text that raises
    (TypeError), said where it is written; the call's own finding says what pjit becomes."""
    for call in pjit_calls(s):
        at = _said_at(s, call).lineno
        for k in (k for k in call.keywords if k.arg in _OLD_KEYWORDS and k.value.lineno != at):
            yield (k.value, "pjit",
                   f"{k.arg}= was deleted from pjit in jax 0.4.14 (TypeError)",
                   f"{k.arg.replace('axis_resources', 'shardings')}=, each spec a NamedSharding(mesh, spec) (or a "
                   "PartitionSpec under jax.set_mesh(mesh))")


def pjit_calls(s: Script) -> Iterator[ast.Call]:
    """Calls of pjit: by its name, through a name bound to it (`maybe_pjit = pjit`, `p = partial(pjit, ...)`), a
    `@partial(pjit, ...)` decorator, any call with pjit's own keywords (a pjit handed in as an argument), or a call
    that pjit is handed to with the function and its specs (`timeit("JIT", pjit, f, in_spec, out_spec)`)."""
    keyworded = {code_of(c.func) for c in s.calls if any(k.arg in _OLD_KEYWORDS for k in c.keywords)
                 and isinstance(c.func, ast.Attribute) and not _own_pjit_wrapper(s, c.func)}
    for call in s.calls:
        partial = is_name(s.name(call.func), "functools.partial")
        if _positional_like_keyworded(call, keyworded):
            yield call
            continue
        if partial and not isinstance(s.parent.get(call), ast.FunctionDef):
            continue  # `p = partial(pjit, ...)`: its calls are the pjit calls
        target = call.args[0] if partial and call.args else call.func
        if _is_pjit(s, target) or any(k.arg in _OLD_KEYWORDS for k in call.keywords) \
                and not _own_pjit_wrapper(s, call.func) or not partial and _handed_pjit(s, call) is not None:
            yield call


def _positional_like_keyworded(call: ast.Call, keyworded: set[str]) -> bool:
    """`partitioner.partition(fn, (spec,), spec)` where the script calls the same `partitioner.partition` elsewhere
    with in_axis_resources=: a pjit (t5x's partitioner passes them on) with its axis resources by position."""
    return isinstance(call.func, ast.Attribute) and code_of(call.func) in keyworded and len(call.args) >= 3 \
        and not call.keywords


def _own_pjit_wrapper(s: Script, func: ast.AST) -> bool:
    """`self._jit(f, in_axis_resources=...)` where the script's own `_jit` takes in_axis_resources as a parameter
    of its own and calls pjit: the old keywords are the wrapper's names, said once where it calls pjit. A wrapper
    that passes **kwargs on (`pjit(fn, **kwargs)`) leaves them written at each call, a finding there."""
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return any(isinstance(node, ast.FunctionDef) and node.name == name
               and {a.arg for a in [*node.args.args, *node.args.kwonlyargs]} & set(_OLD_KEYWORDS)
               and any(isinstance(c, ast.Call) and _is_pjit(s, c.func) for c in ast.walk(node))
               for node in ast.walk(s.tree))


def _handed_pjit(s: Script, call: ast.Call) -> int | None:
    """The position of pjit among a call's arguments, when it is handed on with a function after it (`wrap(pjit,
    f, ...)`): whoever is called calls pjit with what follows."""
    return next((i for i, a in enumerate(call.args[:-1]) if _is_pjit(s, a)), None)


def _is_pjit(s: Script, node: ast.AST) -> bool:
    """The node stands for pjit: its name, or a name bound to it or to a partial of it."""
    bound = s.value(node) if isinstance(node, ast.Name) else node
    if isinstance(bound, ast.Call) and is_name(s.name(bound.func), "functools.partial") and bound.args:
        bound = bound.args[0]
    return is_name(s.name(bound), "jax.experimental.pjit.pjit")


def _keywords(s: Script, call: ast.Call) -> list[ast.keyword]:
    """A pjit call's keywords, and those of the partial its callee is bound to (`p = partial(pjit, ...)`)."""
    bound = s.value(call.func) if isinstance(call.func, ast.Name) else None
    given = bound.keywords if isinstance(bound, ast.Call) and is_name(s.name(bound.func), "functools.partial") else []
    return [*given, *call.keywords]


def _positional_in_spec(s: Script, call: ast.Call, handed: int | None) -> list[ast.AST]:
    """The in spec given by position: after the function of a pjit call, or of a call pjit is handed to."""
    at = 1 if handed is None else handed + 2
    return call.args[at:at + 1] if handed is not None or _is_pjit(s, call.func) else []


def _spec_axes(s: Script, todo: list[ast.AST]) -> list[str]:
    """The mesh axes the PartitionSpecs of a pjit call's in spec name ('dp' for DP = 'dp'; as written when
    no string: ResourceAxis.DATA), through the names that hold them; the course's own axes left out."""
    axes = []
    for _ in range(3):  # a spec held in a name, held in a name
        held = []
        for node in (n for t in todo for n in ast.walk(t)):
            if isinstance(node, ast.Call) and s.name(node.func).endswith("PartitionSpec"):
                axes += [spelled for e in node.args for a in (e.elts if isinstance(e, ast.Tuple) else [e])
                         if not (isinstance(a, ast.Constant) and a.value is None)
                         for spelled in (map(repr, s.axis_names(a)) if s.axis_names(a) else [code_of(a)])]
            elif isinstance(node, ast.Name) and s.value(node) is not node:
                held.append(s.value(node))
        todo = held
    return [a for a in dict.fromkeys(axes) if a.strip("'\"") not in ("host", "device")]


def _fed_in_loops(s: Script, call: ast.Call) -> list[int]:
    """The lines that call what a pjit call made (`step = pjit(...)`, `self.step = pjit(...)`) inside a loop."""
    bound = {code_of(t) for node in ast.walk(s.tree) if isinstance(node, ast.Assign) and node.value is call
             for t in node.targets}
    return sorted({c.lineno for c in s.calls if code_of(c.func) in bound and _in_loop(s, c)})


def _in_loop(s: Script, node: ast.AST) -> bool:
    while node in s.parent and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        node = s.parent[node]
        if isinstance(node, (ast.For, ast.While)):
            return True
    return False


def _sharded_out(s: Script, call: ast.Call) -> list[str]:
    """The old mesh axes a pjit call's out spec splits its output over (`out_axis_resources=P("data")`)."""
    specs = [k.value for k in call.keywords if k.arg in ("out_axis_resources", "out_shardings")]
    return _spec_axes(s, specs or call.args[2:3])


def _strip_fields(node: ast.AST) -> ast.AST:
    """`step(...).sequences`, `step(...)[0]`: the call itself."""
    while isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.value, (ast.Call, ast.Attribute,
                                                                                      ast.Subscript)):
        node = node.value
    return node


def pjit_rows_read_on_host(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`pred = self.generate(x)[:n]` where the script's method `generate` returns the output of a pjit whose out spec
    splits it over a data axis (`self.p_generate = partitioner.partition(..., out_axis_resources=P("data"))`): rows of
    an array over every host's devices, picked on the host."""
    made = {}
    for node in ast.walk(s.tree):
        if isinstance(node, ast.Assign) and node.value in set(pjit_calls(s)) and (axes := _sharded_out(s, node.value)):
            made.update({code_of(t): axes for t in node.targets if isinstance(t, (ast.Name, ast.Attribute))})
    returners = {}
    for function in (n for n in ast.walk(s.tree) if isinstance(n, ast.FunctionDef)):
        held = {t.id: code_of(_strip_fields(a.value).func) for a in ast.walk(function) if isinstance(a, ast.Assign)
                and isinstance(_strip_fields(a.value), ast.Call) and code_of(_strip_fields(a.value).func) in made
                for t in a.targets if isinstance(t, ast.Name)}
        step = next((held[r.value.id] for r in ast.walk(function) if isinstance(r, ast.Return)
                     and isinstance(r.value, ast.Name) and r.value.id in held), None)
        if step is not None:
            returners[function.name] = step
    for node in ast.walk(s.tree):
        call = node.value if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) else None
        name = call.func.attr if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
            and code_of(call.func.value) == "self" else None
        if name in returners:
            step = returners[name]
            yield (node, "numpy-of-global",
                   f"{code_of(call.func)}(...) returns the output of {step}, a pjit whose out spec splits it over "
                   f"{', '.join(made[step])} (every host's devices), and [{code_of(node.slice)}] picks its rows on the host: "
                   "after the port a global array no host holds whole, which the host then reads as numpy",
                   "read it on the host first: every host's rows with "
                   "jax.experimental.multihost_utils.process_allgather(out), this host's with "
                   f"multihost_utils.global_array_to_host_local_array(out, mesh, P({MESH_AXES})); or an out spec of "
                   "P() when every host needs the whole output")


READS = {*_MOVED, *_INTERNALS, "jax.experimental.pjit.pjit"}  # and all of jax.experimental.maps (old_names)
RULES = (old_names, pjit, old_keywords_on_their_lines, pjit_rows_read_on_host)
