"""Kinds of exercise where the catalogue of known wrong answers is the judge.

- `ValueExercise`: a prediction (a number, a shape, a set of cells...). A form coerces the
  answer; the right value is computed (from JAX or helpers.training.tiny); a table maps known wrong
  values to messages, and `Rule`s cover whole families of wrong values.
- `SpecExercise`: one or more PartitionSpecs, each in a `Slot` (array shape, right spec, known
  wrong specs). Specs are compared by *placement* (`devices_indices_map` on the exercise's
  mesh), so P('device') and P('device', None) are one answer; a mistake shows the learner's
  own placement under the message.
- `ProgramExercise`: a function. The reference solution and each catalogued wrong program
  (as source) run on judge-made inputs, on several meshes with different device counts; a
  learner's output that differs from the reference gets the message of the wrong program
  whose output it matches. `checks` add structural rules (uses shard_map, is jitted...).
- `DrillExercise`: a generated value question (helpers.practice), judged like a `ValueExercise`.
- `ProcessExercise` (in `helpers.exercises.processes`): a program judged by what real
  processes print when they run it.

Every kind declares `catalogue()`, the (wrong answer, exact message) pairs that the tests
iterate, so a mistake is written once.
"""
from __future__ import annotations

import functools
import itertools
import math
import re
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import jax
import numpy as np
from jax import P
from jax.sharding import NamedSharding

from helpers import progress_store
from helpers.emulated import hosts
from helpers.exercises import forms
from helpers.exercises.core import (MEMO, Exercise, Message, Mistake, NotAttempted, guarded, describe, explain,
                                    no_such_axis, say)
from helpers.exercises.forms import Form
from helpers.exercises.rules import CodeRule, ErrorRule, OutputRule, SpecRule, TrafficRule, ValueRule, of_kind
from helpers.pictures.layout import format_spec, placement, sharding_text
from helpers.measure.traffic import hosts_along, traffic


def entry(i: int, *values: Any) -> Callable[[Any], bool]:
    """A rule's test on a tuple answer: its entry `i` is one of `values`."""
    return lambda answer: answer[i] in values


def alone(i: Any) -> Callable[[Any], Any]:
    """A rule's example: the right answer made wrong about `i` alone (a tuple of booleans: entry `i`
    flipped; a set: `i` added or taken out)."""
    def wrong_about_i(right: Any) -> Any:
        if isinstance(right, frozenset):
            return right ^ {i}
        return tuple(not v if j == i else v for j, v in enumerate(right))
    return wrong_about_i


def _same(a: Any, b: Any) -> bool:
    """Equal values in a form's normal form; numbers compared with a tolerance."""
    return a == b or close(a, b, rtol=1e-6, atol=1e-6)


def _named(value: Any, wrong: Mapping[Any, Message], rules: tuple[ValueRule | SpecRule, ...], same: Callable) -> str | None:
    """The message of the first catalogue entry `value` falls under: a known wrong value (`same` as
    it), else a rule; None when it is none of them."""
    for known, message in wrong.items():
        if same(value, known):
            return say(message, value)
    return next((say(r.say, value) for r in rules if r.when(value)), None)


# ----------------------------------------------------------------------------- values

@dataclass(frozen=True, kw_only=True)
class ValueExercise(Exercise):
    """A predicted value: `form` coerces it, `right()` computes the answer, `wrong` names mistakes."""

    form: Form
    right: Callable[[], Any]
    wrong: Mapping[Any, Message] = field(default_factory=dict)
    rules: tuple[ValueRule, ...] = ()
    otherwise: Message = "not quite; read the prompt again, then count once more"

    def __post_init__(self):
        of_kind(ValueRule, self.rules, f"{self.id}: rules")

    def right_value(self) -> Any:
        """The right value, computed once."""
        return MEMO.get(("right", self.id), self.right)

    def judge(self, answer: Any) -> None:
        value = self.form(answer)
        if not _same(value, self.right_value()):
            raise Mistake(_named(value, self.wrong, self.rules, _same) or say(self.otherwise, value))

    def catalogue(self) -> list[tuple[Any, str]]:
        examples = [r.example(self.right_value()) if callable(r.example) else r.example for r in self.rules]
        return ([(known, say(m, known)) for known, m in self.wrong.items()]
                + [(example, say(r.say, example)) for r, example in zip(self.rules, examples)])


