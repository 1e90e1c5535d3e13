"""Ratios between two benchmark runs (`make bench-compare A B`).

    python -m benchmarks.compare benchmarks/results/OLD.json benchmarks/results/NEW.json
    python -m benchmarks.compare OLD NEW          # stamps, looked up in benchmarks/results/

For every timing both runs measured: median in A, median in B, and B / A (below 1: B is
faster). Timings only one run has are listed after the table.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/compare.py`
    sys.path.insert(0, str(ROOT))

import pyperf  # noqa: E402

from benchmarks.measure import RESULTS  # noqa: E402
from benchmarks.tables import fmt_s, md_table  # noqa: E402


def resolve(name: str) -> Path:
    """A results file from a path or a bare stamp; SystemExit naming the choices if missing."""
    for candidate in (Path(name), RESULTS / name, RESULTS / f"{name}.json"):
        if candidate.is_file():
            return candidate
    known = sorted(p.name for p in RESULTS.glob("*.json") if not p.name.endswith(".report.json"))
    raise SystemExit(f"bench-compare: no results file {name!r}; in {RESULTS.relative_to(ROOT)}: "
                     + (", ".join(known) or "none yet (run make bench)"))


def medians(path: Path) -> dict[str, float]:
    """Median of every benchmark in a pyperf suite file, by name."""
    return {b.get_name(): b.median() for b in pyperf.BenchmarkSuite.load(str(path)).get_benchmarks()}


def comparison(a: dict[str, float], b: dict[str, float], a_label: str, b_label: str) -> str:
    """A markdown table of B / A for the shared names, then the names only one side has."""
    shared = [name for name in a if name in b]
    rows = [[name, fmt_s(a[name]), fmt_s(b[name]), f"{b[name] / a[name]:.2f}×"] for name in shared]
    text = md_table(["timing", f"A: {a_label}", f"B: {b_label}", "B / A"], rows, "lrrr")
    for label, only in ((a_label, [n for n in a if n not in b]),
                        (b_label, [n for n in b if n not in a])):
        if only:
            text += f"\n\nOnly in {label}: " + ", ".join(only)
    return text


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: make bench-compare A B   (two files or stamps in benchmarks/results/)",
              file=sys.stderr)
        return 2
    a, b = (resolve(x) for x in argv)
    print(comparison(medians(a), medians(b), a.stem, b.stem))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
