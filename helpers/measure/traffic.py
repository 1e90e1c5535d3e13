"""How many bytes a compiled program sends between hosts, and how many stay inside a host.

The truth is the program XLA compiled: `jax.jit(f).lower(*args).compile().as_text()`. Every
collective in it (all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute) is
read with its replica groups (as id lists, in XLA's iota form, or as the mesh axes that
`jax.jit` on a mesh emits) or source-target pairs. In the compiled SPMD program those are
*logical* ids: positions in the program's device assignment (for a shard_map, the mesh's
devices in `mesh.devices.flat` order), which this module turns into real devices.

Cost model (explicit, and the same for every program)
------------------------------------------------------
Each collective runs on each of its groups independently. `B` is the bytes of the
collective's result on one device (the sum of a tuple's parts), `n` the group's size, and the
group's devices form a ring in the order of their positions in the program's device list (for a
shard_map, the mesh's order): g0 -> g1 -> ... -> g0, whatever order the program lists the group
in. So psum over ('device', 'host') costs what psum over ('host', 'device') costs: the sum is the
same, and a library picks its ring itself. The listed order still says which piece of a
reduce-scatter or all-gather each device holds (`Collective.groups` keeps it), but a ring can
hand out the pieces in any order, so it does not change the bytes.

- all-reduce, ring algorithm: a reduce-scatter then an all-gather; every ring hop carries
  2 (n-1)/n * B.
- reduce-scatter (result B is 1/n of the input), ring: every hop carries (n-1) * B.
- all-gather (result B is n inputs), ring: every hop carries (n-1)/n * B.
- all-to-all, direct: every device sends B/n to each other device of its group.
- collective-permute: each pair (source, target) with source != target sends B directly.
- A collective inside a loop counts once per iteration (XLA's `known_trip_count`); one in a
  branch of a conditional counts as if every branch ran (an upper bound).

A transfer crosses hosts when its source and target have different hosts. Worked by hand: a
psum of f32[1,16] (B = 64 bytes) over the 8 devices of a (host=2, device=4) mesh is one ring
0 -> 1 -> ... -> 7 -> 0 of 8 hops, each 2 * 7/8 * 64 = 112 bytes; hops 3 -> 4 and 7 -> 0 change
host, so 224 bytes cross hosts and 6 * 112 = 672 stay inside (tests/test_traffic.py checks it).
Two summaries of who carries the load: the most bytes one device sends to other hosts (what a
network card per device carries) and the most one host sends (one card per host).

Real libraries
(NCCL, gloo, ICI) pick their own algorithms; this model is a fixed yardstick that makes
programs comparable, not a timing prediction.

>>> report = traffic(jax.shard_map(body, mesh=mesh, in_specs=P(D), out_specs=P(D)), x)  # doctest: +SKIP
>>> print(report)                                                                         # doctest: +SKIP
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Callable

import jax
import numpy as np

from helpers.emulated import topology

HostOf = Callable[[Any], int]

KINDS = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "collective-permute")
DTYPE_BYTES = {
    "pred": 1, "s4": Fraction(1, 2), "u4": Fraction(1, 2), "s8": 1, "u8": 1, "s16": 2, "u16": 2,
    "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
    "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1, "f8e5m2fnuz": 1, "f8e4m3fnuz": 1,
}

_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%(?P<name>[\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%(?P<name>[\w.\-]+) = (?P<shape>.+?) (?P<op>[a-z][\w\-]*)\((?P<rest>.*)$")
_ARRAY = re.compile(r"\b(?P<dtype>[a-z]+\d*(?:e\d+m\d+\w*)?)\[(?P<dims>[\d,]*)\]")
_EXPLICIT_GROUPS = re.compile(r"replica_groups=\{(?P<body>(?:\{[\d,]*\},?)*)\}")
_IOTA_GROUPS = re.compile(r"replica_groups=\[(?P<shape>[\d,]+)\]<=\[(?P<dims>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?")
_MESH_GROUPS = re.compile(
    r"replica_groups=mesh\[(?P<axes>[^\]]*)\]"
    r"(?:, device_ids=\((?:\[(?P<dims>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?|(?P<ids>[\d,]+))\))?"
    r" \{(?P<along>[^}]*)\}")
_MESH_AXIS = re.compile(r"'?(?P<name>[^',=\s]+)'?=(?P<size>\d+)")
_ALONG_AXIS = re.compile(r"'?(?P<name>[^',:\s]+)'?(?::\((?P<pre>\d+)\)(?P<size>\d+))?")
_PAIRS = re.compile(r"source_target_pairs=\{(?P<body>(?:\{\d+,\d+\},?)*)\}")
_CALLED = re.compile(r"\b(?P<key>body|condition|calls|to_apply|true_computation|false_computation)=%(?P<name>[\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{(?P<names>[^}]*)\}")
_OP_NAME = re.compile(r'op_name="(?P<name>[^"]*)"')
_JAX_NAMES = {"psum_invariant": "psum", "reduce_scatter": "psum_scatter"}  # HLO metadata -> lax name
_HEADER_INT = re.compile(r"\b(?P<key>num_partitions|replica_count)=(?P<value>\d+)")


# ----------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Transfer:
    """Bytes that one device sends straight to another under the cost model."""

    source: Any  # jax Device
    target: Any
    nbytes: Fraction


@dataclass(frozen=True)
class Collective:
    """One collective of the compiled program, with its groups as real devices."""

    kind: str  # one of KINDS
    name: str  # the HLO instruction's name
    jax_op: str  # the JAX primitive it came from, from the HLO metadata ("psum", ...; "compiler" if none)
    nbytes: int | Fraction  # bytes of the result on one device
    groups: tuple[tuple[Any, ...], ...]  # devices of each group as the program lists them, which is the
    # order of a reduce-scatter's or all-gather's pieces (empty for a permute)
    pairs: tuple[tuple[Any, Any], ...] = ()  # (source, target) devices of a collective-permute
    repeats: int = 1  # how often it runs (loop trip counts)
    op_name: str = ""  # the HLO metadata's op_name, the JAX call path(s) it came from ("" if none)
    rings: tuple[tuple[Any, ...], ...] = ()  # each group in ring order, by position in the program's
    # device list (what parse_collectives sets); empty: the ring follows `groups` as listed

    def transfers(self) -> list[Transfer]:
        """Every device-to-device transfer of one run, by the cost model in the module docstring."""
        if self.kind == "collective-permute":
            return [Transfer(s, t, Fraction(self.nbytes)) for s, t in self.pairs if s != t]
        out: list[Transfer] = []
        for group in self.rings or self.groups:
            n = len(group)
            if n < 2:
                continue
            if self.kind == "all-to-all":
                piece = Fraction(self.nbytes, n)
                out += [Transfer(s, t, piece) for s in group for t in group if s != t]
                continue
            per_hop = {
                "all-reduce": Fraction(2 * (n - 1), n) * self.nbytes,
                "reduce-scatter": Fraction(n - 1) * self.nbytes,
                "all-gather": Fraction(n - 1, n) * self.nbytes,
            }[self.kind]
            out += [Transfer(group[i], group[(i + 1) % n], per_hop) for i in range(n)]
        return out


@dataclass(frozen=True, eq=False)
class Traffic:
    """The collectives of one compiled program and the bytes they move, split by host.

    `print(report)` gives a deterministic table; `report.across_hosts` and
    `report.inside_hosts` are the totals in bytes.
    """

    collectives: tuple[Collective, ...]
    hosts: dict  # device -> host number

    def split(self, collective: Collective) -> tuple[Fraction, Fraction]:
        """(bytes inside a host, bytes across hosts) of one collective, all its runs."""
        inside = across = Fraction(0)
        for t in collective.transfers():
            if self.hosts[t.source] == self.hosts[t.target]:
                inside += t.nbytes
            else:
                across += t.nbytes
        return inside * collective.repeats, across * collective.repeats

    @property
    def inside_hosts(self) -> Fraction:
        """Total bytes that stay inside a host."""
        return sum((self.split(c)[0] for c in self.collectives), Fraction(0))

    @property
    def across_hosts(self) -> Fraction:
        """Total bytes that cross between hosts."""
        return sum((self.split(c)[1] for c in self.collectives), Fraction(0))

    def busiest_device_across(self) -> Fraction:
        """The most bytes any one device sends to devices of other hosts in total (what its own
        network card would carry out)."""
        return self._busiest_sender(lambda device: device)

    def busiest_host_across(self) -> Fraction:
        """The most bytes any one host sends to other hosts in total (what one card per host carries)."""
        return self._busiest_sender(lambda device: self.hosts[device])

    def _busiest_sender(self, sender_of: Callable) -> Fraction:
        sent: dict[Any, Fraction] = {}
        for c in self.collectives:
            for t in c.transfers():
                if self.hosts[t.source] != self.hosts[t.target]:
                    key = sender_of(t.source)
                    sent[key] = sent.get(key, Fraction(0)) + t.nbytes * c.repeats
        return max(sent.values(), default=Fraction(0))

    def folded(self) -> list[Collective]:
        """The collectives, with runs of the same collective (an unrolled loop) folded into one."""
        out: list[Collective] = []
        for c in self.collectives:
            last = out[-1] if out else None
            if last and (last.kind, last.groups, last.pairs, last.nbytes) == (c.kind, c.groups, c.pairs, c.nbytes):
                out[-1] = replace(last, repeats=last.repeats + c.repeats)
            else:
                out.append(c)
        return out

    def kinds(self) -> list[str]:
        """The kinds of collective in the program, in program order (repeats included once)."""
        return [c.kind for c in self.collectives]

    def summary(self) -> str:
        """One line: bytes across hosts and inside hosts."""
        return (f"{format_bytes(self.across_hosts)} across hosts, "
                f"{format_bytes(self.inside_hosts)} inside hosts")

    def text(self) -> str:
        """A table: one row per collective, then the totals."""
        if not self.collectives:
            return "no collectives: every device works on its own data (0 B moved)"
        head = (f"{'collective':<22}{'from JAX':<14}{'result/device':>13}  {'groups':<30}"
                f"{'inside hosts':>13}{'across hosts':>13}")
        rows = [head, "-" * len(head)]
        for c in self.folded():
            inside, across = self.split(c)
            kind = c.kind + (f" x{c.repeats}" if c.repeats > 1 else "")
            rows.append(f"{kind:<22}{c.jax_op[:13]:<14}{format_bytes(c.nbytes):>13}  "
                        f"{_groups_text(c):<30}{format_bytes(inside):>13}{format_bytes(across):>13}")
        rows.append(f"{'total':<81}{format_bytes(self.inside_hosts):>13}{format_bytes(self.across_hosts):>13}")
        return "\n".join(rows)

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__


def compare(reports: dict[str, Traffic]) -> str:
    """A table of several programs' traffic: collectives, bytes inside and across hosts.

    'max per device' is the most bytes one device sends to other hosts; 'max per host' the most
    bytes one host sends to the other hosts.
    """
    width = max(len(name) for name in [*reports, "program"]) + 2
    head = (f"{'program':<{width}}{'collectives':<40}{'inside hosts':>13}{'across hosts':>13}"
            f"{'max per device':>15}{'max per host':>13}")
    rows = [head, "-" * len(head)]
    for name, report in reports.items():
        rows.append(f"{name:<{width}}{_kinds_text(report):<40}{format_bytes(report.inside_hosts):>13}"
                    f"{format_bytes(report.across_hosts):>13}{format_bytes(report.busiest_device_across()):>15}"
                    f"{format_bytes(report.busiest_host_across()):>13}")
    return "\n".join(rows)


def _kinds_text(report: Traffic) -> str:
    """'reduce-scatter, all-gather' or 'collective-permute x7' (the same collective repeated)."""
    text = ", ".join(c.kind + (f" x{c.repeats}" if c.repeats > 1 else "") for c in report.folded()) or "none"
    return text if len(text) <= 38 else text[:35] + "..."


def format_bytes(n: int | Fraction) -> str:
    """Bytes as exact text: '96 B', '2,688 B', or one decimal for a fraction of a byte."""
    value = float(n)
    return f"{int(value):,} B" if value == int(value) else f"{value:,.1f} B"


def _groups_text(c: Collective) -> str:
    if c.kind == "collective-permute":
        text = " ".join(f"{s.id}>{t.id}" for s, t in c.pairs)
    else:
        text = " ".join("{" + ",".join(str(d.id) for d in g) + "}" for g in c.groups)
    return text if len(text) <= 28 else text[:25] + "..."


# ----------------------------------------------------------------------------- parsing
@dataclass
class _Computation:
    name: str
    lines: list[str]


def _computations(hlo: str) -> tuple[dict[str, _Computation], str]:
    """The module's computations by name, and the name of the entry computation."""
    computations: dict[str, _Computation] = {}
    entry = None
    current = None
    for line in hlo.splitlines():
        if current is None:
            match = _COMPUTATION.match(line)
            if match:
                current = _Computation(match["name"], [])
                computations[current.name] = current
                if line.startswith("ENTRY"):
                    entry = current.name
        elif line.strip() == "}":
            current = None
        else:
            current.lines.append(line)
    if entry is None:
        raise ValueError("this is not the text of a compiled HLO module (no ENTRY computation found)")
    return computations, entry


