"""Kinds of exercise where the catalogue of known wrong answers is the judge.

- `ValueExercise`: a prediction (a number, a shape, a set of cells...). A form coerces the
  answer; the right value is computed (from JAX or helpers.train); a table maps known wrong
  values to messages, and `Rule`s cover whole families of wrong values.
- `SpecExercise`: one or more PartitionSpecs, each in a `Slot` (array shape, right spec, known
  wrong specs). Specs are compared by *placement* (`devices_indices_map` on the exercise's
  mesh), so P('device') and P('device', None) are one answer; a mistake shows the learner's
  own placement under the message.
- `ProgramExercise`: a function. The reference solution and each catalogued wrong program
  (as source) run on judge-made inputs, on several meshes with different device counts; a
  learner's output that differs from the reference gets the message of the wrong program
  whose output it matches. `checks` add structural rules (uses shard_map, is jitted...).
- `ProcessExercise`: the escape hatch for code that must run in real processes: a driver
  script with the learner's source is run by `helpers.launch.run`, and what each host printed
  is the output, judged like a program's.
- `Judged`: any other judge function (raise Mistake when wrong); its wrong answers are listed.

Every kind declares `catalogue()`, the (wrong answer, exact message) pairs that the tests
iterate, so a mistake is written once.
"""
from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from helpers.exercises.core import (
    PRELUDE, Exercise, Message, Mistake, NotAttempted, _guarded, describe, explain, say,
)
from helpers.exercises.forms import Form


@dataclass(frozen=True)
class Rule:
    """A family of mistakes: `when(...)` is true for its members, `say` is their message.

    `example` is a member that no earlier entry of the catalogue catches; the tests check that
    it earns this rule's message (so a rule can never be dead or shadowed).
    """

    when: Callable[..., bool]
    say: Message
    example: Any = None


def _same(a: Any, b: Any) -> bool:
    """Equal values; numbers compared with a tolerance."""
    try:
        if a == b:
            return True
    except Exception:  # arrays compared elementwise
        pass
    import numpy as np

    try:
        x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    except (TypeError, ValueError):
        return False
    return x.shape == y.shape and bool(np.allclose(x, y, rtol=1e-6, atol=1e-6))


_right_values: dict[str, Any] = {}


# ----------------------------------------------------------------------------- values

@dataclass(frozen=True, kw_only=True)
class ValueExercise(Exercise):
    """A predicted value: `form` coerces it, `right()` computes the answer, `wrong` names mistakes."""

    form: Form
    right: Callable[[], Any]
    wrong: Mapping[Any, Message] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    otherwise: Message = "not quite; read the prompt again, then count once more"

    def right_value(self) -> Any:
        """The right value, computed once."""
        if self.id not in _right_values:
            _right_values[self.id] = self.right()
        return _right_values[self.id]

    def judge(self, answer: Any) -> None:
        value = self.form(answer)
        if _same(value, self.right_value()):
            return
        for known, message in self.wrong.items():
            if _same(value, known):
                raise Mistake(say(message, value))
        for rule in self.rules:
            if rule.when(value):
                raise Mistake(say(rule.say, value))
        raise Mistake(say(self.otherwise, value))

    def catalogue(self) -> list[tuple[Any, str]]:
        return ([(known, say(m, known)) for known, m in self.wrong.items()]
                + [(r.example, say(r.say, r.example)) for r in self.rules])


# ----------------------------------------------------------------------------- specs

def placement(mesh, spec, shape: tuple[int, ...]) -> dict[int, tuple] | None:
    """Device id -> the (start, stop) it holds along each dimension, from JAX; None if JAX refuses."""
    from jax.sharding import NamedSharding

    try:
        index_map = NamedSharding(mesh, spec).devices_indices_map(tuple(shape))
    except Exception:  # JAX rejects the spec for this mesh or shape
        return None
    return {d.id: tuple(s.indices(n)[:2] for s, n in zip(idx, shape)) for d, idx in index_map.items()}


