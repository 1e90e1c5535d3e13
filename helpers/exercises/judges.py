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
