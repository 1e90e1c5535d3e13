"""The tiny model, the synthetic data set and the host-local loader of notebooks 07-09.

The model is a 2-layer MLP (4 -> 16 -> 1, tanh) in plain JAX; its parameters are a dict of
arrays. The data set is a fixed, seeded table of `DATASET_SIZE` examples, the stand-in for
files on disk. Step `s` of a run uses examples `s*G ... s*G + G - 1` (G = the global batch,
wrapping around the table); host `h` of `H` reads only its own contiguous part of them:

    >>> x, y = host_batch(step=3, host=1, num_hosts=2, global_batch=256)  # rows 896..1023
    >>> x.shape, y.shape
    ((128, 4), (128, 1))

Stacking every host's part in host order gives `global_batch_at(step, G)`, the batch a
single-device reference trains on. The train step itself is not here: the notebooks write it.
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = [
    "IN_DIM", "HIDDEN", "OUT_DIM", "DATASET_SIZE", "GLOBAL_BATCH", "STEPS", "LEARNING_RATE",
    "dataset", "init_params", "predict", "loss_fn", "dropout_predict", "dropout_loss_fn", "host_batch",
    "global_batch_at", "host_rows",
]

IN_DIM, HIDDEN, OUT_DIM = 4, 16, 1
DATASET_SIZE = 4096
GLOBAL_BATCH = 256  # 2 hosts x 4 devices x 32 examples
STEPS = 40
LEARNING_RATE = 0.3


@functools.lru_cache(maxsize=4)
def dataset(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The whole synthetic data set, x: float32[N, 4] and y: float32[N, 1] (read-only, seeded)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(DATASET_SIZE, IN_DIM)).astype(np.float32)
    a = np.array([1.0, -2.0, 0.5, 1.5], np.float32)
    b = np.array([0.5, 0.5, -1.0, 0.0], np.float32)
    noise = 0.05 * rng.normal(size=DATASET_SIZE).astype(np.float32)
    y = np.sin(x @ a) + 0.5 * (x @ b) + noise
    x.setflags(write=False)
    y = y.reshape(-1, 1).astype(np.float32)
    y.setflags(write=False)
    return x, y


def init_params(seed: int = 1) -> dict[str, np.ndarray]:
    """Seeded initial parameters: {'w1': [4, 16], 'b1': [16], 'w2': [16, 1], 'b2': [1]} float32."""
    rng = np.random.default_rng(seed)
    return {
        "w1": (rng.normal(size=(IN_DIM, HIDDEN)) / np.sqrt(IN_DIM)).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": (rng.normal(size=(HIDDEN, OUT_DIM)) / np.sqrt(HIDDEN)).astype(np.float32),
        "b2": np.zeros(OUT_DIM, np.float32),
    }


def predict(params, x):
    """The MLP: tanh(x @ w1 + b1) @ w2 + b2, for x of shape [batch, 4]."""
    import jax.numpy as jnp

    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    return hidden @ params["w2"] + params["b2"]


def loss_fn(params, x, y):
    """Mean squared error of the MLP on the examples (x, y) it is given."""
    import jax.numpy as jnp

    return jnp.mean((predict(params, x) - y) ** 2)


def dropout_predict(params, x, key, rate: float = 0.25):
    """predict with dropout on the hidden layer: each hidden unit of each example is dropped with
    probability `rate` (drawn from `key`), the kept ones scaled by 1 / (1 - rate)."""
    import jax
    import jax.numpy as jnp

    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    kept = jax.random.bernoulli(key, 1 - rate, hidden.shape)
    hidden = jnp.where(kept, hidden / (1 - rate), 0)
    return hidden @ params["w2"] + params["b2"]


def dropout_loss_fn(params, x, y, key, rate: float = 0.25):
    """loss_fn with dropout on the hidden layer: the mean squared error of dropout_predict."""
    import jax.numpy as jnp

    return jnp.mean((dropout_predict(params, x, key, rate) - y) ** 2)


def _check_split(step: int, host: int, num_hosts: int, global_batch: int) -> int:
    for name, value in (("step", step), ("host", host), ("num_hosts", num_hosts),
                        ("global_batch", global_batch)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{name} must be a whole number; got {value!r}")
    if step < 0:
        raise ValueError(f"step must be 0 or more; got {step}")
    if num_hosts < 1 or not 0 <= host < num_hosts:
        raise ValueError(f"host must be between 0 and num_hosts - 1 = {num_hosts - 1}; got {host}")
    if global_batch < 1 or global_batch % num_hosts:
        raise ValueError(f"global_batch ({global_batch}) must be a positive multiple of "
                         f"num_hosts ({num_hosts}): every host reads an equal part")
    return global_batch // num_hosts


def host_rows(step: int, host: int, num_hosts: int, global_batch: int = GLOBAL_BATCH) -> np.ndarray:
    """The data-set rows host `host` reads at `step`: its contiguous part of the step's global batch."""
    per_host = _check_split(step, host, num_hosts, global_batch)
    first = step * global_batch + host * per_host
    return (first + np.arange(per_host)) % DATASET_SIZE


def host_batch(step: int, host: int, num_hosts: int, global_batch: int = GLOBAL_BATCH,
               seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Host `host`'s part of step `step`'s global batch: (x [G/H, 4], y [G/H, 1]) numpy float32.

    Reads only this host's rows, as a per-host input pipeline does; deterministic in
    (step, host, num_hosts, global_batch).
    """
    rows = host_rows(step, host, num_hosts, global_batch)
    x, y = dataset(seed)
    return x[rows], y[rows]


def global_batch_at(step: int, global_batch: int = GLOBAL_BATCH,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The whole global batch of `step` (every host's part, in host order): what one device would train on."""
    return host_batch(step, 0, 1, global_batch, seed)