def normal_spec(spec) -> tuple:
    """A spec's entries without trailing Nones, 1-tuples as names: P('a', None) -> ('a',)."""
    entries = [e[0] if isinstance(e, tuple) and len(e) == 1 else e for e in spec]
    while entries and entries[-1] is None:
        entries.pop()
    return tuple(entries)


def same_spec(mesh, a, b, shape: tuple[int, ...]) -> bool:
    """Two specs are one answer when they place the same slices on the same devices."""
    pa, pb = placement(mesh, a, shape), placement(mesh, b, shape)
    if pa is None or pb is None:
        return normal_spec(a) == normal_spec(b)
    return pa == pb


@dataclass(frozen=True)
class Slot:
    """One PartitionSpec of an answer: the array it places, the right spec, known wrong specs.

    `label` prefixes its messages ("in_specs[1] (x): ..."); messages may be functions of the spec.
    """

    shape: tuple[int, ...]
    right: Any
    wrong: Mapping[Any, Message] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    otherwise: Message = "this spec does not place the data as asked; compare its picture with the prompt"
    label: str = ""

    def judge(self, mesh, spec) -> None:
        """Return when `spec` places the data like the right spec; else the mistake it makes."""
        if same_spec(mesh, spec, self.right, self.shape):
            return
        for known, message in self.wrong.items():
            if same_spec(mesh, spec, known, self.shape):
                self._fail(mesh, spec, say(message, spec))
        for rule in self.rules:
            if rule.when(spec):
                self._fail(mesh, spec, say(rule.say, spec))
        if placement(mesh, spec, self.shape) is None:
            self._fail(mesh, spec, _rejection(mesh, spec, self.shape))
        self._fail(mesh, spec, say(self.otherwise, spec))

    def _fail(self, mesh, spec, message: str) -> None:
        from helpers.layout import sharding_text

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


def _rejection(mesh, spec, shape) -> str:
    from jax.sharding import NamedSharding

    from helpers.layout import format_spec

    try:
        NamedSharding(mesh, spec).devices_indices_map(tuple(shape))
    except Exception as error:
        reason = explain(error)
    return f"JAX rejects {format_spec(spec)} for shape {tuple(shape)} on mesh axes {dict(mesh.shape)}: {reason}"


def example_spec(mesh, slot: Slot):
    """A spec to show in 'expected a PartitionSpec such as ...': neither right nor a wrong answer."""
    from jax import P

    names = list(mesh.axis_names)
    candidates = [P(None, names[-1]), P(names[-1], None), P(names[0]), P(), P(tuple(reversed(names)))]
    taken = [slot.right, *slot.wrong]
    for spec in candidates:
        if placement(mesh, spec, slot.shape) and not any(same_spec(mesh, spec, t, slot.shape) for t in taken):
            return spec
    return P(None)


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
        from helpers.exercises.forms import spec
        from helpers.layout import format_spec

        like = format_spec(example_spec(self.mesh(), self.slots[0]))
        return (spec(like)(answer),)

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


def course_mesh(shape: tuple[int, ...], names: tuple[str, ...] = ("host", "device")):
    """A mesh of this shape on the first devices, host by host (the course's layout)."""
    import math

    import jax

    return jax.make_mesh(shape, names, devices=jax.devices()[: math.prod(shape)])


def close(a: Any, b: Any, rtol: float = 1e-4, atol: float = 1e-5) -> bool:
    """Two program outputs agree: same structure and shapes, values within tolerance."""
    import jax
    import numpy as np

    if isinstance(a, Raised) or isinstance(b, Raised):
        return isinstance(a, Raised) and isinstance(b, Raised) and a.text == b.text
    try:
        leaves_a, tree_a = jax.tree.flatten(a)
        leaves_b, tree_b = jax.tree.flatten(b)
    except Exception:
        return False
    if tree_a != tree_b:
        return False
    for x, y in zip(leaves_a, leaves_b):
        try:
            x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError):
            return False
        if x.shape != y.shape or not np.allclose(x, y, rtol=rtol, atol=atol):
            return False
    return True


