"""The exercise machinery: a registry, the kernel check, verdicts, hints and solutions.

An exercise's reference solution is *source code*: the cell a learner would write. The same
text is what `solution(id)` shows, what the solved-notebook test injects, and (run in a fresh
namespace) what `reference(id)` returns. The kinds of exercise (value, spec, program, process)
live in `helpers.exercises.kinds`; this module only knows that an exercise can `judge`.
"""
from __future__ import annotations

import inspect
import os
import re
import signal
import threading
import types
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Callable, NamedTuple, Union

import jax
import numpy as np

from helpers import progress_store
from helpers.emulated import topology
from helpers.errors import ERROR_CHARS, explain, shorten  # noqa: F401  (ERROR_CHARS: the engine's bound)
from helpers.devices import backend_started

PRELUDE = """\
import numpy as np
import jax
import jax.numpy as jnp
from jax import P
from jax.sharding import Mesh, NamedSharding
"""
TIME_LIMIT_S = 10.0  # CPU seconds a check may use (see _time_limit)
WAIT_FACTOR = 6  # and a check that waits without using the CPU is stopped after this many times as long

Message = Union[str, Callable[..., str]]  # a message, or a function of the answer that writes one


class Mistake(Exception):
    """The answer is wrong, and the message says how; `detail` (a few lines) shows what it did."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


class NotAttempted(Exception):
    """Raised when the answer is still the untouched stub."""


class _TooSlow(BaseException):  # not an Exception: no `except Exception` may swallow it
    """Raised in a check that ran too long; its text says how: 'used more than 10 s of CPU'."""


class Status(StrEnum):
    """How a judgement ended."""

    PASS = "pass"
    NOT_ATTEMPTED = "not-attempted"
    MISTAKE = "mistake"
    SET_UP = "set-up"  # the kernel lacks the notebook's set-up: not the answer's fault


class Outcome(NamedTuple):
    """A judgement: its status, a message, and a detail (a few lines showing what the answer did)."""

    status: Status
    message: str
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS


@dataclass(frozen=True)
class Kernel:
    """The set-up a notebook's first cell makes: fake devices and emulated hosts.

    Checked before an answer is judged, so a kernel that skipped its first cell is named as
    such instead of blaming the answer.
    """

    devices: int = 8
    hosts: int | None = None  # emulated hosts the first cell sets (emulate_hosts); None: not checked

    def problem(self) -> str | None:
        """What is missing from this kernel's set-up, or None when it is ready."""
        first_cell = f"use_fake_devices({self.devices})"
        if not backend_started():
            if os.environ.get("JAX_NUM_CPU_DEVICES") != str(self.devices):
                return (f"this kernel has not run the notebook's first cell: run it ({first_cell}), "
                        "then this one")
            return self._hosts_problem()
        have = jax.device_count()
        if have != self.devices or jax.default_backend() != "cpu":
            return (f"the kernel has {have} {jax.default_backend()} device{'s' * (have != 1)}, not "
                    f"{self.devices}: restart the kernel, run the first cell ({first_cell}), then this one")
        return self._hosts_problem()

    def _hosts_problem(self) -> str | None:
        if self.hosts is None or topology.num_hosts() == self.hosts:
            return None
        have = topology.num_hosts()
        return (f"the kernel emulates {have} host{'s' * (have != 1)}, not {self.hosts}: run the "
                f"notebook's first cell (emulate_hosts({self.hosts})), then this one")


@dataclass(frozen=True, kw_only=True)
class Exercise:
    """What every exercise has; a kind (helpers.exercises.kinds) says how it judges."""

    id: str
    title: str
    answer_name: str
    solution: str
    hints: tuple[str, ...]
    setup: str = ""  # source the notebook has run before the exercise cell (for reference/tests)
    kernel: Kernel | None = Kernel()  # None: judged in any kernel (a drill makes its own mesh)

    def judge(self, answer: Any) -> None:
        """Return when `answer` is right; raise Mistake (or NotAttempted) when it is not."""
        raise NotImplementedError

    def catalogue(self) -> list[tuple[Any, str]]:
        """(known wrong answer, the exact message it earns): what the tests iterate."""
        return []

    @property
    def label(self) -> str:
        """How a verdict line names the exercise."""
        return self.id

    def praise(self, answer: Any) -> str:
        """The message of a pass."""
        return f"correct: {self.title}"

    def unattempted(self) -> str:
        """The message for `...`, the untouched answer."""
        return "not attempted yet: edit the exercise cell above, run it, then run this cell again"

    def help(self) -> str:
        """What a mistake's verdict line points to."""
        return f"hint('{self.id}') helps"

    def record(self, passed: bool) -> None:
        """Keep a checked answer in the learner's progress (an exercise: its pass)."""
        if passed:
            progress_store.record_exercise(self.id)

    def run_source(self, source: str) -> Any:
        """Run `source` after the prelude and setup; return the answer it defines."""
        namespace: dict[str, Any] = {}
        exec(PRELUDE + self.setup + "\n" + source, namespace)
        return namespace[self.answer_name]


