"""Section 10: a workshop on one machine: K learners at once, each running notebooks 02 and 08
through the hub's own kernels API (`make bench-hub`, as root; `make bench` leaves it out).

For K = 1, 2, 4 learners (accounts made for the run, removed after it), each learner's kernel
runs every code cell of notebooks 02 and 08, in order, at the same time as the others. While
they run, every process of each learner's Unix account is sampled every 0.1 s: the resident
memory of all of them together (shared pages count once per process, so an upper bound), and
each process's CPU time (a process that ends between two samples loses at most 0.1 s of it).
"""
from __future__ import annotations

import os
import platform
import pwd
import secrets
import statistics
import tempfile
import threading
import time
from pathlib import Path

import psutil

from benchmarks.measure import log, record
from benchmarks.tables import fmt_s, md_table

KEY = "hub"
TITLE = "A workshop on one machine: learners at once through the hub"
NOTEBOOKS = ("02_partition_specs", "08_real_multiprocess")
COUNTS = (1, 2, 4)
QUICK_COUNTS = (1, 2)
SAMPLE_SECONDS = 0.1
GIB = 1024 ** 3
# A neighbour's job that hangs: host 0 waits in a collective host 1 never joins (notebook 12).
HANG = """
from helpers.launch import initialize
initialize()
import time
import jax, jax.numpy as jnp
from jax.experimental import multihost_utils
if jax.process_index() == 0:
    multihost_utils.process_allgather(jnp.ones(1))
time.sleep(600)
"""
HANG_SECONDS = 45  # the hung run's timeout: longer than the neighbour's Run All of 08


class _Sampler(threading.Thread):
    """Samples the processes of some Unix users: peak memory per user, CPU time per process."""

    def __init__(self, uids: dict[str, int]):
        super().__init__(daemon=True)
        self.uids = uids
        self.peak = {name: 0 for name in uids}
        self.cpu: dict[tuple[str, int, float], float] = {}  # (user, pid, start time) -> CPU seconds
        self.done = threading.Event()

    def run(self) -> None:
        by_uid = {uid: name for name, uid in self.uids.items()}
        while not self.done.is_set():
            rss = dict.fromkeys(self.uids, 0)
            for proc in psutil.process_iter(["uids", "memory_info", "cpu_times", "create_time"]):
                info = proc.info
                name = by_uid.get(info["uids"].real) if info["uids"] else None
                if name is None or info["memory_info"] is None:
                    continue
                rss[name] += info["memory_info"].rss
                cpu = info["cpu_times"]
                self.cpu[(name, proc.pid, info["create_time"])] = cpu.user + cpu.system
            for name, total in rss.items():
                self.peak[name] = max(self.peak[name], total)
            self.done.wait(SAMPLE_SECONDS)

    def cpu_seconds(self, name: str) -> float:
        return sum(seconds for (user, _, _), seconds in self.cpu.items() if user == name)


def _one_round(hub_url: str, token: str, names: list[str]) -> dict:
    """Every learner in `names` runs the notebooks at once; their times, memory and CPU."""
    from tools.hub_client import Learner

    learners = [Learner(hub_url, name, token).start() for name in names]  # servers up before the clock
    uids = {name: pwd.getpwnam(name).pw_uid for name in names}
    sampler = _Sampler(uids)
    before = {}
    times: dict[str, dict[str, float]] = {name: {} for name in names}
    errors: list[str] = []

    def learn(learner) -> None:
        home = Path(pwd.getpwnam(learner.name).pw_dir) / "course"
        for notebook in NOTEBOOKS:
            start = time.perf_counter()
            try:
                outputs = learner.run_all(home / f"{notebook}.ipynb")
            except Exception as error:  # noqa: BLE001 - reported below, with the learner's name
                errors.append(f"{learner.name} {notebook}: {type(error).__name__}: {error}")
                return
            times[learner.name][notebook] = time.perf_counter() - start
            errors.extend(f"{learner.name} {notebook}: {o.error}" for o in outputs if o.error)

    sampler.start()
    time.sleep(2 * SAMPLE_SECONDS)
    before = {name: sampler.cpu_seconds(name) for name in names}  # the servers' and kernels' start
    threads = [threading.Thread(target=learn, args=(l,)) for l in learners]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(2 * SAMPLE_SECONDS)
    sampler.done.set()
    sampler.join()
    for learner in learners:
        learner.close()
    if errors:
        raise RuntimeError("a notebook failed through the hub: " + errors[0])
    return {"times": times, "peak": sampler.peak,
            "cpu": {name: sampler.cpu_seconds(name) - before[name] for name in names}}


def _beside_a_hang(hub_url: str, token: str, names: list[str]) -> dict:
    """Learner 0's job hangs (2 hosts x 4 devices) while learner 1 runs notebook 08."""
    from tools.hub_client import Learner

    hung, worker = (Learner(hub_url, name, token).start() for name in names[:2])
    notebook = NOTEBOOKS[-1]
    hang = threading.Thread(target=hung.run, args=(
        f"from helpers.launch import run\nrun(source={HANG!r}, hosts=2, devices_per_host=4, "
        f"timeout={HANG_SECONDS})",), kwargs={"timeout": 2 * HANG_SECONDS})
    hang.start()
    time.sleep(5)  # its hosts are up and waiting
    start = time.perf_counter()
    outputs = worker.run_all(Path(pwd.getpwnam(worker.name).pw_dir) / "course" / f"{notebook}.ipynb")
    seconds = time.perf_counter() - start
    still_hung = hang.is_alive()
    hang.join()
    for learner in (hung, worker):
        learner.close()
    if any(o.error for o in outputs):
        raise RuntimeError(f"{notebook} failed beside a hung job: {next(o.error for o in outputs if o.error)}")
    return {"seconds": seconds, "hung_throughout": still_hung}


