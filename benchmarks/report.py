"""BENCHMARKS.md and the README's Benchmarks block, rendered from a run's results.

    python -m benchmarks.report          # re-render as `make bench` does: the newest full run,
                                         # with the test suite of the newest run that has one
    python -m benchmarks.report benchmarks/results/STAMP.json   # one run, as it was
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

from benchmarks import learner, runs, testsuite
from benchmarks.measure import RESULTS, Results, overlay
from benchmarks.sections import SECTIONS
from benchmarks.tables import fmt_s, md_table

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "BENCHMARKS.md"
README = ROOT / "README.md"
BLOCK_START, BLOCK_END = "<!-- bench:start -->", "<!-- bench:end -->"
BENCH_BUDGET_S = 600  # `make bench` itself: under 10 minutes on a 2-core laptop


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


MACHINE_ORDER = ("CPUs", "CPU model", "memory", "OS", "Python", "jax / jaxlib", "pyperf", "date",
                 "load average at start (1/5/15 min)")  # machine_facts' keys, in table order


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

def commit_text(commit: str | None) -> str:
    """'commit `1a2b3c4`', or what to say for a run saved before commits were recorded."""
    return f"commit `{commit}`" if commit else "a commit it did not record"


def tests_number(sections) -> int | None:
    """The number of the test-suite section (the one `make bench-tests` measures)."""
    keys = [s.KEY for s in sections]
    return keys.index(runs.TESTS) + 1 if runs.TESTS in keys else None


def bench_seconds(facts: dict, sections) -> float | None:
    """How long the run took without the test suite, i.e. what `make bench` takes now."""
    duration = facts.get("duration")
    if duration is None:
        return None
    return duration - facts.get("spent", {}).get(str(tests_number(sections)), 0.0)


def _duration_line(facts: dict, sections) -> str:
    duration, bench = facts["duration"], bench_seconds(facts, sections)
    budget = f"the budget for `make bench` is {BENCH_BUDGET_S // 60} min"
    if bench == duration:
        return f"This run took {fmt_s(duration)} ({duration / 60:.1f} min; {budget})."
    return (f"This run took {fmt_s(duration)} ({duration / 60:.1f} min), "
            f"{fmt_s(duration - bench)} of it on the test suite (section "
            f"{tests_number(sections)}), which `make bench` now leaves to `make bench-tests`: "
            f"{fmt_s(bench)} ({bench / 60:.1f} min) without it; {budget}.")


def provenance(run: dict, facts: dict, number: int) -> str:
    """The line under a section's heading when it comes from another run than the report."""
    when = "after" if run["stamp"] > facts.get("stamp", "") else "before"
    differs = run.get("differs", {})
    where = ("on the same machine" if not differs else "where the machine differed from the "
             "one above: " + ", ".join(f"{k} {v}" for k, v in differs.items()))
    spent = run.get("spent", {}).get(str(number))
    return (f"_Measured by {runs.command(run['flags'])} on {run['date']} at "
            f"{commit_text(run.get('commit'))}, {when} the rest of this report, {where} "
            f"(load average at start {run['load']}); raw results "
            f"`benchmarks/results/{run['stamp']}.json`"
            + (f"; this section took {fmt_s(spent)}" if spent is not None else "") + "._")


def render_report(results, sections) -> str:
    """BENCHMARKS.md: the machine, then each section's own rendering (or why it is missing)."""
    facts = results.facts
    number = {s.KEY: n for n, s in enumerate(sections, start=1)}
    out = ["# Benchmarks", "",
           f"Measured by {runs.command(facts.get('flags', ''))} on "
           f"{facts['machine'].get('date', '?')} at {commit_text(facts.get('commit'))}, on the "
           "machine below; rerun it to measure yours. `make bench` measures every section but "
           "the test suite, which takes as long as `make test`: `make bench-tests` measures "
           "that one and adds it here, and a section measured by another run says so under its "
           "heading. Repetition, warm-up and statistics are pyperf's; medians with their "
           "spread (min–max, or p95 where it says so). The raw results of this run are "
           f"`benchmarks/results/{facts.get('stamp', '?')}.json` (a pyperf suite) and its "
           "`.report.json`; `make bench-compare A B` compares two runs.", ""]
    machine = sorted(facts["machine"].items(),  # saved runs keep them sorted by name
                     key=lambda kv: MACHINE_ORDER.index(kv[0]) if kv[0] in MACHINE_ORDER
                     else len(MACHINE_ORDER))
    out.append(md_table(["machine", ""], [[k, v] for k, v in machine], "ll"))
    run_line = f"Flags: `{facts.get('flags') or '(none)'}`."
    if facts.get("duration") is not None:
        run_line += " " + _duration_line(facts, sections)
    note = shared_machine_note(facts)
    out += ["", run_line + (" " + note if note else "")]
    if facts.get("spent"):
        out += ["", "Where the time went: " + ", ".join(
            f"section {n} {fmt_s(t)}" for n, t in sorted(facts["spent"].items())) + "."]
    shown_from = {key: run for run in facts.get("other_runs", []) for key in run["sections"]
                  if key in number}
    if shown_from:  # a section shows the last run that measured it
        keys = sorted(shown_from, key=number.get)
        out += ["", f"Section{'s' if len(keys) > 1 else ''} "
                    + ", ".join(str(number[k]) for k in keys)
                    + f" come{'' if len(keys) > 1 else 's'} from another run: see "
                    + ("their headings." if len(keys) > 1 else "its heading.")]
    for n, section in enumerate(sections, start=1):
        out += ["", f"## {n}. {section.TITLE}", ""]
        if section.KEY in shown_from:
            out += [provenance(shown_from[section.KEY], facts, n), ""]
        if section.KEY in results.sections:
            out.append(section.render(results))
        else:
            why = facts.get("skipped", {}).get(section.KEY, "skipped")
            out.append(f"_Not measured in this run ({why})._")
    return "\n".join(out) + "\n"