def equations(fn: Callable, *args: Any) -> list[tuple[Any, bool]] | None:
    """Every equation of `fn(*args)`'s jaxpr, nested ones too, each with whether a jit encloses it.

    None when `fn` cannot be traced (e.g. it converts to numpy): structural checks then pass.
    """
    import jax

    try:
        jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    except Exception:
        return None
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
    """True when `fn(*args)` traces without using `primitive` (False when it cannot be traced)."""
    found = equations(fn, *args)
    return found is not None and all(eqn.primitive.name != primitive for eqn, _ in found)


_outputs: dict[tuple, Any] = {}


@dataclass(frozen=True, kw_only=True)
class ProgramExercise(Exercise):
    """A function judged by what it computes, against the reference and catalogued wrong programs.

    `run(fn, mesh)` makes the inputs for `mesh` (seeded) and returns what `fn` computes on them,
    as arrays or a pytree of them. It runs on every mesh of `meshes` (shapes with different
    device counts, so a hard-coded count fails). `wrong` maps the source of each catalogued wrong
    program to its message; `errors` name exceptions of the learner's code (when(error_text));
    `checks` are structural rules tried once the outputs are right (when(fn, mesh)).
    Messages are text or functions of the case (case.mesh, case.devices, case.got, case.want).
    """

    run: Callable[[Callable, Any], Any]
    wrong: Mapping[str, Message] = field(default_factory=dict)
    meshes: tuple[tuple[int, ...], ...] = ((2, 4), (2, 2))
    axis_names: tuple[str, ...] = ("host", "device")
    errors: tuple[Rule, ...] = ()
    checks: tuple[Rule, ...] = ()
    otherwise: Message = "your function computes something else than the prompt asks"
    rtol: float = 1e-4
    atol: float = 1e-5

    def judge(self, answer: Any) -> None:
        if not callable(answer) and not isinstance(self, ProcessExercise):
            raise Mistake(f"expected a function {self.answer_name}(...), but got {describe(answer)}")
        for layout in self.meshes:
            want = self.output_of_source(self.solution, layout)
            got = self.output_of_answer(answer, self.make_case(layout))
            if close(got, want, self.rtol, self.atol):
                continue
            case = self._case(layout, got, want)
            for source, message in self.wrong.items():
                if close(got, self.output_of_source(source, layout), self.rtol, self.atol):
                    raise Mistake(say(message, case))
            if isinstance(got, Raised):
                rule = next((r for r in self.errors if r.when(got.raw)), None)
                raise Mistake(say(rule.say, case) if rule else f"your function raised {got.text}")
            raise Mistake(say(self.otherwise, case))
        for rule in self.checks:
            if rule.when(answer, self.make_case(self.meshes[0])):
                raise Mistake(say(rule.say, self._case(self.meshes[0])))

    def _case(self, layout, got=None, want=None):
        return types.SimpleNamespace(mesh=self.make_case(layout), devices=_size(layout), layout=layout,
                                     got=got, want=want)

    def make_case(self, layout: tuple[int, ...]):
        """The mesh of this shape (ProcessExercise: the (hosts, devices_per_host) itself)."""
        return course_mesh(layout, self.axis_names)

    def output_of_answer(self, fn: Callable, mesh) -> Any:
        """What the learner's function computes on `mesh`; an exception it raises is Raised."""
        try:
            return _guarded(self.run, fn, mesh)
        except (NotAttempted, Mistake):
            raise
        except Exception as error:  # the reference ran on the same inputs: the answer raised this
            return Raised(explain(error), str(error))

    def output_of_source(self, source: str, layout: tuple[int, ...]) -> Any:
        """What a catalogued program (or the reference) computes on this layout, computed once."""
        key = (self.id, source, layout)
        if key not in _outputs:
            _outputs[key] = self.output_of_answer(self.run_source(source), self.make_case(layout))
        return _outputs[key]

    def catalogue(self) -> list[tuple[Any, str]]:
        """Wrong programs told apart by output, then the examples of the error and check rules."""
        cases = [(source, say(m, self._first_difference(source))) for source, m in self.wrong.items()]
        return cases + [(r.example, say(r.say, self._first_difference(r.example)))
                        for r in self.errors + self.checks]

    def _first_difference(self, source: str):
        """The case where a program first parts from the reference (the one its message is about)."""
        for layout in self.meshes:
            want, got = self.output_of_source(self.solution, layout), self.output_of_source(source, layout)
            if not close(got, want, self.rtol, self.atol):
                return self._case(layout, got, want)
        return self._case(self.meshes[0])


