"""Prove a port: run your old pmap step and your shard_map port on the same per-host data, compare.

`python -m helpers.migrate` reads your script and advises; this module runs your code and checks the
result. Put three functions in a module whose import trains nothing (keep the training loop under
`if __name__ == "__main__":`):

    old_step                                  # your pmapped step, as the script has it: jax.pmap(...)
    def port(mesh):                           # your port, built on the mesh it is given:
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=..., out_specs=...))
    def host_inputs(host, hosts, local_devices):   # (optional 4th argument: step)
        return params_stack, x_stack, y_stack      # what host `host` passes old_step (numpy, stacked)

then, in a notebook (with `use_fake_devices(8)`):

    from helpers.migrate.proof import prove_port
    prove_port(old_step, port, host_inputs)               # 2 hosts x 4 devices, emulated in one process
    prove_port("train.py:old_step", "train.py:port", "train.py:host_inputs", real=True)  # 2 real processes

or in a terminal, `python -m helpers.migrate.proof train.py:old_step train.py:port train.py:host_inputs
[--real]` (exit status 0: the port equals the pmap step; 1: it differs; 2: it could not be run).

What runs. Each host h gets `host_inputs(h, hosts, local_devices)`: the arguments it passes `old_step`,
each leaf stacked one row per local device (pmap's form). The old step runs with pmap's semantics on
jax 0.12: its axis spans every device of every host (emulated: one pmap over all hosts' stacks,
concatenated; real: each process passes its own). The port gets global arrays on a
`('host', 'device')` mesh of `hosts x local_devices`, built from each host's own data with
`make_array_from_process_local_data` and `in_specs`, one PartitionSpec per argument (a pytree prefix),
by default `P()` for the first argument and `P(('host', 'device'))` for the others:
  - `P()`: the host passes its stack's first row (one copy: what `replicate` had stacked);
  - any other spec: the host passes its stack with the device axis merged into the next one (a batch
    `(local_devices, B, ...)` becomes this host's `(local_devices * B, ...)` rows, what `shard` had
    stacked), except keys (uint32 `(..., 2)`) and leaves with no other axis, which keep the device axis
    (one key per device: what `shard_prng_key` had stacked).
An argument the pmap step takes whole (`in_axes=None`) is returned whole; say so with `old_in_axes=(None,
0, 0)`. With `steps` > 1 (default 2) the first output goes back in as the first argument (params in, params
out) when it has its structure, as a training loop does; every step gets fresh data from `host_inputs`.

What is compared. Each output leaf, host by host, in the port's form: the port's value on a host is
what that host's devices hold; the pmap step's is its row (for a one-copy output), its rows merged,
or its stack. The report says pass, or for each output that differs (its path, the step, the largest
absolute difference) what the course knows about the difference: the gradient trap (the port's change
is N times the pmap step's), `P('device')` rows (the hosts' copies differ where the pmap step's
agree), and keys that every host draws alike (each host splitting the same key over its own devices:
no port with a key per device of every host can equal that; `one_host_keys` gives the keys a 1-host
run would draw, for both steps).

The result is a `Proof`: `ok`, `differences` (each output's path, cause and ratio port / pmap),
`report()` (what printing it shows) and `check()` (raises `ProofError` unless it passed). A port that
raises, or inputs of the wrong kind, give a Proof whose report is one line. The runs themselves, and
where the functions come from, are `helpers.migrate.proof_runs`.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Sequence

import numpy as np

import jax

from helpers.devices import use_fake_devices
from helpers.errors import explain
from helpers.migrate import proof_runs as runs
from helpers.migrate.proof_runs import DATA

__all__ = ["prove_port", "Proof", "Difference", "one_host_keys", "DATA", "main"]

RTOL, ATOL = 1e-5, 1e-6
_SHOWN = 8  # differing outputs listed in a report
_TRAP = 'notebook 06, section "The gradient trap"'
_DEVICE_ROWS = "notebook 07, section \"The question the course started from: `P('device')`\""
_KEYS = 'notebook 06, section "Per-device randomness: `fold_in(key, axis_index)`"'


# ------------------------------------------------------------------------------------------ results

@dataclasses.dataclass(frozen=True)
class Difference:
    """One output leaf of the port that differs from the pmap step's, at the first step where any does."""

    step: int
    path: str  # e.g. "out[0]['w1']"
    max_abs: float  # largest |port - pmap| over the hosts (nan when the shapes differ)
    cause: str  # "gradient trap", "P('device') rows", "devices disagree", "shape", "ratio" or ""
    fact: str  # what differs, for this leaf
    advice: str = ""  # what the course knows about it (shared by the leaves with the same cause)
    ratio: float | None = None  # port / pmap (of the change, for an output that updates an input)


