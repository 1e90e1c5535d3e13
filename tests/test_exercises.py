"""Every exercise, judged by its own catalogue: the reference passes, each catalogued mistake earns
exactly its message, no entry is shadowed or indistinguishable, the notebook's real stub is "not
attempted", garbage never crashes the judge, and a kernel without its set-up is named as such."""
import re
import subprocess
import sys
import time

import jax
import pytest

from helpers import exercises
from helpers.exercises import core, forms
from helpers.exercises.kinds import ProgramExercise, SpecExercise, ValueExercise, close, placement, same_spec
from helpers.exercises.processes import ProcessExercise
from tools.nbrun import course_notebooks, exercise_id, read
from helpers.emulated.topology import emulated_hosts

IDS = exercises.all_ids()
GARBAGE = [None, 3, "P('host')", [], {"a": 1}, object(), (lambda *a, **k: 1 / 0), float("nan"),
           ("host", "device"), jax.numpy.ones(3)]
CRASH = "could not be checked"  # what `judge` says when the judge itself failed


@pytest.fixture(autouse=True)
def kernel_of_the_notebook(request):
    """Judge each exercise in the kernel its notebook's first cell makes (8 devices, its hosts)."""
    ex_id = request.node.callspec.params.get("ex_id") if hasattr(request.node, "callspec") else None
    hosts = (exercises.get(ex_id).kernel.hosts if ex_id else None) or 1
    with emulated_hosts(hosts):
        yield


def _answer(exercise, entry):
    """A catalogue entry as the learner would hand it in (programs are source)."""
    if isinstance(exercise, ProgramExercise):
        return exercise.run_source(entry)
    return entry


def _stubs() -> dict[str, str]:
    return {exercise_id(c): c.source for p in course_notebooks() for c in read(p).cells if exercise_id(c)}


STUBS = _stubs()


def test_the_course_has_exercises():
    assert len(IDS) >= 3


@pytest.mark.parametrize("ex_id", IDS)
def test_reference_solution_passes(ex_id, capsys):
    if isinstance(exercises.get(ex_id), ProcessExercise):
        pytest.skip(f"judged in real processes: tests/test_solved_notebooks.py runs {ex_id}'s reference "
                    "in its notebook, and fails unless every check there passes")
    assert exercises.check(ex_id, exercises.reference(ex_id)) == True  # noqa: E712 (a Verdict)
    assert capsys.readouterr().out.startswith(f"✅ {ex_id}")


# Judged twice, the second time backwards: a verdict depends on the answer, never on what was judged
# before it nor on when a run happened. Where timing enters a verdict, every program (the reference too)
# runs again: 14.1, whose verdicts depended on when JAX heard of SIGTERM (one run in five). The in-kernel
# programs are deterministic XLA CPU programs, memoised by source: their second judgement reuses their
# outputs (running them again cost CI's 2 cores a minute of its 12). The other real-process catalogues
# are judged once: each run of theirs takes up to a minute.
RUN_AGAIN = {"14.1"}
TWICE = RUN_AGAIN | {i for i in IDS if not isinstance(exercises.get(i), ProcessExercise)}


@pytest.mark.parametrize("ex_id", IDS)
def test_each_catalogued_mistake_earns_its_own_message(ex_id, subtests):
    """One subtest per entry (and judgement). The catalogue is read here, not at collection: its
    messages may need the programs' outputs, and those of a process exercise come from real runs."""
    exercise = exercises.get(ex_id)
    catalogue = list(enumerate(exercise.catalogue()))
    for judgement in range(2 if ex_id in TWICE else 1):
        if judgement and ex_id in RUN_AGAIN:
            core.MEMO.forget(lambda key: key[0] == ex_id)
        for n, (entry, message) in (reversed(catalogue) if judgement else catalogue):
            with subtests.test(entry=n, judgement=judgement):
                status, got = exercises.verdict(ex_id, _answer(exercise, entry))
                assert status == "mistake"
                assert got == message  # the exact message: no earlier entry shadows this one


@pytest.mark.parametrize("ex_id", IDS)
def test_every_exercise_catalogues_mistakes_and_hints(ex_id):
    assert len(exercises.get(ex_id).catalogue()) >= 2
    assert len(exercises.get(ex_id).hints) >= 2


