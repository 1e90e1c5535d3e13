"""notebooks/scripts/train_stack.py: an interrupted run resumed on another mesh continues the
uninterrupted run's losses, and bad input (checkpoint directory, mesh) gets one clear line.

Runs: 8 steps on 2 hosts x 4 devices, uninterrupted; 4 steps on 2 x 4, then --resume to step 8
on 4 x 2. Steps 5-8 must agree within TOL. Failures (notebook 14): a preemption notice to one
host; a host killed during a save, restarted by the launcher; a damaged newest checkpoint.
`train_stack_under_mpirun` is collected from tests/test_mpirun.py, next to the other mpirun runs.
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


def _launch(hosts: int, devices: int, *args, **restarts) -> launch.RunResult:
    result = launch.run(SCRIPT, hosts=hosts, devices_per_host=devices, timeout=TIMEOUT,
                        args=[str(a) for a in args], **restarts)
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


def test_resume_when_no_checkpoint_restores(tmp_path, interrupted_ckpt):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(interrupted_ckpt, ckpt)
    shutil.rmtree(ckpt / "4" / "state" / "d")  # the array data, gone
    run = _one_process("--resume", "--ckpt-dir", ckpt, "--steps", 8)
    assert run.returncode == 2
    assert re.search(r"^checkpoint 4 does not restore \(Orbax: \w+: .+\): skipped, left in place$",
                     run.stdout, re.MULTILINE), run.stdout
    line = _only_error_line(run.stderr)
    assert line.startswith(f"cannot resume: no checkpoint in {ckpt} restores (tried 4)"), line
    assert "step 5" not in run.stdout
    assert (ckpt / "4" / "state").is_dir(), "a damaged checkpoint is never deleted"


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
    from helpers.training import tiny
    from helpers.training.data import ArrayRecords, HostLoader, ShardOptions

    source = ArrayRecords(*tiny.dataset())
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
    from helpers.training.data import ArrayRecords, ShardOptions, eval_batch, padded_rows

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


def test_a_run_without_resume_continues_from_a_finished_checkpoint(uninterrupted, interrupted_ckpt,
                                                                   tmp_path):
    """A requeued job runs its first command again: it must not start over, nor refuse."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(interrupted_ckpt, ckpt)
    run = _one_process("--ckpt-dir", ckpt, "--steps", 8)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "resumed from checkpoint 4: loader at step 4 (found without --resume)" in run.stdout
    resumed = _losses(run.stdout)
    assert sorted(resumed) == [5, 6, 7, 8], run.stdout
    for step, loss in resumed.items():
        assert abs(loss - uninterrupted[step]) <= TOL, (step, loss, uninterrupted[step])


# ------------------------------------------------------------ failures (notebook 14)

def test_a_preemption_notice_to_one_host_saves_the_same_step_on_every_host(tmp_path):
    result = _launch(2, 4, "--steps", 60, "--ckpt-dir", tmp_path, "--notice-at", 3)
    assert result.ok, str(result)
    assert "host 1: SIGTERM after step 3" in result.hosts[1].stdout
    saved = [re.findall(r"^host \d: preemption notice after step (\d+); saved step \1; exiting$",
                        h.stdout, re.MULTILINE) for h in result.hosts]
    assert saved[0] == saved[1] and len(saved[0]) == 1, result.stdout
    step = int(saved[0][0])
    assert 3 < step < 60 and [p.name for p in tmp_path.iterdir()] == [str(step)]
    assert max(_losses(result.hosts[0].stdout)) == step, "no host trained past the saved step"


def test_a_preempted_run_that_exits_non_zero_is_restarted_and_continues(uninterrupted, tmp_path):
    """--preempted-exit 143: the launcher (as a Kubernetes Job would) runs the same command again."""
    job = _launch(2, 4, "--steps", 60, "--ckpt-dir", tmp_path, "--notice-at", 3,
                  "--preempted-exit", 143, max_restarts=1)
    assert job.ok, str(job)
    first, second = job.attempts
    codes = [h.returncode for h in first.hosts]  # None: stopped by the launcher once the other exited
    assert 143 in codes and set(codes) <= {143, None}, str(first)
    step = int(re.search(r"preemption notice after step (\d+)", first.hosts[0].stdout)[1])
    assert f"resumed from checkpoint {step}: loader at step {step} (found without --resume)" \
        in second.hosts[0].stdout, second.hosts[0].stdout
    losses = {**_losses(first.hosts[0].stdout), **_losses(second.hosts[0].stdout)}
    assert sorted(losses) == list(range(1, 61)), "every step trained, and none twice"
    for s in uninterrupted:
        assert abs(losses[s] - uninterrupted[s]) <= TOL, (s, losses[s], uninterrupted[s])


@pytest.fixture(scope="module")
def restarted_job(tmp_path_factory) -> tuple[launch.JobResult, Path]:
    """Host 0 killed while checkpoint 6 is written; the launcher restarts the same command."""
    ckpt = tmp_path_factory.mktemp("restarted")
    job = _launch(2, 4, "--steps", 8, "--ckpt-dir", ckpt, "--save-every", 2, "--kill-in-save", 6,
                  max_restarts=2)
    assert not alive(job.pids), "a launched host outlived its attempt"
    return job, ckpt


def test_a_host_killed_during_a_save_costs_only_the_steps_since_the_last_checkpoint(
        uninterrupted, restarted_job):
    job, ckpt = restarted_job
    assert job.ok and job.report() == [
        "attempt 1: host 0 failed (killed by SIGKILL) after step 6",
        "attempt 2: every host finished after step 8",
        "the job finished after 2 attempts (1 restart)"], str(job)
    first, second = (a.hosts[0] for a in job.attempts)
    assert "saved checkpoint 6" not in first.stdout and "saved checkpoint 4" in first.stdout
    # Orbax's atomic commit: step 6 stayed in its temporary directory, outside Orbax's listing
    assert "6.orbax-checkpoint-tmp which already exists" in second.stderr, second.stderr
    assert "resumed from checkpoint 4: loader at step 4" in second.stdout, second.stdout
    resumed = _losses(second.stdout)
    assert sorted(resumed) == [5, 6, 7, 8]
    for step, loss in {**_losses(first.stdout), **resumed}.items():
        assert abs(loss - uninterrupted[step]) <= TOL, (step, loss, uninterrupted[step])
    assert sorted(int(p.name) for p in ckpt.iterdir()) == [2, 4, 6, 8]


def test_a_damaged_newest_checkpoint_is_skipped_in_one_line(uninterrupted, restarted_job, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(restarted_job[1], ckpt)
    data = sorted((ckpt / "8" / "state" / "d").iterdir())[0]
    data.write_bytes(data.read_bytes()[:10])  # a finalized checkpoint with a truncated file
    run = _one_process("--resume", "--ckpt-dir", ckpt, "--steps", 8)
    assert run.returncode == 0, run.stderr[-3000:]
    skipped = [line for line in run.stdout.splitlines() if "does not restore" in line]
    assert len(skipped) == 1 and skipped[0].startswith("checkpoint 8 does not restore (Orbax: ") \
        and skipped[0].endswith("): skipped, left in place"), run.stdout
    assert "resumed from checkpoint 6: loader at step 6" in run.stdout
    resumed = _losses(run.stdout)
    assert sorted(resumed) == [7, 8]
    for step, loss in resumed.items():
        assert abs(loss - uninterrupted[step]) <= TOL, (step, loss, uninterrupted[step])
    assert "not saved: Orbax keeps checkpoint 8, newer than step 8" in run.stdout
    assert len(data.read_bytes()) == 10, "the damaged checkpoint is left as it was"