@dataclasses.dataclass(frozen=True)
class Proof:
    """The outcome of `prove_port`: `ok`, and `report()` (also what printing it shows)."""

    ok: bool
    where: str  # "emulated in one process" or "real processes"
    hosts: int
    devices_per_host: int
    steps: int
    compared: int = 0  # output leaves compared per step
    differences: tuple[Difference, ...] = ()
    notes: tuple[str, ...] = ()
    error: str = ""  # why it could not run ('' when it ran)

    def report(self) -> str:
        """Pass, or each output that differs and, once per cause, what the course knows about it."""
        head = (f"port proof, {self.where} ({self.hosts} hosts x {self.devices_per_host} devices, "
                f"{self.steps} step{'s' if self.steps != 1 else ''}): ")
        if self.error:
            return head + "NOT RUN: " + self.error
        if self.ok:
            lines = [head + f"PASS: every output of the port ({self.compared} arrays) equals the pmap "
                            f"step's on every host, at every step (rtol {RTOL:g}, atol {ATOL:g})"]
        else:
            lines = [head + f"FAIL at step {self.differences[0].step}: {len(self.differences)} of "
                            f"{self.compared} outputs differ"]
            groups: dict[str, list[Difference]] = {}
            for d in self.differences:
                groups.setdefault(d.advice, []).append(d)
            for advice, members in groups.items():
                lines += [f"  {d.path}: {d.fact}" for d in members[:_SHOWN]]
                if len(members) > _SHOWN:
                    lines.append(f"  ... and {len(members) - _SHOWN} more outputs")
                if advice:
                    lines.append(f"  -> {advice}")
        return "\n".join(lines + ["  " + n for n in self.notes])

    def check(self) -> "Proof":
        """Return self when the port passed, else raise ProofError with the report."""
        if not self.ok:
            raise ProofError(self.report())
        return self

    def __str__(self) -> str:
        return self.report()

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle) -> None:  # IPython's plain-text repr
        p.text(self.report())


class ProofError(AssertionError):
    """A port that does not equal its pmap step (raised by `Proof.check`)."""


def one_host_keys(key, host: int, hosts: int, local_devices: int) -> np.ndarray:
    """Host `host`'s rows of one global split: the keys a 1-host run with every device would draw,
    `jax.random.split(key, hosts * local_devices)[host * local_devices:(host + 1) * local_devices]`.
    Give them to both steps (in `host_inputs`) in place of `split(key, local_devices)` on every host."""

    keys = jax.random.split(key, hosts * local_devices)[host * local_devices:(host + 1) * local_devices]
    return np.asarray(jax.random.key_data(keys) if jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key)
                      else keys)


# ---------------------------------------------------------------------------------- the comparison

def _close(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))


def _expected(old: np.ndarray, port: np.ndarray, local: int) -> tuple[np.ndarray | None, str]:
    """The pmap step's output in the port's form (None, why, when it has no such form)."""
    row = old.shape[1:]
    if port.shape == row:
        if not np.allclose(old, old[:1], rtol=RTOL, atol=ATOL, equal_nan=True):
            return None, ("the pmap step's value differs from device to device, and the port returns one copy "
                          f"{port.shape}: return it per device, with an out_spec of P({DATA!r})")
        return old[0], ""
    if old.ndim >= 2 and port.shape == (old.shape[0] * old.shape[1],) + old.shape[2:]:
        return old.reshape(port.shape), ""
    if port.shape == old.shape:
        return old, ""
    return None, (f"the port's has shape {port.shape} on each host, the pmap step's {row} on each of the host's "
                  f"{local} devices: return one copy {row}, the rows merged "
                  f"{(local * row[0],) + row[1:] if row else '(no rows)'}, or the stack {old.shape}")