@pytest.mark.parametrize("ex_id", [i for i in IDS if isinstance(exercises.get(i), ValueExercise)])
def test_value_tables_hold_normal_forms_and_no_right_answer(ex_id):
    exercise = exercises.get(ex_id)
    right = exercise.right_value()
    assert exercise.form(right) == right or close(exercise.form(right), right)
    for known, _ in exercise.catalogue():
        assert exercise.form(known) == known, f"{known!r} is not in the form's normal form: it could never match"
        assert not close(known, right) if not isinstance(known, (frozenset, str)) else known != right


@pytest.mark.parametrize("ex_id", [i for i in IDS if isinstance(exercises.get(i), SpecExercise)])
def test_no_two_catalogued_specs_place_data_alike(ex_id):
    exercise = exercises.get(ex_id)
    mesh = exercise.mesh()
    for slot in exercise.slots:
        known = [slot.right, *slot.wrong]
        for i, a in enumerate(known):
            for b in known[i + 1:]:
                assert not same_spec(mesh, a, b, slot.shape), f"{a} and {b} are one answer on {slot.shape}"


@pytest.mark.parametrize("ex_id", [i for i in IDS if isinstance(exercises.get(i), SpecExercise)])
def test_the_example_of_the_spec_form_is_no_catalogued_answer(ex_id, capsys):
    exercise = exercises.get(ex_id)
    bare = ("host", "device")  # a right-looking tuple where P(...) is asked
    status, message = exercises.verdict(ex_id, exercise.assemble((bare,) + tuple(s.right for s in exercise.slots[1:])))
    assert status == "mistake" and "expected a PartitionSpec" in message
    like = re.search(r"such as (P\((?!\.\.\.).*?\)), but got", message)
    if like is None:  # no spec is left that is neither right nor a mistake: the form shows none
        assert "P(...)" in message
        return
    example = eval(like.group(1), {"P": jax.P})
    messages = {m for _, m in exercise.catalogue()}
    status, said = exercises.verdict(ex_id, exercise.assemble((example,) * len(exercise.slots)))
    assert status == "mistake" and said not in messages


@pytest.mark.parametrize("ex_id", [i for i in IDS if isinstance(exercises.get(i), SpecExercise)])
def test_a_spec_mistake_shows_the_learners_own_placement(ex_id, capsys):
    exercise = exercises.get(ex_id)
    entry, _ = next((e, m) for e, m in exercise.catalogue()
                    if placement(exercise.mesh(), _first_wrong(exercise, e), _first_wrong_slot(exercise, e).shape))
    exercises.check(ex_id, entry)
    out = capsys.readouterr().out
    assert "your answer does this:" in out and "host 0:" in out


def _first_wrong(exercise, answer):
    return next(s for slot, s in zip(exercise.slots, exercise.specs(answer))
                if not same_spec(exercise.mesh(), s, slot.right, slot.shape))


def _first_wrong_slot(exercise, answer):
    return next(slot for slot, s in zip(exercise.slots, exercise.specs(answer))
                if not same_spec(exercise.mesh(), s, slot.right, slot.shape))


@pytest.mark.parametrize("ex_id", [i for i in IDS if isinstance(exercises.get(i), ProgramExercise)])
def test_programs_are_judged_on_meshes_of_different_sizes(ex_id):
    exercise = exercises.get(ex_id)
    sizes = {int(jax.numpy.prod(jax.numpy.array(m))) for m in exercise.meshes}
    assert len(sizes) >= 2


# Not for exercises judged in real processes, where every layout of every program is a real run of
# seconds: for them the catalogue test above is the proof that matters, since a wrong program that
# computed what the reference or an earlier one computes, where it parts from the reference, would
# earn that one's verdict instead of its own message.
@pytest.mark.parametrize("ex_id", [i for i in IDS if isinstance(exercises.get(i), ProgramExercise)
                                   and not isinstance(exercises.get(i), ProcessExercise)])
def test_no_two_wrong_programs_are_indistinguishable(ex_id):
    exercise = exercises.get(ex_id)
    outputs = {source: [exercise.output_of_source(source, m) for m in exercise.meshes]
               for source in [exercise.solution, *exercise.wrong]}
    sources = list(outputs)
    for i, a in enumerate(sources):
        for b in sources[i + 1:]:
            same = all(close(x, y) for x, y in zip(outputs[a], outputs[b]))
            assert not same, f"these two programs compute the same on every mesh:\n{a}\n{b}"