class Memo:
    """The engine's one cache: what a computation for an exercise gave, computed once per key (right
    values, what known programs compute, traffic reports). Keys start with the exercise's id."""

    def __init__(self) -> None:
        self._values: dict[tuple, Any] = {}

    def __contains__(self, key: tuple) -> bool:
        return key in self._values

    def __getitem__(self, key: tuple) -> Any:
        return self._values[key]

    def get(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """The value of `key`, from `compute()` the first time."""
        if key not in self._values:
            self._values[key] = compute()
        return self._values[key]

    def put(self, values: dict[tuple, Any]) -> None:
        self._values.update(values)

    def forget(self, drop: Callable[[tuple], bool]) -> None:
        """Forget every key `drop(key)` is true for."""
        for key in [k for k in self._values if drop(k)]:
            del self._values[key]


MEMO = Memo()
_REGISTRY: dict[str, Exercise] = {}
_hints_shown: dict[str, int] = {}


def register(exercise: Exercise) -> Exercise:
    """Add an exercise to the course registry (ids are unique)."""
    if exercise.id in _REGISTRY:
        raise ValueError(f"exercise id {exercise.id!r} is registered twice")
    _REGISTRY[exercise.id] = exercise
    return exercise


class UnknownExercise(KeyError):
    """No exercise has this id; the message lists the ids of the notebook it names."""

    def __str__(self) -> str:
        return self.args[0]


def get(exercise_id: str) -> Exercise:
    """The exercise with this id, or an UnknownExercise that lists the ids to use."""
    if isinstance(exercise_id, str) and exercise_id in _REGISTRY:
        return _REGISTRY[exercise_id]
    prefix = re.match(r"\s*(\d+)\.", exercise_id) if isinstance(exercise_id, str) else None
    notebook = f"{int(prefix.group(1)):02d}." if prefix else None
    same = [i for i in all_ids() if notebook and i.startswith(notebook)]
    where = f"notebook {notebook[:-1]} has {', '.join(same)}" if same else f"the ids are {', '.join(all_ids())}"
    raise UnknownExercise(f"no exercise {exercise_id!r}; {where}")


def all_ids() -> list[str]:
    """Every exercise id in the course, in order."""
    return sorted(_REGISTRY, key=lambda i: tuple(int(p) for p in i.split(".")))


# ----------------------------------------------------------------------------- the learner's code

@contextmanager
def _time_limit(seconds: float):
    """Interrupt the block once this process has used `seconds` of CPU in it, or after WAIT_FACTOR
    times `seconds` on the clock (main thread only; elsewhere no limit).

    A loop that never ends uses the CPU, so it is caught by the CPU it used, whatever else runs
    on the machine: a busy machine slows a check's clock, not its CPU (a reference solution that
    needs 0.3 s of CPU took 11 s on the clock beside two test suites). The clock limit catches a
    check that waits without using the CPU.
    """
    if threading.current_thread() is not threading.main_thread() or seconds is None:
        yield
        return

    def on_cpu(signum, frame):
        raise _TooSlow(f"used more than {seconds:g} s of CPU")

    def on_clock(signum, frame):
        raise _TooSlow(f"took more than {seconds * WAIT_FACTOR:g} s")

    previous = signal.signal(signal.SIGPROF, on_cpu), signal.signal(signal.SIGALRM, on_clock)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, seconds * WAIT_FACTOR)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGPROF, previous[0])
        signal.signal(signal.SIGALRM, previous[1])


_limit = threading.local()


@contextmanager
def jax_frames_kept():
    """JAX's traceback filtering off in the block: an error of the learner's code keeps JAX's frames,
    which `no_such_axis` reads (the judge quotes errors in one line, never their tracebacks)."""
    before = jax.config.jax_traceback_filtering
    jax.config.update("jax_traceback_filtering", "off")
    try:
        yield
    finally:
        jax.config.update("jax_traceback_filtering", before)


def guarded(fn: Callable, *args: Any) -> Any:
    """Run code that calls the learner's, within the time limit; NotImplementedError -> NotAttempted."""
    try:
        with _time_limit(getattr(_limit, "seconds", None)), jax_frames_kept():
            return fn(*args)
    except NotImplementedError:
        raise NotAttempted from None


NO_AXIS = "the mesh has no axis "  # how a verdict about an axis name the mesh lacks starts
_UNBOUND = re.compile(r"unbound axis name: (\w+)|(?:in|out)_specs refers to '(\w+)'")  # NameError; a spec's
_COLLECTIVES = ("jax/_src/lax/parallel.py", "jax/_src/core.py")  # where JAX binds a collective's axis names


