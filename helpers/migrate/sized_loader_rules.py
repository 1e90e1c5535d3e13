"""A project's loader handed the batch size and nothing of the host it runs on (`Dataset(path, batch_size=cfg.batch)`,
`get_dataset(cfg, args.batch_size)`), in a pmap-era script where nothing reads the process index: every host loads
the whole batch. batch_rules' shared_project_loader says the loaders whose batches it follows to a pmapped call; this
says the others, at the size they are handed."""
from __future__ import annotations

import ast
import re
from typing import Iterator

from helpers.migrate.batch_rules import shared_project_loader
from helpers.migrate.bindings import device_count_of
from helpers.migrate.data_rules import pmap_era, reads_host_number
from helpers.migrate.loader_rules import project_call
from helpers.migrate.script import Script, code_of

LESSONS: dict[str, tuple[str, str]] = {}  # global-batch-per-host: data_rules'
_BATCH_SIZE = re.compile(r"batch_?size", re.I)
_PER_DEVICE = re.compile(r"device|local", re.I)


def _batch_size_handed(call: ast.Call) -> ast.AST | None:
    """The batch size a loader call is handed: a keyword named for it (`batch_size=cfg.batch_size`), or an argument
    that spells one (`args.batch_size`); not a size per device or per host (`batch_size_per_device`)."""
    for given in call.keywords:
        if given.arg and _BATCH_SIZE.search(given.arg) and not _PER_DEVICE.search(given.arg + code_of(given.value)):
            return given.value
    return next((a for a in call.args if _BATCH_SIZE.search(code_of(a)) and not _PER_DEVICE.search(code_of(a))
                 and not isinstance(a, ast.Call)), None)


def _told_of_devices(s: Script, call: ast.Call) -> bool:
    """A loader handed a device count (`num_devices=n`): it stacks per device, which another rule says."""
    return any(device_count_of(s, a) or "device" in (k or "") for k, a in
               [*((None, a) for a in call.args), *((k.arg, k.value) for k in call.keywords)])


def _placing(s: Script) -> frozenset[str]:
    """The project's functions that stack, place or prefetch the rows they are handed (no loader of their own), and
    its classes that pmap a method (a sampler that draws per device)."""
    f = s.folder
    return f.stackers | f.placers | f.prefetchers | f.torch_loaders | f.pmapping_classes | {
        name for name, _ in f.count_stackers}


def batch_sized_project_loader(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """The project's loader handed a batch size, read to its body, which reads no process index (out of view, it may
    split by host on its own: shared_project_loader says only a training step's)."""
    if not pmap_era(s) or reads_host_number(s, s.tree):
        return
    followed = {node for node, *_ in shared_project_loader(s)}
    not_loaders = s.folder.host_aware | _placing(s)
    for call in s.calls:
        named = code_of(call.func).rsplit(".", 1)[-1]
        if call in followed or not project_call(s, call) or named not in s.folder.read or named in not_loaders \
                or named.endswith("DataLoader") or _told_of_devices(s, call):
            continue  # loader_rules says a DataLoader without a sampler; batch_rules a loader that stacks
        size = _batch_size_handed(call)
        if size is not None:
            yield (size, "global-batch-per-host",
                   f"{code_of(call.func)}(...) is handed the batch size {code_of(size)}, and nothing here or in its "
                   "body (in the project) reads jax.process_index(): every host loads the whole batch",
                   "give each host its own part: global_batch // jax.process_count() rows, shard the files or rows "
                   "by jax.process_index(), and make the global batch with jax.make_array_from_process_local_data")


RULES = (batch_sized_project_loader,)
