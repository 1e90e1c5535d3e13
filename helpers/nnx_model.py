"""The course's model as a Flax NNX module, its AdamW optimizer, and the pieces notebooks 10-11 share.

The model is the MLP of `helpers.train` (4 -> 16 -> 1, tanh), written as an `nnx.Module`; the
optimizer is Optax AdamW, wrapped in `nnx.Optimizer` so that its state (step count, first and
second moments) lives next to the parameters. `create(seed)` builds both from one seed, so every
host that calls it with the same seed builds the same numbers:

    >>> model, optimizer = create(seed=0)
    >>> model(np.zeros((2, 4), np.float32)).shape
    (2, 1)

`reference_losses(steps)` trains on one device on the global batches of `helpers.train`: the
curve every distributed run in notebooks 10-11 must reproduce. The distributed train steps are
written in the notebooks; this module holds only what would otherwise be written twice.
"""
from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp
import optax
from flax import nnx

from helpers import train

__all__ = [
    "LEARNING_RATE", "WEIGHT_DECAY", "SEED", "MLP", "make_optimizer", "create", "loss_fn",
    "reference_step", "reference_losses", "params_of",
]

LEARNING_RATE = 0.05  # AdamW; the loss falls from 1.04 to 0.25 in train.STEPS steps
WEIGHT_DECAY = 1e-4
SEED = 0


class MLP(nnx.Module):
    """tanh(x @ hidden.kernel + hidden.bias) @ out.kernel + out.bias, for x of shape [batch, 4]."""

    def __init__(self, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(train.IN_DIM, train.HIDDEN, rngs=rngs)
        self.out = nnx.Linear(train.HIDDEN, train.OUT_DIM, rngs=rngs)

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


def reference_losses(steps: int = train.STEPS, global_batch: int = train.GLOBAL_BATCH,
                     seed: int = SEED) -> np.ndarray:
    """Losses of `steps` single-device steps on `train.global_batch_at(s)`: the curve to match."""
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a whole number of 1 or more; got {steps!r}")
    device = jax.devices()[0]
    with jax.set_mesh(None), jax.default_device(device):
        model, optimizer = create(seed)
        losses = []
        for step in range(steps):
            x, y = train.global_batch_at(step, global_batch)
            losses.append(reference_step(model, optimizer, jnp.asarray(x), jnp.asarray(y)))
        return np.asarray(jax.device_get(losses), np.float32)


def params_of(model: MLP) -> dict[str, np.ndarray]:
    """The model's parameters as numpy, named as in `helpers.train.init_params` (w1, b1, w2, b2)."""
    return {
        "w1": np.asarray(model.hidden.kernel[...]), "b1": np.asarray(model.hidden.bias[...]),
        "w2": np.asarray(model.out.kernel[...]), "b2": np.asarray(model.out.bias[...]),
    }