def _trip_count(rest: str, name: str) -> int:
    key = "backend_config="
    try:
        if key not in rest:
            raise KeyError(key)
        config, _ = json.JSONDecoder().raw_decode(rest, rest.index(key) + len(key))
        return int(config["known_trip_count"]["n"])
    except (TypeError, KeyError, ValueError):
        raise ValueError(
            f"the loop {name!r} holds collectives but XLA does not know how often it runs; the "
            "cost model needs a loop with a fixed trip count (a fori_loop with constant bounds, "
            "or a Python loop)") from None


def _repeats(computations: dict[str, _Computation], entry: str) -> dict[str, int]:
    """How often each computation that can hold collectives runs per program run."""
    has_collective: dict[str, bool] = {}

    def holds_collectives(name: str, seen: frozenset = frozenset()) -> bool:
        if name not in has_collective:
            found = False
            for line in computations[name].lines:
                match = _INSTRUCTION.match(line)
                if not match:
                    continue
                if _kind(match["op"]):
                    found = True
                    break
                if any(holds_collectives(c, seen | {name}) for c in _called(match["rest"]) if c in computations and c not in seen):
                    found = True
                    break
            has_collective[name] = found
        return has_collective[name]

    runs: dict[str, int] = {}

    def visit(name: str, times: int) -> None:
        runs[name] = runs.get(name, 0) + times
        for line in computations[name].lines:
            match = _INSTRUCTION.match(line)
            if not match:
                continue
            for key, called in _called_with_keys(match["rest"]):
                if called not in computations or not holds_collectives(called):
                    continue
                factor = _trip_count(match["rest"], match["name"]) if key == "body" else 1
                visit(called, times * factor)

    visit(entry, 1)
    return runs


