"""Each notebook, run with the reference solutions injected, passes every check it contains.

The run executes the cells an exercise needs (`tools.nbrun.solved_cells`): the set-up, the exercise
and check cells, and the cells that bind what they read, up to the last cell that touches an
exercise. Every other cell is the same code as in the untouched notebook, and nbval runs those
(the demos that start real processes, most of notebook 11's Orbax runs)."""
import re

import nbformat
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
    """The run keeps every exercise cell, every check, every use of an answer's name, and every
    reveal gated on a kept verdict; it ends with the last of them."""
    nb = read(next(p for p in NOTEBOOK_PATHS if p.name.startswith("11_")))
    kept_at = solved_cells(nb)
    kept = [nb.cells[n] for n in kept_at]
    cut = [c for n, c in enumerate(nb.cells) if n not in kept_at and c.cell_type == "code"]
    assert kept_at[-1] == last_exercise_cell(nb) and 'check("11.3", targets_for)' in kept[-1].source
    assert not any(re.search(r"targets_for|(?<![.\w])check\(", c.source) for c in cut)
    assert any("run(SCRIPT" in c.source for c in cut)  # the Orbax runs are left to nbval


def test_a_reveal_gated_on_a_verdict_stays_in_the_solved_run():
    nb = read(next(p for p in NOTEBOOK_PATHS if p.name.startswith("10_")))
    gated = [n for n, c in enumerate(nb.cells) if c.cell_type == "code" and re.search(r"\bif passed_10_\d", c.source)]
    assert gated and set(gated) <= set(solved_cells(nb))


def test_the_solved_run_keeps_what_an_exercise_reads_and_leaves_demos_to_nbval():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import jax\nfrom helpers.exercises import check"),   # 0: the set-up
        nbformat.v4.new_code_cell("demo = run(SCRIPT)\nprint(demo)"),                   # 1: read by nothing
        nbformat.v4.new_code_cell("mesh = jax.make_mesh((2, 4), ('host', 'device'))"),  # 2: read by 4
        nbformat.v4.new_code_cell("mesh = mesh"),                                       # 3: read by 4, reads 2
        nbformat.v4.new_code_cell("def helper():\n    return mesh.shape"),              # 4: read by 6
        nbformat.v4.new_markdown_cell("Your turn."),                                    # 5
        nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["exercise", "exercise-11.3"]}),  # 6
        nbformat.v4.new_code_cell("helper()\ncheck('11.3', targets_for)"),              # 7
        nbformat.v4.new_code_cell("after = run(SCRIPT)"),                                # 8: after the last check
    ])
    assert solved_cells(nb) == [0, 2, 3, 4, 5, 6, 7]


def test_a_name_the_cell_assigns_before_it_reads_it_needs_no_earlier_cell():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from helpers.exercises import check"),               # 0: the set-up
        nbformat.v4.new_code_cell("h = run(SCRIPT)\nstep = 1"),                        # 1: h, step: read by none
        nbformat.v4.new_code_cell("total = 0"),                                        # 2: read by 5's x = x + 1
        nbformat.v4.new_code_cell("targets_for = 1", metadata={"tags": ["exercise", "exercise-11.3"]}),  # 3
        nbformat.v4.new_code_cell("check('11.3', targets_for)"),                       # 4
        nbformat.v4.new_code_cell("for h in range(2):\n    print(h)\n"                 # 5: its own h and step,
                                  "print([step for step in range(3)], (lambda step: step)(2))\n"
                                  "total = total + targets_for"),                       #    total before it
    ])
    assert solved_cells(nb) == [0, 2, 3, 4, 5]
