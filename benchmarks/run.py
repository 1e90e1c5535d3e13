"""Measure the course on this machine and write BENCHMARKS.md (run by `make bench`).

    python benchmarks/run.py                 # everything: about 10 minutes on a quiet 2-core laptop
    python benchmarks/run.py --quick         # 1 repetition of everything, for development
    python benchmarks/run.py --skip-tests    # without the (long) test-suite section
    python benchmarks/run.py --only 1,3 --notebooks 00,02 --output /tmp/b.md

Sections: 1 learner wait (each notebook on a fresh kernel), 2 test suite, 3 explorer redraw,
4 launcher, 5 what the course teaches (train-step variants, assembling global batches).
Every figure is a median of repeated runs with its spread; ratios come from one run, side by
side. The parent process never imports JAX: anything that needs a device count of its own
runs in a subprocess (`run.py --worker NAME`) or under helpers.launch.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OUTPUT = ROOT / "BENCHMARKS.md"
README = ROOT / "README.md"
LAUNCHED = ROOT / "benchmarks" / "launched.py"
BLOCK_START, BLOCK_END = "<!-- bench:start -->", "<!-- bench:end -->"
SECTIONS = {1: "learner", 2: "tests", 3: "explorer", 4: "launcher", 5: "course"}
BENCH_BUDGET_S = 600  # `make bench` itself: under 10 minutes on a 2-core laptop
REAL_PROCESS_MARKERS = ("launch.run(", "from helpers.launch import run")
FLOOR_SOURCE = ("from helpers.devices import use_fake_devices\n\nuse_fake_devices(8)\n\n"
                "import jax\n\njax.devices()")
# Explorer: (hosts, devices per host) per device count, and spec pairs that are valid on all.
EXPLORER_MESHES = {4: (2, 2), 8: (2, 4), 16: (4, 4)}
EXPLORER_SHAPE = "16, 16"
EXPLORER_SPECS = [["'host'", "'device'", "None"], ["('host', 'device')", "None", "None"],
                  ["'device'", "'host'", "None"], ["None", "('host', 'device')", "None"]]
# Global batches from host-local data: base per-host block and its multiples.
ASSEMBLE_BASE_ROWS, ASSEMBLE_FEATURES = 2048, 128  # 1 MiB of float32 per host
ASSEMBLE_MULTIPLES = [1, 4, 16, 64]
ASSEMBLE_PSUM_MULTIPLE = 4
ASSEMBLE_HOSTS = [1, 2, 4]  # with 8 // hosts devices each


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------ statistics, text

@dataclass
class Stat:
    """Summary of repeated measurements (seconds, or a plain ratio)."""

    samples: list[float]

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    @property
    def p95(self) -> float:
        """Nearest-rank 95th percentile."""
        ordered = sorted(self.samples)
        return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]


def _unit(seconds: float) -> tuple[float, str]:
    if seconds >= 1:
        return 1.0, "s"
    if seconds >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def _num(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def fmt_s(seconds: float) -> str:
    """A duration with a readable unit: '12.3 s', '45.6 ms', '780 µs'."""
    scale, unit = _unit(seconds)
    return f"{_num(seconds * scale)} {unit}"


def fmt_stat(stat: Stat | None, spread: str = "range") -> str:
    """'12.3 s (11.9–13.0)': median, then min–max (or p95) in the median's unit."""
    if stat is None or not stat.samples:
        return "–"
    scale, unit = _unit(stat.median)
    head = f"{_num(stat.median * scale)} {unit}"
    if stat.n == 1:
        return head
    if spread == "p95":
        return f"{head} (p95 {_num(stat.p95 * scale)})"
    return f"{head} ({_num(stat.min * scale)}–{_num(stat.max * scale)})"


def fmt_ratio(stat: Stat | None) -> str:
    """'1.9×' or '1.9× (1.8–2.0)'."""
    if stat is None or not stat.samples:
        return "–"
    head = f"{stat.median:.2f}×"
    return head if stat.n == 1 else f"{head} ({stat.min:.2f}–{stat.max:.2f})"


def times_text(n: int) -> str:
    """'once', 'twice', '3 times'."""
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def md_table(headers: list[str], rows: list[list], align: str | None = None) -> str:
    """A GitHub markdown table; `align` is one letter per column: l, r or c."""
    align = align or "l" + "r" * (len(headers) - 1)
    marks = {"l": "---", "r": "---:", "c": ":---:"}
    cells = [[str(c).replace("|", "\\|").replace("\n", " ") for c in row] for row in rows]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


# --------------------------------------------------------------------------- machine facts

def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                  capture_output=True, text=True).stdout.strip()
        except OSError:
            pass
    return platform.processor() or platform.machine()


def machine_facts() -> dict[str, str]:
    """What the numbers were measured on (without importing JAX)."""
    try:
        import psutil

        memory = f"{psutil.virtual_memory().total / 2**30:.1f} GiB"
        physical = psutil.cpu_count(logical=False)
    except ImportError:
        memory, physical = "unknown", None
    cpus = f"{os.cpu_count()}" + (f" ({physical} physical)" if physical else "")
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    version = lambda name: importlib.metadata.version(name)  # noqa: E731
    return {
        "CPUs": cpus,
        "CPU model": _cpu_model(),
        "memory": memory,
        "OS": platform.platform(),
        "Python": platform.python_version(),
        "jax / jaxlib": f"{version('jax')} / {version('jaxlib')}",
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load average at start (1/5/15 min)": load,
    }


# ------------------------------------------------------------------------ subprocess workers

