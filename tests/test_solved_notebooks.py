"""Each notebook, run with the reference solutions injected, passes every check it contains."""
import pytest

from tools.nbrun import check_lines, course_notebooks, execute, inject_solutions, read

NOTEBOOK_PATHS = course_notebooks()


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=[p.name for p in NOTEBOOK_PATHS])
def test_solved_notebook_passes_every_check(path):
    nb = read(path)
    injected = inject_solutions(nb)
    if not injected:
        pytest.skip(f"{path.name} has no exercises")
    execute(nb)
    verdicts = check_lines(nb)
    assert {i: verdicts.get(i) for i in injected} == {i: "✅" for i in injected}
