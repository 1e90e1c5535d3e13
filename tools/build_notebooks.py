"""Build notebooks/NN_*.ipynb from their MyST sources in notebooks/src, executed on a fresh kernel.

Usage: python tools/build_notebooks.py [PREFIX ...]   (e.g. 02 07; no prefix: all)
"""
import sys
import time
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python tools/NAME.py`: make `tools` importable
    sys.path.insert(0, str(ROOT))

from tools.nbrun import NOTEBOOKS, execute  # noqa: E402

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def build(source: Path) -> Path:
    nb = jupytext.read(source)
    nb.metadata = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    for cell in nb.cells:
        cell.metadata.pop("lines_to_next_cell", None)
    start = time.perf_counter()
    execute(nb)
    target = NOTEBOOKS / (source.stem + ".ipynb")
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.write(nb, target)
    print(f"{target.name}: executed in {time.perf_counter() - start:.1f} s")
    return target


def main(prefixes: list[str]) -> None:
    sources = sorted((NOTEBOOKS / "src").glob("[0-9][0-9]_*.md"))
    chosen = [s for s in sources if not prefixes or s.name[:2] in prefixes]
    if not chosen:
        sys.exit(f"no notebook source matches {prefixes}; sources: {[s.name for s in sources]}")
    for source in chosen:
        build(source)


if __name__ == "__main__":
    main(sys.argv[1:])
