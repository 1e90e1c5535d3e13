"""pmap and its collectives under a project's own names (helpers.migrate.aliases): in the script, and in a module of
its project (ferminet's `constants.pmap`)."""
from pathlib import Path

from helpers import migrate
from tests.migrate_support import rule_set, said

OWN = """\
import functools
import jax

AXIS = 'qmc'
pmap = functools.partial(jax.pmap, axis_name=AXIS)
pmean = functools.partial(jax.lax.pmean, axis_name=AXIS)


def step(params, batch):
    grads = jax.grad(loss_fn)(params, batch)
    grads = pmean(grads)
    loss = pmean(loss_fn(params, batch))
    return grads, loss


p_step = pmap(step)
grads, loss = p_step(params, batch)
print(loss[0])
"""


def test_a_name_bound_to_a_partial_of_pmap_or_a_collective_is_read_where_it_is_called():
    found = rule_set(OWN)
    assert {(16, "pmap"), (11, "pmap-collective"), (12, "pmap-collective"), (18, "jax-utils-replicate")} <= found
    assert "N times too large" in said(OWN, 11, "pmap-collective")  # the gradients: the trap
    assert "N times too large" not in said(OWN, 12, "pmap-collective")  # the loss: a rename


def test_without_the_alias_its_calls_are_nobodys():
    plain = OWN.replace("functools.partial(jax.pmap, axis_name=AXIS)", "make_pmap()").replace(
        "functools.partial(jax.lax.pmean, axis_name=AXIS)", "make_mean()")
    assert not {(16, "pmap"), (11, "pmap-collective"), (12, "pmap-collective")} & rule_set(plain)


CONSTANTS = """\
import functools
import jax
from mylib import utils as lib_utils

PMAP_AXIS_NAME = 'qmc_pmap_axis'
pmap = functools.partial(jax.pmap, axis_name=PMAP_AXIS_NAME)
pmean = functools.partial(lib_utils.pmean_if_pmap, axis_name=PMAP_AXIS_NAME)
"""

TRAIN = """\
import functools
import jax
from proj import constants
from mylib import optimizer as my_optim


def make_step(loss_fn):
    @functools.partial(constants.pmap, donate_argnums=(1,))
    def step(params, batch):
        grads = jax.grad(loss_fn)(params, batch)
        return constants.pmean(grads)
    return step


energy = constants.pmap(total_energy)
opt = my_optim.Optimizer(value_and_grad_func, pmap_axis_name=constants.PMAP_AXIS_NAME)
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "__init__.py").write_text("")
    (tmp_path / "proj" / "constants.py").write_text(CONSTANTS)
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    return script


def test_a_project_modules_pmap_collective_and_axis_constant_are_read_in_the_script(tmp_path):
    found = {(f.line, f.rule): f for f in migrate.migrate(_project(tmp_path), show=False)}
    assert {(8, "pmap"), (11, "pmap-collective"), (15, "pmap"), (16, "pmap-collective")} <= set(found)
    assert "qmc_pmap_axis" in found[8, "pmap"].does
    assert "N times too large" in found[11, "pmap-collective"].does  # pmean_if_pmap of gradients: the trap
    assert "named for gradients (or for an optimizer" in found[16, "pmap-collective"].does  # never just a rename


def test_the_same_script_without_its_project_says_none_of_it(tmp_path):
    (tmp_path / "alone").mkdir()
    script = tmp_path / "alone" / "train.py"
    script.write_text(TRAIN)
    found = {(f.line, f.rule): f for f in migrate.migrate(script, show=False)}
    assert not {(8, "pmap"), (11, "pmap-collective")} & set(found)
    assert "defined where the tool cannot read it" in found[15, "pmap"].does  # `constants.pmap(f)`: a pmap by its name alone
    assert "if this is a gradient" in found[16, "pmap-collective"].instead  # pmap_axis_name= by its keyword alone


UNREAD_PMAP = """\
import jax
import kfac_jax
from missing_pkg import utils

params = kfac_jax.utils.replicate_all_local_devices(params)
step = utils.pmap(make_step(), donate_argnums=1)
"""


def test_a_project_pmap_the_tool_cannot_read_still_makes_the_script_pmap_era(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(UNREAD_PMAP)
    found = {(f.line, f.rule) for f in migrate.migrate(script, show=False)}
    assert {(5, "jax-utils-replicate"), (6, "pmap")} <= found
    script.write_text(UNREAD_PMAP.replace("utils.pmap(make_step(), donate_argnums=1)", "utils.wrap(make_step())"))
    assert not {(5, "jax-utils-replicate"), (6, "pmap")} & {(f.line, f.rule) for f in migrate.migrate(script,
                                                                                                     show=False)}


OUT_OF_VIEW_QMC = """\
import jax
import kfac_jax
from missing_pkg import constants


@constants.pmap
def average(x):
    return x


opt = kfac_jax.Optimizer(
    value_and_grad_func=vg,
    multi_device=True,
    pmap_axis_name=constants.PMAP_AXIS_NAME,
)
"""


def test_a_project_pmap_decorator_multi_device_and_an_unread_pmap_axis_name_are_said(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(OUT_OF_VIEW_QMC)
    found = {(f.line, f.rule): f for f in migrate.migrate(script, show=False)}
    assert {(6, "pmap"), (13, "pmap"), (14, "pmap-collective")} <= set(found)
    assert "multi_device=False" in found[13, "pmap"].instead
    script.write_text(OUT_OF_VIEW_QMC.replace("@constants.pmap", "@constants.jit").replace("True", "False"))
    assert not {(6, "pmap"), (13, "pmap"), (14, "pmap-collective")} & {
        (f.line, f.rule) for f in migrate.migrate(script, show=False)}
