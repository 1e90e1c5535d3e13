"""Hand-rolled checkpoints of a pmap-era script: the model state pickled (pickle, dill, cloudpickle, joblib), written
as msgpack bytes (`flax.serialization.to_bytes`), as npz files of its leaves (`np.savez`, `jnp.savez`), through objax's
`io.Checkpoint` or `save_var_collection`, and read back, or the same done by a function of the script or of its
project (`save_checkpoint(...)`, `checkpoint_utils.maybe_load_checkpoint(...)`, a checkpointer class's `cp.save()`)
whose body does one of those.

Each writes one host's copy of the state (device 0's, or pmap's stack of copies) to a file, on every host into the
same path or on process 0 only; after the port the state is global arrays, which a pickle of one host's copy cannot
hold when they are split over the hosts. What is saved is judged model state by its names (state, params, opt, ema,
snapshot ...), the file's name (ckpt, checkpoint) or the function it is in (save_checkpoint): a pickle of metrics,
a config or a dataset is not said.
"""
from __future__ import annotations

import ast
import re
from typing import Iterator

from helpers.migrate.bindings import assigned_attribute, reaches
from helpers.migrate.bodies import pmap_era
from helpers.migrate.host_zero import process_zero_nodes
from helpers.migrate.process_zero_rules import is_checkpoint_save
from helpers.migrate.script import Script, code_of, is_name

LESSONS: dict[str, tuple[str, str]] = {}  # flax-checkpoints and process-zero-save: their families name the sections

_PICKLERS = ("pickle", "dill", "cloudpickle", "joblib")
_WRITES = {*(f"{p}.{f}" for p in _PICKLERS for f in ("dump", "dumps")), "flax.serialization.to_bytes",
           "flax.serialization.msgpack_serialize", "numpy.save", "numpy.savez", "numpy.savez_compressed",
           "jax.numpy.save", "jax.numpy.savez", "objax.io.save_var_collection",
           "flax.training.checkpoints.save_checkpoint", "flax.training.checkpoints.save_checkpoint_multiprocess"}
_READS = {*(f"{p}.{f}" for p in _PICKLERS for f in ("load", "loads")), "flax.serialization.from_bytes",
          "flax.serialization.msgpack_restore", "numpy.load", "jax.numpy.load", "objax.io.load_var_collection",
          "flax.training.checkpoints.restore_checkpoint"}
_OLD_API = "flax.training.checkpoints."  # said where it is called by flax_rules; here only read in a helper's body
_OBJAX_CHECKPOINT = "objax.io.Checkpoint"
_LIBRARIES = ("jax.", "flax.", "numpy.", "orbax", "objax.", "optax.", "haiku.", "torch.", "tensorflow.", "os.",
              "pickle.", "dill.", "json.", "self.", "clu.", "jaxline.", "t5x.", "etils.", "transformers.")
_STATE = {"state", "states", "params", "param", "parameters", "vars", "variables", "model", "models", "opt",
          "optimizer", "ema", "snapshot", "ckpt", "checkpoint", "checkpoints", "trainer", "network"}
_NOT_STATE = {"metrics", "metric", "config", "cfg", "args", "flags", "hparams", "dataset", "datasets", "history",
              "logs", "log", "results", "summary", "summaries", "samples", "images", "predictions", "preds", "vocab",
              "tokenizer", "losses", "scores"}
_CHECKPOINT = {"checkpoint", "checkpoints", "ckpt", "snapshot", "checkpointer"}
_VERBS = {"save", "load", "restore", "write", "dump", "read"}
_RESTORES = {"load", "restore", "read"}
_ADVICE = ("an orbax.checkpoint.CheckpointManager called on every host: a save of global arrays runs on every process "
           "(each writes its own shards, process 0 the metadata), and a restore takes the target shardings; a pickle "
           "of one host's copy cannot hold arrays split over the hosts")