@dataclass(frozen=True, kw_only=True)
class DrillExercise(ValueExercise):
    """A generated question (helpers.practice): a value exercise that no notebook registers. Its pass
    says what the right answer means, and every checked answer counts in the learner's drills."""

    kind: str
    seed: int
    example: str  # what an answer looks like, for `...`
    meaning: Callable[[Any], str]  # a right answer -> what it means
    answer_name: str = "answer"
    solution: str = ""
    hints: tuple[str, ...] = ()
    kernel: None = None  # a drill builds its own mesh, and says so when JAX has too few devices

    @property
    def label(self) -> str:
        return f"drill {self.seed}"

    def praise(self, answer: Any) -> str:
        return f"right: {self.meaning(answer)}"

    def unattempted(self) -> str:
        return f"not attempted yet: replace ... with your answer, like {self.example}"

    def help(self) -> str:
        return "explain() on this drill shows the answer"

    def record(self, passed: bool) -> None:
        progress_store.record_drill(self.kind, self.seed, passed)


# ----------------------------------------------------------------------------- specs

def normal_spec(spec) -> tuple:
    """A spec's entries without trailing Nones, 1-tuples as names: P('a', None) -> ('a',)."""
    entries = [e[0] if isinstance(e, tuple) and len(e) == 1 else e for e in spec]
    while entries and entries[-1] is None:
        entries.pop()
    return tuple(entries)


def axes_apart(spec) -> bool:
    """True for P('host', 'device') and the like: the two mesh axes on two different dimensions."""
    entries = [e if isinstance(e, tuple) else (e,) for e in normal_spec(spec)]
    with_host = [i for i, e in enumerate(entries) if "host" in e]
    with_device = [i for i, e in enumerate(entries) if "device" in e]
    return bool(with_host and with_device and with_host != with_device)


def same_spec(mesh, a, b, shape: tuple[int, ...]) -> bool:
    """Two specs are one answer when they place the same slices on the same devices (two specs JAX
    refuses, when they are alike)."""
    pa, pb = placement(mesh, a, shape), placement(mesh, b, shape)
    if pa is None or pb is None:
        too_long = (len(a) > len(shape), len(b) > len(shape))
        return pa is None and pb is None and too_long[0] == too_long[1] and normal_spec(a) == normal_spec(b)
    return pa == pb


@dataclass(frozen=True)
class Slot:
    """One PartitionSpec of an answer: the array it places, the right spec, known wrong specs.

    `label` prefixes its messages ("in_specs[1] (x): ..."); messages may be functions of the spec.
    """

    shape: tuple[int, ...]
    right: Any
    wrong: Mapping[Any, Message] = field(default_factory=dict)
    rules: tuple[SpecRule, ...] = ()
    otherwise: Message = "this spec does not place the data as asked; compare its picture with the prompt"
    label: str = ""

    def __post_init__(self):
        of_kind(SpecRule, self.rules, f"the rules of Slot {self.label or self.right}")

    def judge(self, mesh, spec) -> None:
        """Return when `spec` places the data like the right spec; else the mistake it makes, with
        the learner's own placement as its detail."""
        if same_spec(mesh, spec, self.right, self.shape):
            return
        message = (_named(spec, self.wrong, self.rules, lambda a, b: same_spec(mesh, a, b, self.shape))
                   or _rejection(mesh, spec, self.shape) or say(self.otherwise, spec))
        try:
            detail = sharding_text(self.shape, mesh, spec)
        except ValueError:  # JAX cannot place it: the message already says why
            detail = ""
        raise Mistake(f"{self.label}: {message}" if self.label else message, detail)

    def messages(self) -> list[tuple[Any, str]]:
        """(wrong spec, its exact message) for every catalogue entry of this slot."""
        head = f"{self.label}: " if self.label else ""
        return ([(s, head + say(m, s)) for s, m in self.wrong.items()]
                + [(r.example, head + say(r.say, r.example)) for r in self.rules])