@pytest.mark.parametrize("ex_id", IDS)
def test_the_notebooks_untouched_stub_is_not_attempted(ex_id, capsys):
    exercise = exercises.get(ex_id)
    stub = exercise.run_source(STUBS[ex_id])
    assert not exercises.check(ex_id, stub)
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("ex_id", IDS)
def test_garbage_gets_a_message_and_never_crashes_the_judge(ex_id):
    for garbage in GARBAGE:
        status, message = exercises.verdict(ex_id, garbage, time_limit=5)
        assert status in ("mistake", "not-attempted"), (garbage, status, message)
        assert CRASH not in message and "Traceback" not in message, (garbage, message)


@pytest.mark.parametrize("ex_id", IDS)
def test_a_kernel_without_its_devices_is_named(ex_id, monkeypatch, capsys):
    monkeypatch.setattr(jax, "device_count", lambda: 1)
    assert not exercises.check(ex_id, exercises.reference(ex_id))
    assert "the kernel has 1 cpu device, not 8: restart the kernel, run the first cell" in capsys.readouterr().out


@pytest.mark.parametrize("ex_id", [i for i in IDS if (exercises.get(i).kernel.hosts or 1) > 1])
def test_a_kernel_without_its_hosts_is_named(ex_id, capsys):
    with emulated_hosts(1):
        assert not exercises.check(ex_id, exercises.reference(ex_id))
    assert f"the kernel emulates 1 host, not {exercises.get(ex_id).kernel.hosts}" in capsys.readouterr().out


def test_a_kernel_that_skipped_the_first_cell_is_named():
    code = ("from jax import P\nfrom helpers.exercises import check\ncheck('02.3', P('host'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"}).stdout
    assert "this kernel has not run the notebook's first cell: run it (use_fake_devices(8))" in out


def test_a_function_that_never_returns_is_stopped():
    def spin(*args, **kwargs):
        while True:
            pass

    function_ids = [i for i in IDS if "def " in exercises.get(i).solution]
    with emulated_hosts(exercises.get(function_ids[0]).kernel.hosts or 1):
        status, message = exercises.verdict(function_ids[0], spin, time_limit=0.5)
    assert status == "mistake" and "your answer used more than 0.5 s of CPU to check" in message


def test_a_function_that_waits_forever_is_stopped_by_the_clock(monkeypatch):
    monkeypatch.setattr(core, "WAIT_FACTOR", 2)

    def wait(*args, **kwargs):
        time.sleep(60)

    function_ids = [i for i in IDS if "def " in exercises.get(i).solution]
    with emulated_hosts(exercises.get(function_ids[0]).kernel.hosts or 1):
        status, message = exercises.verdict(function_ids[0], wait, time_limit=0.5)
    assert status == "mistake" and "your answer took more than 1 s to check" in message


def test_a_check_is_limited_by_the_cpu_it_uses_not_by_the_clock():
    """A busy machine makes a check's clock run, not its CPU: beside two test suites 13.2's
    reference used 0.3 s of CPU in 11 s on the clock, and a 10 s limit on the clock called it a loop.
    Here 1.5 s pass on the clock, mostly waiting, under a limit of 0.5 s of CPU."""
    with core._time_limit(0.5):
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            time.sleep(0.05)


def test_unknown_ids_list_the_ids_of_that_notebook(capsys):
    assert not exercises.check("99.9", 1)
    assert capsys.readouterr().out.startswith("❓ no exercise '99.9'; the ids are 00.1,")
    exercises.hint("3.1")
    exercises.solution("3.9")
    out = capsys.readouterr().out.splitlines()
    assert out == ["❓ no exercise '3.1'; notebook 03 has 03.1, 03.2, 03.3"] * 1 + \
        ["❓ no exercise '3.9'; notebook 03 has 03.1, 03.2, 03.3"]


def test_hints_advance_and_solution_shows_source(capsys):
    ex_id = IDS[0]
    core._hints_shown.pop(ex_id, None)
    exercises.hint(ex_id)
    exercises.hint(ex_id)
    out = capsys.readouterr().out
    assert "hint 1/" in out and "hint 2/" in out
    exercises.solution(ex_id)
    assert exercises.get(ex_id).solution.strip() in capsys.readouterr().out