def _words(node: ast.AST | None) -> set[str]:
    """The lower-case words of the names, attributes and strings an expression spells (`opt_state` -> opt, state)."""
    found = set()
    for n in ast.walk(node) if node is not None else ():
        text = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else n.arg \
            if isinstance(n, ast.keyword) and n.arg else n.value if isinstance(n, ast.Constant) \
            and isinstance(n.value, str) else ""
        found |= _split(text)
    return found


def _split(name: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", name)}


def named_for_checkpoints(name: str) -> bool:
    """`save_checkpoint`, `maybe_load_checkpoint`, `restore_ckpt`, `save_state`, `load_params`, a class `Checkpoint`."""
    said = _split(name)
    return bool(said & _CHECKPOINT) or bool(said & _VERBS and said & _STATE)


def sink(s: Script, call: ast.Call) -> str | None:
    """'save' or 'restore' for a call that writes or reads a file of arrays (a pickle, msgpack bytes, npz, objax's
    var collection, Flax's old checkpoints, a method of an objax `io.Checkpoint`), else None."""
    name = s.name(call.func)
    if name in _WRITES:
        return "save"
    if name in _READS:
        return "restore"
    if isinstance(call.func, ast.Attribute) and call.func.attr in ("save", "restore") and _made_by(
            s, call.func.value, lambda made: made == _OBJAX_CHECKPOINT):
        return call.func.attr
    return None


def _made_by(s: Script, held: ast.AST, test) -> bool:
    """A name (or a `self.` attribute) bound to a call of a class `test` accepts by its dotted name."""
    made = s.value(held) if isinstance(held, ast.Name) else assigned_attribute(s, held)
    return isinstance(made, ast.Call) and test(s.name(made.func))


def _saved(s: Script, call: ast.Call) -> list[ast.AST]:
    """What a sink writes (`dump(x, f)`: x; `savez(file, *leaves)`: the leaves) or the names its read is bound to."""
    name = s.name(call.func)
    if sink(s, call) == "save":
        first = 0 if name.rsplit(".", 1)[-1] in ("dump", "dumps", "to_bytes", "msgpack_serialize", "save") \
            and not name.startswith(("numpy.", "jax.numpy.")) else 1
        return [*call.args[first:], *(k.value for k in call.keywords)]
    holder = s.parent.get(call)
    while holder is not None and not isinstance(holder, (ast.stmt, ast.Lambda)):
        holder = s.parent.get(holder)
    targets = holder.targets if isinstance(holder, ast.Assign) else []
    return [*targets, *call.args[:1]] if name.endswith("from_bytes") else targets


def _file(s: Script, call: ast.Call) -> list[ast.AST]:
    """The file a sink writes or reads as the script spells it: its arguments, and what the handles among them (or
    `f` of `f.write(to_bytes(x))`) were opened on in a `with open(path) as f:`, through a name bound to the path."""
    handles = {n.id for n in ast.walk(call) if isinstance(n, ast.Name)}
    holder = s.parent.get(call)
    if isinstance(holder, ast.Call) and isinstance(holder.func, ast.Attribute) \
            and isinstance(holder.func.value, ast.Name):
        handles.add(holder.func.value.id)  # f.write(to_bytes(state))
    opened: list[ast.AST] = []
    node = call
    while node in s.parent:
        node = s.parent[node]
        if isinstance(node, (ast.With, ast.AsyncWith)):
            opened += [item.context_expr for item in node.items if isinstance(item.optional_vars, ast.Name)
                       and item.optional_vars.id in handles]
    paths = [*call.args, *opened]
    return paths + [s.value(n) for p in opened for n in ast.walk(p) if isinstance(n, ast.Name)]


def _in_checkpoint_function(s: Script, node: ast.AST) -> bool:
    """The node is in a function (or a class) named for checkpoints."""
    while node in s.parent:
        node = s.parent[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and named_for_checkpoints(node.name):
            return True
    return False


def saves_model_state(s: Script, call: ast.Call, module: str = "") -> bool:
    """A sink whose file holds model state: in a function named for checkpoints (or a module: `checkpoint.py`),
    or, when what it saves says nothing against it (metrics, a config), what it saves is named for state (params,
    opt_state) or its file is (`ckpt_path`, 'checkpoint.dill')."""
    if _in_checkpoint_function(s, call) or named_for_checkpoints(module):
        return True
    saved = set().union(*(_words(n) for n in _saved(s, call)))
    if saved & _NOT_STATE:
        return False
    return bool(saved & _STATE) or bool(set().union(*(_words(n) for n in _file(s, call))) & (_STATE | _CHECKPOINT))


def checkpointers(s: Script, module: str = "") -> set[str]:
    """The functions and classes of a file that save or restore model state: one named for checkpoints (or in a
    module named so) whose own body calls a sink or another of them (`maybe_load_checkpoint` calling
    `load_checkpoint`), or any whose body saves what it is handed, or returns what it read, through a sink of model
    state; a class with such a method (`Checkpoint`, whose `save` pickles)."""
    definitions = [n for n in ast.walk(s.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    found: set[str] = set()
    for _ in range(3):  # a checkpointer calling another, a few deep
        for function in definitions:
            named = named_for_checkpoints(function.name) or named_for_checkpoints(module)
            if any(sink(s, c) and (named or _passes_through(s, function, c) and saves_model_state(s, c, module))
                   or named and _short(c.func) in found for c in _own_calls(s, function)):
                found.add(function.name)
    classes = {owner.name for owner in ast.walk(s.tree) if isinstance(owner, ast.ClassDef)
               and any(isinstance(m, ast.FunctionDef) and m.name in found for m in owner.body)}
    return found | classes


def _own_calls(s: Script, function: ast.AST) -> list[ast.Call]:
    """The calls of a function's own body, not of the functions defined in it."""
    return [c for c in ast.walk(function) if isinstance(c, ast.Call) and next(s.enclosing_defs(c), None) is function]


def _passes_through(s: Script, function: ast.AST, call: ast.Call) -> bool:
    """The sink saves one of the function's parameters, or what it reads is returned: the function is a save or a
    restore, not a long function that checkpoints on the way (`main`)."""
    params = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)} - {"self"}
    if sink(s, call) == "save":
        return any(isinstance(n, ast.Name) and n.id in params for a in _saved(s, call) for n in ast.walk(a))
    read = {n.id for a in _saved(s, call) for n in ast.walk(a) if isinstance(n, ast.Name)}
    returned = [n for r in ast.walk(function) if isinstance(r, ast.Return) and r.value is not None
                for n in ast.walk(r.value)]
    return any(n is call or isinstance(n, ast.Name) and n.id in read for n in returned)


def _short(func: ast.AST) -> str:
    """`save` of `save(...)`, `utils.save(...)` and `self.save(...)`."""
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _helper(s: Script, node: ast.AST, own: set[str]) -> str | None:
    """'save' or 'restore' for a call (or a reference handed on: `pool.apply_async(utils.save_checkpoint, ...)`) of a
    checkpointer of the script or of its project, or a save or restore method of an instance of one; else None."""
    func = node.func if isinstance(node, ast.Call) else node
    short = _short(func)
    name = s.name(func)
    project = set(s.folder.checkpointers)
    if short[:1].isupper() or isinstance(func, ast.Name) and any(
            isinstance(c, ast.ClassDef) and c.name == short for c in ast.walk(s.tree)):
        return None  # a checkpointer class made: said where its save or restore is called
    if isinstance(func, ast.Name) and short in own:
        found = True
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        found = short in own
    elif isinstance(func, ast.Attribute) and _split(short) & _VERBS and _made_by(
            s, func.value, lambda made: made.rsplit(".", 1)[-1] in own | project and not made.startswith(_LIBRARIES)):
        found = True  # cp.save() with cp = Checkpoint(...)
    else:
        root = func
        while isinstance(root, ast.Attribute):
            root = root.value
        found = short in project and isinstance(root, ast.Name) and root.id in _imported(s) \
            and not name.startswith(_LIBRARIES)
    if not found:
        return None
    return "restore" if _split(short) & _RESTORES else "save"


def _imported(s: Script) -> set[str]:
    """The names the script's imports bind, relative ones too (`from . import checkpoints`)."""
    return {a.asname or a.name.split(".")[0] for n in ast.walk(s.tree) if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names}


def _handed(s: Script, node: ast.AST) -> list[ast.AST]:
    """What a checkpointer is handed: a call's arguments; for a method of an instance (`cp.save()`), also what its
    function hands that instance's other methods and its maker (`cp = Checkpoint(d); cp.set_model(state)`)."""
    if not isinstance(node, ast.Call):  # handed on: `pool.apply_async(save, (state, path))`, its fellow arguments
        holder = s.parent.get(node)
        return [a for a in getattr(holder, "args", []) if a is not node]
    handed = [*node.args, *(k.value for k in node.keywords)]
    owner = node.func.value if isinstance(node.func, ast.Attribute) else None
    if isinstance(owner, ast.Name) and owner.id != "self":
        scope = s.scope(node)
        handed += [a for c in ast.walk(scope) if isinstance(c, ast.Call) and s.scope(c) is scope and (
            isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name) and c.func.value.id == owner.id
            or c is s.value(owner)) for a in [*c.args, *(k.value for k in c.keywords)]]
    return handed


def _host_copy(s: Script, expr: ast.AST, depth: int = 3) -> bool:
    """One host's copy of the state: device 0's (`unreplicate`, `x[0]`, a project helper doing that), or one read to
    the host (`jax.device_get`), also through the names that hold it."""
    return reaches(s, expr, lambda n: isinstance(n, ast.Call) and (
        is_name(s.name(n.func), "flax.jax_utils.unreplicate", "jax.device_get") or s.copy_zero_by_hand(n)),
        depth) is not None


def _stack(s: Script, expr: ast.AST, depth: int = 3) -> bool:
    """pmap's stack of copies: what a pmapped step or a replicate gave the names an expression reads, where it reads
    them (their last binding before it in its function, a tuple target's too)."""
    pmapped = s.pmapped_call_test()
    for n in ast.walk(expr):
        if isinstance(n, ast.Call) and (pmapped(n) or s.replicates(n) or s.stacks_copies(n)
                                        or s.copy_helper(n) == "replicate"):
            return True
        bound = _last_binding(s, n) if isinstance(n, ast.Name) and depth else None
        if bound is not None and _stack(s, bound, depth - 1):
            return True
    return False


def _last_binding(s: Script, name: ast.Name) -> ast.AST | None:
    """The value last assigned to a name before it is read, in the function (or module) it is read in, leaving out
    an assignment in another branch of an if (`if use_pjit: ... else: state = p_step(...)`)."""
    scope = s.scope(name)
    bound = [a for a in ast.walk(scope) if isinstance(a, ast.Assign) and s.scope(a) is scope
             and (a.end_lineno, a.end_col_offset) <= (name.lineno, name.col_offset) and _same_branch(s, a, name)
             and any(isinstance(t, ast.Name) and t.id == name.id for target in a.targets for t in ast.walk(target))]
    return max(bound, key=lambda a: (a.lineno, a.col_offset)).value if bound else None


def _same_branch(s: Script, assign: ast.AST, read: ast.AST) -> bool:
    """Each if around the assignment has the read in the same branch (body or else), or not inside it at all."""
    read_path = {}
    node = read
    while node in s.parent:
        read_path[s.parent[node]] = node
        node = s.parent[node]
    node = assign
    while node in s.parent:
        holder = s.parent[node]
        if isinstance(holder, ast.If) and holder in read_path and (node in holder.body) != (
                read_path[holder] in holder.body):
            return False
        node = holder
    return True


def _uses(s: Script, own: set[str]) -> Iterator[tuple[ast.AST, str, str]]:
    """(node, 'save' or 'restore', where it is written: 'here', 'own' or 'project') for each sink of model state the
    script calls (not Flax's old API, said where it is called; not pmap's whole stack, which jax_rules say is one
    copy per device) and each call or hand-on of a checkpointer of the script or of its project."""
    for call in s.calls:
        kind = sink(s, call)
        if kind and not s.name(call.func).startswith(_OLD_API) and saves_model_state(s, call) \
                and not (kind == "save" and any(isinstance(a, ast.Name) and _stack(s, a) for a in _saved(s, call))):
            yield call, kind, "here"
        elif (kind := _helper(s, call, own)) is not None:
            yield call, kind, _origin(s, call, own)
    for call in s.calls:
        for handed in [*call.args, *(k.value for k in call.keywords)]:
            if isinstance(handed, (ast.Name, ast.Attribute)) and (kind := _helper(s, handed, own)) is not None:
                yield handed, kind, _origin(s, handed, own)


def _origin(s: Script, node: ast.AST, own: set[str]) -> str:
    func = node.func if isinstance(node, ast.Call) else node
    return "own" if _short(func) in own and (isinstance(func, ast.Name) or code_of(func).startswith("self.")) \
        else "project"


def _saved_on_zero(s: Script, own: set[str]) -> set[str]:
    """The script's checkpointers whose every sink runs on process 0 only (`if jax.process_index() == 0:` in the
    body): said there, in the body, not at each call."""
    on_zero = process_zero_nodes(s)
    found = set()
    for function in (n for n in ast.walk(s.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        sinks = [c for c in _own_calls(s, function) if sink(s, c)]
        if function.name in own and sinks and all(c in on_zero for c in sinks):
            found.add(function.name)
    return found


def hand_rolled_checkpoints(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """In a pmap-era script, a save or restore of model state through a hand-rolled sink or a checkpointer:
    flax-checkpoints where every host restores one, or saves pmap's copies (or one host's), and where process 0
    writes one itself or hands a project's checkpointer its copy; process-zero-save where a save runs on process 0
    only (unless process_zero_rules says it already)."""
    if not (pmap_era(s) or any(s.replicates(c) for c in s.calls)):
        return
    own = checkpointers(s)
    own -= _saved_on_zero(s, own)
    on_zero = process_zero_nodes(s)
    for node, kind, origin in _uses(s, own):
        what = code_of(node.func if isinstance(node, ast.Call) else node)
        handed = _handed(s, node)
        copies = any(isinstance(a, ast.Name) and _stack(s, a) or _host_copy(s, a) for a in handed)
        if node in on_zero:  # the script's own save there: process-zero-save alone, its body says the rest
            said = origin == "here" or origin == "project" and copies
        else:
            said = origin == "here" or kind == "restore" or copies
        if said:
            tests_the_host = origin == "project" and what.rsplit(".", 1)[-1] in s.folder.host_aware
            where = "" if node in on_zero else (" (its body, in the project, tests the process index)" if
                                                tests_the_host else ", on every host into the same path")
            yield (node, "flax-checkpoints",
                   f"{what}(...) {'writes' if kind == 'save' else 'reads'} a hand-rolled checkpoint of one host's "
                   "copy of the state (a pickle, msgpack bytes or npz of pmap's copies, or of device 0's)" + where,
                   _ADVICE)
        if node in on_zero and kind == "save" and not (isinstance(node, ast.Call) and is_checkpoint_save(s, node)):
            yield (node, "process-zero-save",
                   f"{what}(...) saves the state on process 0 only: a checkpoint of global arrays is saved by every "
                   "process (each writes its own shards), so process 0 waits for hosts that never call it",
                   "call the save on every host; Orbax lets process 0 write the shared metadata")


def objax_checkpoints_out_of_view(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`objax.io.Checkpoint(...)` made here and handed on (its saves and restores out of view): said where it is
    made."""
    if not pmap_era(s):
        return
    for call in s.calls:
        if s.name(call.func) != _OBJAX_CHECKPOINT:
            continue
        holder = s.parent.get(call)
        names = {t.id for t in getattr(holder, "targets", []) if isinstance(t, ast.Name)}
        if not any(isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name)
                   and c.func.value.id in names and c.func.attr in ("save", "restore") for c in s.calls):
            yield (call, "flax-checkpoints",
                   "objax.io.Checkpoint keeps npz files of this host's copy of the variables, saved and restored by "
                   "the code it is handed to", _ADVICE)


RULES = (hand_rolled_checkpoints, objax_checkpoints_out_of_view)