def _rejection(mesh, spec, shape) -> str | None:
    """Why JAX refuses to place `spec` for this shape on this mesh; None if it places it."""
    if len(spec) > len(shape):
        names = [e for e in spec if isinstance(e, str)]
        grouped = ": to split one dimension over several axes, group their names in one tuple inside P(...)" \
            if len(names) == len(spec) > 1 else ""
        return (f"{format_spec(spec)} has {len(spec)} entries, but the array has {len(shape)} "
                f"dimension{'s' * (len(shape) != 1)}{grouped}")
    unknown = [a for e in spec if e is not None for a in (e if isinstance(e, tuple) else (e,))
               if a not in mesh.axis_names]
    if unknown:
        names = [repr(a) for a in mesh.axis_names]
        return f"the mesh's axes are {', '.join(names[:-1])} and {names[-1]}; {unknown[0]!r} is not one of them"
    try:
        NamedSharding(mesh, spec).devices_indices_map(tuple(shape))
    except Exception as error:
        return (f"JAX rejects {format_spec(spec)} for shape {tuple(shape)} on mesh axes {dict(mesh.shape)}: "
                f"{explain(error)}")
    return None


def example_spec(mesh, slot: Slot):
    """A spec to show in 'expected a PartitionSpec such as ...': valid, neither right nor a known
    mistake of this slot; None when every spec of one or two entries is one of those."""
    entries = [None, *mesh.axis_names, tuple(mesh.axis_names), tuple(reversed(mesh.axis_names))]
    taken = [slot.right, *slot.wrong]
    for first, second in itertools.product(entries, entries):
        spec = P(first, second)
        if (placement(mesh, spec, slot.shape) and not any(r.when(spec) for r in slot.rules)
                and not any(same_spec(mesh, spec, t, slot.shape) for t in taken)):
            return spec
    return None


@dataclass(frozen=True, kw_only=True)
class SpecExercise(Exercise):
    """PartitionSpecs judged by placement on `mesh()`; `form` splits an answer into one spec per slot.

    With one slot and no form, the answer is one PartitionSpec. `assemble` is the inverse of
    `form` (specs in slot order -> an answer), which the tests use to build catalogued answers.
    """

    mesh: Callable[[], Any]
    slots: tuple[Slot, ...]
    form: Form | None = None
    assemble: Callable[[tuple], Any] = lambda specs: specs[0]

    def specs(self, answer: Any) -> tuple:
        """The answer as one spec per slot (a Mistake about its type otherwise)."""
        if self.form is not None:
            return self.form(answer)
        example = example_spec(self.mesh(), self.slots[0])
        like = format_spec(example) if example is not None else "P(...) with this mesh's axis names"
        return (forms.spec(like)(answer),)

    def judge(self, answer: Any) -> None:
        specs, mesh = self.specs(answer), self.mesh()
        for slot, spec in zip(self.slots, specs):
            slot.judge(mesh, spec)

    def catalogue(self) -> list[tuple[Any, str]]:
        """Per slot: the answer that is right except in this slot, and the message it earns."""
        cases = []
        for i, slot in enumerate(self.slots):
            for spec, message in slot.messages():
                specs = tuple(s.right if j != i else spec for j, s in enumerate(self.slots))
                cases.append((self.assemble(specs), message))
        return cases


# ----------------------------------------------------------------------------- programs

@dataclass(frozen=True)
class Raised:
    """The output of a program that raised: JAX's informative sentence (what outputs compare)."""

    text: str
    raw: str = field(default="", compare=False)
    verdict: bool = field(default=False, compare=False)  # text is a whole verdict (a stopped run), not an error


def course_mesh(shape: tuple[int, ...], names: tuple[str, ...] = ("host", "device")):
    """A mesh of this shape on the first devices, host by host (the course's layout)."""
    return jax.make_mesh(shape, names, devices=jax.devices()[: math.prod(shape)])


def placed(mesh, data, spec=P(("host", "device"))):
    """`data` on `mesh`, placed by `spec` (by default its rows over every device, host by host)."""
    return jax.device_put(data, NamedSharding(mesh, spec))


def from_hosts(parts: list, spec):
    """The global array that len(parts) emulated hosts build from their own parts with `spec`, as
    make_array_from_process_local_data does on the 2 x 4 course mesh (helpers.emulated.hosts)."""
    return hosts.make_array_from_process_local_data(NamedSharding(course_mesh((2, 4)), spec), parts)


_VARYING = re.compile(r"possibly varying over \{([^}]*)\}|replicated across mesh ax[ie]s (.*?), but could not infer")


def varying_over(error_text: str) -> str | None:
    """The mesh axes a result still varies over, from shard_map's check_vma error; None for other errors."""
    found = _VARYING.search(error_text)
    return None if found is None else (found.group(1) or found.group(2)).strip()


