"""Real processes as the runner of a program exercise: `RealProcesses`, and `ProcessExercise` that declares it.

A driver script with the learner's source is run by `helpers.launch.run` on localhost; what each
host printed is the program's output, judged like a `ProgramExercise`'s (reference, catalogued wrong
programs, rules). A run that fails or hangs has `failure(result)` as its output.
"""
from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from helpers import launch
from helpers.exercises.core import (MEMO, NO_AXIS, PRELUDE, Mistake, NotAttempted, describe, no_such_axis_source,
                                    say)
from helpers.exercises.kinds import ProgramExercise, Raised
from helpers.launch.result import describe_exit
from helpers.launch.stall import TRACE_COLLECTIVES, Code, describe_stall, looped


def _function_def(source: str, name: str) -> ast.FunctionDef | None:
    """The top-level `def name(...)` of `source`; None if it has none (or is no Python)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _is_stub(function: ast.FunctionDef) -> bool:
    """True when the function's body (its docstring aside) only raises NotImplementedError."""
    body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0])


# The time limits of every exercise run in processes: a run where no host printed for STALL_SECONDS
# is stopped, and the verdict says where each host was (the prompts say so); already after
# IDLE_SECONDS when no host is computing either (helpers.launch.activity): every host is blocked,
# waiting for another, and none can print again.
STALL_SECONDS = 15.0
IDLE_SECONDS = 4.0
PARALLEL_RUNS = 3  # runs a catalogue lookup makes at once (each host holds 200-250 MB)
_HEARTBEAT = "print('[check] running your code', flush=True)\n"  # arms the launcher's stall detection


_NAME_MISMATCH = re.compile(r"(\w+) name mismatch \('[^']*'\)")  # JAX's sync_global_devices on hosts that differ


def failure(result, code: tuple[Code, ...] = ()) -> Raised:
    """What a run that did not end well did: the last error line of the host that failed first (in
    the launcher's order: a host whose collective lost its peer comes after the host that died), or,
    when none failed, where each host was in the learner's `code` when the run was stopped (a hang)."""
    order = {h: i for i, h in enumerate(result.failed_first)}
    failed = sorted((h for h in result.hosts if h.status == "failed"),
                    key=lambda h: (order.get(h.host, len(order)), h.host))
    if failed:
        lines = {h.host: (h.error_tail(3).strip().splitlines() or [_crash(h)])[-1] for h in failed}
        # Hosts that raised the same exception type (a name mismatch raises on every host at once)
        # are one cause, named by the lowest host: which of them exited first is a race.
        kind = lines[failed[0].host].partition(":")[0]
        first = min(h.host for h in failed if lines[h.host].partition(":")[0] == kind)
        if mismatch := _NAME_MISMATCH.search(lines[first]):
            # Each host names its own call ('step 4' on one, 'save 3' on the other), and which host's
            # error arrives before the launcher stops the others is a race: one text for all of them.
            text = f"{kind}: {mismatch[1]} name mismatch: the hosts called it at once with different names"
            return Raised(text, text)
        text = f"{lines[first]} on host {first}"
        return Raised(text, text)
    text = "the run was stopped: " + describe_stall(result, code, result.stopped_after or STALL_SECONDS)
    return Raised(text, ("the run looped: " if looped(result, code) else "the run hung: ") + text, verdict=True)


def _crash(host) -> str:
    """Why a host that printed no Python error died, in the learner's terms (never the runtime's text)."""
    how = describe_exit(host.returncode)
    if "collective mismatch" in host.log:
        return (f"a crash ({how}): the hosts' collectives did not match (some hosts made another collective, "
                "or the same one on data of another size)")
    return f"a crash ({how}) with no Python error"


# What each host of a `together` run executes: every source on every layout, through the driver's `output`.
_TOGETHER = """\
from helpers.errors import explain
from helpers.launch import initialize

initialize()

import json
import jax
jax.config.update("jax_traceback_filtering", "off")  # JAX's frames name an axis the mesh lacks (no_such_axis)
{no_such_axis}
{trace}

{driver}

out = []
for index, source in enumerate({sources}):
    row = []
    for layout in {layouts}:
        namespace = {{}}
        print(f"[check] running program {{index}} on {{layout}}", flush=True)  # arms the stall detection
        try:
            exec(compile({prelude} + source, f"<answer {{index}}>", "exec"), namespace)
            row.append(output(namespace, layout))
        except Exception as error:  # the program raised: its error, in one line, is its output
            row.append(no_such_axis(error) or explain(error))
    out.append(row)
print(json.dumps(out))
"""


def handed_in(exercise: ProgramExercise, source: str) -> bool:
    """A program the learner handed in: neither the reference nor a catalogued one."""
    return source not in exercise.known_sources()


