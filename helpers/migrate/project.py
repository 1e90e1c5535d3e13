"""The project a script belongs to: the modules of its own package that it imports, found beside it on disk, and
what such files tell each other (`folder_facts`), so that a helper defined in `utils.py` (a replicate, a pmap of
the step) is read from its body, not guessed from its name. Only files under the script's own package roots are
found, never a third-party library."""
from __future__ import annotations

import ast
from pathlib import Path

from helpers.migrate.aliases import definitions, expand
from helpers.migrate.batch_rules import stacked_by, stacks_per_local_device
from helpers.migrate.checkpoint_rules import checkpointers
from helpers.migrate.copy_rules import mapped_function
from helpers.migrate.folder import Folder, HostSwitch
from helpers.migrate.script import Script, code_of, first_copy, is_name, is_name_call, own_nodes

MOST_MODULES = 40  # a script importing half a monorepo: read the first ones, keep the tool fast
_SRC_LEVELS = 3  # how far above the script's top package a src-layout project's root may be
_ROOT_MARKS = ("setup.py", "pyproject.toml", "setup.cfg", ".git")  # what a repository's root holds
_FETCHES = ("jax.device_get", "numpy.asarray", "numpy.array")  # what hands a value back on the host, as it is
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


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
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
    """The folder above the script's top package, or above a folder further up, when an import names that folder:
    `paxml/train.py` importing `paxml.checkpoints`, `chirp/train/classifier.py` importing `chirp.data.utils`, the
    folders packages without `__init__.py`; else the `src` folder of a src-layout project a few folders up that holds
    the package (`projects/finetune.py` importing `speech_jax`, found in `src/speech_jax`); else the repository's
    root a folder or two up (it holds setup.py, pyproject.toml or .git) when it holds the module (`scripts/train.py`
    importing `diffusion.utils`, run from the root)."""
    head = dotted.split(".")[0]
    named = [folder.parent for folder in (top, *top.parents) if folder.name == head][:1]
    return named or [folder / "src" for folder in (top, *top.parents)[:_SRC_LEVELS]
                     if (folder / "src" / head).is_dir()][:1] or [
        folder for folder in top.parents[:_SRC_LEVELS - 1] if any((folder / m).exists() for m in _ROOT_MARKS)
        and ((folder / head).is_dir() or (folder / f"{head}.py").is_file())][:1]


