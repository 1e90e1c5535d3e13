"""The layout model: where each piece of a sharded array lives, as data and as deterministic text.

Placement comes only from JAX (`NamedSharding(mesh, spec).devices_indices_map(shape)`);
this module checks the request first so a learner gets a plain ValueError with the fix,
groups devices by host and tile, and prints it. `helpers.pictures.sharding` draws the same data.

>>> print(sharding_text((8,), mesh, P("device")))   # doctest: +SKIP
shape (8,), P('device'), mesh (host=2, device=4)
host 0: dev 0 [0:2]  dev 1 [2:4]  dev 2 [4:6]  dev 3 [6:8]
host 1: dev 4 [0:2]  dev 5 [2:4]  dev 6 [4:6]  dev 7 [6:8]
4 tiles of shape (2,); each tile is held by 2 devices, on 2 different hosts.
split: dim 0 over 'device' (4 ways); copied along unused mesh axis 'host' (2 copies).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from helpers.emulated import topology

HostOf = Callable[[Any], int]
Index = tuple[tuple[int, int], ...]  # (start, stop) for each array dimension

_WRAP = 88  # longest host line before it wraps


# ----------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Tile:
    """One distinct piece of the global array and every device that holds a copy of it."""

    index: Index
    devices: tuple  # in jax.devices() order


@dataclass(frozen=True, eq=False)
class ShardingLayout:
    """Which device holds which slice of a global array, and which host owns each device.

    Built by `sharding_layout`; `str()` / `repr()` give the deterministic text form.
    """

    shape: tuple[int, ...]
    spec: Any  # PartitionSpec
    mesh: Any  # jax.sharding.Mesh
    placement: dict  # device -> Index, straight from devices_indices_map
    hosts: dict  # device -> host number
    position: dict  # device -> position in jax.devices() (drives colours)
    tiles: tuple[Tile, ...]  # sorted by index

    @property
    def devices(self) -> list:
        """The mesh's devices in jax.devices() order."""
        return sorted(self.placement, key=self.position.__getitem__)

    @property
    def replication(self) -> int:
        """How many devices hold each tile (the same for every tile of a NamedSharding)."""
        return max(len(t.devices) for t in self.tiles)

    def text(self) -> str:
        """The deterministic text form (what `sharding_text` returns)."""
        lines = [f"shape {shape_text(self.shape)}, {format_spec(self.spec)}, mesh {mesh_label(self.mesh)}"]
        for host in sorted(set(self.hosts.values())):
            items = [
                f"dev {d.id} {format_index(self.placement[d], self.shape)}"
                for d in self.devices
                if self.hosts[d] == host
            ]
            lines += _wrap(f"host {host}: ", items)
        lines.append(self.summary())
        lines.append(self.axes_summary())
        return "\n".join(lines)

    def words(self) -> str:
        """The text form as sentences on one line: what a reader who cannot see the picture hears."""
        return "; ".join(line.strip().rstrip(".") for line in self.text().splitlines()) + "."

    def summary(self) -> str:
        """One sentence on tiles and replication, e.g. 'each tile is held by 2 devices ...'."""
        n = len(self.tiles)
        reps = sorted({len(t.devices) for t in self.tiles})
        nhosts = sorted({len({self.hosts[d] for d in t.devices}) for t in self.tiles})
        all_hosts = len(set(self.hosts.values()))
        tile_shape = shape_text(tuple(b - a for a, b in self.tiles[0].index))
        ndev = len(self.placement)
        host_word = plural(all_hosts, "host")
        if n == 1:
            what = "the whole scalar" if not self.shape else "the whole array"
            if ndev == 1:
                return f"1 tile: {what}, on 1 device."
            return f"1 tile: {what}, held by all {ndev} devices (fully replicated) on {host_word}."
        head = f"{n} tiles of shape {tile_shape}"
        if reps == [1]:
            return f"{head}; each tile is held by exactly 1 device (no copies)."
        r = reps[0] if len(reps) == 1 else f"{reps[0]} to {reps[-1]}"
        if nhosts == [1]:
            where = "all on the same host"
        elif len(nhosts) == 1 and len(reps) == 1 and nhosts[0] == reps[0]:
            where = f"on {reps[0]} different hosts"
        else:
            where = f"spread over {nhosts[0] if len(nhosts) == 1 else f'{nhosts[0]} to {nhosts[-1]}'} hosts"
        return f"{head}; each tile is held by {r} devices, {where}."

    def axes_summary(self) -> str:
        """Which mesh axes split which dimensions, and which unused axes make copies."""
        sizes = dict(self.mesh.shape)
        parts, used = [], set()
        for dim, entry in enumerate(_entries(self.spec)):
            axes = _axes_of(entry)
            if not axes:
                continue
            used.update(axes)
            ways = _prod(sizes[a] for a in axes)
            names = " then ".join(repr(a) for a in axes)
            parts.append(f"dim {dim} over {names} ({ways} ways)")
        unused = [a for a in self.mesh.axis_names if a not in used and sizes[a] > 1]
        split = "split: " + ("; ".join(parts) if parts else "nothing (every device holds it all)")
        if not unused:
            return split + "."
        copies = _prod(sizes[a] for a in unused)
        names = " and ".join(repr(a) for a in unused)
        axis_word = "axis" if len(unused) == 1 else "axes"
        return f"{split}; copied along unused mesh {axis_word} {names} ({copies} copies)."

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__


