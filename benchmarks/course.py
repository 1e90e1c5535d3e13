"""Section 5: what the course teaches, measured.

- One SGD step written every way the course teaches (benchmarks/train_step.py), each checked
  against the single-device reference before it is timed.
- Assembling a global batch from host-local data in a real multi-process run, against a psum
  that does cross hosts (benchmarks/launched.py).
"""
from __future__ import annotations

import json

from benchmarks import train_step
from benchmarks.measure import ROOT, log, record, run_worker
from benchmarks.tables import fmt_bench, fmt_s, md_table

KEY = "course"
TITLE = "What the course teaches, measured"
LAUNCHED = ROOT / "benchmarks" / "launched.py"
TRAIN_BATCHES = [32, 32 * 1024]  # 4 examples per device, and a batch where compute shows
CHECK_STEPS = 10  # steps after which every variant's parameters must equal single device's
# Global batches from host-local data: base per-host block and its multiples.
ASSEMBLE_BASE_ROWS, ASSEMBLE_FEATURES = 2048, 128  # 1 MiB of float32 per host
ASSEMBLE_MULTIPLES = [1, 4, 16, 64]
ASSEMBLE_PSUM_MULTIPLE = 4
ASSEMBLE_HOSTS = [1, 2, 4]  # with 8 // hosts devices each


def assemble_name(hosts: int, what: str) -> str:
    return f"course/assemble/{hosts} hosts/{what}"


def measure_assemble(results, reps: int) -> dict:
    """Each host of a real run assembles its rows; each figure is the slowest host's time."""
    from helpers.launch import run

    from benchmarks.launcher import bench_lines

    first_psum = {}
    for hosts in ASSEMBLE_HOSTS:
        opts = dict(base_rows=ASSEMBLE_BASE_ROWS, features=ASSEMBLE_FEATURES,
                    multiples=ASSEMBLE_MULTIPLES, reps=reps, psum_multiple=ASSEMBLE_PSUM_MULTIPLE)
        log(f"course: global batches from host-local data, {hosts} host(s)")
        result = run(LAUNCHED, hosts=hosts, devices_per_host=8 // hosts,
                     args=["assemble", json.dumps(opts)], timeout=300).check()
        lines = bench_lines(result)
        for m in ASSEMBLE_MULTIPLES:
            results.add(record(assemble_name(hosts, f"{m}x"),
                               [max(l["assemble"][str(m)][r] for l in lines) for r in range(reps)]))
        results.add(record(assemble_name(hosts, "psum"),
                           [max(l["psum"][r] for l in lines) for r in range(reps)]))
        first_psum[str(hosts)] = max(l["first_psum"] for l in lines)
    return {"reps": reps, "first_psum": first_psum}


def measure_train(results, processes: int, loops: int, values: int) -> dict:
    """Each worker process checks every variant, then times it: one pyperf run per process."""
    train = None
    for p in range(processes):
        log(f"course: train-step variants, process {p + 1}/{processes}: checked after "
            f"{CHECK_STEPS} steps, then {values} x {loops} steps each")
        benchmarks, facts = run_worker("benchmarks.train_step:worker", 8, batches=TRAIN_BATCHES,
                                       check_steps=CHECK_STEPS, loops=loops, values=values,
                                       warmups=1, rotate=p)
        results.add(*benchmarks)
        if train is None:  # compile times: the first process's
            train = facts
        for batch, d in facts["batches"].items():  # agreement: the worst of every process
            worst = train["batches"][batch]["differences"]
            for name, diff in d["differences"].items():
                worst[name] = max(worst[name], diff)
    train["processes"] = processes
    return train


def measure(results, opts) -> None:
    processes, loops, values = (1, 10, 3) if opts.quick else (3, 20, 3)
    results.sections[KEY] = {"train": measure_train(results, processes, loops, values),
                             "assemble": measure_assemble(results, 2 if opts.quick else 5)}


def ratio_line(results, batch: str) -> str:
    """'shard_map step / pmap step: 1.05x' (medians measured in one run)."""
    ratio = (results.median(train_step.step_name(int(batch), "shard_map"))
             / results.median(train_step.step_name(int(batch), "pmap")))
    return f"shard_map step / pmap step: {ratio:.2f}x"


def nnx_ratio_line(results, batch: str) -> str:
    """'Flax NNX + Optax step on the mesh / on one device: 1.30x' (medians of one run)."""
    ratio = (results.median(train_step.step_name(int(batch), train_step.NNX_MESH))
             / results.median(train_step.step_name(int(batch), train_step.NNX_SINGLE)))
    return f"Flax NNX + Optax step on the mesh / on one device: {ratio:.2f}x"


def agreement_line(train: dict, batch: str) -> str:
    """'parameters after 10 steps, largest difference from single device: 1.2e-07'."""
    largest = max(train["batches"][batch]["differences"].values())
    return (f"parameters after {train['check_steps']} steps, largest difference from single "
            f"device: {largest:.2g}")


