"""Notebook 13's two all-reduces over a (host, device) mesh, for the benchmark and traced runs.

Each is a `shard_map` body: one block per device in, the sum over every device out.
"""
from __future__ import annotations

import jax

AXES = ("host", "device")


def flat_allreduce(block):
    """psum over every device at once: notebook 13's flat all-reduce."""
    return jax.lax.psum(block, AXES)


def hierarchical_allreduce(block):
    """Inside each host, then across hosts, then back inside: notebook 13.4's solution."""
    piece = jax.lax.psum_scatter(block, "device", scatter_dimension=1, tiled=True)
    piece = jax.lax.psum(piece, "host")
    return jax.lax.all_gather(piece, "device", axis=1, tiled=True)


BODIES = {"flat": flat_allreduce, "hierarchical": hierarchical_allreduce}
