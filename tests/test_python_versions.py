"""The course on more than one Python (issue 48): tools/find_python.sh picks a 3.12+ interpreter or
says in one line what to install, and on the 3.12+ Python the course venv does not use, the pins
install and notebooks 00 and 08 pass nbval (tools/python_versions.sh, as `make python-versions`)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIND = ROOT / "tools" / "find_python.sh"


def _find(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(FIND), *args], capture_output=True, text=True, timeout=60, env=env)


def test_the_course_runs_on_python_3_12_or_newer():
    assert sys.version_info >= (3, 12), f"the course venv has Python {sys.version.split()[0]}; jax 0.11 dropped 3.11"


def test_find_python_gives_a_3_12_or_newer_interpreter_that_runs():
    found = _find()
    assert found.returncode == 0, found.stderr
    version = subprocess.run([found.stdout.strip(), "-c", "import sys; print(sys.version_info[:2] >= (3, 12))"],
                             capture_output=True, text=True, check=True).stdout
    assert version == "True\n"


def test_with_no_suitable_python_it_says_what_to_install_in_one_line(tmp_path):
    bin_ = tmp_path / "bin"  # a PATH with the shell tools and one Python, a 3.11
    bin_.mkdir()
    for tool in ("bash", "ls", "sort"):
        (bin_ / tool).symlink_to(subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip())
    old = bin_ / "python3"
    old.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'print(\"\")'\n")  # answers as a 3.11 does
    old.chmod(0o755)
    env = {"PATH": str(bin_), "HOME": str(tmp_path), "PYENV_ROOT": str(tmp_path / "none")}
    found = _find(env=env)
    assert found.returncode == 2 and found.stdout == ""
    assert found.stderr.count("\n") == 1 and found.stderr.startswith("no Python 3.12 or newer found"), found.stderr
    assert "make PYTHON=/path/to/python3.12" in found.stderr


@pytest.mark.multiprocess
def test_notebooks_00_and_08_pass_on_the_other_python():
    other = _find("--other", sys.executable)
    if other.returncode != 0:
        pytest.skip(other.stderr.strip())
    run = subprocess.run([str(ROOT / "tools" / "python_versions.sh"), other.stdout.strip()], cwd=ROOT,
                         capture_output=True, text=True, timeout=600,
                         env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout and "failed" not in run.stdout, run.stdout[-2000:]