@dataclass(frozen=True)
class RealProcesses:
    """How a ProcessExercise runs a program: `helpers.launch.run` starts the driver with the program's
    source on each (hosts, devices_per_host) layout; the output is what the hosts printed."""

    driver: str
    signature: str
    precheck: Callable[[Callable], None] | None
    together: bool
    on: tuple[int, int] | None
    timeout: float
    stall: float
    idle: float
    apart: tuple[str, ...]  # catalogued programs that hang: each runs alone, not with the others

    def mesh(self, layout: tuple[int, int]) -> tuple[int, int]:
        """What a rule's `case.mesh` is: the (hosts, devices_per_host) layout itself."""
        return layout

    def screen(self, exercise: ProgramExercise, answer: Any) -> str:
        """The answer's source; NotAttempted for a stub, a Mistake for anything but the function."""
        source = answer if isinstance(answer, str) else getattr(answer, "__course_source__", None)
        if source is None and inspect.isfunction(answer):
            try:
                source = textwrap.dedent(inspect.getsource(answer))
            except (OSError, TypeError):
                raise Mistake(f"the source of {exercise.answer_name} cannot be read; define it with def in a "
                              "cell") from None
        function = _function_def(source, exercise.answer_name) if source is not None else None
        if function is None:
            raise Mistake(f"expected a function {exercise.answer_name}{self.signature}, defined with def in a "
                          f"cell, but got {describe(answer)}")
        if _is_stub(function):
            raise NotAttempted
        if self.precheck is not None:
            try:
                self.precheck(answer if callable(answer) else exercise.run_source(source))
            except Mistake as error:  # an error rule names it as the real run would
                rule = next((r for r in exercise.errors if r.when(str(error))), None)
                raise (Mistake(say(rule.say, exercise._case(exercise.meshes[0]))) if rule else error) from None
        return source

    def output(self, exercise: ProgramExercise, source: str, layout) -> Any:
        got = self.known(exercise, source, layout)
        if isinstance(got, Raised) and "NotImplementedError" in got.raw:
            raise NotAttempted
        return got

    def known(self, exercise: ProgramExercise, source: str, layout) -> Any:
        """What a program printed on this layout; known programs run once (together, if so declared).
        A learner's program that runs alone has the reference run beside it, if that has not run yet:
        the comparison needs it next, and a learner's run that hangs leaves the cores to it."""
        if (exercise.id, "output", source, layout) not in MEMO:
            batches = [self._batch(exercise, source, layout)]
            if exercise.solution not in batches[0] and handed_in(exercise, source) \
                    and self._not_run(exercise, exercise.solution, layout):
                batches.append((exercise.solution,))
            self._side_by_side(exercise, batches, layout)
        return MEMO[(exercise.id, "output", source, layout)]

    def _side_by_side(self, exercise: ProgramExercise, batches: list[tuple[str, ...]], layout) -> None:
        """Run each batch of programs (one run each), at most PARALLEL_RUNS at once; keep their outputs."""
        if len(batches) == 1:
            MEMO.put(self._launch(exercise, batches[0], layout))
            return
        with ThreadPoolExecutor(max_workers=PARALLEL_RUNS) as pool:
            for outputs in pool.map(lambda batch: self._launch(exercise, batch, layout), batches):
                MEMO.put(outputs)

    def _batch(self, exercise: ProgramExercise, source: str, layout) -> tuple[str, ...]:
        """The programs the run that computes `source` computes (with `together`): the learner's with the
        reference, if that has not run yet (a right answer needs nothing else); the reference alone; a
        catalogued program with every known one not yet run. Without `together`, each alone."""
        if not self.together or source == exercise.solution:
            return (source,)
        if handed_in(exercise, source):
            return (source,) + ((exercise.solution,) if self._not_run(exercise, exercise.solution, layout) else ())
        rest = tuple(s for s in exercise.known_sources() if s not in self.apart and self._not_run(exercise, s, layout))
        return rest if source in rest else (source,)

    def prefetch(self, exercise: ProgramExercise, sources: tuple[str, ...], layout) -> None:
        """Run the programs not yet known on this layout, their runs side by side (at most
        PARALLEL_RUNS at once): a catalogue with several programs that hang waits for one idle
        limit, not one per program, since hung hosts leave the cores to the others."""
        batches, planned = [], set()
        for source in sources:
            if source in planned or not self._not_run(exercise, source, layout):
                continue
            batch = tuple(s for s in self._batch(exercise, source, layout) if s not in planned)
            batches.append(batch)
            planned.update(batch)
        if len(batches) > 1:  # one run or none: `known` makes it when it is needed
            self._side_by_side(exercise, batches, layout)

    @staticmethod
    def _may_hang(exercise: ProgramExercise, sources: tuple[str, ...]) -> bool:
        """Whether a run may hang, and so gets the idle limit: the learner's program runs first in it,
        or a catalogued one alone. Never the reference, nor the catalogue's programs run together
        (the ones that hang run alone): a run of theirs stopped as a hang would spoil every verdict."""
        return sources[0] != exercise.solution and (len(sources) == 1 or handed_in(exercise, sources[0]))

    @staticmethod
    def _not_run(exercise: ProgramExercise, source: str, layout) -> bool:
        return (exercise.id, "output", source, layout) not in MEMO

    def judged(self, exercise: ProgramExercise) -> None:
        """The learner's outputs are kept for one judgement only."""
        known = exercise.known_sources()
        MEMO.forget(lambda key: key[:2] == (exercise.id, "output") and key[2] not in known)

    def _launch(self, exercise: ProgramExercise, sources: tuple[str, ...], layout) -> dict:
        """{(id, "output", source, layout): output} for every source on `layout` (on every layout, with `on`)."""
        layouts = exercise.meshes if self.on else (layout,)
        prelude = PRELUDE + exercise.setup + "\n"
        if self.together:
            script = _TOGETHER.format(driver=self.driver, sources=repr(list(sources)), layouts=repr(layouts),
                                      prelude=repr(prelude), trace=TRACE_COLLECTIVES,
                                      no_such_axis=no_such_axis_source())
            code = tuple(Code(f"<answer {i}>", prelude.count("\n") + 1, s) for i, s in enumerate(sources))
        else:
            before = self.driver[:self.driver.index("{answer}")].count("\n")
            head = _HEARTBEAT + TRACE_COLLECTIVES + prelude
            script = self.driver.replace("{answer}", head + sources[0])
            code = (Code("<source>", before + head.count("\n") + 1, sources[0]),)
        num_hosts, per_host = self.on or layout
        result = launch.run(source=script, hosts=num_hosts, devices_per_host=per_host, timeout=self.timeout,
                            stall=self.stall, idle=self.idle if self._may_hang(exercise, sources) else None)
        keys = [(exercise.id, "output", s, l) for s in sources for l in layouts]
        # A run that hangs or crashes is the doing of the learner's program, always first: the reference runs again.
        spoiled = [k for k in keys if k[2] == sources[0]] if handed_in(exercise, sources[0]) else keys
        if not result.ok:
            return dict.fromkeys(spoiled, failure(result, code))
        printed = []
        for host in result.hosts:
            try:
                printed.append(json.loads(host.last_line))
            except ValueError:
                return dict.fromkeys(spoiled, Raised(f"host {host.host} printed no result line"))
        if not self.together:
            return {keys[0]: tuple(printed)}
        outputs = {}
        for i, source in enumerate(sources):
            for j, each in enumerate(layouts):
                got = [every[i][j] for every in printed]
                error = next(((h, g) for h, g in enumerate(got) if isinstance(g, str)), None)
                outputs[(exercise.id, "output", source, each)] = (
                    tuple(got) if not error else Raised(error[1], error[1], verdict=True)
                    if error[1].startswith(NO_AXIS) else Raised(f"{error[1]} on host {error[0]}", error[1]))
        return outputs