def _called_with_keys(rest: str) -> list[tuple[str, str]]:
    pairs = [(m["key"], m["name"]) for m in _CALLED.finditer(rest)]
    for m in _BRANCHES.finditer(rest):
        pairs += [("branch", n.strip().lstrip("%")) for n in m["names"].split(",") if n.strip()]
    return pairs


def _called(rest: str) -> list[str]:
    return [name for _, name in _called_with_keys(rest)]


def _kind(op: str) -> str | None:
    if op in KINDS:
        return op
    if op.endswith(("-start", "-done")) and op.rsplit("-", 1)[0] in KINDS:
        raise ValueError(f"the program uses the asynchronous collective {op!r}; this cost model reads "
                         "the synchronous forms the CPU compiler emits")
    return None


def shape_bytes(shape: str) -> int | Fraction:
    """Bytes of an HLO shape such as 'f32[1,8]{1,0}' or a tuple '(f32[2], s32[])'."""
    total = Fraction(0)
    for m in _ARRAY.finditer(shape):
        dtype = m["dtype"]
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown element type {dtype!r} in HLO shape {shape!r}")
        dims = [int(d) for d in m["dims"].split(",") if d]
        total += DTYPE_BYTES[dtype] * math.prod(dims)
    return int(total) if total.denominator == 1 else total


