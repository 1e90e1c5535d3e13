"""A script that refuses to run on several hosts: `if jax.local_device_count() < jax.device_count(): raise ...` (or
`jax.process_count() > 1`). pmap-era code that fed each host's own batch to a pmap over every device often stopped
there; after the port to global arrays on a ('host', 'device') mesh the same script runs on every host, and the
refusal goes.
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.script import Script, code_of, is_name

# the lesson is old_api_rules' for the same rule id
LESSONS: dict[str, tuple[str, str]] = {}
_COUNTS = ("jax.local_device_count", "jax.device_count", "jax.process_count", "jax.host_count")


def _counts(s: Script, node: ast.AST) -> set[str]:
    """The JAX device or process counts a test reads (through a name bound to one)."""
    found = set()
    for n in ast.walk(node):
        held = s.value(n) if isinstance(n, ast.Name) else n
        if isinstance(held, ast.Call) and is_name(s.name(held.func), *_COUNTS):
            found.add(s.name(held.func).rsplit(".", 1)[-1])
    return found


def _multi_host_test(s: Script, test: ast.AST) -> bool:
    """`local_device_count() < device_count()` (or `!=`), or `process_count() > 1` (or `!= 1`)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    counts = _counts(s, test)
    if {"local_device_count", "device_count"} <= counts:
        return isinstance(test.ops[0], (ast.Lt, ast.Gt, ast.NotEq))
    one = any(isinstance(c, ast.Constant) and c.value == 1 for c in (test.left, *test.comparators))
    return bool(counts & {"process_count", "host_count"}) and one and isinstance(test.ops[0], (ast.Gt, ast.NotEq))


def multi_host_refusal(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for node in ast.walk(s.tree):
        if isinstance(node, ast.If) and _multi_host_test(s, node.test) \
                and any(isinstance(stmt, ast.Raise) for stmt in node.body):
            yield (node.test, "host-count",
                   f"`if {code_of(node.test)}: raise` refuses to run on several hosts (each host fed its own "
                   "batch to a pmap over every device)",
                   "drop the refusal: on a ('host', 'device') mesh with global arrays the same script runs on "
                   "every host (jax.distributed.initialize() first)")


RULES = (multi_host_refusal,)
