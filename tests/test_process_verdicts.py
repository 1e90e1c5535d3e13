"""Every exercise judged in real processes, given a hang and an endless loop: the verdict names what
happened in the learner's terms, comes at the checks' limits (a hang at the idle limit, a loop at
the stall limit; never the run's timeout), and quotes no gloo, coordination-service or XLA text.
The suite shortens the stall limit (conftest.py): a run stopped after TEST_STALL_SECONDS is one
that asked for the checks' STALL_SECONDS."""
import re

import pytest

from helpers import exercises, launch
from helpers.exercises import ProcessExercise, core
from helpers.exercises.core import MEMO
from helpers.exercises.processes import IDLE_SECONDS
from helpers.emulated.topology import emulated_hosts
from conftest import TEST_STALL_SECONDS

PROCESS_IDS = [i for i in exercises.all_ids() if isinstance(exercises.get(i), ProcessExercise)]
# What each exercise's function returns once past the hang (the kernel's precheck of 11.2 wants a whole number).
RETURNS = {"08.4": "0.0", "11.1": "0.0", "10.3": "args[0]", "10.4": "None",
           "11.2": "8", "12.1": "None", "12.3": "1",
           "11.4": "{'id': np.zeros(0, np.int32)}", "14.1": "False", "15.1": "0", "16.1": "None", "17.1": "None"}
# An exercise whose driver makes collectives of its own meets host 0's extra one in the driver's,
# so JAX reports a mismatch at once instead of a hang: each host raises, naming its own call, and
# the verdict names neither (the hosts' exits race when the machine is loaded: processes.failure).
HANG_SAYS = {"14.1": re.compile(r"a host called `sync_global_devices` while another was in a different collective"),
             # 16.1's hosts go on to the reference's collectives (device_put, the step): gloo sees the mismatch
             "16.1": re.compile(r"the hosts' collectives did not match|host 0 called `sync_global_devices` at line 4")}
RUNTIME_TEXT = re.compile(r"gloo|DEADLINE_EXCEEDED|coordination|XlaRuntimeError|JaxRuntimeError|GetKeyValue",
                          re.IGNORECASE)


def _hang(exercise) -> str:
    """The learner's function with a collective on host 0 only."""
    return (f"def {exercise.answer_name}(*args):\n"
            "    from jax.experimental import multihost_utils\n"
            "    if jax.process_index() == 0:\n"
            "        multihost_utils.sync_global_devices('only host 0')\n"
            f"    return {RETURNS.get(exercise.id, 'None')}\n")


def _loop(exercise) -> str:
    """An endless loop that sleeps, so the hosts leave the cores to the rest of the suite."""
    return f"def {exercise.answer_name}(*args):\n    import time\n    while True:\n        time.sleep(0.01)\n"


def _judged(ex_id: str, source: str, monkeypatch) -> tuple[str, list]:
    """The verdict on `source`, and the results of the real runs of `source` (not the catalogue's)."""
    results, real_run = [], launch.run

    def recording_run(*args, **kwargs):
        result = real_run(*args, **kwargs)
        script = kwargs.get("source", "")
        if source in script or repr(source) in script:  # a together driver holds sources as literals
            results.append(result)
        return result

    monkeypatch.setattr(launch, "run", recording_run)
    exercise = exercises.get(ex_id)
    with emulated_hosts(exercise.kernel.hosts or 1):
        status, message = exercises.verdict(ex_id, source)
    assert status == "mistake"
    assert not RUNTIME_TEXT.search(message), message
    return message, results


def test_every_exercise_judged_in_processes_is_covered():
    assert set(PROCESS_IDS) <= set(RETURNS)


@pytest.mark.parametrize("ex_id", PROCESS_IDS)
def test_a_collective_on_host_0_only_is_named_at_the_idle_limit(ex_id, monkeypatch):
    message, results = _judged(ex_id, _hang(exercises.get(ex_id)), monkeypatch)
    if ex_id in HANG_SAYS:
        assert HANG_SAYS[ex_id].search(message), message
        return
    assert "host 0 called `sync_global_devices` at line 4; host 1 never called it" in message
    # at the idle limit; or, where the hosts compile for long (10.4's NNX programs), at the stall limit
    assert results and all(r.stopped_after in (IDLE_SECONDS, TEST_STALL_SECONDS) for r in results)


@pytest.mark.parametrize("ex_id", PROCESS_IDS)
def test_an_endless_loop_is_named_as_one(ex_id, monkeypatch):
    if exercises.get(ex_id).precheck is not None:  # stopped in the kernel by the clock: 10 s here, not 60
        monkeypatch.setattr(core, "WAIT_FACTOR", 1)
    message, results = _judged(ex_id, _loop(exercises.get(ex_id)), monkeypatch)
    assert "a loop that never ends" in message
    if exercises.get(ex_id).precheck is None:  # a precheck stops it in the kernel, before any run
        # how the hosts spent the wait ("waking up again and again") is said only where every host's CPU
        # said the same: on a loaded machine a sleeping loop that waits for a core reads as busy (CI, 2026-12-06)
        assert re.search(rf"still computing at line 3 \(`while True:`\) after {TEST_STALL_SECONDS:g} s"
                         r"(, waking up again and again|, busy on the CPU)?: a loop that never ends\?", message), message
        assert results and all(r.stopped_after == TEST_STALL_SECONDS for r in results)


@pytest.mark.exercise("15.1")  # beside its catalogue's runs, 15.1's timings were not its own (CI, 2026-12-06)
def test_a_right_answer_in_the_learners_own_words_passes_in_one_run(monkeypatch):
    """A together exercise runs the learner's function and its reference in one run: all a right answer needs."""
    runs, real_run = [], launch.run
    monkeypatch.setattr(launch, "run", lambda *args, **kwargs: runs.append(1) or real_run(*args, **kwargs))
    MEMO.forget(lambda key: key[0] == "15.1")
    exercise = exercises.get("15.1")
    with emulated_hosts(exercise.kernel.hosts or 1):
        status, message = exercises.verdict("15.1", exercise.solution + "\n# in my own words\n")
    assert status == "pass", message
    assert len(runs) == 1


def test_a_spinning_loop_is_named_apart_from_the_host_that_waits_for_it(monkeypatch):
    """12.1: host 1 spins in a loop, host 0 waits for the next step's global_mean in its own line
    (under JAX's `_value` frames, or inside the call on one device): the CPU tells the loop from the wait."""
    spin = ("def log_line(step, x):\n"
            "    m = float(global_mean(x))\n"
            "    while jax.process_index() == 1:\n"
            "        pass\n"
            "    if jax.process_index() == 0:\n"
            "        return f'step {step}: mean {m:.2f}'\n")
    message, results = _judged("12.1", spin, monkeypatch)
    assert (f"host 1 is still computing at line 3 (`while jax.process_index() == 1:`) after "
            f"{TEST_STALL_SECONDS:g} s, busy on the CPU: a loop that never ends?; host 0 is waiting in "
            "`global_mean` at line 2 (`m = float(global_mean(x))`)") in message
    assert [r.stopped_after for r in results] == [TEST_STALL_SECONDS]
