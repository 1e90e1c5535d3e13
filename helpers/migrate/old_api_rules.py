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
    "jax.experimental.pjit.with_sharding_constraint": "jax.lax.with_sharding_constraint(x, NamedSharding(mesh, "
                                                      "spec)); and pjit itself is jax.jit",
}
_GONE_FROM = {"jax.experimental.pjit.with_sharding_constraint": "jax 0.4.x (ImportError on jax 0.12: it moved "
                                                                "to jax.lax)"}
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
    for node, name, imported in s.used_names():
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
        elif name.startswith("jax.lib.xla_bridge.") and name.rsplit(".", 1)[-1] in _XLA_BRIDGE and not imported:
            yield (node, "host-count",
                   f"{name}: jax.lib.xla_bridge is not in jax 0.12 (ImportError)", _XLA_BRIDGE[name.rsplit(".", 1)[-1]])
        elif name in _RENAMED:
            yield (node, "host-count",
                   f"{name} is the old name of {_RENAMED[name].split('(')[0]}; jax 0.12 still has it and "
                   "warns that it will be removed", _RENAMED[name])
        elif (name == "jax.experimental.maps" or name.startswith("jax.experimental.maps.")) \
                and name not in _MOVED:
            yield (node, "xmap",
                   f"{name}: xmap and jax.experimental.maps (xmap, mesh, thread_resources) were deleted in "
                   "jax 0.4.31 (ModuleNotFoundError)",
                   f"jax.shard_map(f, mesh=jax.make_mesh(..., {MESH_AXES}), in_specs=..., out_specs=...): "
                   "xmap's named axes become mesh axes, its axis resources the specs")


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
    for call in s.calls:
        if not is_name(s.name(call.func), "jax.experimental.pjit.pjit"):
            continue
        old = [k.arg for k in call.keywords if k.arg in ("in_axis_resources", "out_axis_resources")]
        yield (call, "pjit",
               ("pjit's " + " and ".join(old) + " were deleted in jax 0.4.14 (TypeError); " if old else "")
               + "pjit before jax 0.4.1 (jax.Array) took each host's numpy batch as that host's part; "
               "jax.experimental.pjit.pjit now takes jax.jit's arguments, and a numpy input is the whole "
               "global value on every host",
               "jax.jit(f, in_shardings=..., out_shardings=...) with NamedSharding(mesh, spec), and "
               f"global inputs: jax.make_array_from_process_local_data(NamedSharding(mesh, P({MESH_AXES})), "
               "rows) for each host's rows")


READS = {*_MOVED, *_INTERNALS, "jax.experimental.pjit.pjit"}  # and all of jax.experimental.maps (old_names)
RULES = (old_names, pjit)
