"""Read the profiler traces each host wrote: events by host, name, start and duration.

`jax.profiler.trace(d, create_perfetto_trace=True)` (or `start_trace` / `stop_trace`) writes
`d/plugins/profile/<timestamp>/perfetto_trace.json.gz`: Chrome trace JSON, gzipped. Its
complete events (`"ph": "X"`) have a name, a start `ts` and a duration `dur` in microseconds,
a thread (`tid`, named by the `thread_name` metadata events) and `args`; an XLA op's args
name the device that ran it (`device_ordinal`) and a `jax.profiler.StepTraceAnnotation`'s
args its `step_num`. Every host names its folder after the same timestamp, so each host
writes to a directory of its own:

    >>> traces = read_hosts(root)      # root/host0, root/host1, ...   # doctest: +SKIP
    >>> steps(traces[0])[1].dur_ms     # step 1 on host 0              # doctest: +SKIP

Standard library only: gzip and json.
"""
from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

__all__ = ["Event", "trace_file", "read_trace", "read_hosts", "steps", "collectives", "during",
           "is_collective", "collective_ms", "python_call", "STEP_NAME", "COLLECTIVES"]

STEP_NAME = "train"  # the name the course's scripts give jax.profiler.StepTraceAnnotation
# An XLA op's trace event is named after its HLO instruction: "all-reduce.5" when XLA made the
# collective (jit's sharding), "psum_invariant.7" or "all_gather.3" when JAX lowered a collective
# primitive (inside shard_map). These are both kinds of name, as jax 0.12 gives them.
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
               "psum", "psum_invariant", "pmax", "pmin", "reduce_scatter", "all_gather", "all_to_all",
               "ppermute")
_COLLECTIVE = re.compile(r"^(?:%s)(?:-start|-done)?(?:\.\d+)?$" % "|".join(COLLECTIVES))
# A Python call the profiler recorded: "$pjit.py:491 _trace_for_jit" (file, line, function).
_PYTHON_CALL = re.compile(r"^\$(?P<file>[^:]+):\d+ (?P<function>\S+)$")


@dataclass(frozen=True)
class Event:
    """One complete event of a host's trace; times in microseconds from the host's trace start."""

    host: int
    name: str
    start_us: float
    dur_us: float
    thread: str
    device: int | None = None  # the device that ran an XLA op; None for other events
    step: int | None = None  # the step_num of a StepTraceAnnotation

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us

    @property
    def dur_ms(self) -> float:
        return self.dur_us / 1000


def trace_file(directory: str | Path) -> Path:
    """The one perfetto_trace.json.gz under `directory` (a host's trace directory)."""
    found = sorted(Path(directory).glob("plugins/profile/*/perfetto_trace.json.gz"))
    if len(found) != 1:
        what = "no trace" if not found else f"{len(found)} traces"
        raise FileNotFoundError(
            f"{what} under {directory} (looked for plugins/profile/*/perfetto_trace.json.gz): give each "
            "host, and each recording, a directory of its own, and pass create_perfetto_trace=True")
    return found[0]


def _number(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def read_trace(path: str | Path, host: int = 0) -> list[Event]:
    """The complete events of one trace (a perfetto_trace.json.gz, or a directory holding one), by start."""
    path = Path(path)
    if path.is_dir():
        path = trace_file(path)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        raw = json.load(f)
    records = raw["traceEvents"] if isinstance(raw, dict) else raw
    threads = {(r.get("pid"), r.get("tid")): r.get("args", {}).get("name", "")
               for r in records if r.get("ph") == "M" and r.get("name") == "thread_name"}
    events = []
    for r in records:
        if r.get("ph") != "X":
            continue
        args = r.get("args") or {}
        events.append(Event(host=host, name=r.get("name", ""), start_us=float(r.get("ts", 0)),
                            dur_us=float(r.get("dur", 0)), thread=threads.get((r.get("pid"), r.get("tid")), ""),
                            device=_number(args.get("device_ordinal")), step=_number(args.get("step_num"))))
    return sorted(events, key=lambda e: e.start_us)


def read_hosts(root: str | Path) -> dict[int, list[Event]]:
    """{host: its events} from root/host0, root/host1, ... (one directory per host)."""
    dirs = sorted((d for d in Path(root).glob("host*") if d.name[4:].isdigit()), key=lambda d: int(d.name[4:]))
    if not dirs:
        raise FileNotFoundError(f"no host directories (host0, host1, ...) under {root}")
    return {int(d.name[4:]): read_trace(d, host=int(d.name[4:])) for d in dirs}


def steps(events: Iterable[Event], name: str = STEP_NAME) -> list[Event]:
    """The step annotations (StepTraceAnnotation(name, step_num=...)), in step order."""
    return sorted((e for e in events if e.name == name and e.step is not None), key=lambda e: e.step)


def is_collective(name: str) -> bool:
    """True for a collective op's event name, like 'all-reduce.5' or 'psum_invariant.7'."""
    return bool(_COLLECTIVE.match(name))


def collectives(events: Iterable[Event]) -> list[Event]:
    """The collective ops that devices ran."""
    return [e for e in events if e.device is not None and is_collective(e.name)]


def python_call(name: str) -> str | None:
    """'pjit.py _trace_for_jit' for the event '$pjit.py:491 _trace_for_jit', a Python call; None
    for any other event. The line number is left out: it moves between JAX releases (466 in 0.10.2)."""
    m = _PYTHON_CALL.match(name)
    return f"{m['file']} {m['function']}" if m else None


def during(events: Iterable[Event], span: Event) -> list[Event]:
    """The events that start inside `span` (e.g. one step)."""
    return [e for e in events if span.start_us <= e.start_us < span.end_us]


def collective_ms(events: Iterable[Event], span: Event) -> float:
    """Milliseconds the host spent in collectives during `span`: per device, then the longest device."""
    per_device: dict[int, float] = {}
    for e in collectives(during(events, span)):
        per_device[e.device] = per_device.get(e.device, 0.0) + e.dur_us
    return max(per_device.values(), default=0.0) / 1000
