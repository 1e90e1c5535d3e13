"""Preflight check for a workshop laptop: `make doctor` (or `python -m helpers.doctor`).

Each check is a small function returning (ok, detail, fix); `run_checks()` runs them and
returns the results, which `tests/test_doctor.py` also uses. Exit status 0 only when every
check passes. The mpirun and srun rows are optional launchers: they say what each adds, and pass.

To see failures on purpose: `python -m helpers.doctor --expect-jax 0.0.0` (a wrong pin), or
`--port N` with a port something already listens on (a port that cannot be bound).
"""
from __future__ import annotations

import argparse
import errno
import io
import ipaddress
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from helpers import launch
from helpers.launch import netns

ROOT = Path(__file__).resolve().parents[1]
MIN_PYTHON = (3, 12)  # jax 0.11 dropped Python 3.11
EXPECTED_JAX = "0.12.0.1"  # used when requirements.txt is not there to read the pin from
EXPECTED_FLAX = "0.12.12"
FAKE_DEVICES = 8
MIN_DISK_GB = 1.0
MIN_MEMORY_GB = 2.0
REINSTALL = ("make clean && make lab (or, in an active environment: "
             "pip install -r requirements.txt -c requirements-lock.txt)")
_ENV_VARS = ("XLA_FLAGS", "JAX_PLATFORMS", "JAX_NUM_CPU_DEVICES")

Outcome = tuple[bool, str, str]  # (ok, detail, fix); fix is "" when ok


@dataclass(frozen=True)
class Result:
    """One check's outcome."""

    name: str
    ok: bool
    detail: str
    fix: str
    seconds: float


def _tail(text: str, lines: int = 3) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


# ------------------------------------------------------------------------------- checks

def check_python(minimum: tuple[int, int] = MIN_PYTHON) -> Outcome:
    """Python is new enough."""
    have = sys.version_info[:3]
    text = ".".join(map(str, have))
    need = ".".join(map(str, minimum))
    if have[:2] >= minimum:
        return True, f"{text} ({sys.executable})", ""
    return (False, f"{text} is too old; the course needs {need} or newer",
            f"install Python {need}+, then: make clean && make PYTHON=python{need} lab")


def pinned(package: str, default: str) -> str:
    """The version requirements.txt pins for `package` (`default` when there is none to read)."""
    req = ROOT / "requirements.txt"
    if req.is_file():
        for line in req.read_text().splitlines():
            name, sep, version = line.split("#")[0].strip().partition("==")
            if sep and name.strip().lower() == package:
                return version.strip()
    return default


def pinned_jax() -> str:
    """The jax version requirements.txt pins (EXPECTED_JAX when there is no requirements.txt)."""
    return pinned("jax", EXPECTED_JAX)


def check_jax(expected: str | None = None) -> Outcome:
    """The jax and jaxlib that Python imports are the pinned ones."""
    expected = expected or pinned_jax()
    try:
        import jax
        import jaxlib
    except Exception as error:  # noqa: BLE001 - any import failure is the finding
        return False, f"jax does not import: {type(error).__name__}: {error}", REINSTALL
    have = {"jax": jax.__version__, "jaxlib": jaxlib.__version__}
    wrong = {name: v for name, v in have.items() if v != expected}
    where = str(Path(jax.__file__).parent.parent)
    if not wrong:
        return True, f"jax {have['jax']}, jaxlib {have['jaxlib']} (from {where})", ""
    found = ", ".join(f"{name} {v}" for name, v in have.items())
    return (False, f"imported {found} from {where}; the course expects {expected}",
            REINSTALL + "; then run the course from .venv (make lab), not another Python")


# What notebooks 10 and 17 call in Flax NNX: the pmap-era transforms and their shard_map ports.
NNX_NAMES = ("pmap", "split_rngs", "StateAxes", "shard_map", "StateSharding", "prefix", "jit", "vmap")


