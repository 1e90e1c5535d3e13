"""The course in a real browser: JupyterLab + headless Chromium, widgets included.

Each test starts JupyterLab from this environment on a copy of a notebook, opens it in
Debian's Chromium through Playwright, runs every cell, checks that no cell failed and that the
figures rendered, then changes the sharding explorer's first PartitionSpec entry and checks that
its picture and text follow (the text must equal what helpers.pictures.explorer computes here for the
same choice). Screenshots before and after the change go to test-artifacts/browser/.
JupyterLab, its kernel and the browser are stopped afterwards, pass or fail, and the test
fails if any of their processes is left running.

Run with `make test-browser`; needs Debian's `chromium` (apt-get install chromium).
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import psutil
import pytest

from browser_support import (INSTALL_HINT, JupyterLab, LabPage, chromium_context, collapse,
                             find_chromium, order_value, strip_outputs, write_notebook)

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
ARTIFACTS = REPO / "test-artifacts" / "browser"
PARTITION_SPECS = "02_partition_specs.ipynb"

# The first PartitionSpec entry to try, in order; the test picks the first one that differs
# from what the explorer shows and gives a valid, different layout.
SPEC_0_CHOICES = ["('host', 'device')", "'device'", "'host'", "None", "('device', 'host')"]

HARNESS_CELLS = [
    "from helpers.devices import use_fake_devices\nuse_fake_devices(8)\n\n"
    "import jax\nfrom helpers.emulated.topology import emulate_hosts\n\nemulate_hosts(2)\njax.device_count()",
    "import numpy as np\nfrom jax.sharding import Mesh\nfrom helpers.pictures.sharding import draw_mesh\n\n"
    "mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ('host', 'device'))\ndraw_mesh(mesh)",
    "from helpers.pictures.explorer import sharding_explorer\n\nsharding_explorer()",
]


@pytest.fixture(scope="module")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        pytest.skip(INSTALL_HINT)
    pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed "
                        "(it is in requirements.txt: make clean && make test-browser)")
    return path


def _live_children() -> dict:
    out = {}
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out[(p.pid, p.create_time())] = p
        except psutil.NoSuchProcess:
            pass
    return out


def _expected(view: dict, spec0: str):
    """What helpers.pictures.explorer computes for the controls shown, with spec entry 0 set to spec0."""
    from helpers.pictures.explorer import ORDERS, ExplorerState

    spec = [spec0, *view["spec"][1:]]
    state = ExplorerState(int(view["hosts"]), int(view["devices_per_host"]), order_value(view, ORDERS),
                          view["shape"], spec)
    return state, state.render(png=False)


def _check_explorer(lab_page: LabPage, prefix: str, require: str | None = None) -> dict:
    """Change spec entry 0; the picture and the text must change to what this process computes."""
    import jax

    explorer = lab_page.explorer()
    before = lab_page.explorer_view(explorer)
    assert len(before["spec_options"][0]) > 0, f"no spec dropdown in the explorer: {before}"
    shown_state, shown = _expected(before, before["spec"][0])
    assert shown.error is None and not before["error"], (before["error"], shown.error)
    assert collapse(before["text"]) == collapse(shown.text), "the explorer's text is not what it computes"
    assert before["picture_width"] > 0 and before["picture_visible"]
    assert f"jax.devices()[:{shown_state.hosts * shown_state.devices_per_host}]" in before["code"]
    assert jax.device_count() >= int(before["hosts"]) * int(before["devices_per_host"])
    lab_page.screenshot(explorer, ARTIFACTS / f"{prefix}-1-before.png")

    choice = next((c for c in SPEC_0_CHOICES if c != before["spec"][0] and c in before["spec_options"][0]
                   and (r := _expected(before, c)[1]).error is None and r.text != shown.text), None)
    assert choice, f"no spec entry for dim 0 changes the layout of {before}"
    state, result = _expected(before, choice)
    explorer.locator(".explorer-spec-0 select").select_option(value=choice)
    lab_page.page.wait_for_function(
        """([src, text]) => { const e = document.querySelector('.explorer');
             const img = e.querySelector('img.explorer-picture');
             const pre = e.querySelector('.explorer-text pre');
             const error = e.querySelector('.explorer-error');
             return (error && error.innerText.trim())  // shown instead of a picture: fail below
                    || (img.src !== src && img.complete && img.naturalWidth > 0 && pre
                        && pre.innerText.trim() !== text.trim()); }""",
        arg=[before["picture_src"], before["text"]], timeout=60_000)
    after = lab_page.explorer_view(explorer)
    lab_page.screenshot(explorer, ARTIFACTS / f"{prefix}-2-after.png")

    assert not after["error"], f"after choosing {choice} for dim 0 the explorer shows: {after['error']}"
    assert after["spec"][0] == choice
    assert after["picture_src"] != before["picture_src"] and after["picture_width"] > 0
    assert collapse(after["text"]) == collapse(result.text), (
        f"after choosing {choice} for dim 0 the explorer shows:\n{after['text']}\nexpected:\n{result.text}")
    assert collapse(after["code"]) == collapse(state.code())
    if require:
        assert require in after["text"], after["text"]
    return {"before": before, "after": after, "choice": choice}


def _run_in_browser(tmp_path: Path, chromium: str, root: Path, name: str, prefix: str,
                    require: str | None = None) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob(f"{prefix}-*.png"):
        old.unlink()
    started = time.monotonic()
    children_before = _live_children()
    lab = JupyterLab(root, tmp_path / "lab")
    phases = {}

    def phase(name):
        phases[name] = round(time.monotonic() - started - sum(phases.values()), 1)

    with lab:
        phase("lab start")
        with sync_playwright() as pw, chromium_context(pw, tmp_path, chromium) as context:
            lab_page = LabPage(context.new_page(), lab)
            try:
                lab_page.open_notebook(name)
                phase("browser + open")
                state = lab_page.run_all(timeout=120)
                phase("run all")
                errors = {c["index"]: c["errors"] for c in state["cells"] if c["errors"]}
                assert not errors, f"cells raised (cell index: error): {errors}"
                assert state["run"].get("ok") is True, f"Run All reported {state['run']}"
                unnumbered = [c["index"] for c in state["cells"]
                              if c["count"] is None or not c["prompt"].strip("[]: ").isdigit()]
                assert not unnumbered, f"code cells without an execution number: {unnumbered}"
                tracebacks = lab_page.stderr_tracebacks()
                assert not tracebacks, "a Traceback on stderr:\n" + "\n---\n".join(tracebacks)
                images = lab_page.png_images()
                assert images, "no image/png output rendered"
                assert all(i["width"] > 0 and i["height"] > 0 for i in images), images
                _check_explorer(lab_page, prefix, require)
                phase("explorer")
            except BaseException:
                try:
                    lab_page.page.screenshot(path=str(ARTIFACTS / f"{prefix}-failure.png"))
                except Exception:  # the screenshot is a courtesy; keep the real error
                    pass
                if lab_page.console_errors:
                    print("browser page errors:", *lab_page.console_errors, sep="\n")
                print("JupyterLab log (tail):\n" + lab.log_tail())
                raise
    phase("shutdown")
    assert not lab.survivors, f"still running after SIGTERM and SIGKILL: {lab.survivors}"
    # Chromium and Playwright's driver are gone too (defunct entries do not count).
    new = {k: p for k, p in _live_children().items() if k not in children_before}
    _gone, alive = psutil.wait_procs(list(new.values()), timeout=10)
    alive = [p for p in alive if JupyterLab.is_alive(p)]
    assert not alive, f"processes left behind: {[(p.pid, p.name()) for p in alive]}"
    print(f"{name}: JupyterLab start to shutdown took {time.monotonic() - started:.1f} s {phases}; "
          f"screenshots: {ARTIFACTS}/{prefix}-*.png"
          + (f"; needed SIGKILL: {lab.killed}" if lab.killed else ""))


def test_harness_notebook_runs_and_the_explorer_reacts(tmp_path, chromium):
    """The harness itself, on a small generated notebook (always available)."""
    root = tmp_path / "notebooks"
    root.mkdir()
    write_notebook(root / "browser_harness.ipynb", HARNESS_CELLS)
    _run_in_browser(tmp_path, chromium, root, "browser_harness.ipynb", "harness",
                    require="8 tiles")


def test_partition_specs_notebook_in_jupyterlab(tmp_path, chromium):
    """notebooks/02_partition_specs.ipynb: runs clean, figures render, the explorer reacts."""
    if not (NOTEBOOKS / PARTITION_SPECS).exists():
        pytest.skip(f"notebooks/{PARTITION_SPECS} does not exist yet")
    root = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "src",
                                                                   "__pycache__"))
    strip_outputs(root / PARTITION_SPECS)
    _run_in_browser(tmp_path, chromium, root, PARTITION_SPECS, "02_partition_specs")