def run_worker(name: str, devices: int, timeout: float = 600, **kwargs) -> dict:
    """Run `worker_<name>(**kwargs)` in a fresh Python with `devices` fake CPU devices."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS")}
    env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name,
           "--devices", str(devices), "--worker-args", json.dumps(kwargs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=ROOT)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"worker {name} ({devices} devices) failed "
                           f"(exit {proc.returncode}):\n{tail}")
    return json.loads(lines[-1][len("RESULT "):])


def worker_startup() -> dict:
    """Nothing: the parent times this process's whole life (import jax, start backend, exit)."""
    import jax

    return {"devices": jax.device_count()}


def worker_explorer(hosts: int, devices_per_host: int, renders: int) -> dict:
    """Time ExplorerState.render: the first one, spec-only redraws and mesh-changed redraws."""
    from helpers.widgets import ExplorerState

    state = ExplorerState(hosts=hosts, devices_per_host=devices_per_host,
                          shape=EXPLORER_SHAPE, spec=list(EXPLORER_SPECS[-1]))

    def timed() -> tuple[float, object]:
        t = time.perf_counter()
        result = state.render()
        elapsed = time.perf_counter() - t
        if result.error:
            raise RuntimeError(f"explorer error: {result.error}")
        return elapsed, result

    first, previous = timed()
    spec_only, mesh_changed, cached = [], [], True
    for i in range(renders):
        state.spec = list(EXPLORER_SPECS[i % len(EXPLORER_SPECS)])
        elapsed, result = timed()
        spec_only.append(elapsed)
        cached = cached and result.mesh_png is not None and result.mesh_png is previous.mesh_png
        previous = result
    orders = ["interleaved", "contiguous"]
    for i in range(renders):
        state.order = orders[i % 2]
        state.spec = list(EXPLORER_SPECS[i % len(EXPLORER_SPECS)])
        elapsed, _ = timed()
        mesh_changed.append(elapsed)
    return {"first": first, "spec_only": spec_only, "mesh_changed": mesh_changed,
            "mesh_cached": cached}


def _course_model():
    """The model and data of notebooks 07-09 (helpers.train), or a stand-in if it is missing."""
    try:
        from helpers import train

        needed = ("init_params", "loss_fn", "global_batch_at", "LEARNING_RATE", "GLOBAL_BATCH")
        if all(hasattr(train, n) for n in needed):
            return train, "helpers.train's MLP and data set"
    except ImportError:
        pass
    import types

    import numpy as np

    def loss_fn(params, x, y):
        import jax.numpy as jnp

        return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)

    def global_batch_at(step, global_batch=32, seed=0):
        rng = np.random.default_rng(seed + step)
        x = rng.normal(size=(global_batch, 4)).astype(np.float32)
        return x, (x @ np.array([[1.0], [-2.0], [0.5], [1.5]], np.float32)).astype(np.float32)

    stand_in = types.SimpleNamespace(
        init_params=lambda seed=1: {"w": np.zeros((4, 1), np.float32), "b": np.zeros(1, np.float32)},
        loss_fn=loss_fn, global_batch_at=global_batch_at, LEARNING_RATE=0.1, GLOBAL_BATCH=32)
    return stand_in, "a linear regression defined in the benchmark"


def worker_train(steps: int, reps: int, batches: list[int]) -> dict:
    """Step time of one SGD step: single device, pmap, shard_map and jit with shardings."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    model, model_name = _course_model()
    n = jax.device_count()
    axes = ("host", "device")
    mesh = jax.make_mesh((2, n // 2), axes)
    replicated, batched = NamedSharding(mesh, P()), NamedSharding(mesh, P(axes))
    lr = model.LEARNING_RATE

    def sgd(params, grads):
        return jax.tree.map(lambda p, g: p - lr * g, params, grads)

    def step(params, x, y):  # the global step: what single-device and jit run
        loss, grads = jax.value_and_grad(model.loss_fn)(params, x, y)
        return sgd(params, grads), loss

    def local_step(axis):  # per-device step of pmap and shard_map: average over `axis`
        def fn(params, x, y):
            loss, grads = jax.value_and_grad(model.loss_fn)(params, x, y)
            grads, loss = jax.lax.pmean((grads, loss), axis)
            return sgd(params, grads), loss
        return fn

    out: dict = {"model": model_name, "devices": n, "steps": steps, "batches": {}}
    for batch in batches:
        x, y = model.global_batch_at(0, batch)
        params = model.init_params()
        dev0 = jax.devices()[0]
        shard = lambda a: a.reshape((n, -1) + a.shape[1:])  # noqa: E731
        to_pmap = jax.pmap(lambda a: a)
        variants = {
            "single device": (jax.jit(step),
                              jax.device_put((params, x, y), dev0)),
            "pmap": (jax.pmap(local_step("batch"), axis_name="batch"),
                     (jax.tree.map(lambda a: to_pmap(np.broadcast_to(a, (n,) + a.shape)), params),
                      to_pmap(shard(x)), to_pmap(shard(y)))),
            "shard_map": (jax.jit(jax.shard_map(local_step(axes), mesh=mesh,
                                                in_specs=(P(), P(axes), P(axes)),
                                                out_specs=(P(), P()))),
                          (jax.device_put(params, replicated), jax.device_put(x, batched),
                           jax.device_put(y, batched))),
            "jit with shardings": (jax.jit(step, in_shardings=(replicated, batched, batched),
                                           out_shardings=(replicated, replicated)),
                                   (jax.device_put(params, replicated),
                                    jax.device_put(x, batched), jax.device_put(y, batched))),
        }
        first_step, losses, times = {}, {}, {name: [] for name in variants}
        for name, (fn, (p, xs, ys)) in variants.items():
            t = time.perf_counter()
            p1, loss = jax.block_until_ready(fn(p, xs, ys))
            first_step[name] = time.perf_counter() - t
            losses[name] = float(np.ravel(np.asarray(loss))[0])
        names = list(variants)
        for r in range(-1, reps):  # round -1 warms every variant up and is not kept
            for name in names[r % len(names):] + names[:r % len(names)]:  # rotate the order
                fn, (p, xs, ys) = variants[name]
                jax.block_until_ready(fn(p, xs, ys))
                t = time.perf_counter()
                for _ in range(steps):  # wait for each step, as a loop that logs its loss does
                    p, loss = jax.block_until_ready(fn(p, xs, ys))
                if r >= 0:
                    times[name].append((time.perf_counter() - t) / steps)
        spread = max(losses.values()) - min(losses.values())
        out["batches"][str(batch)] = {"first_step": first_step, "times": times,
                                      "loss_spread": spread}
    return out


# ---------------------------------------------------------------------- section 1: notebooks

def course_notebooks(selection: list[str] | None = None) -> list[Path]:
    from helpers.nbrun import course_notebooks as found

    paths = found()
    if selection:
        paths = [p for p in paths if any(p.name.startswith(s) for s in selection)]
    return paths


def starts_real_processes(source: str) -> bool:
    """Whether a notebook's source starts real JAX processes through the launcher."""
    return any(marker in source for marker in REAL_PROCESS_MARKERS)


