"""The project a script belongs to: the modules of its own package that it imports, found beside it on disk, and
what such files tell each other (`folder_facts`), so that a helper defined in `utils.py` (a replicate, a pmap of
the step) is read from its body, not guessed from its name. Only files under the script's own package roots are
found, never a third-party library."""
from __future__ import annotations

import ast
from pathlib import Path

from helpers.migrate.aliases import definitions, expand
from helpers.migrate.batch_rules import stacks_per_local_device
from helpers.migrate.checkpoint_rules import checkpointers
from helpers.migrate.script import Folder, Script, first_copy, is_name

MOST_MODULES = 40  # a script importing half a monorepo: read the first ones, keep the tool fast
_HOST_NUMBERS = ("process_index", "process_count", "host_id", "host_count")


def roots(script: Path) -> list[Path]:
    """The folders an absolute import of the script may start from: its own folder, and each folder above it
    while the folder below is a package (has `__init__.py`), ending at the first folder that is not one."""
    found = [script.parent]
    folder = script.parent
    while (folder / "__init__.py").exists() and folder.parent != folder:
        folder = folder.parent
        found.append(folder)
    return found


def _module_file(base: Path, dotted: str) -> Path | None:
    """`base/a/b.py` or `base/a/b/__init__.py` for the module `a.b` ('' for base's own `__init__.py`)."""
    path = base.joinpath(*dotted.split(".")) if dotted else base
    for candidate in (path.with_suffix(".py") if dotted else None, path / "__init__.py"):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(level, dotted module) for each module an import may name: `import a.b`; `from a import b` names `a` and
    `a.b` (b may be a module); `from . import c` is (1, 'c')."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(0, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            found.append((node.level, module))
            found += [(node.level, f"{module}.{a.name}" if module else a.name) for a in node.names if a.name != "*"]
    return found


def _outer_roots(top: Path, dotted: str) -> list[Path]:
    """The folder above the script's top package when an import names that package: `paxml/train.py` importing
    `paxml.checkpoints`, its own folder a package without `__init__.py`."""
    return [top.parent] if dotted.split(".")[0] == top.name else []


def project_modules(script: Path) -> list[Path]:
    """The files of the script's own project that it imports directly, in the order it names them."""
    try:
        tree = ast.parse(script.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return []
    bases = roots(script)
    found: list[Path] = []
    for level, dotted in _imported(tree):
        if level:
            base = script.parent
            for _ in range(level - 1):
                base = base.parent
            candidates = [base]
        else:
            candidates = bases + _outer_roots(bases[-1], dotted)
        for base in candidates:
            file = _module_file(base, dotted)
            if file is not None and file.resolve() != script.resolve() and file not in found:
                found.append(file)
                break
    return found[:MOST_MODULES]


def folder_facts(files: list[Path]) -> Folder:
    """What the files of a folder (or a project) tell each other: the functions they hand gradients to, their pmaps'
    axes, their helpers that replicate or unreplicate, their functions that pmap a function they are handed, and their
    aliases of pmap and its collectives (and string constants: an axis name), and which of their functions, methods and
    classes read the process index or count (a loader that splits its data by host), and which save or restore model
    state (a pickle, msgpack or npz of it: `save_checkpoint`)."""
    handed, axes, copies, pmappers, aliases, read, host_aware, stackers, saving = (set() for _ in range(9))
    for file in files:
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, SyntaxError):
            continue  # said when the file itself is read
        aliases |= set(definitions(tree).items())
        script = Script(expand(tree))
        handed |= set(script.gradients.handed_out())
        axes |= script.pmap_axes
        copies |= set(script.copies(saves=False).items()) | _mapped_first_copies(script)
        pmappers |= _pmapping_functions(script)
        saving |= checkpointers(script, file.stem)
        for definition in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))):
            read.add(definition.name)
            if any(isinstance(n, ast.Call) and is_name(script.name(n.func), *_HOST_NUMBERS)
                   for n in ast.walk(definition)):
                host_aware.add(definition.name)
            if isinstance(definition, ast.FunctionDef) and stacks_per_local_device(script, definition):
                stackers.add(definition.name)
    return Folder(frozenset(handed), frozenset(axes), frozenset(copies), frozenset(pmappers), frozenset(aliases),
                  frozenset(read), frozenset(host_aware), frozenset(stackers), frozenset(saving))


def _pmapping_functions(script: Script) -> set[str]:
    """Its functions that pmap a function they are handed (`def dist(f): return jax.pmap(f, ...)`, or a partial of
    it); a loader that pmaps a lambda of its own to place its rows is not one."""
    return {f.name for call in script.pmaps() for f in script.enclosing_defs(call) if call.args and any(
        isinstance(n, ast.Name) and n.id in {a.arg for a in f.args.args} for n in ast.walk(call.args[0]))}


def _mapped_first_copies(script: Script) -> set[tuple[str, str]]:
    """`instance = functools.partial(jax.tree_util.tree_map, lambda x: x[0])`: a module's name for device 0's copy."""
    found = set()
    for node in getattr(script.tree, "body", []):
        value = node.value if isinstance(node, ast.Assign) else None
        mapped = value.args[1] if isinstance(value, ast.Call) and len(value.args) == 2 else None
        if isinstance(mapped, ast.Lambda) and is_name(script.name(value.func), "functools.partial") \
                and script.name(value.args[0]).endswith(("tree_map", "tree.map")) \
                and any(first_copy(n, {a.arg for a in mapped.args.args}) for n in ast.walk(mapped.body)):
            found |= {(t.id, "unreplicate") for t in node.targets if isinstance(t, ast.Name)}
    return found
