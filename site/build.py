"""Build the course's static site (`make site`): build/site/index.html.

The pages are the committed, executed notebooks as they are (nothing runs at build time), the
README, INSTRUCTORS, CONTRIBUTING, BENCHMARKS and SYMPTOMS, and one page per Part. Into a staged copy of
each notebook go: a "run this notebook" note with a download link to the committed .ipynb,
each exercise's hints and solution folded after its check cell, and a line before each saved
widget view saying that it needs a kernel to run live. Sphinx then builds the staged copy
strictly (any warning fails the build).

The widget manager's JavaScript (require.js, @jupyter-widgets/html-manager) comes from the npm
registry (`npm pack`, pinned below) into build/site-cache/ once, and is shipped inside the site.

Usage: python site/build.py [--out DIR]
"""
from __future__ import annotations

import argparse
import html
import re
import shutil
import subprocess
import sys
import tarfile
import time
from fnmatch import fnmatch
from pathlib import Path
from typing import NamedTuple

import nbformat

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python site/build.py`: make `tools` importable
    sys.path.insert(0, str(ROOT))

from helpers.exercises import get  # noqa: E402
from tools.course_table import NotebookInfo, read_all  # noqa: E402
from tools.nbrun import course_notebooks, exercise_id  # noqa: E402
from links import internal_problems  # noqa: E402  (site/links.py, beside this file)

SITE = ROOT / "site"
BUILD = ROOT / "build"
CACHE = BUILD / "site-cache"
PAGES = ("README.md", "INSTRUCTORS.md", "CONTRIBUTING.md", "BENCHMARKS.md", "SYMPTOMS.md")
# (package, version, {files in its tarball: where they go in the staged sources}). The widget
# modules in embed-amd.js ask for their fonts relative to their AMD module ids, from the page's
# folder: "@jupyter-widgets/" (base, controls) and "@jupyter-widgets/html-manager/dist/" (the
# manager). Every page with widgets is in notebooks/, so the fonts go to both folders there.
FONT_DIRS = ("_extra/notebooks/@jupyter-widgets/", "_extra/notebooks/@jupyter-widgets/html-manager/dist/")
WIDGET_JS = (
    ("requirejs", "2.3.8", {"package/require.js": ("_static/widgets/",)}),
    ("@jupyter-widgets/html-manager", "1.0.15", {
        "package/dist/embed-amd.js": ("_static/widgets/",),
        "package/dist/embed.js.LICENSE.txt": ("_static/widgets/",),
        **{f"package/dist/*.{kind}": FONT_DIRS for kind in ("woff2", "woff", "ttf", "eot", "svg")},
    }),
)


class Part(NamedTuple):
    numeral: str
    title: str
    first: int  # its first and last notebook
    last: int


PARTS = (  # every notebook belongs to exactly one Part
    Part("I", "From a mesh to data-parallel training across hosts", 0, 9),
    Part("II", "The real stack across hosts, and what goes wrong", 10, 13),
    Part("III", "When hosts fail and where the time goes", 14, 15),
    Part("IV", "Your own code: pmap-era scripts and Flax NNX programs", 16, 17),
)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
RUN_NOTE = """\
:::{{admonition}} Run this notebook
:class: course-run

This page shows the notebook's saved outputs; nothing runs here. To run it, clone the course
and, in its folder:

```bash
make lab    # sets up .venv from the pins, opens JupyterLab
make test   # sets up .venv from the pins, runs every test
```

Or {{download}}`download {name} <../downloads/{name}>` and open it in a Jupyter whose Python
has the course installed (`pip install` the course's folder).
:::
"""
LIVE_NOTE = ("*The widget below is its saved view, as the notebook was run; it needs a running "
             "kernel to respond: run the notebook to use it live.*")


def npm_file(package: str, version: str) -> Path:
    """The package's tarball from the npm registry, fetched once into build/site-cache/."""
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = CACHE / f"{package.lstrip('@').replace('/', '-')}-{version}.tgz"
    if not tarball.exists():
        if not shutil.which("npm"):
            sys.exit(f"make site: npm is needed once to fetch {package}@{version} into {CACHE} "
                     "(Debian: apt-get install npm)")
        subprocess.run(["npm", "pack", "--silent", f"{package}@{version}",
                        "--pack-destination", str(CACHE)], check=True, stdout=subprocess.DEVNULL)
    return tarball


# The accessibility engine the site's browser test runs on every page (not shipped in the site).
AXE = ("axe-core", "4.14.1")


def axe_script() -> str:
    """axe-core's axe.min.js, from its pinned npm tarball (fetched once into build/site-cache/)."""
    with tarfile.open(npm_file(*AXE)) as tar:
        return tar.extractfile("package/axe.min.js").read().decode("utf-8")


def ship_widget_js(stage: Path) -> None:
    """Put require.js and the widget manager (embed-amd.js and the fonts it loads) in the site."""
    for package, version, members in WIDGET_JS:
        with tarfile.open(npm_file(package, version)) as tar:
            for member in tar.getmembers():
                dests = next((d for pattern, d in members.items() if fnmatch(member.name, pattern)), ())
                for dest in dests if member.isfile() else ():
                    (stage / dest).mkdir(parents=True, exist_ok=True)
                    (stage / dest / Path(member.name).name).write_bytes(tar.extractfile(member).read())


def markdown_cell(text: str):
    return nbformat.v4.new_markdown_cell(text)


def inline_code(text: str) -> str:
    """Plain text with `code` spans, as HTML."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text, quote=False))


def folded_help(ex_id: str) -> str:
    """An exercise's hints and its solution, each folded: a click opens them."""
    exercise = get(ex_id)
    hints = "".join(f"<li>{inline_code(h)}</li>" for h in exercise.hints)
    solution = html.escape(exercise.solution.strip(), quote=False)
    return (f'<details class="course-hints">\n<summary>Hints for {ex_id}</summary>\n'
            f"<ol>{hints}</ol>\n</details>\n"
            f'<details class="course-solution">\n<summary>A solution of {ex_id}</summary>\n'
            f"<pre><code>{solution}</code></pre>\n</details>\n")


# A coloured cell of rich's HTML (jax.debug.visualize_array_sharding): its text colour, its background.
_RICH_CELL = re.compile(r'color: #(?P<fg>[0-9a-fA-F]{6}); text-decoration-color: #(?P=fg); '
                        r'background-color: #(?P<bg>[0-9a-fA-F]{6})')


def _luminance(hex_colour: str) -> float:
    """WCAG's relative luminance of an sRGB colour such as 'de9ed6'."""
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(int(hex_colour[i:i + 2], 16) / 255) for i in (0, 2, 4))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def readable_cells(html_text: str) -> str:
    """rich's coloured cells with black or white text, whichever contrasts more with the cell:
    JAX's own picture of a sharding, same words and colours, labels readable (WCAG's 4.5:1)."""
    def mend(cell: re.Match) -> str:
        background = _luminance(cell["bg"])
        text = "000000" if (background + 0.05) / 0.05 > 1.05 / (background + 0.05) else "ffffff"
        return f"color: #{text}; text-decoration-color: #{text}; background-color: #{cell['bg']}"

    return _RICH_CELL.sub(mend, html_text)


def picture_words(cell, name: str) -> str | None:
    """The alt text of a code cell's picture: its description (helpers.pictures.described), kept beside the
    PNG as text/plain; None if the cell draws nothing. A picture without one stops the build."""
    pictures = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    if not pictures:
        return None
    words = [o["data"].get("text/plain", "") for o in pictures]
    if len(pictures) > 1 or not words[0] or words[0].startswith("<Figure"):
        sys.exit(f"make site: {name}: a cell ({cell.source.splitlines()[-1]!r}) shows "
                 f"{'several pictures' if len(pictures) > 1 else 'a picture with no description'}: "
                 "one picture per cell, described with helpers.pictures.described (its alt text on the site)")
    return words[0]


def stage_notebook(path: Path, stage: Path) -> None:
    """The committed notebook, with the site's notes, folded help and alt texts, into the staged sources."""
    nb = nbformat.read(path, as_version=4)
    shutil.copy2(path, stage / "downloads" / path.name)
    cells = [nb.cells[0], markdown_cell(RUN_NOTE.format(name=path.name))]
    pending = None  # the exercise whose check cell comes next
    for cell in nb.cells[1:]:
        if cell.cell_type == "code" and (alt := picture_words(cell, path.name)):
            cell.metadata.setdefault("mystnb", {})["image"] = {"alt": alt}
        for output in cell.get("outputs", []) if cell.cell_type == "code" else ():
            if "text/html" in output.get("data", {}):
                output["data"]["text/html"] = readable_cells(output["data"]["text/html"])
        if cell.cell_type == "code" and any(WIDGET_VIEW in o.get("data", {}) for o in cell.get("outputs", [])):
            cells.append(markdown_cell(LIVE_NOTE))
        cells.append(cell)
        if pending and cell.cell_type == "code" and "check(" in cell.source:
            cells.append(markdown_cell(folded_help(pending)))
            pending = None
        pending = exercise_id(cell) or pending
    if pending:
        sys.exit(f"make site: {path.name}: exercise {pending} has no check cell after it")
    nb.cells = cells
    nbformat.write(nb, stage / "notebooks" / path.name)


def part_of(info: NotebookInfo) -> Part:
    number = int(info.number)
    for part in PARTS:
        if part.first <= number <= part.last:
            return part
    sys.exit(f"make site: notebook {info.number} belongs to no Part: add it to PARTS in site/build.py")


def part_pages(infos: list[NotebookInfo], stage: Path) -> list[str]:
    """One page per Part that has notebooks: its notebooks and what each teaches. Their names."""
    names = []
    for part in PARTS:
        members = [i for i in infos if part_of(i) == part]
        if not members:
            continue
        name = f"part-{part.numeral.lower()}"
        lines = [f"# Part {part.numeral} · {part.title}", "",
                 f"Notebooks {part.first:02d}-{part.last:02d}. Each page shows the notebook as committed, "
                 "with the outputs the tests check.", ""]
        lines += [f"- [{i.number} · {i.title}](notebooks/{i.stem}.ipynb): {i.you_will_learn}"
                  for i in members]
        lines += ["", "```{toctree}", ":hidden:", "", *(f"notebooks/{i.stem}" for i in members), "```", ""]
        (stage / f"{name}.md").write_text("\n".join(lines), encoding="utf-8")
        names.append(name)
    return names


def stage_pages(stage: Path, parts: list[str]) -> None:
    """README as the home page (its toctree lists the Parts), and the other top-level pages."""
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        if page == "README.md":
            others = [p.removesuffix(".md") for p in PAGES[1:]]
            text += "\n```{toctree}\n:hidden:\n\n" + "\n".join(parts + others) + "\n```\n"
            page = "index.md"
        (stage / page).write_text(text, encoding="utf-8")


def stage(stage_dir: Path) -> None:
    """Every source of the site, in stage_dir (made afresh)."""
    shutil.rmtree(stage_dir, ignore_errors=True)
    (stage_dir / "notebooks").mkdir(parents=True)
    (stage_dir / "downloads").mkdir()
    shutil.copy2(SITE / "conf.py", stage_dir / "conf.py")
    shutil.copytree(SITE / "static", stage_dir / "_static")
    ship_widget_js(stage_dir)
    infos = {i.stem: i for i in read_all()}
    notebooks = course_notebooks()
    missing = [p.name for p in notebooks if p.stem not in infos]
    if missing:
        sys.exit(f"make site: no MyST source with front matter for {missing}")
    for path in notebooks:
        stage_notebook(path, stage_dir)
    stage_pages(stage_dir, part_pages([infos[p.stem] for p in notebooks], stage_dir))


def build(out: Path) -> None:
    """The site in `out`; its staged sources and Sphinx's cache go next to it (OUT-src, OUT-doctrees)."""
    start = time.perf_counter()
    sources = out.with_name(out.name + "-src")
    stage(sources)
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q", "-E",
               "-d", str(out.with_name(out.name + "-doctrees")), str(sources), str(out)]
    if subprocess.run(command).returncode:
        sys.exit("make site: the build has warnings or errors (above); the site is strict")
    broken = internal_problems(out)
    if broken:
        sys.exit("make site: internal links that do not resolve (the site is strict):\n  "
                 + "\n  ".join(broken))
    print(f"make site: {out / 'index.html'} in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=BUILD / "site")
    build(parser.parse_args().out)