def test_learner_errors_quote_jaxs_informative_sentence():
    mesh = jax.make_mesh((2, 4), ("host", "device"))
    x = jax.device_put(jax.numpy.ones((16, 3)), jax.NamedSharding(mesh, jax.P(("host", "device"))))
    try:
        jax.shard_map(lambda b: b.sum(0), mesh=mesh, in_specs=jax.P(("host", "device")), out_specs=jax.P())(x)
    except ValueError as error:
        text = core.explain(error)
    assert text.startswith("ValueError: out_specs is P() which implies") and "possibly varying over" in text
    assert len(text) <= core.ERROR_CHARS + len("ValueError: ") and text.endswith(("}", " …"))


def test_numpy_on_a_tracer_says_to_use_jax_numpy():
    import numpy as np

    try:
        jax.jit(lambda a: np.asarray(a))(jax.numpy.ones(2))
    except Exception as error:
        text = core.explain(error)
    assert text.startswith("TracerArrayConversionError:") and "use jax.numpy (jnp)" in text
    assert "http" not in text


def test_long_messages_are_cut_between_words_and_lose_their_urls():
    error = ValueError("first words " + "abcdefgh " * 60 + "\nSee https://docs.jax.dev/en/latest/errors.html")
    text = core.explain(error)
    assert text.endswith("abcdefgh …") and "http" not in text and len(text) <= core.ERROR_CHARS + 12


def test_forms_name_the_type_they_want():
    with pytest.raises(core.Mistake, match="expected a tuple of 4 whole numbers"):
        forms.ints(4, like="(1, 2, 3, 4)")(jax.numpy.array([8.5, 2.0, 4.0, 3.0]))
    with pytest.raises(core.Mistake, match="expected a PartitionSpec such as P"):
        forms.spec("P('host')")(("host", "device"))


def test_every_registered_exercise_is_in_exactly_one_notebook():
    placed = [exercise_id(c) for p in course_notebooks() for c in read(p).cells if exercise_id(c)]
    assert sorted(placed, key=str) == sorted(set(placed), key=str), "an exercise appears twice"
    assert set(placed) == set(IDS), f"in registry only: {set(IDS) - set(placed)}; in notebooks only: {set(placed) - set(IDS)}"


def test_a_process_exercise_judges_what_each_real_host_printed():
    from helpers.exercises import Kernel, ProcessExercise

    own = "def my_rows(host, hosts):\n    return [2 * host, 2 * host + 1]\n"
    same = "def my_rows(host, hosts):\n    return [0, 1]\n"
    exercise = ProcessExercise(
        id="99.1", title="each host's own rows", answer_name="my_rows", solution=own, hints=("a", "b"),
        kernel=Kernel(devices=8),
        driver=("from helpers.launch import initialize\ninitialize()\n{answer}\nimport json\n"
                "print(json.dumps(my_rows(jax.process_index(), jax.process_count())))\n"),
        meshes=((2, 1), (3, 1)), wrong={same: "every host read host 0's rows"}, timeout=180)
    exercise.judge(own)
    with pytest.raises(core.Mistake, match="every host read host 0's rows"):
        exercise.judge(same)
    # every host divides by zero: the message names whichever failed first
    with pytest.raises(core.Mistake, match=r"your function raised ZeroDivisionError: division by zero on host [01]"):
        exercise.judge("def my_rows(host, hosts):\n    return 1 / 0\n")
    with pytest.raises(core.NotAttempted):
        exercise.judge("def my_rows(host, hosts):\n    raise NotImplementedError\n")


def _program(ex_id: str, source: str):
    """A learner's program for `ex_id`, run after the exercise's set-up (its answer)."""
    return exercises.get(ex_id).run_source(source)


_SOLVED_05_3 = exercises.get("05.3").solution


@pytest.mark.parametrize("body", ["return np.asarray(x).mean(axis=0)", "return jnp.mean(x, axis=0).tolist()"])
def test_a_function_jax_cannot_trace_fails_the_structural_check(body):
    with emulated_hosts(exercises.get("05.3").kernel.hosts or 1):
        status, message = exercises.verdict("05.3", _program("05.3", f"def column_mean(x, mesh):\n    {body}\n"))
    assert status == "mistake"
    assert message.startswith("the numbers are right, but JAX cannot trace your function, so the check cannot see "
                              "whether it uses jax.shard_map") and "JAX says " in message


