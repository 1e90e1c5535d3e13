"""JupyterHub for a workshop on one machine: `make hub` (tools/hub.py) starts it with this file.

Every learner is a Unix account that tools/hub.py made (`useradd`, a random password), logs in
with that password (PAM), and gets a JupyterLab server of their own, started as their own user
by JupyterHub's LocalProcessSpawner, on their own copy of the notebooks in ~/course. Homes are
mode 700, so no learner can read another's files; progress is kept in each learner's home
(helpers.progress_store falls back there, the repository not being writable to them).
INSTRUCTORS.md says why this spawner. tools/hub.py passes the values below in COURSE_HUB_*.
"""
import os
import pwd
from pathlib import Path

c = get_config()  # noqa: F821 - JupyterHub's config loader defines it

ROOT = Path(__file__).resolve().parents[1]
PYTHON = os.environ["COURSE_HUB_PYTHON"]  # the course's Python, as learners can run it (tools/hub.py)
STATE = Path(os.environ["COURSE_HUB_STATE"])
LEARNERS = set(os.environ["COURSE_HUB_LEARNERS"].split(","))


def loopback_of(spawner) -> str:
    """The learner's own loopback address, 127.<uid high>.<uid low>.1: the course launcher's
    coordinators bind there, so two learners' runs never meet, whatever ports they pick."""
    uid = pwd.getpwnam(spawner.user.name).pw_uid
    return f"127.{(uid >> 8) & 255}.{uid & 255}.1"


c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = int(os.environ["COURSE_HUB_PORT"])
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ["COURSE_HUB_API_PORT"])
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ['COURSE_HUB_PROXY_API_PORT']}"
c.ConfigurableHTTPProxy.command = [os.environ["COURSE_HUB_PROXY"]]
c.ConfigurableHTTPProxy.should_start = True
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(STATE / "jupyterhub.pid")
c.JupyterHub.cleanup_servers = True  # a stopped hub stops every learner's server
c.JupyterHub.cleanup_proxy = True

c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.open_sessions = False  # no login sessions (utmp, systemd) for a notebook server
c.Authenticator.allowed_users = LEARNERS

c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [PYTHON, "-m", "jupyterhub.singleuser"]
c.Spawner.args = ["--LabApp.expose_app_in_browser=True"]  # window.jupyterapp, for the browser test
c.Spawner.notebook_dir = "~/course"
c.Spawner.default_url = "/lab/tree/00_fake_devices.ipynb"
c.Spawner.start_timeout = 60
c.Spawner.http_timeout = 60
c.Spawner.environment = {
    "PATH": f"{Path(PYTHON).parent}:/usr/local/bin:/usr/bin:/bin",
    "HELPERS_LAUNCH_LOOPBACK": loopback_of,
    # the course environment's Jupyter config and data (JupyterLab's server extension, its
    # prebuilt extensions such as ipywidgets'), also when PYTHON is another prefix reading its packages
    "JUPYTER_CONFIG_PATH": os.path.join(os.environ["COURSE_HUB_PREFIX"], "etc", "jupyter"),
    "JUPYTER_PATH": os.path.join(os.environ["COURSE_HUB_PREFIX"], "share", "jupyter"),
}
if os.environ.get("COURSE_HUB_LIBRARY_PATH"):  # PYTHON is a copy whose libpython sits there (tools/hub.py)
    c.Spawner.environment["LD_LIBRARY_PATH"] = os.environ["COURSE_HUB_LIBRARY_PATH"]

# The tools' own client (tests, make bench-hub): starts servers and runs kernels through the hub.
if os.environ.get("COURSE_HUB_SERVICE_TOKEN"):
    c.JupyterHub.services = [{"name": "course-tools", "api_token": os.environ["COURSE_HUB_SERVICE_TOKEN"]}]
    c.JupyterHub.load_roles = [{"name": "course-tools", "services": ["course-tools"],
                                "scopes": ["admin:users", "admin:servers", "access:servers"]}]
