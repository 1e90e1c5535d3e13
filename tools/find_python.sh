#!/usr/bin/env bash
# Print the path of a Python the course can use (3.12 or newer, with venv and ensurepip), or say in
# one line on stderr what to install and exit 2. The Makefile calls it when PYTHON is not given.
#   tools/find_python.sh            # search: python3.12, python3.13, python3 on PATH, then pyenv's
#   tools/find_python.sh --other P  # another suitable Python, of a different minor version than P
# A name on PATH counts only if it runs: pyenv's shims answer "command not found" for a version
# that is installed but not selected. 3.12 comes first: a host process that imports jax and runs
# one jitted op started 7-12% faster on 3.12 than on 3.13 here (python -m benchmarks.jax_floor),
# and every host of every real-process run pays that start.
set -uo pipefail
MIN_MINOR=12  # jax 0.11 dropped Python 3.11

minor_of() {  # PYTHON -> its minor version, if it is 3.12+ and can make a venv; else nothing
  "$1" -c "import sys, venv, ensurepip
ok = sys.version_info[:2] >= (3, $MIN_MINOR)
print(sys.version_info[1] if ok else '')" 2>/dev/null
}

candidates() {
  for name in python3.12 python3.13 python3; do
    command -v "$name" 2>/dev/null
  done
  local root
  root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
  # pyenv's installed versions, oldest first (those before 3.12 are passed over)
  ls -d "$root"/versions/3.*/bin/python 2>/dev/null | sort -V
}

avoid_minor=""
if [ "${1:-}" = "--other" ]; then
  avoid_minor=$(minor_of "$2")
fi
while read -r python; do
  [ -n "$python" ] && [ -x "$python" ] || continue
  minor=$(minor_of "$python")
  [ -n "$minor" ] && [ "$minor" != "$avoid_minor" ] || continue
  echo "$python"
  exit 0
done < <(candidates)

if [ -n "$avoid_minor" ]; then
  echo "no second Python 3.$MIN_MINOR+ besides 3.$avoid_minor (tried python3.12, python3.13, python3 and pyenv's versions): install one, e.g. pyenv install 3.13" >&2
else
  echo "no Python 3.$MIN_MINOR or newer found (tried python3.12, python3.13, python3 and pyenv's versions; each needs venv and ensurepip): install one (apt-get install python3.12-venv, pyenv install 3.12, or python.org), or give its path: make PYTHON=/path/to/python3.12 ..." >&2
fi
exit 2
