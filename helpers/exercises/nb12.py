"""Exercises of notebook 12: when hosts disagree (hangs and crashes in real processes)."""
from __future__ import annotations

import ast
import re

from helpers.exercises import forms
from helpers.exercises.core import Kernel, Mistake, describe, register
from helpers.exercises.kinds import ValueExercise
from helpers.exercises.rules import ErrorRule, OutputRule, ValueRule
from helpers.exercises.processes import ProcessExercise
from helpers.files import course_file

KERNEL = Kernel(devices=8)  # the first cell: use_fake_devices(8)
MYSTERY = course_file("scripts/mystery_hang.py")


# ------------------------------------------------------------- real runs that may hang

_SAME_ORDER = "A collective finishes only when every host calls it, in the same order"


def _hung(case) -> str:
    """The verdict on a hang, with the rule it broke said once (the launcher's account may say it already)."""
    text = case.got.text
    return text if _SAME_ORDER in text else f"{text}. {_SAME_ORDER}"


def _any_hang(example: str) -> ErrorRule:
    """A rule for every run that hangs in a way the catalogue does not name; `example` does."""
    return ErrorRule(lambda raw: raw.startswith("the run hung"), example=example, say=_hung)


_SETUP = "from jax.experimental import multihost_utils\n"
# 12.1's function also has the demos' global_mean (the PREAMBLE of notebook 12's first cell)
_LOG_SETUP = _SETUP + "global_mean = jax.jit(jnp.mean)  # on a global array: a collective\n"
_JOIN = ("from helpers.launch import initialize\ninitialize()\n"
         "print('joined', flush=True)\n{answer}\n"
         "import json\n"
         "mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), ('host', 'device'))\n"
         "rows = NamedSharding(mesh, P(('host', 'device')))\n"
         "host = jax.process_index()\n")


# ------------------------------------------------------------------ 12.1 host-0 logging

_LINE = re.compile(r"step (\d+): mean -?\d+\.\d\d")  # the prompt's f"step {step}: mean {m:.2f}"


def _wrong_step(case):
    """(the step, the line host 0 logged at it) for the first line whose step number is not its step; or None."""
    return next(((step, line) for step, line in enumerate(_host0_lines(case))
                 if isinstance(line, str) and (m := _LINE.fullmatch(line)) and int(m.group(1)) != step), None)


def _says_wrong_step(case) -> str:
    step, line = _wrong_step(case)
    logged = int(_LINE.fullmatch(line).group(1))
    why = ("one step ahead. `step` already counts from 0: log it as it is, not step + 1" if logged == step + 1
           else "one step behind: log `step` as it is" if logged == step - 1
           else "a line carries the step it is logged at, `step`")
    return f"host 0 logged {line!r} at step {step}: {why}"


def _host0_lines(case) -> list:
    """What host 0 logged at each step ([] when the run gave no lines)."""
    return list(case.got[0]) if isinstance(case.got, tuple) and case.got and case.got[0] else []


def _another_host_logs(case):
    """The first host other than 0 that returned lines while host 0 returned only None; else None."""
    lines = case.got if isinstance(case.got, tuple) else ()
    if not _host0_lines(case) or any(line is not None for line in _host0_lines(case)):
        return None
    return next((host for host, logged in enumerate(lines) if host and logged
                 and all(isinstance(line, str) for line in logged)), None)


_LOG_DRIVER = _JOIN + (
    "lines = []\n"
    "for step in range(3):\n"
    "    local = np.arange(jax.local_device_count(), dtype=np.float32) + 10 * host + step\n"
    "    x = jax.make_array_from_process_local_data(rows, local)\n"
    "    lines.append(log_line(step, x))\n"
    "# what each host logged: its line as it is (a str or None), or what else it returned\n"
    "logged = [line if line is None or isinstance(line, str) else f'not a str: {type(line).__name__} {line!r}'[:60]\n"
    "          for line in lines]\n"
    "print(json.dumps(logged))\n")

LOG_SOLUTION = '''def log_line(step, x):
    """The line host 0 logs at this step, like 'step 0: mean 5.50'; None on every other host."""
    mean = float(global_mean(x))  # a collective: every host computes it
    if jax.process_index() == 0:
        return f"step {step}: mean {mean:.2f}"
    return None
'''

