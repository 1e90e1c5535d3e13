"""Building blocks that several notebooks' judges share."""
from __future__ import annotations

from typing import Any

from helpers.exercises.core import Mistake, describe


def require_spec(answer: Any):
    """The answer as a PartitionSpec, or a Mistake that says what was given instead."""
    from jax.sharding import PartitionSpec

    if not isinstance(answer, PartitionSpec):
        raise Mistake(f"expected a PartitionSpec such as P('host'), but got {describe(answer)}")
    return answer


def placement(mesh, spec, shape: tuple[int, ...]) -> dict[int, tuple]:
    """Device id -> the index slices it holds, as JAX reports them (a Mistake if JAX refuses)."""
    from jax.sharding import NamedSharding

    try:
        index_map = NamedSharding(mesh, spec).devices_indices_map(tuple(shape))
    except Exception as error:  # JAX rejects the spec for this mesh or shape
        last = (str(error).strip().splitlines() or [""])[-1]
        raise Mistake(f"JAX rejects {spec} for shape {tuple(shape)} on mesh axes {dict(mesh.shape)}: {last}") from None
    return {d.id: tuple((s.start, s.stop, s.step) for s in idx) for d, idx in index_map.items()}


def same_placement(mesh, spec_a, spec_b, shape: tuple[int, ...]) -> bool:
    """True when two specs put the same slices on the same devices (P('a') == P('a', None))."""
    return placement(mesh, spec_a, shape) == placement(mesh, spec_b, shape)


def require_int(answer: Any, what: str) -> int:
    """The answer as a plain whole number, or a Mistake naming what was expected."""
    import numbers

    if isinstance(answer, bool) or not isinstance(answer, numbers.Integral):
        raise Mistake(f"expected a whole number for {what}, but got {describe(answer)}")
    return int(answer)


def require_shape(answer: Any, what: str = "the shape") -> tuple[int, ...]:
    """The answer as a tuple of whole numbers, like (8, 4)."""
    if not isinstance(answer, tuple) or not all(isinstance(n, int) and not isinstance(n, bool) for n in answer):
        raise Mistake(f"expected {what} as a tuple of whole numbers like (8, 4), but got {describe(answer)}")
    return answer


def require_numbers(answer: Any, count: int, what: str) -> list[float]:
    """The answer as `count` plain numbers (a list, tuple or 1-D array), or a Mistake."""
    import numpy as np

    if isinstance(answer, (str, bytes, dict)) or answer is None:
        raise Mistake(f"expected {what} as a list of {count} numbers, but got {describe(answer)}")
    try:
        values = np.asarray(answer, dtype=float)
    except (TypeError, ValueError):
        raise Mistake(f"expected {what} as a list of {count} numbers, but got {describe(answer)}") from None
    if values.ndim != 1 or values.shape[0] != count:
        raise Mistake(f"expected {count} numbers ({what}), one per device, but got {describe(answer)}")
    if not np.all(np.isfinite(values)):
        raise Mistake(f"expected {count} ordinary numbers ({what}); your list has nan or inf in it")
    return values.tolist()


def splits_host_and_device_apart(entries: tuple) -> bool:
    """True for P('host', 'device') and the like: the two mesh axes on two different dimensions."""
    names = [e if isinstance(e, tuple) else (e,) for e in entries]
    with_host = [i for i, n in enumerate(names) if "host" in n]
    with_device = [i for i, n in enumerate(names) if "device" in n]
    return bool(with_host and with_device and with_host != with_device)
