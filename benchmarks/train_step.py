"""One SGD step of the course's model (helpers.training.tiny), written every way the course teaches.

Each variant is built as the notebooks build it, and is *checked* before it is timed: after
`steps` steps, its parameters must agree with the single-device reference within `TOLERANCE`,
or `check_agreement` raises `DisagreementError` and the benchmark stops instead of timing a
wrong program.

    single device       jax.jit of the global step, on one device
    pmap                per-device step, gradients pmean'd over the pmap axis (notebook 04/06)
    shard_map           on the ('host', 'device') mesh, check_vma on: the gradient of the
                        pmean'd loss (notebook 06's fix of the gradient trap)
    jit, Explicit mesh  jax.jit of the global step under jax.set_mesh on an Explicit mesh; the
                        shardings are in the inputs' types and XLA adds the all-reduce (nb 09)
    Flax NNX, single device
                        notebook 10's reference: `helpers.training.nnx_model.reference_step` (nnx.jit,
                        AdamW through nnx.Optimizer) on one device
    Flax NNX + Optax, mesh
                        notebook 10's distributed step: jax.jit of merge -> value_and_grad ->
                        optimizer.update -> state on the ('host', 'device') mesh, the state
                        placed by `nnx_model.state_shardings` (AdamW moments split over 'device')

The Flax variants train with AdamW, not SGD, so the Flax mesh step is checked against its own
single-device reference (`Variant.reference`), the others against "single device".
Needs 8 (or any even number of) fake devices, set before JAX starts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

AXES = ("host", "device")
TOLERANCE = 1e-5  # largest |parameter difference| from single device that counts as agreement
NNX_SINGLE, NNX_MESH = "Flax NNX, single device", "Flax NNX + Optax, mesh"
VARIANTS = ("single device", "pmap", "shard_map", "jit, Explicit mesh", NNX_SINGLE, NNX_MESH)


class DisagreementError(AssertionError):
    """A variant's parameters drifted away from the single-device reference."""


@dataclass
class Variant:
    """A compiled-on-first-call step and the state it starts from, placed as it needs."""

    name: str
    step: Callable  # (params, x, y) -> (params, loss); "params" is the whole train state
    start: tuple  # (params, x, y) on the variant's devices
    unplace: Callable  # params as the variant holds them -> {name: one copy, as numpy}
    context: Callable | None = None  # a context manager factory the step must run under
    reference: str = "single device"  # the variant whose parameters this one must reproduce

    def run(self, steps: int, state: tuple | None = None) -> tuple:
        """`steps` steps from `state` (default: the start); returns (params, x, y) after them."""
        import contextlib

        import jax

        params, x, y = state or self.start
        with (self.context() if self.context else contextlib.nullcontext()):
            for _ in range(steps):  # wait for every step, as a loop that logs its loss does
                params, loss = jax.block_until_ready(self.step(params, x, y))
        return params, x, y


def _sgd(params, grads, lr):
    import jax

    return jax.tree.map(lambda p, g: p - lr * g, params, grads)


