"""Keywords and flags that JAX renamed or removed, said on the line that holds them: `check_rep=` of the old
`jax.experimental.shard_map.shard_map` (jax.shard_map takes `check_vma=`), and the jit/pjit merge's config flag
(`jax.config.jax_jit_pjit_api_merge`, gone with pjit's own API).
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.script import Script, code_of, is_name

# the rules' lessons are the ones jax_rules and old_api_rules give for the same ids
LESSONS: dict[str, tuple[str, str]] = {}
_MERGE_FLAG = "jax_jit_pjit_api_merge"


def shard_map_check_rep(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`shard_map(f, mesh, in_specs, out_specs, check_rep=False)`: the old shard_map's keyword; jax.shard_map
    raises a TypeError on it."""
    for call in s.calls:
        name = s.name(call.func)
        if is_name(name, "functools.partial", "partial") and call.args:
            name = s.name(call.args[0]) if isinstance(call.args[0], (ast.Name, ast.Attribute)) else ""
        if not is_name(name, "shard_map"):
            continue
        for k in call.keywords:
            if k.arg == "check_rep":
                yield (k.value, "experimental-shard-map",
                       f"check_rep={code_of(k.value)} is a keyword of jax.experimental.shard_map.shard_map "
                       "(deprecated since jax 0.8); jax.shard_map does not take it (TypeError)",
                       f"jax.shard_map(f, mesh=..., in_specs=..., out_specs=..., check_vma={code_of(k.value)}), "
                       "keyword arguments only")


def pjit_merge_flag(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`jax.config.jax_jit_pjit_api_merge` read, or set with `jax.config.update`: a flag of the jit/pjit merge
    that current JAX no longer has (AttributeError)."""
    for node in ast.walk(s.tree):
        if isinstance(node, ast.Attribute) and node.attr == _MERGE_FLAG or \
                isinstance(node, ast.Constant) and node.value == _MERGE_FLAG:
            yield (node, "pjit",
                   f"{_MERGE_FLAG} is a flag of the jit/pjit merge (jax 0.4.x): current JAX has no such flag "
                   "(an AttributeError or an unknown-flag error), and jax.jit is pjit now",
                   "drop the flag: jax.jit(f, in_shardings=..., out_shardings=...) with NamedSharding(mesh, spec)")


RULES = (shard_map_check_rep, pjit_merge_flag)
