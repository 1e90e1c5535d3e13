"""Keywords and flags that JAX renamed or removed, said on the line that holds them: `check_rep=` of the old
`jax.experimental.shard_map.shard_map` (jax.shard_map takes `check_vma=`), and the pjit era's config flags
(`jax.config.jax_jit_pjit_api_merge`, `jax.config.jax_array`) and `jax.spmd_mode`, gone with pjit's own API.
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.script import Script, code_of, is_name

# the rules' lessons are the ones jax_rules and old_api_rules give for the same ids
LESSONS: dict[str, tuple[str, str]] = {}
_PJIT_ERA_FLAGS = {"jax_jit_pjit_api_merge": "the jit/pjit merge, jax 0.4.x",
                   "jax_array": "the move to jax.Array, jax 0.4.1 to 0.4.13",
                   "jax_parallel_functions_output_gda": "GlobalDeviceArray outputs of pjit, jax 0.3 to 0.4.1"}


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
    """A flag of the pjit era read or set (`jax.config.jax_jit_pjit_api_merge`, `jax.config.jax_array`, with
    `jax.config.update` too) or `jax.spmd_mode(...)` entered: current JAX has none of them."""
    for node in ast.walk(s.tree):
        flag = node.attr if isinstance(node, ast.Attribute) else node.value if isinstance(node, ast.Constant) else None
        if flag in _PJIT_ERA_FLAGS and (isinstance(node, ast.Constant) or code_of(node.value).endswith("config")):
            yield (node, "pjit",
                   f"{flag} is a flag of the pjit era ({_PJIT_ERA_FLAGS[flag]}): current JAX has no such flag (an "
                   "AttributeError or an unknown-flag error), and jax.jit is pjit now",
                   "drop the flag: jax.jit(f, in_shardings=..., out_shardings=...) with NamedSharding(mesh, spec), "
                   "on global jax.Arrays")
    for call in s.calls:
        if is_name(s.name(call.func), "jax.spmd_mode"):
            yield (call, "pjit",
                   f"{code_of(call)} let pjit-era code compute on arrays that span hosts; jax 0.12 has no "
                   "jax.spmd_mode (AttributeError): every jax.Array may span hosts now",
                   "drop the context manager; read an array that is split over the hosts with "
                   "multihost_utils.process_allgather, or compute on it inside jax.jit")


RULES = (shard_map_check_rep, pjit_merge_flag)