def project_modules(script: Path) -> list[Path]:
    """The files of the script's own project that it imports directly, in the order it names them."""
    try:
        tree = ast.parse(script.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return []
    bases = roots(script)
    found: list[Path] = []
    for level, dotted in imported_modules(tree):
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
    found += [m for package in found if package.name == "__init__.py" for m in _reexported(package) if m not in found]
    return found[:MOST_MODULES]


def _reexported(package: Path) -> list[Path]:
    """The modules a package's `__init__.py` imports relatively (`from .tfds import create_iterator`): what a script
    importing the package gets from them."""
    try:
        tree = ast.parse(package.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return []
    return [file for node in tree.body if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
            for file in [_module_file(package.parent, node.module)] if file is not None]


def folder_facts(files: list[Path]) -> Folder:
    """What the files of a folder (or a project) tell each other: the functions they hand gradients to, their pmaps'
    axes, their helpers that replicate or unreplicate, their functions that pmap a function they are handed, and their
    aliases of pmap and its collectives (and string constants: an axis name), and which of their functions, methods and
    classes read the process index or count (a loader that splits its data by host; `if is_training:` only, the
    switch), which save or restore model state (a pickle, msgpack or npz of it: `save_checkpoint`), which run a
    pmapped step and hand back its output, and which prefetch their batches to the local devices."""
    handed, axes, copies, pmappers, aliases, read, host_aware, stackers, saving, switches, runners, prefetch, \
        placers, torch_loaders, pmapping_classes = (set() for _ in range(15))
    count_stackers: set[tuple[str, int]] = set()
    functions: list[ast.FunctionDef] = []
    steps: set[str] = set()  # the modules' pmapped functions
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
        runners |= _pmap_runners(script)
        steps |= _pmapped(script)
        prefetch |= _prefetchers(script)
        placers |= _identity_pmaps(script)
        steps_here = _pmapped(script)
        pmapping_classes |= {c.name for c in ast.walk(script.tree) if isinstance(c, ast.ClassDef)
                             and any(isinstance(f, ast.FunctionDef) and f.name in steps_here for f in c.body)}
        for definition in (n for n in ast.walk(script.tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))):
            read.add(definition.name)
            if isinstance(definition, ast.ClassDef) and any(code_of(b).endswith("DataLoader")
                                                            for b in definition.bases):
                torch_loaders.add(definition.name)
            if _host_reads(script, definition):
                host_aware.add(definition.name)
                switches |= {s for s in [_host_switch(script, definition)] if s is not None}
            if isinstance(definition, ast.FunctionDef):
                functions.append(definition)
                if stacks_per_local_device(script, definition):
                    stackers.add(definition.name)
                count_stackers |= _stacks_by_a_count(script, definition)
    return Folder(frozenset(handed), frozenset(axes), frozenset(copies), frozenset(pmappers), frozenset(aliases),
                  frozenset(read), frozenset(host_aware), frozenset(_using_stackers(functions, stackers, steps)),
                  frozenset(saving), host_switches=frozenset(switches), pmap_runners=frozenset(runners),
                  prefetchers=frozenset(prefetch), count_stackers=frozenset(count_stackers),
                  placers=frozenset(placers), torch_loaders=frozenset(torch_loaders),
                  pmapping_classes=frozenset(pmapping_classes))


def _stacks_by_a_count(script: Script, function: ast.FunctionDef) -> set[tuple[str, int]]:
    """(name, position in a call, self left out) of the parameter by which the function stacks the rows it is handed
    (`def shard_batch(batch, n_devices): return batch.reshape((n_devices, -1) + batch.shape[1:])`): a call that
    hands it a device count stacks per device."""
    positional = [a.arg for a in function.args.posonlyargs + function.args.args]
    skipped = 1 if positional[:1] in (["self"], ["cls"]) else 0
    return {(function.name, i - skipped) for i, parameter in enumerate(positional) if i > skipped
            and stacked_by(script, function, {parameter})}


def _using_stackers(functions: list[ast.FunctionDef], stackers: set[str], steps: set[str]) -> set[str]:
    """The stackers and the project's functions that call one or hand one on (`ds.map(split_batch)`, a loader
    returning `get_data(...)` whose body reshapes per local device), a few steps on; not one that runs a step on
    the rows it stacks (calls a pmapped function or a function it is handed): it loads nothing for the script."""
    found = set(stackers)
    for _ in range(4):
        more = {f.name for f in functions
                if f.name not in found and _names_one(f, found) and not _runs_a_step(f, steps)}
        if not more:
            break
        found |= more
    return found


def _names_one(function: ast.FunctionDef, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names or isinstance(n, ast.Attribute) and n.attr in names
               for n in ast.walk(function))


def _runs_a_step(function: ast.FunctionDef, steps: set[str]) -> bool:
    parameters = {a.arg for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs}
    return any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in parameters | steps
               for c in ast.walk(function))


def _prefetchers(script: Script) -> set[str]:
    """The module's functions that put the batches they make on the local devices (`prefetch_to_device`), also
    through another of its functions (`create_dataset` returning `to_device(batches)`)."""
    defs = [f for f in ast.walk(script.tree) if isinstance(f, ast.FunctionDef)]
    found: set[str] = set()
    for _ in range(4):
        more = {f.name for f in defs if f.name not in found and any(
            isinstance(c, ast.Call) and (script.name(c.func).endswith("prefetch_to_device")
                                         or isinstance(c.func, ast.Name) and c.func.id in found)
            for c in ast.walk(f))}
        if not more:
            break
        found |= more
    return found


