"""Committed notebooks are executed top to bottom, error-free, portable, and built from src/."""
import json
import re

import jupytext
import pytest

from tools.nbrun import NOTEBOOKS, course_notebooks, exercise_id

NOTEBOOK_PATHS = course_notebooks()
ids = [p.name for p in NOTEBOOK_PATHS]
DEVELOPER_PATHS = re.compile(r"(/work/|/home/\w+|/root/|/Users/\w+|[A-Z]:\\\\Users)")


def test_there_are_notebooks():
    assert NOTEBOOK_PATHS, "no notebooks/NN_*.ipynb found"


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=ids)
def test_executed_in_order_without_errors(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    counts = [c.get("execution_count") for c in code]
    assert counts == list(range(1, len(code) + 1)), f"execution counts {counts}: rebuild with make notebooks"
    errors = [o for c in code for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors, f"error outputs: {[e['ename'] for e in errors]}"


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=ids)
def test_kernelspec_title_and_no_developer_paths(path):
    text = path.read_text()
    nb = json.loads(text)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    first = nb["cells"][0]
    assert first["cell_type"] == "markdown" and first["source"][0].startswith("# ")
    assert not DEVELOPER_PATHS.search(text), f"a developer's path leaked: {DEVELOPER_PATHS.search(text)[0]}"


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=ids)
def test_matches_its_myst_source(path):
    source = NOTEBOOKS / "src" / (path.stem + ".md")
    assert source.exists(), f"{source.name} is missing: notebooks are built from notebooks/src"
    expected = jupytext.read(source)
    actual = jupytext.read(path)
    assert [(c.cell_type, c.source) for c in actual.cells] == [(c.cell_type, c.source) for c in expected.cells], (
        f"{path.name} differs from src/{source.name}: run make notebooks NB={path.name[:2]}"
    )


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=ids)
def test_every_exercise_cell_is_followed_by_its_check(path):
    nb = jupytext.read(path)
    cells = nb.cells
    for i, cell in enumerate(cells):
        ex_id = exercise_id(cell)
        if "exercise" in cell.metadata.get("tags", []):
            assert ex_id, f"cell {i} is tagged exercise but has no exercise-NN.K tag"
            follower = cells[i + 1].source
            assert f'check("{ex_id}"' in follower, f"the cell after exercise {ex_id} must call check(\"{ex_id}\", ...)"