def check_flax(expected: str | None = None) -> Outcome:
    """The pinned flax imports, with the NNX transforms notebooks 10 and 17 use."""
    expected = expected or pinned("flax", EXPECTED_FLAX)
    try:
        import flax
        from flax import nnx
    except Exception as error:  # noqa: BLE001 - any import failure is the finding
        return False, f"flax does not import: {type(error).__name__}: {error}", REINSTALL
    if flax.__version__ != expected:
        return False, f"imported flax {flax.__version__}; the course expects {expected}", REINSTALL
    missing = [name for name in NNX_NAMES if not hasattr(nnx, name)]
    if missing:
        return False, f"flax {flax.__version__} has no nnx.{', nnx.'.join(missing)}", REINSTALL
    return True, f"flax {flax.__version__}: nnx.pmap, split_rngs, StateAxes and their shard_map ports (10, 17)", ""


_DEVICE_PROBE = """
from helpers.devices import use_fake_devices
use_fake_devices({count})
import jax
print(jax.device_count(), jax.default_backend())
"""


def check_fake_devices(count: int = FAKE_DEVICES, timeout: float = 60) -> Outcome:
    """A fresh Python process gets `count` fake CPU devices from use_fake_devices."""
    probe = _DEVICE_PROBE.format(count=count)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    set_vars = [v for v in _ENV_VARS if v in os.environ]
    shell_hint = (f"; your shell sets {', '.join(set_vars)}: unset {' '.join(set_vars)} and retry"
                  if set_vars else "")
    try:
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return (False, f"a fresh process did not start JAX within {timeout:g} s",
                "close other heavy programs and retry; if it persists: " + REINSTALL)
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    if proc.returncode != 0:
        return (False, f"the probe process failed: {_tail(proc.stderr)}", REINSTALL + shell_hint)
    if last[0] != f"{count} cpu":
        return (False, f"expected '{count} cpu' (devices, backend), got {last[0]!r}",
                "restart with a clean environment" + (shell_hint or "; " + REINSTALL))
    return True, f"{count} CPU devices in a fresh process", ""


_PSUM_SOURCE = """
from helpers.launch import initialize
initialize()
import jax, numpy as np
from jax import P
from jax.sharding import NamedSharding
mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), ("host", "device"))
local = np.ones(jax.local_device_count()) * (1 + jax.process_index())
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P(("host", "device"))), local)
total = jax.jit(jax.shard_map(lambda b: jax.lax.psum(b, ("host", "device")), mesh=mesh,
                              in_specs=P(("host", "device")), out_specs=P()))(x)
print("psum", jax.process_count(), jax.device_count(), float(total.addressable_data(0)[0]))
"""


def check_multiprocess(hosts: int = 2, devices_per_host: int = 2, timeout: float = 60,
                       netns: bool = False, etc_hosts: str = "address") -> Outcome:
    """A real run of `hosts` JAX processes over localhost (gloo) finishes a psum (with `netns`:
    each host in a network namespace of its own, see helpers.launch.netns)."""
    result = launch.run(source=_PSUM_SOURCE, hosts=hosts, devices_per_host=devices_per_host,
                        timeout=timeout, netns=netns, etc_hosts=etc_hosts)
    # host h holds devices_per_host elements equal to h + 1; psum adds every device's block
    total = float(devices_per_host * sum(range(1, hosts + 1)))
    want = f"psum {hosts} {hosts * devices_per_host} {total}"
    fix = ("a stray process from an interrupted run may hold resources: pkill -f helpers.launch; "
           "a firewall or VPN must allow connections to 127.0.0.1; then retry. If it persists: "
           + REINSTALL)
    if not result.ok:
        failed = [h for h in result.hosts if h.status == "failed"]
        tail = f": {_tail(failed[0].error_tail())}" if failed and failed[0].error_tail() else ""
        return False, f"{result.message}{tail}", fix
    got = [h.stdout.strip().splitlines()[-1:] for h in result.hosts]
    if any(line != [want] for line in got):
        return False, f"expected {want!r} on every host, got {got}", fix
    where = "in network namespaces of their own" if netns else "over 127.0.0.1"
    return True, f"{hosts} processes x {devices_per_host} devices {where}, psum = {total:g}", ""


