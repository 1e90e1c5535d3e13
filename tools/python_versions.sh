#!/usr/bin/env bash
# `make python-versions`: for each Python given (a version such as 3.13, or an interpreter's path;
# default 3.12 3.13), a venv in build/python-X.Y/ with the course's pins, then nbval on notebooks
# 00 and 08 with it. A version's interpreter comes from pyenv (`pyenv prefix X.Y`), else from
# `pythonX.Y` on PATH. The pins are installed with the course venv's uv when there is one (seconds),
# else with pip, their bytecode compiled either way (every kernel and host reads it instead of
# compiling jax again). tests/test_python_versions.py runs it on the Python the course venv does not use.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- 3.12 3.13
for wanted in "$@"; do
  start=$SECONDS
  if [ -x "$wanted" ] && [ ! -d "$wanted" ]; then
    python=$wanted
  else
    prefix=$(pyenv prefix "$wanted" 2>/dev/null || true)
    python=${prefix:+$prefix/bin/python}
    python=${python:-$(command -v "python$wanted" || true)}
  fi
  if [ -z "$python" ] || [ ! -x "$python" ]; then
    echo "python-versions: no Python $wanted (pyenv install $wanted, or put python$wanted on PATH)" >&2; exit 2
  fi
  v=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  venv=build/python-$v
  echo "== Python $v ($python): installing the pins into $venv"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  if [ -x .venv/bin/uv ]; then
    install=(.venv/bin/uv pip install --quiet --compile-bytecode --python "$venv/bin/python")
  else
    install=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
  fi
  "${install[@]}" -r requirements.txt -c requirements-lock.txt
  "${install[@]}" --no-deps -e .
  echo "== Python $v: nbval on notebooks 00 and 08"
  "$venv/bin/python" -m pytest -p no:xdist -q notebooks/00_fake_devices.ipynb notebooks/08_real_multiprocess.ipynb
  echo "== Python $v: passed in $((SECONDS - start)) s"
done
