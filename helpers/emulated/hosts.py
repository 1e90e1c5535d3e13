"""What hosts build from their host-local data, emulated in one process: the global array a real
multi-host run would build (the emulated hosts themselves: `helpers.emulated.topology`).

With one process `jax.make_array_from_process_local_data` is just `device_put`, so the
host-local semantics never show. The functions here take one numpy array per emulated host
(host h owns `jax.devices()[h*D:(h+1)*D]`, the rule of `helpers.emulated.topology`) and build, with
`jax.make_array_from_single_device_arrays`, exactly the per-device buffers that a real
multi-process run would hold, following JAX 0.12's own algorithm host by host. That
includes "replicas" that disagree when hosts pass different data for a replicated axis.
Building an array changes no global state: host h's devices are worked out from the number
of arrays passed. To make `host_of` and the pictures agree, emulate the same number of hosts
(`helpers.emulated.topology.emulate_hosts`, or the `emulated_hosts` context manager in judges and tests).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from helpers.emulated import topology
from helpers.pictures.layout import format_index, format_spec

__all__ = [
    "make_array_from_process_local_data",
    "host_local_array_to_global_array",
    "replica_report",
    "ReplicaReport",
    "SliceDisagreement",
]

Index = tuple  # a tuple of slices, as in `sharding.devices_indices_map`


# --------------------------------------------------------------------------- common checks

def _require_single_process(real_name: str) -> None:
    if jax.process_count() > 1:
        raise RuntimeError(
            f"helpers.emulated.hosts emulates hosts inside ONE process, but this is a real "
            f"multi-process run ({jax.process_count()} processes). Use {real_name} directly "
            "in a real multi-process run, with this process's own data."
        )


def _as_host_arrays(per_host_data: Any, name: str) -> list[np.ndarray]:
    if isinstance(per_host_data, np.ndarray) or not isinstance(per_host_data, Sequence) \
            or isinstance(per_host_data, (str, bytes)):
        raise ValueError(
            f"{name} needs a list with one numpy array per emulated host, like [host0_data, "
            f"host1_data]; got {type(per_host_data).__name__}. Wrap your arrays in a list."
        )
    if len(per_host_data) == 0:
        raise ValueError(f"{name} got an empty list; pass one array per emulated host.")
    arrays = [np.asarray(x) for x in per_host_data]
    dtypes = {jax.dtypes.canonicalize_dtype(a.dtype) for a in arrays}
    if len(dtypes) > 1:
        listed = ", ".join(f"host {h}: {a.dtype}" for h, a in enumerate(arrays))
        raise ValueError(
            f"the hosts' data have different dtypes ({listed}). Every host must pass the "
            "same dtype, e.g. convert each with .astype(np.float32)."
        )
    return arrays


def _claim_hosts(num_hosts: int) -> int:
    """Check that `num_hosts` splits the devices evenly and fits the emulated hosts; return D."""
    count = jax.device_count()
    if count % num_hosts:
        fits = max(d for d in range(1, num_hosts) if count % d == 0)
        raise ValueError(
            f"you passed data for {num_hosts} hosts, but {count} devices cannot be split "
            f"evenly into {num_hosts} hosts. Pass one array per host for a host count that "
            f"divides {count} (e.g. {fits})."
        )
    current = topology.num_hosts()
    if current not in (1, num_hosts):
        raise ValueError(
            f"you passed data for {num_hosts} hosts, but this notebook emulates {current} "
            f"hosts (emulate_hosts({current})). Pass one array per host ({current} arrays), "
            f"or call helpers.emulated.topology.emulate_hosts({num_hosts}) first."
        )
    return count // num_hosts


def _as_sharding(sharding: Any) -> Sharding:
    if isinstance(sharding, PartitionSpec):
        mesh = jax.sharding.get_mesh()
        if mesh.empty:
            raise ValueError(
                f"got the PartitionSpec {sharding} without a mesh. Pass "
                f"NamedSharding(mesh, {sharding}) instead, or set a mesh with jax.set_mesh(mesh)."
            )
        return NamedSharding(mesh, sharding)
    if not isinstance(sharding, Sharding):
        raise ValueError(
            f"the first argument must be a sharding such as NamedSharding(mesh, P('host')); "
            f"got {type(sharding).__name__}."
        )
    return sharding


def _spec_text(sharding: Sharding) -> str:
    spec = getattr(sharding, "spec", None)
    return f"the spec {format_spec(spec)}" if spec is not None else "this sharding"


def _check_rank(sharding: Sharding, ndim: int) -> None:
    spec = getattr(sharding, "spec", None)
    if spec is not None and len(spec) > ndim:
        raise ValueError(
            f"the spec {spec} describes {len(spec)} array axes, but the hosts' data have "
            f"{ndim}. Use a spec with at most {ndim} entries.")


def _owners(per_host: int) -> dict:
    """Device -> its emulated host, with `per_host` devices per host (helpers.emulated.topology's rule)."""
    return {d: topology.emulated_host_of(d, per_host) for d in jax.devices()}


def _slice_text(index: Index, shape: tuple[int, ...]) -> str:
    return format_index(tuple(s.indices(n)[:2] for s, n in zip(index, shape)), shape)


# ------------------------------------------- make_array_from_process_local_data, per host

class _NonUniform(Exception):
    pass


def _process_count_along(sharding: Sharding, dim: int, ndim: int, owner: dict) -> int:
    """Mirror of jax's get_process_index_and_count(...)[1] with emulated hosts."""
    device_map = sharding.devices_indices_map((sharding.num_devices,) * ndim)
    per_host: dict[int, set] = {}
    all_slices = set()
    for d, index in device_map.items():
        key = (index[dim].start, index[dim].stop)
        per_host.setdefault(owner[d], set()).add(key)
        all_slices.add(key)
    sizes = {len(v) for v in per_host.values()}
    if len(sizes) > 1:
        raise _NonUniform
    unique = {frozenset(v) for v in per_host.values()}
    if sum(len(u) for u in unique) != len(all_slices):
        raise _NonUniform
    return len(unique)


def _inferred_global_shape(sharding: Sharding, local_shape: tuple, host: int, owner: dict):
    """Mirror of jax's local_to_global_shape for emulated host `host` (None where non-uniform)."""
    hosts_in_sharding = set(owner[d] for d in sharding.device_set)
    if hosts_in_sharding == {host} or sharding.is_fully_replicated:
        return tuple(local_shape)
    out = []
    for dim, size in enumerate(local_shape):
        try:
            out.append(size * _process_count_along(sharding, dim, len(local_shape), owner))
        except _NonUniform:
            out.append(None)
    return tuple(out)


def _shape_error(sharding: Sharding, global_shape: tuple, local_shape: tuple | None,
                 subject: str = "the global array") -> ValueError:
    """A learner-facing version of JAX's IndivisibleError (uneven sharding)."""
    n = sharding.num_devices
    parts = [n // s for s in sharding.shard_shape((n,) * len(global_shape))]
    for dim, (size, k) in enumerate(zip(global_shape, parts)):
        if size % k == 0:
            continue
        hint = f" Make axis {dim} a multiple of {k}, or change the spec."
        origin = ""
        if local_shape is not None and local_shape[dim] and size != local_shape[dim]:
            hosts = size // local_shape[dim]
            origin = f" ({hosts} hosts x {local_shape[dim]} each)"
            hint = (f" Give each host a multiple of {k // math.gcd(k, hosts)} entries "
                    f"along axis {dim}.")
        return ValueError(
            f"{_spec_text(sharding)} splits axis {dim} of {subject} into {k} equal "
            f"parts, but that axis has {size} entries{origin}, and {size} is not a multiple "
            f"of {k}; JAX cannot shard an axis unevenly.{hint}"
        )
    return ValueError(f"the global shape {tuple(global_shape)} does not fit {_spec_text(sharding)}.")


def _host_buffers(sharding: Sharding, data: np.ndarray, global_shape: tuple, host: int,
                  owner: dict) -> dict:
    """Mirror of jax's _array_from_process_local_data on one emulated host: device -> buffer."""
    index_map = {d: i for d, i in sharding.devices_indices_map(global_shape).items()
                 if owner[d] == host}
    full_dim = []
    for dim, (data_dim, global_dim) in enumerate(zip(data.shape, global_shape)):
        full_dim.append(data_dim == global_dim)
        if data_dim != global_dim:
            unique = {(i[dim].start, i[dim].stop) for i in index_map.values()}
            process_slice = sharding.shard_shape(global_shape)[dim] * len(unique)
            if process_slice != data_dim:
                raise ValueError(
                    f"host {host}'s data has {data_dim} entries along axis {dim}, but for a "
                    f"global array of shape {tuple(global_shape)} with {_spec_text(sharding)} "
                    f"each host must pass either the whole axis ({global_dim}) or its own part "
                    f"of it ({process_slice}). Change host {host}'s data or the global_shape."
                )
    first = next(iter(index_map.values()))
    shard_shape = tuple((s.stop if s.stop is not None else n) - (s.start or 0)
                        for s, n in zip(first, global_shape))
    starts = [sorted({i[dim].start or 0 for i in index_map.values()})
              for dim in range(len(global_shape))]

    def local_slice(dim: int, start: int | None) -> slice:
        begin = starts[dim].index(start or 0) * shard_shape[dim]
        return slice(begin, begin + shard_shape[dim])

    return {
        d: data[tuple(s if full_dim[dim] else local_slice(dim, s.start)
                      for dim, s in enumerate(index))]
        for d, index in index_map.items()
    }


def _assemble(global_shape: tuple, sharding: Sharding, buffers: dict, dtype) -> jax.Array:
    arrays = [jax.device_put(np.asarray(value, dtype=dtype), d) for d, value in buffers.items()]
    return jax.make_array_from_single_device_arrays(tuple(global_shape), sharding, arrays)


def make_array_from_process_local_data(sharding: Sharding | PartitionSpec,
                                       per_host_data: Sequence[Any],
                                       global_shape: tuple[int, ...] | None = None) -> jax.Array:
    """The array `jax.make_array_from_process_local_data` builds when host h passes per_host_data[h].

    >>> x = make_array_from_process_local_data(NamedSharding(mesh, P('host')), [a0, a1])
    """
    _require_single_process("jax.make_array_from_process_local_data")
    arrays = _as_host_arrays(per_host_data, "make_array_from_process_local_data")
    sharding = _as_sharding(sharding)
    num_hosts = len(arrays)
    owner = _owners(_claim_hosts(num_hosts))
    hosts_in_sharding = {owner[d] for d in sharding.device_set}
    missing = sorted(set(range(num_hosts)) - hosts_in_sharding)
    if missing:
        raise ValueError(
            f"the sharding's mesh uses no device of host(s) {missing}, so in a real run those "
            "hosts would have nowhere to put their data and JAX fails. Build the mesh from "
            "all of jax.devices() (e.g. jax.make_mesh) so every host owns part of it."
        )
    ndims = {a.ndim for a in arrays}
    if len(ndims) > 1:
        listed = ", ".join(f"host {h}: {a.shape}" for h, a in enumerate(arrays))
        raise ValueError(f"the hosts' data have different numbers of axes ({listed}). "
                         "Every host must pass arrays with the same number of axes.")
    local_shapes = [a.shape for a in arrays]
    _check_rank(sharding, arrays[0].ndim)
    if global_shape is not None:
        global_shape = tuple(global_shape)
        if None in global_shape:
            raise ValueError(f"global_shape={global_shape} contains None; give every size.")
        if len(global_shape) != arrays[0].ndim:
            raise ValueError(
                f"global_shape={global_shape} has {len(global_shape)} axes but the hosts' "
                f"data have {arrays[0].ndim}; give one size per axis.")
        if num_hosts == 1 and global_shape != local_shapes[0]:
            raise ValueError(
                "with a single host, global_shape must be None or equal to the data's shape "
                f"{local_shapes[0]}; got {global_shape}. Pass global_shape=None.")
        shapes = [global_shape] * num_hosts
    else:
        shapes = [_inferred_global_shape(sharding, a.shape, h, owner)
                  for h, a in enumerate(arrays)]
        for h, s in enumerate(shapes):
            if None in s:
                raise ValueError(
                    f"JAX cannot infer the global shape: with this mesh the devices of host "
                    f"{h} do not form a regular grid along some axis (partial result {s}). "
                    "Pass global_shape=... explicitly.")
        if len(set(shapes)) > 1:
            listed = "; ".join(f"host {h} passed {a.shape} -> global {s}"
                               for h, (a, s) in enumerate(zip(arrays, shapes)))
            raise ValueError(
                f"the hosts disagree on the global shape ({listed}). A real run does not "
                "check this and goes wrong silently later. Give every host data of the "
                "same shape.")
    target = shapes[0]
    try:
        sharding.shard_shape(target)
    except ValueError:
        raise _shape_error(sharding, target,
                           local_shapes[0] if global_shape is None else None) from None
    dtype = jax.dtypes.canonicalize_dtype(arrays[0].dtype)
    buffers: dict = {}
    for h, a in enumerate(arrays):
        buffers.update(_host_buffers(sharding, a, target, h, owner))
    return _assemble(target, sharding, buffers, dtype)


# ------------------------------------------- host_local_array_to_global_array, per host

def _local_mesh(mesh: Mesh, host: int, owner: dict) -> Mesh:
    """Mirror of jax's _get_local_mesh for an emulated host (raises when not a subcube)."""
    is_local = np.vectorize(lambda d: owner[d] == host, otypes=[bool])(mesh.devices)
    if not is_local.any():
        raise ValueError(
            f"host {host} owns no device of this mesh, so it has nowhere to put its data. "
            "Build the mesh from all of jax.devices() (e.g. jax.make_mesh).")
    cube = []
    for axis in range(mesh.devices.ndim):
        others = tuple(a for a in range(mesh.devices.ndim) if a != axis)
        hits = np.flatnonzero(is_local.any(axis=others))
        cube.append(slice(int(hits.min()), int(hits.max()) + 1))
    if not is_local[tuple(cube)].all():
        raise ValueError(
            f"host_local_array_to_global_array needs each host's devices to form one "
            f"contiguous block of the mesh (JAX: \"devices connected to a single host must "
            f"form a contiguous subcube of the global device mesh\"), but host {host}'s "
            f"devices are spread out in this mesh of shape {dict(mesh.shape)}. Use "
            "make_array_from_process_local_data, which handles any device order, or build "
            "the mesh with jax.make_mesh / devices reshaped as (hosts, devices_per_host).")
    return Mesh(mesh.devices[tuple(cube)], mesh.axis_names)


def host_local_array_to_global_array(per_host_data: Sequence[Any], mesh: Mesh,
                                     spec: PartitionSpec) -> jax.Array:
    """The array `multihost_utils.host_local_array_to_global_array` builds from per_host_data[h] on host h.

    >>> x = host_local_array_to_global_array([a0, a1], mesh, P('host'))
    """
    _require_single_process(
        "jax.experimental.multihost_utils.host_local_array_to_global_array")
    arrays = _as_host_arrays(per_host_data, "host_local_array_to_global_array")
    if spec is None or not isinstance(spec, PartitionSpec):
        raise ValueError(
            f"spec must be a PartitionSpec such as P('host'); got {spec!r}. "
            "Use P() to replicate the data on every device.")
    if not isinstance(mesh, Mesh):
        raise ValueError(f"mesh must be a jax.sharding.Mesh; got {type(mesh).__name__}.")
    num_hosts = len(arrays)
    owner = _owners(_claim_hosts(num_hosts))
    global_sharding = NamedSharding(mesh, spec)
    for a in arrays:
        _check_rank(global_sharding, a.ndim)
    mapping: dict[str, int] = {}
    for dim, axes in enumerate(spec):
        if axes is None or axes is PartitionSpec.UNCONSTRAINED:
            continue
        for name in axes if isinstance(axes, tuple) else (axes,):
            mapping[name] = dim
    dtype = jax.dtypes.canonicalize_dtype(arrays[0].dtype)
    buffers: dict = {}
    shapes = []
    for h, a in enumerate(arrays):
        local_mesh = _local_mesh(mesh, h, owner)
        local_sharding = NamedSharding(local_mesh, spec)
        try:  # JAX slices the host's data for its local mesh first; uneven sizes fail here
            index_map = local_sharding.devices_indices_map(a.shape)
        except ValueError:
            raise _shape_error(local_sharding, a.shape, None,
                               f"host {h}'s data (one part per device of host {h})") from None
        shape = list(a.shape)  # mirror of pxla.mesh_local_to_global
        for name, dim in mapping.items():
            shape[dim] = shape[dim] // local_mesh.shape[name] * mesh.shape[name]
        shapes.append(tuple(shape))
        for d, index in zip(local_mesh.devices.flat, index_map.values()):
            buffers[d] = a[index]
    if len(set(shapes)) > 1:
        listed = "; ".join(f"host {h} passed {a.shape} -> global {s}"
                           for h, (a, s) in enumerate(zip(arrays, shapes)))
        raise ValueError(
            f"the hosts disagree on the global shape ({listed}). Give every host data of "
            "the same shape.")
    return _assemble(shapes[0], global_sharding, buffers, dtype)


# ------------------------------------------------------------------ replica report

@dataclasses.dataclass(frozen=True)
class SliceDisagreement:
    """One slice of the global array whose replicas hold different values."""

    index: Index
    text: str  # the slice, e.g. "[0:1, :]"
    groups: tuple  # ((devices, hosts, value), ...): devices holding equal values


@dataclasses.dataclass(frozen=True)
class ReplicaReport:
    """Whether every replica of every slice of an array holds the same values."""

    shape: tuple
    num_slices: int
    copies: int  # devices holding each slice
    disagreements: tuple
    only_local: bool = False

    @property
    def consistent(self) -> bool:
        """True when all replicas agree."""
        return not self.disagreements

    def __str__(self) -> str:
        where = " (only this process's devices were compared)" if self.only_local else ""
        if self.copies == 1:
            head = (f"no replicas: each of the {self.num_slices} slices of the {self.shape} "
                    f"array lives on one device{where}")
        elif self.consistent:
            head = (f"replicas agree: each of the {self.num_slices} slices of the "
                    f"{self.shape} array is held by {self.copies} devices, and all copies "
                    f"are equal{where}")
        else:
            head = (f"replicas DISAGREE on {len(self.disagreements)} of {self.num_slices} "
                    f"slices of the {self.shape} array{where}:")
        lines = [head]
        shown = self.disagreements[:8]
        for item in shown:
            lines.append(f"  slice {item.text}:")
            for devices, hosts, value in item.groups:
                who = ", ".join(f"device {d} (host {h})" for d, h in zip(devices, hosts))
                text = np.array2string(np.asarray(value), threshold=8, edgeitems=2,
                                       precision=4, separator=" ").replace("\n", " ")
                lines.append(f"    {who}: {text}")
        if len(self.disagreements) > len(shown):
            lines.append(f"  ... and {len(self.disagreements) - len(shown)} more slices")
        return "\n".join(lines)

    __repr__ = __str__


def _every_device_buffer(x: jax.Array) -> tuple[list, bool]:
    """[(device, numpy buffer)] for every device of x; False if only this process's were seen."""
    mine = sorted(x.addressable_shards, key=lambda s: s.device.id)
    local = [(s.device, np.asarray(s.data)) for s in mine]
    if x.is_fully_addressable or jax.process_count() == 1:
        return local, x.is_fully_addressable

    counts = multihost_utils.process_allgather(np.array([len(mine)]))  # a collective: every process calls it
    if len(set(np.ravel(counts).tolist())) != 1:
        return local, False
    ids = np.ravel(multihost_utils.process_allgather(np.array([d.id for d, _ in local])))
    data = multihost_utils.process_allgather(np.stack([v for _, v in local]))
    data = data.reshape((-1,) + local[0][1].shape)
    by_id = {d.id: d for d in jax.devices()}
    return [(by_id[int(i)], v) for i, v in zip(ids, data)], True


def replica_report(x: jax.Array) -> ReplicaReport:
    """Say whether the replicas of `x` agree, and which devices and hosts disagree on which slice.

    In a real multi-process run it gathers every process's buffers, so call it on every
    process (like any collective).
    """
    if not isinstance(x, jax.Array):
        raise ValueError(f"replica_report needs a jax.Array; got {type(x).__name__}.")
    placement = x.sharding.devices_indices_map(x.shape)  # JAX's own: device -> index

    def key(index: Index) -> tuple:
        return tuple((s.start or 0, n if s.stop is None else s.stop)
                     for s, n in zip(index, x.shape))

    all_slices = {key(index) for index in placement.values()}
    copies = len(placement) // max(len(all_slices), 1)
    buffers, complete = _every_device_buffer(x)
    holders: dict[tuple, list] = {}
    for device, value in sorted(buffers, key=lambda dv: dv[0].id):
        holders.setdefault(key(placement[device]), []).append((device, value))
    disagreements = []
    for k in sorted(holders):
        groups: list[tuple[list, list, np.ndarray]] = []
        for device, value in holders[k]:
            for devs, hosts, v in groups:
                if v.shape == value.shape and np.array_equal(
                        v, value, equal_nan=value.dtype.kind in "fc"):
                    devs.append(device.id)
                    hosts.append(topology.host_of(device))
                    break
            else:
                groups.append(([device.id], [topology.host_of(device)], value))
        if len(groups) > 1:
            index = placement[holders[k][0][0]]
            disagreements.append(SliceDisagreement(
                index=index, text=_slice_text(index, x.shape),
                groups=tuple((tuple(d), tuple(h), v) for d, h, v in groups)))
    return ReplicaReport(shape=tuple(x.shape), num_slices=len(all_slices), copies=copies,
                         disagreements=tuple(disagreements), only_local=not complete)
