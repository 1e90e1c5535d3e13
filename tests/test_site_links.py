"""site/links.py: `make site` fails on an internal link or anchor that does not resolve; `make
linkcheck` lists the external links with their pages. On a small site written here."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "site"))

import links  # noqa: E402


def _site(tmp_path: Path) -> Path:
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "index.html").write_text(
        '<a href="notebooks/a.html#x">a</a> <a href="notebooks/b.html">b</a> '
        '<a href="https://jax.readthedocs.io/">jax</a> <img src="_images/gone.png" alt="gone">')
    (tmp_path / "notebooks" / "a.html").write_text(
        '<h2 id="x">x</h2><a href="#nope">?</a><a href="../index.html">home</a>'
        '<a href="https://jax.readthedocs.io/">jax</a>')
    return tmp_path


def test_a_missing_page_anchor_or_image_is_named_with_its_page(tmp_path):
    assert links.internal_problems(_site(tmp_path)) == [
        "index.html: notebooks/b.html (no such file)",
        "index.html: _images/gone.png (no such file)",
        "notebooks/a.html: #nope (no such anchor)",
    ]


def test_external_links_are_listed_with_every_page_that_cites_them(tmp_path):
    site = _site(tmp_path)
    assert links.external_links(site) == {"https://jax.readthedocs.io/": ["index.html", "notebooks/a.html"]}
    out = subprocess.run([sys.executable, str(REPO / "site" / "links.py"), "--external", str(site)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert out.stdout.startswith("https://jax.readthedocs.io/\n    on index.html, notebooks/a.html\n")
    broken = subprocess.run([sys.executable, str(REPO / "site" / "links.py"), str(site)],
                            capture_output=True, text=True, timeout=60)
    assert broken.returncode == 1 and broken.stderr.count("broken: ") == 3
    missing = subprocess.run([sys.executable, str(REPO / "site" / "links.py"), str(tmp_path / "none")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "run make site first" in missing.stderr