def render_train(results) -> str:
    train = results.sections[KEY]["train"]
    batches = sorted(train["batches"], key=int)  # JSON keys are text
    rows = []
    for batch in batches:
        d = train["batches"][batch]
        pmap = results.median(train_step.step_name(int(batch), "pmap"))
        for name in train["variants"]:
            bench = results.benchmarks[train_step.step_name(int(batch), name)]
            rows.append([batch, name, fmt_s(d["first_step"][name]), fmt_bench(bench),
                         f"{bench.median() / pmap:.2f}×", f"{d['differences'][name]:.2g}"])
    parts = [md_table(["global batch", "variant", "first step (compile)",
                       "step time: median (min–max)", "÷ pmap",
                       f"largest parameter difference after {train['check_steps']} steps"],
                      rows, "rlrrrr")]
    for batch in batches:
        lines = [f"**Global batch {batch}**", ratio_line(results, batch)]
        if train_step.NNX_MESH in train["variants"]:
            lines.append(nnx_ratio_line(results, batch))
        parts.append("\n\n".join(lines + [agreement_line(train, batch)]))
    n = len(results.values(train_step.step_name(int(batches[0]), "pmap")))
    cpus = results.facts["machine"]["CPUs"].split()[0]
    parts.append(
        f"One SGD step of helpers.training.tiny's MLP and data set on {train['devices']} fake CPU "
        f"devices, written as the course writes it: `jax.jit` on one device; `jax.pmap` with "
        f"`pmean` of the gradients over its axis; `jax.shard_map` on a `('host', 'device')` mesh "
        f"with `check_vma` on, taking the gradient of the `pmean`'d loss (notebook 06's fix of "
        f"the gradient trap); `jax.jit` under `jax.set_mesh` on an Explicit mesh, where the "
        f"shardings are in the inputs' types and XLA adds the all-reduce; and notebook 10's "
        f"Flax NNX model with Optax AdamW, once as its single-device reference "
        f"(`nnx_model.reference_step`, an `nnx.jit`) and once as the `jax.jit` step on the "
        f"`('host', 'device')` mesh with the state placed by `nnx_model.state_shardings` (AdamW "
        f"moments split over `'device'`). **Every variant is checked before it is timed:** "
        f"after {train['check_steps']} steps from the same start, its parameters must equal its "
        f"single-device reference's within {train['tolerance']:g} (the SGD variants: single "
        f"device's; the Flax mesh step: the Flax single-device step's), or the benchmark stops "
        f"with an error instead of timing a wrong program (the last column is that check, the "
        f"worst of every process). Each time is "
        f"pyperf's: {train['processes']} worker processes (pyperf's runs, each timing the "
        f"variants in a different order), each one warm-up and then values that are the mean of "
        f"{train['loops']} steps, {n} values in all, waiting for every step as a loop that logs "
        f"its loss does; the ratios are of medians from the same run. **The "
        f"{train['devices']} fake devices share this machine's {cpus} cores, so these "
        f"ratios show overhead, not speedup:** splitting a batch here adds dispatch and "
        f"all-reduce work and no compute. The Flax single-device step also pays NNX's "
        f"Python-side bookkeeping (merging the graph and the state) on every call.")
    return "\n\n".join(parts)


def render_assemble(results) -> str:
    data = results.sections[KEY]["assemble"]
    hosts = ASSEMBLE_HOSTS
    mib = ASSEMBLE_BASE_ROWS * ASSEMBLE_FEATURES * 4 / 2**20
    bench = lambda h, what: results.benchmarks[assemble_name(h, what)]  # noqa: E731
    rows = [[f"{m}× ({ASSEMBLE_BASE_ROWS * m} × {ASSEMBLE_FEATURES} float32, {m * mib:g} MiB)",
             *[fmt_bench(bench(h, f"{m}x")) for h in hosts]] for m in ASSEMBLE_MULTIPLES]
    parts = [md_table(["per-host batch",
                       *[f"{h} host{'s' if h > 1 else ''} × {8 // h} devices" for h in hosts]],
                      rows)]
    fixed = ASSEMBLE_PSUM_MULTIPLE
    rows = [[f"{h} × {8 // h}", fmt_bench(bench(h, f"{fixed}x")),
             fmt_s(data["first_psum"][str(h)]), fmt_bench(bench(h, "psum"))] for h in hosts]
    parts.append(md_table(["hosts × devices", f"assemble ({fixed * mib:g} MiB per host)",
                           "first psum of it (compile + run)", "compiled psum"], rows))
    growth = bench(hosts[-1], f"{fixed}x").median() / bench(hosts[0], f"{fixed}x").median()
    psums = [bench(h, "psum").median() for h in hosts]
    firsts = list(data["first_psum"].values())
    parts.append(
        f"Assembling a global batch from host-local data: every host of a real run "
        f"(`helpers.launch.run`, {', '.join(map(str, hosts))} hosts with 8 ÷ hosts devices each) "
        f"passes its own rows to `jax.make_array_from_process_local_data(NamedSharding(mesh, "
        f"P(('host', 'device'))), local)` and waits until the copies are done; all hosts start "
        f"together after a barrier, and each figure is the slowest host's time, median (min–max) "
        f"of {data['reps']} repetitions after a warm-up. The time follows the per-host size: "
        f"assembling is each host copying its own rows onto its own devices, and "
        f"`make_array_from_process_local_data` sends nothing between hosts. At a fixed "
        f"{fixed * mib:g} MiB per host, {hosts[-1]} hosts take {growth:.1f}× the time of "
        f"{hosts[0]}"
        + ("; with more processes than cores, that difference is processes taking turns on the "
           "CPU, not communication" if growth > 1.2 else ", no cross-host cost")
        + ". The psum table is the contrast: a first psum over the same array compiles and "
          "all-reduces it, across processes (gloo over localhost) when there are several hosts, "
          f"and takes {fmt_s(min(firsts))}–{fmt_s(max(firsts))}; compiled, a psum takes "
          f"{fmt_s(psums[0])} with {hosts[0]} host and {fmt_s(psums[-1])} with {hosts[-1]}"
        + (": it grows with the host count, because now the data crosses processes (which, "
           "here, also share the cores)." if psums[-1] > 1.2 * psums[0] else "."))
    return "\n\n".join(parts)


def render(results) -> str:
    return render_train(results) + "\n\n" + render_assemble(results)

