"""Exercises of notebook 14: when a host dies (preemption, a kill during a save, elastic resume)."""
from __future__ import annotations

import ast
import re

from helpers.exercises import forms
from helpers.exercises.core import Kernel, register
from helpers.exercises.kinds import ValueExercise
from helpers.exercises.processes import ProcessExercise
from helpers.exercises.rules import ErrorRule, OutputRule, ValueRule

KERNEL = Kernel(devices=8)  # the first cell: use_fake_devices(8)


# ------------------------------------------ 14.1 regular saves, and the preemption save

# Each step has one collective, and a save is one more. On 2 hosts x 1 device the last host gets
# SIGTERM (a preemption notice) after step NOTICE; on 2 x 2 nobody does. The driver counts which
# steps JAX was asked about, and stops a host where JAX said True: it saves there if asked to.
_SAVE_DRIVER = (
    "from helpers.launch import initialize\ninitialize()\n"
    "import json, os, signal, time\n"
    "from jax.experimental import multihost_utils\n"
    "asked, agreed = [], []  # the steps JAX was asked about; where it answered True\n"
    "_reached = multihost_utils.reached_preemption_sync_point\n"
    "def _counted(step):\n"
    "    answer = _reached(step)\n"
    "    asked.append(step)\n"
    "    if answer:\n"
    "        agreed.append(step)\n"
    "    return answer\n"
    "multihost_utils.reached_preemption_sync_point = _counted\n"
    "def _agreed_on_next_step():\n"
    "    # JAX's notifier reads SIGTERM within about 1 s, then every host posts the last step it asked\n"
    "    # about and JAX picks the next one. This host waits for both posts before it goes on, so that\n"
    "    # step is NOTICE + 1 in every run, not wherever the loop was after that second (a step that\n"
    "    # was a multiple of 10 one run in ten, and changed verdicts). No wait when a handler of the\n"
    "    # answer's took SIGTERM from JAX's (a Python function): JAX hears nothing to agree on.\n"
    "    if callable(signal.getsignal(signal.SIGTERM)):\n"
    "        return\n"
    "    from jax._src import distributed\n"
    "    start = time.monotonic()\n"
    "    while time.monotonic() - start < 10:\n"
    "        posted = distributed.global_state.client.key_value_dir_get('PREEMPTION_CURRENT_COUNTER/')\n"
    "        if len(posted) == jax.process_count():\n"
    "            return\n"
    "        time.sleep(0.01)\n"
    "def _collective(name):\n"
    "    # The loop's own collectives. When the hosts' names differ, JAX raises on each host, naming its\n"
    "    # own call, and which host's error arrives before the launcher stops the others is a race: here\n"
    "    # host 0 alone raises, naming every host's call, so a run fails with one text every time.\n"
    "    try:\n"
    "        multihost_utils.sync_global_devices(name)\n"
    "    except AssertionError as error:\n"
    "        if 'name mismatch' not in str(error):\n"
    "            raise\n"
    "        from jax._src import distributed\n"
    "        client, me = distributed.global_state.client, jax.process_index()\n"
    "        client.key_value_set(f'course/collective/{me}', name)\n"
    "        if me != 0:\n"
    "            time.sleep(30)  # host 0 raises, and the launcher stops this host\n"
    "            raise\n"
    "        called = []\n"
    "        for other in range(jax.process_count()):\n"
    "            try:\n"
    "                theirs = client.blocking_key_value_get(f'course/collective/{other}', 3000)\n"
    "                called.append(f'host {other} called sync_global_devices({theirs!r})')\n"
    "            except Exception:  # in a collective of the answer's own\n"
    "                called.append(f'host {other} was in another collective')\n"
    "        raise AssertionError('collectives did not match: ' + ', '.join(called)) from None\n"
    "print('joined', flush=True)\n{answer}\n"
    "host, hosts = jax.process_index(), jax.process_count()\n"
    "STEPS, NOTICE, SAVE_EVERY = 500, 3, 10  # about 7 ms a step; JAX agrees on step NOTICE + 1 (see above)\n"
    "notice = jax.local_device_count() == 1  # on 2 x 2 no scheduler sends one\n"
    "saves, stopped = [], 0\n"
    "for step in range(1, STEPS + 1):\n"
    "    time.sleep(0.005)  # the step's work\n"
    "    if step % 100 == 0:\n"
    "        print(f'step {step}', flush=True)  # alive: a run silent for `stall` s hung\n"
    "    _collective(f'step {step}')  # this step's collective\n"
    "    if notice and host == hosts - 1 and step == NOTICE:\n"
    "        os.kill(os.getpid(), signal.SIGTERM)  # the scheduler's notice, to one host\n"
    "        _agreed_on_next_step()\n"
    "    if should_save(step):\n"
    "        saves.append(step)\n"
    "        _collective(f'save {step}')  # a save: every host takes part\n"
    "    if agreed and agreed[-1] == step:  # the preemption step: its save is done (or not), stop\n"
    "        stopped = step\n"
    "        break\n"
    "every = multihost_utils.process_allgather(np.int32(stopped))  # each host's stop (0: none)\n"
    "last = stopped or STEPS\n"
    "regular = set(range(SAVE_EVERY, last + 1, SAVE_EVERY))\n"
    "how_asked = ('every step' if asked == list(range(1, last + 1)) else 'some steps' if asked else 'never')\n"
    "missed = sorted(set(range(1, last + 1)) - set(asked))\n"
    "# [every host stopped at the same step, it stopped, after the notice (or never without one),\n"
    "#  the stop step was saved, every 10th step was saved and no other, how often JAX was asked,\n"
    "#  the first steps JAX was asked about, the first loop steps it was not asked about,\n"
    "#  the first saves but the stop's, and their steps modulo 10]\n"
    "others = [s for s in saves if s != stopped]\n"
    "print(json.dumps([bool((every == every[0]).all()), bool(stopped),\n"
    "                  stopped > NOTICE if notice else not stopped,\n"
    "                  not stopped or stopped in saves, regular <= set(saves) <= regular | {stopped},\n"
    "                  how_asked, asked[:5], missed[:4], others[:3], sorted({s % SAVE_EVERY for s in others})]))\n")