def _paired_leaves(a: Any, b: Any) -> list[tuple[Any, Any, Any]] | None:
    """(path, leaf of a, leaf of b) for two pytrees of one structure; None when their structures differ."""
    try:
        leaves_a, tree_a = jax.tree_util.tree_flatten_with_path(a)
        leaves_b, tree_b = jax.tree_util.tree_flatten_with_path(b)
    except Exception:
        return None
    if tree_a != tree_b:
        return None
    return [(path, x, y) for (path, x), (_, y) in zip(leaves_a, leaves_b)]


def close(a: Any, b: Any, rtol: float = 1e-4, atol: float = 1e-5) -> bool:
    """Two program outputs agree: same structure and shapes, values within tolerance."""
    if isinstance(a, Raised) or isinstance(b, Raised):
        return isinstance(a, Raised) and isinstance(b, Raised) and a.text == b.text
    pairs = _paired_leaves(a, b)
    if pairs is None:
        return False
    for _, x, y in pairs:
        if isinstance(x, (str, bytes)) or isinstance(y, (str, bytes)):  # (None is tree structure, never a leaf)
            if x != y:
                return False
            continue
        try:
            x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError):
            return False
        if x.shape != y.shape or not np.allclose(x, y, rtol=rtol, atol=atol):
            return False
    return True


def equations(fn: Callable, *args: Any, about: str = "how it computes them") -> list[tuple[Any, bool]]:
    """Every equation of `fn(*args)`'s jaxpr, nested ones too, each with whether a jit encloses it.

    A function JAX cannot trace (it converts to numpy, calls float() on a result...) is a Mistake:
    a structural check cannot see `about` it, so it must not pass.
    """
    try:
        jaxpr = guarded(jax.make_jaxpr(fn), *args).jaxpr
    except (NotAttempted, Mistake):
        raise
    except Exception as error:
        if axis := no_such_axis(error):
            raise Mistake(axis) from None
        raise Mistake(f"the numbers are right, but JAX cannot trace your function, so the check cannot see {about}: "
                      "keep the computation in jax.numpy, and convert, log or print results outside the function; "
                      f"JAX says {explain(error)}") from None
    found: list[tuple[Any, bool]] = []

    def walk(jaxpr, inside_jit: bool) -> None:
        for eqn in jaxpr.eqns:
            found.append((eqn, inside_jit))
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else (value,):
                    sub = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr holds its Jaxpr in .jaxpr
                    if hasattr(sub, "eqns"):
                        walk(sub, inside_jit or eqn.primitive.name in ("jit", "pjit"))

    walk(jaxpr, False)
    return found


def lacks(primitive: str, fn: Callable, *args: Any) -> bool:
    """True when `fn(*args)` traces without using `primitive` (a Mistake when it cannot be traced)."""
    found = equations(fn, *args, about=f"whether it uses jax.{primitive}")
    return all(eqn.primitive.name != primitive for eqn, _ in found)


RETURNED_NONE = "your function returns None: return the result (a print shows it, but returns nothing)"


