"""helpers.training.nnx_model: the NNX MLP is the course's MLP, AdamW is Optax's, the reference run is seeded."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import P
import pytest

from helpers.training import nnx_model, tiny


def test_same_seed_builds_the_same_numbers_and_another_seed_does_not():
    a, _ = nnx_model.create(seed=3)
    b, _ = nnx_model.create(seed=3)
    c, _ = nnx_model.create(seed=4)
    for name, value in nnx_model.params_of(a).items():
        np.testing.assert_array_equal(value, nnx_model.params_of(b)[name])
    assert not np.array_equal(nnx_model.params_of(a)["w1"], nnx_model.params_of(c)["w1"])


def test_built_under_jit_or_eagerly_the_numbers_are_the_same():
    from flax import nnx

    eager, _ = nnx_model.create(seed=5)
    jitted, _ = nnx.jit(nnx_model.create, static_argnums=0)(5)
    for name, value in nnx_model.params_of(eager).items():
        np.testing.assert_array_equal(value, nnx_model.params_of(jitted)[name])


def test_the_module_computes_the_mlp_of_helpers_train():
    model, _ = nnx_model.create()
    x, _ = tiny.global_batch_at(0, 64)
    np.testing.assert_allclose(np.asarray(model(x)),
                               np.asarray(tiny.predict(nnx_model.params_of(model), x)),
                               rtol=1e-6, atol=1e-6)
    assert {k: v.shape for k, v in nnx_model.params_of(model).items()} == \
        {k: v.shape for k, v in tiny.init_params().items()}


def test_reference_step_is_adamw_on_the_mean_squared_error():
    """The NNX step gives the losses of plain optax.adamw on the params dict of helpers.training.tiny."""
    model, optimizer = nnx_model.create()
    params = {k: jnp.asarray(v) for k, v in nnx_model.params_of(model).items()}
    tx = optax.adamw(nnx_model.LEARNING_RATE, weight_decay=nnx_model.WEIGHT_DECAY)
    state = tx.init(params)
    for step in range(5):
        x, y = map(jnp.asarray, tiny.global_batch_at(step, 64))
        nnx_loss = nnx_model.reference_step(model, optimizer, x, y)
        loss, grads = jax.value_and_grad(tiny.loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        np.testing.assert_allclose(float(nnx_loss), float(loss), rtol=1e-5)
    assert int(optimizer.step[...]) == 5


def test_reference_losses_fall_and_repeat():
    losses = nnx_model.reference_losses(steps=12)
    assert losses.shape == (12,) and losses.dtype == np.float32
    assert losses[-1] < 0.7 * losses[0]
    np.testing.assert_array_equal(losses, nnx_model.reference_losses(steps=12))


def test_reference_losses_is_independent_of_a_global_mesh():
    mesh = jax.make_mesh((2, 4), ("host", "device"))
    with jax.set_mesh(mesh):
        inside = nnx_model.reference_losses(steps=3)
    np.testing.assert_array_equal(inside, nnx_model.reference_losses(steps=3))


@pytest.mark.parametrize("steps", [0, -1, 2.5, True, "3", None])
def test_reference_losses_rejects_a_bad_step_count(steps):
    with pytest.raises(ValueError, match="steps must be a whole number"):
        nnx_model.reference_losses(steps=steps)


@pytest.mark.parametrize("shape, devices, spec", [
    ((4, 16), 4, P(None, "device")),   # the larger dimension first
    ((16, 1), 4, P("device", None)),
    ((16,), 4, P("device")),
    ((1,), 4, P()),                    # nothing to split: a copy on every device
    ((), 4, P()),
    ((6, 3), 4, P()),
    ((6, 3), 3, P("device", None)),    # 6 is larger, and 3 divides it
    ((4, 16), 2, P(None, "device")),
])
def test_moment_spec_splits_the_largest_dimension_the_devices_divide(shape, devices, spec):
    assert nnx_model.moment_spec(shape, devices) == spec


def test_state_shardings_place_moments_per_host_and_parameters_everywhere():
    """Read from JAX's placement: each host holds a whole moment, split over its 4 devices."""
    from flax import nnx

    mesh = jax.make_mesh((2, 4), ("host", "device"))
    shardings = nnx_model.state_shardings(mesh)
    state = jax.jit(lambda: nnx.state(nnx_model.create()), out_shardings=shardings)()
    model, optimizer = nnx.merge(nnx_model.abstract_state()[0], state)
    mu = optimizer.opt_state[0].mu["hidden"]["kernel"][...]
    columns = {s.device.id: s.index[1].indices(16)[:2] for s in mu.addressable_shards}
    assert columns == {0: (0, 4), 1: (4, 8), 2: (8, 12), 3: (12, 16),
                       4: (0, 4), 5: (4, 8), 6: (8, 12), 7: (12, 16)}
    kernel = model.hidden.kernel[...]
    assert all(s.data.shape == (4, 16) for s in kernel.addressable_shards)
    np.testing.assert_array_equal(np.asarray(kernel), nnx_model.params_of(nnx_model.create()[0])["w1"])
    text = nnx_model.describe(state)
    assert len(text.splitlines()) == 14
    assert "float32[4,16@device]" in text and "model     hidden.kernel" in text


@pytest.mark.multiprocess
def test_the_init_exercise_is_judged_on_what_real_hosts_hold():
    """10.3's verdicts come from real hosts: [a train state, placed by opt_sharded, host 0's numbers]."""
    from helpers import exercises
    from helpers.exercises import nb10

    exercise = exercises.get("10.3")
    for layout in exercise.meshes:  # one real run judges the reference and the catalogue on both
        assert exercise.output_of_source(exercise.solution, layout) == ([1, 1, 1], [1, 1, 1])
        refused = exercise.output_of_source(nb10._DEVICE_PUT_OWN, layout)  # numpy that differs per host
        assert "passed to device_put is not the same on each process" in refused.text, refused
        assert exercise.output_of_source(nb10._FRESH_SEED, layout) == ([1, 1, 0], [1, 1, 0])
        assert exercise.output_of_source(nb10._NOT_PLACED, layout) == ([0, 0, 0], [0, 0, 0])