def measure(results, opts) -> None:
    from tools import hub

    counts = QUICK_COUNTS if opts.quick else COUNTS
    names = [f"jmcbench{i}" for i in range(1, max(counts) + 1)]
    for name in names:
        hub.make_account(name)
    token = secrets.token_hex(16)
    rounds = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-hub-") as state, \
                hub.Hub(names, hub.free_port(), token=token, state=Path(state)) as running:
            for k in counts:
                log(f"hub: {k} learner(s) run notebooks {', '.join(n[:2] for n in NOTEBOOKS)} at once")
                rounds[k] = _one_round(running.url, token, names[:k])
                for notebook in NOTEBOOKS:
                    walls = [rounds[k]["times"][n][notebook] for n in names[:k]]
                    results.add(record(f"hub/{k} learners/{notebook}", walls))
                    log(f"hub: {k} learner(s), {notebook}: median {fmt_s(statistics.median(walls))}, "
                        f"worst {fmt_s(max(walls))}")
            log("hub: one learner's job hangs while another runs notebook 08")
            beside = _beside_a_hang(running.url, token, names)
            results.add(record(f"hub/beside a hung job/{NOTEBOOKS[-1]}", [beside["seconds"]]))
            log(f"hub: notebook 08 beside a hung job: {fmt_s(beside['seconds'])}")
    finally:
        hub.remove_accounts(names)
    results.sections[KEY] = {
        "cpus": os.cpu_count(), "memory_gib": psutil.virtual_memory().total / GIB,
        "cpu_model": platform.processor() or platform.machine(), "beside_hang": beside,
        "budgets": {notebook: _budget(notebook) for notebook in NOTEBOOKS},
        "rounds": {str(k): {"runall": {nb: [r["times"][n][nb] for n in r["times"]] for nb in NOTEBOOKS},
                            "peak_gib": [v / GIB for v in r["peak"].values()],
                            "cpu_s": list(r["cpu"].values())}
                   for k, r in rounds.items()}}


def _budget(notebook: str) -> float:
    from tools.course_table import budgets

    return budgets()[notebook]


def sizing(data: dict) -> tuple[float, float, float]:
    """(CPU-seconds one learner's two Run Alls need, learners per core, learners per GiB).

    The worst moment of a workshop: every learner presses Run All at once. For all of them to
    finish within the notebooks' Run All budgets, a core may take budget / CPU-seconds learners.
    Both numbers come from the largest round (the most contention), memory from its largest peak.
    """
    r = data["rounds"][max(data["rounds"], key=int)]
    cpu = statistics.mean(r["cpu_s"])
    return cpu, sum(data["budgets"].values()) / cpu, 1 / max(r["peak_gib"])


def render(results) -> str:
    data = results.sections[KEY]
    rows = []
    for k, r in sorted(data["rounds"].items(), key=lambda kv: int(kv[0])):
        cells = [k]
        for notebook in NOTEBOOKS:
            walls = r["runall"][notebook]
            cells.append(f"{fmt_s(statistics.median(walls))} / {fmt_s(max(walls))}")
        cells += [f"{max(r['peak_gib']):.2f} GiB", f"{statistics.mean(r['cpu_s']):.0f} s"]
        rows.append(cells)
    cpu, per_core, per_gib = sizing(data)
    alone = statistics.median(data["rounds"]["1"]["runall"][NOTEBOOKS[-1]])
    beside = data["beside_hang"]
    return "\n".join([
        f"{len(data['rounds'])} rounds on this machine ({data['cpus']} CPUs, {data['memory_gib']:.0f} GiB). "
        "Each learner's kernel, started through the hub, runs every code cell of notebooks 02 and 08 "
        "(its 2-host training runs included) while the other learners do the same.", "",
        md_table(["learners at once", "02 Run All, median / worst", "08 Run All, median / worst",
                  "peak memory of one learner", "CPU time per learner"], rows), "",
        f"Sizing, from the largest round: one learner's two Run Alls take {cpu:.0f} CPU-seconds and at "
        f"most {1 / per_gib:.2f} GiB. For every learner to finish within the notebooks' Run All budgets "
        f"({' + '.join(f'{b:g} s' for b in data['budgets'].values())}) when all of them press Run All "
        f"at once, a core serves {per_core:.1f} learners, and a GiB of memory {per_gib:.1f}; "
        "INSTRUCTORS.md turns this into a machine size.", "",
        f"Beside a neighbour whose 2-host job hangs in a collective (host 0 waits for host 1, which "
        f"never joins), notebook 08's Run All took {fmt_s(beside['seconds'])} against "
        f"{fmt_s(alone)} alone (its budget: {data['budgets'][NOTEBOOKS[-1]]:g} s)"
        + ("; the neighbour's job hung for the whole of it." if beside["hung_throughout"] else
           "; the neighbour's job ended (at its timeout) before it finished."),
    ])
