"""Measure the course on this machine, keep the raw results, and write BENCHMARKS.md (`make bench`).

    python -m benchmarks.run                 # every section but the test suite (`make bench`;
                                             #   budget: 10 minutes on a 2-core laptop)
    python -m benchmarks.run --only tests    # only the test suite (`make bench-tests`)
    python -m benchmarks.run --quick         # fewer repetitions of everything, for development
    python -m benchmarks.run --only 1,5 --notebooks 00,02 --output /tmp/b.md --results-dir /tmp/r

One module per section (learner, testsuite, explorer, launcher, course, checkpoints, loaders,
collectives, restarts), each with KEY, TITLE, `measure(results, opts)` and `render(results)`; with
--quick, each measures less (its QUICK settings, or fewer repetitions). Raw results go to
benchmarks/results/STAMP.json (pyperf) and STAMP.report.json, with the commit measured.
After `make bench` or `make bench-tests`, the report shows the newest full run with the test
suite of the newest run that measured it (runs.py); after any other selection, this run
alone. report.py renders them. The parent process never imports JAX:
anything that needs a device count of its own runs in a worker process or under helpers.launch.
A program that computes the wrong thing (a train-step variant whose parameters leave the
single-device reference) stops the whole run with exit status 2; the report then says why
instead of showing that section's tables.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/run.py`
    sys.path.insert(0, str(ROOT))

from benchmarks import report, runs  # noqa: E402
from benchmarks.measure import RESULTS, Results, WrongProgram, log  # noqa: E402
from benchmarks.sections import SECTIONS  # noqa: E402
from benchmarks.tables import fmt_s  # noqa: E402

ORDER = ["learner", "explorer", "launcher", "course", "checkpoints", "loaders",
         "collectives", "restarts"]  # what `make bench` measures, in this order
APART = list(runs.APART)  # measured only when named (`make bench-tests`, `make bench-hub`)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="1 repetition of everything and fewer redraws/steps (development)")
    p.add_argument("--only", default="",
                   help=f"comma-separated sections: numbers 1-{len(SECTIONS)} or "
                        + ",".join(s.KEY for s in SECTIONS)
                        + " (default: all but tests, which `--only tests` measures)")
    p.add_argument("--notebooks", default="",
                   help="comma-separated notebook numbers for section 1, e.g. 00,03 (default: all)")
    p.add_argument("--repeats", type=int, default=None,
                   help="repetitions of each launcher run and measured job (default 3; 1 with --quick)")
    p.add_argument("--notebook-repeats", type=int, default=None,
                   help="Run Alls of each notebook (default 2, so that 16 notebooks fit the 10 minutes of "
                        "make bench; 1 with --quick)")
    p.add_argument("--test-repeats", type=int, default=1,
                   help="test-suite repetitions (default 1: each run takes minutes)")
    p.add_argument("--floor-against", nargs="*", default=[], metavar="PYTHON",
                   help="other environments' Pythons, timed beside this one in the floor section")
    p.add_argument("--output", type=Path, default=report.OUTPUT,
                   help="where to write the report (BENCHMARKS.md)")
    p.add_argument("--results-dir", type=Path, default=RESULTS,
                   help="where to keep the raw results (benchmarks/results)")
    p.add_argument("--no-readme", action="store_true",
                   help="do not update the Benchmarks block in README.md")
    return p


def chosen_sections(only: str) -> list[str]:
    """Section keys named by --only (numbers or keys), in the order they run; default ORDER."""
    if not only:
        return list(ORDER)
    by_name = {s.KEY: s.KEY for s in SECTIONS} | {str(i): s.KEY for i, s in
                                                   enumerate(SECTIONS, start=1)}
    chosen = set()
    for item in (s.strip() for s in only.split(",") if s.strip()):
        if item not in by_name:
            raise SystemExit(f"--only: unknown section {item!r}; use 1-{len(SECTIONS)} or "
                             + ", ".join(s.KEY for s in SECTIONS))
        chosen.add(by_name[item])
    return [key for key in ORDER + APART if key in chosen]


def main(argv: list[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    start = time.perf_counter()
    keys = chosen_sections(opts.only)
    skipped = {s.KEY: "not in --only" for s in SECTIONS if s.KEY not in keys}
    if not opts.only:
        skipped.update(runs.APART)
    opts.repeats = opts.repeats or (1 if opts.quick else 3)
    opts.notebook_repeats = opts.notebook_repeats or (1 if opts.quick else 2)
    opts.notebooks = [s.strip() for s in opts.notebooks.split(",") if s.strip()]
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    full = not (opts.only or opts.notebooks or opts.quick)  # as `make bench` runs
    results = Results(facts={"machine": report.machine_facts(), "stamp": stamp,
                             "commit": runs.source_commit(),
                             "flags": " ".join(argv if argv is not None else sys.argv[1:]),
                             "quick": opts.quick, "full": full, "skipped": skipped, "spent": {}})
    by_key = {s.KEY: s for s in SECTIONS}
    merged = full or (len(keys) == 1 and keys[0] in APART)  # `make bench`, -tests, -hub: the newest runs

    def save(readme: bool = False) -> bool:
        """Keep the results, write the report (and the README block); whether README changed."""
        results.save(opts.results_dir, stamp)
        # a test-suite run that failed shows its failure, not an older suite's times
        compose = merged and (keys[0] not in APART or keys[0] in results.sections)
        shown = (runs.compose(opts.results_dir) if compose else None) or results
        return report.write(shown, SECTIONS, opts.output, readme=readme and compose)

    for key in keys:
        section = by_key[key]
        log(f"section {section.TITLE}")
        t = time.perf_counter()
        try:
            section.measure(results, opts)
        except WrongProgram as err:  # never time, nor report, a wrong program
            log(f"STOPPED: {err}")
            skipped[key] = f"STOPPED, a measured program computed the wrong thing: {err}"
            save()
            return 2
        except Exception as err:  # noqa: BLE001 - report it, measure the rest
            log(f"section {key} failed: {err}")
            skipped[key] = f"failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
        number = SECTIONS.index(section) + 1
        results.facts["spent"][str(number)] = time.perf_counter() - t
        log(f"section {key} took {fmt_s(results.facts['spent'][str(number)])}")
        save()
    results.facts["duration"] = time.perf_counter() - start
    readme = save(readme=not opts.no_readme)
    log(f"wrote {opts.output} and {opts.results_dir / stamp}.json in "
        f"{fmt_s(results.facts['duration'])}"
        + (", and the Benchmarks block of README.md" if readme else ""))
    if full and results.facts["duration"] > report.BENCH_BUDGET_S:
        log(f"OVER BUDGET: `make bench` should take at most {report.BENCH_BUDGET_S // 60} min")
    return 1 if any(v.startswith("failed") for v in skipped.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
