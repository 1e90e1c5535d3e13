"""The notebooks outside this repository, as on a hub or a laptop without a clone.

`pip wheel .` builds the course's wheel; a new virtual environment gets it and nothing else of
the course; one Part II notebook (13) and one Part IV notebook that launches real processes (16:
its two scripts come from the wheel, the migration tool reads one, the launcher runs both on 2
hosts), each copied alone into an empty folder, run top to bottom there on a kernel of that
environment. (08 proves the same path at twice 16's cost; every notebook finds the course's
files with the same `course_file`, checked on the wheel below.) To stay quick and offline,
the new environment reads the third-party packages (jax, flax, ipykernel, ...) from this
environment's site-packages through a path file; that path file adds the folder only, so this
environment's editable install of the helpers (a finder started by its own .pth) is not active
there, and the test checks that `helpers` is imported from the wheel. Costs: building the wheel
(an isolated build: pip fetches setuptools into its cache once), then the two notebooks' Run All.

Every notebook's first cell names the fix when the helpers are missing: checked on a Python
started without any site-packages.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tools.nbrun import course_notebooks, read

pytestmark = pytest.mark.multiprocess

REPO = Path(__file__).resolve().parents[1]
OUTSIDE = ("13_collective_puzzles", "16_port_your_own_script")  # Part II, Part IV (real processes)
KERNEL = "course-outside-repo"
RUN_ALL = """\
import sys
import nbformat
from nbclient import NotebookClient

nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=180, kernel_name=sys.argv[2], resources={"metadata": {"path": "."}}).execute()
print("ran", len([c for c in nb.cells if c.cell_type == "code"]), "code cells")
"""


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "COURSE_PROGRESS_FILE": "off", **extra}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                            "--no-deps", str(REPO), "-w", str(out)], capture_output=True, text=True,
                           timeout=300, env=_env())
    assert build.returncode == 0, build.stderr[-3000:]
    (found,) = out.glob("*.whl")
    return found


@pytest.fixture(scope="module")
def outside(wheel, tmp_path_factory) -> tuple[Path, dict]:
    """A new venv with the wheel installed; its python and the environment to run it in."""
    root = tmp_path_factory.mktemp("outside")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "third_party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--disable-pip-version-check", "--no-deps", str(wheel)], check=True, timeout=300)
    kernel = root / "jupyter" / "kernels" / KERNEL
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "the course, outside its repository", "language": "python"}))
    return python, _env(JUPYTER_PATH=str(root / "jupyter"))


def test_the_wheel_carries_the_scripts_and_transcripts(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = [p.relative_to(REPO / "notebooks").as_posix() for pattern in ("scripts/*.py", "transcripts/*.txt")
              for p in (REPO / "notebooks").glob(pattern)]
    missing = [w for w in wanted if f"helpers/course_files/{w}" not in names]
    assert wanted and not missing, f"the wheel lacks {missing}"


def test_the_helpers_come_from_the_wheel(outside, tmp_path):
    python, env = outside
    where = subprocess.run([str(python), "-c", "import helpers, helpers.files as f; "
                            "print(helpers.__file__); print(f.course_file('scripts/train_dp.py'))"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.split()
    venv = python.parents[1]
    assert all(Path(p).is_relative_to(venv) for p in where), f"not from the installed wheel: {where}"


@pytest.mark.parametrize("stem", OUTSIDE)
def test_a_notebook_alone_in_an_empty_folder_runs_top_to_bottom(outside, stem, tmp_path):
    python, env = outside
    notebook = tmp_path / f"{stem}.ipynb"
    notebook.write_bytes((REPO / "notebooks" / f"{stem}.ipynb").read_bytes())
    run = subprocess.run([str(python), "-c", RUN_ALL, notebook.name, KERNEL], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{stem} failed outside the repository:\n{run.stderr[-4000:]}"


@pytest.mark.parametrize("path", course_notebooks(), ids=lambda p: p.stem[:2])
def test_the_first_cell_names_the_fix_when_the_helpers_are_missing(path, tmp_path):
    first = next(c for c in read(path).cells if c.cell_type == "code").source
    bare = subprocess.run([sys.executable, "-I", "-S", "-c", first], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    last = bare.stderr.strip().splitlines()[-1] if bare.stderr.strip() else ""
    assert last.startswith("ModuleNotFoundError: the course's helpers are not installed here: run %pip install"), \
        f"{path.name}'s first cell, without the helpers, ends with: {last or bare.stdout[-300:]}"