_LOG_ON_HOST_0_ONLY = '''def log_line(step, x):
    if jax.process_index() == 0:
        return f"step {step}: mean {float(jnp.mean(x)):.2f}"
    return None
'''

_LOG_EVERYWHERE = '''def log_line(step, x):
    return f"step {step}: mean {float(jnp.mean(x)):.2f}"
'''

_LOG_PRINTS = '''def log_line(step, x):
    mean = float(jnp.mean(x))
    if jax.process_index() == 0:
        print(f"step {step}: mean {mean:.2f}")
'''

_LOG_EMPTY_ELSEWHERE = '''def log_line(step, x):
    mean = float(global_mean(x))
    if jax.process_index() == 0:
        return f"step {step}: mean {mean:.2f}"
    return ""
'''

_LOG_LOCAL_MEAN = '''def log_line(step, x):
    mean = float(np.mean([np.asarray(s.data) for s in x.addressable_shards]))
    if jax.process_index() == 0:
        return f"step {step}: mean {mean:.2f}"
    return None
'''

register(ProcessExercise(
    id="12.1", kernel=KERNEL, answer_name="log_line", title="every host runs the collective; only host 0 logs",
    solution=LOG_SOLUTION,
    driver=_LOG_DRIVER,
    setup=_LOG_SETUP,
    meshes=((2, 1), (2, 2)),
    wrong={
        _LOG_ON_HOST_0_ONLY: "the run hung: host 0 computed the mean, a collective, and waited for "
                             "host 1, which skipped it. Compute the mean on every host; only "
                             "the returning of the line belongs under the if",
        _LOG_EVERYWHERE: "every host returns a line; the other hosts should return None",
        _LOG_PRINTS: "your function returns None on every host: host 0 should return its line "
                     "(the loop that calls log_line prints it), not print it",
        _LOG_EMPTY_ELSEWHERE: "almost: the other hosts return '', an empty line; they have nothing to log, "
                              "so they return None",
        _LOG_LOCAL_MEAN: "that is the mean of host 0's own rows; the line should report the "
                         "mean of the whole global array",
    },
    errors=(_any_hang('def log_line(step, x):\n'
                 '    if jax.process_index() == 1:\n'
                 '        jnp.mean(x).block_until_ready()\n'
                 '    return None\n'),),
    families=(
        OutputRule(_another_host_logs,
             example='def log_line(step, x):\n'
                     '    mean = float(global_mean(x))\n'
                     '    return f"step {step}: mean {mean:.2f}" if jax.process_index() == jax.process_count() - 1 else None\n',
             say=lambda case: f"host 0 returned None at every step and host {_another_host_logs(case)} returned the "
                              "lines: the line is host 0's to log (jax.process_index() == 0), the others return None"),
        OutputRule(lambda case: _host0_lines(case) and not all(isinstance(line, str) and not line.startswith("not a str")
                                                         for line in _host0_lines(case)),
             example='def log_line(step, x):\n'
                     '    mean = float(global_mean(x))\n'
                     '    return mean if jax.process_index() == 0 else None\n',
             say=lambda case: f"host 0 returned {str(_host0_lines(case)[0]).removeprefix('not a str: ')} at step 0, "
                              "not the line: return the str "
                              "f\"step {step}: mean {m:.2f}\" itself"),
        OutputRule(lambda case: _host0_lines(case) and not all(_LINE.fullmatch(line) for line in _host0_lines(case)),
             example='def log_line(step, x):\n'
                     '    mean = float(global_mean(x))\n'
                     '    return f"step {step}: mean {mean:.3f}" if jax.process_index() == 0 else None\n',
             say=lambda case: f"host 0 logged {_host0_lines(case)[0]!r} at step 0: the prompt asks for exactly the "
                              "line f\"step {step}: mean {m:.2f}\", two decimals"),
        OutputRule(lambda case: _wrong_step(case) is not None,
             example='def log_line(step, x):\n'
                     '    mean = float(global_mean(x))\n'
                     '    return f"step {step + 1}: mean {mean:.2f}" if jax.process_index() == 0 else None\n',
             say=_says_wrong_step),
    ),
    hints=(
        "`jnp.mean(x)` on a global array is a collective: it finishes only when every host has "
        "called it.",
        "Compute the mean first, on every host; then decide, with jax.process_index(), who returns "
        "the line.",
    ),
))


