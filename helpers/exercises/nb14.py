"""Exercises of notebook 14: when a host dies (preemption, a kill during a save, elastic resume)."""
from __future__ import annotations

import re

from helpers.training import checkpoints
from helpers.exercises import forms
from helpers.exercises.core import Kernel, register
from helpers.exercises.kinds import ValueExercise
from helpers.exercises.processes import ProcessExercise
from helpers.exercises.rules import ErrorRule, ValueRule

KERNEL = Kernel(devices=8)  # the first cell: use_fake_devices(8)


# ------------------------------------------------------- 14.1 every host stops at one step

# Each step has one collective. On 2 hosts x 1 device the last host gets SIGTERM (a preemption
# notice) after step NOTICE; on 2 x 2 nobody does, so a function that stops without a notice shows.
_STOP_DRIVER = (
    "from helpers.launch import initialize\ninitialize()\n"
    "import json, os, signal, time\n"
    "from jax.experimental import multihost_utils\n"
    "print('joined', flush=True)\n{answer}\n"
    "host, hosts = jax.process_index(), jax.process_count()\n"
    "STEPS, NOTICE = 500, 3  # about 7 ms a step: JAX's hosts agree on a step within a second\n"
    "notice = jax.local_device_count() == 1  # on 2 x 2 no scheduler sends one\n"
    "stopped = 0\n"
    "for step in range(1, STEPS + 1):\n"
    "    time.sleep(0.005)  # the step's work\n"
    "    if step % 100 == 0:\n"
    "        print(f'step {step}', flush=True)  # alive: a run silent for `stall` s hung\n"
    "    multihost_utils.sync_global_devices(f'step {step}')  # this step's collective\n"
    "    if notice and host == hosts - 1 and step == NOTICE:\n"
    "        os.kill(os.getpid(), signal.SIGTERM)  # the scheduler's notice, to one host\n"
    "    if should_stop(step):\n"
    "        stopped = step\n"
    "        break\n"
    "every = multihost_utils.process_allgather(np.int32(stopped))  # each host's stop (0: none)\n"
    "same = bool((every == every[0]).all())\n"
    "# [every host stopped at the same step, it stopped, it stopped after the notice]\n"
    "print(json.dumps([same, bool(stopped), bool(stopped) and notice and stopped >= NOTICE]))\n")

STOP_SOLUTION = '''from jax.experimental import multihost_utils


def should_stop(step):
    """True at the one step every host saves and stops at, once any host got a preemption notice."""
    return multihost_utils.reached_preemption_sync_point(step)
'''

_STOP_NEVER = '''def should_stop(step):
    return False
'''

_STOP_FIXED_STEP = '''def should_stop(step):
    return step == 10
'''

_STOP_OWN_HANDLER = '''import signal

noticed = []
signal.signal(signal.SIGTERM, lambda signum, frame: noticed.append(signum))


def should_stop(step):
    return bool(noticed)
'''

def _unmatched(text: str) -> str:
    """A run's failure, with JAX's `... name mismatch ('x'). Expected: [hashes]` said in the learner's terms."""
    mismatch = re.search(r"(\w+) name mismatch \('([^']*)'\)", text)
    if mismatch:
        return f"a host called `{mismatch[1]}('{mismatch[2]}')` while another was in a different collective"
    return text


register(ProcessExercise(
    id="14.1", kernel=KERNEL, answer_name="should_stop", signature="(step)",
    title="every host saves and stops at the same step after a preemption notice",
    solution=STOP_SOLUTION,
    driver=_STOP_DRIVER,
    setup="from jax.experimental import multihost_utils\n",
    meshes=((2, 1), (2, 2)),
    wrong={
        _STOP_NEVER: "no host ever stopped: the notice was ignored, so the scheduler's grace period "
                     "would end in SIGKILL with nothing saved",
        _STOP_FIXED_STEP: "your hosts stop at a step you chose, notice or not: on 2 x 2 no host got "
                          "a notice, and they stopped anyway",
        _STOP_OWN_HANDLER: lambda case: (
            f"{_unmatched(case.got.text)}: only the host that got SIGTERM saw your flag, so it stopped alone "
            "while the other host went on to the next step's collective, which no longer matched. "
            "Ask JAX, which tells every host the same step"),
    },
    errors=(ErrorRule(lambda raw: raw.startswith("the run hung") or "name mismatch" in raw, example=(
        "def should_stop(step):\n"
        "    if jax.process_index() == 0:\n"
        "        multihost_utils.sync_global_devices('extra')\n"
        "    return False\n"),
        say=lambda case: f"{_unmatched(case.got.text)}: the hosts' collectives no longer matched, because "
                         "they stopped at different steps or one made a collective the other did "
                         "not. Every host must stop at the same step"),),
    hints=(
        "Under jax.distributed, SIGTERM does not end a process: JAX's preemption notifier takes it "
        "and tells the other hosts.",
        "jax.experimental.multihost_utils has a function that returns True at one agreed step, "
        "on every host; call it with the loop's step at every step.",
    ),
))


# ------------------------------------------------ 14.2 which checkpoint does a resume use

