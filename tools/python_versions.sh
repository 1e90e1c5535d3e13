#!/usr/bin/env bash
# `make python-versions`: for each Python version given (default 3.12 3.13), a venv in
# build/python-X.Y/ with the course's pins, then nbval on notebooks 00 and 08 with it.
# The interpreter comes from pyenv (`pyenv prefix X.Y`), else from `pythonX.Y` on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- 3.12 3.13
for v in "$@"; do
  start=$SECONDS
  prefix=$(pyenv prefix "$v" 2>/dev/null || true)
  python=${prefix:+$prefix/bin/python}
  python=${python:-$(command -v "python$v" || true)}
  if [ -z "$python" ] || [ ! -x "$python" ]; then
    echo "python-versions: no Python $v (pyenv install $v, or put python$v on PATH)" >&2; exit 2
  fi
  venv=build/python-$v
  echo "== Python $v ($python): installing the pins into $venv"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
  "${pip[@]}" --upgrade pip
  "${pip[@]}" -r requirements.txt -c requirements-lock.txt
  "${pip[@]}" --no-deps -e .
  echo "== Python $v: nbval on notebooks 00 and 08"
  "$venv/bin/python" -m pytest -p no:xdist -q notebooks/00_fake_devices.ipynb notebooks/08_real_multiprocess.ipynb
  echo "== Python $v: passed in $((SECONDS - start)) s"
done
