"""No false all-clear: a parallel JAX or Flax API that no rule reads gets a finding of its own.

A name under one of `PARALLEL` (imported or called) that is not one of the current APIs in
`CURRENT`, on a line no rule spoke about, is reported as "not read", so a script the tool does
not understand never passes as "nothing to change".
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.script import Script

LESSONS: dict[str, tuple[str, str]] = {"not-read": ("16", "Ask the course")}
PARALLEL = ("jax.experimental.maps", "jax.experimental.pjit", "jax.experimental.shard_map",
            "jax.experimental.multihost_utils", "jax.experimental.mesh_utils", "jax.experimental.global_device_array",
            "jax.experimental.gda_serialization", "jax.interpreters.pxla", "jax.sharding", "flax.jax_utils",
            "flax.training.common_utils", "flax.linen.partitioning", "flax.nnx.spmd")
CURRENT = {
    "jax.sharding", "jax.sharding.NamedSharding", "jax.sharding.PartitionSpec", "jax.sharding.Mesh",
    "jax.sharding.AxisType", "jax.sharding.SingleDeviceSharding", "jax.sharding.AbstractMesh",
    "jax.sharding.get_abstract_mesh", "jax.sharding.use_mesh", "jax.sharding.reshard", "jax.sharding.auto_axes",
    "jax.sharding.explicit_axes", "jax.sharding.no_collectives",
    "jax.experimental.multihost_utils", "jax.experimental.multihost_utils.process_allgather",
    "jax.experimental.multihost_utils.sync_global_devices", "jax.experimental.multihost_utils.broadcast_one_to_all",
    "jax.experimental.multihost_utils.host_local_array_to_global_array",
    "jax.experimental.multihost_utils.global_array_to_host_local_array",
    "jax.experimental.multihost_utils.assert_equal", "jax.experimental.mesh_utils",
    "jax.experimental.mesh_utils.create_device_mesh", "jax.experimental.mesh_utils.create_hybrid_device_mesh",
    "jax.experimental.multihost_utils.reached_preemption_sync_point",
    "flax.training.common_utils.onehot", "flax.training.common_utils.stack_forest",  # not parallel
}


def unread_names(s: Script, read: set[str]) -> Iterator[tuple[ast.AST, str]]:
    """(node, name) for each parallel API the script imports or calls that is neither a current one
    nor one a rule reads (`read`); importing a whole module (`from flax import jax_utils`) is none."""
    reported = set()
    for node, name, imported in s.used_names():
        if (imported or isinstance(node, ast.Call)) and node not in reported and name not in CURRENT \
                and name not in read and not any(name.startswith(r + ".") for r in read) \
                and any(name.startswith(p + ".") for p in PARALLEL):  # `GlobalDeviceArray.from_callback`: read
            reported.add(node)
            yield node, name


def not_read(name: str) -> tuple[str, str]:
    """(what the line does, what to do instead) of a parallel API no rule reads."""
    return (f"not read: {name} is a parallel API that this tool has no rule for, so it cannot say "
            "what the line does on several hosts",
            "check the line by hand: where each array lives on the mesh (notebooks 02-03), and whether "
            "each host passes its own part or the whole global value")
