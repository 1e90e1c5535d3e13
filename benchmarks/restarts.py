"""Section 9: what a failure costs (notebook 14): from a host's death to the restarted job's first step.

`python -m helpers.launch --max-restarts 1 --restart-args=--resume` runs train_stack.py on
2 x 4 with `--kill-in-save 4`: the last host is killed while checkpoint 4 is written, the
launcher stops every host and starts the job again with --resume. The parent reads the
launcher's lines as they arrive: the restart cost is from the line that reports the failed
attempt to the resumed run's first `step` line (stopping, starting every process, joining,
restoring checkpoint 2 onto the mesh, compiling, one step). Save time against the state's
size is section 6's table.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.measure import ROOT, WrongProgram, log, record
from benchmarks.tables import fmt_bench, fmt_s, md_table

KEY = "restarts"
TITLE = "A failure's cost: from a host killed during a save to the restarted job's first step"
SCRIPT = ROOT / "notebooks" / "scripts" / "train_stack.py"
MESH = (2, 4)
NAME = "restarts/kill to first resumed step"
FAILED = "[launch] attempt 1: "
RESUMED = "[host 0] step 3 loss "  # checkpoint 2 is the newest finished one: step 3 comes first


def one_restart(directory: str) -> float:
    """Seconds from the launcher's report of the killed attempt to the resumed run's first step."""
    cmd = [sys.executable, "-m", "helpers.launch", "--hosts", str(MESH[0]), "--devices-per-host",
           str(MESH[1]), "--max-restarts", "1", "--restart-args=--resume", str(SCRIPT),
           "--steps", "4", "--ckpt-dir", directory, "--save-every", "2", "--kill-in-save", "4"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    failed = resumed = None
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, bufsize=1) as proc:
        for line in proc.stdout:
            if line.startswith(FAILED) and failed is None:
                failed = time.monotonic()
            elif line.startswith(RESUMED) and failed is not None and resumed is None:
                resumed = time.monotonic()
        code = proc.wait()
    if code != 0 or failed is None or resumed is None:
        raise WrongProgram(f"the restarted job did not resume (exit status {code}; failure "
                           f"reported: {failed is not None}, resumed step seen: {resumed is not None})")
    return resumed - failed


def measure(results, opts) -> None:
    values = []
    for r in range(opts.repeats):
        with tempfile.TemporaryDirectory(prefix="bench-restart-") as directory:
            values.append(one_restart(str(Path(directory) / "ckpt")))
        log(f"restarts: run {r + 1}/{opts.repeats}: {fmt_s(values[-1])}")
    results.add(record(NAME, values))
    results.sections[KEY] = {"mesh": list(MESH), "repeats": opts.repeats}


def render(results) -> str:
    data = results.sections[KEY]
    hosts, devices = data["mesh"]
    table = md_table(["run", "kill to first resumed step"],
                     [[f"train_stack.py on {hosts} × {devices}, killed during save 4, resumed "
                       "from checkpoint 2", fmt_bench(results.benchmarks[NAME])]])
    return table + "\n\n" + (
        "The launcher (`--max-restarts 1 --restart-args=--resume`) reports the killed attempt, "
        "stops every host and starts the job again; the figure runs from that report to the "
        "resumed run's first step line: new processes, JAX's start-up, the restore onto the "
        "mesh, the compile and one step. It is what a learner's `--save-every` trades against: "
        f"median (min–max) of {data['repeats']} job(s). Save time against state size: the "
        "Orbax section above.")