def notebook_budget(number: int, real_processes: bool) -> tuple[float, str]:
    """The issues' Run-All budget for notebook `number`, and why."""
    budget, why = 20.0, "00–06"
    if number in (7, 9):
        budget, why = 30.0, "07, 09"
    if number == 8:
        budget, why = 60.0, "08"
    if (number in (3, 4, 5) or real_processes) and budget < 40:
        budget, why = 40.0, "real processes" if real_processes else "03–05"
    return budget, why


def _notebook_source(path: Path) -> str:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return "\n".join("".join(c.get("source", "")) for c in nb.get("cells", [])
                     if c.get("cell_type") == "code")


def _floor_notebook():
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(FLOOR_SOURCE)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    return nb


def _time_notebook(make_nb) -> tuple[float | None, str | None]:
    from helpers.nbrun import execute

    nb = make_nb()
    t = time.perf_counter()
    try:
        execute(nb)
    except Exception as err:  # noqa: BLE001 - a broken notebook is a result, not a crash
        if getattr(err, "ename", None):  # nbclient's CellExecutionError: the cell's exception
            text = f"{err.ename}: {str(getattr(err, 'evalue', '')).strip()}"
        else:
            lines = str(err).strip().splitlines()
            text = f"{type(err).__name__}: {lines[-1] if lines else ''}"
        return None, text.splitlines()[0][:160]
    return time.perf_counter() - t, None


@dataclass
class NotebookResult:
    name: str
    number: int
    real_processes: bool
    budget: float
    why: str
    times: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)  # the round of each entry of `times`

    def paired_floor(self, floor: list[float]) -> list[tuple[float, float]]:
        """(time, the floor of the same round) for every successful run."""
        return [(t, floor[r]) for t, r in zip(self.times, self.rounds)]


def bench_learner(reps: int, selection: list[str] | None) -> dict:
    from helpers.nbrun import read

    paths = course_notebooks(selection)
    results = []
    for p in paths:
        real = starts_real_processes(_notebook_source(p))
        budget, why = notebook_budget(int(p.name[:2]), real)
        results.append(NotebookResult(p.stem, int(p.name[:2]), real, budget, why))
    floor: list[float] = []
    for r in range(reps):  # round robin: the floor and every notebook in each round
        t, err = _time_notebook(_floor_notebook)
        if err:
            raise RuntimeError(f"the floor notebook failed: {err}")
        floor.append(t)
        log(f"learner wait, round {r + 1}/{reps}: floor {fmt_s(t)}")
        for path, res in zip(paths, results):  # a failed run is reported, and retried next round
            t, err = _time_notebook(lambda: read(path))
            if err:
                res.errors.append(err)
                log(f"  {res.name}: ERROR {err}")
            else:
                res.times.append(t)
                res.rounds.append(r)
                log(f"  {res.name}: {fmt_s(t)}")
    return {"floor": floor, "notebooks": results, "reps": reps}