def test_a_step_that_logs_its_loss_inside_fails_the_structural_checks(capsys):
    wrapped = exercises.get("06.2").solution + (
        "\n_made = make_momentum_step\n\n"
        "def make_momentum_step(mesh):\n"
        "    step = _made(mesh)\n\n"
        "    def logged(*args):\n"
        "        out = step(*args)\n"
        "        print('loss', float(out[2]))\n"
        "        return out\n"
        "    return logged\n")
    with emulated_hosts(exercises.get("06.2").kernel.hosts or 1):
        status, message = exercises.verdict("06.2", _program("06.2", wrapped))
    assert status == "mistake" and "JAX cannot trace your function" in message


def test_a_verdict_ends_with_one_stop(monkeypatch, capsys):
    for message, shown in (("is it?", "is it? (hint"), ("it is.", "it is. (hint"), ("it is", "it is. (hint")):
        monkeypatch.setattr(core, "judge_exercise", lambda *a, **k: core.Outcome(core.Status.MISTAKE, message))
        exercises.check(IDS[0], 1)
        assert shown in capsys.readouterr().out


def test_long_messages_are_cut_after_a_whole_sentence_when_one_fits():
    error = ValueError("The spec does not match the input. " * 4 + "You can omit it and let shard_map infer it "
                       "from the arguments, so that this sentence is long " + "enough " * 20)
    text = core.explain(error)
    assert text.endswith("does not match the input.") and "…" not in text


def test_a_spec_longer_than_the_arrays_rank_is_refused_by_name():
    from helpers.exercises.kinds import Slot

    mesh = jax.make_mesh((2, 4), ("host", "device"))
    too_long = jax.P(("host", "device"), None, None)
    assert placement(mesh, too_long, (16, 8)) is None
    assert not same_spec(mesh, too_long, jax.P(("host", "device")), (16, 8))
    with pytest.raises(core.Mistake, match=re.escape("P(('host', 'device'), None, None) has 3 entries, but the "
                                                     "array has 2 dimensions")):
        Slot(shape=(16, 8), right=jax.P(("host", "device"))).judge(mesh, too_long)


def test_a_spec_naming_an_axis_the_mesh_lacks_lists_the_mesh_axes():
    from helpers.exercises.kinds import Slot

    mesh = jax.make_mesh((2, 4), ("host", "device"))
    with pytest.raises(core.Mistake) as raised:
        Slot(shape=(16, 8), right=jax.P(("host", "device"))).judge(mesh, jax.P("batch"))
    assert str(raised.value) == "the mesh's axes are 'host' and 'device'; 'batch' is not one of them"


def _column_sums(**rules) -> ProgramExercise:
    """A small program exercise: the column sums of a (3 * devices, 5) array."""
    import numpy as np

    def run(fn, mesh):
        return fn(np.arange(15.0 * mesh.size).reshape(-1, 5))

    return ProgramExercise(**{"id": "99.2", "title": "column sums", "answer_name": "sums", "hints": ("a", "b"),
                              "run": run, "solution": "def sums(x):\n    return x.sum(axis=0)\n", **rules})


def test_a_function_that_prints_instead_of_returning_is_told_so(capsys):
    from helpers.exercises.rules import OutputRule

    reads_numbers = OutputRule(lambda case: case.got[0] < 0, "your sums are negative",
                         "def sums(x):\n    return -x.sum(axis=0)\n")
    for exercise in (_column_sums(), _column_sums(id="99.5", families=(reads_numbers,))):  # no family reads None
        with pytest.raises(core.Mistake, match="^your function returns None: return the result"):
            exercise.judge(lambda x: print(x.sum(axis=0)))


def test_a_result_of_the_wrong_shape_is_named_by_its_shape():
    with pytest.raises(core.Mistake) as raised:
        _column_sums().judge(lambda x: x.sum(axis=1))
    assert str(raised.value) == "on 8 devices your result has shape (24,), but the prompt's result has shape (5,)"
    with pytest.raises(core.Mistake, match=r"^on 8 devices your result\[1\] has shape \(24,\)"):
        _column_sums(id="99.3", run=lambda fn, mesh: (1, fn(jax.numpy.ones((3 * mesh.size, 5))))).judge(lambda x: x.sum(axis=1))
    from helpers.exercises.rules import OutputRule

    family = OutputRule(lambda case: True, "a family of this exercise", "def sums(x):\n    return x\n")
    with pytest.raises(core.Mistake, match="^a family of this exercise$"):
        _column_sums(id="99.4", families=(family,)).judge(lambda x: x.sum(axis=1))