# ----------------------------------------------------------------------------- formatting
def format_spec(spec) -> str:
    """P('device'), P(('host', 'device'), None), P(): the notation used across the course."""
    return "P(" + ", ".join(_entry_str(e) for e in _entries(spec)) + ")"


def format_index(index: Index, shape: tuple[int, ...]) -> str:
    """'[0:2, :]' for rows 0-1 and every column; '(scalar)' for a 0-D array."""
    if not shape:
        return "(scalar)"
    parts = [":" if (a, b) == (0, n) else f"{a}:{b}" for (a, b), n in zip(index, shape)]
    return "[" + ", ".join(parts) + "]"


def mesh_label(mesh) -> str:
    """'(host=2, device=4)'."""
    return "(" + ", ".join(f"{n}={s}" for n, s in mesh.shape.items()) + ")"


def mesh_text(mesh, *, host_of: HostOf | None = None) -> str:
    """The mesh as a deterministic text grid: each cell is 'device id (host)'."""
    mesh = check_mesh(mesh)
    host = host_function(host_of)
    devs = np.asarray(mesh.devices, dtype=object)
    hosts = {host(d) for d in devs.flat}
    lines = [
        f"mesh {mesh_label(mesh)}: {plural(devs.size, 'device')} on {plural(len(hosts), 'host')}; "
        f'each cell is "device id (host)"'
    ]
    names = list(mesh.axis_names)
    if devs.ndim == 0:
        return "\n".join(lines + [_cell(devs.item(), host)])
    if devs.ndim == 1:
        lines += _grid(devs[None, :], None, names[0], host)
    elif devs.ndim == 2:
        lines += _grid(devs, names[0], names[1], host)
    else:
        outer = devs.reshape((-1,) + devs.shape[-2:])
        coords = list(np.ndindex(devs.shape[:-2]))
        for block, coord in zip(outer, coords):
            label = ", ".join(f"{n}={i}" for n, i in zip(names, coord))
            lines.append(f"{label}:")
            lines += ["  " + row for row in _grid(block, names[-2], names[-1], host)]
    return "\n".join(lines)


def _cell(device, host: HostOf) -> str:
    return f"{device.id} (h{host(device)})"


def _grid(devs, row_name, col_name, host: HostOf) -> list[str]:
    cells = [[_cell(d, host) for d in row] for row in devs]
    heads = [f"{col_name}={j}" for j in range(devs.shape[1])]
    width = max(len(s) for s in heads + [c for row in cells for c in row]) + 2
    row_heads = [f"{row_name}={i}" for i in range(devs.shape[0])] if row_name else [""] * devs.shape[0]
    lead = max(len(s) for s in row_heads) + 2 if row_name else 0
    out = [(" " * lead + "".join(h.ljust(width) for h in heads)).rstrip()]
    for rh, row in zip(row_heads, cells):
        out.append((rh.ljust(lead) + "".join(c.ljust(width) for c in row)).rstrip())
    return out


def _wrap(head: str, items: list[str]) -> list[str]:
    lines, current = [], []
    for item in items:
        prefix = head if not lines else " " * len(head)
        if current and len(prefix + "  ".join(current + [item])) > _WRAP:
            lines.append(prefix + "  ".join(current))
            current = []
        current.append(item)
    lines.append((head if not lines else " " * len(head)) + "  ".join(current))
    return lines