def check_hosts_apart() -> Outcome:
    """Optional, as root: the psum with every host in a network namespace of its own (--netns)."""
    why = netns.unavailable()
    if why:
        return (True, "not tried: " + why.split(";")[0] + " (notebook 08 shows such runs from "
                      "recordings)", "")
    try:
        return check_multiprocess(netns=True)
    except netns.HostsApartError as error:
        return False, str(error), "run make doctor as root on a Linux machine with iproute2"


def gloo_address(name: str | None = None) -> str:
    """The address gloo advertises for this machine: the first of its hostname's addresses that
    binds, as gloo's tcp device picks it (JAX 0.12 gives gloo no address of its own)."""
    name = name or socket.gethostname()
    for family, kind, proto, _, sockaddr in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM):
        with socket.socket(family, kind, proto) as probe:
            try:
                probe.bind(sockaddr)
            except OSError:
                continue
            return sockaddr[0]
    raise OSError(f"no address of {name} can be bound here")


def check_gloo_address(name: str | None = None) -> Outcome:
    """What this machine's hostname resolves to: what gloo tells the other hosts to dial."""
    name = name or socket.gethostname()
    try:
        address = gloo_address(name)
    except OSError as error:
        return (False, f"hostname {name!r} does not resolve ({error}): gloo, JAX's CPU collectives, "
                       "cannot start", f"add the line '127.0.1.1 {name}' to /etc/hosts (on a "
                       "cluster node: its own network address instead of 127.0.1.1)")
    if ipaddress.ip_address(address).is_loopback:
        return (True, f"hostname {name!r} resolves to {address}, a loopback address: fine here, "
                      "where every host of the course shares it; on a cluster gloo would advertise "
                      "it and no other machine could connect (map the hostname to the machine's "
                      "own address in /etc/hosts; notebook 08, section 6)", "")
    return True, f"hostname {name!r} resolves to {address}: what gloo advertises to other hosts", ""


def labextension_dirs() -> list[Path]:
    """Where JupyterLab looks for prebuilt extensions (this environment first)."""
    dirs = [Path(sys.prefix) / "share" / "jupyter" / "labextensions"]
    try:
        from jupyter_core.paths import jupyter_path

        dirs += [Path(p) for p in jupyter_path("labextensions")]
    except ImportError:
        pass
    return list(dict.fromkeys(dirs))


def check_widgets_extension(dirs: list[Path] | None = None) -> Outcome:
    """ipywidgets' JupyterLab extension (@jupyter-widgets/jupyterlab-manager) is installed."""
    import json

    for base in dirs if dirs is not None else labextension_dirs():
        package = base / "@jupyter-widgets" / "jupyterlab-manager" / "package.json"
        if package.is_file():
            try:
                version = json.loads(package.read_text()).get("version", "?")
            except (OSError, ValueError):
                version = "?"
            return True, f"@jupyter-widgets/jupyterlab-manager {version}", ""
    return (False, "@jupyter-widgets/jupyterlab-manager is not in any labextensions folder, "
                   "so sliders and explorers will show as text",
            REINSTALL + " (jupyterlab_widgets provides it); then restart JupyterLab")


