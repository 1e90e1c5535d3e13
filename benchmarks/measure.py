"""Repetition, warm-up, statistics and storage of the benchmarks, done by pyperf.

Every measured quantity is a `pyperf.Benchmark` with a name such as
`course/train step/batch 32/shard_map`, values in seconds and its warm-ups kept apart.

- Loops timed inside one process (a train step, an explorer redraw) run under pyperf's own
  worker (`in_process_runner`): warm-up values, then values of `loops` calls each.
- Things that are a whole process or a whole notebook (a Run All, a launcher run, the test
  suite) are one value per repetition; `record` files them as pyperf runs.

A run is saved as two JSON files in `benchmarks/results/`: `STAMP.json`, a pyperf suite with
every timing (`python -m pyperf stats|hist|compare_to` read it), and `STAMP.report.json`, the
rest the report shows (machine, losses, test outcomes...). `report.py` renders BENCHMARKS.md
from the pair, so a report can be rebuilt without measuring again.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pyperf

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
REPORT_SUFFIX = ".report.json"


class WrongProgram(RuntimeError):
    """A measured program computed the wrong thing: the run stops instead of timing it."""


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


_RUNNER: pyperf.Runner | None = None  # pyperf allows one Runner per process


def in_process_runner(loops: int, values: int, warmups: int) -> pyperf.Runner:
    """pyperf's Runner acting as its own worker in this process, set to these counts.

    Each `runner.bench_time_func(name, time_func)` then calls `time_func(loops)` for `warmups`
    warm-up values and `values` values, and returns a pyperf.Benchmark of seconds per loop.
    """
    global _RUNNER
    if _RUNNER is None:  # keep the machine's name and this checkout's path out of the results
        _RUNNER = pyperf.Runner(metadata={"hostname": "-", "python_executable": "python",
                                          "python_config_args": "-"})
    _RUNNER.parse_args(["--worker", "--quiet", f"--loops={loops}", f"--values={values}",
                        f"--warmups={warmups}"])
    return _RUNNER


def record(name: str, values: list[float]) -> pyperf.Benchmark:
    """A benchmark of repetitions measured one value each (whole processes, notebooks)."""
    # pyperf wants positive values; a phase measured from two clocks can round to zero
    return pyperf.Benchmark([pyperf.Run([max(v, 1e-9) for v in values], collect_metadata=False,
                                        metadata={"name": name, "unit": "second"})])


@dataclass
class Results:
    """One benchmark run: pyperf benchmarks by name, and each section's other facts."""

    facts: dict = field(default_factory=dict)  # machine, flags, duration, per-section time
    sections: dict = field(default_factory=dict)  # section key -> JSON-able facts
    benchmarks: dict = field(default_factory=dict)  # name -> pyperf.Benchmark

    def add(self, *benchmarks: pyperf.Benchmark) -> None:
        """File benchmarks by name; a name seen before gets the new runs added (pyperf's runs)."""
        for bench in benchmarks:
            if bench.get_name() in self.benchmarks:
                self.benchmarks[bench.get_name()].add_runs(bench)
            else:
                self.benchmarks[bench.get_name()] = bench

    def values(self, name: str) -> list[float]:
        return list(self.benchmarks[name].get_values())

    def median(self, name: str) -> float:
        return self.benchmarks[name].median()

    def save(self, directory: Path, stamp: str) -> Path:
        """Write STAMP.json (pyperf suite) and STAMP.report.json; return the first."""
        directory.mkdir(parents=True, exist_ok=True)
        suite_path = directory / f"{stamp}.json"
        if self.benchmarks:
            pyperf.BenchmarkSuite(list(self.benchmarks.values())).dump(str(suite_path),
                                                                       replace=True)
        report = {"format": 1, "facts": self.facts, "sections": self.sections}
        (directory / f"{stamp}{REPORT_SUFFIX}").write_text(
            json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return suite_path

    @classmethod
    def load(cls, suite_path: Path) -> "Results":
        """The run saved as `suite_path` (STAMP.json) and its STAMP.report.json."""
        suite_path = Path(suite_path)
        report_path = suite_path.with_name(suite_path.name[:-len(".json")] + REPORT_SUFFIX)
        report = json.loads(report_path.read_text(encoding="utf-8"))
        results = cls(report["facts"], report["sections"])
        if suite_path.exists():
            results.add(*pyperf.BenchmarkSuite.load(str(suite_path)).get_benchmarks())
        return results


MACHINE_CHANGES = ("date", "load average at start (1/5/15 min)")  # not the machine's own


def overlay(base: Results, other: Results, keys: list[str] | None = None) -> Results:
    """`base` with the sections `keys` (default: all `other` measured) taken from `other`.

    A section's benchmarks are named after its key ('tests/...'), so they move with it. The
    report keeps `base`'s machine facts and says which sections come from which run.
    """
    keys = sorted(set(other.sections) if keys is None else set(keys) & set(other.sections))
    merged = Results(dict(base.facts), dict(base.sections), {
        name: bench for name, bench in base.benchmarks.items() if name.split("/")[0] not in keys})
    merged.sections.update({key: other.sections[key] for key in keys})
    merged.benchmarks.update({name: bench for name, bench in other.benchmarks.items()
                              if name.split("/")[0] in keys})
    differs = {k: other.facts["machine"].get(k, "not recorded")  # machine or versions
               for k in {**base.facts["machine"], **other.facts["machine"]}
               if k not in MACHINE_CHANGES
               and base.facts["machine"].get(k) != other.facts["machine"].get(k)}
    merged.facts["other_runs"] = list(base.facts.get("other_runs", [])) + [{
        "stamp": other.facts["stamp"], "sections": keys,
        "date": other.facts["machine"]["date"], "flags": other.facts.get("flags", ""),
        "commit": other.facts.get("commit"), "differs": differs,
        "load": other.facts["machine"].get("load average at start (1/5/15 min)", "n/a"),
        "spent": other.facts.get("spent", {}), "duration": other.facts.get("duration")}]
    return merged


def run_worker(target: str, devices: int, timeout: float = 600,
               **kwargs) -> tuple[list[pyperf.Benchmark], dict]:
    """Run `target` ('module:function') in a fresh Python with `devices` fake CPU devices.

    The function returns (pyperf benchmarks, JSON-able facts); see benchmarks/worker.py.
    WrongProgram if it raised an AssertionError (a program that computed the wrong thing).
    """
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS")}
    env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "suite.json"
        cmd = [sys.executable, "-m", "benchmarks.worker", target, "--devices", str(devices),
               "--args", json.dumps(kwargs), "--out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                              cwd=ROOT)
        wrong = [line for line in proc.stdout.splitlines() if line.startswith("WRONG ")]
        if wrong:
            raise WrongProgram(wrong[-1][len("WRONG "):])
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise RuntimeError(f"worker {target} ({devices} devices) failed "
                               f"(exit {proc.returncode}):\n{tail}")
        benchmarks = pyperf.BenchmarkSuite.load(str(out)).get_benchmarks() if out.exists() else []
        return benchmarks, json.loads(lines[-1][len("RESULT "):])


STACK_SCRIPT = ROOT / "benchmarks" / "launched_stack.py"


def run_stack(mode: str, hosts: int, devices_per_host: int, timeout: float = 300,
              **opts) -> list[dict]:
    """Every host's `BENCH` facts from `launched_stack.py MODE` run as real JAX processes.

    WrongProgram if a host printed `WRONG ...` (a measured program computed the wrong thing).
    """
    from helpers.launch import run

    result = run(STACK_SCRIPT, hosts=hosts, devices_per_host=devices_per_host,
                 args=[mode, json.dumps(opts)], timeout=timeout)
    wrong = [line[len("WRONG "):] for text in result.stdout for line in text.splitlines()
             if line.startswith("WRONG ")]
    if wrong:
        raise WrongProgram(wrong[0])
    result.check()
    return [json.loads(line[len("BENCH "):]) for text in result.stdout
            for line in text.splitlines() if line.startswith("BENCH ")]


def slowest(lines: list[dict], *keys: str) -> list[float]:
    """Per repetition, the slowest host's time at lines[h][keys[0]][keys[1]]...: a run's time."""
    def values(line):
        for key in keys:
            line = line[key]
        return line

    return [max(reps) for reps in zip(*(values(line) for line in lines))]