# ------------------------------------------------------------------ 12.2 read two stack dumps

# The notebook's `spins` run: the demos' 9-line preamble, an empty line, then a loop in which line 13
# dispatches global_mean, line 14 reads its result with float() and line 15 spins on host 1 after step 0.
# tests/test_nb12_exercises.py holds these lines to the dumps of the committed notebook.
SCRIPT_LINES = 15
CALL_LINE, READ_LINE, LOOP_LINE = 13, 14, 15
STATES = ("waiting", "computing")
_ACTIVITY_WORDS = ("idle", "busy", "waking")


def _state(answer) -> str:
    """'waiting' or 'computing', in any case."""
    word = answer.strip().lower() if isinstance(answer, str) else None
    if word in STATES:
        return word
    if word in _ACTIVITY_WORDS:
        raise Mistake(f"{answer!r} is the launcher's word for what the CPU did; the state is what that "
                      "means for the host: \"waiting\" or \"computing\"")
    raise Mistake(f"expected \"waiting\" or \"computing\" as a host's state, but got {describe(answer)}")


_PAIR = forms.tuple_of(_state, forms.whole("a line of the script"), like='("waiting", 12)', what="(state, line)")


def _where(answer) -> tuple:
    """{0: (state, line), 1: (state, line)}, or the two pairs as a tuple in host order."""
    if isinstance(answer, dict):
        return forms.keys((0, 1), _PAIR, "a (state, line) pair")(answer)
    if isinstance(answer, (tuple, list)) and len(answer) == 2:
        return _PAIR(answer[0]), _PAIR(answer[1])
    raise Mistake('expected a dict like {0: ("waiting", 12), 1: ("computing", 12)}, one (state, line) per '
                  f"host; got {describe(answer)}")


def _host_says(host: int, what: str):
    """A rule's message about one host: `what` it got wrong."""
    return lambda answer: f"host {host} at line {answer[host][1]}: {what}"


register(ValueExercise(
    id="12.2", kernel=KERNEL, answer_name="where",
    title="host 0 waits where it reads the result, under JAX's _value; host 1 computes in its loop",
    solution=f'where = {{0: ("waiting", {READ_LINE}), 1: ("computing", {LOOP_LINE})}}',
    form=_where,
    right=lambda: (("waiting", READ_LINE), ("computing", LOOP_LINE)),
    wrong={
        (("waiting", CALL_LINE), ("computing", LOOP_LINE)):
            f"host 0 did not wait in line {CALL_LINE}: with 2 devices per host JAX dispatches a jitted call "
            "asynchronously, so global_mean(x) returned at once. Its dump puts it in the line where float(m) "
            "asks for the value (`__float__`, then `_value`: waiting for the devices)",
        (("computing", READ_LINE), ("computing", LOOP_LINE)):
            "host 0 was idle: its CPU did almost nothing, and `_value` on top of its dump waits for the "
            "devices. It is waiting, for host 1 in the all-reduce",
        (("waiting", READ_LINE), ("waiting", LOOP_LINE)):
            f"host 1 was busy on the CPU, and its dump has no frame of JAX on top of line {LOOP_LINE}: it is "
            "computing, in a loop that never ends, so it never reaches step 1's all-reduce",
        (("computing", LOOP_LINE), ("waiting", READ_LINE)):
            "you swapped the hosts: host 0's dump has `_value` on top of its line, host 1's dump is its loop",
    },
    rules=(
        ValueRule(lambda a: any(line > SCRIPT_LINES for _, line in a), example=(("waiting", 696), ("computing", LOOP_LINE)),
                  say=lambda a: f"line {max(line for _, line in a)} is not a line of the script (it has "
                                f"{SCRIPT_LINES}): that number is from JAX's own source. Give the innermost "
                                "line of the script, under JAX's frames"),
        ValueRule(lambda a: a[0][0] == "computing" and a[1][0] == "waiting",
                  example=(("computing", READ_LINE), ("waiting", LOOP_LINE)),
                  say="the states are swapped: an idle host is waiting, a busy one is computing"),
        ValueRule(lambda a: a[0][1] != READ_LINE, example=(("waiting", 12), ("computing", LOOP_LINE)),
                  say=_host_says(0, "host 0's dump does not end in that line; its last frame is the innermost "
                                    "line of the script, under JAX's frames")),
        ValueRule(lambda a: a[1][1] != LOOP_LINE, example=(("waiting", READ_LINE), ("computing", READ_LINE)),
                  say=_host_says(1, "host 1's dump has one frame only, and it is not that line")),
    ),
    otherwise="read each host's activity and the top of its dump again",
    hints=(
        "A dump lists the innermost frame first. JAX's frames sit on top of the line of your script "
        "that called into JAX; the line of the script is the one to give.",
        "An idle host waits, a busy one computes. `_value` in jax/_src/array.py waits for the devices "
        "to finish a result: which line asked for one?",
    ),
))


