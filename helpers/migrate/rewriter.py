"""`--diff`: the findings that can be rewritten safely, rewritten; and what a pmap script needs most
(its pmap calls, replicate/unreplicate, shard, get_metrics, collectives renamed) as a skeleton to check."""
from __future__ import annotations

import ast

from helpers.migrate.findings import findings
from helpers.migrate.jax_rules import experimental_shard_map, is_mesh, pmap_in_specs, with_mesh
from helpers.migrate.script import SPEC_MAKERS, Folder, Script, argument, is_name

DATA = '("host", "device")'
MESH_LINE = f"mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), {DATA})\n"


def rewrite(source: str, folder: Folder = Folder()) -> tuple[str, list[str]]:
    """The source with the findings it can rewrite safely rewritten, and what it rewrote.

    Safe: the `jax.experimental.shard_map` import (when every call already passes mesh, in_specs
    and out_specs by keyword; check_rep becomes check_vma), `with mesh:` -> `with
    jax.set_mesh(mesh):` (when `jax` is imported as jax), and `jax.device_put_replicated(x, ...)`
    -> `jax.device_put(x, NamedSharding(mesh, P()))` (when the script defines `mesh`). `folder`: what
    the other files of its folder tell (the functions they hand gradients to).
    """
    script = Script(ast.parse(source), folder=folder)
    edits: list[tuple[int, int, int, int, str]] = []
    done: list[str] = []
    has_jax = script.names.alias.get("jax") == "jax"

    addressed: set[tuple[int, str]] = set()  # (line, rule) of the findings an edit rewrites

    def replace(node: ast.AST, text: str, *rules: str) -> None:
        edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, text))
        addressed.update((node.lineno, rule) for rule in rules)

    shard_map_calls = [c for c in script.calls if is_name(script.name(c.func), "shard_map")
                       and "experimental" in script.name(c.func)]
    keywords_only = all(not c.args[1:] and {"mesh", "in_specs", "out_specs"} <= {k.arg for k in c.keywords}
                        for c in shard_map_calls)
    for node, *_ in experimental_shard_map(script):
        if keywords_only and isinstance(node, ast.ImportFrom) and [a.name for a in node.names] == ["shard_map"]:
            alias = node.names[0].asname
            replace(node, "from jax import shard_map" + (f" as {alias}" if alias else ""), "experimental-shard-map")
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
                    replace(expr, f"jax.set_mesh({ast.get_source_segment(source, expr)})", "with-mesh")
                    addressed.add((node.lineno, "with-mesh"))
            done.append(f"`with` on line {node.lineno}")
    if "mesh" in script.assigned:
        for call in script.calls:
            if is_name(script.name(call.func), "jax.device_put_replicated") and call.args:
                value = ast.get_source_segment(source, call.args[0])
                replace(call, f"jax.device_put({value}, NamedSharding(mesh, P()))", "device-put-replicated")
                done.append(f"device_put_replicated on line {call.lineno}")
    pmap_era = _pmap_era_edits(script, source, replace, addressed) if has_jax else []
    done += pmap_era
    lines = source.splitlines(keepends=True)
    for start, col, end, end_col, text in sorted(edits, reverse=True):
        head, tail = lines[start - 1][:col], lines[end - 1][end_col:]
        lines[start - 1:end] = [head + text + tail]
    if done:  # what is left for you, marked where it is (lines before the edits' ends keep their numbers)
        _mark_left(lines, [f for f in findings(source, folder=folder) if (f.line, f.rule) not in addressed], edits)
    out = "".join(lines)
    if pmap_era and "mesh" not in script.assigned:
        out = _after_imports(out, script, MESH_LINE)
    if any("device_put_replicated" in d for d in done) or pmap_era:
        out = _with_sharding_import(out, script)
    return out, done


def _mark_left(lines: list[str], left: list, edits: list) -> None:
    """Append `# migrate: RULE` to each line with a finding that no edit rewrote."""
    shift = {}  # original line -> its index after multi-line edits were joined into one line
    removed = sorted((start, end) for start, _, end, _, _ in edits if end > start)
    for f in left:
        index = f.line - 1 - sum(end - start for start, end in removed if end < f.line)
        shift.setdefault(index, []).append(f.rule)
    for index, rules in shift.items():
        if 0 <= index < len(lines):
            body = lines[index].rstrip("\n")
            lines[index] = f"{body}  # migrate: {', '.join(dict.fromkeys(rules))}\n"


