"""The workshop hub (tools/hub.py, hub/jupyterhub_config.py): learners log in, get their own
server and files, cannot read each other's, and their real multi-process runs stay apart.

Needs root (it makes Unix accounts) and the hub's pins (`make test` installs them); elsewhere the
tests are skipped with the reason. Every account, server and process a test made is gone after it.
Each test owns what it makes: its learners' names are its own (pytest-xdist may run this module's
fixture on several workers at once), and it removes only those accounts, never another's.
"""
from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import sys
import threading
from pathlib import Path

import psutil
import pytest
import requests
from processes import survivors

from tools import hub
from tools.hub_client import Learner

ROOT = Path(__file__).resolve().parents[1]


def _own_names(*roles: str) -> list[str]:
    """Learner names no other test or worker uses: jmc (course accounts), 6 random hex digits, a role."""
    tag = secrets.token_hex(3)
    return [f"jmc{tag}{role}" for role in roles]


ANA, BO, CHEN = LEARNERS = _own_names("ana", "bo", "chen")  # three, as the issue asks

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(hub.PROXY, os.X_OK),
    reason="the hub needs root and its proxy (make test installs it with npm)")


def _uids(names) -> set[int]:
    return {pwd.getpwnam(n).pw_uid for n in names if hub.learner_account(n)}


def _running_as(uids: set[int]) -> list[int]:
    return [p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real in uids]


def _start_hub(token: str, state: Path) -> hub.Hub:
    """A hub on free ports. A port is free when chosen and may be another process's a moment
    later (the suite runs beside itself): a hub that exited at start is started again, twice."""
    for attempt in range(3):
        try:
            return hub.Hub(LEARNERS, hub.free_port(), token=token, state=state)
        except hub.HubError as error:
            if "exited at start" not in str(error) or attempt == 2:
                raise


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A hub on a free port with three learner accounts and a service token; torn down after."""
    if (folder := hub.closed_folder()) is not None:
        pytest.skip(f"the hub's learners cannot reach this clone: {folder} is closed to other users")
    try:
        passwords = {name: hub.make_account(name) for name in LEARNERS}
        uids = _uids(LEARNERS)
        token = secrets.token_hex(16)
        running = _start_hub(token, tmp_path_factory.mktemp("hub"))
        try:
            yield running, passwords, token
        finally:
            running.stop()
        assert not survivors(_running_as(uids)), "a learner's process outlived the hub"
    finally:
        assert sorted(hub.remove_accounts(LEARNERS)) == sorted(LEARNERS)
    assert not any(hub.learner_account(n) for n in LEARNERS)


@pytest.fixture(autouse=True)
def hub_log_when_a_test_fails(request):
    """The hub's log tail, printed after each test that uses the hub: pytest shows it when one fails."""
    yield
    if "served" in request.fixturenames:
        running = request.getfixturevalue("served")[0]
        print("hub log (tail):\n" + (running.state / "jupyterhub.log").read_text()[-4000:])


def test_a_learner_logs_in_with_their_password_and_a_wrong_one_is_refused(served):
    running, passwords, _ = served
    session = requests.Session()
    page = session.get(f"{running.url}/hub/login", timeout=10)
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.text)[1]
    wrong = session.post(f"{running.url}/hub/login", timeout=10, allow_redirects=False,
                         data={"username": ANA, "password": "not-it", "_xsrf": xsrf})
    assert wrong.status_code == 403 and "Invalid username or password" in wrong.text
    right = session.post(f"{running.url}/hub/login", timeout=10, allow_redirects=False,
                         data={"username": ANA, "password": passwords[ANA], "_xsrf": xsrf})
    assert right.status_code == 302, right.text[:300]


def test_each_learner_has_a_server_of_their_own_and_cannot_read_anothers_files(served):
    running, _, token = served
    ana = Learner(running.url, ANA, token).start()
    try:
        who = ana.run("import os, pathlib\nprint(os.getuid(), pathlib.Path.cwd())")
        assert who.text.split() == [str(pwd.getpwnam(ANA).pw_uid), f"/home/{ANA}/course"]
        peek = ana.run(f"sorted(p.name for p in __import__('pathlib').Path('/home/{BO}').iterdir())")
        assert peek.error.startswith("PermissionError"), peek
        read = ana.run(f"open('/home/{BO}/course/00_fake_devices.ipynb').read()")
        assert read.error.startswith("PermissionError"), read
        mine = ana.run("from helpers.exercises import check\nfrom helpers import progress_store\n"
                       "print(progress_store.progress_file())")
        assert mine.text.strip().startswith(f"/home/{ANA}/"), mine
    finally:
        ana.close()


def test_three_learners_run_notebook_08s_two_host_job_at_once_and_stay_apart(served):
    running, _, token = served
    learners = [Learner(running.url, name, token).start() for name in LEARNERS]
    job = ("import os\nfrom helpers.files import course_file\nfrom helpers.launch import run\n"
           "r = run(course_file('scripts/train_dp.py'), hosts=2, devices_per_host=4, timeout=240)\n"
           "print(os.environ['HELPERS_LAUNCH_LOOPBACK'], r.message, r.hosts[0].stdout.splitlines()[-3])")
    outputs = {}
    threads = [threading.Thread(target=lambda l=l: outputs.__setitem__(l.name, l.run(job))) for l in learners]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        for l in learners:
            l.close()
    addresses = set()
    for name in LEARNERS:
        out = outputs[name]
        assert not out.error, (name, out)
        address, message = out.text.split(" ", 1)
        uid = pwd.getpwnam(name).pw_uid
        assert address == f"127.{(uid >> 8) & 255}.{uid & 255}.1"
        assert "all hosts finished" in message and "final loss 0.258558" in message, out.text
        addresses.add(address)
    assert len(addresses) == 3