# ------------------------------------------------------------------ 12.3 uneven epochs

# Batches per host: on 2 hosts the fewest are on the last host, on 3 hosts on the middle one, and never
# on host 0; and there are 2 of them, so that no count but the fewest is right on both meshes.
BATCHES = (4, 2, 6)
_EPOCH_DRIVER = _JOIN + (
    f"BATCHES = {BATCHES}\n"
    "my_batches = BATCHES[host]\n"
    "data = [np.full(jax.local_device_count(), 10.0 * host + b, np.float32) for b in range(my_batches)]\n"
    "steps = steps_together(my_batches)\n"
    "means = []\n"
    "for step in range(int(steps)):\n"
    "    x = jax.make_array_from_process_local_data(rows, data[step])\n"
    "    means.append(round(float(jnp.mean(x)), 4))\n"
    "print(json.dumps([int(steps), means]))\n")

EPOCH_SOLUTION = '''from jax.experimental import multihost_utils


def steps_together(my_batches):
    """How many steps every host runs this epoch: the fewest batches any host has."""
    every_count = multihost_utils.process_allgather(np.int32(my_batches))  # one per host
    return int(every_count.min())
'''

_EPOCH_OWN_COUNT = '''def steps_together(my_batches):
    return my_batches
'''

_EPOCH_HOST_0_COUNT = '''from jax.experimental import multihost_utils


def steps_together(my_batches):
    return int(multihost_utils.broadcast_one_to_all(np.int32(my_batches)))
'''

_EPOCH_LAST_HOST_COUNT = '''from jax.experimental import multihost_utils


def steps_together(my_batches):
    return int(multihost_utils.process_allgather(np.int32(my_batches))[-1])
'''

_EPOCH_FEWER = '''from jax.experimental import multihost_utils


def steps_together(my_batches):
    return int(multihost_utils.process_allgather(np.int32(my_batches)).min()) - 1
'''


def _fewer_steps(case) -> bool:
    """Every host ran the same number of steps, with no error, but fewer than every host has batches for."""
    got, want = case.got, case.want
    if not (isinstance(got, tuple) and isinstance(want, tuple) and len(got) == len(want)):
        return False
    counts = {g[0] if isinstance(g, list) and g and isinstance(g[0], int) else None for g in got}
    return len(counts) == 1 and None not in counts and counts.pop() < want[0][0]


def _says_fewer_steps(case) -> str:
    hosts, ran = len(case.got), case.got[0][0]
    return (f"on {hosts} hosts, with {', '.join(map(str, BATCHES[:hosts]))} batches, every host ran "
            f"{ran} step{'' if ran == 1 else 's'}: the hosts agree, but on fewer steps than every host could run "
            f"({case.want[0][0]}). Run the fewest batches any host has, no fewer")


_EPOCH_HOST_0_BROADCASTS = '''from jax.experimental import multihost_utils


def steps_together(my_batches):
    if jax.process_index() == 0:
        return int(multihost_utils.broadcast_one_to_all(np.int32(my_batches)))
    return my_batches
'''

