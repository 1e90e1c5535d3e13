"""`make hub`: JupyterHub serving the course to local learner accounts on 127.0.0.1 (as root).

    make hub                          # learners learner1..learner3
    make hub LEARNERS="ana bo chen"   # these names
    make hub HUB_PORT=8001
    .venv/bin/python tools/hub.py remove   # delete every learner account it made, homes too
    .venv/bin/python tools/hub.py remove --learners "ana bo"   # only these

Each learner is a Unix account made here (`useradd`, home mode 700, a random password, their
own copy of the notebooks in ~/course). The hub (hub/jupyterhub_config.py) logs them in with
that password and starts each one's JupyterLab as that user. Passwords are printed and kept in
build/hub/learners.txt (root only). Ctrl-C stops the hub and every learner's server; the accounts
stay (with their progress) until `remove`. Bad input (a name a Unix account cannot have, the
port in use, no proxy, not root) is one line and exit status 2, with nothing started.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import psutil
import requests

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "hub" / "jupyterhub_config.py"
PROXY = ROOT / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
STATE = ROOT / "build" / "hub"
LEARNER_PYTHON = ROOT / "build" / "hub-python"  # see learner_python()
LEARNER_BASE = ROOT / "build" / "hub-python-base"  # see _copied_python()
LOCKS = ROOT / "build" / "hub-locks"  # one tools/hub.py at a time changes accounts or LEARNER_PYTHON
MARKER = "jax-multihost-course learner"  # the accounts' comment field: only these are ever changed
NAME = re.compile(r"^[a-z][a-z0-9]{0,15}$")
START_SECONDS = 30.0


class HubError(Exception):
    """Something the instructor must fix first; its message is one line."""


def check_names(names: list[str]) -> list[str]:
    """The learners' names, each one a Unix account can have, no two alike."""
    if not names:
        raise HubError("no learners: give at least one name, e.g. LEARNERS=\"ana bo\"")
    for name in names:
        if not NAME.match(name):
            raise HubError(f"learner name {name!r} cannot be a Unix account: use 1 to 16 lower-case "
                           "letters and digits, starting with a letter (e.g. ana, learner2)")
    if len(set(names)) != len(names):
        raise HubError(f"a learner name appears twice in {' '.join(names)}")
    return names


def learner_account(name: str) -> bool | None:
    """True: an account this tool made; False: someone else's; None: no such account."""
    try:
        return pwd.getpwnam(name).pw_gecos == MARKER
    except KeyError:
        return None


@contextlib.contextmanager
def _locked(what: str):
    """Hold `what`'s lock: two hubs started at once (two test workers, say) take turns."""
    LOCKS.mkdir(parents=True, exist_ok=True)
    with open(LOCKS / what, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def make_account(name: str) -> str:
    """Make (or renew) a learner's account with a copy of the notebooks; return its new password."""
    with _locked("accounts"):
        if learner_account(name) is False:
            raise HubError(f"an account named {name!r} already exists and is not a course learner's: "
                           "choose another name")
        if learner_account(name) is None:
            subprocess.run(["useradd", "--create-home", "--user-group", "--shell", "/bin/bash",
                            "--comment", MARKER, name], check=True, capture_output=True)
        password = secrets.token_urlsafe(9)
        subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True,
                       capture_output=True)
    home = Path(pwd.getpwnam(name).pw_dir)
    course = home / "course"
    course.mkdir(exist_ok=True)
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        if not (course / notebook.name).exists():  # a returning learner keeps their own work
            shutil.copy(notebook, course)
    subprocess.run(["chown", "-R", f"{name}:{name}", str(home)], check=True)
    home.chmod(0o700)
    return password


def learner_accounts() -> list[str]:
    """Every account this tool made, on the whole machine."""
    return [entry.pw_name for entry in pwd.getpwall() if entry.pw_gecos == MARKER]


def remove_accounts(names: list[str]) -> list[str]:
    """Delete these learners' accounts (their processes, homes and groups); the names removed.

    A name that is not a course learner's account (someone else's, or none) is left alone.
    """
    gone = []
    for name in names:
        if not learner_account(name):
            continue
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        time.sleep(0.1)
        with _locked("accounts"):
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        gone.append(name)
    return gone


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def preflight(port: int, proxy: Path = PROXY) -> None:
    """Refuse, in one line, what would make the hub fail to start."""
    if os.geteuid() != 0:
        raise HubError("make hub needs root: it makes a Unix account per learner and starts each "
                       "learner's server as that user")
    if shutil.which("jupyterhub", path=str(Path(sys.executable).parent)) is None:
        raise HubError("jupyterhub is not installed in this environment: run make hub (it installs "
                       "requirements-hub.txt)")
    if not os.access(proxy, os.X_OK):
        raise HubError(f"no proxy at {proxy}: run make hub (npm ci in hub/ installs "
                       "configurable-http-proxy), or install Node.js and npm first")
    if (folder := closed_folder()) is not None:
        raise HubError(closed_clone_message(folder))
    if not _port_free(port):
        raise HubError(f"port {port} on 127.0.0.1 is in use: stop what holds it, or choose another "
                       "with make hub HUB_PORT=N")


