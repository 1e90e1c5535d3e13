"""The course site (`make site`) in a real browser: every page of a fresh build, served from
127.0.0.1, opened in Debian's Chromium.

A page fails on a console error, an uncaught script error, a failed request (or one that
leaves 127.0.0.1), an internal link or anchor that does not resolve, an image that did not
render, or an empty widget area; a notebook's page also fails when its first heading is not
the notebook's title, its "run this notebook" note or download link is missing, or a solution
is visible before its reveal is clicked. axe-core (pinned, from the npm registry) runs on every
page: no "serious" or "critical" violation; every picture's alt text says what it shows; folded
hints and solutions open with the keyboard. Screenshots of three pages (02 with its explorer, 10,
13), and of 02 in dark mode and on a phone-width screen, go to test-artifacts/site/.
"""
from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from browser_support import INSTALL_HINT, chromium_context, find_chromium
from tools.course_table import read_all
from tools.nbrun import course_notebooks

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "site"))
import links  # noqa: E402  (site/links.py: what `make site` checks on the built HTML)
ARTIFACTS = REPO / "test-artifacts" / "site"
SCREENSHOTS = ("02", "10", "13")
WIDGET_VIEW = 'script[type="application/vnd.jupyter.widget-view+json"]'
# axe-core on the page as it is: what breaks for a screen reader or the keyboard ("serious" and
# "critical" only; "moderate" and "minor" are advice). A rule whose own impact and every check's are
# "moderate" or "minor" (axe's metadata says so) can report nothing else: it is not run, which saves
# a fifth of axe's time (29 of its rules, the landmark and region ones among them).
AXE_RUN = """async () => {
  const advice = impact => impact === 'moderate' || impact === 'minor';
  const checks = axe._audit.data.checks;
  const onlyAdvice = axe._audit.rules.filter(r => advice(r.impact)
    && [...r.any, ...r.all, ...r.none].every(c => advice((checks[c.id] || {}).impact)));
  const rules = Object.fromEntries(onlyAdvice.map(r => [r.id, {enabled: false}]));
  return (await axe.run(document, {resultTypes: ['violations'], rules})).violations
  .filter(v => ['serious', 'critical'].includes(v.impact))
  .map(v => `${v.id} (${v.impact}, ${v.nodes.length} element(s), e.g. ${v.nodes[0].target.join(' ')}): ${v.help}`);
}"""
PHONE = {"width": 390, "height": 844}

