"""Support for tests/test_browser.py: a throw-away JupyterLab server and headless Chromium.

- `JupyterLab(root, workdir)`: JupyterLab from this environment (`sys.executable -m jupyter lab`)
  on a free localhost port with a random token and its own settings, workspaces, config,
  data and runtime folders. Leaving the `with` block stops it: SIGTERM, then SIGKILL for any
  recorded process (the server, its kernels and their children) still running; `survivors`
  then lists what could not be stopped (it should be empty).
- `chromium_context(playwright, workdir)`: Debian's Chromium, headless, with a fresh profile
  (`playwright install` cannot download browsers here).
- `LabPage`: open a notebook, run every cell, read what the notebook shows, and drive the
  sharding explorer (helpers/pictures/explorer.py).
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import psutil

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
INSTALL_HINT = ("no Chromium found at " + ", ".join(CHROMIUM_CANDIDATES) + "; install Debian's "
                "browser with: sudo apt-get install chromium   (then run: make test-browser)")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
VIEWPORT = {"width": 1280, "height": 1800}  # tall: the whole explorer fits in one screenshot

# Per-run JupyterLab user settings: no news pop-up, no autosave, every cell kept in the page.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}


def find_chromium() -> str | None:
    """The first Chromium binary that exists, or None."""
    return next((p for p in CHROMIUM_CANDIDATES if os.path.exists(p)), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def strip_outputs(path: Path) -> None:
    """Remove outputs, execution counts and saved widget state: the browser must make its own."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
    nb.get("metadata", {}).pop("widgets", None)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def write_notebook(path: Path, sources: list[str]) -> Path:
    """A minimal nbformat 4 notebook of code cells, on the python3 kernel."""
    cells = [{"cell_type": "code", "id": f"cell-{i}", "metadata": {}, "execution_count": None,
              "outputs": [], "source": src} for i, src in enumerate(sources)]
    nb = {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                       "language_info": {"name": "python"}}}
    path.write_text(json.dumps(nb, indent=1) + "\n", encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- JupyterLab
class JupyterLab:
    """A JupyterLab server for one test; use as a context manager."""

    START_TIMEOUT = 60
    STOP_TIMEOUT = 20

    def __init__(self, root: Path, workdir: Path):
        self.root, self.workdir = Path(root), Path(workdir)
        self.token = secrets.token_hex(24)
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / "jupyterlab.log"
        self._recorded: dict[tuple[int, float], psutil.Process] = {}
        self.killed: list[str] = []  # what needed SIGKILL (reported, not an error by itself)
        self.survivors: list[str] = []  # what was still running after SIGKILL (an error)

    # -- start
    def _prepare_dirs(self) -> dict:
        dirs = {name: self.workdir / name for name in
                ("settings", "workspaces", "config", "data", "runtime", "ipython")}
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        for plugin, values in LAB_SETTINGS.items():
            f = dirs["settings"] / f"{plugin}.jupyterlab-settings"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps(values, indent=2), encoding="utf-8")
        return dirs

    def _env(self, dirs: dict) -> dict:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("JUPYTER", "JPY_")) and k not in ("MPLBACKEND", "IPYTHONDIR")}
        env.update(JUPYTER_CONFIG_DIR=str(dirs["config"]), JUPYTER_DATA_DIR=str(dirs["data"]),
                   JUPYTER_RUNTIME_DIR=str(dirs["runtime"]), IPYTHONDIR=str(dirs["ipython"]),
                   JUPYTER_PLATFORM_DIRS="1", PYTHONUNBUFFERED="1")
        return env

    def _command(self, dirs: dict) -> list[str]:
        return [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
                "--port-retries=0", "--expose-app-in-browser",
                "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
                f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
                f"--LabApp.user_settings_dir={dirs['settings']}",
                f"--LabApp.workspaces_dir={dirs['workspaces']}"]

    def start(self) -> "JupyterLab":
        dirs = self._prepare_dirs()
        env = self._env(dirs)
        for _attempt in range(3):  # the free port can be taken before the server binds it
            self.port = free_port()
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(self._command(dirs), cwd=self.root, env=env,
                                             stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
            self.record_processes()
            if self._wait_ready():
                return self
            if "already in use" not in self.log_tail():
                break
        raise RuntimeError(f"JupyterLab did not start within {self.START_TIMEOUT} s:\n{self.log_tail()}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url("/api/status"), timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.2)
        return False

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"http://127.0.0.1:{self.port}{path}{sep}token={self.token}"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    # -- processes
    def record_processes(self) -> None:
        """Remember the server and all its descendants (kernels are not in its process group)."""
        if self.proc is None:
            return
        try:
            server = psutil.Process(self.proc.pid)
            procs = [server, *server.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for p in procs:
            try:
                self._recorded.setdefault((p.pid, p.create_time()), p)
            except psutil.NoSuchProcess:
                pass

    @staticmethod
    def is_alive(p: psutil.Process) -> bool:
        """Running and not defunct (a zombie has exited; only its parent can reap it)."""
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    @staticmethod
    def _describe(p: psutil.Process) -> str:
        try:
            return f"pid {p.pid}: {' '.join(p.cmdline())[:160]}"
        except psutil.Error:
            return f"pid {p.pid}"

    def stop(self) -> None:
        """SIGTERM the server (it shuts its kernels down), then SIGKILL whatever is left."""
        if self.proc is None:
            return
        self.record_processes()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
        others = [p for p in self._recorded.values() if p.pid != self.proc.pid]
        psutil.wait_procs([p for p in others if self.is_alive(p)], timeout=10)
        leftovers = [p for p in self._recorded.values() if self.is_alive(p)]
        for p in leftovers:
            self.killed.append(self._describe(p))
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        if self.proc.poll() is None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        psutil.wait_procs([p for p in leftovers if self.is_alive(p)], timeout=5)
        self.survivors = [self._describe(p) for p in self._recorded.values() if self.is_alive(p)]

    def __enter__(self) -> "JupyterLab":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


# ----------------------------------------------------------------------------- Chromium
@contextmanager
def chromium_context(playwright, workdir: Path, executable: str):
    """A headless Chromium browser context with a fresh profile, closed on exit."""
    profile = Path(workdir) / "chromium-profile"
    shutil.rmtree(profile, ignore_errors=True)
    context = playwright.chromium.launch_persistent_context(
        str(profile), executable_path=executable, headless=True, args=CHROMIUM_ARGS,
        viewport=VIEWPORT, device_scale_factor=1,
    )
    try:
        yield context
    finally:
        context.close()


# ----------------------------------------------------------------------------- the page
_NOTEBOOK_STATE = """() => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  if (!panel || !panel.content || !panel.sessionContext || !panel.content.widgets) return null;
  const session = panel.sessionContext.session;
  const kernel = session && session.kernel;
  const cells = [];
  panel.content.widgets.forEach((cell, index) => {
    if (cell.model.type !== 'code') return;
    const outputs = cell.model.outputs.toJSON();
    const prompt = cell.node.querySelector('.jp-InputPrompt');
    cells.push({
      index,
      count: cell.model.executionCount,
      prompt: prompt ? prompt.innerText.trim() : '',
      errors: outputs.filter(o => o.output_type === 'error').map(o => `${o.ename}: ${o.evalue}`),
    });
  });
  return {kernel: kernel ? kernel.status : 'none', path: panel.context.path,
          ready: panel.context.isReady, run: window.__runAll || null, cells};
}"""

_STDERR_TRACEBACKS = """() => Array.from(document.querySelectorAll(
    '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"], '
    + '.jp-RenderedText[data-mime-type="application/vnd.jupyter.stderr"]'))
  .map(e => e.innerText).filter(t => t.includes('Traceback'))"""

_PNG_IMAGES = """() => Array.from(document.querySelectorAll(
    '.jp-OutputArea-output[data-mime-type="image/png"] img'))
  .map(img => ({complete: img.complete, width: img.naturalWidth, height: img.naturalHeight}))"""


class LabPage:
    """One Playwright page showing one notebook in JupyterLab."""

    def __init__(self, page, lab: JupyterLab):
        self.page, self.lab = page, lab
        page.set_default_timeout(60_000)  # every Playwright action and wait is bounded
        self.console_errors: list[str] = []
        page.on("pageerror", lambda err: self.console_errors.append(str(err)))

    def state(self) -> dict | None:
        return self.page.evaluate(_NOTEBOOK_STATE)

    def _wait(self, what: str, predicate, timeout: float, interval: float = 0.25) -> dict:
        """Poll the notebook state until predicate(state) holds; TimeoutError saying what was seen."""
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.state()
            if state and predicate(state):
                return state
            time.sleep(interval)
        raise TimeoutError(f"waited {timeout:.0f} s for {what}; last notebook state: "
                           f"{json.dumps(state)[:2000]}\nJupyterLab log:\n{self.lab.log_tail(2000)}")

    def open_notebook(self, name: str, timeout: float = 90) -> dict:
        """Open `name` (relative to the server root) and wait for its kernel to be idle."""
        self.page.goto(self.lab.url(f"/lab/tree/{name}"), timeout=timeout * 1000)
        self.page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell",
                                    timeout=timeout * 1000)
        state = self._wait(f"{name} to open with an idle kernel",
                           lambda s: s["path"] == name and s["ready"] and s["kernel"] == "idle", timeout)
        self.lab.record_processes()  # the kernel now exists
        return state

    def run_all(self, timeout: float = 120) -> dict:
        """Run every cell; wait until the run is over, the kernel idle and no cell pending."""
        self.page.evaluate("""() => {
          window.__runAll = null;
          window.jupyterapp.commands.execute('notebook:run-all-cells').then(
            ok => { window.__runAll = {done: true, ok: ok}; },
            err => { window.__runAll = {done: true, error: String(err)}; });
        }""")

        def finished(s):
            return ((s["run"] or {}).get("done") and s["kernel"] == "idle"
                    and not any("*" in c["prompt"] for c in s["cells"]))

        state = self._wait("Run All to finish", finished, timeout)
        self.lab.record_processes()
        return state

    def stderr_tracebacks(self) -> list[str]:
        return self.page.evaluate(_STDERR_TRACEBACKS)

    def png_images(self, timeout: float = 60) -> list[dict]:
        """The image/png outputs, once every one of them has finished loading."""
        self.page.wait_for_function(
            f"() => ({_PNG_IMAGES})().every(i => i.complete)", timeout=timeout * 1000)
        return self.page.evaluate(_PNG_IMAGES)

    # -- the sharding explorer
    def explorer(self, timeout: float = 60):
        """The first sharding explorer, once its picture and text are shown."""
        explorer = self.page.locator(".explorer").first
        explorer.wait_for(state="attached", timeout=timeout * 1000)
        self.page.wait_for_function(
            """() => { const e = document.querySelector('.explorer');
                 const img = e && e.querySelector('img.explorer-picture');
                 const pre = e && e.querySelector('.explorer-text pre');
                 return img && img.complete && img.naturalWidth > 0 && pre && pre.innerText.trim(); }""",
            timeout=timeout * 1000)
        return explorer

    @staticmethod
    def explorer_view(explorer) -> dict:
        """What the explorer shows: control values (option labels), picture, text, error, code."""
        return explorer.evaluate("""e => {
          const sel = c => e.querySelector(`.${c} select`);
          // option.value is the label as given in Python (its text shows spaces as &nbsp;)
          const label = c => { const s = sel(c); return s ? s.value : null; };
          const img = e.querySelector('img.explorer-picture');
          const shape = e.querySelector('.explorer-shape input');
          const text = e.querySelector('.explorer-text');
          const error = e.querySelector('.explorer-error');
          const code = e.querySelector('.explorer-code');
          return {
            hosts: label('explorer-hosts'), devices_per_host: label('explorer-devices-per-host'),
            order: label('explorer-order'),
            shape: shape ? shape.value : null,
            spec: [0, 1, 2].map(i => label(`explorer-spec-${i}`)),
            spec_options: [0, 1, 2].map(i => sel(`explorer-spec-${i}`)
                ? Array.from(sel(`explorer-spec-${i}`).options).map(o => o.value) : []),
            picture_src: img ? img.src : null,
            picture_width: img ? img.naturalWidth : 0,
            picture_visible: !!(img && img.offsetParent),
            text: text ? text.innerText.replace(/\\s+$/, '') : null,
            error: error ? error.innerText.trim() : null,
            code: code ? code.innerText.trim() : null,
          };
        }""")

    def screenshot(self, explorer, path: Path) -> Path:
        """A screenshot of the page with the explorer scrolled into view."""
        path.parent.mkdir(parents=True, exist_ok=True)
        explorer.evaluate("e => e.scrollIntoView({block: 'start'})")
        self.page.wait_for_timeout(200)  # let the scroll settle before the picture
        self.page.screenshot(path=str(path))
        return path


def order_value(view: dict, orders: dict) -> str:
    """The explorer's mesh-order key ('contiguous' / 'interleaved') from the shown label."""
    for key, label in orders.items():
        if view["order"] in (key, label):
            return key
    raise AssertionError(f"unknown mesh order shown: {view['order']!r}")


def collapse(text: str) -> str:
    """Text with trailing spaces per line dropped (as the browser's innerText may)."""
    return "\n".join(line.rstrip() for line in re.sub(r"\r\n?", "\n", text).strip("\n").split("\n"))