def build_variants(global_batch: int, names: tuple[str, ...] = VARIANTS) -> dict[str, Variant]:
    """Every variant for one global batch of the course's data set (step 0's examples)."""
    import jax
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    from helpers.training import tiny

    lr = tiny.LEARNING_RATE
    n = jax.device_count()
    x, y = tiny.global_batch_at(0, global_batch)
    params = tiny.init_params()

    def global_step(p, xb, yb):  # the step single device and jit run: the whole batch's loss
        loss, grads = jax.value_and_grad(tiny.loss_fn)(p, xb, yb)
        return _sgd(p, grads, lr), loss

    def pmap_step(p, xb, yb):  # per device: its slice's gradient, then the mean over devices
        loss, grads = jax.value_and_grad(tiny.loss_fn)(p, xb, yb)
        grads, loss = jax.lax.pmean((grads, loss), "batch")
        return _sgd(p, grads, lr), loss

    def shard_map_step(p, xb, yb):  # check_vma on: differentiate the pmean'd loss
        def mean_loss(q):
            return jax.lax.pmean(tiny.loss_fn(q, xb, yb), AXES)

        loss, grads = jax.value_and_grad(mean_loss)(p)
        return _sgd(p, grads, lr), loss

    def as_numpy(p):
        return jax.tree.map(np.asarray, p)

    def first_replica(p):
        return jax.tree.map(lambda a: np.asarray(a)[0], p)

    builders = {}
    builders["single device"] = lambda: Variant(
        "single device", jax.jit(global_step),
        jax.device_put((params, x, y), jax.devices()[0]), unplace=as_numpy)

    def pmap_variant():
        split = lambda a: a.reshape((n, -1) + a.shape[1:])  # noqa: E731
        stacked = jax.tree.map(lambda a: np.broadcast_to(a, (n,) + a.shape), params)
        put = jax.pmap(lambda a: a)
        return Variant("pmap", jax.pmap(pmap_step, axis_name="batch"),
                       (jax.tree.map(put, stacked), put(split(x)), put(split(y))),
                       unplace=first_replica)
    builders["pmap"] = pmap_variant

    def shard_map_variant():
        mesh = jax.make_mesh((2, n // 2), AXES)
        rep, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXES))
        fn = jax.jit(jax.shard_map(shard_map_step, mesh=mesh, in_specs=(P(), P(AXES), P(AXES)),
                                   out_specs=(P(), P())))
        return Variant("shard_map", fn, (jax.device_put(params, rep), jax.device_put(x, batch),
                                         jax.device_put(y, batch)), unplace=as_numpy)
    builders["shard_map"] = shard_map_variant

    def explicit_variant():
        mesh = jax.make_mesh((2, n // 2), AXES, axis_types=(AxisType.Explicit,) * 2)
        with jax.set_mesh(mesh):  # bare P specs refer to this mesh
            start = (jax.device_put(params, P()), jax.device_put(x, P(AXES)),
                     jax.device_put(y, P(AXES)))
        return Variant("jit, Explicit mesh", jax.jit(global_step), start,
                       context=lambda: jax.set_mesh(mesh), unplace=as_numpy)
    builders["jit, Explicit mesh"] = explicit_variant
    builders[NNX_SINGLE] = lambda: _nnx_variant(NNX_SINGLE, x, y, mesh=None)
    builders[NNX_MESH] = lambda: _nnx_variant(NNX_MESH, x, y, mesh=jax.make_mesh((2, n // 2), AXES))

    unknown = set(names) - set(builders)
    if unknown:
        raise ValueError(f"unknown variants {sorted(unknown)}; known: {list(builders)}")
    return {name: builders[name]() for name in names}


def _nnx_variant(name: str, x, y, mesh) -> Variant:
    """Notebook 10's AdamW step: its reference on one device (mesh None), or on `mesh`."""
    import jax
    from flax import nnx
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from helpers.training import nnx_model

    graphdef, _ = nnx_model.abstract_state()

    def params(state):
        return nnx_model.params_of(nnx.merge(graphdef, state)[0])

    def create():
        return nnx.state(nnx_model.create(nnx_model.SEED))

    if mesh is None:  # nnx_model.reference_step on one device, as reference_losses runs it
        device = jax.devices()[0]

        def reference(state, xb, yb):
            model, optimizer = nnx.merge(graphdef, state, copy=True)  # leave `state` as it was
            loss = nnx_model.reference_step(model, optimizer, xb, yb)
            return nnx.state((model, optimizer)), loss

        with jax.default_device(device):
            start = (jax.jit(create)(), *jax.device_put((x, y), device))
        return Variant(name, reference, start, unplace=params, reference=name)

    shardings = nnx_model.state_shardings(mesh)
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXES))

    def mesh_step(state, xb, yb):  # notebook 10 / train_stack.py's step
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(nnx_model.loss_fn)(model, xb, yb)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    start = (jax.jit(create, out_shardings=shardings)(), jax.device_put(x, batch),
             jax.device_put(y, batch))
    return Variant(name, jax.jit(mesh_step, out_shardings=(shardings, replicated)), start,
                   unplace=params, reference=NNX_SINGLE)


def largest_differences(variants: dict[str, Variant], steps: int) -> dict[str, float]:
    """Each variant's largest |parameter - its reference's parameter| after `steps` steps.

    A reference variant (its `reference` is itself) differs by 0 by definition.
    """
    import numpy as np

    missing = {v.reference for v in variants.values()} - set(variants)
    if missing:
        raise ValueError(f"the variants' references {sorted(missing)} are not among the variants")
    after = {name: v.unplace(v.run(steps)[0]) for name, v in variants.items()}
    out = {}
    for name, variant in variants.items():
        got, ref = after[name], after[variant.reference]
        out[name] = max(float(np.max(np.abs(got[k] - ref[k]))) for k in ref)
    return out


def check_agreement(variants: dict[str, Variant], steps: int,
                    tolerance: float = TOLERANCE) -> dict[str, float]:
    """largest_differences, or DisagreementError naming every variant beyond `tolerance`."""
    differences = largest_differences(variants, steps)
    wrong = {name: d for name, d in differences.items() if not d <= tolerance}  # NaN is wrong
    if wrong:
        raise DisagreementError(
            f"after {steps} steps these variants' parameters differ from their single-device "
            f"reference by more than {tolerance:g}: "
            + ", ".join(f"{name} by {d:.3g}" for name, d in wrong.items())
            + ". The benchmark would time a wrong program; fix the variant first.")
    return differences


def worker(batches: list[int], check_steps: int, loops: int, values: int, warmups: int,
           rotate: int = 0) -> tuple[list[Any], dict]:
    """Check every variant, then time its step with pyperf: one benchmark per (batch, variant).

    `rotate` shifts the order the variants are timed in, so that several worker processes
    (pyperf's runs) do not always time the same variant first.
    """
    import time

    import jax

    from benchmarks.measure import in_process_runner

    runner = in_process_runner(loops=loops, values=values, warmups=warmups)
    benchmarks, facts = [], {"devices": jax.device_count(), "check_steps": check_steps,
                             "tolerance": TOLERANCE, "variants": list(VARIANTS),
                             "loops": loops, "batches": {}}
    for batch in batches:
        variants = build_variants(batch)
        first = {}
        for name, variant in variants.items():  # the first step compiles
            t = time.perf_counter()
            variant.run(1)
            first[name] = time.perf_counter() - t
        differences = check_agreement(variants, check_steps)
        facts["batches"][str(batch)] = {"first_step": first, "differences": differences}
        order = list(variants)[rotate % len(variants):] + list(variants)[:rotate % len(variants)]
        for name in order:
            variant, state = variants[name], [variants[name].start]

            def time_steps(n: int, variant=variant, state=state) -> float:
                t = time.perf_counter()
                state[0] = variant.run(n, state[0])
                return time.perf_counter() - t

            benchmarks.append(runner.bench_time_func(step_name(batch, name), time_steps))
    return benchmarks, facts


def step_name(batch: int, variant: str) -> str:
    """The pyperf benchmark name of one variant's step time at one global batch."""
    return f"course/train step/batch {batch}/{variant}"