def _pmap_runners(script: Script) -> set[str]:
    """The module's own pmapped steps (`@jax.pmap def step`, `p_step = jax.pmap(step)`), and its functions that run
    one (or `jax.pmap(f)(x)`) and return what it gave back, through the names, lists and nested functions of their
    bodies (`samples = decode(jax.pmap(f)(x)); return samples`): a script that imports one gets pmap's stacks from
    it. A pmap of a lambda places values (a replicate, a key split), it runs no step."""
    steps = _pmap_calls(script)
    pmapped = _pmapped(script)
    top = {n.name for n in script.tree.body if isinstance(n, ast.FunctionDef)} | {
        t.id for n in script.tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return (pmapped & top) | {f.name for f in script.tree.body if isinstance(f, ast.FunctionDef)
                              and f.name not in pmapped and _returns_pmap_output(f, pmapped, steps)}


def _identity_pmaps(script: Script) -> set[str]:
    """The module's names for a pmap of the identity, which puts the stack it is handed on this host's devices, one
    slice a device: `shard = jax.pmap(lambda x: x)`, or a function that returns `jax.pmap(lambda x: x)(x)`."""
    def identity(pmap: ast.Call) -> bool:
        mapped = pmap.args[0] if pmap.args else None
        return isinstance(mapped, ast.Lambda) and len(mapped.args.args) == 1 \
            and isinstance(mapped.body, ast.Name) and mapped.body.id == mapped.args.args[0].arg

    found = set()
    identities = {c for c in script.pmaps() if identity(c)}
    for node in script.tree.body:
        if isinstance(node, ast.Assign) and node.value in identities:
            found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.FunctionDef) and any(
                isinstance(r, ast.Call) and r.func in identities for r in _own_returns(node)):
            found.add(node.name)
    return found


def _pmap_calls(script: Script) -> set[ast.Call]:
    """The module's pmaps of a function (not of a lambda, which places values)."""
    return {c for c in script.pmaps() if is_name_call(c) and c.args and not isinstance(c.args[0], ast.Lambda)}


def _pmapped(script: Script) -> set[str]:
    """The names of the module's pmapped steps: `@jax.pmap def step`, `p_step = jax.pmap(step)`."""
    pmaps, steps = set(script.pmaps()), _pmap_calls(script)
    return {f.name for f in ast.walk(script.tree) if isinstance(f, ast.FunctionDef) and any(
        n in pmaps or is_name(script.name(n), "jax.pmap") for d in f.decorator_list for n in ast.walk(d))} | {
        t.id for n in ast.walk(script.tree) if isinstance(n, ast.Assign) and n.value in steps
        for t in n.targets if isinstance(t, ast.Name)}


def _returns_pmap_output(function: ast.FunctionDef, pmapped: set[str], steps: set[ast.Call]) -> bool:
    """What the function returns derives from a call of a pmapped step made in its body."""
    held: set[str] = set()  # names (and nested functions) that hold an output

    def derived(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in held or isinstance(n, ast.Call) and (
            isinstance(n.func, ast.Name) and n.func.id in pmapped or n.func in steps) for n in ast.walk(node))

    for _ in range(4):  # a name bound from another that holds one, a few steps on
        before = len(held)
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and derived(node.value):
                held |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append" \
                    and isinstance(node.func.value, ast.Name) and any(derived(a) for a in node.args):
                held.add(node.func.value.id)
            elif isinstance(node, ast.FunctionDef) and node is not function \
                    and any(derived(r) for r in _own_returns(node)):
                held.add(node.name)
        if len(held) == before:
            break
    return any(derived(r) for r in _own_returns(function))


def _host_reads(script: Script, definition: ast.AST) -> list[ast.Call]:
    """The calls in a definition's body that read the process index or count."""
    return [n for n in ast.walk(definition) if isinstance(n, ast.Call) and is_name(script.name(n.func), *_HOST_NUMBERS)]


