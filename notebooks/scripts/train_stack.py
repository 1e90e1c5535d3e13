"""Flax NNX + Optax + Grain + Orbax on a (host, device) mesh: train, checkpoint, resume anywhere.

Each host reads only its rows of every global batch with a Grain loader; JAX stitches them
into one global batch; an AdamW step updates the replicated model. Every --save-every steps
the sharded train state (model, optimizer state) and the loader's position go into an Orbax
checkpoint; --resume continues from the newest one, on any mesh whose devices divide the
global batch. The same file runs three ways:

    python -m helpers.launch --hosts 2 --devices-per-host 4 notebooks/scripts/train_stack.py \
        --steps 8 --ckpt-dir /tmp/ckpt --save-every 4
    mpirun -n 2 -x XLA_FLAGS=--xla_force_host_platform_device_count=4 -x JAX_PLATFORMS=cpu \
        python notebooks/scripts/train_stack.py --steps 8
    XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \
        python notebooks/scripts/train_stack.py --steps 8 --ckpt-dir /tmp/ckpt --resume

Process 0 prints `step {s} loss {loss:.8f}` after the s-th update (s counts from 1).

Failures (notebook 14). On a preemption notice (SIGTERM, as schedulers send it) every host
saves the same step, agreed with JAX's `reached_preemption_sync_point`, and exits with
--preempted-exit (0 by default; a scheduler that should run the job again wants non-zero).
A run whose --ckpt-dir holds a finished checkpoint (in Orbax's listing) continues from it, so a
requeued or restarted job runs the same command; --resume insists on one. Either way it takes
the newest checkpoint that restores: a save that never finished is not in Orbax's listing, and a
finished but damaged one is reported in one line and skipped (never deleted); with none usable
the script says so and exits 2. --notice-at (to the last host) and --kill-in-save (host 0, which
commits each checkpoint) are failures on purpose, in a run that starts from step 0 only (so a
restarted job runs clean).
"""
import argparse
import os
import signal
import sys
import time
from functools import partial
from pathlib import Path

from helpers.launch import initialize
from helpers.training.checkpoints import CheckpointError, DamagedCheckpoint, finished_steps, newest_step

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=8, help="train until this step (default 8)")
parser.add_argument("--ckpt-dir", help="directory for Orbax checkpoints (shared by all hosts)")
parser.add_argument("--save-every", type=int, default=0,
                    help="save a checkpoint every K steps and at the last step (0: only at the last)")
parser.add_argument("--resume", action="store_true",
                    help="continue from the newest checkpoint in --ckpt-dir, and fail if there is "
                         "none (without it a run continues when there is one, and starts anew when not)")
parser.add_argument("--batch-spec", choices=["host,device", "device"], default="host,device",
                    help="how the global batch is split: over every device of every host "
                         "(default), or only over one host's devices (the pitfall of notebook 03)")
parser.add_argument("--global-batch", type=int, default=256)
parser.add_argument("--data-seed", type=int, default=0, help="Grain's shuffle seed")
parser.add_argument("--preemption", choices=["sync", "local"], default="sync",
                    help="how a host learns of a preemption notice: JAX's sync point, the same "
                         "step on every host (default), or its own SIGTERM handler (the pitfall)")
parser.add_argument("--preempted-exit", type=int, default=0, metavar="STATUS",
                    help="exit status after saving on a preemption notice (default 0; e.g. 143, "
                         "128 + SIGTERM, for a Kubernetes Job or a restart loop that should run it again)")
parser.add_argument("--notice-at", type=int, metavar="STEP",
                    help="(demo) the last host gets SIGTERM, a preemption notice, after step STEP")
parser.add_argument("--kill-in-save", type=int, metavar="STEP",
                    help="(demo) host 0 is killed (SIGKILL) while checkpoint STEP is written")
args = parser.parse_args()


def fail(message: str) -> None:
    """One clear line on stderr, then exit: every host sees the same problem and stops."""
    sys.stdout.flush()
    print(f"train_stack.py: error: {message}", file=sys.stderr, flush=True)
    if "jax" in sys.modules:  # joined: leave together, or a host still starting loses host 0's coordinator
        sys.modules["jax"].distributed.shutdown()  # a barrier of every host; nothing when alone
    os._exit(2)


