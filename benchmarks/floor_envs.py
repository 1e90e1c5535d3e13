"""The environments section 12 compares the course's floor with: the course as it was at an earlier commit.

jax imports etils and filelock when they are installed (its path and compilation-cache modules), about
30 ms of every start here, so a bare venv with jax alone starts faster than any course environment on
the same pin. Like is compared with like only when the other environment holds the same packages:
the lock of that commit, installed with the project itself (editable, as `make venv` does).

    python -m benchmarks.floor_envs                 # build what is missing, print each env's python
    python -m benchmarks.floor_envs --rev REV --python /path/to/python3.11

Each environment is the venv `build/floor/course-<commit>-py<X.Y>/` (that commit's tree in its `src/`);
a built one is reused.
"""
from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOOR_DIR = ROOT / "build" / "floor"
LAST_ON_JAX_0_10_2 = "be78720^"  # be78720 moved the pins to jax 0.12.0.1


def short_commit(rev: str) -> str:
    try:
        return git("rev-parse", "--short", "--verify", f"{rev}^{{commit}}").decode().strip()
    except subprocess.CalledProcessError:
        raise SystemExit(f"floor_envs: this clone has no commit {rev} (a shallow clone? fetch its history)")


def git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True).stdout


def python_minor(python: str) -> str | None:
    """'3.11' for a Python that runs and can make a venv, else None."""
    done = subprocess.run([python, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def default_pythons() -> list[str]:
    """Python 3.11 (what the course ran on with jax 0.10.2) and this venv's Python (same-Python row)."""
    found = [sys.executable]
    for name in ("python3.11", *sorted(map(str, Path.home().glob(".pyenv/versions/3.11*/bin/python")))):
        path = shutil.which(name)  # a name on PATH, or a full path that is executable
        if path and python_minor(path) == "3.11":
            return [path, *found]
    print("floor_envs: no Python 3.11 found (python3.11 on PATH or pyenv's): only the same-Python row",
          file=sys.stderr)
    return found


def build(rev: str, python: str) -> Path:
    """The venv of the course at REV on PYTHON (built once), returned as its python's path."""
    minor = python_minor(python)
    if minor is None:
        raise SystemExit(f"floor_envs: {python} does not run or cannot make a venv")
    commit = short_commit(rev)
    env = FLOOR_DIR / f"course-{commit}-py{minor}"
    env_python = env / "bin" / "python"
    if (env / ".built").exists():
        return env_python
    shutil.rmtree(env, ignore_errors=True)
    print(f"floor_envs: building {env.relative_to(ROOT)} (the lock of {commit} on Python {minor})",
          file=sys.stderr)
    subprocess.run([python, "-m", "venv", str(env)], check=True)
    source = env / "src"
    with tarfile.open(fileobj=io.BytesIO(git("archive", commit))) as archive:
        archive.extractall(source, filter="data")
    uv = [str(Path(sys.executable).parent / "uv"), "pip", "install", "--quiet", "--compile-bytecode",
          "--python", str(env_python)]
    subprocess.run([*uv, "-r", str(source / "requirements-lock.txt")], check=True)
    subprocess.run([*uv, "--no-deps", "-e", str(source)], check=True)
    (env / ".built").touch()
    return env_python


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rev", default=LAST_ON_JAX_0_10_2, help="the commit whose lock is installed")
    p.add_argument("--python", nargs="*", help="Pythons to build it on (default: 3.11 and this one)")
    args = p.parse_args(argv)
    for python in args.python or default_pythons():
        print(build(args.rev, python))
    return 0


if __name__ == "__main__":
    sys.exit(main())
