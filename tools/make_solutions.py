"""Write solved, executed copies of every notebook into solutions/ (git-ignored), for instructors.

Prints one line per notebook; exits 1 if any notebook fails to run or any check does not pass.
"""
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python tools/NAME.py`: make `tools` importable
    sys.path.insert(0, str(ROOT))

from tools.nbrun import check_lines, course_notebooks, execute, inject_solutions, read  # noqa: E402

OUT = ROOT / "solutions"


def _reason(error: Exception) -> str:
    """One line: what went wrong (a failing cell's exception, or the error itself)."""
    name = getattr(error, "ename", None) or type(error).__name__
    value = getattr(error, "evalue", None)
    if value is None:
        value = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    lines = [line for line in str(value).strip().splitlines() if line.strip()]
    return f"{name}: {lines[-1] if lines else ''}".rstrip(": ")


def main() -> int:
    OUT.mkdir(exist_ok=True)
    failures = []
    notebooks = course_notebooks()
    for path in notebooks:
        start = time.perf_counter()
        nb = read(path)
        try:
            injected = inject_solutions(nb)
            execute(nb, quiet_kernel=True)
        except Exception as error:  # report it, and go on with the next notebook
            nbformat.write(nb, OUT / path.name)  # as far as it ran, to look at
            print(f"{path.name:45s} FAILED: {_reason(error)}", flush=True)
            failures.append(path.name)
            continue
        verdicts = check_lines(nb)
        passed = [i for i in injected if verdicts.get(i) == "✅"]
        nbformat.write(nb, OUT / path.name)
        status = "ok" if len(passed) == len(injected) else "FAILED"
        print(f"{path.name:45s} {len(passed)}/{len(injected)} checks pass  "
              f"{time.perf_counter() - start:5.1f} s  {status}", flush=True)
        if status != "ok":
            failures.append(path.name)
    print(f"wrote {len(notebooks)} solved notebooks to {OUT.name}/"
          + (f"; {len(failures)} failed: {', '.join(failures)}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
