"""The course's training scripts under SLURM's srun, on a one-node cluster this module starts.

`tools/local_slurm.sh` starts munged, slurmctld and slurmd with every file in a temporary
directory (SLURM_CONF points at it) and stops them at the end; no process may outlive the
module. Each script runs as `srun -N1 -n2` with 4 fake devices per task and must print the
same losses as under the course launcher. A task that crashes is reported by srun, and the
step ends. The last tests check, without a cluster, which way `helpers.launch.initialize()`
joins under each cluster launcher.

`.ci/run` installs slurm-wlm and munge; as root the module installs them itself when they are
missing. Without root it is skipped: slurmd must run as root.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from helpers import launch

SLURM_RUN = [pytest.mark.slurm, pytest.mark.multiprocess]  # the tests that start the cluster

ROOT = Path(__file__).resolve().parents[1]
LOCAL_SLURM = ROOT / "tools" / "local_slurm.sh"
SCRIPTS = {  # notebooks/scripts/NAME -> its arguments; each prints "step S loss L" on process 0
    "train_dp.py": [],
    "train_stack.py": [],
}
TRANSCRIPT = ROOT / "notebooks" / "transcripts" / "srun_train_dp.txt"  # shown in notebook 08
TOL = 1e-5  # float32 rounding: the runs add the same numbers in different orders
TIMEOUT = 240  # seconds, for any one srun; generous, the machine may be busy
DEVICES = 4
STEP_LOSS = re.compile(r"^step\s+(\d+)\s+loss\s+(\S+)$", re.MULTILINE)
# What notebook 08 shows: the command a learner types, then each task's output
SHOWN_COMMAND = (f"XLA_FLAGS=--xla_force_host_platform_device_count={DEVICES} JAX_PLATFORMS=cpu "
                 "srun -N1 -n2 --kill-on-bad-exit=1 --output=task-%t.out "
                 "python notebooks/scripts/train_dp.py")

CRASH = """
from helpers.launch import initialize
initialize()
import jax, numpy as np
from jax.experimental import multihost_utils
if jax.process_index() == 1:
    raise RuntimeError("task 1 crashes on purpose")
multihost_utils.process_allgather(np.ones(2))  # task 0 waits here for task 1, in vain
print("task 0 was not stopped")
"""

def _processes_with(variable: str, value: str) -> list[psutil.Process]:
    """Running processes whose environment has variable=value (zombies are not running)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(variable) == value and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            pass
    return found


def _stopped(variable: str, value: str, wait: float = 30) -> list[int]:
    """Wait up to `wait` s for every process with variable=value to end; kill and return the rest."""
    deadline = time.monotonic() + wait
    while _processes_with(variable, value) and time.monotonic() < deadline:
        time.sleep(0.2)
    leftovers = _processes_with(variable, value)
    for proc in leftovers:
        proc.kill()
    return [proc.pid for proc in leftovers]


def _installed() -> bool:
    return all(shutil.which(tool) for tool in ("srun", "sinfo", "slurmctld", "slurmd", "munged"))


@pytest.fixture(scope="module")
def slurm_conf():
    """SLURM_CONF of a one-node cluster that runs for this module; stopped afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root: slurmd runs the tasks (as root: tools/local_slurm.sh start DIR)")
    if not _installed() and shutil.which("apt-get") is None:
        pytest.skip("SLURM is not installed, and there is no apt-get to install it with "
                    "(install slurm-wlm and munge)")
    if not _installed():
        install = subprocess.run([str(LOCAL_SLURM), "install"], capture_output=True, text=True,
                                 timeout=600, stdin=subprocess.DEVNULL)
        assert install.returncode == 0, f"installing SLURM failed:\n{install.stderr[-3000:]}"
    state = tempfile.mkdtemp(prefix="course-slurm-")
    conf = f"{state}/slurm.conf"
    env = {**os.environ, "PYTHON": sys.executable}
    try:
        start = subprocess.run([str(LOCAL_SLURM), "start", state], capture_output=True,
                               text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
        logs = "".join(f"\n--- {p.name}\n{p.read_text()[-2000:]}"
                       for p in sorted(Path(state).glob("*.log")))
        assert start.returncode == 0, f"the cluster did not start:\n{start.stderr}{logs}"
        yield conf
    finally:
        subprocess.run([str(LOCAL_SLURM), "stop", state], capture_output=True, timeout=120,
                       env=env, stdin=subprocess.DEVNULL)
        leftovers = _stopped("SLURM_CONF", conf)
        shutil.rmtree(state, ignore_errors=True)
    assert not leftovers, f"processes of the cluster outlived it: {leftovers}"


def _free_port() -> int:
    """A free port below the kernel's ephemeral range, for JAX's coordinator under srun (which, unlike
    the course launcher, does not try another port when its port is taken). A port from bind(0) is free
    only until JAX binds it, and meanwhile the kernel may hand it to any connection on the machine
    (gloo's, another test's): a fresh-clone CI run failed so, 'Address already in use'. Below the
    range, only a process that asks for this port by number can take it."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.sample(range(max(1024, low - 8192), low), 64):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in the 8192 below the ephemeral range ({low})")


