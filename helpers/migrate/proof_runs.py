"""The two runs of a port proof (helpers.migrate.proof): the learner's pmap step and port on the same per-host
data, on hosts emulated in one process (`emulated`) or as real processes through helpers.launch (`real`, and
`host_main`, what each real host runs); and where the learner's functions come from (`load`, `ref_of`,
`resolve`). Both runs give an `Observed`: per step and host, the inputs, the pmap step's outputs (each host's
stack) and what the host's devices hold of the port's outputs. The comparison is helpers.migrate.proof's.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from helpers.emulated import hosts as emulated_hosts
from helpers.emulated import topology
from helpers.errors import explain
from helpers.launch import run

__all__ = ["DATA", "NotRun", "Observed", "load", "ref_of", "resolve", "emulated", "real", "host_main", "is_key"]

DATA = ("host", "device")  # the mesh axes; a batch split over every device of every host is P(DATA)


class NotRun(Exception):
    """Why a proof could not run: one line for the learner."""


# ------------------------------------------------------------------------- finding the functions

def load(ref: str) -> Any:
    """'path/to/file.py:name' or 'package.module:name' -> the object."""
    if not isinstance(ref, str) or ":" not in ref:
        raise NotRun(f"expected MODULE:NAME (a file like train.py:port, or a module like my.train:port); got {ref!r}")
    module_ref, _, name = ref.rpartition(":")
    if module_ref.endswith(".py") or os.sep in module_ref:
        path = Path(module_ref).resolve()
        if not path.is_file():
            raise NotRun(f"no file {module_ref!r} (looked in {os.getcwd()})")
        key = f"_proof_{abs(hash(str(path)))}"
        module = sys.modules.get(key)
        if module is None:
            spec = importlib.util.spec_from_file_location(key, path)
            module = importlib.util.module_from_spec(spec)
            if str(path.parent) not in sys.path:  # its own imports of files beside it
                sys.path.insert(0, str(path.parent))
            sys.modules[key] = module
            try:
                spec.loader.exec_module(module)
            except BaseException as error:  # noqa: BLE001 - the learner's module, shown in one line
                del sys.modules[key]
                raise NotRun(f"importing {path.name} raised {explain(error)}") from None
    else:
        try:
            module = importlib.import_module(module_ref)
        except BaseException as error:  # noqa: BLE001
            raise NotRun(f"importing {module_ref} raised {explain(error)}") from None
    try:
        return getattr(module, name)
    except AttributeError:
        raise NotRun(f"{module_ref} has no {name!r}") from None


def ref_of(thing: Any, role: str) -> str:
    """Where a real host finds `thing`: 'file.py:name' (the name it has in its module's globals)."""
    if isinstance(thing, str):
        return thing
    module = sys.modules.get(getattr(thing, "__module__", None) or "")
    file = getattr(module, "__file__", None)
    names = [n for n, v in vars(module).items() if v is thing] if module else []
    if not file or module.__name__ == "__main__" or not names:
        raise NotRun(f"real hosts import {role} from a file, and this one was defined in a notebook or script: "
                    f"put it in a module (train.py) and pass it, or pass 'train.py:name'")
    return f"{file}:{names[0]}"


def resolve(thing: Any, role: str) -> Callable:
    value = load(thing) if isinstance(thing, str) else thing
    if not callable(value):
        raise NotRun(f"{role} must be a function; got {type(value).__name__}")
    return value


# --------------------------------------------------------------------------------- the two runs

@dataclasses.dataclass
class Observed:
    """What both steps produced, per step and host (numpy), as either run saw it."""

    in_paths: list  # the input leaves' paths ('args[1]')
    inputs: list  # [step][host] -> input leaves (the pmap step's, stacked)
    old_paths: list
    old_tree: str
    old: list  # [step][host] -> leaves (each host's stack)
    port_paths: list
    port_tree: str
    port: list  # [step][host] -> leaves (what the host's devices hold)
    split: list  # [step][host] -> [bool per leaf]: the host's devices hold different copies


def _inputs(host_inputs: Callable, host: int, hosts: int, local: int, step: int) -> tuple:
    try:
        wants_step = len(inspect.signature(host_inputs).parameters) >= 4
    except (TypeError, ValueError):
        wants_step = False
    call = f"host_inputs({host}, {hosts}, {local}" + (f", {step})" if wants_step else ")")
    try:
        args = host_inputs(host, hosts, local, step) if wants_step else host_inputs(host, hosts, local)
    except Exception as error:  # noqa: BLE001
        raise NotRun(f"{call} raised {explain(error)}") from None
    if not isinstance(args, (tuple, list)):
        raise NotRun(f"{call} must return a tuple of the pmap step's arguments; got {type(args).__name__}")
    return tuple(args)


def _flat(tree) -> tuple[list, list, str]:

    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    return [jax.tree_util.keystr(p) for p, _ in leaves], [v for _, v in leaves], str(treedef)


def _numpy_leaves(args: tuple, call: str, local: int, in_axes) -> tuple:

    def convert(path, leaf):
        try:
            value = np.asarray(leaf)
        except Exception:  # noqa: BLE001 - typed keys, objects
            raise NotRun(f"{call}: args{jax.tree_util.keystr(path)} is a {type(leaf).__name__}, not an array "
                        "(return numpy arrays; keys as raw uint32 key data)") from None
        if value.dtype == object:
            raise NotRun(f"{call}: args{jax.tree_util.keystr(path)} is not an array of numbers")
        stacked = in_axes[path[0].idx] == 0
        if stacked and (value.ndim == 0 or value.shape[0] != local):
            raise NotRun(f"{call}: args{jax.tree_util.keystr(path)} has shape {value.shape}; the pmap step "
                        f"takes it stacked, one row per local device: its first axis must be {local}")
        return value

    return jax.tree_util.tree_map_with_path(convert, args)


def _in_axes(in_axes, count: int) -> tuple:
    axes = (in_axes,) * count if in_axes in (0, None) else tuple(in_axes)
    if len(axes) != count or any(a not in (0, None) for a in axes):
        raise NotRun(f"old_in_axes: 0 or None per argument ({count} arguments), as the pmap step's in_axes; got {in_axes!r}")
    return axes


def is_key(value: np.ndarray) -> bool:
    return value.dtype == np.uint32 and value.ndim >= 2 and value.shape[-1] == 2


def _host_part(value: np.ndarray, spec, stacked: bool) -> np.ndarray:
    """What a host passes make_array_from_process_local_data for this leaf (see the module docstring)."""
    if not stacked:
        return value
    if len(spec) == 0:
        return value[0]
    if is_key(value) or value.ndim < 2:
        return value
    return value.reshape((value.shape[0] * value.shape[1],) + value.shape[2:])


def _specs_for(in_specs, args: tuple) -> list:
    """One PartitionSpec per input leaf, from a per-argument pytree prefix."""

    if in_specs is None:
        in_specs = (P(),) + (P(DATA),) * (len(args) - 1)
    if isinstance(in_specs, P):
        in_specs = (in_specs,) * len(args)
    in_specs = tuple(in_specs)
    if len(in_specs) != len(args):
        raise NotRun(f"in_specs has {len(in_specs)} entries and the step takes {len(args)} arguments: give one "
                    "PartitionSpec per argument (or a pytree of them)")
    try:
        full = jax.tree.map(lambda spec, arg: jax.tree.map(lambda _: spec, arg), in_specs, args,
                            is_leaf=lambda s: isinstance(s, P))
    except (ValueError, TypeError) as error:
        raise NotRun(f"in_specs does not fit the arguments: {explain(error)}") from None
    specs = jax.tree.leaves(full, is_leaf=lambda s: isinstance(s, P))
    if not all(isinstance(s, P) for s in specs):
        raise NotRun("in_specs: each entry must be a PartitionSpec, like P() or P(('host', 'device'))")
    return specs


def _mesh(hosts: int, local: int, one_process: bool):

    devices = jax.devices()[:hosts * local] if one_process else jax.devices()
    return jax.make_mesh((hosts, local), DATA, devices=devices)


def _build_port(new_step: Callable, mesh) -> Callable:
    try:
        step = new_step(mesh)
    except Exception as error:  # noqa: BLE001
        raise NotRun(f"new_step(mesh) raised {explain(error)}") from None
    if not callable(step):
        raise NotRun(f"new_step(mesh) must return the port's step (a function); got {type(step).__name__}")
    return step


def _call(step: Callable, args: tuple, who: str, number: int):

    try:
        return jax.block_until_ready(step(*args))
    except Exception as error:  # noqa: BLE001
        raise NotRun(f"{who} raised at step {number}: {explain(error)}") from None


def _host_view(value, devices) -> tuple[np.ndarray, bool]:
    """What `devices` (one host's) hold of an output, and whether they hold different copies of a slice."""

    if not isinstance(value, jax.Array):
        return np.asarray(value), False
    shards = [s for s in value.addressable_shards if devices is None or s.device in devices]
    held: dict[tuple, np.ndarray] = {}
    split = False
    for shard in shards:
        key = tuple((sl.start or 0, n if sl.stop is None else sl.stop) for sl, n in zip(shard.index, value.shape))
        data = np.asarray(shard.data)
        if key in held:
            split |= not np.array_equal(held[key], data, equal_nan=data.dtype.kind in "fc")
        else:
            held[key] = data
    if not held:
        raise NotRun("the port returned an array with no part on this host's devices")
    low = [min(k[d][0] for k in held) for d in range(value.ndim)]
    high = [max(k[d][1] for k in held) for d in range(value.ndim)]
    out = np.zeros([h - lo for lo, h in zip(low, high)], dtype=next(iter(held.values())).dtype)
    for key, data in held.items():
        out[tuple(slice(a - lo, b - lo) for (a, b), lo in zip(key, low))] = data
    return out, split


def _carry(prev_out, args: tuple) -> tuple:
    """The next step's arguments: the first output in place of the first argument, when it fits."""

    if (prev_out is not None and isinstance(prev_out, (tuple, list)) and prev_out
            and jax.tree.structure(prev_out[0]) == jax.tree.structure(args[0])):
        return (prev_out[0],) + tuple(args[1:])
    return args


def _run(old_step, new_step, host_inputs, hosts: int, local: int, steps: int, in_specs, old_in_axes,
         one_process: bool, this_host: int | None = None) -> Observed:
    """Both steps, `steps` times. Emulated: every host in this process; real: this host only."""

    mesh = _mesh(hosts, local, one_process)
    port = _build_port(new_step, mesh)
    mine = range(hosts) if one_process else [this_host]
    host_devices = {h: set(mesh.devices[h].flat) for h in mine} if one_process else {this_host: None}
    seen = Observed([], [], [], "", [], [], "", [], [])
    old_out = port_out = None
    for step in range(steps):
        per_host = {}
        for h in mine:
            args = _inputs(host_inputs, h, hosts, local, step)
            axes = _in_axes(old_in_axes, len(args))
            per_host[h] = _numpy_leaves(args, f"host_inputs({h}, {hosts}, {local})", local, axes)
        first = per_host[mine[0]]
        specs = _specs_for(in_specs, first)
        stacked = [axes[path[0].idx] == 0 for path, _ in jax.tree_util.tree_flatten_with_path(first)[0]]
        # the pmap step: emulated, one pmap over every host's stacks (its axis spans every host's devices)
        if one_process:
            old_args = jax.tree.unflatten(jax.tree.structure(first),
                                          [np.concatenate([jax.tree.leaves(per_host[h])[i] for h in mine])
                                           if s else jax.tree.leaves(first)[i]
                                           for i, s in enumerate(stacked)])
        else:
            old_args = first
        carry = axes[0] == 0  # an unstacked first argument (in_axes None) is not the stacked output
        old_args = _carry(old_out if carry else None, old_args)
        carried = [np.asarray(v) for v in jax.tree.leaves(old_args)]  # before a step that donates them
        old_out = _call(old_step, old_args, "the pmap step", step)
        # the port: global arrays from each host's part
        leaves_by_host = {h: jax.tree.leaves(per_host[h]) for h in mine}
        global_leaves = []
        for i, spec in enumerate(specs):
            sharding = NamedSharding(mesh, spec)
            parts = [_host_part(leaves_by_host[h][i], spec, stacked[i]) for h in mine]
            try:
                if one_process:
                    global_leaves.append(emulated_hosts.make_array_from_process_local_data(sharding, parts))
                else:
                    global_leaves.append(jax.make_array_from_process_local_data(sharding, parts[0]))
            except Exception as error:  # noqa: BLE001
                raise NotRun(f"building the port's input {_flat(first)[0][i]} with {spec} raised "
                            f"{explain(error)}") from None
        port_args = _carry(port_out if carry else None,
                           tuple(jax.tree.unflatten(jax.tree.structure(first), global_leaves)))
        port_out = _call(port, port_args, "the port", step)
        # what each host holds
        in_paths, _, _ = _flat(first)
        seen.in_paths = [p.replace("[", "args[", 1) if p.startswith("[") else p for p in in_paths]
        old_paths, old_leaves, seen.old_tree = _flat(old_out)
        port_paths, port_leaves, seen.port_tree = _flat(port_out)
        seen.old_paths = [f"out{p}" for p in old_paths]
        seen.port_paths = [f"out{p}" for p in port_paths]
        seen.inputs.append([[v[h * local:(h + 1) * local] if one_process and s else v
                             for v, s in zip(carried, stacked)] if len(carried) == len(stacked)
                            else leaves_by_host[h] for h in mine])
        seen.old.append([[np.asarray(v)[h * local:(h + 1) * local] if one_process else np.asarray(v)
                          for v in old_leaves] for h in mine])
        views = [[_host_view(v, host_devices[h]) for v in port_leaves] for h in mine]
        seen.port.append([[v for v, _ in row] for row in views])
        seen.split.append([[s for _, s in row] for row in views])
    return seen


def emulated(old_step, new_step, host_inputs, hosts, local, steps, in_specs, old_in_axes) -> Observed:

    if jax.process_count() > 1:
        raise NotRun("this is a real multi-process run: emulated hosts need one process (real=True runs real ones)")
    if jax.device_count() != hosts * local:
        raise NotRun(f"emulating {hosts} hosts x {local} devices needs {hosts * local} devices and JAX has "
                    f"{jax.device_count()}: call use_fake_devices({hosts * local}) before JAX starts, or change "
                    "hosts / devices_per_host")
    with topology.emulated_hosts(hosts):
        return _run(old_step, new_step, host_inputs, hosts, local, steps, in_specs, old_in_axes, one_process=True)


_HOST_SOURCE = """from helpers.launch import initialize
initialize()
from helpers.migrate import proof_runs
proof_runs.host_main({folder!r})
"""


def host_main(folder: str) -> None:
    """Inside a real host (the launcher runs it): both steps on this host's data, saved for the parent."""

    spec = pickle.loads(Path(folder, "spec.pkl").read_bytes())
    me = jax.process_index()
    out = Path(folder, f"host{me}.pkl")
    try:
        functions = [resolve(ref, role) for ref, role in zip(spec["refs"], ("old_step", "new_step", "host_inputs"))]
        seen = _run(*functions, jax.process_count(), jax.local_device_count(), spec["steps"], spec["in_specs"],
                    spec["old_in_axes"], one_process=False, this_host=me)
    except NotRun as stop:
        out.write_bytes(pickle.dumps({"error": str(stop)}))
        raise SystemExit(3) from None
    out.write_bytes(pickle.dumps({"seen": seen}))
    print(f"host {me}: both steps ran, {len(seen.port_paths)} outputs", flush=True)


def real(refs, hosts, local, steps, in_specs, old_in_axes, timeout) -> Observed:

    with tempfile.TemporaryDirectory(prefix="port-proof-") as folder:
        Path(folder, "spec.pkl").write_bytes(pickle.dumps(
            {"refs": refs, "steps": steps, "in_specs": in_specs, "old_in_axes": old_in_axes}))
        result = run(source=_HOST_SOURCE.format(folder=folder), hosts=hosts, devices_per_host=local, timeout=timeout)
        saved = {}
        for h in range(hosts):
            path = Path(folder, f"host{h}.pkl")
            if path.is_file():
                saved[h] = pickle.loads(path.read_bytes())
    errors = [f"host {h}: {s['error']}" for h, s in sorted(saved.items()) if "error" in s]
    if errors:
        raise NotRun(errors[0])
    if not result.ok or len(saved) != hosts:
        raise NotRun(f"the real run failed: {result.message}")
    runs = [saved[h]["seen"] for h in range(hosts)]
    seen = runs[0]
    for step in range(steps):  # one host each: put them side by side
        for field in ("inputs", "old", "port", "split"):
            getattr(seen, field)[step] = [getattr(r, field)[step][0] for r in runs]
    return seen