def _others_can_run(path: Path) -> bool:
    """Whether a user other than its owner may run `path`: every folder above it can be entered."""
    path = path.resolve()
    return all(p.stat().st_mode & stat.S_IXOTH for p in (path, *path.parents))


def closed_folder(path: Path = ROOT) -> Path | None:
    """The outermost folder above or at `path` that other users cannot enter (root's home, mode 0700, say)."""
    path = path.resolve()
    return next((p for p in (*reversed(path.parents), path) if not p.stat().st_mode & stat.S_IXOTH), None)


def closed_clone_message(folder: Path) -> str:
    """What to do when learners cannot reach the course: no other Python would help."""
    return (f"learners cannot reach this clone of the course: {folder} is closed to other users, and their "
            f"servers run as them. Clone the course where they can enter (e.g. /srv or /opt), or open {folder} "
            f"to them with chmod o+x {folder}, and run make hub there")


def _system_python() -> Path | None:
    """The system's pythonX.Y of this X.Y, if every learner can run it."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(version, path="/usr/bin:/usr/local/bin")
    return Path(system) if system and _others_can_run(Path(system)) else None


_NOT_COPIED = ("site-packages", "test", "idlelib", "tkinter", "turtledemo", "config-*")


def _copied_python() -> Path:
    """This Python's interpreter, library and standard library, copied once to LEARNER_BASE.

    For a Python learners cannot reach (pyenv's, in root's home) when the system has none of
    its version (Debian 12's is 3.11). The copy's interpreter finds its standard library next to
    itself; its libpython comes from LD_LIBRARY_PATH (learner_library_path()).
    """
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = LEARNER_BASE / "bin" / version
    if not python.exists():
        base = Path(sys.base_prefix)
        partial = LEARNER_BASE.with_name(LEARNER_BASE.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        (partial / "bin").mkdir(parents=True)
        shutil.copy2(base / "bin" / version, partial / "bin" / version)
        shutil.copytree(base / "lib" / version, partial / "lib" / version, symlinks=True,
                        ignore=shutil.ignore_patterns(*_NOT_COPIED))
        for library in (base / "lib").glob(f"lib{version}*.so*"):
            shutil.copy2(library, partial / "lib", follow_symlinks=False)
        partial.rename(LEARNER_BASE)  # whole or not at all
    return python


def learner_library_path() -> str:
    """LD_LIBRARY_PATH a learner's processes need: the copy's libpython, or nothing."""
    return str(LEARNER_BASE / "lib") if (LEARNER_BASE / "lib").is_dir() else ""


def learner_python() -> Path:
    """A Python every learner can run, with the course's packages.

    The course's own when learners can reach its interpreter (a venv of /usr/bin/python3, of
    /opt/...). A venv of pyenv's Python, whose interpreter sits in root's home, is out of their
    reach: then a venv, made once in build/hub-python, of the system's pythonX.Y (the same X.Y)
    or, when there is none, of a copy of this interpreter (_copied_python); its one .pth file
    adds the course's site-packages.
    """
    if _others_can_run(Path(sys.executable)):
        return Path(sys.executable)
    python = LEARNER_PYTHON / "bin" / "python"
    with _locked("hub-python"):
        if not python.exists():
            base = _system_python() or _copied_python()
            subprocess.run([str(base), "-m", "venv", "--without-pip", str(LEARNER_PYTHON)], check=True,
                           capture_output=True)
        packages = sysconfig.get_paths()["purelib"]
        target = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                     capture_output=True, text=True, check=True).stdout.strip())
        (target / "_course.pth").write_text(f"import site; site.addsitedir({packages!r})\n")
        for folder in (LEARNER_PYTHON, LEARNER_PYTHON.parent):  # build/ too: learners pass through it
            folder.chmod(0o755)
    if not _others_can_run(python.resolve()):
        raise HubError(f"learners cannot run {python.resolve()}: a folder above it is closed to them; "
                       "install the course with a Python they can reach (e.g. one in /usr or /opt)")
    return python


def _exited(pid: int, timeout: float) -> bool:
    """Whether child `pid` has exited within `timeout` seconds, without reaping it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        time.sleep(0.1)
    return False


def _signal_group(group: int, sig: int) -> None:
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        pass