register(ProcessExercise(
    id="12.3", kernel=KERNEL, answer_name="steps_together",
    title="every host runs the fewest batches any host has, so the epoch ends together",
    solution=EPOCH_SOLUTION,
    driver=_EPOCH_DRIVER,
    setup=_SETUP,
    meshes=((2, 1), (3, 1)),
    wrong={
        _EPOCH_OWN_COUNT: "the run hung: each host ran its own number of steps, so host 1 finished "
                          "while host 0 waited in a collective of a step host 1 never ran",
        _EPOCH_HOST_0_BROADCASTS: lambda case: (
            f"{case.got.text.removeprefix('the run was stopped: ').split('. ')[0]}: broadcast_one_to_all is a "
            "collective, so every host must call it, not host 0 alone. (And host 0's count is more batches "
            "than some host has: count with every host's number)"),
        # before host 0's count: on 3 hosts both run out of data on host 1 (host 0's count fails on 2 hosts first)
        _EPOCH_LAST_HOST_COUNT: lambda case: (
            f"a host ran out of data on {case.layout[0]} hosts ({case.got.text}): you took the last "
            "host's count, [-1]. The fewest batches may be on any host (here, on host 1 of 3): take the "
            "smallest of every host's counts"),
        _EPOCH_HOST_0_COUNT: lambda case: (
            f"a host ran out of data ({case.got.text}): your count is more batches than some "
            "host has. Host 0's count, or the largest, is not one every host can run"),
    },
    errors=(_any_hang('def steps_together(my_batches):\n'
                 '    if jax.process_index() == 0:\n'
                 '        multihost_utils.sync_global_devices("counting")\n'
                 '    return 1\n'),
            ErrorRule(lambda raw: "'NoneType'" in raw, example=(
                'def steps_together(my_batches):\n'
                '    print(int(multihost_utils.process_allgather(np.int32(my_batches)).min()))\n'),
                say="steps_together returns None: return the number of steps every host runs, an int "
                    "(a print shows it, but the loop that calls steps_together gets nothing)")),
    families=(OutputRule(_fewer_steps, example=_EPOCH_FEWER, say=_says_fewer_steps),),
    hints=(
        "Every host must run the same number of steps, and no host can run more steps than it "
        "has batches.",
        "multihost_utils.process_allgather(np.int32(my_batches)) gives every host every host's "
        "count, one per host.",
    ),
))


# ------------------------------------------------------------------ 12.4 read the logs

def _mystery_answer() -> tuple[int, int]:
    """(the host the others wait for, the step they wait in), from the script's own settings."""
    tree = ast.parse(MYSTERY.read_text(encoding="utf-8"))
    settings = {t.id: ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)
                and t.id in ("STEPS", "CORRUPT")}
    (skipper, _), = settings["CORRUPT"].items()
    # the skipper makes one collective fewer: the others wait in their last step
    return skipper, settings["STEPS"] - 1


register(ValueExercise(
    id="12.4", kernel=KERNEL, answer_name="stuck",
    title="hosts 0 and 2 wait in step 4 for host 1, which skipped a batch and finished early",
    solution="stuck = (1, 4)  # host 1 skipped step 2, so its steps 3 and 4 met the others' 2 and 3",
    form=forms.tuple_of(forms.whole("a host"), forms.whole("a step"),
                        like="(0, 1)", what="(the host the others wait for, the step they wait in)"),
    right=_mystery_answer,
    wrong={
        (1, 2): "host 1 went wrong at step 2, but nobody waited there: every host kept going. "
                "Compare the losses the hosts print for steps 2 to 4",
        (1, 3): "step 3 finished on every host (each printed a loss for it); look for the step "
                "no host 0 or host 2 line reports",
        (4, 1): "that is (step, host): give the host first, then the step",
    },
    rules=(
        ValueRule(lambda a: a[0] not in (0, 1, 2), example=(3, 4),
             say="the run has 3 hosts: 0, 1 and 2"),
        ValueRule(lambda a: a[0] in (0, 2), example=(0, 4),
             say=lambda a: f"host {a[0]} is one of the hosts that wait, not the one they wait for"),
        ValueRule(lambda a: a[0] == 1, example=(1, 5),
             say="the host is right; now the step: the last loss hosts 0 and 2 print is of step 3"),
    ),
    otherwise="read the three hosts' output again: which host printed something the others did not, "
              "and where do the others stop?",
    hints=(
        "A collective does not know about steps: it pairs each host's first call with the others' "
        "first, the second with the second, and so on.",
        "Host 1 printed 'skipped' for step 2 and made no collective there. Its step 3 then met the "
        "other hosts' step 2: the losses match. Count what each host has left afterwards.",
    ),
))
