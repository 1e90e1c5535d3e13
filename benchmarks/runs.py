"""Which saved runs a report is made of, and which commit a run measured.

`make bench` measures every section but the test suite, which takes as long as a whole
`make test`; `make bench-tests` measures only that. BENCHMARKS.md shows the newest full
`make bench` run of `benchmarks/results/`, with the test-suite section of the newest run that
measured one; that section then says when, and at which commit, it was measured.
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from benchmarks.measure import REPORT_SUFFIX, ROOT, Results, overlay

TESTS = "tests"  # the sections measured apart
TESTS_APART = ("the test suite takes as long as a whole `make test`, so `make bench` leaves it "
               "out: run `make bench-tests` to measure it and add it to this report")
HUB = "hub"
HUB_APART = ("the hub makes Unix accounts (root only) and takes minutes, so `make bench` leaves it out: "
             "run `make bench-hub` to measure it and add it to this report")
VERDICTS = "verdicts"
VERDICTS_APART = ("judging every hanging answer as a first check, with warm hosts and cold, takes minutes, so "
                  "`make bench` (10 min at most) leaves it out: run `make bench-verdicts` to measure it and add "
                  "it to this report")
FLOOR = "floor"
FLOOR_APART = ("the floor is compared with the course's environment at the pin it replaces, which `make bench` "
               "does not build: run `make bench-floor` to build it (once) and add the comparison to this report")
MIGRATE = "migrate"
MIGRATE_APART = ("it measures what the migration assistant finds, not a time: run `make bench-migrate` to measure "
                 "it and add it to this report")
APART = {TESTS: TESTS_APART, HUB: HUB_APART, VERDICTS: VERDICTS_APART,
         FLOOR: FLOOR_APART, MIGRATE: MIGRATE_APART}  # section -> why `make bench` leaves it out
NO_FULL_RUN = "no full `make bench` run in this results directory yet: run `make bench`"
# Files `make bench` writes itself: changing them does not make the measured checkout dirty.
OUTPUTS = ("BENCHMARKS.md", "benchmarks/results", "benchmarks/heldout")
_README_BLOCK = re.compile(r"<!-- bench:start -->.*?<!-- bench:end -->", re.S)


def source_commit(root: Path = ROOT) -> str:
    """'1a2b3c4', or '1a2b3c4+dirty' when the checkout differs from that commit.

    What `make bench` writes (BENCHMARKS.md, benchmarks/results/, the held-out sets' scores in
    benchmarks/heldout/, the README's Benchmarks block) does not count as a difference.
    """
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)

    head = git("rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    excluded = [f":(exclude){path}" for path in (*OUTPUTS, "README.md")]
    changed = bool(git("status", "--porcelain", "--", ".", *excluded).stdout.strip())
    readme = root / "README.md"
    committed = git("show", "HEAD:README.md")
    if readme.exists() and committed.returncode == 0:
        changed = changed or (_README_BLOCK.sub("", readme.read_text(encoding="utf-8"))
                              != _README_BLOCK.sub("", committed.stdout))
    return head.stdout.strip() + ("+dirty" if changed else "")


def is_full(facts: dict) -> bool:
    """Whether a run measured what `make bench` does: no --only, --notebooks or --quick."""
    if "full" in facts:
        return bool(facts["full"])
    flags = facts.get("flags", "")  # runs saved before the flag was kept
    return not facts.get("quick") and "--only" not in flags and "--notebooks" not in flags


def saved_runs(directory: Path) -> list[tuple[str, dict]]:
    """(stamp, saved report) of every run in `directory`, oldest first."""
    found = []
    for path in sorted(Path(directory).glob(f"*{REPORT_SUFFIX}")):
        found.append((path.name[:-len(REPORT_SUFFIX)], json.loads(path.read_text("utf-8"))))
    return found


def compose(directory: Path) -> Results | None:
    """The newest full run, each section measured apart (tests, hub) from the newest run that measured it.

    Without a full run, the newest test-suite run alone (the other sections say how to get
    them); None when the directory holds neither.
    """
    runs = saved_runs(directory)
    full = [stamp for stamp, saved in runs if is_full(saved["facts"])]
    tests = [stamp for stamp, saved in runs if TESTS in saved["sections"]]

    def load(stamp: str) -> Results:
        return Results.load(Path(directory) / f"{stamp}.json")

    if not full:
        if not tests:
            return None
        alone = load(tests[-1])
        alone.facts["skipped"] = {key: NO_FULL_RUN for key in alone.facts.get("skipped", {})}
        return alone
    results = load(full[-1])
    for key, why in APART.items():  # each from the newest run that measured it
        measured = [stamp for stamp, saved in runs if key in saved["sections"]]
        if measured and measured[-1] != full[-1]:
            results = overlay(results, load(measured[-1]), keys=[key])
        elif key not in results.sections:
            results.facts.setdefault("skipped", {})[key] = why
    return results


def command(flags: str) -> str:
    """The command a run's flags mean: '`make bench`', '`make bench-tests`', or the module's."""
    return {"": "`make bench`", "--only tests": "`make bench-tests`", "--only hub": "`make bench-hub`"}.get(
        flags.strip(), f"`python -m benchmarks.run {flags.strip()}`")
