"""Orbax checkpoints of a sharded train state, and the checks that run before a resume.

`newest_step(dir)` looks at the checkpoint directory before JAX starts and names what is wrong
in one line (missing, empty, only half-written saves). `check_batch_split` refuses a mesh whose
devices do not divide the global batch before any collective runs. `save` and `restore` wrap
Orbax's `CheckpointManager` calls: a train state (a pytree of global arrays) plus the loader's
position (a small JSON dict), restored onto whatever mesh the targets carry:

    >>> targets = restore_targets(abstract_state, NamedSharding(new_mesh, P()))
    >>> state, loader_state = restore(manager, step, targets)
"""
from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["CheckpointError", "UNFINISHED_MARK", "newest_step", "check_batch_split",
           "restore_targets", "save", "restore"]

# How Orbax names a step directory while it is still being written (renamed when done).
UNFINISHED_MARK = ".orbax-checkpoint-tmp"


class CheckpointError(RuntimeError):
    """A checkpoint directory cannot be resumed from; the message says why and what to do."""


def _listing(names: list[str], most: int = 4) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def newest_step(ckpt_dir: str | Path) -> int:
    """The newest finished checkpoint step in `ckpt_dir`, or a one-line CheckpointError."""
    path = Path(ckpt_dir)
    if not path.exists():
        raise CheckpointError(f"cannot resume: checkpoint directory {path} does not exist. "
                              "Start without --resume, or pass the --ckpt-dir a run saved into")
    if not path.is_dir():
        raise CheckpointError(f"cannot resume: {path} is a file, not a checkpoint directory")
    names = sorted(p.name for p in path.iterdir())
    finished = sorted(int(n) for n in names if n.isdigit() and (path / n).is_dir())
    if finished:
        return finished[-1]
    unfinished = [n for n in names if UNFINISHED_MARK in n]
    if not names:
        raise CheckpointError(f"cannot resume: checkpoint directory {path} is empty (no run "
                              "saved there yet). Start without --resume to train from step 0")
    if unfinished:
        raise CheckpointError(
            f"cannot resume: {path} holds only unfinished checkpoints ({_listing(unfinished)}): "
            "a save stopped before it completed. Delete them and start without --resume")
    raise CheckpointError(f"cannot resume: {path} holds no checkpoint steps (found "
                          f"{_listing(names)}). Pass the --ckpt-dir a run saved into")


def check_batch_split(global_batch: int, num_hosts: int, devices_per_host: int,
                      batch_spec: str = "host,device") -> None:
    """Raise ValueError (one line) unless every host and every device gets an equal part of the batch."""
    if global_batch % num_hosts:
        raise ValueError(f"the global batch of {global_batch} does not split over {num_hosts} "
                         f"hosts: pick a global batch that is a multiple of {num_hosts}")
    devices = num_hosts * devices_per_host if batch_spec == "host,device" else devices_per_host
    rows = global_batch if batch_spec == "host,device" else global_batch // num_hosts
    if rows % devices:
        raise ValueError(
            f"the mesh ({num_hosts} hosts x {devices_per_host} devices) does not divide the "
            f"global batch: {rows} rows cannot split evenly over {devices} devices. Use a mesh "
            f"whose device count divides {rows}, or change --global-batch")


def restore_targets(abstract_state: Any, shardings: Any) -> Any:
    """`abstract_state` (shapes and dtypes) with every leaf carrying the sharding to restore it with.

    `shardings` is one sharding for every leaf, or a tree of shardings with one per variable
    of the state (as `helpers.nnx_model.state_shardings(mesh)` gives).
    """
    import jax

    def target(sharding, subtree):
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding),
                            subtree)

    if isinstance(shardings, jax.sharding.Sharding):
        return target(shardings, abstract_state)
    return jax.tree.map(target, shardings, abstract_state)


def save(manager, step: int, state: Any, loader_state: dict) -> None:
    """Save the train state (global arrays) and the loader position as checkpoint `step`; wait for it."""
    import orbax.checkpoint as ocp

    manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                               loader=ocp.args.JsonSave(loader_state)))
    manager.wait_until_finished()


def _without_closed_loop_noise(hook):
    """`hook` that drops "Event loop is closed" errors: after a failed read, tensorstore's callbacks
    keep reporting to Orbax's closed event loop, tracebacks that would bury the one-line error."""
    def quiet(*args):
        error = args[1] if len(args) > 1 else getattr(args[0], "exc_value", None)
        if isinstance(error, RuntimeError) and str(error) == "Event loop is closed":
            return
        hook(*args)
    return quiet


def restore(manager, step: int, targets: Any) -> tuple[Any, dict]:
    """Checkpoint `step` restored onto the shardings in `targets`: (state, loader_state).

    A checkpoint that cannot be read raises a one-line CheckpointError.
    """
    import orbax.checkpoint as ocp

    where = Path(manager.directory) / str(step)
    sys.excepthook = _without_closed_loop_noise(sys.excepthook)
    threading.excepthook = _without_closed_loop_noise(threading.excepthook)
    sys.unraisablehook = _without_closed_loop_noise(sys.unraisablehook)
    asyncio_log = logging.getLogger("asyncio")
    level = asyncio_log.level
    asyncio_log.setLevel(logging.CRITICAL)  # when one read fails, asyncio logs every other read too
    try:
        restored = manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(targets), loader=ocp.args.JsonRestore()))
    except Exception as error:  # Orbax's errors run many lines deep: keep the gist of the last
        last = (str(error).strip().splitlines() or [""])[-1].split(" [")[0]
        gist = last if len(last) <= 160 else last[:157] + "..."
        raise CheckpointError(f"cannot resume: checkpoint {where} is incomplete or damaged "
                              f"(Orbax: {type(error).__name__}: {gist}). If a save into it was "
                              f"interrupted, delete {where} to resume from the step before it") from None
    asyncio_log.setLevel(level)
    if restored["loader"] is None:
        raise CheckpointError(f"cannot resume: checkpoint {where} has no loader position; it "
                              "was not written by this script")
    return restored["state"], dict(restored["loader"])
