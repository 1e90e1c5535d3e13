"""A module whose pmap is written in the launcher that imports it (helpers.migrate.importers): its collectives over
the launcher's axis are pmap's."""
from pathlib import Path

from helpers.migrate import migrate

AGENT = """\
import jax


class Agent:
    def update(self, params, batch):
        grads = jax.grad(loss_fn)(params, batch)
        grads = jax.lax.pmean(grads, "devices")
        count = jax.lax.psum(batch.shape[0], "devices")
        return params, grads, count
"""

LAUNCHER = """\
import jax
from lab.agents.a2c import Agent

agent = Agent()
update = jax.pmap(agent.update, axis_name="devices")
"""


def _project(root: Path, launcher: bool) -> Path:
    package = root / "lab"
    (package / "agents" / "a2c").mkdir(parents=True)
    for folder in (package, package / "agents", package / "agents" / "a2c"):
        (folder / "__init__.py").write_text("")
    (package / "agents" / "a2c" / "__init__.py").write_text("from lab.agents.a2c.agent import Agent\n")
    agent = package / "agents" / "a2c" / "agent.py"
    agent.write_text(AGENT)
    if launcher:
        (package / "train.py").write_text(LAUNCHER)
    return agent


def _collectives(agent: Path) -> set[int]:
    return {f.line for f in migrate(agent, show=False) if f.rule == "pmap-collective"}


def test_collectives_over_the_axis_of_a_launcher_that_imports_the_module_are_pmaps(tmp_path):
    assert _collectives(_project(tmp_path, launcher=True)) == {7, 8}


def test_without_the_launcher_the_axis_is_nobodys(tmp_path):
    assert _collectives(_project(tmp_path, launcher=False)) == set()