# What `ls` showed after a host was killed while checkpoint 8 was written; and a file of
# checkpoint 6 was truncated afterwards (a disk problem): Orbax still lists 6 as finished.
LISTING = ("2", "4", "6", "8.orbax-checkpoint-tmp")
DAMAGED = ("6",)


def _resumed_from() -> int:
    finished = [int(n) for n in LISTING if n.isdigit()]  # what Orbax lists: no tmp directory
    return max(s for s in finished if str(s) not in DAMAGED)


register(ValueExercise(
    id="14.2", kernel=KERNEL, answer_name="resumed_from",
    title="the newest checkpoint that is finished and restores",
    solution="resumed_from = 4  # 8 never finished (its tmp directory); 6 is listed but does not restore",
    form=forms.whole("a step number"),
    right=_resumed_from,
    wrong={
        8: f"8 is still in its temporary directory ({checkpoints.UNFINISHED_MARK}): the save never "
           "finished, so Orbax does not list it",
        6: "Orbax lists 6 as finished, but one of its files was truncated: its restore fails, and "
           "train_stack.py skips it (one line) for the next older one",
        2: "2 restores, but a newer checkpoint restores too",
        0: "train_stack.py --resume never starts over while a checkpoint restores",
    },
    rules=(ValueRule(lambda v: v > 8, example=10, say="there is no checkpoint after step 8 in the listing"),),
    hints=(
        "A name that ends in .orbax-checkpoint-tmp is a save that never finished.",
        "--resume tries Orbax's finished steps newest first and keeps the first that restores.",
    ),
))


# ----------------------------------------- 14.3 the same batches on any number of hosts

_IDS_DRIVER = '''
import jax
import numpy as np
from jax.experimental import multihost_utils

host, hosts = jax.process_index(), jax.process_count()


def output(namespace, layout):
    """Per step: the sorted record ids of the global batch, and whether the hosts' parts overlap."""
    out = []
    for step in (0, 1, 3):
        mine = np.asarray(namespace["batch_ids"](step, host, hosts), dtype=np.int32).reshape(-1)
        if len(mine) != namespace["GLOBAL_BATCH"] // hosts:  # the same on every host: no collective skipped
            out.append(["rows", int(len(mine))])
            continue
        every = multihost_utils.process_allgather(mine).reshape(-1)
        out.append([sorted(every.tolist()), len(set(every.tolist())) == len(every)])
    return out
'''

_IDS_SETUP = ("GLOBAL_BATCH = 16\n"
              "ORDER = np.random.default_rng(0).permutation(64)  # one shuffle, the same on every host\n")

IDS_SOLUTION = '''def batch_ids(step, host, num_hosts):
    """The record ids host `host` of `num_hosts` reads at `step`: its block of that step's global batch."""
    per_host = GLOBAL_BATCH // num_hosts
    start = step * GLOBAL_BATCH + host * per_host
    return ORDER[start:start + per_host]
'''

register(ProcessExercise(
    id="14.3", kernel=KERNEL, answer_name="batch_ids", signature="(step, host, num_hosts)",
    title="a step's global batch does not depend on the number of hosts",
    solution=IDS_SOLUTION,
    driver=_IDS_DRIVER, together=True, setup=_IDS_SETUP,
    meshes=((2, 1), (4, 1)),
    wrong={
        "def batch_ids(step, host, num_hosts):\n"
        "    per_host = GLOBAL_BATCH // num_hosts\n"
        "    order = np.random.default_rng(host).permutation(64)\n"
        "    return order[step * per_host:(step + 1) * per_host]\n":
            "each host shuffles with its own seed, so which records make a step's batch depends on "
            "how many hosts there are (and two hosts may read the same record). Every host must "
            "use the one shared ORDER",
        "def batch_ids(step, host, num_hosts):\n"
        "    per_host = GLOBAL_BATCH // num_hosts\n"
        "    start = (step + host) * per_host\n"
        "    return ORDER[start:start + per_host]\n":
            "your steps overlap: step s starts s * per_host records in, so consecutive steps share "
            "records, and how far they overlap depends on the number of hosts. A step starts "
            "step * GLOBAL_BATCH records in",
        "def batch_ids(step, host, num_hosts):\n"
        "    start = step * GLOBAL_BATCH + host * 8\n"
        "    return ORDER[start:start + 8]\n":
            "8 rows a host is right only for 2 hosts: compute each host's rows from num_hosts",
        "def batch_ids(step, host, num_hosts):\n"
        "    per_host = GLOBAL_BATCH // num_hosts\n"
        "    return ORDER[host * per_host:(host + 1) * per_host]\n":
            "every step reads the same records: the step is missing from where a batch starts",
    },
    otherwise=lambda case: (f"on {case.layout[0]} hosts the global batches were {case.got}, "
                            "not the ones the shared ORDER gives: take each step's GLOBAL_BATCH "
                            "records of ORDER and give every host an equal block of them"),
    hints=(
        "Step s of the run is the same GLOBAL_BATCH records of ORDER whatever the number of hosts; "
        "only how they are split changes.",
        "Host h of H reads GLOBAL_BATCH // H of them: the block that starts h * (GLOBAL_BATCH // H) "
        "records into the step's batch.",
    ),
))