def replica_groups(rest: str, size: int) -> list[list[int]]:
    """The logical ids of each group, from `replica_groups=` in any of XLA's three forms.

    Explicit: `{{0,1},{2,3}}`. Iota: `[G,S]<=[dims]T(perm)` means iota(prod(dims)) reshaped to
    dims, transposed by perm, reshaped to G groups of S. An empty list means one group of all
    `size` participants. Mesh axes, what `jax.jit` on a mesh emits: `mesh['a'=2,'b'=4] {'b'}`
    (see `_mesh_axes_groups`).
    """
    mesh = _MESH_GROUPS.search(rest)
    if mesh:
        return _mesh_axes_groups(mesh, size)
    iota = _IOTA_GROUPS.search(rest)
    if iota:
        shape = [int(v) for v in iota["shape"].split(",")]
        dims = [int(v) for v in iota["dims"].split(",")]
        ids = np.arange(math.prod(dims)).reshape(dims)
        if iota["perm"]:
            ids = ids.transpose([int(v) for v in iota["perm"].split(",")])
        return ids.reshape(shape).tolist()
    explicit = _EXPLICIT_GROUPS.search(rest)
    if explicit is None:
        raise ValueError(f"no replica_groups in this collective: {rest[:120]!r}")
    groups = [[int(v) for v in g.split(",") if v] for g in re.findall(r"\{([\d,]*)\}", explicit["body"])]
    return groups or [list(range(size))]