@dataclass(frozen=True, kw_only=True)
class ProcessExercise(ProgramExercise):
    """A program exercise whose runner is real processes (`RealProcesses`, on `helpers.launch.run`).

    `meshes` are (hosts, devices_per_host) layouts here. `driver` is a script with `{answer}` where
    one program's source goes (after the prelude and setup); each host prints its output as JSON on
    its last stdout line, and the output of a run is the tuple of the hosts' outputs. With
    `together`, the driver defines `output(namespace, layout)` instead: what one program (run into
    `namespace`) gives on one layout. One run then judges several sources on every layout (an error
    is its text): the learner's function with the reference (all a right answer needs; a run that
    hangs or crashes is the learner's doing, and the reference runs again alone), the whole
    catalogue at once the first time a mistake is looked up. With `on`, that one run has this
    layout and the `meshes` are sub-meshes of it; without, each layout is its own run.

    A failed or hung run's output is `failure(result)`. Before any process starts, a stub is not
    attempted, anything but a function `answer_name` (or its source) is a Mistake, and
    `precheck(fn)` may call the function in the kernel. Catalogued programs keep their source
    (`run_source`), so each runs once.
    """

    driver: str
    signature: str = "(...)"  # the function's parameters, for the message about an answer that is none
    precheck: Callable[[Callable], None] | None = None
    together: bool = False
    on: tuple[int, int] | None = None
    timeout: float = 60.0  # the whole run's limit (the catalogue's run is longer than one program's)
    stall: float = STALL_SECONDS  # a run where every host printed, then none did for `stall` s, hung
    idle: float = IDLE_SECONDS  # ... or for `idle` s, with no host computing
    apart: tuple[str, ...] = ()  # catalogued programs that hang: each runs alone, not with the others

    @property
    def runner(self) -> RealProcesses:
        return RealProcesses(self.driver, self.signature, self.precheck, self.together, self.on, self.timeout,
                             self.stall, self.idle, self.apart)