def render_learner(data: dict) -> str:
    floor = Stat(data["floor"])
    rows = [["floor: `use_fake_devices(8)`, `import jax`, `jax.devices()`", "", "",
             fmt_stat(floor), "1.00×", ""]]
    total, total_budget, over = 0.0, 0.0, []
    for res in data["notebooks"]:
        total_budget += res.budget
        failed = (f"❌ {len(res.errors)} of {len(res.errors) + len(res.times)} runs failed: "
                  f"{res.errors[0]}" if res.errors else "")
        if not res.times:
            rows.append([f"`{res.name}`", "yes" if res.real_processes else "no",
                         f"{res.budget:.0f} s ({res.why})", "–", "–", failed])
            over.append(res.name)
            continue
        stat = Stat(res.times)
        total += stat.median
        ok = stat.median <= res.budget
        if not ok or res.errors:
            over.append(res.name)
        ratio = Stat([t / f for t, f in res.paired_floor(data["floor"])])
        verdict = "✅ pass" if ok else "⚠️ over"
        rows.append([f"`{res.name}`", "yes" if res.real_processes else "no",
                     f"{res.budget:.0f} s ({res.why})", fmt_stat(stat), fmt_ratio(ratio),
                     f"{verdict}; {failed}" if failed else verdict])
    rows.append(["**whole course**", "", f"{total_budget:.0f} s", f"**{fmt_s(total)}**",
                 f"{total / floor.median:.1f}×" if data["notebooks"] else "–", ""])
    table = md_table(["notebook", "starts real processes", "budget", "Run All: median (min–max)",
                      "× floor (same round)", "result"], rows, "llrrrl")
    n = data["reps"]
    measured = [r for r in data["notebooks"] if r.times]
    slowest = max(measured, key=lambda r: statistics.median(r.times), default=None)
    prose = (
        f"What a learner waits for after *Kernel > Restart Kernel and Run All Cells*: each "
        f"notebook executed top to bottom on a fresh kernel (`helpers.nbrun.execute` on a copy), "
        f"{times_text(n)}, median and min–max. The time includes starting the "
        f"kernel. The floor is a notebook with only the first cell every notebook has "
        f"(`use_fake_devices(8)`, `import jax`) plus `jax.devices()`, which starts the backend: "
        f"{fmt_s(floor.median)} that no notebook can go below. The floor and every notebook are "
        f"timed in the same round, so the × floor column compares like with like even when the "
        f"machine's speed drifts. Budgets are the issues': 20 s for 00–06, 40 s for 03–05 and "
        f"any notebook that starts real processes (its source calls `launch.run(` or imports "
        f"`run` from `helpers.launch`), 30 s for 07 and 09, 60 s for 08."
    )
    if slowest is not None:
        prose += (f" The slowest notebook here is `{slowest.name}` at "
                  f"{fmt_s(statistics.median(slowest.times))}.")
    prose += (" " + (f"Over budget or failing: {', '.join(f'`{o}`' for o in over)}."
                     if over else "Every notebook is within its budget."))
    missing = sorted({f"{i:02d}" for i in range(10)} - {f"{r.number:02d}" for r in data["notebooks"]})
    if missing and not data.get("selection"):
        prose += (f" Notebook{'s' if len(missing) > 1 else ''} {', '.join(missing)} did not "
                  "exist when this ran; the whole-course total covers only the ones above.")
    return table + "\n\n" + prose


# ---------------------------------------------------------------------- section 2: test suite

def _pytest_summary(output: str) -> str:
    lines = [l.strip("= ").strip() for l in output.splitlines()
             if re.search(r"\b(passed|failed|error|skipped|no tests ran)\b", l) and " in " in l]
    return re.sub(r"\s+in\s+[\d.]+s.*$", "", lines[-1]) if lines else "no summary"


def _slowest_tests(output: str) -> list[tuple[float, str]]:
    """pytest --durations lines: [(seconds, 'call tests/x.py::test_y'), ...]."""
    found = re.findall(r"^([\d.]+)s (call|setup|teardown)\s+(.+?)\s*$", output, re.M)
    return [(float(t), f"{phase} {name}") for t, phase, name in found]


def bench_tests(reps: int, workers: int = 2) -> dict:
    base = [sys.executable, "-m", "pytest", "-n", str(workers), "--dist", "loadfile", "-q"]
    runs = {"whole suite (`make test` without the install)": base + ["--durations=8"],
            "nbval alone (`notebooks/`)": base + ["notebooks/"]}
    out = {}
    for label, cmd in runs.items():
        times, summary = [], ""
        for r in range(reps):
            t = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            times.append(time.perf_counter() - t)
            summary = _pytest_summary(proc.stdout + proc.stderr)
            slowest = _slowest_tests(proc.stdout)
            broken = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
            log(f"tests: {label} run {r + 1}/{reps}: {fmt_s(times[-1])} ({summary})")
        out[label] = {"times": times, "summary": summary, "slowest": slowest, "broken": broken,
                      "cmd": " ".join(["python", *cmd[1:]])}
    out["workers"] = workers
    return out


def render_tests(data: dict) -> str:
    rows = [[label, f"`{d['cmd']}`", fmt_stat(Stat(d["times"])), d["summary"]]
            for label, d in data.items() if isinstance(d, dict)]
    table = md_table(["run", "command", "wall time", "outcome"], rows, "llrl")
    broken = sorted({b for d in data.values() if isinstance(d, dict) for b in d.get("broken", [])})
    if broken:
        table += ("\n\nFailed or errored at the time: " + ", ".join(f"`{b}`" for b in broken[:6])
                  + (f" and {len(broken) - 6} more" if len(broken) > 6 else "") + ".")
    slowest = [s for d in data.values() if isinstance(d, dict) for s in d.get("slowest", [])]
    if slowest:
        table += "\n\nSlowest tests of the whole suite (one worker's time each):\n\n" + md_table(
            ["test", "time"], [[f"`{name}`", fmt_s(t)] for t, name in slowest[:8]], "lr")
    runs = [d for d in data.values() if isinstance(d, dict)]
    n = len(runs[0]["times"])
    ratio = (Stat(runs[0]["times"]).median / Stat(runs[1]["times"]).median
             if len(runs) == 2 else None)
    prose = (
        f"Wall time of the test suite with the project's pytest configuration and "
        f"{data['workers']} xdist workers (`--dist loadfile`, as `make test` runs it), "
        f"measured {times_text(n)}"
        + (" (one run each: a repetition would not fit the 10-minute budget of `make bench`; "
           "use `--test-repeats 3` for a spread)" if n == 1 else "")
        + ". The whole suite runs every notebook twice (nbval against the committed outputs, "
          "and once with every exercise solved) plus the unit tests"
        + (f"; here it takes {ratio:.1f}× the nbval run" if ratio else "")
        + ". With 2 workers on 2 cores, two notebooks execute at once, each slower than alone "
          "in section 1. The outcome column is the suite's verdict at the time; a failing test "
          "does not stop the timing."
    )
    return table + "\n\n" + prose