def _noting_none(fn: Callable, returned_none: list[bool]) -> Callable:
    """`fn`, noting in `returned_none` whether each call returned None."""
    @functools.wraps(fn)
    def noted(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        returned_none.append(result is None)
        return result
    return noted


def _shape_difference(got: Any, want: Any) -> tuple[str, tuple, tuple] | None:
    """(where, its shape, the right shape) of the first array of `got` whose shape is not its
    counterpart's in `want` (both the same structure of arrays); None when there is none."""
    for path, a, b in _paired_leaves(got, want) or []:
        if hasattr(a, "shape") and hasattr(b, "shape") and tuple(a.shape) != tuple(b.shape):
            return jax.tree_util.keystr(path), tuple(a.shape), tuple(b.shape)
    return None


class InKernel:
    """How a program exercise runs a program in this kernel: `run(fn, mesh)` on the course mesh of each
    layout. A runner (this one, or `processes.RealProcesses`) says what a rule's `case.mesh` is, which
    answers it takes, and what a program computes on a layout."""

    def __init__(self, run: Callable[[Callable, Any], Any]):
        self.run = run

    def mesh(self, layout: tuple[int, ...]):
        """What a rule's `case.mesh` is on this layout: the course mesh of this shape."""
        return course_mesh(layout)

    def screen(self, exercise: "ProgramExercise", answer: Any) -> Any:
        """The answer in the form `output` takes, or a Mistake about its type."""
        if not callable(answer):
            raise Mistake(f"expected a function {exercise.answer_name}(...), but got {describe(answer)}")
        return answer

    def output(self, exercise: "ProgramExercise", fn: Callable, layout: tuple[int, ...]) -> Any:
        """What the learner's function computes on this layout; an exception it raises is Raised."""
        try:
            return guarded(self.run, fn, self.mesh(layout))
        except (NotAttempted, Mistake):
            raise
        except Exception as error:  # the reference ran on the same inputs: the answer raised this
            if axis := no_such_axis(error, self.mesh(layout).axis_names):  # pmap's axis name, kept: a verdict
                return Raised(axis, axis, verdict=True)
            return Raised(explain(error), str(error))

    def known(self, exercise: "ProgramExercise", source: str, layout: tuple[int, ...]) -> Any:
        """What a catalogued program (or the reference) computes on this layout, computed once."""
        return MEMO.get((exercise.id, "output", source, layout),
                        lambda: self.output(exercise, exercise.run_source(source), layout))

    def prefetch(self, exercise: "ProgramExercise", sources: tuple[str, ...], layout: tuple[int, ...]) -> None:
        """Programs about to be looked up (in this kernel: computed when they are)."""

    def judged(self, exercise: "ProgramExercise") -> None:
        """After a judgement (nothing of the learner's is kept here)."""


@dataclass(frozen=True, kw_only=True)
class ProgramExercise(Exercise):
    """A function judged by what it computes, against the reference and catalogued wrong programs.

    `run(fn, mesh)` makes the inputs for `mesh` (seeded) and returns what `fn` computes on them,
    as arrays or a pytree of them. It runs on every mesh of `meshes` (shapes with different
    device counts, so a hard-coded count fails). `wrong` maps the source of each catalogued wrong
    program to its message; `errors` name exceptions of the learner's code (when(error_text));
    `families` are rules on outputs no catalogued program matches (when(case)); `checks` are
    structural rules tried once the outputs are right (when(fn, mesh)). Rules carry an example
    program (source) for the tests.
    Messages are text or functions of the case (case.mesh, case.devices, case.got, case.want).
    `runner` runs the programs: in this kernel (`InKernel(run)`), or in real processes (ProcessExercise).
    """

    run: Callable[[Callable, Any], Any] | None = None  # required, unless the runner is another
    wrong: Mapping[str, Message] = field(default_factory=dict)
    meshes: tuple[tuple[int, ...], ...] = ((2, 4), (2, 2))
    errors: tuple[ErrorRule, ...] = ()
    families: tuple[OutputRule, ...] = ()
    checks: tuple[CodeRule, ...] = ()
    otherwise: Message = "your function computes something else than the prompt asks"

    def __post_init__(self):
        for kind, rules, name in ((ErrorRule, self.errors, "errors"), (OutputRule, self.families, "families"),
                                  (CodeRule, self.checks, "checks")):
            of_kind(kind, rules, f"{self.id}: {name}")

    @property
    def runner(self):
        """How this exercise's programs run."""
        if self.run is None:
            raise TypeError(f"{self.id}: a program exercise needs run(fn, mesh)")
        return InKernel(self.run)

    def run_source(self, source: str) -> Any:
        fn = super().run_source(source)
        if callable(fn):  # exec'd code has no file its source could be read from
            fn.__course_source__ = source
        return fn

    def judge(self, answer: Any) -> None:
        runner = self.runner
        try:
            self._judge(runner, runner.screen(self, answer))
        finally:
            runner.judged(self)

    def _judge(self, runner, answer: Any) -> None:
        returned_none: list[bool] = []
        run = _noting_none(answer, returned_none) if callable(answer) else answer
        case = self._first_difference(lambda layout: runner.output(self, run, layout))
        if case is None:
            for rule in self.checks:
                if rule.when(answer, runner.mesh(self.meshes[0])):
                    raise Mistake(say(rule.say, self._case(self.meshes[0])))
            return
        case.source = answer if isinstance(answer, str) else getattr(answer, "__course_source__", None)
        runner.prefetch(self, tuple(self.wrong), case.layout)
        for source, message in self.wrong.items():
            if close(case.got, self.output_of_source(source, case.layout)):
                raise Mistake(say(message, case))
        if isinstance(case.got, Raised):
            rule = next((r for r in self.errors if r.when(case.got.raw)), None)
        else:  # families read numbers: a function that returned None has none to read
            rule = None if any(returned_none) else next((r for r in self.families if r.when(case)), None)
        if rule:
            raise Mistake(say(rule.say, case))
        if any(returned_none):
            raise Mistake(RETURNED_NONE)
        if isinstance(case.got, Raised):
            raise Mistake(case.got.text if case.got.verdict else f"your function raised {case.got.text}")
        if shapes := _shape_difference(case.got, case.want):
            where, got, want = shapes
            raise Mistake(f"on {case.devices} devices your result{where} has shape {got}, but the prompt's result "
                          f"has shape {want}")
        raise Mistake(say(self.otherwise, case))

    def _case(self, layout, got=None, want=None):
        """What a message function receives; `source` is the program's text when the judge has it."""
        return types.SimpleNamespace(mesh=self.runner.mesh(layout), devices=math.prod(layout), layout=layout,
                                     got=got, want=want, source=None)

    def output_of_source(self, source: str, layout: tuple[int, ...]) -> Any:
        """What a catalogued program (or the reference) computes on this layout, computed once."""
        return self.runner.known(self, source, layout)

    def _entries(self) -> list[tuple[str, Message]]:
        return [*self.wrong.items(), *((r.example, r.say) for r in self.errors + self.families + self.checks)]

    def known_sources(self) -> tuple[str, ...]:
        """The reference and every catalogued program (the wrong ones, the rules' examples)."""
        return (self.solution, *(source for source, _ in self._entries()))

    def catalogue(self) -> list[tuple[Any, str]]:
        """Wrong programs, then the examples of the rules; a program runs only when its message is
        a function of what it computed (a catalogue of real-process programs starts no process)."""
        return [(source, m if isinstance(m, str) else say(m, self._case_of(source))) for source, m in self._entries()]

    def _case_of(self, source: str):
        """The case a catalogued program's message is about: where it first parts from the reference."""
        case = (self._first_difference(lambda layout: self.output_of_source(source, layout))
                or self._case(self.meshes[0]))
        case.source = source
        return case

    def _first_difference(self, output_on: Callable[[tuple[int, ...]], Any]):
        """The case on the first layout where `output_on(layout)` parts from the reference; None if none."""
        for layout in self.meshes:
            got = output_on(layout)  # first: a real-process run of the learner's program takes the reference along
            if isinstance(got, Raised):  # wrong whatever the reference gives: the catalogue is looked up next
                self.runner.prefetch(self, (self.solution, *self.wrong), layout)
            want = self.output_of_source(self.solution, layout)
            if not close(got, want):
                return self._case(layout, got, want)
        return None


@dataclass(frozen=True, kw_only=True)
class PuzzleExercise(ProgramExercise):
    """A program exercise whose right numbers must also come from the right collectives.

    `program(body, mesh)` returns (the shard_map to compile, its input); `baseline(mesh)` is the
    traffic report the rules compare with (nb13: the flat psum's). Once the numbers are right, the
    `traffic` rules are tried in order on the first mesh, and a mistake shows the learner's traffic.
    """

    program: Callable
    baseline: Callable[[Any], Any]
    traffic: tuple[TrafficRule, ...] = ()

    def __post_init__(self):
        super().__post_init__()
        of_kind(TrafficRule, self.traffic, f"{self.id}: traffic")

    def traffic_of(self, body: Callable, mesh) -> Any:
        """What the shard_map of `body` sends, by the cost model of helpers.measure.traffic."""
        fn, x = self.program(body, mesh)
        return traffic(fn, x, host_of=hosts_along(mesh))

    def _flat(self, mesh) -> Any:
        return MEMO.get((self.id, "baseline", mesh.devices.shape), lambda: self.baseline(mesh))

    def judge(self, answer: Any) -> None:
        super().judge(answer)
        if not self.traffic:
            return
        mesh = self.runner.mesh(self.meshes[0])
        yours, flat = self.traffic_of(answer, mesh), self._flat(mesh)
        for rule in self.traffic:
            if rule.when(yours, flat):
                raise Mistake(say(rule.say, yours, flat), yours.text())

    def catalogue(self) -> list[tuple[Any, str]]:
        mesh = self.runner.mesh(self.meshes[0])
        reports = {rule.example: MEMO.get((self.id, "traffic", rule.example, mesh.devices.shape),
                                          lambda rule=rule: self.traffic_of(self.run_source(rule.example), mesh))
                   for rule in self.traffic}
        return super().catalogue() + [(rule.example, say(rule.say, reports[rule.example], self._flat(mesh)))
                                      for rule in self.traffic]
