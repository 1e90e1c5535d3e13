"""The rule for batches a project's own loader stacks per local device: a loader of the script's project (named for
data, imported from the project or a star import of it) whose batches reach a pmapped function as they come, and
`[0]` of such a batch (device 0's slice). After the port a batch has no device axis.
"""
from __future__ import annotations

import ast
import re
import sys
from typing import Iterator

from helpers.migrate.bindings import arguments_for, bound_value, device_count_of
from helpers.migrate.data_rules import pmap_era, splits_by_host
from helpers.migrate.feeds import fed_to_pmap
from helpers.migrate.script import MESH_AXES, Script, code_of, is_name, keyword

LESSONS: dict[str, tuple[str, str]] = {}  # local-batch: jax_rules'


_LIBRARIES = frozenset({"jax", "jaxlib", "flax", "numpy", "tensorflow", "tensorflow_datasets", "torch", "datasets",
                        "transformers", "grain", "optax", "orbax", "haiku", "chex", "clu", "ml_collections", "absl",
                        "tqdm", "einops", "equinox", "pandas", "wandb"}) | frozenset(sys.stdlib_module_names)
_DATA_WORDS = re.compile(r"data|batch|load|iter|pipeline|preprocess|input|stream|sampler", re.I)


_DATASET_WORDS = re.compile(_DATA_WORDS.pattern + r"|(?<![a-z])ds(?![a-z])|dataset|generator|reader", re.I)


def project_call(s: Script, call: ast.Call) -> bool:
    """A call into the project's own library named for data, or for a dataset (`create_emilia_ds(...)`,
    `DataGenerator(...)`): where a batch each host reads is made."""
    return _project_loader(s, call, _DATASET_WORDS)


def _project_loader(s: Script, call: ast.Call, words: re.Pattern = _DATA_WORDS) -> bool:
    """A call into the project's own library (`Preprocessor(...)`, `dataset.create_dataset(config, rng)`) named
    for data: an imported name whose module is neither jax's nor a known library's."""
    root = call.func
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name) or not words.search(code_of(call.func)):
        return False
    if root.id not in s.names.alias:
        return _from_a_project_star(s, root)
    module = s.names.alias[root.id]
    top = module.split(".")[0]
    entry = s.name(call.func)[len(top) + 1:].split(".")[0]
    return top not in _LIBRARIES or top in _SHADOWED and entry not in _SHADOWED[top]


def _from_a_project_star(s: Script, name: ast.Name) -> bool:
    """A name the script never binds nor imports by name, in a script that imports * from a module of its project
    (`from train_utils import *`): that module's."""
    stars = [n.module for n in ast.walk(s.tree) if isinstance(n, ast.ImportFrom) and n.module
             and any(a.name == "*" for a in n.names)]
    return any(m.split(".")[0] not in _LIBRARIES for m in stars) and name.id not in s.defined \
        and name.id not in s.assigned and bound_value(s, name) is None


# a library's name that projects give their own data module too (a research repository's datasets.py): a call of it
# that is none of the library's entry points is the project's
_SHADOWED = {"datasets": frozenset({"load_dataset", "load_from_disk", "load_dataset_builder", "Dataset", "DatasetDict",
                                    "IterableDataset", "IterableDatasetDict", "concatenate_datasets",
                                    "interleave_datasets"})}


_AS_IS = ("next", "iter", "tqdm", "jax.numpy.asarray", "numpy.asarray", "jax.numpy.array")
_AS_IS_METHODS = ("next", "__next__", "numpy", "_numpy", "as_numpy_iterator")  # `next(it)._numpy()`: the same axes


def _loader_of(s: Script, batch: ast.AST, depth: int = 0) -> ast.Call | None:
    """The project loader call a value comes from as it is, no reshape or shard on the way: `next(it)`,
    `it.next()`, `.numpy()`, a loop over it, `jnp.asarray` or a tree map of it, an item (`batch.src`, `batch["x"]`),
    a parameter of the script's function the callers hand it to."""
    if depth > 10:
        return None
    if isinstance(batch, ast.Call):
        if _project_loader(s, batch):
            return batch
        name = s.name(batch.func)
        if is_name(name, *_AS_IS) and batch.args:
            return _loader_of(s, batch.args[0], depth + 1)
        if s.is_tree_map(batch) and len(batch.args) == 2 and _keeps_the_shape(s, batch.args[0]):
            return _loader_of(s, batch.args[1], depth + 1)
        if isinstance(batch.func, ast.Attribute) and batch.func.attr in _AS_IS_METHODS and not batch.args:
            return _loader_of(s, batch.func.value, depth + 1)
        return None
    if isinstance(batch, (ast.Name, ast.Attribute)):
        bound = bound_value(s, batch)
        if bound is not None:
            return _loader_of(s, bound, depth + 1)
        if isinstance(batch, ast.Name):
            return next(filter(None, (_loader_of(s, a, depth + 1) for a in arguments_for(s, batch))), None)
    if isinstance(batch, ast.Attribute) or isinstance(batch, ast.Subscript) and isinstance(batch.slice, ast.Constant) \
            and isinstance(batch.slice.value, str):
        return _loader_of(s, batch.value, depth + 1)
    return None