# ----------------------------------------------------------------- section 3: explorer redraw

def bench_explorer(renders: int) -> dict:
    out = {}
    for devices, (hosts, per_host) in EXPLORER_MESHES.items():
        log(f"explorer: {devices} devices ({hosts} x {per_host}), {renders} + {renders} redraws")
        out[devices] = {"mesh": (hosts, per_host),
                        **run_worker("explorer", devices, hosts=hosts,
                                     devices_per_host=per_host, renders=renders)}
    return out


def render_explorer(data: dict) -> str:
    cached = all(d["mesh_cached"] for d in data.values())
    rows = []
    for devices, d in data.items():
        row = [f"{devices} ({d['mesh'][0]} hosts × {d['mesh'][1]})", fmt_s(d["first"]),
               fmt_stat(Stat(d["spec_only"]), "p95")]
        if cached:
            row.append(fmt_stat(Stat(d["mesh_changed"]), "p95"))
        rows.append(row)
    headers = ["devices (mesh)", "first render",
               "spec-only redraw: median (p95)" if cached else "redraw: median (p95)"]
    if cached:
        headers.append("mesh-changed redraw: median (p95)")
    n = len(next(iter(data.values()))["spec_only"])
    worst = max(Stat(d["mesh_changed" if cached else "spec_only"]).p95 for d in data.values())
    prose = (
        f"How long the sharding explorer of notebook 02 takes to redraw after a control changes: "
        f"`ExplorerState(...).render()` (layout, text and the PNG pictures) for an array of shape "
        f"({EXPLORER_SHAPE}), in a fresh process per device count with that many fake devices. "
        f"Each redraw follows a change of the PartitionSpec entries, so none is a no-op; "
        f"{n} redraws each."
    )
    if cached:
        prose += (" The state keeps the mesh picture while hosts, devices per host and order stay "
                  "the same, so a spec-only change redraws only the sharding picture; the "
                  "mesh-changed column also flips the mesh order before each redraw, so both "
                  "pictures are drawn.")
    prose += (f" The first render also pays for building the first mesh and matplotlib's first "
              f"figure. The slowest p95 here is {fmt_s(worst)}; the widget itself adds copying "
              f"the control values in and the PNG bytes out to the browser.")
    return md_table(headers, rows, "l" + "r" * (len(headers) - 1)) + "\n\n" + prose


# ---------------------------------------------------------------------- section 4: launcher

def _bench_lines(result) -> list[dict]:
    out = []
    for text in result.stdout:
        out += [json.loads(l[len("BENCH "):]) for l in text.splitlines() if l.startswith("BENCH ")]
    return out


PHASES = [  # (label, start mark, end mark); marks are per-host timestamps, the slowest host wins
    ("process start", "launch", "entry"),
    ("import numpy + jax", "entry", "imported"),
    ("join the run (`initialize`)", "imported", "joined"),
    ("start the backend", "joined", "backend"),
    ("first psum (compile + run)", "backend", "psum"),
    ("exit and shutdown", "psum", "end"),
]


def bench_launcher(reps: int) -> dict:
    from helpers.launch import run

    out: dict = {"runs": {}, "alone": []}
    for hosts, per_host in [(2, 4), (4, 2)]:
        walls, phases = [], {label: [] for label, _, _ in PHASES}
        for r in range(reps):
            t0 = time.time()
            result = run(LAUNCHED, hosts=hosts, devices_per_host=per_host, args=["hello"])
            t1 = time.time()
            result.check()
            lines = _bench_lines(result)
            marks = {k: max(line[k] for line in lines)
                     for k in ("entry", "imported", "joined", "backend", "psum")}
            marks.update(launch=t0, end=t1)
            walls.append(t1 - t0)
            for label, a, b in PHASES:
                phases[label].append(marks[b] - marks[a])
            log(f"launcher: {hosts} x {per_host} run {r + 1}/{reps}: {fmt_s(walls[-1])}")
        out["runs"][f"{hosts} x {per_host}"] = {"wall": walls, "phases": phases}
    for r in range(reps):
        t = time.perf_counter()
        run_worker("startup", 8)
        out["alone"].append(time.perf_counter() - t)
        log(f"launcher: one process alone, run {r + 1}/{reps}: {fmt_s(out['alone'][-1])}")
    return out