def _fit(a: np.ndarray, b: np.ndarray) -> float | None:
    """r with a == r * b (within 1e-3 of b's size), else None."""
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    norm = float(b @ b)
    if not np.isfinite(a).all() or norm == 0.0:
        return None
    r = float(a @ b) / norm
    return r if float(np.sqrt(((a - r * b) ** 2).sum() / norm)) <= 1e-3 else None


def _named_ratio(r: float, hosts: int, local: int) -> tuple[str, str]:
    """(cause, advice) for a ratio port / pmap; ('', '') for a ratio the course has no name for."""
    n = hosts * local

    def near(k: float) -> bool:
        return abs(r - k) <= 2e-3 * k

    drop = f"drop it and take the gradient of the pmean'd loss ({_TRAP})"
    if near(n):
        return "gradient trap", (f"the gradient trap: N = {n} (the device count) times the pmap step's, from a "
                                 f"pmean/psum of gradients that shard_map with check_vma already summed; {drop}")
    if near(n * n):
        return "gradient trap", (f"the gradient trap twice over: N\u00b2 = {n * n} times the pmap step's, from a "
                                 f"psum of gradients that shard_map with check_vma already summed; {drop}")
    if near(1 / n):
        return "gradient trap", (f"1/N = 1/{n} of the pmap step's: the gradients are averaged once more than in "
                                 "the pmap step (the gradient of the pmean'd loss, pmean'd or divided by N again), "
                                 f"or the pmap step psums them where it means to average ({_TRAP})")
    for k, axis, count in ((local, "'device'", "the local device count"), (hosts, "'host'", "the host count")):
        if k > 1 and near(k):
            return "ratio", (f"{k} ({count}) times the pmap step's: a sum over {axis} alone where the pmap step "
                             f"averages, or the gradient trap on one mesh axis ({_TRAP})")
        if k > 1 and near(1 / k):
            return "ratio", f"1/{k} ({count}) of the pmap step's: one mean over {axis} too many"
    return "", ""


def _compare(seen: runs.Observed, hosts: int, local: int, rtol: float, atol: float) -> tuple[int, list]:
    """(leaves compared, the differences at the first step that has any)."""
    if seen.old_tree != seen.port_tree:
        raise runs.NotRun(f"the port returns {seen.port_tree} and the pmap step {seen.old_tree}: return the same "
                    "structure (the same tuple, the same dict keys)")
    for step in range(len(seen.old)):
        differences = [d for i in range(len(seen.port_paths))
                       if (d := _leaf(seen, step, i, hosts, local, rtol, atol)) is not None]
        if differences:
            return len(seen.port_paths), differences
    return len(seen.port_paths), []