def _pmap_era_edits(s: Script, source: str, replace, addressed: set) -> list[str]:
    """Rewrite each `jax.pmap(f, ...)` as a jax.jit of a jax.shard_map on `mesh` (in_specs from in_axes,
    or P() for arguments the script replicates, else the batch spec; donation and static arguments on
    jax.jit), replicate/unreplicate, shard, get_metrics, and collectives over pmap's axis that are not
    gradients. Nothing unless the script has a pmap call to rewrite or a `mesh`."""
    pmaps = [c for c in s.pmaps() if c.args and not is_name(s.name(c.func), "functools.partial")]
    if not pmaps and "mesh" not in s.assigned:
        return []
    done, text = [], lambda node: ast.get_source_segment(source, node)
    still_pmapped = _left_under_pmap(s, [c for c in pmaps if pmap_in_specs(s, c) is not None])
    for call in pmaps:
        specs = pmap_in_specs(s, call)
        if specs is None:
            continue
        specs = specs.replace("'", '"')  # as the rest of the rewrite spells the axes
        on_jit = "".join(f", {k.arg.replace('static_broadcasted_argnums', 'static_argnums')}={text(k.value)}"
                         for k in call.keywords if k.arg in ("donate_argnums", "static_broadcasted_argnums"))
        replace(call, f"jax.jit(jax.shard_map({text(call.args[0])}, mesh=mesh, in_specs={specs}, "
                      f"out_specs=P()){on_jit})", "pmap")
        done.append(f"pmap on line {call.lineno} (check out_specs: P() for what is the same on every device)")
    for call in s.calls:
        name = s.name(call.func)
        if s.replicates(call):
            target = call.args[0] if call.args else call.func.value
            replace(call, f"jax.device_put({text(target)}, NamedSharding(mesh, P()))", "jax-utils-replicate",
                    "replicate-method")
            done.append(f"replicate on line {call.lineno}")
        elif is_name(name, "flax.jax_utils.unreplicate") and call.args:
            replace(call, text(call.args[0]), "jax-utils-replicate")
            done.append(f"unreplicate on line {call.lineno}")
        elif is_name(name, "flax.training.common_utils.shard") and call.args:
            replace(call, f"jax.tree.map(lambda x: jax.make_array_from_process_local_data("
                          f"NamedSharding(mesh, P({DATA})), x), {text(call.args[0])})", "flax-shard")
            done.append(f"shard on line {call.lineno}")
        elif is_name(name, "flax.training.common_utils.get_metrics") and call.args \
                and s.names.alias.get("jnp") == "jax.numpy":
            replace(call, f"jax.device_get(jax.tree.map(lambda *steps: jnp.stack(steps), *{text(call.args[0])}))",
                    "flax-get-metrics")
            done.append(f"get_metrics on line {call.lineno}")
        elif name.rsplit(".", 1)[-1] in ("pmean", "psum", "pmax", "pmin", "all_gather") and name.startswith("jax.lax."):
            axis = argument(call, 1, "axis_name")
            if set(s.axis_names(axis)) & s.pmap_axes and call.args and _renamable(s, call, still_pmapped):
                replace(axis, DATA)
                addressed.add((call.lineno, "pmap-collective"))
                done.append(f"{name.rsplit('.', 1)[-1]}'s axis on line {call.lineno}")
    return done


def _renamable(s: Script, call: ast.Call, still_pmapped: set[ast.AST]) -> bool:
    """A collective whose axis the draft may rename: not of what is or may be a gradient, not in a function
    that takes gradients (or is handed them), not in one the draft leaves under pmap."""
    inside = {node for node in still_pmapped for node in ast.walk(node)}
    return s.gradient_status(call.args[0]) == "no" and not s.takes_gradients(call) and call not in inside


def _left_under_pmap(s: Script, rewritten: list[ast.Call]) -> set[ast.AST]:
    """The functions the draft leaves under pmap (their pmap is not rewritten), and those they call."""
    defs = {f.name: f for f in ast.walk(s.tree) if isinstance(f, ast.FunctionDef)}
    kept = set(s.pmapped_functions()) - {defs.get(s.pmap_target(c)) for c in rewritten}
    kept |= {c.args[0] for c in s.pmaps() if c not in rewritten and c.args and isinstance(c.args[0], ast.Lambda)}
    for _ in range(4):  # the helpers they call, and theirs
        kept |= {defs[c.func.id] for f in list(kept) for c in ast.walk(f)
                 if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in defs}
    return kept


def _after_imports(source: str, script: Script, line: str) -> str:
    imports = [n for n in script.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    at = imports[-1].end_lineno if imports else 0
    lines = source.splitlines(keepends=True)
    lines.insert(at, line)
    return "".join(lines)


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