def render_launcher(data: dict) -> str:
    headers = ["run", "wall time", *[label for label, _, _ in PHASES], "JAX start-up share"]
    rows = []
    shares, startups = {}, {}
    imports = {k: statistics.median(d["phases"]["import numpy + jax"])
               for k, d in data["runs"].items()}
    for name, d in data["runs"].items():
        startup = [sum(d["phases"][label][i] for label in
                       ("import numpy + jax", "join the run (`initialize`)", "start the backend"))
                   for i in range(len(d["wall"]))]
        share = statistics.median(s / w for s, w in zip(startup, d["wall"]))
        shares[name], startups[name] = share, statistics.median(startup)
        rows.append([f"`run(..., hosts={name.split()[0]}, devices_per_host={name.split()[-1]})`",
                     fmt_stat(Stat(d["wall"])),
                     *[fmt_stat(Stat(d["phases"][label])) for label, _, _ in PHASES],
                     f"{share:.0%}"])
    rows.append(["one process, no launcher: start Python, `import jax`, start the backend, exit",
                 fmt_stat(Stat(data["alone"])), *["" for _ in PHASES], ""])
    n = len(data["alone"])
    prose = (
        f"A real multi-process run of a hello-and-psum script (`benchmarks/launched.py hello`) "
        f"through `helpers.launch.run`, {times_text(n)}. Every host prints wall-clock "
        f"timestamps at script entry, after `import jax`, after `helpers.launch.initialize()`, "
        f"after `jax.devices()` and after a first `psum` over all devices; each phase is measured "
        f"up to the slowest host. *JAX start-up* is import + join + backend. The last row is one "
        f"plain process that imports JAX, starts the backend and exits, for comparison. All "
        f"hosts import JAX at the same moment, and with more processes than cores "
        f"({os.cpu_count()} here) they take turns on the CPU: importing takes "
        + " and ".join(f"{fmt_s(imports[k])} in the {k} run" for k in imports)
        + " although each host imports the same modules."
    )
    joins = [t for d in data["runs"].values() for t in d["phases"]["join the run (`initialize`)"]]
    if joins and max(joins) > 0.5 and min(joins) < 0.2:
        prose += (" Joining the run takes either tens of milliseconds or about a second; in "
                  "trials while this benchmark was written, the slow joins were the runs where "
                  "another host reached `initialize` before host 0, which runs the coordinator, "
                  "and had to retry its connection.")
    if shares:
        prose += (" JAX start-up takes " + ", ".join(
            f"{fmt_s(startups[k])} ({v:.0%}) of the {k} run" for k, v in shares.items()) + ".")
    return md_table(headers, rows, "l" + "r" * (len(headers) - 1)) + "\n\n" + prose


# ------------------------------------------------------------- section 5: what the course teaches

def bench_course(quick: bool) -> dict:
    from helpers.launch import run

    steps, reps = (20, 3) if quick else (30, 5)
    log(f"course: train-step variants, {reps} x {steps} steps")
    train = run_worker("train", 8, steps=steps, reps=reps,
                       batches=[32, 32 * 1024])
    assemble_reps = 2 if quick else 5
    assemble = {}
    for hosts in ASSEMBLE_HOSTS:
        opts = dict(base_rows=ASSEMBLE_BASE_ROWS, features=ASSEMBLE_FEATURES,
                    multiples=ASSEMBLE_MULTIPLES, reps=assemble_reps,
                    psum_multiple=ASSEMBLE_PSUM_MULTIPLE)
        log(f"course: global batches from host-local data, {hosts} host(s)")
        result = run(LAUNCHED, hosts=hosts, devices_per_host=8 // hosts,
                     args=["assemble", json.dumps(opts)], timeout=300).check()
        lines = _bench_lines(result)
        assemble[hosts] = {
            "assemble": {m: [max(l["assemble"][str(m)][r] for l in lines)  # slowest host
                             for r in range(assemble_reps)] for m in ASSEMBLE_MULTIPLES},
            "first_psum": max(l["first_psum"] for l in lines),
            "psum": [max(l["psum"][r] for l in lines) for r in range(assemble_reps)],
        }
    return {"train": train, "assemble": assemble, "assemble_reps": assemble_reps}


