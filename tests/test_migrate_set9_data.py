"""The migration assistant's data and old-API rules met on a ninth set of published scripts: an old Mesh class
built in a `with` statement, a partitioner's pjit called with its axis resources by position, and a pmap bound to an
attribute whose output's field is read on the host. The snippets are written for these tests."""
from __future__ import annotations

from migrate_support import rule_set as _rules
from migrate_support import said as _said

OLD_MESH_ENTERED = """import jax
from jax.experimental import maps

class Trainer:
    def run(self, batch):
        with maps.Mesh(self.grid, ('data', 'model')):
            return self.step(batch)
"""


def test_an_old_mesh_class_built_in_a_with_is_both_the_removed_name_and_the_with():
    found = _rules(OLD_MESH_ENTERED)
    assert (6, "with-mesh") in found and (6, "experimental-sharding-names") in found
    assert "jax.make_mesh" in _said(OLD_MESH_ENTERED, 6, "experimental-sharding-names")


def test_the_old_mesh_function_in_a_with_stays_with_mesh_only():
    found = _rules(OLD_MESH_ENTERED.replace("maps.Mesh(", "maps.mesh("))
    assert (6, "with-mesh") in found and (6, "experimental-sharding-names") not in found


PARTITIONED = """import jax
from jax.sharding import PartitionSpec as P

class Runner:
    def build(self, planner, shapes):
        spec = planner.get_mesh_axes(shapes)
        cast = planner.partition(self.to_half, (spec,), spec)
        self.params = cast(self.params)
        self.run = planner.partition(self.forward, in_axis_resources=(spec, P('data')), out_axis_resources=P('data'))
"""


def test_a_partitioner_call_with_axis_resources_by_position_is_pjit_when_it_takes_the_keywords_elsewhere():
    found = _rules(PARTITIONED)
    assert (7, "pjit") in found and (9, "pjit") in found
    assert "by position" in _said(PARTITIONED, 7, "pjit")


def test_the_same_call_with_no_keyworded_twin_is_no_pjit():
    alone = PARTITIONED.replace(
        "in_axis_resources=(spec, P('data')), out_axis_resources=P('data')", "(spec, P('data')), P('data')")
    assert not {f for f in _rules(alone) if f[1] == "pjit"}


ATTRIBUTE_PMAP = """import jax
import numpy as np
from flax.training.common_utils import shard

class Pipeline:
    def __init__(self, fn):
        self.p_run = jax.pmap(fn, "batch")

    def run(self, params, rows):
        out = self.p_run(params, shard(rows)).sequences
        return jax.device_get(out.reshape(-1, 16))
"""


def test_a_field_of_an_attribute_pmaps_output_folded_and_fetched_is_a_numpy_of_global():
    assert (11, "numpy-of-global") in _rules(ATTRIBUTE_PMAP)
    assert "process_allgather" in _said(ATTRIBUTE_PMAP, 11, "numpy-of-global")


def test_an_attribute_bound_to_a_jit_is_no_pmap_output():
    plain = ATTRIBUTE_PMAP.replace('jax.pmap(fn, "batch")', "jax.jit(fn)")
    assert not {f for f in _rules(plain) if f[1] == "numpy-of-global"}
