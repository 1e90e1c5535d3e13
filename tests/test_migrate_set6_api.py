"""helpers.migrate on API-level patterns of pmap-era and pjit-era code that held-out set 6 showed: a pmap decorator
written over several lines, pmap outputs unpacked from the name that holds them, jax.experimental.maps imported
only for the mesh, the old mesh function entered from a method, and pjit called through a wrapper of the script's
own. Every snippet here is written for the course."""
from __future__ import annotations

from migrate_support import rule_list as _rules


# ------------------------------------------------------------------ a pmap decorator over several lines

MULTI_LINE_PMAP = """\
import functools
import jax

@functools.partial(
    jax.pmap,
    axis_name='devices',
    static_broadcasted_argnums=(0,))
def update(config, params, rows):
    return params
"""


def test_a_multi_line_partial_pmap_is_said_at_the_pmap_reference():
    assert (5, "pmap") in _rules(MULTI_LINE_PMAP) and (4, "pmap") not in _rules(MULTI_LINE_PMAP)


def test_a_one_line_partial_pmap_is_said_on_its_line():
    source = MULTI_LINE_PMAP.replace("(\n    jax.pmap,\n    axis_name='devices',\n    ", "(jax.pmap, axis_name='devices', ")
    assert (4, "pmap") in _rules(source)


# ------------------------------------------------------------------ pmap outputs unpacked from a name

UNPACKED_OUTPUTS = MULTI_LINE_PMAP + """\

def train(config, params, rows, log):
    out = update(config, params, rows)
    params, err, size = out
    log({'err': err[0],
         'size': size[0]})
    return params
"""


def test_first_copies_of_outputs_unpacked_from_a_name_are_device_zero():
    rules = _rules(UNPACKED_OUTPUTS)
    assert (14, "jax-utils-replicate") in rules and (15, "jax-utils-replicate") in rules


def test_a_name_unpacked_from_something_else_is_no_pmap_output():
    source = UNPACKED_OUTPUTS.replace("params, err, size = out", "params, err, size = rows")
    assert not any(rule == "jax-utils-replicate" for _, rule in _rules(source))


# ------------------------------------------------------------------ jax.experimental.maps only for the mesh

MAPS_FOR_THE_MESH = """\
import jax
from jax.experimental import maps

class Runner:
    def go(self, grid):
        mesh = maps.Mesh(grid, ('rows', 'cols'))
        with maps.mesh(mesh.devices, mesh.axis_names):
            self.loop()
"""


def test_maps_imported_only_for_the_mesh_is_the_old_mesh_not_xmap():
    rules = _rules(MAPS_FOR_THE_MESH)
    assert (2, "experimental-sharding-names") in rules and (2, "xmap") not in rules


def test_the_old_mesh_function_entered_in_a_method_is_with_mesh_only():
    rules = _rules(MAPS_FOR_THE_MESH)
    assert (7, "with-mesh") in rules and (7, "experimental-sharding-names") not in rules
    assert (6, "experimental-sharding-names") in rules


def test_maps_that_also_gives_xmap_keeps_the_xmap_finding():
    source = MAPS_FOR_THE_MESH + "\nf = maps.xmap(g, in_axes=['i'], out_axes=['i'])\n"
    assert (2, "xmap") in _rules(source)


# ------------------------------------------------------------------ pjit through a wrapper of the script's own

NAMED_WRAPPER = """\
from jax.experimental.pjit import pjit

class Loop:
    def build(self, step, spec):
        self.step = self._compile(step, in_axis_resources=spec, out_axis_resources=None)

    def _compile(self, fn, *, in_axis_resources, out_axis_resources):
        return pjit(fn, in_axis_resources=in_axis_resources, out_axis_resources=out_axis_resources)
"""


def test_a_wrapper_taking_the_old_keywords_by_name_is_said_once_at_its_pjit():
    rules = [(line, rule) for line, rule in _rules(NAMED_WRAPPER) if rule == "pjit"]
    assert rules == [(8, "pjit")]


def test_a_wrapper_passing_kwargs_on_leaves_a_finding_at_each_call():
    source = NAMED_WRAPPER.replace("def _compile(self, fn, *, in_axis_resources, out_axis_resources):",
                                   "def _compile(self, fn, **kwargs):").replace(
        "pjit(fn, in_axis_resources=in_axis_resources, out_axis_resources=out_axis_resources)", "pjit(fn, **kwargs)")
    rules = [(line, rule) for line, rule in _rules(source) if rule == "pjit"]
    assert rules == [(5, "pjit"), (8, "pjit")]


# ------------------------------------------------------------------ [0] of a name before pmap's output rebinds it

BOUND_BEFORE_THE_STEP = MULTI_LINE_PMAP + """\

weights = make_weights()
moments = init_moments(weights[0])
for rows in loader:
    weights, err, size = update(config, weights, rows)
    print(err[0])
"""


def test_first_entry_of_a_name_not_yet_bound_to_pmap_output_is_no_device_copy():
    rules = _rules(BOUND_BEFORE_THE_STEP)
    assert (12, "jax-utils-replicate") not in rules and (15, "jax-utils-replicate") in rules


def test_first_entry_after_the_step_output_is_device_zero():
    source = BOUND_BEFORE_THE_STEP + "final = weights[0]\n"
    assert (16, "jax-utils-replicate") in _rules(source)
