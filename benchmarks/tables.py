"""Text for the benchmark report: durations with a unit, pyperf benchmarks, ratios, markdown tables."""
from __future__ import annotations

def _unit(seconds: float) -> tuple[float, str]:
    if seconds >= 1:
        return 1.0, "s"
    if seconds >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def _num(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def fmt_s(seconds: float) -> str:
    """A duration with a readable unit: '12.3 s', '45.6 ms', '780 µs'."""
    scale, unit = _unit(seconds)
    return f"{_num(seconds * scale)} {unit}"


def fmt_bench(bench, spread: str = "range") -> str:
    """A pyperf benchmark as '12.3 s (11.9–13.0)': median, then min–max (or p95), one unit."""
    if bench is None:
        return "–"
    values = bench.get_values()
    scale, unit = _unit(bench.median())
    head = f"{_num(bench.median() * scale)} {unit}"
    if len(values) == 1:
        return head
    if spread == "p95":
        return f"{head} (p95 {_num(bench.percentile(95) * scale)})"
    return f"{head} ({_num(min(values) * scale)}–{_num(max(values) * scale)})"


def fmt_ratio(ratios: list[float]) -> str:
    """'1.90×' or '1.90× (1.80–2.00)': the median ratio and its range."""
    if not ratios:
        return "–"
    ordered = sorted(ratios)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    head = f"{median:.2f}×"
    return head if len(ratios) == 1 else f"{head} ({ordered[0]:.2f}–{ordered[-1]:.2f})"


def times_text(n: int) -> str:
    """'once', 'twice', '3 times'."""
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def md_table(headers: list[str], rows: list[list], align: str | None = None) -> str:
    """A GitHub markdown table; `align` is one letter per column: l, r or c."""
    align = align or "l" + "r" * (len(headers) - 1)
    marks = {"l": "---", "r": "---:", "c": ":---:"}
    cells = [[str(c).replace("|", "\\|").replace("\n", " ") for c in row] for row in rows]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)