# ------------------------------------------------------------------ bad input, nothing started

def _make_hub(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "tools/hub.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=env)


def test_a_learner_name_with_odd_characters_is_one_line_and_nothing_is_made():
    [good] = _own_names("ana")
    out = _make_hub("--learners", f"{good} Bo!", "--port", str(hub.free_port()))
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "learner name 'Bo!' cannot be a Unix account" in out.stderr
    assert hub.learner_account(good) is None, "the valid name was made an account all the same"


def test_the_hubs_port_in_use_is_one_line_and_nothing_is_started():
    [zed] = _own_names("zed")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = _make_hub("--learners", zed, "--port", str(port))
    assert out.returncode == 2 and f"port {port} on 127.0.0.1 is in use" in out.stderr
    assert out.stderr.count("\n") == 1 and hub.learner_account(zed) is None


def test_a_missing_proxy_is_one_line(monkeypatch):
    with pytest.raises(hub.HubError, match="no proxy at .*: run make hub"):
        hub.preflight(hub.free_port(), proxy=ROOT / "hub" / "no-such-proxy")


def test_an_account_that_is_not_a_learners_is_never_touched():
    with pytest.raises(hub.HubError, match="already exists and is not a course learner's"):
        hub.make_account("root")
    assert hub.remove_accounts(["root", "nosuchaccount"]) == [] and hub.learner_account("root") is False


def test_remove_with_learners_removes_those_and_leaves_every_other_learner():
    kept, removed = _own_names("kept", "gone")
    try:
        for name in (kept, removed):
            hub.make_account(name)
        out = _make_hub("remove", "--learners", removed)
        assert out.returncode == 0 and out.stdout == f"removed 1 learner account(s): {removed}\n", out
        assert hub.learner_account(removed) is None and not Path(f"/home/{removed}").exists()
        assert hub.learner_account(kept) is True and Path(f"/home/{kept}/course").is_dir()
    finally:
        hub.remove_accounts([kept, removed])
    assert hub.learner_account(kept) is None


# ------------------------------------------------------------------ one learner, in a real browser

class _LearnersLab:
    """What browser_support.LabPage needs of a JupyterLab: here, a learner's server behind the hub."""

    def __init__(self, running: hub.Hub, name: str):
        self.running, self.name = running, name

    def url(self, path: str) -> str:
        return f"{self.running.url}/user/{self.name}{path}"

    def log_tail(self, chars: int = 4000) -> str:
        return (self.running.state / "jupyterhub.log").read_text()[-chars:]

    def record_processes(self) -> None:
        """The hub stops every learner process itself (the fixture checks)."""


@pytest.mark.browser
def test_a_learner_logs_in_opens_notebook_00_and_runs_it_in_a_browser(served, tmp_path):
    from browser_support import INSTALL_HINT, LabPage, chromium_context, find_chromium

    chromium = find_chromium()
    if chromium is None:
        pytest.skip(INSTALL_HINT)
    from playwright.sync_api import sync_playwright

    running, passwords, _ = served
    artifacts = ROOT / "test-artifacts" / "browser"
    artifacts.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw, chromium_context(pw, tmp_path, chromium) as context:
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{running.url}/hub/login")
        page.fill("#username_input", BO)
        page.fill("#password_input", passwords[BO])
        page.click("#login_submit")
        page.wait_for_url(re.compile(rf".*/user/{BO}/lab.*"), timeout=90_000)
        lab_page = LabPage(page, _LearnersLab(running, BO))
        try:
            lab_page.open_notebook("00_fake_devices.ipynb")
            state = lab_page.run_all(timeout=180)
            errors = {c["index"]: c["errors"] for c in state["cells"] if c["errors"]}
            assert not errors, f"cells raised (cell index: error): {errors}"
            assert all(c["count"] for c in state["cells"]), "a code cell has no execution number"
            assert not lab_page.stderr_tracebacks()
            shown = page.evaluate("() => Array.from(document.querySelectorAll('.jp-OutputArea-output'))"
                                  ".map(e => e.innerText).filter(t => t.trim())")
            assert any("JAX already started with 8 cpu device(s)" in text for text in shown), shown[:5]
            page.screenshot(path=str(artifacts / "hub-learner-00.png"))
        except BaseException:
            page.screenshot(path=str(artifacts / "hub-learner-failure.png"))
            print("hub log (tail):\n" + lab_page.lab.log_tail())
            raise


def test_a_clone_in_a_closed_folder_is_named_and_the_advice_is_to_move_it():
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        base.chmod(0o755)
        (base / "home" / "course").mkdir(parents=True)
        (base / "home").chmod(0o700)
        assert hub.closed_folder(base / "home" / "course") == base / "home"
        message = hub.closed_clone_message(base / "home")
        assert "Clone the course where they can enter" in message and "Python" not in message
        (base / "home").chmod(0o755)
        assert hub.closed_folder(base / "home" / "course") is None
    finally:
        shutil.rmtree(base)