def srun(slurm_conf: str, script: Path, args=()) -> tuple[int, str, dict[int, str], dict[int, str]]:
    """`srun -N1 -n2` the script; return srun's exit code and stderr, and each task's stdout and
    stderr. Every process of the step must be gone when it returns."""
    run_id = uuid.uuid4().hex
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "OMPI_", "PMIX_", "JAX_", "XLA_"))}
    env.update({
        "SLURM_CONF": slurm_conf,
        "COURSE_SRUN_RUN": run_id,  # srun passes its environment on: this marks the step's tasks
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={DEVICES}",
        "JAX_PLATFORMS": "cpu",
        # JAX's coordinator: a free port, on 127.0.0.1 only (the default is [::] and a port
        # derived from the job id)
        "JAX_COORDINATOR_PORT": str(port),
        "JAX_COORDINATOR_BIND_ADDRESS": f"127.0.0.1:{port}",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    })
    with tempfile.TemporaryDirectory(prefix="srun-out-") as out:
        cmd = ["srun", "-N1", "-n2", "--kill-on-bad-exit=1", f"--job-name=course-{run_id[:8]}",
               "--time=10", f"--output={out}/%t.out", f"--error={out}/%t.err",
               sys.executable, str(script), *args]
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _, err = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            subprocess.run(["scancel", f"--name=course-{run_id[:8]}"], env=env, timeout=60)
            proc.kill()
            proc.communicate()
            raise AssertionError(f"srun still ran after {TIMEOUT} s: {' '.join(cmd)}") from None
        finally:
            leftovers = _stopped("COURSE_SRUN_RUN", run_id)
        assert not leftovers, f"processes of the step outlived srun: {leftovers}"
        stdout = {t: Path(out, f"{t}.out").read_text() for t in (0, 1)}
        stderr = {t: Path(out, f"{t}.err").read_text() for t in (0, 1)}
    return proc.returncode, err, stdout, stderr


def _step_losses(text: str) -> dict[int, float]:
    found = {int(step): float(loss) for step, loss in STEP_LOSS.findall(text)}
    assert found, f"no 'step S loss L' lines in:\n{text}"
    return found


def _transcript(stdout: dict[int, str]) -> str:
    return f"$ {SHOWN_COMMAND}\n" + "".join(
        f"--- task-{task}.out ---\n{text}" for task, text in sorted(stdout.items()))


@pytest.mark.parametrize("name", [pytest.param(name, marks=SLURM_RUN) for name in SCRIPTS])
def test_script_under_srun_matches_the_course_launcher(slurm_conf, name):
    script = ROOT / "notebooks" / "scripts" / name
    code, err, stdout, stderr = srun(slurm_conf, script, SCRIPTS[name])
    assert code == 0, f"srun exited with {code}:\n{err}\n{stderr[0][-3000:]}\n{stderr[1][-3000:]}"
    launched = launch.run(script, hosts=2, devices_per_host=DEVICES, args=SCRIPTS[name],
                          timeout=TIMEOUT)
    assert launched.ok, str(launched)
    under_srun, under_launcher = _step_losses(stdout[0]), _step_losses(launched.hosts[0].stdout)
    assert under_srun.keys() == under_launcher.keys(), (under_srun, under_launcher)
    for step, loss in under_srun.items():
        assert abs(loss - under_launcher[step]) <= TOL, (step, loss, under_launcher[step])
    if name == "train_dp.py":  # helpers.launch.initialize() says how each task joined
        assert stdout[0].startswith("cluster auto-detect (SLURM): host 0 of 2, 4 local devices")
        assert stdout[1].startswith("cluster auto-detect (SLURM): host 1 of 2, 4 local devices")
        if os.environ.get("UPDATE_TRANSCRIPTS") == "1":
            TRANSCRIPT.parent.mkdir(exist_ok=True)
            TRANSCRIPT.write_text(_transcript(stdout))
        assert _transcript(stdout) == TRANSCRIPT.read_text(), (
            f"srun's output differs from {TRANSCRIPT.relative_to(ROOT)}, which notebook 08 "
            "shows: rerun this test with UPDATE_TRANSCRIPTS=1, then make notebooks NB=08")