def mesh_words(mesh, *, host_of: HostOf | None = None) -> str:
    """The mesh in one line, row by row, with each device's host: a picture's words."""
    mesh = check_mesh(mesh)
    host = host_function(host_of)
    devs = np.asarray(mesh.devices, dtype=object)
    names = list(mesh.axis_names)
    hosts = {host(d) for d in devs.flat}
    head = f"mesh {mesh_label(mesh)}: {plural(devs.size, 'device')} on {plural(len(hosts), 'host')}"
    if devs.ndim == 0:
        return f"{head}: device {devs.item().id} (host {host(devs.item())})."
    rows = []
    for index in np.ndindex(devs.shape[:-1]):
        row = list(devs[index])
        owners = {host(d) for d in row}
        where = ", ".join(f"{n}={i}" for n, i in zip(names[:-1], index))
        if len(owners) == 1:
            ids = f"devices {', '.join(str(d.id) for d in row)} (host {owners.pop()})"
        else:
            ids = "devices " + ", ".join(f"{d.id} (host {host(d)})" for d in row)
        rows.append(f"{where + ': ' if where else ''}{ids} along {names[-1]}")
    return f"{head}; " + "; ".join(rows) + "."


def shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


# ----------------------------------------------------------------------------- building
def sharding_layout(x_or_shape, mesh=None, spec=None, *, host_of: HostOf | None = None) -> ShardingLayout:
    """Who holds what: a jax.Array's NamedSharding, or `shape` placed on `mesh` with `spec`.

    Raises ValueError (saying what to change) for an unknown or repeated mesh axis, a spec
    longer than the array's rank, or a dimension that does not split evenly.
    """
    shape, mesh, spec = _resolve(x_or_shape, mesh, spec)
    _validate(shape, mesh, spec)

    try:
        raw = NamedSharding(mesh, spec).devices_indices_map(shape)
    except Exception as err:  # anything the checks above missed: JAX's words, no traceback
        raise ValueError(
            f"JAX cannot place shape {shape_text(shape)} with {format_spec(spec)} on mesh "
            f"{mesh_label(mesh)}: {err}"
        ) from None
    position = {d: i for i, d in enumerate(jax.devices())}
    placement = {d: _normalize(idx, shape) for d, idx in raw.items()}
    host = host_function(host_of)
    hosts = {d: host(d) for d in placement}
    groups: dict[Index, list] = {}
    for d in sorted(placement, key=position.__getitem__):
        groups.setdefault(placement[d], []).append(d)
    tiles = tuple(Tile(index, tuple(ds)) for index, ds in sorted(groups.items()))
    return ShardingLayout(shape, spec, mesh, placement, hosts, position, tiles)


def sharding_text(x_or_shape, mesh=None, spec=None, *, host_of: HostOf | None = None) -> str:
    """Deterministic text: one line per host with each device's slice, then replication.

    >>> print(sharding_text(x))                      # doctest: +SKIP
    >>> print(sharding_text((8, 4), mesh, P("device")))  # doctest: +SKIP
    """
    return sharding_layout(x_or_shape, mesh, spec, host_of=host_of).text()


def placement(mesh, spec, shape: tuple[int, ...]) -> dict[int, Index] | None:
    """Device id -> the (start, stop) it holds along each dimension, from JAX's devices_indices_map;
    None when JAX refuses the spec, or when it has more entries than the array has dimensions
    (device_put refuses that). The one place the course turns JAX's placement into numbers."""
    if len(spec) > len(shape):
        return None
    try:
        index_map = NamedSharding(mesh, spec).devices_indices_map(tuple(shape))
    except Exception:  # JAX rejects the spec for this mesh or shape
        return None
    return {d.id: _normalize(idx, shape) for d, idx in index_map.items()}


def _normalize(index, shape) -> Index:
    out = []
    for sl, n in zip(index, shape):
        start, stop, step = sl.indices(n)
        assert step == 1, f"unexpected strided index {sl} from JAX"
        out.append((start, stop))
    return tuple(out)


def host_function(host_of: HostOf | None) -> HostOf:
    if host_of is not None:
        return host_of
    return topology.host_of


def check_mesh(mesh):
    if not isinstance(mesh, Mesh):
        raise ValueError(
            f"expected a jax.sharding.Mesh, got {type(mesh).__name__}; build one with "
            "jax.make_mesh((2, 4), ('host', 'device')) or Mesh(devices, names)."
        )
    return mesh