def _names(value: Any) -> tuple[str, ...] | None:
    """An axis name or a tuple of them as a tuple; None for anything else."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def no_such_axis(error: BaseException, axes: tuple[str, ...] | None = None) -> str | None:
    """The verdict on an error raised because a collective names an axis the mesh lacks (pmap's
    'batch' kept under shard_map), with the mesh's own axes; None for any other error.

    On jax 0.12 such a collective raises a bare AssertionError under check_vma (psum, pmean, pmax,
    ppermute), a NameError 'unbound axis name: batch' otherwise (all_gather, axis_index, check_vma
    off), a ValueError for a tuple of names or a spec's name: the name is read from JAX's frames (kept by
    `jax_frames_kept`), the mesh from the innermost frame of shard_map that holds it, else `axes`.
    """
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    named = mesh_axes = None
    for frame in reversed(frames):  # innermost first
        local = frame.f_locals
        if named is None and frame.f_code.co_filename.endswith(_COLLECTIVES):
            named = _names(local.get("axis_name", local.get("axes")))
        if mesh_axes is None and isinstance(getattr(local.get("mesh"), "axis_names", None), tuple):
            mesh_axes = tuple(local["mesh"].axis_names)
    if named is None and (found := _UNBOUND.search(str(error))):
        named = (found.group(1) or found.group(2),)
    mesh_axes = mesh_axes or (tuple(axes) if axes else None)
    unknown = [a for a in named or () if mesh_axes and a not in mesh_axes]
    return axis_message(unknown[0], mesh_axes) if unknown else None


def axis_message(name: str, axes: tuple[str, ...]) -> str:
    """The verdict on a collective over `name`, an axis the mesh (its `axes`) lacks."""
    return (f"{NO_AXIS}{name!r}: its axes are {tuple(axes)}. Name the mesh's axes in your specs and collectives "
            "(pmap's axis_name does not exist under shard_map)")


def no_such_axis_source() -> str:
    """`no_such_axis` as source, for the hosts of a real run (which do not import the judge): it
    defines `no_such_axis` there."""
    return "\n".join(["import re", "from typing import Any", f"NO_AXIS = {NO_AXIS!r}",
                      f"_UNBOUND = re.compile({_UNBOUND.pattern!r})", f"_COLLECTIVES = {_COLLECTIVES!r}",
                      inspect.getsource(_names), inspect.getsource(no_such_axis),
                      inspect.getsource(axis_message)])


def call_learner(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the learner's function within the time limit; its failures become a Mistake."""
    if not callable(fn):
        raise Mistake(f"expected a function, but got {describe(fn)}")
    try:
        return guarded(lambda: fn(*args, **kwargs))
    except (NotAttempted, Mistake, _TooSlow):
        raise
    except Exception as error:  # the learner's code failed: say how, in JAX's words
        raise Mistake(no_such_axis(error) or f"your function raised {explain(error)}") from None


def describe(value: Any) -> str:
    """A short, learner-friendly description of a value's type (and shape); a function by its name."""
    if callable(value) and not isinstance(value, type) and hasattr(value, "__name__"):
        return f"a function {value.__name__}"
    shape = getattr(value, "shape", None)
    name = type(value).__name__
    if shape is not None and not callable(shape):
        if isinstance(value, (jax.Array, np.ndarray)):
            kind = "a jax.Array" if isinstance(value, jax.Array) else "a numpy array"
        else:
            kind = ("an " if name[0].lower() in "aeiou" else "a ") + name
        dtype = getattr(value, "dtype", None)
        return f"{kind} of shape {tuple(shape)}" + (f" and dtype {dtype}" if dtype is not None else "")
    if value is None:
        return "None"
    if isinstance(value, types.GeneratorType):
        return "a generator"
    if isinstance(value, (list, tuple)) and value and all(hasattr(v, "shape") for v in value):
        shapes = ", ".join(str(tuple(v.shape)) for v in value[:3]) + (", …" if len(value) > 3 else "")
        return f"{name} of {len(value)} arrays of shapes {shapes}"
    text = " ".join(re.sub(r" at 0x[0-9a-f]+", "", repr(value)).split())  # one line, no memory address
    return shorten(text if text.startswith(name) else f"{name} {text}", 40 + len(name) + 1)


def say(message: Message, *args: Any) -> str:
    """A catalogue message as text: call it with `args` when it is a function."""
    return message(*args) if callable(message) else message


# ----------------------------------------------------------------------------- verdicts

def judge(exercise_id: str, answer: Any, time_limit: float = TIME_LIMIT_S) -> Outcome:
    """Judge an answer to a registered exercise. Never raises."""
    return judge_exercise(get(exercise_id), answer, time_limit)