if args.steps < 1 or args.save_every < 0 or args.global_batch < 1:
    fail("--steps and --global-batch must be at least 1, --save-every at least 0")
if args.resume and not args.ckpt_dir:
    fail("--resume needs --ckpt-dir: the directory the earlier run saved into")
resume_step = None
if args.resume:  # read the directory before JAX starts: nothing to undo if it is unusable
    try:
        resume_step = newest_step(args.ckpt_dir)
    except CheckpointError as error:
        fail(str(error))
elif args.ckpt_dir and finished_steps(args.ckpt_dir):  # a requeued job: its first attempt saved
    resume_step = newest_step(args.ckpt_dir)

how = initialize()  # before anything else touches JAX: joins the run, or stays alone
noticed = []  # --preemption local: this host's own record of a SIGTERM
if args.preemption == "local":
    signal.signal(signal.SIGTERM, lambda signum, frame: noticed.append(True))

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from jax import P
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding

from helpers.training import checkpoints, nnx_model, tiny
from helpers.training.data import ArrayRecords, HostLoader, eval_batch

host, num_hosts, local = jax.process_index(), jax.process_count(), jax.local_device_count()
try:  # before any collective: a mesh that cannot split the batch stops here, on every host
    checkpoints.check_batch_split(args.global_batch, num_hosts, local, args.batch_spec)
except ValueError as error:
    fail(str(error))
mesh = jax.make_mesh((num_hosts, local), ("host", "device"))
jax.set_mesh(mesh)
batch_spec = P(("host", "device")) if args.batch_spec == "host,device" else P("device")
batch_sharding, replicated = NamedSharding(mesh, batch_spec), NamedSharding(mesh, P())

# this host's loader: ShardByJaxProcess says which host this is, out of how many
loader = HostLoader(ArrayRecords(*tiny.dataset()), args.global_batch,
                    grain.sharding.ShardByJaxProcess(), seed=args.data_seed)
graphdef, abstract_state = nnx_model.abstract_state()  # shapes only, nothing computed
# notebook 10's placement: parameters replicated, each AdamW moment split over 'device'
state_shardings = nnx_model.state_shardings(mesh)


@partial(jax.jit, out_shardings=(state_shardings, replicated))
def train_step(state, x, y):
    model, optimizer = nnx.merge(graphdef, state)
    loss, grads = nnx.value_and_grad(nnx_model.loss_fn)(model, x, y)
    optimizer.update(model, grads)
    return nnx.state((model, optimizer)), loss


# Compiled before the first line is printed: a host silent from then on is waiting, not compiling
# (the course launcher's stall=, and a hang's diagnosis, count silence from the first lines).
first = loader.batch(0)
rows = args.global_batch if args.batch_spec == "host,device" else loader.rows_per_host  # P('device'): one host's
train_step = train_step.lower(
    checkpoints.restore_targets(abstract_state, state_shardings),
    *(jax.ShapeDtypeStruct((rows, *first[k].shape[1:]), first[k].dtype, sharding=batch_sharding)
      for k in ("x", "y"))).compile()
print(f"{how}: host {host} of {num_hosts}, {local} local devices, mesh {dict(mesh.shape)}, "
      f"batch {batch_spec}, reads {loader.rows_per_host} of {args.global_batch} rows per step")


manager = ocp.CheckpointManager(os.path.abspath(args.ckpt_dir)) if args.ckpt_dir else None
if resume_step is None:  # the same seed on every host; built directly with its sharding
    state = jax.jit(lambda: nnx.state(nnx_model.create(nnx_model.SEED)),
                    out_shardings=state_shardings)()
    start = 0
