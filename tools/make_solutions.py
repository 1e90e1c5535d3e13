"""Write solved, executed copies of every notebook into solutions/ (git-ignored), for instructors."""
import sys
import time
from pathlib import Path

import nbformat

from helpers.nbrun import check_lines, course_notebooks, execute, inject_solutions, read

OUT = Path(__file__).resolve().parents[1] / "solutions"


def main() -> int:
    OUT.mkdir(exist_ok=True)
    failures = []
    for path in course_notebooks():
        start = time.perf_counter()
        nb = read(path)
        injected = inject_solutions(nb)
        execute(nb)
        verdicts = check_lines(nb)
        passed = [i for i in injected if verdicts.get(i) == "✅"]
        nbformat.write(nb, OUT / path.name)
        status = "ok" if len(passed) == len(injected) else "FAILED"
        print(f"{path.name:45s} {len(passed)}/{len(injected)} checks pass  {time.perf_counter() - start:5.1f} s  {status}")
        if status != "ok":
            failures.append(path.name)
    print(f"wrote {len(course_notebooks())} solved notebooks to {OUT.name}/")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
