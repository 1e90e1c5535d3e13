"""Each notebook's title, "you will learn" line and Run All budget, read from its MyST front matter.

The front matter of `notebooks/src/NN_name.md` is the one place these live:

    course:
      title: 'Meshes: devices on a grid with named axes'   # the notebook's heading is "# NN · title"
      you_will_learn: '`(host, device)` meshes, axis names, Explicit vs Auto axes'
      run_all_budget_s: 40    # seconds for Run All on a fresh kernel, 2-core machine

The README's course table and the benchmarks' budgets are generated from it:

    python tools/course_table.py           # rewrite the course table in README.md
    python tools/course_table.py --check   # exit 1 if README.md's table is stale
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "notebooks" / "src"
README = ROOT / "README.md"
TABLE_START, TABLE_END = "<!-- course-table:start -->", "<!-- course-table:end -->"
FIELDS = {"title": str, "you_will_learn": str, "run_all_budget_s": (int, float)}
EXAMPLE = ("course:\n  title: 'Meshes: devices on a grid with named axes'\n"
           "  you_will_learn: 'meshes, axis names, Explicit vs Auto axes'\n  run_all_budget_s: 30")


class FrontMatterError(ValueError):
    """A notebook source whose front matter lacks, or garbles, the course fields."""


@dataclass(frozen=True)
class NotebookInfo:
    number: str  # "07"
    stem: str  # "07_data_parallel_training"
    title: str
    you_will_learn: str
    run_all_budget_s: float

    @property
    def heading(self) -> str:
        """The notebook's first line, as the learner sees it."""
        return f"# {self.number} · {self.title}"


def front_matter(text: str, name: str = "notebook") -> dict:
    """The YAML front matter (between the first two `---` lines) of a MyST source, as a dict."""
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    if not match:
        raise FrontMatterError(f"{name}: no front matter (a block between two '---' lines at the top)")
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as err:
        raise FrontMatterError(f"{name}: its front matter is not valid YAML: {err}") from None
    return data if isinstance(data, dict) else {}


def read_info(path: Path) -> NotebookInfo:
    """The course fields of one notebook source; FrontMatterError names what is missing."""
    course = front_matter(path.read_text(encoding="utf-8"), path.name).get("course")
    if not isinstance(course, dict):
        raise FrontMatterError(f"{path.name}: its front matter has no 'course' block; add, "
                               f"after 'kernelspec:',\n{EXAMPLE}")
    problems = []
    for key, kind in FIELDS.items():
        value = course.get(key)
        if key not in course:
            problems.append(f"'{key}' is missing")
        elif isinstance(value, bool) or not isinstance(value, kind) or not value or (
                kind is not str and value < 0):
            wanted = "text" if kind is str else "a positive number of seconds"
            problems.append(f"'{key}' must be {wanted}, got {value!r}")
    if problems:
        raise FrontMatterError(f"{path.name}: in its front matter's 'course' block, "
                               + "; ".join(problems) + f". Example:\n{EXAMPLE}")
    return NotebookInfo(path.name[:2], path.stem, course["title"].strip(),
                        course["you_will_learn"].strip(), float(course["run_all_budget_s"]))


def course_sources(directory: Path = SOURCES) -> list[Path]:
    """The notebook sources `NN_*.md`, in order."""
    return sorted(directory.glob("[0-9][0-9]_*.md"))


def read_all(directory: Path = SOURCES) -> list[NotebookInfo]:
    """The course fields of every notebook; one FrontMatterError listing every broken source."""
    infos, errors = [], []
    for path in course_sources(directory):
        try:
            infos.append(read_info(path))
        except FrontMatterError as err:
            errors.append(str(err))
    if errors:
        raise FrontMatterError("\n\n".join(errors))
    return infos


def budgets(directory: Path = SOURCES) -> dict[str, float]:
    """Run All budget in seconds per notebook stem, e.g. {'00_fake_devices': 40.0, ...}."""
    return {info.stem: info.run_all_budget_s for info in read_all(directory)}


def course_table(infos: list[NotebookInfo]) -> str:
    """The README's course table, between its markers."""
    rows = [f"| {i.number} | [{i.title}](notebooks/{i.stem}.ipynb) | {i.you_will_learn} | "
            f"{i.run_all_budget_s:g} s |" for i in infos]
    return "\n".join([TABLE_START, "| # | notebook | you will learn | Run All budget |",
                      "|---|---|---|---:|", *rows, TABLE_END])


def with_table(readme: str, table: str) -> str:
    """README text with its course table replaced; an error if the markers are missing."""
    pattern = re.compile(re.escape(TABLE_START) + ".*?" + re.escape(TABLE_END), re.S)
    if not pattern.search(readme):
        raise FrontMatterError(f"README.md has no {TABLE_START} ... {TABLE_END} block "
                               "to put the course table in")
    return pattern.sub(lambda _: table, readme, count=1)


def main(argv: list[str]) -> int:
    try:
        text = README.read_text(encoding="utf-8")
        updated = with_table(text, course_table(read_all()))
    except FrontMatterError as err:
        print(f"course table: {err}", file=sys.stderr)
        return 2
    if "--check" in argv:
        if updated != text:
            print("README.md's course table is stale: run `python tools/course_table.py`",
                  file=sys.stderr)
            return 1
        return 0
    if updated != text:
        README.write_text(updated, encoding="utf-8")
        print("README.md: course table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