def test_forms_accept_the_spellings_a_learner_naturally_uses():
    import numpy as np

    assert forms.ints(3, like="(0, 7, 0)")((8.0, 15.0, np.int64(48))) == (8, 15, 48)
    assert forms.ints(3, like="(0, 7, 0)")(np.array([8, 15, 48])) == (8, 15, 48)
    assert forms.ints(3, like="(0, 7, 0)")(jax.numpy.array([8.0, 15.0, 48.0])) == (8, 15, 48)
    assert forms.grid(2, 2, like="[[0, 1], [0, 1]]", what="host numbers")(np.zeros((2, 2))) == ((0, 0),) * 2
    assert forms.whole("a count")(jax.numpy.int32(3)) == 3
    shapes = forms.tuple_of(forms.shape("the first"), forms.shape("the second"), like="((8, 2), (3,))", of="shapes")
    assert shapes([(5, 8, 2), ()]) == ((5, 8, 2), ())
    assert forms.booleans(2, like="(True, False)", what="one per mesh")((np.True_, np.False_)) == (True, False)
    assert forms.booleans(2, like="(True, False)", what="one per mesh")(np.array([3, 0]) > 1) == (True, False)
    assert forms.cells("[(0, 1)]")(np.argwhere(np.eye(2) == 1)) == {(0, 0), (1, 1)}
    assert forms.grid(2, 2, like="[[0, 1], [0, 1]]", what="host numbers")(jax.numpy.zeros((2, 2), int)) == ((0, 0),) * 2
    assert forms.grid(2, 2, like="[[0, 1], [0, 1]]", what="host numbers")([[0.0, 1.0], [0, 1]]) == ((0, 1),) * 2
    expected = frozenset({frozenset(range(4)), frozenset(range(4, 8))})
    assert forms.groups(8, like="[[0, 1]]")([range(4), range(4, 8)]) == expected
    assert forms.groups(8, like="[[0, 1]]")(np.arange(8).reshape(2, 4)) == expected


def test_forms_still_refuse_what_is_not_whole_or_not_boolean():
    with pytest.raises(core.Mistake, match=r"but got tuple \(8\.5, 15, 48\) \(8\.5 is not a whole number\)$"):
        forms.ints(3, like="(0, 7, 0)")((8.5, 15, 48))
    with pytest.raises(core.Mistake, match="expected a tuple of 2 booleans"):
        forms.booleans(2, like="(True, False)", what="one per mesh")((1, 0))
    with pytest.raises(core.Mistake, match="expected a tuple of 3 whole numbers"):
        forms.ints(3, like="(0, 7, 0)")((True, 15, 48))


def test_describe_never_puts_a_newline_or_an_address_in_a_verdict():
    import numpy as np

    def numbers():
        yield 1

    assert core.describe(numbers()) == "a generator" and core.describe(None) == "None"
    assert core.describe([np.zeros((4, 3)), np.zeros(4)]) == "list of 2 arrays of shapes (4, 3), (4,)"
    assert "\n" in repr({"rows": np.zeros((3, 3))})
    one_line = core.describe({"rows": np.zeros((3, 3))})
    assert "\n" not in one_line and "  " not in one_line


def test_a_dict_form_names_the_missing_and_the_unexpected_keys():
    form = forms.keys(("w1", "w2", "x"), forms.spec("P(...)"), "a PartitionSpec")
    with pytest.raises(core.Mistake, match="your dict has no key 'w1' and an unexpected key 'W1'$"):
        form({"W1": jax.P(), "w2": jax.P(), "x": jax.P()})
    with pytest.raises(core.Mistake, match="your dict has no keys 'w1' and 'x', and an unexpected key 'a'$"):
        form({"w2": jax.P(), "a": 1})


@pytest.mark.parametrize("ex_id", [i for i in IDS if isinstance(exercises.get(i), ProgramExercise)
                                   and not isinstance(exercises.get(i), ProcessExercise)])
