"""notebooks/scripts/train_stack.py: an interrupted run resumed on another mesh continues the
uninterrupted run's losses, and bad input (checkpoint directory, mesh) gets one clear line.

Runs: 8 steps on 2 hosts x 4 devices, uninterrupted; 4 steps on 2 x 4, then --resume to step 8
on 4 x 2. Steps 5-8 must agree within TOL. `train_stack_under_mpirun` is collected from
tests/test_mpirun.py, next to the other mpirun runs.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from processes import alive

from helpers import launch

pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "notebooks" / "scripts" / "train_stack.py"
TOL = 1e-5  # float32 rounding: meshes of different shapes add the same numbers in other orders
TIMEOUT = 180  # seconds, for any one run
ERROR = "train_stack.py: error: "


def _losses(text: str) -> dict[int, float]:
    """{step: loss} from the exact `step {s} loss {loss:.8f}` lines."""
    found = re.findall(r"^step (\d+) loss (\d+\.\d{8})$", text, re.MULTILINE)
    return {int(s): float(loss) for s, loss in found}


def _launch(hosts: int, devices: int, *args) -> launch.RunResult:
    result = launch.run(SCRIPT, hosts=hosts, devices_per_host=devices, timeout=TIMEOUT,
                        args=[str(a) for a in args])
    assert not alive(result.pids), "a launched host outlived its run"
    return result


def _one_process(*args, devices: int = 8) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    env.update({"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
                "JAX_PLATFORMS": "cpu",
                "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)})
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT)


def _only_error_line(stderr: str) -> str:
    """The single error line the script printed; no traceback anywhere."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith(ERROR)]
    assert len(lines) == 1, stderr
    return lines[0].removeprefix(ERROR)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[int, float]:
    ckpt = tmp_path_factory.mktemp("uninterrupted")
    result = _launch(2, 4, "--steps", 8, "--ckpt-dir", ckpt, "--save-every", 4)
    assert result.ok, str(result)
    losses = _losses(result.hosts[0].stdout)
    assert sorted(losses) == list(range(1, 9)), result.hosts[0].stdout
    assert _losses(result.hosts[1].stdout) == {}, "only process 0 prints the step lines"
    assert sorted(p.name for p in ckpt.iterdir()) == ["4", "8"]
    return losses


@pytest.fixture(scope="module")
def interrupted_ckpt(tmp_path_factory, uninterrupted) -> Path:
    """A 2 x 4 run that stopped after step 4 (its checkpoint directory)."""
    ckpt = tmp_path_factory.mktemp("interrupted")
    result = _launch(2, 4, "--steps", 4, "--ckpt-dir", ckpt, "--save-every", 4)
    assert result.ok, str(result)
    first = _losses(result.hosts[0].stdout)
    assert first == {s: uninterrupted[s] for s in range(1, 5)}, (first, uninterrupted)
    return ckpt