def _leaf(seen: runs.Observed, step: int, i: int, hosts: int, local: int, rtol: float, atol: float):
    """The Difference of output leaf i at `step`, or None when the port's equals the pmap step's."""
    path = seen.port_paths[i]
    olds = [seen.old[step][h][i] for h in range(hosts)]
    ports = [seen.port[step][h][i] for h in range(hosts)]
    splits = [seen.split[step][h][i] for h in range(hosts)]
    expected = [_expected(o, p, local) for o, p in zip(olds, ports)]
    for want, why in expected:
        if want is None:
            return Difference(step, path, float("nan"), "shape", why)
    wants = [w for w, _ in expected]
    differs = [not _close(p, w, rtol, atol) for p, w in zip(ports, wants)]
    if not any(differs) and not any(splits):
        return None
    worst = max(float(np.max(np.abs(_f64(p) - _f64(w)))) if p.size else 0.0 for p, w in zip(ports, wants))
    bad = [h for h in range(hosts) if differs[h] or splits[h]]
    gap = f"max |port - pmap| {worst:.3g}, on {_hosts_text(bad)}"
    if any(splits):
        return Difference(step, path, worst, "devices disagree", (
            f"the devices of host {splits.index(True)} hold different copies ({gap})"), (
            "out_specs call it one value the devices share, and it is not (with check_vma=False JAX does not "
            "check): average it over the mesh axes it differs on, or return it per device"))
    if hosts > 1 and all(_close(wants[0], w, rtol, atol) for w in wants[1:]) and not all(
            _close(ports[0], p, rtol, atol) for p in ports[1:]):
        between = max(float(np.max(np.abs(_f64(ports[0]) - _f64(p)))) for p in ports[1:])
        return Difference(step, path, worst, "P('device') rows", (
            f"the hosts' copies differ from each other (max |host 0 - other host| {between:.3g}) where the pmap "
            f"step's agree ({gap})"), (
            "the P('device') pitfall: each host computed it from its own rows alone. A spec without 'host' says "
            "every host holds the same rows; data each host holds its own part of is P(('host', 'device')), "
            f"averaged over both axes ({_DEVICE_ROWS})"))
    ratio, of = _ratio(seen, step, i, ports, wants, hosts)
    if ratio is not None:
        cause, advice = _named_ratio(ratio, hosts, local)
        if cause or ports[0].size > 1:
            return Difference(step, path, worst, cause or "ratio",
                              f"{of} {ratio:.4g} times the pmap step's ({gap})", advice, ratio)
    h = bad[0]
    index = np.unravel_index(int(np.argmax(np.abs(_f64(ports[h]) - _f64(wants[h])))), ports[h].shape)
    at = f"[{', '.join(map(str, index))}]" if index else ""
    return Difference(step, path, worst, "", (
        f"differs ({gap}); host {h}{', at ' + at if at else ''}: port {_f64(ports[h][index]):.6g}, "
        f"pmap {_f64(wants[h][index]):.6g}"))


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def _ratio(seen: runs.Observed, step: int, i: int, ports: list, wants: list, hosts: int):
    """(port / pmap, of what): of the change when the output updates the input at the same path, else of the value."""
    port, want = np.concatenate([_f64(p).ravel() for p in ports]), np.concatenate([_f64(w).ravel() for w in wants])
    if ports[0].dtype.kind not in "fc":
        return None, ""
    path = seen.port_paths[i].replace("out", "args", 1)
    if path in seen.in_paths:
        before = [seen.inputs[step][h][seen.in_paths.index(path)] for h in range(hosts)]
        if all(b.shape[1:] == w.shape for b, w in zip(before, wants)):
            start = np.concatenate([_f64(b[0]).ravel() for b in before])
            if (change := _fit(port - start, want - start)) is not None:
                return change, "its change (output - input) is"
    direct = _fit(port, want)
    return (direct, "it is") if direct is not None else (None, "")


def _hosts_text(hosts: list[int]) -> str:
    return f"host {hosts[0]}" if len(hosts) == 1 else "hosts " + ", ".join(map(str, hosts[:-1])) + f" and {hosts[-1]}"


def _key_notes(seen: runs.Observed, hosts: int, local: int, ok: bool) -> list[str]:
    """What the pmap step's keys mean for a proof: keys every host draws alike."""
    if hosts < 2:
        return []
    notes = []
    for j, path in enumerate(seen.in_paths):
        stacks = [seen.inputs[0][h][j] for h in range(hosts)]
        if not runs.is_key(stacks[0]) or not all(np.array_equal(stacks[0], s) for s in stacks[1:]):
            continue
        same_rows = all(np.array_equal(stacks[0][0], r) for r in stacks[0][1:])
        who = "every device of every host draws with the same key" if same_rows else (
            "device d of every host draws with the same key (each host split one key over its own devices, as "
            "shard_prng_key and split(key, local_device_count()) do)")
        if ok:
            notes.append(f"note: the pmap step's keys {path} are the same on every host: {who}. The port keeps that; "
                         f"once proved, a key per device of every host changes the numbers ({_KEYS})")
        else:
            notes.append(f"keys: the pmap step's keys {path} are the same on every host: {who}. No port that draws "
                         "a key per device of every host (fold_in with axis_index) can equal that. To prove the "
                         "port, give both steps the keys a 1-host run would draw, in host_inputs: "
                         "one_host_keys(key, host, hosts, local_devices), that is jax.random.split(key, "
                         "hosts*local)[host*local:(host+1)*local], and feed them to the port as its keys")
    return notes


# -------------------------------------------------------------------------------------- the call

