"""What each host of a stopped run was doing, said in terms of the learner's own code.

When the launcher stops a run that made no progress, every host still running has dumped its
Python stack (faulthandler), and the launcher has watched its CPU (helpers.launch.activity).
Read against the learner's code, the innermost frame of that code says where the host was:
inside a call it made (waiting in it: a collective the other hosts did not make), in its own
line, or past it. What its CPU did decides between computing and waiting: a host that was busy
or kept waking up is computing at the innermost loop around that frame (a loop that never ends?),
whatever function the loop was calling when the dump caught it; an idle host is waiting, even in
its own line: there it waits for a result of that line (JAX's frames above it, such as `_value`
waiting for the devices, are not the learner's), or inside the line's jitted call, which has no
Python frame of its own. Without CPU figures (no /proc), a host in its own line is computing.
One grammar for every exercise:

    host 0 is waiting in `broadcast_one_to_all` at line 3 (`x = broadcast_one_to_all(x)`); host 1 never called it. ...
    host 1 is still computing at line 2 (`while True:`) after 15 s, busy on the CPU: a loop that never ends?
"""
from __future__ import annotations

import ast
import dataclasses
import re
from typing import Sequence

from helpers.launch.activity import ACTIVITIES
from helpers.launch.result import HostResult, RunResult, hosts_text

# One thread's block of a faulthandler dump, and one frame of it.
_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$", re.MULTILINE)
_FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)$', re.MULTILINE)
_RUNNER = ("<string>", 1)  # the host runner's `python -c` frame: the bottom of the main thread
# What a script runs first so that every host prints each call of multihost_utils' collectives and
# the file and line it came from ('[check] calls broadcast_one_to_all from <answer 0>:3').
TRACE_COLLECTIVES = """\
import sys as _sys
from jax.experimental import multihost_utils as _multihost_utils


def _traced(name, collective):
    def call(*args, **kwargs):
        caller = _sys._getframe(1)
        print(f"[check] calls {name} from {caller.f_code.co_filename}:{caller.f_lineno}", flush=True)
        return collective(*args, **kwargs)
    return call


for _name in ("broadcast_one_to_all", "process_allgather", "sync_global_devices"):
    setattr(_multihost_utils, _name, _traced(_name, getattr(_multihost_utils, _name)))
"""
_CALLED = re.compile(r"^\[check\] calls (?P<name>\w+) from (?P<path>.+):(?P<line>\d+)$", re.MULTILINE)
_BUILTIN_CALLS = frozenset({"float", "int", "str", "round", "print", "list", "tuple", "dict", "len", "repr"})


@dataclasses.dataclass(frozen=True)
class Code:
    """The learner's source inside a host's script: the file name stack dumps give it, and the
    script line where its line 1 is."""

    path: str
    first: int
    source: str

    def line(self, number: int) -> str:
        """The text of the learner's line `number` (1-based), stripped."""
        lines = self.source.splitlines()
        return lines[number - 1].strip() if 0 < number <= len(lines) else ""

    def loop_of(self, number: int) -> int:
        """The line of the innermost loop around line `number` (the line itself if none): a host
        sampled anywhere in a loop that never ends is named at the loop, the same on every host."""
        try:
            tree = ast.parse(self.source)
        except SyntaxError:
            return number
        loops = [node.lineno for node in ast.walk(tree) if isinstance(node, (ast.While, ast.For))
                 and node.lineno <= number <= (node.end_lineno or node.lineno)]
        return max(loops, default=number)

    def calls(self, number: int) -> list[str]:
        """The calls a line makes, as written ('jnp.mean'), outermost first; builtins left out."""
        try:
            tree = ast.parse(self.line(number).removeprefix("return ").removesuffix(":") or "pass")
        except SyntaxError:
            return []
        names = [ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)]
        return [name for name in names if name not in _BUILTIN_CALLS]


def _collectives(host: HostResult, code: Sequence[Code]) -> list[tuple[str, int]]:
    """(name, line) of each traced collective a host called from the learner's code, in order."""
    out = []
    for call in _CALLED.finditer(host.stdout):
        piece = _piece(code, call["path"], int(call["line"]))
        if piece is not None:
            out.append((call["name"], int(call["line"]) - piece.first + 1))
    return out


def _piece(code: Sequence[Code], path: str, line: int) -> Code | None:
    """The piece of the learner's code that script line `line` of `path` belongs to (None if none)."""
    return next((c for c in code if c.path == path and c.first <= line < c.first + len(c.source.splitlines())),
                None)


def _unmatched(result: RunResult, code: Sequence[Code]) -> str:
    """'host 0 called `x` at line 3; host 1 never called it': the first collective not every host made."""
    calls = {h.host: _collectives(h, code) for h in result.hosts}
    for i in range(max(map(len, calls.values()), default=0)):
        made = {h: c[i] for h, c in calls.items() if len(c) > i}
        if len(made) == len(calls) and len(set(made.values())) == 1:
            continue
        name, line = made[min(made)]  # the lowest host's call: the others did not make it (or made another)
        callers = [h for h, each in made.items() if each == (name, line)]
        others = [h for h in calls if h not in callers]
        return (f"{hosts_text(callers)} called `{name}` at line {line}; {hosts_text(others)} never called it"
                + ("" if len(others) == 1 else " there"))
    return ""


