"""notebooks/scripts/train_dp.py, unchanged, three ways: under Open MPI's mpirun, under the
course launcher, and as one process. All three must end at the same loss (within TOL), each
must say how `helpers.launch.initialize()` joined, and no process may outlive its run.

`.ci/run` installs openmpi-bin, so CI always runs the mpirun test; elsewhere it is skipped
when mpirun is missing (or is not Open MPI 4's: Open MPI 5 needs mpi4py, which the course does not pin).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from processes import alive

from helpers import launch
from helpers.devices import DEVICE_COUNT_FLAG
from test_train_stack import train_stack_under_mpirun as test_train_stack_under_mpirun  # noqa: F401

pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "notebooks" / "scripts" / "train_dp.py"
TOL = 1e-5  # float32 rounding: the runs add the same numbers in different orders
TIMEOUT = 180  # seconds, for any one run


def _session_members(sid: int) -> list[psutil.Process]:
    """Every live process of the session `sid` (the runs below start their own session)."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    return members


def _run_bounded(cmd: list[str], env: dict[str, str], timeout: float = TIMEOUT):
    """Run cmd in a new session; kill the whole session on timeout or error; leave nothing behind."""
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        for member in _session_members(proc.pid):
            member.kill()
        proc.kill()
        proc.communicate()
        raise
    finally:
        deadline = time.monotonic() + 10
        while _session_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        leftovers = _session_members(proc.pid)
        for member in leftovers:
            member.kill()
    assert not leftovers, f"processes outlived {cmd[0]}: {[p.pid for p in leftovers]}"
    return proc.returncode, out, err




def _env(devices: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES") and not k.startswith(("OMPI_", "PMIX_"))}
    env.update({"XLA_FLAGS": f"{DEVICE_COUNT_FLAG}={devices}", "JAX_PLATFORMS": "cpu",
                "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)})
    return env


def _script_lines(text: str) -> str:
    """The script's own lines: under mpirun, gloo's threads print "[Gloo] Rank N is connected
    to ..." to the same stdout, sometimes into each other's lines."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if "[Gloo]" not in line and "peer ranks" not in line
                   and line.strip() and not line.strip().isdigit())


def _final_loss(text: str) -> float:
    found = re.findall(r"^final loss (\S+)$", text, re.MULTILINE)
    assert len(found) == 1, f"expected one 'final loss' line in:\n{text}"
    return float(found[0])


def _check_host_output(text: str, how: str, host: int, hosts: int, devices: int) -> float:
    first = text.splitlines()[0]
    assert first.startswith(f"{how}: host {host} of {hosts}, {devices} local devices, "), first
    assert f"parameter copies gathered from every host: ({hosts}, 97), all identical: True" in text, text
    return _final_loss(text)


@pytest.fixture(scope="module")
def mpirun() -> str:
    """Open MPI's mpirun, or a skip that says how to get it."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed (Debian/Ubuntu: apt-get install openmpi-bin; "
                    ".ci/run installs it, so CI runs this test)")
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
    if not re.search(r"\(Open MPI\) 4\.", version.stdout + version.stderr):
        pytest.skip(f"{mpirun} is not Open MPI 4's mpirun, the one these tests run (JAX joins Open MPI 5 "
                    "through mpi4py, which the course does not pin)")
    return mpirun


@pytest.fixture(scope="module")
def one_process_loss() -> float:
    code, out, err = _run_bounded([sys.executable, str(SCRIPT)], _env(8))
    assert code == 0, err[-3000:]
    return _check_host_output(out, "single process", 0, 1, 8)


@pytest.fixture(scope="module")
def launcher_loss() -> float:
    result = launch.run(SCRIPT, hosts=2, devices_per_host=4, timeout=TIMEOUT)
    try:
        assert result.ok, str(result)
        losses = [_check_host_output(h.stdout, "course launcher", h.host, 2, 4) for h in result.hosts]
    finally:
        assert not alive(result.pids), "a launched host outlived its run"
    assert losses[0] == losses[1], f"the hosts disagree: {losses}"
    return losses[0]


def test_launcher_matches_one_process(launcher_loss, one_process_loss):
    assert abs(launcher_loss - one_process_loss) <= TOL, (launcher_loss, one_process_loss)


def test_mpirun_matches_launcher_and_one_process(mpirun, launcher_loss, one_process_loss):
    with tempfile.TemporaryDirectory(prefix="test-mpirun-") as out_dir:
        # --output-filename: one stdout file per rank (on the console, --tag-output would
        # interleave the ranks' partial lines)
        cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--timeout", str(TIMEOUT - 30),
               "--output-filename", out_dir, "-n", "2",
               "-x", f"XLA_FLAGS={DEVICE_COUNT_FLAG}=4", "-x", "JAX_PLATFORMS=cpu", "-x", "PYTHONPATH",
               sys.executable, str(SCRIPT)]
        code, out, err = _run_bounded(cmd, _env(4))
        assert code == 0, f"mpirun exited with {code}:\n{out[-3000:]}\n{err[-3000:]}"
        per_rank = {int(path.parent.name.removeprefix("rank.")): _script_lines(path.read_text())
                    for path in Path(out_dir).glob("*/rank.*/stdout")}
    assert sorted(per_rank) == [0, 1], out
    losses = [_check_host_output(per_rank[rank], "cluster auto-detect (Open MPI)", rank, 2, 4)
              for rank in (0, 1)]
    assert losses[0] == losses[1], f"the ranks disagree: {losses}"
    assert abs(losses[0] - launcher_loss) <= TOL, (losses[0], launcher_loss)
    assert abs(losses[0] - one_process_loss) <= TOL, (losses[0], one_process_loss)