def prove_port(old_step, new_step, host_inputs, *, hosts: int = 2, devices_per_host: int = 4, steps: int = 2,
               in_specs=None, old_in_axes=0, real: bool = False, rtol: float = RTOL, atol: float = ATOL,
               timeout: float = 180) -> Proof:
    """Run `old_step` (pmapped) and `new_step(mesh)` on the same per-host data and compare (module docstring).

    old_step, new_step, host_inputs: functions, or 'file.py:name' / 'module:name' (real=True needs them in a
    file: each real host imports them). in_specs: how the port takes each argument (a PartitionSpec per
    argument, a pytree prefix); default P() for the first, P(('host', 'device')) for the others.
    old_in_axes: the pmap step's in_axes, 0 or None per argument (None: passed whole, not stacked).
    real=False: hosts emulated in this process (needs hosts x devices_per_host devices); True: real processes.
    Returns a `Proof`; it prints its report. Never raises for the learner's code: a step that raises, or
    inputs of the wrong kind, give a Proof whose report is one line.
    """
    where = "real processes" if real else "emulated in one process"

    def stopped(why: str) -> Proof:
        return Proof(False, where, hosts, devices_per_host, steps, error=why)

    for name, value in (("hosts", hosts), ("devices_per_host", devices_per_host), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return stopped(f"{name} must be a whole number of at least 1; got {value!r}")
    try:
        if real:
            refs = [runs.ref_of(f, role) for f, role in ((old_step, "old_step"), (new_step, "new_step"),
                                                     (host_inputs, "host_inputs"))]
            for ref, role in zip(refs, ("old_step", "new_step", "host_inputs")):
                runs.resolve(ref, role)  # a wrong name is found here, not in every host
            seen = runs.real(refs, hosts, devices_per_host, steps, in_specs, old_in_axes, timeout)
        else:
            functions = [runs.resolve(f, role) for f, role in ((old_step, "old_step"), (new_step, "new_step"),
                                                            (host_inputs, "host_inputs"))]
            seen = runs.emulated(*functions, hosts, devices_per_host, steps, in_specs, old_in_axes)
        compared, differences = _compare(seen, hosts, devices_per_host, rtol, atol)
    except runs.NotRun as stop:
        return stopped(str(stop))
    ok = not differences
    return Proof(ok, where, hosts, devices_per_host, steps, compared, tuple(differences),
                 tuple(_key_notes(seen, hosts, devices_per_host, ok)))


# -------------------------------------------------------------------------------- the command line

def main(argv: Sequence[str] | None = None) -> int:
    """`python -m helpers.migrate.proof OLD NEW INPUTS [--real]`: print the report; the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m helpers.migrate.proof",
        description="Run a pmap step and its shard_map port on the same per-host data, on emulated hosts "
                    "(default) or real processes (--real), and compare their outputs.",
        epilog="Exit status: 0 the port's outputs equal the pmap step's; 1 they differ (the report says which "
               "and why); 2 the proof could not run (a bad argument, a step that raises).")
    parser.add_argument("old", metavar="OLD_MODULE:old_fn", help="the pmapped step (file.py:name or module:name)")
    parser.add_argument("new", metavar="NEW_MODULE:new_fn", help="new_fn(mesh) returns the port's step")
    parser.add_argument("inputs", metavar="INPUTS_MODULE:fn",
                        help="fn(host, hosts, local_devices[, step]): the pmap step's arguments on that host")
    parser.add_argument("--real", action="store_true", help="run the hosts as real processes (helpers.launch)")
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--devices-per-host", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--in-specs", metavar="MODULE:name", help="a tuple of PartitionSpecs, one per argument "
                        "(default: P() for the first, P(('host', 'device')) for the others)")
    args = parser.parse_args(argv)
    try:
        if not args.real:  # before anything starts JAX
            use_fake_devices(args.hosts * args.devices_per_host)
        in_specs = runs.load(args.in_specs) if args.in_specs else None
    except (runs.NotRun, ValueError, RuntimeError) as error:
        print(f"port proof: NOT RUN: {error if isinstance(error, runs.NotRun) else explain(error)}")
        return 2
    proof = prove_port(args.old, args.new, args.inputs, hosts=args.hosts, devices_per_host=args.devices_per_host,
                       steps=args.steps, in_specs=in_specs, real=args.real)
    print(proof.report())
    return 0 if proof.ok else (2 if proof.error else 1)


if __name__ == "__main__":
    sys.exit(main())
