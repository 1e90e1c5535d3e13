"""requirements.txt (what make venv and CI install) and environment.yml (conda/Binder) must agree;
the installer make venv uses is pinned."""
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"requirements.txt: {line!r} is not pinned with =="
            pins[_normalize(name)] = version
    return pins


def conda_pins() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pins = {}
    for dep in env["dependencies"]:
        if isinstance(dep, str) and "==" in dep:
            name, version = dep.split("==")
            pins[_normalize(name)] = version
    return pins


def test_every_pip_pin_is_in_environment_yml_with_the_same_version():
    assert pip_pins() == conda_pins()


def test_jax_and_jaxlib_are_pinned_to_the_course_version():
    pins = pip_pins()
    assert pins["jax"] == pins["jaxlib"] == "0.12.0.1"


def test_environment_yml_asks_for_python_3_12_and_installs_the_helpers():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    assert ">=3.12" in python  # jax 0.11 dropped Python 3.11
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-e ." in pip_section


def test_the_lock_agrees_with_the_direct_pins():
    lock = {}
    for line in (ROOT / "requirements-lock.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.strip().split("==")
            lock[_normalize(name)] = version
    for name, version in pip_pins().items():
        assert lock.get(name) == version, f"{name}: requirements.txt {version}, lock {lock.get(name)}"


def test_the_installed_jax_is_the_pinned_one():
    import jax
    import jaxlib

    assert jax.__version__ == jaxlib.__version__ == pip_pins()["jax"]


def test_the_installer_make_venv_uses_is_pinned_and_installed():
    """requirements-bootstrap.txt pins uv exactly, and the .venv that runs this test has that uv."""
    import subprocess
    import sys

    pins = [line.split("#")[0].strip() for line in (ROOT / "requirements-bootstrap.txt").read_text().splitlines()]
    assert [p for p in pins if p] == [f"uv=={pins[-1].partition('==')[2]}"], pins
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        import pytest
        pytest.skip(f"{sys.executable} is not a venv made by make venv (no uv beside it)")
    version = subprocess.run([str(uv), "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    assert f"uv=={version}" == pins[-1]
