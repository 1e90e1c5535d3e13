"""`--diff`: the findings that can be rewritten safely, rewritten."""
from __future__ import annotations

import ast

from helpers.migrate.jax_rules import experimental_shard_map, is_mesh, with_mesh
from helpers.migrate.script import SPEC_MAKERS, Script, is_name


def rewrite(source: str) -> tuple[str, list[str]]:
    """The source with the findings it can rewrite safely rewritten, and what it rewrote.

    Safe: the `jax.experimental.shard_map` import (when every call already passes mesh, in_specs
    and out_specs by keyword; check_rep becomes check_vma), `with mesh:` -> `with
    jax.set_mesh(mesh):` (when `jax` is imported as jax), and `jax.device_put_replicated(x, ...)`
    -> `jax.device_put(x, NamedSharding(mesh, P()))` (when the script defines `mesh`).
    """
    script = Script(ast.parse(source))
    edits: list[tuple[int, int, int, int, str]] = []
    done: list[str] = []
    has_jax = script.names.alias.get("jax") == "jax"

    def replace(node: ast.AST, text: str) -> None:
        edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, text))

    shard_map_calls = [c for c in script.calls if is_name(script.name(c.func), "shard_map")
                       and "experimental" in script.name(c.func)]
    keywords_only = all(not c.args[1:] and {"mesh", "in_specs", "out_specs"} <= {k.arg for k in c.keywords}
                        for c in shard_map_calls)
    for node, *_ in experimental_shard_map(script):
        if keywords_only and isinstance(node, ast.ImportFrom) and [a.name for a in node.names] == ["shard_map"]:
            alias = node.names[0].asname
            replace(node, "from jax import shard_map" + (f" as {alias}" if alias else ""))
            for call in shard_map_calls:
                for k in call.keywords:
                    if k.arg == "check_rep":
                        edits.append((k.lineno, k.col_offset, k.lineno, k.col_offset + len("check_rep"),
                                      "check_vma"))
            done.append("the jax.experimental.shard_map import")
    if has_jax:
        for node, *_ in with_mesh(script):
            for item in node.items:
                expr = item.context_expr
                if isinstance(expr, (ast.Name, ast.Attribute)) and is_mesh(script, expr):
                    replace(expr, f"jax.set_mesh({ast.get_source_segment(source, expr)})")
            done.append(f"`with` on line {node.lineno}")
    if "mesh" in script.assigned:
        for call in script.calls:
            if is_name(script.name(call.func), "jax.device_put_replicated") and call.args:
                value = ast.get_source_segment(source, call.args[0])
                replace(call, f"jax.device_put({value}, NamedSharding(mesh, P()))")
                done.append(f"device_put_replicated on line {call.lineno}")
    lines = source.splitlines(keepends=True)
    for start, col, end, end_col, text in sorted(edits, reverse=True):
        head, tail = lines[start - 1][:col], lines[end - 1][end_col:]
        lines[start - 1:end] = [head + text + tail]
    out = "".join(lines)
    if any("device_put_replicated" in d for d in done):
        out = _with_sharding_import(out, script)
    return out, done


def _with_sharding_import(source: str, script: Script) -> str:
    """Import NamedSharding and P (as PartitionSpec) from jax.sharding, where the script lacks them."""
    alias = script.names.alias
    missing = [name for name, ok in (("NamedSharding", alias.get("NamedSharding", "").endswith("NamedSharding")),
                                     ("PartitionSpec as P", alias.get("P") in SPEC_MAKERS)) if not ok]
    if not missing:
        return source
    imports = [n for n in script.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    at = imports[-1].end_lineno if imports else 0
    lines = source.splitlines(keepends=True)
    lines.insert(at, f"from jax.sharding import {', '.join(missing)}\n")
    return "".join(lines)


