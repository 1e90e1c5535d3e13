"""The built site's links: every internal one must resolve (`make site` fails otherwise), and the
external ones are listed with the pages that cite them (`make linkcheck`, for someone with a
network to open: this machine has none).

    python site/links.py build/site              # internal links and anchors; exit 1 if broken
    python site/links.py --external build/site   # every external link, with its pages
"""
from __future__ import annotations

import argparse
import functools
import sys
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

SKIPPED = ("_static/", "_sources/", "genindex", "search")  # the theme's own pages and fragments


class _Page(HTMLParser):
    """A page's ids (anchors) and the targets of its links and images."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.targets: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.ids.update(v for k, v in attrs.items() if k in ("id", "name") and v)
        if tag == "a" and attrs.get("href"):
            self.targets.append(attrs["href"])
        elif tag in ("img", "script") and attrs.get("src"):
            self.targets.append(attrs["src"])
        elif tag == "link" and attrs.get("href"):
            self.targets.append(attrs["href"])


@functools.cache
def _read(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def anchors(path: Path) -> set[str]:
    """The ids and names a page's links may point at (#fragment)."""
    return _read(path).ids


def pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html")
                  if not p.relative_to(site).as_posix().startswith(SKIPPED))


def _external(target: str) -> bool:
    return urlsplit(target).scheme in ("http", "https") or target.startswith("//")


def internal_problems(site: Path) -> list[str]:
    """'page: target (why)' for each internal link, image or script that does not resolve."""
    broken = []
    for path in pages(site):
        for target in _read(path).targets:
            parts = urlsplit(target)
            if _external(target) or parts.scheme in ("mailto", "data", "javascript"):
                continue
            file = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if file.is_dir():
                file = file / "index.html"
            name = path.relative_to(site).as_posix()
            if not file.is_file():
                broken.append(f"{name}: {target} (no such file)")
            elif parts.fragment and file.suffix == ".html" and unquote(parts.fragment) not in anchors(file):
                broken.append(f"{name}: {target} (no such anchor)")
    return broken


def external_links(site: Path) -> dict[str, list[str]]:
    """Every external link of the site -> the pages that have it."""
    cited = defaultdict(set)
    for path in pages(site):
        for target in _read(path).targets:
            if _external(target):
                cited[target].add(path.relative_to(site).as_posix())
    return {url: sorted(where) for url, where in sorted(cited.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path)
    parser.add_argument("--external", action="store_true", help="list the external links")
    opts = parser.parse_args(argv)
    if not (opts.site / "index.html").is_file():
        print(f"links: no site at {opts.site}: run make site first", file=sys.stderr)
        return 2
    if opts.external:
        found = external_links(opts.site)
        for url, where in found.items():
            print(f"{url}\n    on {', '.join(where)}")
        print(f"{len(found)} external links on {len(pages(opts.site))} pages; open each with a network "
              "(this command fetches nothing)")
        return 0
    broken = internal_problems(opts.site)
    for line in broken:
        print(f"broken: {line}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
