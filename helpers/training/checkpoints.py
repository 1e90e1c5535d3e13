"""Orbax checkpoints of a sharded train state, and the checks that run before a resume.

`newest_step(dir)` looks at the checkpoint directory before JAX starts and names what is wrong
in one line (missing, empty, only half-written saves); a step counts as finished exactly when
Orbax's own listing (`finished_steps`) counts it. `check_batch_split` refuses a mesh whose
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

__all__ = ["CheckpointError", "DamagedCheckpoint", "UNFINISHED_MARK", "finished_steps",
           "newest_step", "check_batch_split", "restore_targets", "save", "restore"]

# How Orbax names a step directory while it is still being written (renamed when done).
UNFINISHED_MARK = ".orbax-checkpoint-tmp"


class CheckpointError(RuntimeError):
    """A checkpoint directory cannot be resumed from; the message says why and what to do."""


class DamagedCheckpoint(CheckpointError):
    """A finished checkpoint (in Orbax's listing) whose files do not restore: `step`, and Orbax's `gist`."""

    def __init__(self, message: str, step: int, gist: str):
        super().__init__(message)
        self.step, self.gist = step, gist


def _listing(names: list[str], most: int = 4) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def finished_steps(ckpt_dir: str | Path) -> list[int]:
    """The steps Orbax counts as finished in `ckpt_dir`, oldest first.

    Orbax's own listing: a step directory renamed from its temporary name, or (on a `gs://` path,
    which Orbax commits with a marker file) one holding `commit_success.txt`. Never a save in progress.
    """
    from orbax.checkpoint.path import step as orbax_steps

    return sorted(orbax_steps.checkpoint_steps(Path(ckpt_dir)))


def newest_step(ckpt_dir: str | Path) -> int:
    """The newest finished checkpoint step in `ckpt_dir`, or a one-line CheckpointError."""
    path = Path(ckpt_dir)
    if not path.exists():
        raise CheckpointError(f"cannot resume: checkpoint directory {path} does not exist. "
                              "Start without --resume, or pass the --ckpt-dir a run saved into")
    if not path.is_dir():
        raise CheckpointError(f"cannot resume: {path} is a file, not a checkpoint directory")
    finished = finished_steps(path)
    if finished:
        return finished[-1]
    names = sorted(p.name for p in path.iterdir())
    unfinished = [n for n in names if UNFINISHED_MARK in n or (n.isdigit() and (path / n).is_dir())]
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
    of the state (as `helpers.training.nnx_model.state_shardings(mesh)` gives).
    """
    import jax

    def target(sharding, subtree):
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding),
                            subtree)

    if isinstance(shardings, jax.sharding.Sharding):
        return target(shardings, abstract_state)
    return jax.tree.map(target, shardings, abstract_state)


def save(manager, step: int, state: Any, loader_state: dict, *, wait: bool = True) -> bool:
    """Save the train state (global arrays) and the loader position as checkpoint `step`.

    Waits until Orbax has committed it, unless `wait=False` (the write goes on in the background).
    Returns False when Orbax saved nothing: it saves only steps newer than its newest checkpoint.
    """
    import orbax.checkpoint as ocp

    saved = manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                       loader=ocp.args.JsonSave(loader_state)))
    if wait:
        manager.wait_until_finished()
    return saved


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

    A checkpoint that cannot be read raises a one-line DamagedCheckpoint.
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
        gist = f"{type(error).__name__}: {gist}"
        raise DamagedCheckpoint(f"cannot resume: checkpoint {where} is incomplete or damaged "
                                f"(Orbax: {gist}). If a save into it was interrupted, delete "
                                f"{where} to resume from the step before it", step, gist) from None
    finally:
        asyncio_log.setLevel(level)
    if restored["loader"] is None:
        raise CheckpointError(f"cannot resume: checkpoint {where} has no loader position; it "
                              "was not written by this script")
    return restored["state"], dict(restored["loader"])