def _mesh_axes_groups(match: re.Match, size: int) -> list[list[int]]:
    """The groups of `replica_groups=mesh['a'=2,'b'=4], device_ids=(...) {'b'}`, as logical ids.

    The mesh's logical ids (row-major: `device_ids` given as an iota `[dims]T(perm)` or as a
    list; iota(size) without it) form an array of the mesh's shape, and a group is every
    device that differs only along the axes in braces, listed with the first-named axis major.
    A sub-axis `'a':(k)m` is the m-sized factor of axis 'a' after a major factor of size k.
    """
    axes = [(m["name"], int(m["size"])) for m in _MESH_AXIS.finditer(match["axes"])]
    names, sizes = [name for name, _ in axes], [n for _, n in axes]
    if math.prod(sizes) != size:
        raise ValueError(f"the mesh {match['axes']!r} of a collective has {math.prod(sizes)} devices, "
                         f"but the program runs on {size}")
    if match["dims"]:
        ids = np.arange(size).reshape([int(v) for v in match["dims"].split(",")])
        if match["perm"]:
            ids = ids.transpose([int(v) for v in match["perm"].split(",")])
    elif match["ids"]:
        ids = np.array([int(v) for v in match["ids"].split(",")])
    else:
        ids = np.arange(size)
    along = [(m["name"], m["pre"] and int(m["pre"]), m["size"] and int(m["size"]))
             for m in _ALONG_AXIS.finditer(match["along"])]
    unknown = [name for name, _, _ in along if name not in names]
    if unknown:
        raise ValueError(f"a collective runs along {unknown}, which its mesh {match['axes']!r} does not have")
    # Split each mesh axis into the factors its sub-axes name, major to minor (padding between).
    factors: list[int] = []  # the mesh's shape, with every axis split into its factors
    position = {}  # (name, pre) -> index of that factor in `factors`
    for name, full in axes:
        pieces = sorted((pre, n) for axis, pre, n in along if axis == name and pre is not None)
        if not pieces:
            position[(name, None)] = len(factors)
            factors.append(full)
            continue
        done = 1
        for pre, n in pieces:
            if pre != done:
                factors.append(pre // done)
            position[(name, pre)] = len(factors)
            factors.append(n)
            done = pre * n
        if done != full:
            factors.append(full // done)
    grouped = [position[(name, pre)] for name, pre, _ in along]
    others = [d for d in range(len(factors)) if d not in grouped]
    members = math.prod(factors[d] for d in grouped)
    return ids.reshape(factors).transpose(others + grouped).reshape(-1, members).tolist()


def source_target_pairs(rest: str) -> list[tuple[int, int]]:
    """The logical (source, target) ids of a collective-permute."""
    match = _PAIRS.search(rest)
    if match is None:
        raise ValueError(f"no source_target_pairs in this collective-permute: {rest[:120]!r}")
    return [(int(a), int(b)) for a, b in re.findall(r"\{(\d+),(\d+)\}", match["body"])]


def parse_collectives(hlo: str, devices: list) -> list[Collective]:
    """Every collective in a compiled HLO module, with logical ids mapped through `devices`.

    `devices` is the program's device assignment: logical id k is `devices[k]`.
    """
    header = dict((m["key"], int(m["value"])) for m in _HEADER_INT.finditer(hlo.splitlines()[0] if hlo else ""))
    if header.get("replica_count", 1) > 1 and header.get("num_partitions", 1) > 1:
        raise ValueError("programs with both replicas and partitions are outside this cost model")
    computations, entry = _computations(hlo)
    runs = _repeats(computations, entry)
    found: list[Collective] = []
    for name in computations:
        if name not in runs:
            continue
        for line in computations[name].lines:
            match = _INSTRUCTION.match(line)
            if not match or not _kind(match["op"]):
                continue
            found.append(_collective(match, devices, runs[name]))
    return found


def _collective(match: re.Match, devices: list, repeats: int) -> Collective:
    kind, rest = match["op"], match["rest"]

    def device(k: int):
        if not 0 <= k < len(devices):
            raise ValueError(f"{match['name']} names device {k}, but the program runs on {len(devices)} devices")
        return devices[k]

    found = _OP_NAME.search(rest)
    op_name = found["name"] if found else ""
    jax_op = _jax_op(op_name) if op_name else "compiler"
    nbytes = shape_bytes(match["shape"])
    if kind == "collective-permute":
        pairs = tuple((device(s), device(t)) for s, t in source_target_pairs(rest))
        return Collective(kind, match["name"], jax_op, nbytes, (), pairs, repeats, op_name)
    listed = replica_groups(rest, len(devices))
    groups = tuple(tuple(device(k) for k in g) for g in listed)
    rings = tuple(tuple(device(k) for k in sorted(g)) for g in listed)  # by position, not as listed
    return Collective(kind, match["name"], jax_op, nbytes, groups, (), repeats, op_name, rings)


def _jax_op(op_name: str) -> str:
    """The JAX primitive of an HLO op_name: 'jit(f)/psum_invariant' -> 'psum'. XLA writes several
    merged ops as 'jit(f)/(a/reduce_sum:b/dot_general)': the first, and '+' for the others."""
    names: list[str] = []
    for part in op_name.split(":"):
        name = part.rsplit("/", 1)[-1].strip("()")
        name = _JAX_NAMES.get(name, name)
        if name not in names:
            names.append(name)
    return names[0] + ("+" if len(names) > 1 else "")


def autodiff_pass(op_name: str) -> str:
    """The pass of a gradient computation that a collective's op_name comes from: 'forward',
    'backward' (autodiff names the gradient's ops `transpose(...)`), 'both' when XLA merged ops
    of the two passes (`prefix/(a:b)`), or 'unknown' for one the compiler added (no op_name).

    >>> autodiff_pass("jit(f)/(jvp()/psum_invariant:transpose(jvp())/reduce_sum)")
    'both'
    """
    if not op_name:
        return "unknown"
    prefix, _, merged = op_name.partition("/(") if ":" in op_name else (op_name, "", "")
    passes = {"backward" if "transpose(" in prefix + part else "forward" for part in merged.split(":")}
    return passes.pop() if len(passes) == 1 else "both"


# ----------------------------------------------------------------------------- programs
def compile_program(fn: Callable, *args: Any) -> Any:
    """`jax.jit(fn).lower(*args).compile()`: the program XLA will run (a jitted `fn` as it is,
    with its own `out_shardings`)."""
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    return jitted.lower(*args).compile()


def device_assignment(compiled: Any) -> list:
    """The devices of a compiled program, in logical-id order (position k runs partition k)."""
    if jax.process_count() > 1:
        raise ValueError("traffic is counted in one process (emulated hosts); this is a multi-process run")
    return list(compiled.runtime_executable().local_devices())


def collectives(fn: Callable, *args: Any) -> list[Collective]:
    """The collectives of `jax.jit(fn)` compiled for `args`, with real devices in their groups."""
    compiled = compile_program(fn, *args)
    return parse_collectives(compiled.as_text(), device_assignment(compiled))


def hosts_along(mesh, axis: str = "host") -> HostOf:
    """A host_of function that reads a device's host from its position along a mesh axis."""
    if axis not in mesh.axis_names:
        raise ValueError(f"the mesh has no axis {axis!r}; its axes are {tuple(mesh.axis_names)}")
    where = list(mesh.axis_names).index(axis)
    devs = np.asarray(mesh.devices, dtype=object)
    table = {d: index[where] for index, d in np.ndenumerate(devs)}

    def host_of(device) -> int:
        return table[device]

    return host_of


def traffic(fn: Callable, *args: Any, host_of: HostOf | None = None) -> Traffic:
    """Bytes that `jax.jit(fn)(*args)` moves across hosts and inside hosts, by the cost model.

    `host_of` maps a device to its host (default: `helpers.emulated.topology.host_of`, the emulated
    hosts); `hosts_along(mesh)` reads it from a mesh's 'host' axis instead.
    """
    host_of = host_of or topology.host_of
    found = collectives(fn, *args)
    devices = {d for c in found for g in c.groups for d in g} | {d for c in found for p in c.pairs for d in p}
    return Traffic(tuple(found), {d: host_of(d) for d in devices})


def groups_as_ids(c: Collective) -> list[list[int]] | list[tuple[int, int]]:
    """A collective's groups (or pairs) as device ids: handy for printing and tests."""
    if c.kind == "collective-permute":
        return [(s.id, t.id) for s, t in c.pairs]
    return [[d.id for d in g] for g in c.groups]