SAVE_SOLUTION = '''from jax.experimental import multihost_utils


def should_save(step):
    """True at every 10th step, and at the step every host saves at after a preemption notice."""
    preempted = multihost_utils.reached_preemption_sync_point(step)  # asked at every step
    return preempted or step % 10 == 0
'''

_SAVE_REGULAR_ONLY = '''def should_save(step):
    return step % 10 == 0
'''

_SAVE_ASKED_EVERY_10 = '''def should_save(step):
    return step % 10 == 0 and multihost_utils.reached_preemption_sync_point(step)
'''

_SAVE_PREEMPTION_ONLY = '''def should_save(step):
    return multihost_utils.reached_preemption_sync_point(step)
'''

_SAVE_ASKED_AFTER_THE_REGULAR = '''def should_save(step):
    return step % 10 == 0 or multihost_utils.reached_preemption_sync_point(step)
'''

_SAVE_OWN_HANDLER = '''import signal

noticed = []
signal.signal(signal.SIGTERM, lambda signum, frame: noticed.append(signum))


def should_save(step):
    return bool(noticed) or step % 10 == 0
'''

_SAVE_BOTH = '''def should_save(step):
    preempted = multihost_utils.reached_preemption_sync_point(step)
    return preempted and step % 10 == 0
'''

_SAVE_FROM_STEP_0 = '''def should_save(step):
    preempted = multihost_utils.reached_preemption_sync_point(step)
    return preempted or (step + 1) % 10 == 0
'''

_SAVE_GLOBAL_SET_BY_HANDLER = '''import signal


def on_sigterm(signum, frame):
    global noticed
    noticed = True


signal.signal(signal.SIGTERM, on_sigterm)


def should_save(step):
    return noticed or step % 10 == 0
'''