@pytest.mark.slurm
@pytest.mark.multiprocess
def test_a_crash_on_one_task_is_reported_and_ends_the_step(slurm_conf, tmp_path):
    crash = tmp_path / "crash.py"
    crash.write_text(CRASH)
    code, err, stdout, stderr = srun(slurm_conf, crash)
    assert code != 0
    assert re.search(r"task 1: Exited with exit code 1", err), err
    assert "RuntimeError: task 1 crashes on purpose" in stderr[1], stderr[1]
    assert "task 0 was not stopped" not in stdout[0]


# ------------------------------------------- initialize() under cluster launchers, no cluster

SLURM_ENV = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "node1", "SLURM_NTASKS": "2",
             "SLURM_PROCID": "1", "SLURM_LOCALID": "1"}
OPEN_MPI_5_ENV = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                  "OMPI_VERSION": "5.0.6", "PMIX_RANK": "1"}  # Open MPI 5's mpirun: no OMPI_MCA_orte_hnp_uri


def test_under_srun_initialize_lets_jax_detect_slurm(initialize_calls, monkeypatch):
    for k, v in SLURM_ENV.items():
        monkeypatch.setenv(k, v)
    assert launch.initialize(timeout=9) == "cluster auto-detect (SLURM)"
    assert initialize_calls == [dict(initialization_timeout=9)]


def test_under_open_mpi_5_initialize_lets_jax_detect_it(initialize_calls, monkeypatch):
    for k, v in OPEN_MPI_5_ENV.items():
        monkeypatch.setenv(k, v)
    assert launch.initialize(timeout=9) == "cluster auto-detect (Open MPI 5)"
    assert initialize_calls == [dict(initialization_timeout=9)]


def test_jax_itself_detects_open_mpi_5_and_without_mpi4py_says_what_it_needs(monkeypatch):
    """What the course no longer does for JAX (jax 0.10.2 needed cluster_detection_method="mpi4py")."""
    from jax._src.clusters import ClusterEnv, OmpiCluster

    for k, v in OPEN_MPI_5_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr("jax._src.clusters.mpi4py_cluster.find_spec", lambda name: None)  # no mpi4py
    detected = [env for env in ClusterEnv._cluster_types if not env.opt_in_only_method and env.is_env_present()]
    assert detected[0] is OmpiCluster
    with pytest.raises(RuntimeError, match="Open MPI 5 or newer requires mpi4py"):
        OmpiCluster.get_process_count()


@pytest.mark.slurm
@pytest.mark.multiprocess
def test_a_loop_around_srun_restarts_a_killed_job_from_its_checkpoint(slurm_conf, tmp_path):
    """Notebook 14 under SLURM: srun has no restart of its own (--requeue is sbatch's), so a loop
    runs it again with --resume; the second step continues from the newest finished checkpoint."""
    script = ROOT / "notebooks" / "scripts" / "train_stack.py"
    ckpt = tmp_path / "ckpt"
    args = ["--steps", "4", "--ckpt-dir", str(ckpt), "--save-every", "2"]
    code, _, killed, _ = srun(slurm_conf, script, [*args, "--kill-in-save", "4"])
    assert code != 0 and "saved checkpoint 4" not in killed[0], killed[0]
    assert sorted(p.name for p in ckpt.iterdir()) == ["2", "4.orbax-checkpoint-tmp"]
    code, err, resumed, stderr = srun(slurm_conf, script, [*args, "--resume"])
    assert code == 0, f"srun exited with {code}:\n{err}\n{stderr[0][-3000:]}"
    assert "resumed from checkpoint 2: loader at step 2" in resumed[0], resumed[0]
    before, after = _step_losses(killed[0]), _step_losses(resumed[0])
    assert sorted(after) == [3, 4] and all(abs(after[s] - before[s]) <= TOL for s in after)