class Hub:
    """A running JupyterHub and its proxy; `stop()` ends it and every learner's process."""

    def __init__(self, learners: list[str], port: int, *, token: str | None = None,
                 proxy: Path = PROXY, state: Path = STATE):
        self.learners, self.port, self.token, self.state = learners, port, token, state
        self.url = f"http://127.0.0.1:{port}"
        state.mkdir(parents=True, exist_ok=True)
        state.chmod(0o700)
        self.log = open(state / "jupyterhub.log", "w")
        env = {**os.environ, "COURSE_HUB_PORT": str(port), "COURSE_HUB_API_PORT": str(free_port()),
               "COURSE_HUB_PROXY_API_PORT": str(free_port()), "COURSE_HUB_STATE": str(state),
               "COURSE_HUB_LEARNERS": ",".join(learners), "COURSE_HUB_PROXY": str(proxy),
               "COURSE_HUB_PYTHON": str(learner_python()),
               "COURSE_HUB_LIBRARY_PATH": learner_library_path(),
               "COURSE_HUB_PREFIX": sys.prefix,
               "COURSE_HUB_SERVICE_TOKEN": token or ""}
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "jupyterhub"), "-f", str(CONFIG)], cwd=state,
            env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_ready(state / "jupyterhub.log")
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, log: Path) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = [line for line in log.read_text().splitlines() if line.strip()][-1:]
                raise HubError(f"the hub exited at start ({tail[0] if tail else 'no output'}); "
                               f"its log: {log}")
            try:
                if requests.get(f"{self.url}/hub/health", timeout=1).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        raise HubError(f"the hub did not answer on {self.url} within {START_SECONDS:g} s; its log: {log}")

    def stop(self) -> None:
        """Stop the hub (it stops the learners' servers), then its proxy and anything a learner runs.

        The hub's process group is signalled only while the hub is not yet reaped: until then no
        other process can be given its group id (a reaped one's id may already be another's).
        """
        group = self.proc.pid
        if self.proc.returncode is None:
            _signal_group(group, signal.SIGTERM)
            if not _exited(group, 15):
                _signal_group(group, signal.SIGKILL)
                _exited(group, 5)
            _signal_group(group, signal.SIGKILL)  # the proxy, if it outlived the hub
            self.proc.wait()
        elif not psutil.pid_exists(group):  # reaped at start (it failed): kill what is left of
            for proc in psutil.process_iter():  # its group, unless its number is another's now
                try:
                    if os.getpgid(proc.pid) == group:
                        proc.kill()
                except (psutil.Error, ProcessLookupError):
                    pass
        for name in self.learners:
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        self.log.close()

    def __enter__(self) -> "Hub":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve(learners: list[str], port: int) -> int:
    """`make hub`: accounts, the hub, a table of logins; runs until Ctrl-C."""
    check_names(learners)
    preflight(port)
    passwords = {name: make_account(name) for name in learners}
    STATE.mkdir(parents=True, exist_ok=True)
    logins = STATE / "learners.txt"
    logins.write_text("".join(f"{n} {p}\n" for n, p in passwords.items()))
    logins.chmod(0o600)
    with Hub(learners, port) as hub:
        print(f"JupyterHub on http://127.0.0.1:{port}/ for {len(learners)} learners "
              f"(logins also in {logins.relative_to(ROOT)}):")
        for name, password in passwords.items():
            print(f"  {name:16} {password}")
        print("Ctrl-C stops the hub and every learner's server; the accounts stay "
              "(.venv/bin/python tools/hub.py remove deletes them).", flush=True)
        try:
            while hub.proc.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        ended = hub.proc.poll()
    if ended is not None:
        print(f"make hub: the hub stopped by itself (exit status {ended}); its log: "
              f"{STATE / 'jupyterhub.log'}", file=sys.stderr)
        return 1
    print("the hub and every learner's server are stopped")
    return 0


def _names(text: str) -> list[str]:
    return re.split(r"[\s,]+", text.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/hub.py", description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", choices=("serve", "remove"), default="serve")
    parser.add_argument("--learners", default=None,
                        help="learner names, separated by spaces or commas (serve: learner1 learner2 "
                             "learner3; remove: every course learner's account)")
    parser.add_argument("--port", type=int, default=8000)
    opts = parser.parse_args(argv)
    try:
        if opts.command == "remove":
            if os.geteuid() != 0:
                raise HubError("removing accounts needs root")
            gone = remove_accounts(_names(opts.learners) if opts.learners else learner_accounts())
            print(f"removed {len(gone)} learner account(s): {' '.join(gone) or '-'}")
            return 0
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop as on Ctrl-C
        return serve(_names(opts.learners or "learner1 learner2 learner3"), opts.port)
    except HubError as error:
        print(f"make hub: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