def judge_exercise(exercise: Exercise, answer: Any, time_limit: float = TIME_LIMIT_S) -> Outcome:
    """Judge an answer to any exercise (a drill too); the one place a pass is decided. Never raises."""
    if answer is Ellipsis:
        return Outcome(Status.NOT_ATTEMPTED, exercise.unattempted())
    problem = exercise.kernel.problem() if exercise.kernel is not None else None
    if problem:
        return Outcome(Status.SET_UP, problem)
    _limit.seconds = time_limit
    try:
        exercise.judge(answer)
    except NotAttempted:
        return Outcome(Status.NOT_ATTEMPTED, "not attempted yet: your function still raises NotImplementedError")
    except Mistake as mistake:
        return Outcome(Status.MISTAKE, str(mistake), mistake.detail)
    except _TooSlow as too_slow:
        return Outcome(Status.MISTAKE, f"your answer {too_slow} to check; look for a loop that never ends")
    except Exception as error:  # the judge itself failed: not the learner's fault
        return Outcome(Status.MISTAKE, f"this answer could not be checked ({explain(error)}); compare its "
                                       "form with the prompt")
    finally:
        _limit.seconds = None
    return Outcome(Status.PASS, exercise.praise(answer))


def verdict(exercise_id: str, answer: Any, time_limit: float = TIME_LIMIT_S) -> tuple[str, str]:
    """(status, message) of `judge`."""
    outcome = judge(exercise_id, answer, time_limit)
    return outcome.status, outcome.message


class Verdict:
    """What `check` returns: truthy when the answer passed, equal to True or False; `message` is the
    verdict's message.

    It shows nothing in a notebook, because `check` has already printed the verdict line.
    """

    def __init__(self, passed: bool, message: str = ""):
        self.passed, self.message = passed, message

    def __bool__(self) -> bool:
        return self.passed

    def __eq__(self, other: object) -> bool:
        return self.passed == bool(other) if isinstance(other, (bool, Verdict)) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.passed)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(passed={self.passed})"

    def _ipython_display_(self) -> None:
        """Display nothing: the printed line is the verdict."""


def check(exercise_id: str, answer: Any) -> Verdict:
    """Print a one-line verdict for `answer` (a spec mistake adds what the answer did)."""
    try:
        exercise = get(exercise_id)
    except UnknownExercise as error:
        print(f"❓ {error}")
        return Verdict(False)
    return check_exercise(exercise, answer)


def check_exercise(exercise: Exercise, answer: Any) -> Verdict:
    """Judge `answer` (a drill's too), print its verdict line and keep it in the learner's progress."""
    outcome = judge_exercise(exercise, answer)
    show(exercise, outcome)
    if outcome.status in (Status.PASS, Status.MISTAKE):
        exercise.record(outcome.passed)
    return Verdict(outcome.passed, outcome.message)


def show(exercise: Exercise, outcome: Outcome) -> None:
    """Print a verdict line: the one way every verdict is shown."""
    status, message, detail = outcome
    if status is Status.PASS:
        print(f"✅ {exercise.label} {message}")
    elif status is Status.NOT_ATTEMPTED:
        print(f"⏳ {exercise.label} {message}")
    elif status is Status.SET_UP:
        print(f"⚠️ {exercise.label} cannot be checked yet: {message}")
    else:
        print(f"❌ {exercise.label} not yet: {message}{stop(message)} ({exercise.help()})")
        if detail:
            print("   your answer does this:\n" + "\n".join("   " + line for line in detail.splitlines()))


def stop(message: str) -> str:
    """The full stop a message needs to end a sentence ('' when it has one)."""
    return "" if message.endswith((".", "?", "!", "…")) else "."


def hint(exercise_id: str) -> None:
    """Print the next hint for an exercise."""
    try:
        hints = get(exercise_id).hints
    except UnknownExercise as error:
        print(f"❓ {error}")
        return
    shown = min(_hints_shown.get(exercise_id, 0), len(hints) - 1)
    _hints_shown[exercise_id] = shown + 1
    last = " (that is the last hint; solution('%s') shows an answer)" % exercise_id if shown == len(hints) - 1 else ""
    print(f"💡 hint {shown + 1}/{len(hints)} for {exercise_id}: {hints[shown]}{last}")


def solution(exercise_id: str) -> None:
    """Print a reference solution: the cell you could have written."""
    try:
        exercise = get(exercise_id)
    except UnknownExercise as error:
        print(f"❓ {error}")
        return
    print(f"# A solution for {exercise_id} ({exercise.title}):\n{exercise.solution.strip()}")


def reference(exercise_id: str) -> Any:
    """The reference answer, in the form `check` accepts."""
    exercise = get(exercise_id)
    return exercise.run_source(exercise.solution)