def main_stack(stderr: str) -> list[tuple[str, int, str]]:
    """(path, line, function) of the main thread's frames in the last stack dump, innermost first."""
    blocks = _THREAD.split(stderr)[1:]
    for block in reversed(blocks):
        frames = [(f["path"], int(f["line"]), f["function"]) for f in _FRAME.finditer(block)]
        if any((path, line) == _RUNNER for path, line, _ in frames):
            return frames
    return []


@dataclasses.dataclass(frozen=True)
class _Where:
    kind: str  # "computing", "waiting", "outside" (running, not in the learner's code), "finished", "unknown"
    line: int = 0
    text: str = ""
    call: str = ""
    doing: str = ""  # the host's activity: "busy", "waking", "idle" or '' (not known)

    def place(self) -> str:
        return f"at line {self.line}" + (f" (`{self.text}`)" if self.text else "")


def where(host: HostResult, code: Sequence[Code]) -> _Where:
    """Where one host was when the launcher stopped it, in the learner's code if it was there."""
    if host.ok or host.script_ended:
        return _Where("finished")
    frames = main_stack(host.stderr)
    if not frames:
        return _Where("unknown")
    for depth, (path, line, _) in enumerate(frames):
        piece = _piece(code, path, line)
        if piece is None:
            continue
        number = line - piece.first + 1
        # busy or waking: computing, wherever the dump caught it (a loop may call a function)
        if host.activity in ("busy", "waking") or (depth == 0 and host.activity != "idle"):
            loop = piece.loop_of(number)
            return _Where("computing", loop, piece.line(loop), doing=host.activity)
        if depth == 0:  # idle in its own line: blocked in a call that left no frame (a compiled jitted function)
            calls = piece.calls(number)
            return _Where("waiting", number, piece.line(number), calls[-1] if calls else "")
        called = {function for _, _, function in frames[:depth]}
        calls = piece.calls(number)
        named = next((c for c in calls if c.rsplit(".", 1)[-1] in called), calls[-1] if calls else "")
        return _Where("waiting", number, piece.line(number), named)
    return _Where("outside")


def looped(result: RunResult, code: Sequence[Code]) -> bool:
    """Some host was computing in the learner's code when the run was stopped (not only waiting)."""
    return any(where(h, code).kind == "computing" for h in result.hosts)


def describe_stall(result: RunResult, code: Sequence[Code], seconds: float) -> str:
    """One sentence: what each host was doing when the run was stopped after `seconds` s."""
    places = {h.host: where(h, code) for h in result.hosts}
    clauses: list[str] = []
    loops: dict[tuple[int, str], list[int]] = {}
    for host, at in places.items():
        if at.kind == "computing":
            loops.setdefault((at.line, at.text), []).append(host)
    for hosts in loops.values():
        doing = {places[h].doing for h in hosts}
        how = f", {ACTIVITIES[doing.pop()]}" if len(doing) == 1 and doing <= {"busy", "waking"} else ""
        clauses.append(f"{hosts_text(hosts)} {'is' if len(hosts) == 1 else 'are'} still computing "
                       f"{places[hosts[0]].place()} after {seconds:g} s{how}: a loop that never ends?")
    if not loops and (unmatched := _unmatched(result, code)):
        return unmatched + ". A collective finishes only when every host calls it, in the same order"
    waits: dict[tuple[int, str], list[int]] = {}
    for host, at in places.items():
        if at.kind == "waiting":
            waits.setdefault((at.line, at.call), []).append(host)
    for (line, call), hosts in waits.items():
        at = places[hosts[0]]
        verb = "is" if len(hosts) == 1 else "are"
        place = f"in `{call}` {at.place()}" if call else at.place()
        clauses.append(f"{hosts_text(hosts)} {verb} waiting {place}")
    rest = [h for h, at in places.items() if at.kind in ("finished", "outside", "unknown")]
    outside = [h for h in rest if places[h].kind == "outside"]
    finished = [h for h in rest if places[h].kind == "finished"]
    unknown = [h for h in rest if places[h].kind == "unknown"]
    if waits and len(waits) == 1 and (outside or finished):
        clauses.append(f"{hosts_text(outside + finished)} never called it")
    else:
        if outside:
            clauses.append(f"{hosts_text(outside)} {'is' if len(outside) == 1 else 'are'} waiting past your "
                           "function, in a collective of the check's own code")
        if finished:
            clauses.append(f"{hosts_text(finished)} had finished")
    if unknown:
        clauses.append(f"{hosts_text(unknown)} {'was' if len(unknown) == 1 else 'were'} still running")
    advice = "" if not (waits or outside) or any(at.kind == "computing" for at in places.values()) else (
        ". A collective finishes only when every host calls it, in the same order")
    return "; ".join(clauses) + advice
