"""The rules for a mesh (or a pmap) of one host's devices: `Mesh(np.array(jax.local_devices()), ...)`,
`jax.make_mesh((jax.local_device_count(),), ...)`, or `create_device_mesh((args.num_gpu,))` with the count checked
equal to `len(jax.local_devices())`; a device grid laid out by hand for one host
(`np.asarray(jax.devices()).reshape(1, jax.local_device_count())`); a pmap told `devices=jax.local_devices()`. A
single-process script's mesh, it covers every device there; on several hosts
it leaves the other hosts' devices out (or, for a shape, takes the first devices of `jax.devices()`, host 0's).

The rule reads a `Script` and yields (node, rule name, what the line does on several hosts, what to write instead).
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.bindings import device_count_of, reaches, this_hosts_devices
from helpers.migrate.script import MESH_AXES, Script, code_of, device_grid, is_name, keyword
from helpers.migrate.stack_rules import RULES as _STACK_RULES

# rule -> (notebook, section heading without its number): where the course teaches the fix
LESSONS: dict[str, tuple[str, str]] = {
    "mesh-of-local-devices": ("01", "When the mesh is smaller than the cluster"),
}
_HOST_NUMBERS = ("jax.process_count", "jax.process_index", "jax.host_count", "jax.host_id")


def _is_local_devices(s: Script, node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and is_name(s.name(node.func), "jax.local_devices")


def _checked_local(s: Script) -> set[str]:
    """The code of each count the script checks equal to this host's devices: `assert n == len(jax.local_devices())`,
    or handed to a function of the script that compares its parameter with such a count (`check_num_gpu(args.n)`)."""
    defs = {f.name: f for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef)}
    checked, params = set(), {}
    for node in ast.walk(s.tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            left, right = node.left, node.comparators[0]
            for count, other in ((left, right), (right, left)):
                if device_count_of(s, count) == "local":
                    checked.add(code_of(other))
                    function = s.enclosing_function(node)
                    if isinstance(other, ast.Name) and isinstance(function, ast.FunctionDef):
                        names = [a.arg for a in function.args.args]
                        if other.id in names:
                            params[function.name] = names.index(other.id)
    for call in s.calls:
        at = params.get(call.func.id) if isinstance(call.func, ast.Name) and call.func.id in defs else None
        if at is not None and at < len(call.args):
            checked.add(code_of(call.args[at]))
    return checked


def _local_shape(s: Script, shape: ast.AST | None, checked: set[str]) -> bool:
    """A mesh shape whose axes multiply to this host's device count: each a count of this host's devices (at least
    one) or 1."""
    if not isinstance(shape, (ast.Tuple, ast.List)) or not shape.elts:
        return False
    local = [device_count_of(s, e) == "local" or code_of(e) in checked for e in shape.elts]
    ones = [isinstance(e, ast.Constant) and e.value == 1 for e in shape.elts]
    return any(local) and all(a or b for a, b in zip(local, ones))


def mesh_of_local_devices(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    if any(is_name(s.name(c.func), *_HOST_NUMBERS) for c in s.calls):
        return  # a script that counts hosts builds a host's own mesh on purpose
    checked = _checked_local(s)
    for call in s.calls:
        name = s.name(call.func)
        if is_name(name, "jax.sharding.Mesh", "jax.Mesh"):
            devices = call.args[0] if call.args else keyword(call, "devices")
            local = devices is not None and reaches(s, devices, lambda n: _is_local_devices(s, n), depth=4) is not None
        elif name.endswith("create_device_mesh") or is_name(name, "jax.make_mesh"):
            shape = call.args[0] if call.args else keyword(call, "mesh_shape") or keyword(call, "axis_shapes")
            devices = keyword(call, "devices")
            local = _local_shape(s, shape, checked) or (
                devices is not None and reaches(s, devices, lambda n: _is_local_devices(s, n), depth=4) is not None)
        else:
            continue
        if local:
            yield (call, "mesh-of-local-devices",
                   f"{code_of(call.func)}(...) builds the mesh from this host's devices only: on several hosts it "
                   "leaves the other hosts' devices out (a shape of this host's count takes the first devices of "
                   "jax.devices(), host 0's), so the hosts never compute together",
                   f"a mesh of every host's devices: jax.make_mesh((jax.process_count(), jax.local_device_count()), "
                   f"{MESH_AXES}), each host's devices one row")


def local_device_grid(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """A device grid for a mesh (`np.array(jax.devices()).reshape(1, jax.local_device_count())`) shaped by this host's
    device count, or of devices picked by index (`jax.devices()[:n]`): one host's share of the devices."""
    if any(is_name(s.name(c.func), *_HOST_NUMBERS) for c in s.calls):
        return  # a script that counts hosts lays out a host's own devices on purpose
    checked = _checked_local(s)
    for call in (c for c in s.calls if device_grid(s, c)):
        shape = call.args[0] if len(call.args) == 1 else ast.Tuple(elts=list(call.args))
        picked = any(isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Slice) and isinstance(n.value, ast.Call)
                     and is_name(s.name(n.value.func), "jax.devices") for n in ast.walk(call.func.value))
        if picked or _local_shape(s, shape, checked) or _is_local_devices(s, next(
                (n for n in ast.walk(call.func.value) if isinstance(n, ast.Call)), None)):
            yield (call, "mesh-of-local-devices",
                   f"{code_of(call)} lays out " + ("devices picked by index" if picked else "this host's count of "
                                                   "devices") + " for a mesh: on several hosts the mesh leaves the "
                   "other hosts' devices out (the first of jax.devices() are host 0's), so the hosts never compute "
                   "together",
                   f"a mesh of every host's devices: jax.make_mesh((jax.process_count(), jax.local_device_count()), "
                   f"{MESH_AXES}), each host's devices one row")


def pmap_of_local_devices(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`jax.pmap(f, axis_name='i', devices=jax.local_devices())`: pmap's axis spans every host's devices by default;
    told this host's devices, each host maps its own, and the collectives never leave the host."""
    for call in s.pmaps():
        devices = keyword(call, "devices")
        if this_hosts_devices(s, devices):
            yield (devices, "mesh-of-local-devices",
                   f"devices={code_of(devices)} maps this host's devices only: each host runs its own pmap, whose "
                   "collectives never reach the other hosts' devices (without devices=, pmap's axis spans every "
                   "host's)",
                   f"a mesh of every host's devices: jax.make_mesh((jax.process_count(), jax.local_device_count()), "
                   f"{MESH_AXES}), and the collectives over both axes")


# and stack_rules': a loader's batch stacked per device
RULES = (mesh_of_local_devices, local_device_grid, pmap_of_local_devices, *_STACK_RULES)