else:
    targets = checkpoints.restore_targets(abstract_state, state_shardings)  # onto *this* mesh
    for resume_step in reversed(finished_steps(args.ckpt_dir)):  # the newest that restores
        why = "it failed on another host"
        try:
            state, position = checkpoints.restore(manager, resume_step, targets)
            restored = True
        except DamagedCheckpoint as damaged:
            restored, why = False, f"Orbax: {damaged.gist}"
        if num_hosts > 1:  # every host takes the same checkpoint, or none
            restored = bool(multihost_utils.process_allgather(np.array(restored)).all())
        if restored:
            break
        if host == 0:
            print(f"checkpoint {resume_step} does not restore ({why}): skipped, "
                  "left in place", flush=True)
    else:
        fail(f"cannot resume: no checkpoint in {args.ckpt_dir} restores (tried "
             f"{', '.join(map(str, reversed(finished_steps(args.ckpt_dir))))}). Start without "
             "--resume in a new --ckpt-dir")
    if position != loader.state(position["next_step"]):
        fail(f"checkpoint {resume_step} was saved with loader {position}, but this run reads "
             f"{loader.state(position['next_step'])}: resume with the same --global-batch and "
             "--data-seed")
    start = position["next_step"]
    if host == 0:
        print(f"resumed from checkpoint {resume_step}: loader at step {start}"
              + ("" if args.resume else " (found without --resume)"))


def global_batch(step):
    """This host's rows of the step's batch, stitched with the other hosts' into global arrays."""
    rows = loader.batch(step)
    return (jax.make_array_from_process_local_data(batch_sharding, rows["x"]),
            jax.make_array_from_process_local_data(batch_sharding, rows["y"]))


fresh = resume_step is None  # the demos' failures happen in a run from step 0 only


def preempted(done: int) -> bool:
    """Whether to save and stop after step `done` because of a preemption notice."""
    if args.preemption == "local":
        return bool(noticed)
    return multihost_utils.reached_preemption_sync_point(done)  # False when alone


for step in range(start, args.steps):
    state, loss = train_step(state, *global_batch(step))
    done = step + 1
    if host == 0:
        print(f"step {done} loss {float(loss):.8f}")
    if fresh and host == num_hosts - 1 and done == args.notice_at:
        print(f"host {host}: SIGTERM after step {done}", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
    stop = preempted(done)
    if manager is not None and (stop or done == args.steps
                                or (args.save_every and done % args.save_every == 0)):
        if fresh and host == 0 and done == args.kill_in_save:  # dies before it can commit
            checkpoints.save(manager, done, state, loader.state(done), wait=False)
            writing = f"{done}.orbax-checkpoint-tmp*"  # once Orbax is writing (at most 10 s), not before
            for _ in range(1000):
                if any(Path(args.ckpt_dir).glob(writing)):
                    break
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)
        saved = checkpoints.save(manager, done, state, loader.state(done))
        if host == 0:
            print(f"saved checkpoint {done}" if saved else f"not saved: Orbax keeps checkpoint "
                  f"{manager.latest_step()}, newer than step {done}")
    if stop:
        kept = f"saved step {done}" if manager is not None else "no --ckpt-dir, nothing saved"
        print(f"host {host}: preemption notice after step {done}; {kept}; exiting", flush=True)
        if manager is not None:
            manager.close()
        sys.exit(args.preempted_exit)  # 0: the scheduler counts the job as done (notebook 14)


# Evaluation on a held-out set of 1001 examples: no host count divides it. Each host pads its
# share to equal rows; the mask keeps the padding out of the global mean.
@jax.jit
def masked_mse(state, x, y, mask):
    model, _ = nnx.merge(graphdef, state)
    errors = ((model(x) - y) ** 2)[:, 0]
    return (errors * mask).sum() / mask.sum()


held_out = ArrayRecords(*(a[:1001] for a in tiny.dataset(seed=1)))
shard = grain.sharding.ShardByJaxProcess()
mine = eval_batch(held_out, shard, local)
eval_sharding = NamedSharding(mesh, P(("host", "device")))
mse = masked_mse(state, *(jax.make_array_from_process_local_data(eval_sharding, mine[k])
                          for k in ("x", "y", "mask")))
if host == 0:
    print(f"eval mse {float(mse):.8f} over {len(held_out)} examples")
if manager is not None:
    manager.close()