def test_no_reference_function_returns_none(ex_id):
    """A learner's function that returned None is told so; that is only true while no reference does."""
    from helpers.exercises.kinds import _noting_none

    exercise, returned_none = exercises.get(ex_id), []
    reference = _noting_none(exercise.run_source(exercise.solution), returned_none)
    exercise.runner.output(exercise, reference, exercise.meshes[0])
    assert returned_none and not any(returned_none)


def test_a_spec_that_lists_axes_as_dimensions_is_told_to_group_them(capsys):
    from helpers.exercises.kinds import Slot

    mesh = jax.make_mesh((2, 4), ("host", "device"))
    with pytest.raises(core.Mistake) as raised:
        Slot(shape=(16,), right=jax.P(("host", "device"))).judge(mesh, jax.P("host", "device"))
    assert str(raised.value) == ("P('host', 'device') has 2 entries, but the array has 1 dimension: to split one "
                                 "dimension over several axes, group their names in one tuple inside P(...)")


def test_a_verdict_cut_short_gets_no_stop_after_the_ellipsis(monkeypatch, capsys):
    monkeypatch.setattr(core, "judge_exercise", lambda *a, **k: core.Outcome(core.Status.MISTAKE, "a long message cut …"))
    core.check("01.1", object())
    assert "cut … (hint" in capsys.readouterr().out


def test_describe_does_not_repeat_a_type_name_its_repr_starts_with():
    class State(dict):
        def __repr__(self):
            return "State({0: {}})"

    assert core.describe(State()) == "State({0: {}})"


def test_a_rule_of_another_kind_is_refused_by_name():
    from helpers.exercises.rules import ErrorRule, OutputRule

    wrong_kind = ErrorRule(lambda text: True, "a family", "def sums(x):\n    return x\n")
    with pytest.raises(TypeError, match=r"^99.6: families takes OutputRules \(when\(case\)"):
        _column_sums(id="99.6", families=(wrong_kind,))
    assert _column_sums(id="99.7", families=(OutputRule(lambda case: True, "a family"),))


@pytest.mark.parametrize("collective", [
    "jax.lax.pmean(b.sum(0), 'batch')",  # check_vma: a bare AssertionError on jax 0.12 (psum, pmax, ppermute too)
    "jax.lax.ppermute(b, 'batch', [(0, 1)]).sum(0)",
    "jax.lax.all_gather(b, 'batch').sum((0, 1))",  # NameError: unbound axis name: batch
    "b.sum(0) + jax.lax.axis_index('batch')",
    "jax.lax.psum(b.sum(0), ('host', 'batch'))",  # ValueError: psum can only accept axis_name ...
])
@pytest.mark.parametrize("options", ["", ", check_vma=False"])
def test_pmaps_axis_name_under_shard_map_is_named_with_the_mesh_axes(collective, options):
    """Whatever JAX raises for it, a collective over an axis the mesh lacks is named as such."""
    mesh = jax.make_mesh((2, 4), ("host", "device"))
    x = jax.device_put(jax.numpy.ones((16, 3)), jax.NamedSharding(mesh, jax.P(("host", "device"))))
    step = eval(f"lambda b: {collective}")
    fn = eval(f"jax.jit(jax.shard_map(step, mesh=mesh, in_specs=P(DATA), out_specs=P(DATA){options}))",
              {"jax": jax, "step": step, "mesh": mesh, "P": jax.P, "DATA": ("host", "device")})
    with pytest.raises(core.Mistake) as raised:
        core.call_learner(fn, x)
    assert str(raised.value) == core.axis_message("batch", ("host", "device"))
    assert str(raised.value).startswith("the mesh has no axis 'batch': its axes are ('host', 'device'). ")


@pytest.mark.parametrize("specs", ["in_specs=P('batch'), out_specs=P(DATA)", "in_specs=P(DATA), out_specs=P('batch')"])
def test_pmaps_axis_name_in_a_spec_is_named_with_the_mesh_axes(specs):
    mesh = jax.make_mesh((2, 4), ("host", "device"))
    x = jax.device_put(jax.numpy.ones((16, 3)), jax.NamedSharding(mesh, jax.P(("host", "device"))))
    fn = eval(f"jax.jit(jax.shard_map(lambda b: b, mesh=mesh, {specs}))",
              {"jax": jax, "mesh": mesh, "P": jax.P, "DATA": ("host", "device")})
    with pytest.raises(core.Mistake, match="^the mesh has no axis 'batch': its axes are \\('host', 'device'\\)"):
        core.call_learner(fn, x)
