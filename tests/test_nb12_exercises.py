"""Exercises that run real processes (notebooks 08, 10-12): what a failed or hung run is judged as.

The catalogue of each exercise is tested in tests/test_exercises.py; these tests cover the parts
of `processes.ProcessExercise` that the catalogue alone cannot reach.
"""
import pytest

from helpers import launch
from helpers.exercises import Kernel, Mistake, NotAttempted, ProcessExercise, get
from helpers.exercises.kinds import Raised
from helpers.exercises.processes import failure
from helpers.launch.result import HostResult, RunResult
from helpers.launch.stall import Code

LOST_PEER = ("Traceback (most recent call last):\n"
             "jax.errors.JaxRuntimeError: UNKNOWN: Gloo AllGather failed: Connection closed by peer\n")


def _run(*hosts: HostResult, failed_first=()) -> RunResult:
    return RunResult(hosts=hosts, devices_per_host=1, message="", failed_first=failed_first)


def test_the_host_that_failed_first_is_named_not_the_one_that_lost_its_peer():
    result = _run(HostResult(0, "failed", 1, "", LOST_PEER),
                  HostResult(1, "failed", 1, "", "IndexError: list index out of range\n"), failed_first=(1, 0))
    assert failure(result) == Raised("IndexError: list index out of range on host 1")


def test_a_hang_says_where_each_host_was_in_the_learners_code():
    dump = ('Current thread 0x00007f97cac41b80 (most recent call first):\n'
            '  File "site-packages/jax/experimental/multihost_utils.py", line 86 in broadcast_one_to_all\n'
            '  File "<answer 0>", line 12 in init_state\n'
            '  File "<string>", line 1 in <module>\n')
    result = _run(HostResult(0, "timed out", None, "", dump), HostResult(1, "timed out", None, "", "", script_ended=True))
    code = (Code("<answer 0>", 10, "def init_state(x):\n    if jax.process_index() == 0:\n"
                                  "        x = multihost_utils.broadcast_one_to_all(x)\n    return x\n"),)
    assert failure(result, code).text == (
        "the run was stopped: host 0 is waiting in `multihost_utils.broadcast_one_to_all` at line 3 "
        "(`x = multihost_utils.broadcast_one_to_all(x)`); "
        "host 1 never called it. A collective finishes only when every host calls it, in the same order")


def test_a_loop_is_named_at_its_line_after_the_limit():
    dump = ('Current thread 0x00007f97cac41b80 (most recent call first):\n'
            '  File "<answer 0>", line 11 in spin\n'
            '  File "<string>", line 1 in <module>\n')
    result = RunResult(hosts=(HostResult(0, "timed out", None, "", ""), HostResult(1, "timed out", None, "", dump)),
                       devices_per_host=1, message="", stopped_after=15.0)
    code = (Code("<answer 0>", 10, "def spin():\n    while True:\n        pass\n"),)
    assert failure(result, code).text == (
        "the run was stopped: host 1 is still computing at line 2 (`while True:`) after 15 s: a loop that "
        "never ends?; host 0 was still running")


def test_the_host_that_raised_is_blamed_not_a_host_the_launcher_stopped(monkeypatch):
    """Host 0 was stopped because host 1 raised: the verdict quotes host 1's error, on host 1."""
    def fake_run(source, hosts, **options):
        if "1 / 0" not in source:  # the reference: every host prints its rank
            return RunResult(tuple(HostResult(h, "ok", 0, f"{h}\n", "") for h in range(hosts)), 1, "")
        return _run(HostResult(0, "stopped", None, "", ""), *(
            HostResult(h, "failed", 1, "", "ZeroDivisionError: division by zero\n") for h in range(1, hosts)),
            failed_first=tuple(range(1, hosts)))

    monkeypatch.setattr(launch, "run", fake_run)
    exercise = ProcessExercise(id="99.3", title="ranks", answer_name="rank", solution="def rank():\n    return 0\n",
                               hints=("a", "b"), kernel=Kernel(devices=8), driver="{answer}", meshes=((2, 1), (3, 1)))
    with pytest.raises(Mistake, match=r"^your function raised ZeroDivisionError: division by zero on host 1$"):
        exercise.judge("def rank():\n    return 1 / 0\n")


@pytest.mark.parametrize("ex_id", ["08.4", "10.3", "10.4", "11.1", "11.2", "11.4", "12.1", "12.3"])
def test_a_stub_or_a_non_function_is_told_without_starting_a_process(ex_id, monkeypatch):
    def no_run(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(launch, "run", no_run)
    exercise = get(ex_id)
    stub = f"def {exercise.answer_name}(*args):\n    raise NotImplementedError\n"
    with pytest.raises(NotAttempted):
        exercise.judge(stub)
    with pytest.raises(NotAttempted):
        exercise.judge(exercise.run_source(stub))  # made from source: no cell to read
    with pytest.raises(Exception, match="expected a function"):
        exercise.judge(42)


def test_hosts_caught_anywhere_in_one_loop_are_named_at_the_loop():
    dump = ('Current thread 0x00007f97cac41b80 (most recent call first):\n'
            '  File "<answer 0>", line {} in spin\n'
            '  File "<string>", line 1 in <module>\n')
    result = RunResult(hosts=(HostResult(0, "timed out", None, "", dump.format(12)),
                              HostResult(1, "timed out", None, "", dump.format(11))),
                       devices_per_host=1, message="", stopped_after=15.0)
    code = (Code("<answer 0>", 10, "def spin():\n    while True:\n        pass\n"),)
    assert failure(result, code).text == (
        "the run was stopped: hosts 0 and 1 are still computing at line 2 (`while True:`) after 15 s: "
        "a loop that never ends?")


def test_exercise_12_2s_lines_are_those_of_the_committed_notebooks_run():
    """12.2's right answer is fixed in helpers/exercises/nb12.py; the run it is about is the notebook's."""
    import json

    from helpers.exercises import nb12
    from helpers.files import course_file

    cells = json.loads(course_file("12_when_hosts_disagree.ipynb").read_text())["cells"]
    shown = next("".join(o.get("text", "")) for c in cells if c["cell_type"] == "code"
                 and c["source"] and "".join(c["source"]).startswith("spins = ") for o in c["outputs"])
    listing = {n: text.strip() for n, text in (line.strip().split("  ", 1) for line in shown.splitlines()
                                               if line[:3].strip().isdigit())}
    assert "global_mean(x)" in listing[str(nb12.CALL_LINE)] and "float(m)" in listing[str(nb12.READ_LINE)]
    assert listing[str(nb12.LOOP_LINE)].startswith("while") and max(map(int, listing)) == nb12.SCRIPT_LINES
    assert ("host 0: idle; its dump:\n    jax/_src/array.py in _value\n    jax/_src/profiler.py in wrapper\n"
            f"    jax/_src/array.py in __float__\n    script line {nb12.READ_LINE}\n") in shown
    assert f"host 1: busy; its dump:\n    script line {nb12.LOOP_LINE}\n" in shown