_SAVE_HANDLER_INSIDE = '''import signal

noticed = []


def should_save(step):
    signal.signal(signal.SIGTERM, lambda signum, frame: noticed.append(signum))
    return bool(noticed) or step % 10 == 0
'''

_SAVE_HANDLER_INSIDE_ASKS = '''import signal

noticed = []


def should_save(step):
    signal.signal(signal.SIGTERM, lambda signum, frame: noticed.append(signum))
    return multihost_utils.reached_preemption_sync_point(step) or step % 10 == 0
'''

_ASK_JAX = "Ask JAX (reached_preemption_sync_point), which tells every host the same step"


def _handler_inside(source: str | None) -> bool:
    """Whether `source` installs a signal handler inside should_save itself (at every call)."""
    try:
        tree = ast.parse(source or "")
    except SyntaxError:
        return False
    return any(isinstance(node, ast.FunctionDef) and node.name == "should_save"
               and "signal.signal(" in ast.unparse(node) for node in tree.body)


def _own_handler(case) -> str:
    where = ("your function installs a SIGTERM handler at every call: from step 1 it replaces JAX's"
             if _handler_inside(case.source) else "your handler, installed after jax.distributed.initialize, "
             "replaced JAX's")
    return (f"{_unmatched(case.got.text)}: {where}, so only the host that got SIGTERM saw the notice (JAX never "
            "heard of it), and it went into a save alone while the other host went on to its next step. "
            f"{_ASK_JAX}")


_UNDEFINED = re.compile(r"NameError: name '(\w+)' is not defined")


def _undefined(case) -> str:
    found = _UNDEFINED.search(case.got.text)
    name = f"`{found[1]}`" if found else "a name"
    if "signal" in (case.source or ""):
        return (f"your function reads {name} from step 1, but only your SIGTERM handler defines it, once the signal "
                "comes (after step 3, on one host): before that, reading it raised NameError. A handler of your own "
                "also takes the signal from JAX's, so JAX never hears of the notice. Install no handler: "
                f"{_ASK_JAX[0].lower()}{_ASK_JAX[1:]}")
    return (f"your function uses {name}, which the hosts do not define: it runs there alone, with jax, np and "
            "multihost_utils defined. Define what else it needs in the cell")


def _regular_saves(case) -> list:
    """Host 0's saves other than the preemption save, and their steps modulo 10 ([], [] without a verdict)."""
    got = case.got
    return got[0][8:10] if isinstance(got, tuple) and got and isinstance(got[0], list) else [[], []]


def _saves_off_by(case) -> str:
    saves, offsets = _regular_saves(case)
    counted = " (you counted the steps from 0)" if offsets == [9] else ""
    return (f"your regular saves are at {_steps(saves, 3)}{counted}: the loop's steps start at 1, so every "
            "10th step is 10, 20, 30, ...: save when step % 10 == 0")


def _unmatched(text: str) -> str:
    """A run's failure, with the driver's 'collectives did not match: host 0 called ..., host 1 ...' (or JAX's
    `... name mismatch`, when a collective of the answer's own met the driver's) said in the learner's terms."""
    called = re.findall(r"host (\d+) called (\w+\('[^']*'\))", text)
    if len(called) > 1:
        return " while ".join(f"host {h} called `{call}`" for h, call in called)
    mismatch = re.search(r"(\w+) name mismatch", text)
    if mismatch:
        return f"a host called `{mismatch[1]}` while another was in a different collective"
    return text


def _how_asked(case) -> str:
    """How often JAX was asked, on host 0 ('' when the run gave no verdict)."""
    got = case.got
    return got[0][5] if isinstance(got, tuple) and got and isinstance(got[0], list) else ""


def _steps(steps: list[int], most: int) -> str:
    """'steps 1, 2, 3, ...' (the first `most` of `steps`, and '...' when there are more), or 'step 1'."""
    listed = ", ".join(map(str, steps[:most])) + (", ..." if len(steps) > most else "")
    return f"step {listed}" if len(steps) == 1 else f"steps {listed}"


