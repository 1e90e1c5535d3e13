"""BENCHMARKS.md and the README's Benchmarks block, rendered from a run's results.

    python -m benchmarks.report benchmarks/results/STAMP.json   # re-render without measuring
    python -m benchmarks.report OLD.json NEW.json   # NEW's sections (a partial rerun) over OLD's

Holds the text helpers every section's `render` uses (tables, durations, spreads) and the
machine facts a report starts with. Each section module renders its own part.
"""
from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "BENCHMARKS.md"
README = ROOT / "README.md"
BLOCK_START, BLOCK_END = "<!-- bench:start -->", "<!-- bench:end -->"
BENCH_BUDGET_S = 600  # `make bench` itself: under 10 minutes on a 2-core laptop


# ---------------------------------------------------------------------------- text helpers

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


# --------------------------------------------------------------------------- machine facts

def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                  capture_output=True, text=True).stdout.strip()
        except OSError:
            pass
    return platform.processor() or platform.machine()


def machine_facts() -> dict[str, str]:
    """What the numbers were measured on (without importing JAX)."""
    import psutil

    physical = psutil.cpu_count(logical=False)
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    version = importlib.metadata.version
    return {
        "CPUs": f"{os.cpu_count()}" + (f" ({physical} physical)" if physical else ""),
        "CPU model": _cpu_model(),
        "memory": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "OS": platform.platform(),
        "Python": platform.python_version(),
        "jax / jaxlib": f"{version('jax')} / {version('jaxlib')}",
        "pyperf": version("pyperf"),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load average at start (1/5/15 min)": load,
    }


def load_at_start(facts: dict) -> float | None:
    """The 1-minute load average when the run started, or None where it was not measured."""
    text = facts["machine"].get("load average at start (1/5/15 min)", "n/a")
    return float(text.split("/")[0]) if text[:1].isdigit() else None


def shared_machine_note(facts: dict) -> str:
    """A sentence saying the times are inflated when the machine was busier than its CPUs."""
    load, cpus = load_at_start(facts), int(facts["machine"]["CPUs"].split()[0])
    if load is None or load <= cpus:
        return ""
    return (f"The machine was shared and busy while this ran (load average {load:.1f} on "
            f"{cpus} CPUs at the start), so every time here is inflated against a quiet "
            f"machine; ratios measured side by side are the figures to read.")


# ------------------------------------------------------------------------------ documents

def render_report(results, sections) -> str:
    """BENCHMARKS.md: the machine, then each section's own rendering (or why it is missing)."""
    facts = results.facts
    out = ["# Benchmarks", "",
           "Measured by `make bench` (`python -m benchmarks.run`) on the machine below; rerun it "
           "to measure yours. Repetition, warm-up and statistics are pyperf's; medians with "
           "their spread (min–max, or p95 where it says so). The raw results of this run are "
           f"`benchmarks/results/{facts.get('stamp', '?')}.json` (a pyperf suite) and its "
           "`.report.json`; `make bench-compare A B` compares two runs.", ""]
    out.append(md_table(["machine", ""], [[k, v] for k, v in facts["machine"].items()], "ll"))
    run_line = f"Flags: `{facts.get('flags') or '(none)'}`."
    duration = facts.get("duration")
    if duration is not None:
        run_line += (f" This run took {fmt_s(duration)} ({duration / 60:.1f} min; the budget for "
                     f"`make bench` is {BENCH_BUDGET_S // 60} min).")
    note = shared_machine_note(facts)
    out += ["", run_line + (" " + note if note else "")]
    if facts.get("spent"):
        out += ["", "Where the time went: " + ", ".join(
            f"section {n} {fmt_s(t)}" for n, t in sorted(facts["spent"].items())) + "."]
    numbers = {s.KEY: n for n, s in enumerate(sections, start=1)}
    later_runs = facts.get("later_runs", [])
    for i, later in enumerate(later_runs):  # a section shows the last run that measured it
        kept = set(later["sections"]).difference(*(r["sections"] for r in later_runs[i + 1:]))
        if not kept:
            continue
        which = ", ".join(str(numbers[k]) for k in sorted(kept, key=numbers.get))
        spent = ", ".join(f"section {n} {fmt_s(t)}" for n, t in sorted(later["spent"].items()))
        plural = len(kept) > 1
        out += ["", f"Section{'s' if plural else ''} {which} come{'' if plural else 's'} from a "
                    f"later run on the same machine, "
                    f"`benchmarks/results/{later['stamp']}.json` ({later['date']}, flags "
                    f"`{later['flags'] or '(none)'}`, load average at start {later['load']}); "
                    f"there the time went: {spent}."]
    for number, section in enumerate(sections, start=1):
        out += ["", f"## {number}. {section.TITLE}", ""]
        if section.KEY in results.sections:
            out.append(section.render(results))
        else:
            why = facts.get("skipped", {}).get(section.KEY, "skipped")
            out.append(f"_Not measured in this run ({why})._")
    return "\n".join(out) + "\n"


