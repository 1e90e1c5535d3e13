"""What the files of a script's project tell about it (`Folder`), read from their bodies by `project.folder_facts`
and handed to each `Script` the rules read."""
from __future__ import annotations

import ast
import dataclasses
from typing import Callable, NamedTuple


class HostSwitch(NamedTuple):
    """A project function (or class) that splits its data by host only in a branch on one of its parameters:
    `if is_training:` (test 'true'), `if not eval:` ('false'), `if split == 'train':` ('==', value "'train'"),
    `!=`; with the parameter's position in a call (self left out; -1 keyword-only) and its default's code ('' none)."""

    function: str
    parameter: str
    position: int
    test: str
    value: str
    default: str

    def off_at(self, call: ast.Call, value: Callable[[ast.AST], ast.AST]) -> str | None:
        """How a call turns the split off (`is_training is true (here False)`): its argument (read through `value`,
        what a name holds) or the default, a constant the test rejects; None if it turns it on or the tool cannot
        tell (a name, `**config`)."""
        starred = any(isinstance(a, ast.Starred) for a in call.args)
        given = next((k.value for k in call.keywords if k.arg == self.parameter), None)
        if given is None and 0 <= self.position < len(call.args) and not starred:
            given = call.args[self.position]
        if given is None and (starred or any(k.arg is None for k in call.keywords)):
            return None  # `**config`: the parameter may be in it
        given = value(given) if given is not None else ast.parse(self.default or "None", mode="eval").body
        if self._passes(given) is not False:
            return None
        shown = {"true": "true", "false": "false", "==": self.value, "!=": f"not {self.value}"}[self.test]
        return f"{self.parameter} is {shown} (here {ast.unparse(given)})"

    def _passes(self, given: ast.AST) -> bool | None:
        """Whether a constant argument passes the test; None for one the tool cannot read."""
        if self.test in ("true", "false"):
            return bool(given.value) == (self.test == "true") if isinstance(given, ast.Constant) else None
        expected = ast.parse(self.value, mode="eval").body
        if isinstance(given, ast.Constant) and isinstance(expected, ast.Constant):
            equal = given.value == expected.value
        elif isinstance(given, ast.Attribute) and isinstance(expected, ast.Attribute):
            equal = given.attr == expected.attr
        else:
            return None
        return equal == (self.test == "==")


@dataclasses.dataclass(frozen=True)
class Folder:
    """What the other files of a script's folder tell about it: the (function, position or keyword) they hand
    gradients to, and the axis names their pmaps map over."""

    handed: frozenset[tuple[str, object]] = frozenset()
    pmap_axes: frozenset[str] = frozenset()
    copies: frozenset[tuple[str, str]] = frozenset()  # (function, 'replicate' or 'unreplicate') they define
    pmappers: frozenset[str] = frozenset()  # their functions that call jax.pmap (a project's `utils.dist(f)`)
    aliases: frozenset[tuple[str, str]] = frozenset()  # (name, what it spells out): `pmap` of a partial of jax.pmap
    read: frozenset[str] = frozenset()  # their functions, methods and classes, read to their bodies
    host_aware: frozenset[str] = frozenset()  # those of them whose body reads the process index or count
    stackers: frozenset[str] = frozenset()  # their functions that stack rows per local device (`shard(batch)`)
    checkpointers: frozenset[str] = frozenset()  # their functions and classes that save or restore model state
    host_switches: frozenset[HostSwitch] = frozenset()  # read the process index only in a branch on a parameter
    pmap_runners: frozenset[str] = frozenset()  # their functions that run a pmapped step and return its output
    prefetchers: frozenset[str] = frozenset()  # their functions that prefetch the batches to the local devices
    count_stackers: frozenset[tuple[str, int]] = frozenset()  # (function, position): stack rows by a count handed
    placers: frozenset[str] = frozenset()  # their pmaps of the identity (`shard = jax.pmap(lambda x: x)`)
    torch_loaders: frozenset[str] = frozenset()  # their classes that subclass a DataLoader (`NumpyLoader`)
    pmapping_classes: frozenset[str] = frozenset()  # their classes with a pmapped method (a sampler's `__call__`)
