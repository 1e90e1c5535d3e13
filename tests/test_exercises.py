"""Every exercise in the registry: the reference passes, known mistakes get their message,
the stub says "not attempted", and garbage never crashes the checker."""
import pytest

from helpers import exercises
from helpers.exercises import core
from tools.nbrun import course_notebooks, exercise_id, read

IDS = exercises.all_ids()
WRONG = [(i, n) for i in IDS for n in range(len(exercises.get(i).wrong_answers))]
GARBAGE = [None, 3, "P('host')", [], {"a": 1}, object(), (lambda *a, **k: 1 / 0), float("nan")]


def test_the_course_has_exercises():
    assert len(IDS) >= 3


@pytest.mark.parametrize("ex_id", IDS)
def test_reference_solution_passes(ex_id, capsys):
    assert exercises.check(ex_id, exercises.reference(ex_id)) == True  # noqa: E712 (a Verdict)
    assert capsys.readouterr().out.startswith(f"✅ {ex_id}")


@pytest.mark.parametrize("ex_id,n", WRONG, ids=[f"{i}-wrong{n}" for i, n in WRONG])
def test_known_wrong_answer_gets_its_message(ex_id, n):
    exercise = exercises.get(ex_id)
    wrong = exercise.wrong_answers[n]
    status, message = exercises.verdict(ex_id, exercise.run_source(wrong.source))
    assert status == "mistake"
    assert wrong.message in message, f"expected {wrong.message!r} in {message!r}"


@pytest.mark.parametrize("ex_id", IDS)
def test_every_exercise_catalogues_at_least_two_mistakes(ex_id):
    assert len(exercises.get(ex_id).wrong_answers) >= 2
    assert len(exercises.get(ex_id).hints) >= 2


@pytest.mark.parametrize("ex_id", IDS)
def test_untouched_stub_is_not_attempted(ex_id, capsys):
    assert not exercises.check(ex_id, ...)
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("ex_id", IDS)
def test_garbage_never_raises(ex_id):
    for garbage in GARBAGE + list(exercises.get(ex_id).garbage):
        status, message = exercises.verdict(ex_id, garbage, time_limit=5)
        assert status in ("mistake", "not-attempted"), (garbage, status, message)
        assert "Traceback" not in message


def test_a_function_that_never_returns_is_stopped():
    def spin(*args, **kwargs):
        while True:
            pass

    function_ids = [i for i in IDS if "def " in exercises.get(i).solution]
    if not function_ids:
        pytest.skip("no function exercise registered yet")
    status, message = exercises.verdict(function_ids[0], spin, time_limit=0.5)
    assert status == "mistake" and "took more than 0.5 s" in message


def test_unknown_id_prints_the_known_ones(capsys):
    assert not exercises.check("99.9", 1)
    assert "known ids" in capsys.readouterr().out


def test_hints_advance_and_solution_shows_source(capsys):
    ex_id = IDS[0]
    core._hints_shown.pop(ex_id, None)
    exercises.hint(ex_id)
    exercises.hint(ex_id)
    out = capsys.readouterr().out
    assert f"hint 1/" in out and f"hint 2/" in out
    exercises.solution(ex_id)
    assert exercises.get(ex_id).solution.strip() in capsys.readouterr().out


def test_every_registered_exercise_is_in_exactly_one_notebook():
    placed = [exercise_id(c) for p in course_notebooks() for c in read(p).cells if exercise_id(c)]
    assert sorted(placed, key=str) == sorted(set(placed), key=str), "an exercise appears twice"
    assert set(placed) == set(IDS), f"in registry only: {set(IDS) - set(placed)}; in notebooks only: {set(placed) - set(IDS)}"