def _resolve(x_or_shape, mesh, spec):
    if hasattr(x_or_shape, "sharding") and hasattr(x_or_shape, "shape"):
        if mesh is not None or spec is not None:
            raise ValueError(
                "pass either an array (its own sharding is drawn) or a shape with mesh= and "
                "spec=, not both; for a what-if, use x.shape, mesh, spec."
            )
        sharding = x_or_shape.sharding
        if not isinstance(sharding, NamedSharding):
            raise ValueError(
                f"this array's sharding is a {type(sharding).__name__}, not a NamedSharding, "
                "so it has no mesh and PartitionSpec to show. Place it on a mesh first: "
                "x = jax.device_put(x, NamedSharding(mesh, P(...)))."
            )
        return tuple(x_or_shape.shape), check_mesh(sharding.mesh), sharding.spec
    shape = _to_shape(x_or_shape)
    if mesh is None:
        raise ValueError("with a shape, also pass mesh= (a jax.sharding.Mesh) and spec= (a PartitionSpec).")
    mesh = check_mesh(mesh)
    if spec is None:
        spec = PartitionSpec()
    elif isinstance(spec, str):
        spec = PartitionSpec(spec)
    elif not isinstance(spec, PartitionSpec):
        raise ValueError(
            f"spec must be a PartitionSpec like P('device') or P(None, ('host', 'device')); "
            f"got {spec!r} ({type(spec).__name__})."
        )
    return shape, mesh, spec


def _to_shape(value) -> tuple[int, ...]:
    items = (value,) if not isinstance(value, (tuple, list)) else value
    try:
        shape = tuple(operator.index(v) for v in items if not isinstance(v, bool))
        ok = len(shape) == len(items) and all(n >= 0 for n in shape)
    except TypeError:
        ok = False
    if not ok:
        raise ValueError(
            f"expected a jax.Array or a shape like (8, 4) (whole numbers >= 0); got {value!r}."
        )
    return shape


def _entries(spec) -> tuple:
    return tuple(spec)


def _entry_str(entry) -> str:
    if entry is None:
        return "None"
    if isinstance(entry, tuple):
        return "(" + ", ".join(repr(a) for a in entry) + ("," if len(entry) == 1 else "") + ")"
    return repr(entry)


def _axes_of(entry) -> tuple:
    if entry is None:
        return ()
    return entry if isinstance(entry, tuple) else (entry,)


def _validate(shape, mesh, spec) -> None:
    sizes = dict(mesh.shape)
    axes_list = " and ".join(f"'{a}' (size {s})" for a, s in sizes.items()) or "no axes"
    entries = _entries(spec)
    seen: dict[str, int] = {}
    for dim, entry in enumerate(entries):
        axes = _axes_of(entry)
        if not all(isinstance(a, str) for a in axes):
            raise ValueError(
                f"{format_spec(spec)}: entry {dim} is {entry!r}; "
                "each entry must be None, a mesh axis name like 'device', or a tuple of names "
                "like ('host', 'device')."
            )
        for a in axes:
            if a not in sizes:
                raise ValueError(
                    f"{format_spec(spec)} uses mesh axis '{a}', but this mesh has {axes_list}. "
                    f"Use one of those names, or None to leave dimension {dim} unsplit."
                )
            if a in seen:
                where = f"dimensions {seen[a]} and {dim}" if seen[a] != dim else f"dimension {dim} twice"
                raise ValueError(
                    f"{format_spec(spec)} uses mesh axis '{a}' more than once ({where}); a mesh "
                    "axis can split only one dimension, once. To split one dimension over several "
                    f"axes, write them together in one entry, e.g. {_together_example(sizes)}."
                )
            seen[a] = dim
    if len(entries) > len(shape):
        raise ValueError(
            f"{format_spec(spec)} has {len(entries)} entries but the array has "
            f"{plural(len(shape), 'dimension')} (shape {shape_text(shape)}); give at most one "
            "entry per dimension (drop the extra ones)."
        )
    for dim, entry in enumerate(entries):
        axes = _axes_of(entry)
        ways = _prod(sizes[a] for a in axes)
        if axes and shape[dim] % ways:
            over = " x ".join(f"'{a}' ({sizes[a]})" for a in axes)
            axis_word = "axis" if len(axes) == 1 else "axes"
            raise ValueError(
                f"{format_spec(spec)} splits dimension {dim} (size {shape[dim]}) into {ways} "
                f"pieces over mesh {axis_word} {over}, but {shape[dim]} is not divisible by {ways}. "
                f"Use a size that is a multiple of {ways} (e.g. {ways * max(1, -(-shape[dim] // ways))}), "
                "or split this dimension over fewer devices."
            )


def _together_example(sizes: dict) -> str:
    names = list(sizes)[:2] if len(sizes) >= 2 else ["host", "device"]
    return "P((" + ", ".join(repr(n) for n in names) + "))"