def _asked_some_steps(case) -> str:
    """Which steps JAX was asked about, on host 0, and which loop steps it was not."""
    asked, missed = case.got[0][6:8]
    return (f"JAX was not asked about every step of the loop (it was asked about {_steps(asked, 4)}; "
            f"never about {_steps(missed, 3)}). It answers True when asked about one exact step (one "
            "past the last step any host asked about), and the loop stops, saved, only at a step where JAX "
            "was asked about that same step. Ask JAX about the loop's own step, first, at every step, "
            "then decide")


register(ProcessExercise(
    id="14.1", kernel=KERNEL, answer_name="should_save", signature="(step)",
    title="regular saves every 10 steps, and one save on every host after a preemption notice",
    solution=SAVE_SOLUTION,
    driver=_SAVE_DRIVER,
    setup="from jax.experimental import multihost_utils\n",
    meshes=((2, 1), (2, 2)),
    wrong={
        _SAVE_REGULAR_ONLY: "your function never asks JAX about a preemption: the hosts saved every 10 steps "
                            "and trained on past the notice, so the scheduler's SIGKILL would lose every "
                            "step since the last regular save",
        _SAVE_ASKED_EVERY_10: "you ask JAX only at steps 10, 20, ...: it answers True at one exact step, one past "
                              "the last step it was asked about, which your function never asks about, so no "
                              "host stopped (and none saved, since `and` saves only when both are True)",
        _SAVE_PREEMPTION_ONLY: "the preemption save is right, but the regular saves are missing: save at every "
                               "10th step too",
        _SAVE_OWN_HANDLER: _own_handler,
        _SAVE_HANDLER_INSIDE: _own_handler,  # the run fails as the one above: the message reads the source
        _SAVE_HANDLER_INSIDE_ASKS: "your function installs a SIGTERM handler at every call, which replaces JAX's: "
                                   "the notice went to your handler and JAX never heard of it, so it named no step "
                                   "to save at and the hosts trained on past the notice. Install no handler: ask JAX "
                                   "alone",
        _SAVE_BOTH: "with `and`, your function saves only at a step that is both JAX's preemption step and a 10th "
                    "step: the hosts stopped at JAX's step without saving it, and made no regular save. Combine the "
                    "two with `or`",
    },
    errors=(ErrorRule(lambda raw: raw.startswith("NameError"), example=_SAVE_GLOBAL_SET_BY_HANDLER, say=_undefined),
            ErrorRule(lambda raw: raw.startswith("the run hung") or "name mismatch" in raw
                      or "collectives did not match" in raw, example=(
        "def should_save(step):\n"
        "    if jax.process_index() == 0:\n"
        "        multihost_utils.sync_global_devices('extra')\n"
        "    return step % 10 == 0\n"),
        say=lambda case: f"{_unmatched(case.got.text)}: the hosts' collectives no longer matched, because "
                         "they saved at different steps or one made a collective the other did not. "
                         "Every host must save at the same steps"),),
    families=(OutputRule(lambda case: _how_asked(case) == "some steps", example=_SAVE_ASKED_AFTER_THE_REGULAR,
                         say=_asked_some_steps),
              OutputRule(lambda case: _regular_saves(case)[1] not in ([], [0]), example=_SAVE_FROM_STEP_0,
                         say=_saves_off_by)),
    hints=(
        "Section 2's runs show which setups reach the sync point; a function that asks JAX only now and "
        "then is one of them.",
        "Store JAX's answer in a variable at every step before anything else, then combine it with the "
        "regular condition.",
    ),
))


# ------------------------------------------- 14.2 which step a GCS listing shows as finished