def readme_block(results) -> str:
    """The README's short Benchmarks section: the budgets next to the measured values."""
    from benchmarks import learner

    facts = results.facts
    rows = learner.readme_rows(results)
    duration = facts.get("duration")
    if duration is not None:
        rows.append(["`make bench`" + (" (`--quick`)" if facts.get("quick") else ""),
                     f"{BENCH_BUDGET_S // 60} min",
                     f"{duration / 60:.1f} min {'✅' if duration <= BENCH_BUDGET_S else '⚠️ over'}"])
    when = facts["machine"]["date"][:10]
    return "\n".join([
        BLOCK_START, "## Benchmarks", "",
        "`make bench` measures the course on your machine and writes "
        "[BENCHMARKS.md](BENCHMARKS.md): how long each notebook's Run All takes, the test "
        "suite, the explorer's redraw, the launcher, and what the course teaches (one train "
        "step written six ways and checked against each other, assembling global batches, "
        "Orbax checkpoints, Grain loaders, flat and hierarchical all-reduces). "
        f"Last measured on {facts['machine']['CPUs'].split()[0]} CPUs, {when}"
        + (", quick run" if facts.get("quick") else "")
        + (f", while the machine was shared and busy (load average {load_at_start(facts):.1f}"
           "): the times are inflated" if shared_machine_note(facts) else "")
        + ". Budgets come from each "
        "notebook's front matter.", "",
        md_table(["what", "budget", "measured (median)"], rows, "lrr"), BLOCK_END])


def update_readme(text: str, block: str) -> str:
    """Replace the marked block, or insert it before '## For contributors' (else at the end)."""
    pattern = re.compile(re.escape(BLOCK_START) + r".*?" + re.escape(BLOCK_END), re.S)
    if pattern.search(text):
        return pattern.sub(lambda _: block, text, count=1)
    anchor = "## For contributors"
    if anchor in text:
        return text.replace(anchor, block + "\n\n" + anchor, 1)
    return text.rstrip("\n") + "\n\n" + block + "\n"


def main(argv: list[str]) -> int:
    """Re-render BENCHMARKS.md (and the README block) from a saved run, or several overlaid."""
    from benchmarks.measure import Results, overlay
    from benchmarks.run import SECTIONS

    if not argv:
        print("usage: python -m benchmarks.report benchmarks/results/STAMP.json [LATER.json ...]",
              file=sys.stderr)
        return 2
    results = Results.load(Path(argv[0]))
    for later in argv[1:]:
        results = overlay(results, Results.load(Path(later)))
    OUTPUT.write_text(render_report(results, SECTIONS), encoding="utf-8")
    if "learner" in results.sections and not results.sections["learner"].get("selection"):
        README.write_text(update_readme(README.read_text(encoding="utf-8"),
                                        readme_block(results)), encoding="utf-8")
    print(f"wrote {OUTPUT.name} from {', '.join(argv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