def render_course(data: dict) -> str:
    train = data["train"]
    parts = []
    variants = ["single device", "pmap", "shard_map", "jit with shardings"]
    rows = []
    for batch, d in train["batches"].items():
        times = d["times"]
        for name in variants:
            ratio = Stat([t / s for t, s in zip(times[name], times["shard_map"])])
            rows.append([batch, name, fmt_s(d["first_step"][name]), fmt_stat(Stat(times[name])),
                         fmt_ratio(ratio)])
    parts.append(md_table(["global batch", "variant", "first step (compile)",
                           "step time: median (min–max)", "÷ shard_map (same run)"],
                          rows, "rlrrr"))
    reps = len(next(iter(train["batches"].values()))["times"]["shard_map"])
    spread = max(d["loss_spread"] for d in train["batches"].values())

    def ratios(batch: str) -> str:
        times = train["batches"][batch]["times"]
        return ", ".join(
            f"{name} {statistics.median(t / s for t, s in zip(times[name], times['shard_map'])):.2f}×"
            for name in variants if name != "shard_map")

    batches = sorted(train["batches"], key=int)
    parts.append(
        f"One SGD step of {train['model']} on {train['devices']} fake CPU devices, written four "
        f"ways: `jax.jit` on one device; `jax.pmap` with `pmean` over its axis; `jax.shard_map` on "
        f"a `('host', 'device')` mesh with `pmean` over both axes; and `jax.jit` with "
        f"`in_shardings`/`out_shardings`, where XLA inserts the gradient all-reduce. Each figure "
        f"is the mean over {train['steps']} steps, median of {reps} rounds; the four run side by "
        f"side in each round (in a rotating order), and each ratio is taken within a round. The "
        f"first-step losses of the four agree to {spread:.1e}. **The 8 fake devices share this "
        f"machine's {os.cpu_count()} cores, so these ratios show overhead, not speedup:** "
        f"splitting a batch 8 ways here adds dispatch and all-reduce work and no compute. "
        f"Relative to shard_map, at the course's batch of {batches[0]}: {ratios(batches[0])}"
        + "".join(f"; at {b}: {ratios(b)}" for b in batches[1:])
        + ". What the course cares about is that the three data-parallel versions compute the "
          "same step; on accelerators, where every device brings its own compute, the split "
          "is what makes a large batch fast."
    )
    asm = data["assemble"]
    hosts = list(asm)
    mib = ASSEMBLE_BASE_ROWS * ASSEMBLE_FEATURES * 4 / 2**20
    rows = []
    for m in ASSEMBLE_MULTIPLES:
        rows.append([f"{m}× ({ASSEMBLE_BASE_ROWS * m} × {ASSEMBLE_FEATURES} float32, "
                     f"{m * mib:g} MiB)", *[fmt_stat(Stat(asm[h]["assemble"][m])) for h in hosts]])
    parts.append(md_table(["per-host batch",
                           *[f"{h} host{'s' if h > 1 else ''} × {8 // h} devices" for h in hosts]],
                          rows))
    fixed = ASSEMBLE_PSUM_MULTIPLE
    rows = [[f"{h} × {8 // h}", fmt_stat(Stat(asm[h]["assemble"][fixed])),
             fmt_s(asm[h]["first_psum"]), fmt_stat(Stat(asm[h]["psum"]))] for h in hosts]
    parts.append(md_table(["hosts × devices", f"assemble ({fixed * mib:g} MiB per host)",
                           "first psum of it (compile + run)", "compiled psum"], rows))
    assembled = [statistics.median(asm[h]["assemble"][fixed]) for h in hosts]
    growth = assembled[-1] / assembled[0]
    second = [statistics.median(asm[h]["psum"]) for h in hosts]
    prose = (
        f"Assembling a global batch from host-local data: every host of a real run "
        f"(`helpers.launch.run`, {', '.join(map(str, hosts))} hosts with 8 ÷ hosts devices each) "
        f"passes its own rows to `jax.make_array_from_process_local_data(NamedSharding(mesh, "
        f"P(('host', 'device'))), local)` and waits until the copies are done; all hosts start "
        f"together after a barrier, and each figure is the slowest host's time, median (min–max) "
        f"of {data['assemble_reps']} repetitions after a warm-up. The time follows the per-host "
        f"size: assembling is each host copying its own rows onto its own devices, and "
        f"`make_array_from_process_local_data` sends nothing between hosts. At a fixed "
        f"{fixed * mib:g} MiB per host, {hosts[-1]} hosts take {growth:.1f}× the time of "
        f"{hosts[0]}"
        + ("; with more processes than cores, that difference is processes taking turns on the "
           "CPU, not communication" if growth > 1.2 else ", no cross-host cost")
        + ". The psum table is the contrast: a first psum over the same array compiles and "
          "all-reduces it, across processes (gloo over localhost) when there are several hosts, "
          f"and takes {fmt_s(min(asm[h]['first_psum'] for h in hosts))}–"
          f"{fmt_s(max(asm[h]['first_psum'] for h in hosts))}; compiled, a psum takes "
          f"{fmt_s(second[0])} with {hosts[0]} host and {fmt_s(second[-1])} with {hosts[-1]}"
        + (": it grows with the host count, because now the data crosses processes (which, "
           "here, also share the cores)." if second[-1] > 1.2 * second[0] else ".")
    )
    parts.append(prose)
    return "\n\n".join(parts)


# ------------------------------------------------------------------------------ the report

TITLES = {
    1: "1. How long a learner waits: Run All, per notebook",
    2: "2. The test suite",
    3: "3. Interactivity: the sharding explorer's redraw",
    4: "4. The launcher: a real multi-process run, and how much of it is JAX start-up",
    5: "5. What the course teaches, measured",
}


def render_report(facts: dict, results: dict, skipped: dict, args_text: str,
                  duration: float | None, spent: dict | None = None) -> str:
    out = ["# Benchmarks", "",
           "Measured by `make bench` (`python benchmarks/run.py`) on the machine below; rerun it "
           "to measure yours. Medians of repeated runs with their spread (min–max, or p95 where "
           "it says so); ratios are taken between figures measured side by side in one run.", ""]
    out.append(md_table(["machine", ""], [[k, v] for k, v in facts.items()], "ll"))
    run_line = f"Flags: `{args_text or '(none)'}`."
    if duration is not None:
        run_line += (f" This run took {fmt_s(duration)} ({duration / 60:.1f} min; the budget for "
                     f"`make bench` is {BENCH_BUDGET_S // 60} min).")
    out += ["", run_line]
    if spent:
        out += ["", "Where the time went: " + ", ".join(
            f"section {n} {fmt_s(t)}" for n, t in sorted(spent.items())) + "."]
    renderers = {1: render_learner, 2: render_tests, 3: render_explorer, 4: render_launcher,
                 5: render_course}
    for number, title in TITLES.items():
        out += ["", f"## {title}", ""]
        if number in results:
            out.append(renderers[number](results[number]))
        else:
            out.append(f"_Not measured in this run ({skipped.get(number, 'skipped')})._")
    return "\n".join(out) + "\n"


