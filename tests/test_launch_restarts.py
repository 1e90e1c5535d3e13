"""helpers.launch's --max-restarts / run(max_restarts=N): a failed job starts again, every host,
with the restart arguments added; each attempt gets a line (which host failed, how, after which
step) and the job its count. The scripts here need no JAX, so each attempt takes a moment.
The same with train_stack.py in real JAX processes: tests/test_train_stack.py.
"""
from __future__ import annotations

import pytest
from processes import survivors

from helpers import launch
from helpers.launch import cli

# Host 1 fails (exit status 3) after step 5 until it has been started argv[2] times; host 0
# only says how it was started (no JAX here, so nothing makes it wait for host 1).
FLAKY = """
import os, sys
from pathlib import Path
counter = Path(sys.argv[1]) / f"starts-{os.environ['JAX_PROCESS_ID']}"
starts = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(starts))
host = int(os.environ["JAX_PROCESS_ID"])
print("args", sys.argv[2:])
for step in range(1, 9 if host == 1 else 1):
    print(f"step {step} loss 0.5")
    if step == 5 and starts <= int(sys.argv[2]):
        sys.stdout.flush()
        os._exit(3)
"""


def _job(tmp_path, fail_times: int, max_restarts: int) -> launch.JobResult:
    job = launch.run(source=FLAKY, hosts=2, timeout=60, args=[tmp_path, fail_times], grace=10,  # host 0 prints
                     max_restarts=max_restarts, restart_args=["--resume"])  # even when host 1 fails first
    assert not survivors(job.pids), "a host outlived its attempt"
    return job


def test_a_job_that_fails_once_finishes_on_its_restart(tmp_path):
    job = _job(tmp_path, fail_times=1, max_restarts=2)
    assert job.ok and job.restarts == 1, str(job)
    assert job.report() == ["attempt 1: host 1 failed (exit status 3) after step 5",
                            "attempt 2: every host finished after step 8",
                            "the job finished after 2 attempts (1 restart)"]
    first, second = (a.hosts[0].stdout.strip() for a in job.attempts)
    assert first.endswith("'1']") and second.endswith("'1', '--resume']"), (first, second)


def test_a_job_that_keeps_failing_stops_after_its_restarts(tmp_path):
    job = _job(tmp_path, fail_times=5, max_restarts=2)
    assert not job.ok and len(job.attempts) == 3, str(job)
    assert job.report()[:3] == [f"attempt {n}: host 1 failed (exit status 3) after step 5"
                                for n in (1, 2, 3)]
    assert job.message == "the job failed 3 attempts in a row; no restarts left (--max-restarts 2)"
    with pytest.raises(launch.LaunchError, match="attempt 3: host 1 failed"):
        job.check()


def test_no_restarts_gives_one_attempt(tmp_path):
    job = _job(tmp_path, fail_times=1, max_restarts=0)
    assert not job.ok and job.report() == [
        "attempt 1: host 1 failed (exit status 3) after step 5",
        "the job failed 1 attempt in a row; no restarts left (--max-restarts 0)"]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_max_restarts_must_be_a_whole_number(bad):
    with pytest.raises(ValueError, match="max_restarts must be a whole number, 0 or more"):
        launch.run(source="print(1)", hosts=1, max_restarts=bad)


def test_restart_args_are_a_list_not_a_text():
    with pytest.raises(ValueError, match=r"restart_args is a list of arguments, like \['--resume'\]"):
        launch.run(source="print(1)", hosts=1, max_restarts=1, restart_args="--resume")


def test_the_command_line_reports_every_attempt(tmp_path, capsys):
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY)
    code = cli.main(["--hosts", "2", "--max-restarts", "1", "--restart-args=--resume",
                        str(script), str(tmp_path), "5"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "[launch] attempt 1: host 1 failed (exit status 3) after step 5; restarting every " \
           "host with --resume" in err, err
    assert "[launch] attempt 2: host 1 failed (exit status 3) after step 5\n" in err, err
    assert "[launch] the job failed 2 attempts in a row; no restarts left (--max-restarts 1)" in err