def _size(layout: tuple[int, ...]) -> int:
    import math

    return math.prod(layout)


# ----------------------------------------------------------------------------- real processes

@dataclass(frozen=True, kw_only=True)
class ProcessExercise(ProgramExercise):
    """Escape hatch: judged by running the learner's code in real processes (`helpers.launch.run`).

    `driver` is a script with `{answer}` where the answer's source goes (the learner's function,
    read with inspect.getsource, or a catalogued program). Each host must print, as the last line
    of its stdout, its output as JSON. `meshes` are (hosts, devices_per_host) layouts here; the
    output of one run is the tuple of the hosts' outputs. A host that fails makes the output
    "host h failed: <its error>", so a catalogued program that fails the same way matches.
    """

    run: Callable = None  # not used: the driver is the run
    driver: str
    timeout: float = 60.0

    def make_case(self, layout):
        return layout

    def output_of_answer(self, answer: Any, layout) -> Any:
        import inspect
        import textwrap

        if isinstance(answer, str):
            source = answer
        else:
            try:
                source = textwrap.dedent(inspect.getsource(answer))
            except (OSError, TypeError):
                raise Mistake(f"the source of {describe(answer)} cannot be read; define it with def in a cell") from None
        return self._launch(source, layout)

    def output_of_source(self, source: str, layout) -> Any:
        key = (self.id, source, layout)
        if key not in _outputs:
            _outputs[key] = self._launch(source, layout)
        return _outputs[key]

    def _launch(self, source: str, layout) -> Any:
        import json

        from helpers.launch import run

        hosts, per_host = layout
        script = self.driver.replace("{answer}", PRELUDE + self.setup + "\n" + source)
        result = run(source=script, hosts=hosts, devices_per_host=per_host, timeout=self.timeout)
        outputs = []
        for host in result.hosts:
            if not host.ok:
                tail = host.error_tail(3).strip().splitlines()
                if any("NotImplementedError" in line for line in tail):
                    raise NotAttempted
                what = tail[-1] if host.status == "failed" and tail else f"nothing: it {host.status}"
                return Raised(f"{what} on host {host.host}")
            lines = host.stdout.strip().splitlines()
            try:
                outputs.append(json.loads(lines[-1]))
            except (IndexError, ValueError):
                return Raised(f"host {host.host} printed no result line")
        return tuple(outputs)


# ----------------------------------------------------------------------------- anything else

@dataclass(frozen=True)
class WrongAnswer:
    """A known wrong answer (as source code) and a fragment of the message it must earn."""

    source: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Judged(Exercise):
    """A judge function that raises Mistake when wrong; the tests check `wrong_answers`."""

    judged_by: Callable[[Any], None]
    wrong_answers: tuple[WrongAnswer, ...] = ()

    def judge(self, answer: Any) -> None:
        self.judged_by(answer)

    def catalogue(self) -> list[tuple[Any, str]]:
        return [(w.source, w.message) for w in self.wrong_answers]