def readme_block(learner: dict, duration: float | None, quick: bool) -> str:
    """The README's short Benchmarks section: the issues' budgets next to the measured values."""
    rows = []
    for res in learner["notebooks"]:
        if res.errors:
            measured = f"❌ {len(res.errors)} of {len(res.errors) + len(res.times)} runs failed"
        else:
            med = statistics.median(res.times)
            measured = f"{fmt_s(med)} {'✅' if med <= res.budget else '⚠️ over'}"
        rows.append([f"`{res.name}`, Run All", f"{res.budget:.0f} s", measured])
    if duration is not None:
        rows.append(["`make bench`" + (" (`--quick`)" if quick else ""),
                     f"{BENCH_BUDGET_S // 60} min",
                     f"{duration / 60:.1f} min {'✅' if duration <= BENCH_BUDGET_S else '⚠️ over'}"])
    facts_line = (f"Last measured on {os.cpu_count()} CPUs, "
                  f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d}"
                  + (", quick run (1 repetition)" if quick else "") + ".")
    return "\n".join([
        BLOCK_START, "## Benchmarks", "",
        "`make bench` measures the course on your machine and writes "
        "[BENCHMARKS.md](BENCHMARKS.md): how long each notebook's Run All takes, the test "
        "suite, the explorer's redraw, the launcher, and what the course teaches (pmap vs "
        f"shard_map vs jit, assembling global batches). {facts_line}", "",
        md_table(["what", "budget", "measured (median)"], rows, "lrr"), BLOCK_END])


def update_readme(text: str, block: str) -> str:
    """Replace the marked block, or insert it before '## For contributors' (else at the end)."""
    pattern = re.compile(re.escape(BLOCK_START) + r".*?" + re.escape(BLOCK_END), re.S)
    if pattern.search(text):
        return pattern.sub(lambda _: block, text, count=1)
    anchor = "## For contributors"
    if anchor in text:
        return text.replace(anchor, block + "\n\n" + anchor, 1)
    return text.rstrip("\n") + "\n\n" + block + "\n"


# -------------------------------------------------------------------------------- main

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/run.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="1 repetition of everything and fewer redraws/steps (development)")
    p.add_argument("--skip-tests", action="store_true", help="skip section 2, the test suite")
    p.add_argument("--only", default="",
                   help="comma-separated sections to run: 1-5 or learner,tests,explorer,launcher,course")
    p.add_argument("--notebooks", default="",
                   help="comma-separated notebook numbers for section 1, e.g. 00,03 (default: all)")
    p.add_argument("--repeats", type=int, default=None,
                   help="repetitions of each Run All and launcher run (default 3; 1 with --quick)")
    p.add_argument("--test-repeats", type=int, default=1,
                   help="test-suite repetitions (default 1: each run takes minutes)")
    p.add_argument("--output", type=Path, default=OUTPUT, help="where to write (BENCHMARKS.md)")
    p.add_argument("--no-readme", action="store_true",
                   help="do not update the Benchmarks block in README.md")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--devices", type=int, default=8, help=argparse.SUPPRESS)
    p.add_argument("--worker-args", default="{}", help=argparse.SUPPRESS)
    return p


def _sections(only: str) -> list[int]:
    if not only:
        return list(SECTIONS)
    names = {v: k for k, v in SECTIONS.items()}
    chosen = []
    for item in (s.strip() for s in only.split(",") if s.strip()):
        number = int(item) if item.isdigit() else names.get(item)
        if number not in SECTIONS:
            raise SystemExit(f"--only: unknown section {item!r}; use 1-5 or {', '.join(names)}")
        chosen.append(number)
    return sorted(set(chosen))


def _worker_main(opts) -> int:
    from helpers.devices import use_fake_devices

    use_fake_devices(opts.devices)
    fn = globals()[f"worker_{opts.worker}"]
    result = fn(**json.loads(opts.worker_args))
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if opts.worker:
        return _worker_main(opts)
    start = time.perf_counter()
    argv_text = " ".join(argv if argv is not None else sys.argv[1:])
    sections = _sections(opts.only)
    skipped = {n: "not in --only" for n in SECTIONS if n not in sections}
    if opts.skip_tests and 2 in sections:
        sections.remove(2)
        skipped[2] = "--skip-tests"
    reps = opts.repeats or (1 if opts.quick else 3)
    facts = machine_facts()
    results: dict = {}
    selection = [s.strip() for s in opts.notebooks.split(",") if s.strip()]

    spent: dict[int, float] = {}

    def write(duration=None) -> None:
        opts.output.write_text(render_report(facts, results, skipped, argv_text, duration, spent),
                               encoding="utf-8")

    runners = {
        1: lambda: {**bench_learner(reps, selection), "selection": selection},
        3: lambda: bench_explorer(8 if opts.quick else 15),
        4: lambda: bench_launcher(reps),
        5: lambda: bench_course(opts.quick),
        2: lambda: bench_tests(opts.test_repeats),
    }
    for number in [n for n in (1, 3, 4, 5, 2) if n in sections]:  # the long test suite last
        log(f"section {TITLES[number]}")
        t = time.perf_counter()
        try:
            results[number] = runners[number]()
        except Exception as err:  # noqa: BLE001 - report it, measure the rest
            log(f"section {number} failed: {err}")
            skipped[number] = f"failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
        spent[number] = time.perf_counter() - t
        log(f"section {number} took {fmt_s(spent[number])}")
        write()
    duration = time.perf_counter() - start
    write(duration)
    log(f"wrote {opts.output} in {fmt_s(duration)}")
    if 1 in results and not opts.no_readme and not selection:
        README.write_text(update_readme(README.read_text(encoding="utf-8"),
                                        readme_block(results[1], duration, opts.quick)),
                          encoding="utf-8")
        log(f"updated the Benchmarks block of {README.name}")
    return 1 if any(v.startswith("failed") for v in skipped.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
