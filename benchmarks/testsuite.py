"""Section 2: the test suite's wall time, as `make test` runs it, and its slowest tests.

Measured apart, by `make bench-tests` (`python -m benchmarks.run --only tests`): one run takes
as long as a whole `make test`, which would not fit the 10 minutes of `make bench`.
"""
from __future__ import annotations

import re
import subprocess
import sys
import time

from benchmarks.measure import ROOT, log, record
from benchmarks.tables import fmt_bench, fmt_s, md_table, times_text

KEY = "tests"
TITLE = "The test suite"
WORKERS = 3  # the Makefile's PYTEST_WORKERS
WHOLE = "whole suite (`make test` without the install)"
RUNS = {WHOLE: ["--durations=8"], "nbval alone (`notebooks/`)": ["notebooks/"]}
BUDGET_S = 600  # a warm `make test`, so that .ci/run (a fresh clone: install and a cold compile cache) stays under 12 min


def bench_name(label: str) -> str:
    return f"tests/{label}"


def whole_suite_seconds(results) -> float | None:
    """The median wall time of the whole suite, if this report has it."""
    name = bench_name(WHOLE)
    return results.median(name) if name in results.benchmarks else None


def pytest_summary(output: str) -> str:
    """'2 failed, 751 passed' from pytest's last summary line."""
    lines = [l.strip("= ").strip() for l in output.splitlines()
             if re.search(r"\b(passed|failed|error|skipped|no tests ran)\b", l) and " in " in l]
    return re.sub(r"\s+in\s+[\d.]+s.*$", "", lines[-1]) if lines else "no summary"


def slowest_tests(output: str) -> list[tuple[float, str]]:
    """pytest --durations lines: [(seconds, 'call tests/x.py::test_y'), ...]."""
    found = re.findall(r"^([\d.]+)s (call|setup|teardown)\s+(.+?)\s*$", output, re.M)
    return [(float(t), f"{phase} {name}") for t, phase, name in found]


def measure(results, opts) -> None:
    base = [sys.executable, "-m", "pytest", "-n", str(WORKERS), "--dist", "loadgroup", "--no-loadscope-reorder", "-q"]
    data = {"workers": WORKERS, "runs": {}}
    for label, extra in RUNS.items():
        cmd, times, summary = base + extra, [], ""
        for r in range(opts.test_repeats):
            t = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            times.append(time.perf_counter() - t)
            summary = pytest_summary(proc.stdout + proc.stderr)
            log(f"tests: {label} run {r + 1}/{opts.test_repeats}: {fmt_s(times[-1])} ({summary})")
        results.add(record(bench_name(label), times))
        data["runs"][label] = {
            "summary": summary, "slowest": slowest_tests(proc.stdout),
            "broken": re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M),
            "cmd": " ".join(["python", *cmd[1:]])}
    results.sections[KEY] = data


def _run_order(label: str) -> int:
    """RUNS' order (the whole suite first), whatever order a saved run keeps them in."""
    return list(RUNS).index(label) if label in RUNS else len(RUNS)


def render(results) -> str:
    data = results.sections[KEY]
    runs = {label: data["runs"][label] for label in sorted(data["runs"], key=_run_order)}
    rows = [[label, f"`{d['cmd']}`", fmt_bench(results.benchmarks[bench_name(label)]),
             d["summary"]] for label, d in runs.items()]
    table = md_table(["run", "command", "wall time", "outcome"], rows, "llrl")
    broken = sorted({b for d in runs.values() for b in d["broken"]})
    if broken:
        table += ("\n\nFailed or errored at the time: " + ", ".join(f"`{b}`" for b in broken[:6])
                  + (f" and {len(broken) - 6} more" if len(broken) > 6 else "") + ".")
    slowest = [s for d in runs.values() for s in d["slowest"]]
    if slowest:
        table += "\n\nSlowest tests of the whole suite (one worker's time each):\n\n" + md_table(
            ["test", "time"], [[f"`{name}`", fmt_s(t)] for t, name in slowest[:8]], "lr")
    medians = [results.median(bench_name(label)) for label in runs]
    n = len(results.values(bench_name(next(iter(runs)))))  # the whole suite's, when measured
    prose = (
        f"Wall time of the test suite with the project's pytest configuration and "
        f"{data['workers']} xdist workers (`--dist loadgroup`, as `make test` runs it), "
        f"measured {times_text(n)}"
        + (" (one run each, as long as a `make test`; `python -m benchmarks.run --only tests "
           "--test-repeats 3` gives a spread)" if n == 1 else "")
        + ". The whole suite runs every notebook once under nbval (against the committed outputs) "
          "and once more with every exercise solved (the cells its exercises need), plus the unit tests"
        + (f"; here it takes {medians[0] / medians[1]:.1f}× the nbval run"
           if len(medians) == 2 else "")
        + f". The budget of a warm `make test` is {BUDGET_S // 60} min. With {data['workers']} workers "
          "on 2 cores, notebooks execute side by side, each slower than alone in section 1. The "
          "outcome column is the suite's verdict at the time; a failing test does not stop the "
          "timing."
    )
    return table + "\n\n" + prose