# What `gcloud storage ls --recursive` showed of a run saved to gs://bucket/run with Orbax's
# defaults every 2 steps, after the job was killed during save 6. (The notebook prints the same
# tuple.) Only the newest save can be unfinished: CheckpointManager.save waits for the previous
# save's commit before it starts the next.
GCS_LISTING = (
    "gs://bucket/run/2/_CHECKPOINT_METADATA", "gs://bucket/run/2/commit_success.txt",
    "gs://bucket/run/2/state/manifest.ocdbt",
    "gs://bucket/run/4/_CHECKPOINT_METADATA", "gs://bucket/run/4/commit_success.txt",
    "gs://bucket/run/4/state/manifest.ocdbt",
    "gs://bucket/run/6/_CHECKPOINT_METADATA", "gs://bucket/run/6/state/manifest.ocdbt",
)


def _newest_committed() -> int:
    committed = {int(name.split("/")[4]) for name in GCS_LISTING if name.endswith("/commit_success.txt")}
    return max(committed)


register(ValueExercise(
    id="14.2", kernel=KERNEL, answer_name="resumed_from",
    title="the newest step Orbax lists as finished on GCS",
    solution="resumed_from = 4  # on gs:// a step is finished once it holds commit_success.txt: 6 never got it",
    form=forms.whole("a step number"),
    right=_newest_committed,
    wrong={
        6: "6 is the newest directory, with its metadata and its data, but no commit_success.txt: on GCS "
           "Orbax writes a step straight into its directory and writes that file last, once every host has "
           "written its part, and 6 never got it",
        5: "5 is the first step the resume trains; the checkpoint it restores is the step before it",
        7: "7 would be the first step trained after checkpoint 6, but 6 never finished",
        2: "2 is finished, but a newer step is finished too",
        0: "a finished step is in the listing: a resume continues from it",
    },
    rules=(ValueRule(lambda v: v > 6, example=8, say="the listing has no step after 6"),),
    hints=(
        "On GCS there is no temporary directory and no rename: what marks a step as finished?",
        "Look for the newest step directory that holds commit_success.txt.",
    ),
))


# ------------------------------------ 14.3 what an asynchronous save costs when a host dies

# A job saves every SAVE_EVERY steps with Orbax's own save, which returns at once and commits
# COMMIT_S seconds later in the background; a step takes STEP_S seconds. SIGKILL comes during
# step KILLED (at time KILLED * STEP_S): which finished checkpoint does the restarted job find?
SAVE_EVERY, STEP_S, COMMIT_S, KILLED = 10, 1.0, 8.0, 95


def _resumed_from_async() -> int:
    """The newest save committed before the kill: save s commits at s * STEP_S + COMMIT_S."""
    killed_at = KILLED * STEP_S
    return max(s for s in range(SAVE_EVERY, KILLED, SAVE_EVERY) if s * STEP_S + COMMIT_S < killed_at)


register(ValueExercise(
    id="14.3", kernel=KERNEL, answer_name="resumed_from_async",
    title="the newest save committed before the kill, when saves do not wait",
    solution="resumed_from_async = 80  # save 90 returned at once but commits at 98 s, after the kill at 95 s",
    form=forms.whole("a step number"),
    right=_resumed_from_async,
    wrong={
        90: "save() of step 90 had returned, but the commit comes 8 s later, at 98 s: the kill at 95 s came "
            "first, so step 90 never finished",
        95: "no save was made at step 95: saves come every 10 steps",
        0: "an older save had committed long before the kill",
        70: "70 committed, but so did a newer one",
        81: "81 is the first step the restarted job trains; the checkpoint it restores is the step before it",
        91: "91 would be the first step trained after checkpoint 90, but 90 never committed",
    },
    rules=(ValueRule(lambda v: v > KILLED, example=100, say="the job died during step 95: no later step was saved"),
           ValueRule(lambda v: v % SAVE_EVERY != 0, example=85,
                     say="saves are made every 10 steps only: a finished checkpoint has a step that is a "
                         "multiple of 10")),
    hints=(
        "A save is finished when Orbax commits it, not when save() returns.",
        "Save s starts at s seconds and commits at s + 8 seconds. Which of them are committed at 95 s?",
    ),
))