def _keeps_the_shape(s: Script, function: ast.AST) -> bool:
    """`jnp.asarray`, or a lambda that neither reshapes, indexes, stacks nor shards its leaf (`lambda x:
    scaler(x._numpy())`): what a tree map of it gives has the loader's axes."""
    if not isinstance(function, ast.Lambda):
        return is_name(s.name(function), *_AS_IS)
    return not any(isinstance(n, ast.Subscript) or isinstance(n, ast.Attribute) and n.attr == "reshape"
                   or isinstance(n, ast.Call) and re.search(r"shard|stack|split|concat", s.name(n.func).lower())
                   for n in ast.walk(function.body))


def project_stacked_batches(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """A project library's loader whose batches go to pmap as they come: the library stacked them per local
    device; and `[0]` of such a batch, device 0's slice."""
    if any(module.split(".")[0] == "objax" for module in s.names.alias.values()):
        return  # objax.Parallel splits the batch it is handed over the local devices itself: no stack comes in
    stacked = {}
    for argument in fed_to_pmap(s):
        for source in _each_caller_s(s, argument):
            loader = _loader_of(s, source)
            if loader is not None and (handed_loaded_rows(s, loader) is None or _prefetches(s, loader)):
                stacked.setdefault(loader, argument)  # a transform of loaded rows that prefetches them stacks too
    read_stackers = s.folder.stackers | {function for function, _ in s.folder.count_stackers}
    for loader, argument in stacked.items():
        if _prefetches(s, loader):
            yield (loader, "flax-prefetch",
                   f"{code_of(loader.func)}(...) (in the project) stacks this host's batches per local device and "
                   "prefetches them onto the local devices (flax's prefetch_to_device), pmap's stacks",
                   _PREFETCH_INSTEAD)
        elif code_of(loader.func).rsplit(".", 1)[-1] in read_stackers:
            continue  # read to its body: batch_rules.project_stacking_helper says how it stacks
        elif not per_device_sizes(s, loader):  # said where the size is: per_device_size_to_a_loader
            yield (loader, "local-batch",
                   f"{code_of(loader.func)}(...) builds this host's batches stacked per local device (its "
                   f"{code_of(argument)} goes to pmap as it comes, so the library made pmap's leading axis)",
                   _UNSTACKED)
    for node in ast.walk(s.tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == 0 \
                and _loader_of(s, node.value) in stacked and not _only_counted(s, node):
            yield (node, "local-batch",
                   f"{code_of(node)} takes device 0's slice of a batch the project's loader stacks per local device",
                   "after the port a batch has no device axis: take the rows you need (batch[:n]), or the batch itself")


_PREFETCH_INSTEAD = ("have the loader give this host's rows unstacked and make each batch global with "
                     f"jax.make_array_from_process_local_data(NamedSharding(mesh, P({MESH_AXES})), rows); to overlap "
                     "input with steps, prefetch in a thread or with your loader (Grain's prefetch)")
_UNSTACKED = ("have the loader give this host's rows unstacked (global_batch // jax.process_count() of them) and pass "
              "them to jax.make_array_from_process_local_data(NamedSharding(mesh, P(('host', 'device'))), rows)")
# a loader's keyword for the rows of one device or one host (`per_device_batch_size=`, `device_batch_size=`,
# `batch_size_per_device_per_step=`, `process_batch_size=`, `local_batch_size_eval=`): the convention of input
# pipelines written for pmap, which batch that many rows and then stack one batch per local device
_PER_DEVICE_WORDS = frozenset({"device", "devices", "local", "process", "replica"})


def _sizes_per_device(keyword: str) -> bool:
    words = set(keyword.lower().split("_"))
    return any(w.startswith("batch") for w in words) and bool(words & _PER_DEVICE_WORDS) \
        and not words & {"global", "total"}


def per_device_sizes(s: Script, call: ast.Call) -> list[ast.keyword]:
    """The keywords of a project's or the script's own data call (`data.build_input(...)`,
    `partial(self._build_eval_input, ...)`) that size its batches per device or per host, with anything but a count
    of devices (device_count_handed_to_a_loader's)."""
    function = call.args[0] if is_name(s.name(call.func), "functools.partial") and call.args else call.func
    short = code_of(function).rsplit(".", 1)[-1]
    counts = set(short.lower().split("_")) & {"num", "count", "steps", "size", "len"}
    own = short in s.defined and _DATASET_WORDS.search(short)
    if counts or not (own or _project_loader(s, ast.Call(function, [], []), _DATASET_WORDS)):
        return []
    sized = [k for k in call.keywords if k.arg and _sizes_per_device(k.arg) and device_count_of(s, k.value) is None]
    return sized if sized and not _stacked_after(s, call) else []


def _stacked_after(s: Script, loader: ast.Call) -> bool:
    """The script stacks the loader's batches itself (`step(params, shard(batch.tokens))`): the loader does not."""
    return any(isinstance(c.func, (ast.Name, ast.Attribute)) and c.args
               and re.search(r"shard|split|stack", code_of(c.func).rsplit(".", 1)[-1], re.I)
               and _loader_of(s, c.args[0]) is loader for c in s.calls)


def per_device_size_to_a_loader(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`build_train_input(..., batch_size_per_device_per_step=b)` in a pmap-era script: a loader told the rows of
    one device (or one host) and stacks one batch per local device, the leading axis pmap strips."""
    if not pmap_era(s):
        return
    for call in s.calls:
        for k in per_device_sizes(s, call):
            yield (k.value, "local-batch",
                   f"{code_of(call.func)}(..., {k.arg}={code_of(k.value)}): {k.arg}= sizes them per "
                   f"{'device' if 'device' in k.arg.lower() else 'host'}, and a pmap-era loader batches that many "
                   "rows and stacks them one batch per local device, the leading axis pmap strips", _UNSTACKED)


def batch_dims_per_device(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`batch_dims = [jax.local_device_count(), per_device]` in a script that pmaps: the dimensions a loader is told
    to batch by, one batch per local device stacked (a call's own shape argument is jax_rules'); by
    `jax.device_count()`, one batch for every device of every host, which each host loads."""
    if not s.pmaps_here():
        return
    for node in ast.walk(s.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple)) \
                and len(node.value.elts) > 1 and any("batch" in code_of(t).lower() for t in node.targets):
            count = node.value.elts[0]
            counted = device_count_of(s, count)
            if counted == "local":
                yield (count, "local-batch",
                       f"{code_of(node.value)} batches by {code_of(count)} first: one batch per local device stacked, "
                       "the leading axis pmap strips", _UNSTACKED)
            elif counted == "every":
                yield (count, "local-batch",
                       f"{code_of(node.value)} batches by {code_of(count)} first: a stack with a batch for each "
                       "device, the leading axis pmap strips (one that must equal this host's device count)",
                       _UNSTACKED)
                yield (count, "global-batch-per-host",
                       f"{code_of(node.value)} counts every host's devices ({code_of(count)}): each host's loader "
                       "makes the batches of all of them, the whole global batch on every host",
                       "each host loads its part: global_batch // jax.process_count() rows, and "
                       "jax.make_array_from_process_local_data assembles the global batch")


def unsampled_data_loader(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`DataLoader(train_set, batch_size=b, ...)` (torch's, a class of that name, or the project's subclass of it:
    `NumpyLoader`) in a pmap-era script, with no sampler and nothing on its path reading the process index: every
    host loads batches of the whole dataset, its own copy of every row (said at its batch_size, else at the dataset
    it is handed)."""
    if not pmap_era(s):
        return
    for call in s.calls:
        short = s.name(call.func).rsplit(".", 1)[-1]
        if (short.endswith("DataLoader") or short in s.folder.torch_loaders) and call.args \
                and not any(k.arg in ("sampler", "batch_sampler") for k in call.keywords) \
                and not splits_by_host(s, call):
            size = keyword(call, "batch_size")
            yield (size if size is not None else call.args[0], "global-batch-per-host",
                   f"{code_of(call.func)}({code_of(call.args[0])}, ...) has no sampler, and nothing on its path reads "
                   "jax.process_index(): every host loads batches of the whole dataset (the same rows on each)",
                   "give each host its part: a DistributedSampler(dataset, num_replicas=jax.process_count(), "
                   "rank=jax.process_index()) with batch_size = global_batch // jax.process_count(), and "
                   "jax.make_array_from_process_local_data to assemble the global batch")


def _each_caller_s(s: Script, argument: ast.AST) -> list[ast.AST]:
    """A parameter of the script's function fed to pmap: what each of its callers hands it (`accuracy(params,
    train_x, ...)` and `accuracy(params, valid_x, ...)`), each a batch of its own; anything else as it is."""
    if isinstance(argument, ast.Name) and bound_value(s, argument) is None:
        return list(arguments_for(s, argument)) or [argument]
    return [argument]


def _prefetches(s: Script, loader: ast.Call) -> bool:
    """A call of a project function that puts its batches on the local devices (`prefetch_to_device`)."""
    return code_of(loader.func).rsplit(".", 1)[-1] in s.folder.prefetchers


def handed_loaded_rows(s: Script, call: ast.Call) -> ast.Call | None:
    """`data.augment_batches(train_x)` where train_x comes as it is from another of the project's loaders
    (`train_x, train_y = data.load_shard(...)`): a transform of rows loaded already, not a loader; the loader it is
    handed (where what each host reads is said)."""
    for argument in [*call.args, *(k.value for k in call.keywords)]:
        upstream = _loader_of(s, argument)
        if upstream is not None and upstream is not call:
            return upstream
    return None


def _only_counted(s: Script, node: ast.AST) -> bool:
    """`len(batch['label'][0])`: device 0's slice only counted (the rows per device, a metric's weight)."""
    holder = s.parent.get(node)
    return isinstance(holder, ast.Call) and s.name(holder.func) == "len"


RULES = (project_stacked_batches, per_device_size_to_a_loader, batch_dims_per_device, unsampled_data_loader)
