"""einops patterns that make pmap's stack by hand: `einops.rearrange(x, "(device batch) ... -> device batch ...",
device=n_devices)` splits the rows into a leading axis sized by a count of devices; also a partial bound to one
(`split = functools.partial(einops.rearrange, pattern="(d b) n -> d b n", d=n_devices)`) and each call of it."""
from __future__ import annotations

import ast
import re
from typing import Iterator

from helpers.migrate.bindings import device_count_of
from helpers.migrate.bodies import pmap_era
from helpers.migrate.script import MESH_AXES, Script, code_of, is_name, keyword

LESSONS: dict[str, tuple[str, str]] = {}  # local-batch: jax_rules'


def _device_split(s: Script, call: ast.Call) -> ast.Constant | None:
    """The pattern of a rearrange (or of a partial of one) whose first group splits into a leading axis sized by a
    device count (`"(d b) n -> d b n"` with `d=len(jax.devices())`); None for any other call."""
    name = s.name(call.func)
    if is_name(name, "functools.partial") and call.args and is_name(s.name(call.args[0]), "einops.rearrange"):
        pattern = call.args[2] if len(call.args) > 2 else keyword(call, "pattern")
    elif is_name(name, "einops.rearrange"):
        pattern = call.args[1] if len(call.args) > 1 else keyword(call, "pattern")
    else:
        return None
    if not (isinstance(pattern, ast.Constant) and isinstance(pattern.value, str) and "->" in pattern.value):
        return None
    left, right = pattern.value.split("->", 1)
    group = re.match(r"\s*\((\w+)\s+\w+", left)
    leading = right.split()[:1]
    size = keyword(call, group.group(1)) if group and leading == [group.group(1)] else None
    return pattern if size is not None and device_count_of(s, size) else None


def _calls_of(s: Script, call: ast.Call) -> list[ast.Call]:
    """The calls of the name a partial is bound to (`split = functools.partial(...)`, then `split(x)`)."""
    binding = s.parent.get(call)
    names = {t.id for t in getattr(binding, "targets", ()) if isinstance(t, ast.Name)}
    return [c for c in s.calls if isinstance(c.func, ast.Name) and c.func.id in names]


def rearranged_per_device(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """In a pmap-era script, an einops pattern that splits the rows into a leading axis of devices, and each call of
    a partial bound to one: pmap's stack on the host."""
    if not pmap_era(s):
        return
    instead = ("no split: pass the host's rows as they are to jax.make_array_from_process_local_data("
               f"NamedSharding(mesh, P({MESH_AXES})), rows), and JAX splits them over the devices")
    for call in s.calls:
        pattern = _device_split(s, call)
        if pattern is None:
            continue
        does = (f"the einops pattern {pattern.value!r} splits the rows into a leading axis of devices, pmap's stack "
                "built by hand")
        yield pattern, "local-batch", does, instead
        for use in _calls_of(s, call):
            yield use, "local-batch", f"{code_of(use.func)}(...) applies it: {does}", instead


RULES = (rearranged_per_device,)
