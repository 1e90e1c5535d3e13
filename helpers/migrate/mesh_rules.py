"""The rule for a mesh built from one host's devices: `Mesh(np.array(jax.local_devices()), ...)`,
`jax.make_mesh((jax.local_device_count(),), ...)`, or `create_device_mesh((args.num_gpu,))` with the count checked
equal to `len(jax.local_devices())`. A single-process script's mesh, it covers every device there; on several hosts
it leaves the other hosts' devices out (or, for a shape, takes the first devices of `jax.devices()`, host 0's).

The rule reads a `Script` and yields (node, rule name, what the line does on several hosts, what to write instead).
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.bindings import device_count_of, reaches
from helpers.migrate.script import MESH_AXES, Script, code_of, is_name, keyword
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


RULES = (mesh_of_local_devices, *_STACK_RULES)  # and stack_rules': a loader's batch stacked per device
