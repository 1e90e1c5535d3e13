"""Notebook 12's exercises that run real processes: what a failed or hung run is judged as.

The catalogue of each exercise is tested in tests/test_exercises.py; these tests cover the
parts of helpers/exercises/nb12.py that the catalogue alone cannot reach.
"""
import pytest

from helpers import launch
from helpers.exercises import NotAttempted, get
from helpers.exercises.kinds import Raised
from helpers.exercises.nb12 import _outcome
from helpers.launch_result import HostResult, RunResult

LOST_PEER = ("Traceback (most recent call last):\n"
             "jax.errors.JaxRuntimeError: UNKNOWN: Gloo AllGather failed: Connection closed by peer\n")


def _run(*hosts: HostResult) -> RunResult:
    return RunResult(hosts=hosts, devices_per_host=1, message="")


def test_the_host_that_failed_first_is_named_not_the_one_that_lost_its_peer():
    result = _run(HostResult(0, "failed", 1, "", LOST_PEER),
                  HostResult(1, "failed", 1, "", "IndexError: list index out of range\n"))
    assert _outcome(result) == Raised("host 1 failed: IndexError: list index out of range")


def test_a_hang_says_which_hosts_ran_and_which_had_ended():
    result = _run(HostResult(0, "timed out", None, "", ""),
                  HostResult(1, "timed out", None, "", "", script_ended=True))
    assert _outcome(result) == Raised(
        "the run hung: host 0 was still running; host 1 had ended its script")


@pytest.mark.parametrize("ex_id", ["12.1", "12.2"])
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