def check_matplotlib() -> Outcome:
    """matplotlib renders a figure off-screen (Agg) to PNG bytes."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(2, 1))
        FigureCanvasAgg(fig)
        fig.add_subplot().plot([0, 1], [1, 0])
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    except Exception as error:  # noqa: BLE001
        return False, f"rendering failed: {type(error).__name__}: {error}", REINSTALL
    data = buf.getvalue()
    if not data.startswith(b"\x89PNG"):
        return False, "savefig did not produce a PNG", REINSTALL
    return True, f"matplotlib {matplotlib.__version__}, Agg, {len(data)} byte PNG", ""


def check_disk(path: Path = ROOT, min_gb: float = MIN_DISK_GB) -> Outcome:
    """There is enough free disk where the course lives."""
    free = shutil.disk_usage(path).free / 1e9
    if free >= min_gb:
        return True, f"{free:.1f} GB free in {path}", ""
    return (False, f"{free:.2f} GB free in {path}; the course needs {min_gb:g} GB",
            "free disk space (empty the trash, delete ~/.cache/pip, remove solutions/ or "
            "old virtual environments)")


def check_memory(min_gb: float = MIN_MEMORY_GB) -> Outcome:
    """There is enough memory available for a kernel and a few JAX processes."""
    import psutil

    available = psutil.virtual_memory().available / 1e9
    if available >= min_gb:
        return True, f"{available:.1f} GB available", ""
    return (False, f"{available:.2f} GB available; the course needs {min_gb:g} GB",
            "close other programs (browser tabs, IDEs, containers), then rerun make doctor")


def check_port(port: int = 0) -> Outcome:
    """A localhost port can be bound (port 0: any free one, as the launcher does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return (False, f"127.0.0.1:{port} is already in use",
                        f"stop what holds port {port} (a stray course run: pkill -f helpers.launch; "
                        f"or see: lsof -i :{port}), or use another port")
            return (False, f"cannot bind 127.0.0.1:{port}: {error.strerror or error}",
                    "the loopback interface must be up and usable: leave sandboxes or "
                    "container settings that block it; ports below 1024 need root")
        bound = s.getsockname()[1]
    return True, f"bound 127.0.0.1:{bound}" if port else "bound a free port on 127.0.0.1", ""


def _version_line(command: list[str]) -> tuple[int, str]:
    """The exit code and first output line of a `--version` command."""
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        return 1, str(error)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return proc.returncode, lines[0] if lines else ""


def check_mpirun() -> Outcome:
    """Optional: whether Open MPI's mpirun is here, and what it adds (always passes)."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        return (True, "not installed (optional: with it, notebook 08 also runs the training "
                      "script under mpirun; Debian/Ubuntu: apt-get install openmpi-bin)", "")
    _, version = _version_line([mpirun, "--version"])
    found = re.search(r"\(Open MPI\) ((\d+)\.\S+)", version)
    if found is None:
        return True, f"{version or mpirun}: not Open MPI, so notebook 08 skips its mpirun run", ""
    name, major = f"Open MPI {found.group(1)}", found.group(2)
    if major == "4":
        return True, f"{name}: notebook 08 and tests/test_mpirun.py run the training script under it", ""
    return (True, f"{name}: JAX 0.12 detects Open MPI {major} and joins it through mpi4py (pip install "
                  "mpi4py); notebook 08's mpirun run needs Open MPI 4 (the course does not pin mpi4py)", "")


def check_srun() -> Outcome:
    """Optional: whether SLURM's srun is here, and what it adds (always passes)."""
    srun = shutil.which("srun")
    if srun is None:
        return (True, "not installed (optional: with it, tests/test_slurm.py runs the training "
                      "script under srun on a one-node cluster; as root: tools/local_slurm.sh "
                      "install)", "")
    code, version = _version_line([srun, "--version"])
    if code == 0 and version:
        return (True, f"{version}, with a cluster configured: srun -N1 -n2 runs the training "
                      "script (notebook 08, section 5)", "")
    return (True, "installed, no cluster configured: tests/test_slurm.py starts its own "
                  "(tools/local_slurm.sh start DIR, as root) and runs the training script "
                  "under srun", "")


# ----------------------------------------------------------------------------- running

@dataclass(frozen=True)
class Check:
    """A named check: `function` returns (ok, detail, fix)."""

    name: str
    function: Callable[..., Outcome]


CHECKS: tuple[Check, ...] = (
    Check("python", check_python),
    Check("jax-pins", check_jax),
    Check("flax-nnx", check_flax),
    Check("fake-devices", check_fake_devices),
    Check("multi-process", check_multiprocess),
    Check("gloo-address", check_gloo_address),
    Check("hosts-apart", check_hosts_apart),
    Check("widgets-extension", check_widgets_extension),
    Check("matplotlib", check_matplotlib),
    Check("disk", check_disk),
    Check("memory", check_memory),
    Check("localhost-port", check_port),
    Check("mpirun", check_mpirun),
    Check("srun", check_srun),
)


def run_check(check: Check, **kwargs) -> Result:
    """Run one check; an unexpected exception is a failure too."""
    start = time.perf_counter()
    try:
        ok, detail, fix = check.function(**kwargs)
    except Exception as error:  # noqa: BLE001 - the doctor must report, not crash
        ok, detail, fix = False, f"the check itself crashed: {type(error).__name__}: {error}", REINSTALL
    return Result(check.name, ok, detail, fix, time.perf_counter() - start)


def run_checks(only: list[str] | None = None, *, expect_jax: str | None = None,
               port: int = 0) -> list[Result]:
    """Run every check (or those named in `only`) and return their results."""
    options = _options(expect_jax, port)
    chosen = [c for c in CHECKS if only is None or c.name in only]
    return [run_check(c, **options.get(c.name, {})) for c in chosen]


def _options(expect_jax: str | None, port: int) -> dict[str, dict]:
    return {"jax-pins": {"expected": expect_jax}, "localhost-port": {"port": port}}


NAME_WIDTH = max(len(c.name) for c in CHECKS)


def header() -> str:
    """The table's first two lines."""
    w = NAME_WIDTH
    return f"{'check':{w}}  result   time  detail\n{'-' * w}  ------  -----  ------"


def row(r: Result) -> str:
    """One result as a table row, followed by its fix when it failed."""
    w = NAME_WIDTH
    line = f"{r.name:{w}}  {'ok' if r.ok else 'FAIL':6}  {r.seconds:4.1f}s  {r.detail}"
    return line if r.ok else line + f"\n{'':{w}}  {'':6}  {'':5}  fix: {r.fix}"


def table(results: list[Result]) -> str:
    """The results as a plain-text table, each failure followed by its fix."""
    return "\n".join([header(), *map(row, results)])


def main(argv: list[str] | None = None) -> int:
    """Command line: print the table; exit status 0 only when every check passes."""
    names = [c.name for c in CHECKS]
    parser = argparse.ArgumentParser(prog="python -m helpers.doctor",
                                     description="Preflight check for a workshop laptop.")
    parser.add_argument("--only", action="append", choices=names, metavar="CHECK",
                        help=f"run only this check (repeatable): {', '.join(names)}")
    parser.add_argument("--expect-jax", metavar="VERSION",
                        help="check for this jax version instead of the pin (to see a failure)")
    parser.add_argument("--port", type=int, default=0,
                        help="bind this localhost port instead of any free one")
    opts = parser.parse_args(argv)
    start = time.perf_counter()
    print("make doctor: is this computer ready for the course?\n", flush=True)
    print(header(), flush=True)
    results = []
    for check in CHECKS:  # the same checks as run_checks, each row printed as it finishes
        if opts.only is None or check.name in opts.only:
            results.append(run_check(check, **_options(opts.expect_jax, opts.port).get(check.name, {})))
            print(row(results[-1]), flush=True)
    failed = [r.name for r in results if not r.ok]
    took = time.perf_counter() - start
    if failed:
        print(f"\n{len(failed)} of {len(results)} checks failed ({', '.join(failed)}) "
              f"in {took:.1f} s; apply the fixes above and run make doctor again.")
        return 1
    print(f"\nall {len(results)} checks passed in {took:.1f} s: ready for the course.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
