"""Each notebook, run with the reference solutions injected, passes every check it contains.

The run executes the cells an exercise needs (`tools.nbrun.solved_cells`): the set-up, the exercise
and check cells, and the cells that bind what they read, up to the last cell that touches an
exercise. Every other cell is the same code as in the untouched notebook, and nbval runs those
(the demos that start real processes, most of notebook 11's Orbax runs)."""
import re

import pytest

from tools.nbrun import check_lines, course_notebooks, execute, inject_solutions, last_exercise_cell, read, solved_cells

NOTEBOOK_PATHS = course_notebooks()


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=[p.name for p in NOTEBOOK_PATHS])
def test_solved_notebook_passes_every_check(path):
    nb = read(path)
    injected = inject_solutions(nb)
    if not injected:
        pytest.skip(f"{path.name} has no exercises")
    nb.cells = [nb.cells[n] for n in solved_cells(nb)]
    execute(nb)
    verdicts = check_lines(nb)
    assert {i: verdicts.get(i) for i in injected} == {i: "✅" for i in injected}


def test_the_solved_run_keeps_every_check_and_reveal():
    """The cut is after every exercise cell, every check, every use of an answer's name, and every
    reveal gated on a kept verdict."""
    nb = read(next(p for p in NOTEBOOK_PATHS if p.name.startswith("11_")))
    last = last_exercise_cell(nb)
    kept, cut = nb.cells[: last + 1], nb.cells[last + 1:]
    assert 'check("11.3", targets_for)' in kept[-1].source
    assert not any(re.search(r"targets_for|(?<![.\w])check\(", c.source) for c in cut if c.cell_type == "code")
    assert any("run(SCRIPT" in c.source for c in cut)  # the Orbax runs are left to nbval


def test_a_reveal_gated_on_a_verdict_stays_in_the_solved_run():
    nb = read(next(p for p in NOTEBOOK_PATHS if p.name.startswith("10_")))
    gated = [n for n, c in enumerate(nb.cells) if c.cell_type == "code" and re.search(r"\bif passed_10_\d", c.source)]
    assert gated and max(gated) <= last_exercise_cell(nb)
