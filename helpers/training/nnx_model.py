"""The course's model as a Flax NNX module, its AdamW optimizer, and the pieces notebooks 10-11 share.

The model is the MLP of `helpers.training.tiny` (4 -> 16 -> 1, tanh), written as an `nnx.Module`; the
optimizer is Optax AdamW, wrapped in `nnx.Optimizer` so that its state (step count, first and
second moments) lives next to the parameters. `create(seed)` builds both from one seed, so every
host that calls it with the same seed builds the same numbers:

    >>> model, optimizer = create(seed=0)
    >>> model(np.zeros((2, 4), np.float32)).shape
    (2, 1)

`reference_losses(steps)` trains on one device on the global batches of `helpers.training.tiny`: the
curve every distributed run in notebooks 10-11 must reproduce. `state_shardings(mesh)` places
the train state as notebook 10 does, optimizer-state sharding (ZeRO-1 style): parameters and
step counts replicated, each AdamW moment split over the mesh's `'device'` axis (a copy per
host). The distributed train steps are
written in the notebooks; this module holds only what would otherwise be written twice.
"""
from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax import P
from jax.sharding import NamedSharding

from helpers.training import tiny

__all__ = [
    "LEARNING_RATE", "WEIGHT_DECAY", "SEED", "MLP", "make_optimizer", "create", "loss_fn",
    "reference_step", "reference_losses", "params_of", "abstract_state", "moment_spec",
    "state_specs", "state_shardings", "describe",
]

LEARNING_RATE = 0.05  # AdamW; the loss falls from 1.04 to 0.25 in tiny.STEPS steps
WEIGHT_DECAY = 1e-4
SEED = 0


class MLP(nnx.Module):
    """tanh(x @ hidden.kernel + hidden.bias) @ out.kernel + out.bias, for x of shape [batch, 4]."""

    def __init__(self, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(tiny.IN_DIM, tiny.HIDDEN, rngs=rngs)
        self.out = nnx.Linear(tiny.HIDDEN, tiny.OUT_DIM, rngs=rngs)

    def __call__(self, x):
        return self.out(jnp.tanh(self.hidden(x)))


def make_optimizer(model: MLP, learning_rate: float = LEARNING_RATE,
                   weight_decay: float = WEIGHT_DECAY) -> nnx.Optimizer:
    """AdamW over the model's `nnx.Param`s, with its state (count, mu, nu) held in an `nnx.Optimizer`."""
    return nnx.Optimizer(model, optax.adamw(learning_rate, weight_decay=weight_decay),
                         wrt=nnx.Param)


def create(seed: int = SEED) -> tuple[MLP, nnx.Optimizer]:
    """A fresh model and its optimizer, initialised from `seed` alone (same seed, same numbers)."""
    model = MLP(nnx.Rngs(seed))
    return model, make_optimizer(model)


def loss_fn(model: MLP, x, y):
    """Mean squared error of the model on the examples (x, y) it is given."""
    return jnp.mean((model(x) - y) ** 2)


@nnx.jit
def reference_step(model: MLP, optimizer: nnx.Optimizer, x, y):
    """One AdamW step on one device on the batch (x, y); updates model and optimizer, returns the loss."""
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    optimizer.update(model, grads)
    return loss


def reference_losses(steps: int = tiny.STEPS, global_batch: int = tiny.GLOBAL_BATCH,
                     seed: int = SEED) -> np.ndarray:
    """Losses of `steps` single-device steps on `tiny.global_batch_at(s)`: the curve to match."""
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a whole number of 1 or more; got {steps!r}")
    device = jax.devices()[0]
    with jax.set_mesh(None), jax.default_device(device):
        model, optimizer = nnx.jit(create, static_argnums=0)(seed)  # one program, not many small ones
        losses = []
        for step in range(steps):
            x, y = tiny.global_batch_at(step, global_batch)
            losses.append(reference_step(model, optimizer, jnp.asarray(x), jnp.asarray(y)))
        return np.asarray(jax.device_get(losses), np.float32)


def params_of(model: MLP) -> dict[str, np.ndarray]:
    """The model's parameters as numpy, named as in `helpers.training.tiny.init_params` (w1, b1, w2, b2)."""
    return {
        "w1": np.asarray(model.hidden.kernel[...]), "b1": np.asarray(model.hidden.bias[...]),
        "w2": np.asarray(model.out.kernel[...]), "b2": np.asarray(model.out.bias[...]),
    }


def abstract_state(seed: int = SEED):
    """(graphdef, state) of `create(seed)` with shapes only: nothing is computed or allocated."""
    return nnx.split(nnx.eval_shape(lambda: create(seed)))


def moment_spec(shape: tuple[int, ...], devices: int, axis: str = "device") -> P:
    """Spec of one AdamW moment: its largest dimension that `devices` divides, split over `axis`.

    >>> moment_spec((4, 16), 4), moment_spec((1,), 4)
    (P(None, 'device'), P())
    """
    for dim in sorted(range(len(shape)), key=lambda d: -shape[d]):
        if shape[dim] % devices == 0:
            return P(*[axis if d == dim else None for d in range(len(shape))])
    return P()


def _is_variable(x) -> bool:
    return isinstance(x, nnx.Variable)


def state_specs(state, devices: int, axis: str = "device"):
    """The spec of every leaf of a (model, optimizer) state: moments by `moment_spec`, the rest P()."""
    def spec(variable):
        if isinstance(variable, nnx.OptVariable):
            return moment_spec(tuple(variable.shape), devices, axis)
        return P()

    return jax.tree.map(spec, state, is_leaf=_is_variable)


def state_shardings(mesh, seed: int = SEED, axis: str = "device"):
    """NamedShardings for the whole train state on `mesh`: parameters replicated, moments split over `axis`."""
    _, state = abstract_state(seed)
    specs = state_specs(state, mesh.shape[axis], axis)
    return jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs)


def describe(state) -> str:
    """One line per leaf of a (model, optimizer) state: where it sits, its kind, and its JAX type."""
    lines = []
    for path, variable in nnx.to_flat_state(state):
        owner = {0: "model", 1: "optimizer"}.get(path[0], str(path[0]))
        name = ".".join(str(part) for part in path[1:])
        value = variable.get_value()
        kind = type(variable).__name__
        text = str(jax.typeof(value)) if isinstance(value, jax.Array) else \
            f"{value.dtype}{list(value.shape)}".replace(" ", "")
        lines.append(f"{owner:9} {name:28} {kind:11} {text}")
    return "\n".join(lines)