# What one page shows, read in the browser once it has settled.
_PAGE_STATE = """() => {
  const h1 = document.querySelector('article h1, main h1');
  let heading = null;
  if (h1) { const c = h1.cloneNode(true); c.querySelectorAll('.headerlink').forEach(a => a.remove());
            heading = c.innerText.trim(); }
  const visible = e => e.checkVisibility({visibilityProperty: true});  // false inside a closed <details>
  const run = document.querySelector('.course-run');
  return {
    heading,
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    brokenImages: [...document.querySelectorAll('img')].filter(i => !(i.complete && i.naturalWidth > 0))
                  .map(i => i.getAttribute('src')),
    pictures: [...document.querySelectorAll('article img')].map(i => ({
      src: i.getAttribute('src'), words: i.getAttribute('alt') || i.getAttribute('title') || ''})),
    widgets: [...document.querySelectorAll('%s')].map(s => {
      const area = s.parentElement.querySelector('.widget-subarea');
      return area ? area.querySelectorAll('.jupyter-widgets').length && area.offsetHeight : 0; }),
    runNote: run ? run.innerText : null,
    downloads: [...document.querySelectorAll('.course-run a.download')].map(a => a.getAttribute('href')),
    openDetails: [...document.querySelectorAll('details.course-hints, details.course-solution')]
                 .filter(d => d.open).length,
    visibleSolutions: [...document.querySelectorAll('details.course-solution pre')].filter(visible).length,
    solutions: document.querySelectorAll('details.course-solution').length,
  };
}""" % WIDGET_VIEW


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        pytest.skip(INSTALL_HINT)
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A fresh, strict build of the site (make site's script), in a temporary folder."""
    pytest.importorskip("myst_nb", reason="the site's tooling is not installed: make site (or make test)")
    out = tmp_path_factory.mktemp("site") / "site"
    build = subprocess.run([sys.executable, str(REPO / "site" / "build.py"), "--out", str(out)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, f"make site failed:\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def server(site):
    """An HTTP server on 127.0.0.1 for the built site; its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser(chromium, tmp_path_factory):
    """One headless Chromium for the module's tests."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright, \
            chromium_context(playwright, tmp_path_factory.mktemp("chromium"), chromium) as context:
        yield context


@pytest.fixture(scope="module")
def pages(site, server, browser):
    """Every page of the site, opened once: {page path: what it showed and what went wrong}."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    from build import axe_script  # the pinned axe-core, from build/site-cache

    axe = axe_script()
    seen, problems = {}, []
    page = browser.new_page()
    page.on("console", lambda m: m.type == "error" and problems.append(f"console error: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"script error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} ({r.failure})"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))
    page.route(re.compile(r"^(?!http://127\.0\.0\.1:|blob:|data:)"), lambda route: (
        problems.append(f"request left the site: {route.request.url}"), route.abort()))
    for path in sorted(site.rglob("*.html")):
        name = path.relative_to(site).as_posix()
        if name.startswith("_static/"):  # the theme's template fragments, not pages
            continue
        problems.clear()
        page.goto(server + name, wait_until="load", timeout=60_000)
        if page.locator(WIDGET_VIEW).count():  # rendered after load; then they fetch their fonts
            page.wait_for_function(f"""() => [...document.querySelectorAll('{WIDGET_VIEW}')]
                .every(s => s.parentElement.querySelector('.widget-subarea .jupyter-widgets'))""",
                                   timeout=30_000)
            page.evaluate("() => document.fonts.ready.then(() => document.fonts.status)")
        state = page.evaluate(_PAGE_STATE)
        number = re.match(r"notebooks/(\d\d)_", name)
        if number and number.group(1) in SCREENSHOTS:
            widget = page.locator(".widget-subarea").first
            if widget.count():
                widget.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / f"{Path(name).stem}.png"))
        page.add_script_tag(content=axe)
        seen[name] = {**state, "problems": list(problems), "axe": page.evaluate(AXE_RUN)}
    page.close()
    return seen


def _internal_target(site: Path, server: str, url: str) -> tuple[Path, str] | None:
    if not url.startswith(server):
        return None
    parts = urlsplit(url)
    path = site / unquote(parts.path.lstrip("/"))
    return (path / "index.html" if path.is_dir() else path), unquote(parts.fragment)


def test_every_notebook_has_a_page_listed_on_its_part_page(site):
    stems = [p.stem for p in course_notebooks()]
    missing = [s for s in stems if not (site / "notebooks" / f"{s}.html").exists()]
    assert not missing, f"notebooks without a page: {missing}"
    parts = " ".join(p.read_text(encoding="utf-8") for p in site.glob("part-*.html"))
    unlisted = [s for s in stems if f'href="notebooks/{s}.html"' not in parts]
    assert not unlisted, f"notebooks on no Part's page: {unlisted}"
    for page in ("index.html", "INSTRUCTORS.html", "part-i.html", "part-ii.html"):
        assert (site / page).exists(), f"the site has no {page}"


def test_no_console_error_no_failed_request(pages):
    bad = {name: p["problems"] for name, p in pages.items() if p["problems"]}
    assert not bad, "\n".join(f"{name}: {'; '.join(p)}" for name, p in bad.items())


def test_internal_links_and_anchors_resolve(pages, site, server):
    broken = []
    for name, p in pages.items():
        for url in p["links"]:
            target = _internal_target(site, server, url)
            if target is None:
                continue
            path, fragment = target
            if not path.is_file():
                broken.append(f"{name}: {url} (no such file)")
            elif fragment and path.suffix == ".html" and fragment not in links.anchors(path):
                broken.append(f"{name}: {url} (no such anchor)")
    assert not broken, "\n".join(broken)


def test_no_serious_or_critical_accessibility_violation(pages):
    bad = [f"{name}: {v}" for name, p in pages.items() for v in p["axe"]]
    assert not bad, "axe-core found:\n" + "\n".join(bad)


def test_the_axe_run_still_reports_what_it_must_and_only_that(browser):
    """The rules left out can only give advice: a page with a picture without alt text and faint
    text is still reported (critical, serious); its missing landmarks (moderate) are not."""
    from build import axe_script

    page = browser.new_page()
    page.set_content('<html lang="en"><head><title>t</title></head><body>'
                     '<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">'
                     '<p style="color:#ccc;background:#fff">faint</p></body></html>')
    page.add_script_tag(content=axe_script())
    found = {v.split(" ")[0] for v in page.evaluate(AXE_RUN)}
    page.close()
    assert found == {"image-alt", "color-contrast"}


def test_every_picture_says_what_it_shows(pages):
    """Alt text (or the explorer's title) written from the data that drew the picture: the mesh,
    the spec, who holds what; never the file name or a word like 'figure'."""
    vague = re.compile(r"^(?:figure|image|picture|plot|chart)?$|\.png$", re.IGNORECASE)
    bad, seen = [], 0
    for name, p in pages.items():
        for picture in p["pictures"]:
            seen += 1
            if vague.search(picture["words"].strip()) or len(picture["words"]) < 40:
                bad.append(f"{name}: {picture['src'][:60]}: {picture['words']!r}")
    assert seen >= 25 and not bad, "\n".join(bad)
    spec_page = next(p for n, p in pages.items() if n.startswith("notebooks/02_"))
    assert any("P('device')" in pic["words"] and "dev 4 [0:2]" in pic["words"]
               for pic in spec_page["pictures"]), "notebook 02's pictures do not say who holds what"


def test_images_render_and_no_widget_area_is_empty(pages):
    bad = [f"{name}: images {p['brokenImages']}" for name, p in pages.items() if p["brokenImages"]]
    bad += [f"{name}: widget areas {p['widgets']}" for name, p in pages.items() if not all(p["widgets"])]
    assert not bad, "\n".join(bad)
    assert any(p["widgets"] for name, p in pages.items() if name.startswith("notebooks/02_")), \
        "notebook 02's page shows no widget (its explorer's saved view)"


def test_each_notebook_page_has_its_title_run_note_and_download(pages):
    wrong = []
    for info in read_all():
        p = pages[f"notebooks/{info.stem}.html"]
        title = f"{info.number} · {info.title}".replace("`", "")
        if p["heading"] != title:
            wrong.append(f"{info.stem}: first heading {p['heading']!r}, not {title!r}")
        if not p["runNote"] or "make lab" not in p["runNote"] or "make test" not in p["runNote"]:
            wrong.append(f"{info.stem}: no 'run this notebook' note with make lab and make test")
        if not any(href.endswith(f"/{info.stem}.ipynb") for href in p["downloads"]):
            wrong.append(f"{info.stem}: no download link to {info.stem}.ipynb")
    assert not wrong, "\n".join(wrong)


def test_hints_and_solutions_are_folded_until_clicked(pages, server, browser):
    unfolded = [f"{n}: {p['openDetails']} open, {p['visibleSolutions']} solutions visible"
                for n, p in pages.items() if p["openDetails"] or p["visibleSolutions"]]
    assert not unfolded, "\n".join(unfolded)
    name = next(n for n in pages if n.startswith("notebooks/02_"))
    assert pages[name]["solutions"] == 3, "notebook 02's page should fold 3 solutions"
    page = browser.new_page()
    page.goto(server + name, wait_until="load")
    solution = page.locator("details.course-solution").first
    assert not solution.locator("pre").is_visible()
    solution.locator("summary").click()
    assert solution.locator("pre").is_visible(), "a click on the summary does not reveal the solution"
    page.close()


def test_folded_help_opens_with_the_keyboard(pages, server, browser):
    name = next(n for n in pages if n.startswith("notebooks/02_"))
    page = browser.new_page()
    page.goto(server + name, wait_until="load")
    for kind in ("course-hints", "course-solution"):
        folded = page.locator(f"details.{kind}").first
        folded.locator("summary").focus()
        page.keyboard.press("Enter")
        assert folded.evaluate("d => d.open"), f"Enter on a focused summary does not open {kind}"
    page.close()


def test_dark_mode_and_a_phone_screen_keep_the_mesh_pictures_readable(pages, server, browser):
    """One screenshot each (test-artifacts/site/), looked at by a person. In dark mode every picture
    fits the page; on a phone-width screen every picture keeps its own size (no label shrunk or
    cut) and its cell scrolls sideways."""
    name = next(n for n in pages if n.startswith("notebooks/02_"))
    page = browser.new_page()
    for label, size in (("dark", {"width": 1280, "height": 1800}), ("phone", PHONE)):
        page.set_viewport_size(size)
        page.goto(server + name, wait_until="load")
        if label == "dark":  # the theme's own switch: data-theme on <html>
            page.evaluate("() => { document.documentElement.dataset.theme = 'dark'; "
                          "document.documentElement.dataset.mode = 'dark'; }")
        page.locator("article img").first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"{Path(name).stem}-{label}.png"))
        pictures = page.evaluate("""() => [...document.querySelectorAll('article .cell_output > img')].map(i => {
            const r = i.getBoundingClientRect(), box = i.parentElement;
            return {src: i.getAttribute('src').slice(-20), width: r.width, natural: i.naturalWidth,
                    fits: r.right <= document.documentElement.clientWidth + 1,
                    scrolls: getComputedStyle(box).overflowX === 'auto' && box.scrollWidth >= r.width - 1};
          })""")
        assert pictures
        if label == "dark":
            bad = [p for p in pictures if not p["fits"]]
        else:
            bad = [p for p in pictures if abs(p["width"] - p["natural"]) > 1 or not (p["fits"] or p["scrolls"])]
        assert not bad, f"{label}: pictures shrunk or cut: {bad}"
    page.close()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_does_not_install_the_site_tooling():
    def recipe(target: str) -> str:  # what make would run if everything were out of date
        return subprocess.run(["make", "-n", "-B", target], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout

    assert "requirements-site.txt" not in recipe("lab")
    assert "requirements-site.txt" in recipe("site") and "site/build.py" in recipe("site")