def _minutes_row(what: str, budget_s: float, seconds: float) -> list[str]:
    return [what, f"{budget_s / 60:g} min",
            f"{seconds / 60:.1f} min {'✅' if seconds <= budget_s else '⚠️ over'}"]


def readme_block(results) -> str:
    """The README's short Benchmarks section: the budgets next to the measured values."""

    facts = results.facts
    rows = learner.readme_rows(results)
    bench = bench_seconds(facts, SECTIONS)
    if bench is not None:
        rows.append(_minutes_row("`make bench`" + (" (`--quick`)" if facts.get("quick") else ""),
                                 BENCH_BUDGET_S, bench))
    suite = testsuite.whole_suite_seconds(results)
    if suite is not None:
        tests_run = {k: r for r in facts.get("other_runs", []) for k in r["sections"]}.get(
            testsuite.KEY, {"date": facts["machine"]["date"]})
        rows.append(_minutes_row(f"`make test`, warm (measured {tests_run['date'][:10]})",
                                 testsuite.BUDGET_S, suite))
    when = facts["machine"]["date"][:10]
    return "\n".join([
        BLOCK_START, "## Benchmarks", "",
        "`make bench` measures the course on your machine and writes "
        "[BENCHMARKS.md](BENCHMARKS.md): how long each notebook's Run All takes, the "
        "explorer's redraw, the launcher, and what the course teaches (one train step written "
        "six ways and checked against each other, assembling global batches, Orbax "
        "checkpoints, Grain loaders, flat and hierarchical all-reduces). `make bench-tests` "
        "adds the test suite's wall time (as long as a `make test`, so `make bench` leaves it "
        "out). "
        f"Last measured on {facts['machine']['CPUs'].split()[0]} CPUs, {when}"
        + (", quick run" if facts.get("quick") else "")
        + (f", while the machine was shared and busy (load average {load_at_start(facts):.1f}"
           "): the times are inflated" if shared_machine_note(facts) else "")
        + (f"; that run also measured the test suite, whose "
           f"{(facts['duration'] - bench) / 60:.1f} min the `make bench` row leaves out"
           if bench is not None and bench != facts["duration"] else "")
        + ". Budgets come from each notebook's front matter.", "",
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


def write(results, sections, output: Path = OUTPUT, readme: bool = True) -> bool:
    """Write the report, and the README block when it shows every notebook's Run All.

    Returns whether the README block was written.
    """
    output.write_text(render_report(results, sections), encoding="utf-8")
    learner = results.sections.get("learner")
    if not (readme and learner and not learner.get("selection")):
        return False
    README.write_text(update_readme(README.read_text(encoding="utf-8"), readme_block(results)),
                      encoding="utf-8")
    return True


def main(argv: list[str]) -> int:
    """Re-render BENCHMARKS.md (and the README block) from saved runs, without measuring."""

    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if argv:
        results = Results.load(Path(argv[0]))
        for later in argv[1:]:
            results = overlay(results, Results.load(Path(later)))
    else:
        results = runs.compose(RESULTS)
        if results is None:
            print(f"no runs in {RESULTS}: run make bench", file=sys.stderr)
            return 2
    write(results, SECTIONS)
    print(f"wrote {OUTPUT.name} from {', '.join(argv) or 'the newest runs in ' + str(RESULTS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
