"""Does JAX's preemption sync point fire? It depends on how the script listens for SIGTERM.

Every host runs STEPS short steps with one collective each; the last host sends itself SIGTERM (a
scheduler's preemption notice) after step --notice-at. Each host asks
`multihost_utils.reached_preemption_sync_point(step)` every --check-every steps and stops when it
says True. --handler installs a Python SIGTERM handler of the script's own, before or after
`jax.distributed.initialize`. Notebook 14 runs each setup on 2 hosts:

    python -m helpers.launch --hosts 2 --devices-per-host 1 notebooks/scripts/sigterm_setups.py \
        --handler after

Each host prints where it stopped (or, if it never did, which step JAX had chosen), whether its
own handler ran, and whether Python still names it as the SIGTERM handler; the host that got the
notice prints how long it took from the signal to the sync point.
"""
import argparse
import os
import signal
import time

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--handler", choices=["none", "before", "after"], default="none",
                    help="install a Python SIGTERM handler before or after jax.distributed.initialize")
parser.add_argument("--check-every", type=int, default=1, metavar="N",
                    help="ask reached_preemption_sync_point only at steps N, 2N, ... (default: every step)")
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--notice-at", type=int, default=3, metavar="STEP")
args = parser.parse_args()

handled = []  # the script's own record of a SIGTERM


def own_handler(signum, frame):
    handled.append(signum)


if args.handler == "before":
    signal.signal(signal.SIGTERM, own_handler)

from helpers.launch import initialize  # noqa: E402 - the handler above must come first

initialize()  # jax.distributed.initialize: JAX's preemption notifier takes SIGTERM here
if args.handler == "after":
    signal.signal(signal.SIGTERM, own_handler)

import jax  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

host, last = jax.process_index(), jax.process_count() - 1
noticed = None
for step in range(1, args.steps + 1):
    time.sleep(0.005)  # the step's work
    multihost_utils.sync_global_devices(f"step {step}")  # the step's collective
    if host == last and step == args.notice_at:
        noticed = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
    if step % args.check_every == 0 and multihost_utils.reached_preemption_sync_point(step):
        print(f"host {host}: sync point at step {step}", flush=True)
        if noticed is not None:
            print(f"host {host}: notice to sync point {time.monotonic() - noticed:.2f} s", flush=True)
        break
else:
    print(f"host {host}: no sync point in {args.steps} steps", flush=True)
    # Which step had JAX chosen? Ask it about every step now: True at that one step only.
    chosen = next((s for s in range(1, args.steps + 2)
                   if multihost_utils.reached_preemption_sync_point(s)), None)
    print(f"host {host}: " + (f"JAX's sync point was step {chosen}" if chosen else
                              "JAX chose no sync point: it never heard of the notice"), flush=True)
print(f"host {host}: own SIGTERM handler ran: {bool(handled)}; Python's signal.getsignal names it: "
      f"{signal.getsignal(signal.SIGTERM) is own_handler}", flush=True)
