"""A drill's setting: a mesh of 8 devices on emulated hosts, an array shape and a spec.

Everything comes from a `random.Random`, so the same seed gives the same setting. Emulated
host h owns devices h*D .. h*D+D-1 (D devices per host), as in the course's one-process
emulation; the mesh may lay them out in order, shuffled, or with the hosts interleaved.
Placement is asked of JAX (`helpers.pictures.layout.placement`).
"""
from __future__ import annotations

import functools
import random
from dataclasses import dataclass

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from helpers.pictures.layout import Index, format_spec, mesh_text, placement
from helpers.emulated.topology import emulated_host_of

DEVICES = 8

# (axis names, axis sizes, hosts, weight): every mesh uses all 8 devices.
MESHES = (
    (("data",), (8,), 2, 1),
    (("data",), (8,), 4, 1),
    (("host", "device"), (2, 4), 2, 3),
    (("host", "device"), (4, 2), 4, 2),
    (("host", "data", "model"), (2, 2, 2), 2, 2),
)
# How the devices are laid out in the mesh, and how often.
ORDERS = {
    "in order": 3,
    "shuffled inside each host": 2,
    "with the hosts in reverse order": 1,
    "with the hosts interleaved": 1,
}


def jax_devices() -> list:
    """The first 8 of JAX's devices; a clear error when there are fewer."""
    devices = jax.devices()
    if len(devices) < DEVICES:
        raise RuntimeError(
            f"drills need {DEVICES} devices, but JAX has {len(devices)}. Restart the kernel and run "
            f"use_fake_devices({DEVICES}) (from helpers.devices) before anything else."
        )
    return devices[:DEVICES]


@dataclass(frozen=True)
class Scenario:
    """A mesh over 8 devices on `hosts` emulated hosts, and an array `shape` placed with `spec`."""

    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]
    hosts: int
    order: str
    device_ids: tuple[int, ...]  # the mesh's devices, flattened in mesh order
    shape: tuple[int, ...]
    spec: object  # PartitionSpec

    @property
    def per_host(self) -> int:
        return DEVICES // self.hosts

    @functools.cached_property
    def mesh(self):
        devices = jax_devices()
        grid = np.array([devices[i] for i in self.device_ids], dtype=object).reshape(self.axis_sizes)
        return Mesh(grid, self.axis_names)

    def host_of(self, device) -> int:
        """The emulated host of a device (or of a device id)."""
        return emulated_host_of(device if isinstance(device, int) else device.id, self.per_host)

    def placement(self, spec=None, shape=None) -> dict[int, Index] | None:
        """Device id -> (start, stop) per dimension, from JAX; None when JAX refuses."""
        return _placement(self.mesh, self.spec if spec is None else spec,
                          tuple(self.shape if shape is None else shape))

    def hosts_text(self) -> str:
        """'host 0 owns devices 0-3, host 1 owns devices 4-7'."""
        d = self.per_host
        return ", ".join(f"host {h} owns devices {h * d}-{h * d + d - 1}" for h in range(self.hosts))

    def mesh_text(self) -> str:
        """The mesh grid as text, each cell 'device id (host)'."""
        return mesh_text(self.mesh, host_of=self.host_of)

    def code(self) -> str:
        """Python that builds this mesh and sharding (for a learner who wants to ask JAX)."""
        ids = list(self.device_ids)
        return (f"mesh = Mesh(np.array(jax.devices())[{ids}].reshape{self.axis_sizes}, {self.axis_names})\n"
                f"sharding = NamedSharding(mesh, {format_spec(self.spec)})")


_placement = functools.lru_cache(maxsize=8192)(placement)  # drills ask JAX about the same specs again and again


# ------------------------------------------------------------------ random settings

def random_mesh(rng: random.Random) -> tuple:
    """(axis names, axis sizes, hosts, order, device ids in mesh order)."""
    names, sizes, hosts, _ = rng.choices(MESHES, weights=[m[3] for m in MESHES])[0]
    order = rng.choices(list(ORDERS), weights=list(ORDERS.values()))[0]
    per_host = DEVICES // hosts
    blocks = [list(range(h * per_host, (h + 1) * per_host)) for h in range(hosts)]
    if order == "shuffled inside each host":
        for block in blocks:
            rng.shuffle(block)
    elif order == "with the hosts in reverse order":
        blocks.reverse()
    if order == "with the hosts interleaved":  # neighbours in the mesh belong to different hosts
        ids = [block[i] for i in range(per_host) for block in blocks]
    else:
        ids = [i for block in blocks for i in block]
    return names, sizes, hosts, order, tuple(ids)


def random_spec(rng: random.Random, names: tuple[str, ...], rank: int):
    """A PartitionSpec with `rank` entries; each mesh axis splits one dimension or none."""
    dims: list[list[str]] = [[] for _ in range(rank)]
    for name in names:
        where = rng.randrange(rank + 1)  # rank means: unused, copies along this axis
        if where < rank:
            dims[where].append(name)
    for axes in dims:
        rng.shuffle(axes)
    return PartitionSpec(*(None if not a else a[0] if len(a) == 1 else tuple(a) for a in dims))


def ways(scenario_sizes: dict[str, int], entry) -> int:
    """How many pieces one spec entry cuts its dimension into."""
    n = 1
    for axis in axes_of(entry):
        n *= scenario_sizes[axis]
    return n


def axes_of(entry) -> tuple[str, ...]:
    """The mesh axes of one spec entry: None -> (), 'a' -> ('a',), ('a', 'b') -> itself."""
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def random_scenario(rng: random.Random, rank: int | None = None) -> Scenario:
    """A random mesh, spec and shape (each split dimension divides evenly)."""
    names, sizes, hosts, order, ids = random_mesh(rng)
    rank = rank or rng.choice((1, 2))
    spec = random_spec(rng, names, rank)
    if rng.random() < 0.9:  # mostly something is split
        while not any(spec):
            spec = random_spec(rng, names, rank)
    size_of = dict(zip(names, sizes))
    entries = list(spec) + [None] * (rank - len(spec))
    shape = tuple(ways(size_of, e) * rng.choice((1, 2, 2, 3)) if e is not None else rng.choice((2, 4, 6, 8))
                  for e in entries)
    return Scenario(names, sizes, hosts, order, ids, shape, spec)


def host_blocks(scenario: Scenario, spec) -> tuple[int, ...] | None:
    """For each dimension, how many different host-local blocks it has; None if uneven.

    The rule of JAX's `make_array_from_process_local_data` (jax._src.sharding_impls.
    local_to_global_shape), applied to emulated hosts: the global size of a dimension is
    the host-local size times the number of distinct sets of slices the hosts hold.
    """
    rank = len(scenario.shape)
    placed = scenario.placement(spec, (DEVICES,) * rank)
    if placed is None:
        return None
    counts = []
    for dim in range(rank):
        per_host: dict[int, set] = {}
        for device_id, index in placed.items():
            per_host.setdefault(scenario.host_of(device_id), set()).add(index[dim])
        sizes = {len(s) for s in per_host.values()}
        distinct = {frozenset(s) for s in per_host.values()}
        every = set().union(*per_host.values())
        if len(sizes) != 1 or sum(len(s) for s in distinct) != len(every):
            return None  # hosts hold overlapping, unequal sets: JAX cannot infer this dimension
        counts.append(len(distinct))
    return tuple(counts)