def test_resumed_on_4x2_continues_the_uninterrupted_losses(uninterrupted, interrupted_ckpt, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(interrupted_ckpt, ckpt)
    result = _launch(4, 2, "--steps", 8, "--ckpt-dir", ckpt, "--resume")
    assert result.ok, str(result)
    out = result.hosts[0].stdout
    assert "course launcher: host 0 of 4, 2 local devices" in out, out
    assert "resumed from checkpoint 4: loader at step 4" in out, out
    resumed = _losses(out)
    assert sorted(resumed) == [5, 6, 7, 8], out
    for step, loss in resumed.items():
        assert abs(loss - uninterrupted[step]) <= TOL, (step, loss, uninterrupted[step])
    assert resumed[8] < uninterrupted[1], "the losses fall: the model really trains"


# ------------------------------------------------------------------------------- bad input

def test_resume_from_a_missing_directory(tmp_path):
    missing = tmp_path / "never-written"
    run = _one_process("--resume", "--ckpt-dir", missing)
    assert run.returncode == 2
    line = _only_error_line(run.stderr)
    assert str(missing) in line and "does not exist" in line and "without --resume" in line, line
    assert run.stdout == "", "it stops before JAX starts"


def test_resume_from_an_empty_directory(tmp_path):
    run = _one_process("--resume", "--ckpt-dir", tmp_path)
    assert run.returncode == 2
    line = _only_error_line(run.stderr)
    assert str(tmp_path) in line and "is empty" in line and "without --resume" in line, line


def test_resume_from_a_save_that_never_finished(tmp_path, interrupted_ckpt):
    """Orbax writes step N into N.orbax-checkpoint-tmp and renames it when done."""
    shutil.copytree(interrupted_ckpt / "4", tmp_path / "4.orbax-checkpoint-tmp")
    run = _one_process("--resume", "--ckpt-dir", tmp_path)
    assert run.returncode == 2
    line = _only_error_line(run.stderr)
    assert "only unfinished checkpoints (4.orbax-checkpoint-tmp)" in line, line
    assert "Delete them" in line, line


def test_resume_from_a_damaged_checkpoint(tmp_path, interrupted_ckpt):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(interrupted_ckpt, ckpt)
    shutil.rmtree(ckpt / "4" / "state" / "d")  # the array data, gone
    run = _one_process("--resume", "--ckpt-dir", ckpt, "--steps", 8)
    assert run.returncode == 2
    line = _only_error_line(run.stderr)
    assert f"checkpoint {ckpt / '4'} is incomplete or damaged" in line, line
    assert f"delete {ckpt / '4'}" in line, line
    assert "step 5" not in run.stdout


def test_resume_with_another_global_batch(tmp_path, interrupted_ckpt):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(interrupted_ckpt, ckpt)
    run = _one_process("--resume", "--ckpt-dir", ckpt, "--global-batch", 128)
    assert run.returncode == 2
    assert "resume with the same --global-batch" in _only_error_line(run.stderr)


def test_resume_onto_a_mesh_that_does_not_divide_the_batch(interrupted_ckpt, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(interrupted_ckpt, ckpt)
    result = _launch(2, 3, "--steps", 8, "--ckpt-dir", ckpt, "--resume")
    assert not result.ok and re.search(r"host [01](?: failed \(|: )exit status 2", result.message), str(result)
    for host in result.hosts:
        if host.status == "failed":
            line = _only_error_line(host.stderr)
            assert line.startswith("the mesh (2 hosts x 3 devices) does not divide the global "
                                   "batch: 256 rows cannot split evenly over 6 devices"), line
        assert "step" not in host.stdout and "resumed" not in host.stdout, host.stdout
    assert sorted(p.name for p in ckpt.iterdir()) == ["4"], "nothing was written"


# ---------------------------------------------------- collected by tests/test_mpirun.py

def train_stack_under_mpirun(mpirun, tmp_path):
    """2 ranks under Open MPI's mpirun save step 4; one process with 8 devices resumes it."""
    from test_mpirun import _env, _run_bounded, _script_lines

    ckpt, out_dir = tmp_path / "ckpt", tmp_path / "out"
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--timeout", str(TIMEOUT - 30),
           "--output-filename", str(out_dir), "-n", "2",
           "-x", "XLA_FLAGS=--xla_force_host_platform_device_count=4", "-x", "JAX_PLATFORMS=cpu",
           "-x", "PYTHONPATH", sys.executable, str(SCRIPT),
           "--steps", "8", "--ckpt-dir", str(ckpt), "--save-every", "4"]
    code, out, err = _run_bounded(cmd, _env(4))
    assert code == 0, f"mpirun exited with {code}:\n{out[-3000:]}\n{err[-3000:]}"
    ranks = {int(p.parent.name.removeprefix("rank.")): _script_lines(p.read_text())
             for p in out_dir.glob("*/rank.*/stdout")}
    assert sorted(ranks) == [0, 1], out
    assert ranks[0].startswith("cluster auto-detect (Open MPI): host 0 of 2, 4 local devices")
    under_mpirun = _losses(ranks[0])
    assert sorted(under_mpirun) == list(range(1, 9)) and _losses(ranks[1]) == {}, ranks
    shutil.rmtree(ckpt / "8")
    alone = _one_process("--steps", 8, "--ckpt-dir", ckpt, "--resume")
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert alone.stdout.startswith("single process: host 0 of 1, 8 local devices"), alone.stdout
    resumed = _losses(alone.stdout)
    assert sorted(resumed) == [5, 6, 7, 8], alone.stdout
    for step, loss in resumed.items():
        assert abs(loss - under_mpirun[step]) <= TOL, (step, loss, under_mpirun[step])


# ------------------------------------------------------------- the pieces the script uses

def test_the_global_batch_of_a_step_does_not_depend_on_the_number_of_hosts():
    from helpers import train
    from helpers.stack_data import ArrayRecords, HostLoader, ShardOptions

    source = ArrayRecords(*train.dataset())
    for step in (0, 7, 16, 40):  # 16 steps an epoch: 16 and 40 are in later epochs
        ids = {hosts: np.concatenate([HostLoader(source, 256, ShardOptions(h, hosts), seed=3)
                                      .batch(step)["id"] for h in range(hosts)])
               for hosts in (1, 2, 4, 8)}
        assert len(set(ids[1].tolist())) == 256
        for hosts in (2, 4, 8):
            assert (ids[hosts] == ids[1]).all(), (step, hosts)
    epoch = np.concatenate([HostLoader(source, 256, ShardOptions(0, 1), seed=3).batch(s)["id"]
                            for s in range(16, 32)])
    assert sorted(epoch.tolist()) == list(range(4096)), "an epoch reads every record once"


def test_padding_and_mask_give_the_exact_mean_of_an_uneven_data_set():
    from helpers.stack_data import ArrayRecords, ShardOptions, eval_batch, padded_rows

    values = np.arange(1.0, 1002.0, dtype=np.float32).reshape(-1, 1)
    source = ArrayRecords(values, values)
    for hosts, devices in ((2, 4), (4, 2), (1, 8), (3, 2)):
        parts = [eval_batch(source, ShardOptions(h, hosts), devices) for h in range(hosts)]
        rows = padded_rows(1001, hosts, devices)
        assert all(len(p["x"]) == rows and rows % devices == 0 for p in parts)
        assert sorted(np.concatenate([p["id"][p["mask"] == 1] for p in parts]).tolist()) == list(range(1001))
        x, mask = (np.concatenate([p[k][:, 0] if k == "x" else p[k] for p in parts]) for k in ("x", "mask"))
        assert (x * mask).sum() / mask.sum() == values.mean()


def test_the_eval_rows_exercise_is_judged_on_what_real_hosts_computed():
    from helpers import exercises

    exercise = exercises.get("11.2")
    assert exercise.output_of_source(exercise.solution, (2, 4)) == (
        [[1001, 1008, 501.0], [998, 1000, 499.5], [13, 16, 7.0]],) * 2


def test_a_fresh_run_refuses_a_directory_that_holds_checkpoints(interrupted_ckpt):
    run = _one_process("--ckpt-dir", interrupted_ckpt, "--steps", 8)
    assert run.returncode == 2
    line = _only_error_line(run.stderr)
    assert "already holds checkpoints (newest: step 4): pass --resume" in line, line
    assert sorted(p.name for p in interrupted_ckpt.iterdir()) == ["4"]