def _host_switch(script: Script, definition: ast.FunctionDef | ast.ClassDef) -> HostSwitch | None:
    """How a loader turns its host split on when it reads the process index only in branches on one of its
    parameters, all turned on alike (`if is_training: start = jax.process_index() * n`): a class by its __init__'s."""
    function = definition
    if isinstance(definition, ast.ClassDef):
        function = next((f for f in definition.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        if function is None or len(_host_reads(script, function)) != len(_host_reads(script, definition)):
            return None
    tests = {_branch_on_parameter(script, read, function) for read in _host_reads(script, function)}
    if len(tests) != 1 or None in tests:
        return None
    (parameter, test, value), = tests
    arguments = function.args
    positional = [a.arg for a in arguments.posonlyargs + arguments.args]
    skipped = 1 if positional[:1] in (["self"], ["cls"]) else 0
    defaults = dict(zip(positional[::-1], arguments.defaults[::-1])) | {
        a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None}
    position = positional.index(parameter) - skipped if parameter in positional else -1
    default = ast.unparse(defaults[parameter]) if parameter in defaults else ""
    return HostSwitch(definition.name, parameter, position, test, value, default)


_FLIPPED = {"true": "false", "false": "true", "==": "!=", "!=": "=="}


def _branch_on_parameter(script: Script, read: ast.AST, function: ast.FunctionDef) -> tuple[str, str, str] | None:
    """(parameter, test, value) of the nearest branch on one of the function's parameters that the read is in:
    `if train:` ('true'), `if not train:` ('false'), `if split == 'train':` ('==', "'train'"), the else branch
    flipped; None if no such branch holds it."""
    parameters = {a.arg for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs}
    node = read
    while node in script.parent and node is not function:
        branch, node = node, script.parent[node]
        if isinstance(node, (ast.If, ast.IfExp)) and branch is not node.test:
            switch = _parameter_test(node.test, parameters)
            if switch is not None:
                parameter, test, value = switch
                in_else = branch in node.orelse if isinstance(node, ast.If) else branch is node.orelse
                return parameter, _FLIPPED[test] if in_else else test, value
    return None


def _parameter_test(test: ast.AST, parameters: set[str]) -> tuple[str, str, str] | None:
    """`p`, `not p`, `p == 'train'`, `p != Split.TEST` for a parameter p: (p, test, the constant's code)."""
    if isinstance(test, ast.Name) and test.id in parameters:
        return test.id, "true", ""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _parameter_test(test.operand, parameters)
        return (inner[0], _FLIPPED[inner[1]], inner[2]) if inner is not None else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
        sides = [test.left, test.comparators[0]]
        named = [n.id for n in sides if isinstance(n, ast.Name) and n.id in parameters]
        constant = [n for n in sides if isinstance(n, (ast.Constant, ast.Attribute))]
        if len(named) == 1 and len(constant) == 1:
            return named[0], "==" if isinstance(test.ops[0], ast.Eq) else "!=", ast.unparse(constant[0])
    return None


def _pmapping_functions(script: Script) -> set[str]:
    """Its functions that pmap a function they are handed (`def dist(f): return jax.pmap(f, ...)`, or a partial of
    it), or return a pmap of a step of their own (`def train_step_pmap(tx, loss_fn): ... return jax.pmap(step)`), and
    the classes whose methods pmap a function the object holds (`jax.pmap(self.training_step, **self.pmap_kwargs)`);
    a loader that pmaps a lambda of its own to place its rows is not one."""
    steps = _pmap_calls(script)
    return {f.name for call in script.pmaps() for f in script.enclosing_defs(call)
            if call.args and _runs_a_parameter(call.args[0], {a.arg for a in f.args.args})} | {
        f.name for f in ast.walk(script.tree) if isinstance(f, ast.FunctionDef) and any(
            isinstance(r, ast.Return) and r.value is not None and script.value(r.value) in steps for r in ast.walk(f))} | {
        c.name for c in ast.walk(script.tree) if isinstance(c, ast.ClassDef) and any(
            call.args and _handed_to_the_object(call.args[0], c) for call in script.pmaps()
            if any(f in c.body for f in script.enclosing_defs(call)))}


def _handed_to_the_object(node: ast.AST, cls: ast.ClassDef) -> bool:
    """`self.training_step` where the class defines no such method: a function the object was handed."""
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" \
        and not any(isinstance(f, ast.FunctionDef) and f.name == node.attr for f in cls.body)


def _runs_a_parameter(mapped: ast.AST, parameters: set[str]) -> bool:
    """What pmap is handed is one of the function's parameters, a partial of one, or a lambda calling one; not a
    lambda of its own that only reads one (`lambda k: jax.random.split(k, num=data.shape[1])`)."""
    if isinstance(mapped, ast.Name):
        return mapped.id in parameters - {"self", "cls"}  # `self.step`: what the object was handed (_pmapping_classes)
    if isinstance(mapped, ast.Lambda):
        return any(isinstance(c, ast.Call) and _runs_a_parameter(c.func, parameters) for c in ast.walk(mapped.body))
    return isinstance(mapped, ast.Call) and any(_runs_a_parameter(a, parameters) for a in mapped.args)


def _mapped_first_copies(script: Script) -> set[tuple[str, str]]:
    """A module's names for device 0's copy: `instance = functools.partial(jax.tree_util.tree_map, lambda x: x[0])`,
    and a function that returns a tree map of a function it names whose body takes [0] of its leaf (`def fetch(x):
    def first(leaf): return leaf[0]` ... `return jax.tree_util.tree_map(first, x)`)."""
    found = set()
    for node in getattr(script.tree, "body", []):
        value = node.value if isinstance(node, ast.Assign) else None
        mapped = value.args[1] if isinstance(value, ast.Call) and len(value.args) == 2 else None
        if isinstance(mapped, ast.Lambda) and is_name(script.name(value.func), "functools.partial") \
                and script.name(value.args[0]).endswith(("tree_map", "tree.map")) \
                and any(first_copy(n, {a.arg for a in mapped.args.args}) for n in ast.walk(mapped.body)):
            found |= {(t.id, "unreplicate") for t in node.targets if isinstance(t, ast.Name)}
    return found | {(f.name, "unreplicate") for f in ast.walk(script.tree)
                    if isinstance(f, ast.FunctionDef) and any(_maps_a_first_copy(script, f, r) for r in _own_returns(f))}


def _maps_a_first_copy(script: Script, function: ast.FunctionDef, returned: ast.AST) -> bool:
    """A tree map of a function (one nested in `function` first) whose body takes device 0's copy of its leaf, also
    fetched to the host after (`metrics = tree_map(lambda x: x[0], metrics); return jax.device_get(metrics)`)."""
    for _ in range(4):
        returned = script.value(returned)
        if not (isinstance(returned, ast.Call) and returned.args and is_name(script.name(returned.func), *_FETCHES)):
            break
        returned = returned.args[0]
    if not (isinstance(returned, ast.Call) and script.is_tree_map(returned) and returned.args):
        return False
    named = returned.args[0].id if isinstance(returned.args[0], ast.Name) else None
    mapped = next((d for d in ast.walk(function) if isinstance(d, ast.FunctionDef) and d is not function
                   and d.name == named), None) or mapped_function(script, returned)
    params = {a.arg for a in mapped.args.args} if mapped is not None else set()
    body = [mapped.body] if isinstance(mapped, ast.Lambda) else getattr(mapped, "body", [])
    return any(first_copy(n, params) for part in body for n in ast.walk(part))


def _own_returns(function: ast.FunctionDef) -> list[ast.AST]:
    """What a function's own return statements return, those of its nested functions left out."""
    return [node.value for node in own_nodes(function) if isinstance(node, ast.Return) and node.value is not None]
