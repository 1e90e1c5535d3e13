"""The benchmarks cannot rot: their smallest pieces run here, fast and without timed assertions."""
import json
import os
import re
import types
from pathlib import Path

import pytest

from helpers.devices import use_fake_devices

use_fake_devices(8)

from benchmarks import (checkpoints, collectives, compare, course, explorer, tables,  # noqa: E402
                        learner, loaders, measure, report, restarts, run, runs, testsuite,
                        train_step)
from benchmarks import migrate as migrate_bench  # noqa: E402
from tools import course_table  # noqa: E402


def refuses(**kwargs):
    """A worker target whose measured program 'computed the wrong thing'."""
    raise AssertionError("parameters differ\nby 8x")


def _results(**sections) -> measure.Results:
    return measure.Results(facts={"machine": {"CPUs": "2"}, "stamp": "T", "skipped": {}},
                           sections=sections)


def test_markdown_table_and_number_formats():
    table = tables.md_table(["a", "b|c"], [["x", 1], ["y\nz", "p|q"]], "lr")
    assert table.splitlines() == ["| a | b|c |", "|---|---:|", "| x | 1 |", "| y z | p\\|q |"]
    assert tables.fmt_s(12.345) == "12.3 s" and tables.fmt_s(0.0456) == "45.6 ms"
    assert tables.fmt_s(0.00078) == "780 µs"
    bench = measure.record("x", [0.010, 0.012, 0.030])
    assert tables.fmt_bench(bench) == "12 ms (10–30)"
    assert tables.fmt_bench(bench, "p95").startswith("12 ms (p95 ")
    assert tables.fmt_bench(measure.record("y", [2.0])) == "2 s"
    assert tables.fmt_ratio([1.5, 2.0, 2.5]) == "2.00× (1.50–2.50)"


def test_pytest_output_is_read():
    out = ("===== slowest 8 durations =====\n"
           "45.12s call     notebooks/08_real_multiprocess.ipynb::Cell 3\n"
           "3.20s setup    tests/test_x.py::test_y[a b]\n"
           "===== 2 failed, 751 passed in 256.01s (0:04:16) =====\n")
    assert testsuite.slowest_tests(out) == [
        (45.12, "call notebooks/08_real_multiprocess.ipynb::Cell 3"),
        (3.2, "setup tests/test_x.py::test_y[a b]")]
    assert testsuite.pytest_summary(out) == "2 failed, 751 passed"
    run = {"summary": "1 failed", "cmd": "python -m pytest", "broken": ["t.py::a"],
           "slowest": testsuite.slowest_tests(out)}
    labels = list(testsuite.RUNS)
    results = _results(tests={"workers": 2, "runs": {labels[0]: run, labels[1]: run}})
    results.add(measure.record(testsuite.bench_name(labels[0]), [200.0]),
                measure.record(testsuite.bench_name(labels[1]), [50.0]))
    text = testsuite.render(results)
    assert "`t.py::a`" in text and "4.0× the nbval run" in text and "45.1 s" in text


def test_budgets_come_from_the_front_matter_and_reach_the_report(monkeypatch):
    expected = course_table.read_info(course_table.course_sources()[0]).run_all_budget_s
    monkeypatch.setattr(learner, "_time_notebook", lambda make_nb: (1.5, None))
    results = _results()
    learner.measure(results, types.SimpleNamespace(notebooks=["00"], notebook_repeats=2))
    (nb,) = results.sections["learner"]["notebooks"]
    assert nb["stem"] == "00_fake_devices" and nb["budget"] == expected
    assert f"| {expected:g} s |" in learner.render(results)
    assert learner.readme_rows(results) == [["`00_fake_devices`, Run All", f"{expected:g} s",
                                             "1.5 s ✅"]]


def test_learner_table_reports_failed_runs_and_over_budget():
    results = _results(learner={"reps": 3, "selection": ["00", "02"], "notebooks": [
        {"stem": "00_fake_devices", "budget": 40.0, "rounds": [0, 2], "errors": ["ValueError: boom"]},
        {"stem": "02_partition_specs", "budget": 20.0, "rounds": [1], "errors": []}]})
    results.add(measure.record(learner.FLOOR, [2.0, 2.5, 3.0]),
                measure.record(learner.bench_name("00_fake_devices"), [8.0, 9.0]),
                measure.record(learner.bench_name("02_partition_specs"), [25.0]))
    text = learner.render(results)
    assert "1 of 3 runs failed: ValueError: boom" in text and "⚠️ over" in text
    assert "| 10.00× |" in text  # 25 s over the floor of its own round (2.5 s)


def test_readme_block_is_inserted_once_then_replaced():
    text = "# t\n\n## Troubleshooting\n\nx\n\n## For contributors\n\nsee\n"
    first = report.update_readme(text, f"{report.BLOCK_START}\nold\n{report.BLOCK_END}")
    assert first.index(report.BLOCK_START) < first.index("## For contributors")
    second = report.update_readme(first, f"{report.BLOCK_START}\nnew\n{report.BLOCK_END}")
    assert "new" in second and "old" not in second and second.count(report.BLOCK_START) == 1


@pytest.fixture(scope="module")
def variants():
    return train_step.build_variants(32)


def test_every_variant_agrees_with_single_device_after_a_few_steps(variants):
    assert set(variants) == set(train_step.VARIANTS)
    differences = train_step.check_agreement(variants, steps=3)
    assert set(differences) == set(train_step.VARIANTS)
    assert all(d <= train_step.TOLERANCE for d in differences.values()), differences


def test_the_gradient_trap_is_caught_before_anything_is_timed(variants):
    import jax
    from jax.sharding import PartitionSpec as P

    from helpers.training import tiny

    def pmean_of_grads(p, x, y):  # the trap: with check_vma on, grads are already summed
        loss, grads = jax.value_and_grad(tiny.loss_fn)(p, x, y)
        grads, loss = jax.lax.pmean((grads, loss), train_step.AXES)
        return jax.tree.map(lambda a, g: a - tiny.LEARNING_RATE * g, p, grads), loss

    mesh = jax.make_mesh((2, 4), train_step.AXES)
    trapped = dict(variants)
    trapped["shard_map"] = train_step.Variant(
        "shard_map", jax.jit(jax.shard_map(pmean_of_grads, mesh=mesh,
                                           in_specs=(P(), P(train_step.AXES), P(train_step.AXES)),
                                           out_specs=(P(), P()))),
        variants["shard_map"].start, unplace=variants["shard_map"].unplace)
    with pytest.raises(train_step.DisagreementError,
                       match=r"after 2 steps .* shard_map by [\d.e+-]+\. The benchmark would time"):
        train_step.check_agreement(trapped, steps=2)


def test_a_flax_step_that_trains_on_one_hosts_rows_is_caught(variants):
    import jax
    from flax import nnx

    from helpers.training import nnx_model

    right = variants[train_step.NNX_MESH]
    graphdef, _ = nnx_model.abstract_state()
    placement = jax.tree.map(lambda a: a.sharding, right.start[0])  # as notebook 10 places it

    def one_hosts_rows(state, x, y):  # the mistake: the loss of host 0's half of the batch
        model, optimizer = nnx.merge(graphdef, state)
        half = x.shape[0] // 2
        loss, grads = nnx.value_and_grad(nnx_model.loss_fn)(model, x[:half], y[:half])
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    wrong = dict(variants)
    wrong[train_step.NNX_MESH] = train_step.Variant(
        right.name, jax.jit(one_hosts_rows, out_shardings=(placement, None)), right.start,
        unplace=right.unplace, reference=train_step.NNX_SINGLE)
    assert right.reference == train_step.NNX_SINGLE  # AdamW is checked against AdamW
    with pytest.raises(train_step.DisagreementError,
                       match=r"after 2 steps .*: Flax NNX \+ Optax, mesh by [\d.e+-]+\. The"):
        train_step.check_agreement(wrong, steps=2)
    with pytest.raises(ValueError, match="references .* are not among the variants"):
        train_step.check_agreement({train_step.NNX_MESH: right}, steps=1)


def test_a_wrong_program_stops_the_run_through_the_worker():
    with pytest.raises(measure.WrongProgram, match="^parameters differ by 8x$"):
        measure.run_worker("tests.test_benchmarks:refuses", 1, timeout=120)


def _train_results(ratio: float) -> measure.Results:
    train = {"devices": 8, "check_steps": 10, "tolerance": 1e-5, "loops": 20, "processes": 1,
             "variants": list(train_step.VARIANTS), "batches": {}}
    results = _results()
    for batch in (32, 32768):
        train["batches"][str(batch)] = {
            "first_step": {v: 0.3 for v in train_step.VARIANTS},
            "differences": {"single device": 0.0, "pmap": 1.2e-7, "shard_map": 2.4e-7,
                            "jit, Explicit mesh": 1e-7, train_step.NNX_SINGLE: 0.0,
                            train_step.NNX_MESH: 2e-7}}
        for v, t in zip(train_step.VARIANTS, (1e-4, 1e-3, ratio * 1e-3, 1.1e-3, 2e-3, 2.6e-3)):
            results.add(measure.record(train_step.step_name(batch, v), [t, t * 1.1, t * 0.9]))
    results.sections["course"] = {"train": train}
    return results


def test_the_report_states_the_ratio_and_the_agreement_per_batch():
    text = course.render_train(_train_results(1.05))
    assert re.findall(r"^shard_map step / pmap step: (\d+\.\d\d)x$", text, re.M) == ["1.05"] * 2
    found = re.findall(r"^parameters after (\d+) steps, largest difference from single device: "
                       r"(\S+)$", text, re.M)
    assert found == [("10", "2.4e-07")] * 2
    assert "**Global batch 32768**" in text
    row = "| 32 | Flax NNX + Optax, mesh | 300 ms | 2.6 ms (2.34–2.86) | 2.60× | 2e-07 |"
    assert row in text
    assert re.findall(r"^Flax NNX \+ Optax step on the mesh / on one device: (\S+)x$", text,
                      re.M) == ["1.30"] * 2


def test_one_explorer_redraw_is_timed():
    benchmarks, facts = explorer.worker(hosts=2, devices_per_host=4, renders=2)
    assert [b.get_name() for b in benchmarks] == [explorer.bench_name(8, k) for k in explorer.KINDS]
    assert all(len(b.get_values()) == 2 for b in benchmarks) and facts["mesh_cached"] is True
    meta = benchmarks[0].get_metadata()  # results get committed: no machine name, no paths
    assert meta["hostname"] == meta["python_config_args"] == "-"
    assert meta["python_executable"] == "python"
    results = _results(explorer={"renders": 2, "meshes": {"8": facts}})
    results.add(*benchmarks)
    text = explorer.render(results)
    assert "8 (2 hosts × 4)" in text and "mesh-changed" in text


def test_results_are_kept_as_json_and_two_runs_compare(tmp_path):
    old, new = _train_results(1.0), _train_results(1.5)
    old.save(tmp_path, "OLD")
    new.save(tmp_path, "NEW")
    loaded = measure.Results.load(tmp_path / "NEW.json")
    assert loaded.sections == new.sections
    name = train_step.step_name(32, "shard_map")
    assert loaded.values(name) == pytest.approx(new.values(name))
    assert course.render_train(loaded) == course.render_train(new)  # a report without measuring
    table = compare.comparison(compare.medians(tmp_path / "OLD.json"),
                               compare.medians(tmp_path / "NEW.json"), "OLD", "NEW")
    assert f"| {name} | 1 ms | 1.5 ms | 1.50× |" in table
    with pytest.raises(SystemExit, match="no results file 'missing'"):
        compare.resolve("missing")


def test_pyperf_runs_of_several_processes_merge_by_name():
    results = _results()
    results.add(measure.record("a", [1.0, 2.0]))
    results.add(measure.record("a", [3.0]))
    assert results.values("a") == [1.0, 2.0, 3.0] and results.median("a") == 2.0


def test_a_wrong_program_stops_make_bench_and_the_report_says_why(tmp_path, monkeypatch):
    def wrong(results, opts):
        raise measure.WrongProgram("shard_map by 101")

    monkeypatch.setattr(course, "measure", wrong)
    out = tmp_path / "B.md"
    status = run.main(["--only", "5", "--output", str(out), "--results-dir", str(tmp_path),
                       "--no-readme"])
    assert status == 2
    text = out.read_text(encoding="utf-8")
    assert "_Not measured in this run (STOPPED, a measured program computed the wrong thing: " \
           "shard_map by 101)._" in text and "shard_map step / pmap step" not in text
    assert run.chosen_sections("5,learner") == ["learner", "course"]
    with pytest.raises(SystemExit, match="unknown section 'nine'"):
        run.chosen_sections("nine")


QUICK = types.SimpleNamespace(quick=True)


def test_orbax_saves_on_2x4_and_restores_on_4x2_in_quick_mode():
    results = _results()
    checkpoints.measure(results, QUICK)
    data = results.sections["checkpoints"]
    assert data["sizes"] == [str(s) for s in checkpoints.QUICK["sizes"]]
    assert data["bytes"]["256"] == 3 * 256 * 256 * 4 and 0 < data["bytes"]["course"] < 4096
    for what in ("save", "restore"):
        assert len(results.values(checkpoints.bench_name(what, "course"))) == 1
    text = checkpoints.render(results)
    assert "| notebook 10's train state (" in text
    assert "| 256 × 256 float32 × 3 (3 arrays, 768 KiB) |" in text
    assert "restore on 4 × 2" in text and "every number came back" in text


def test_grain_and_numpy_loaders_are_timed_per_host_in_quick_mode():
    results = _results()
    loaders.measure(results, QUICK)
    assert results.sections["loaders"]["rows_per_host"] == {"256": 128}
    for loader in loaders.LOADERS:
        for stage in loaders.STAGES:
            assert len(results.values(loaders.bench_name(256, loader, stage))) == 1
    text = loaders.render(results)
    assert text.count("| 256 (128 per host) |") == 2 and "Grain `HostLoader`" in text


def test_flat_and_hierarchical_all_reduce_beside_the_cost_model_in_quick_mode():
    results = _results()
    collectives.measure(results, QUICK)
    costs = results.sections["collectives"]["costs"]
    cols = collectives.QUICK["columns"][0]
    flat, hier = (costs[collectives.cost_key(2, 4, cols, n)] for n in collectives.PROGRAMS)
    assert flat["collectives"] == ["all-reduce"]
    assert hier["collectives"] == ["reduce-scatter", "all-reduce", "all-gather"]
    assert hier["across"] < flat["across"]  # the point of the hierarchical all-reduce
    text = collectives.render(results)
    assert "| 2 × 4 | 1 KiB | hierarchical | reduce-scatter, all-reduce, all-gather |" in text


def test_a_host_that_saw_a_wrong_result_stops_the_run(tmp_path, monkeypatch):
    script = tmp_path / "wrong.py"
    script.write_text("import sys\nfrom helpers.launch import initialize\ninitialize()\n"
                      "print('WRONG host 0: the state restored from step 1 differs', flush=True)\n"
                      "sys.exit(3)\n", encoding="utf-8")
    monkeypatch.setattr(measure, "STACK_SCRIPT", script)
    with pytest.raises(measure.WrongProgram, match="^host 0: the state restored from step 1"):
        measure.run_stack("ckpt_restore", 1, 1, timeout=120)


def test_every_section_has_a_quick_mode_and_make_bench_leaves_the_test_suite_out():
    assert [s.KEY for s in run.SECTIONS][5:] == ["checkpoints", "loaders", "collectives", "restarts", "hub",
                                                 "verdicts", "floor", "migrate"]
    assert not {"tests", "hub"} & set(run.ORDER) and set(run.ORDER + run.APART) == {s.KEY for s in run.SECTIONS}
    assert run.chosen_sections("") == run.ORDER and run.chosen_sections("tests") == ["tests"]
    assert run.chosen_sections("hub") == ["hub"] and run.chosen_sections("10") == ["hub"]
    assert run.chosen_sections("2,learner") == ["learner", "tests"]  # the test suite last
    for section in (checkpoints, loaders, collectives):
        assert section.QUICK.keys() == section.FULL.keys()


def _stamped(results: measure.Results, stamp: str, flags: str = "", commit: str | None = None,
             date: str = "D", **facts) -> measure.Results:
    results.facts.update(stamp=stamp, flags=flags, commit=commit, machine={
        "CPUs": "2", "date": date, "load average at start (1/5/15 min)": "1.00 / 1.00 / 1.00"},
        **facts)
    return results


def _tests_run(stamp: str, whole: float, commit: str | None = "abc1234",
               date: str = "D2") -> measure.Results:
    """A `make bench-tests` run: only the test-suite section."""
    labels = list(testsuite.RUNS)
    run_facts = {"summary": "9 passed", "cmd": "python -m pytest", "broken": [], "slowest": []}
    results = _results(tests={"workers": 2, "runs": {label: run_facts for label in labels}})
    results.add(measure.record(testsuite.bench_name(labels[0]), [whole]),
                measure.record(testsuite.bench_name(labels[1]), [whole / 4]))
    return _stamped(results, stamp, "--only tests", commit, date, full=False,
                    spent={"2": whole * 1.25})


TRAIN_AND_TESTS = [types.SimpleNamespace(KEY="course", TITLE="Train", render=course.render_train),
                   testsuite]


def test_a_partial_rerun_is_rendered_over_the_full_run():
    old = _stamped(_train_results(1.0), "20260101T000000Z")
    new = _stamped(_train_results(1.5), "20260102T000000Z", "--only 5", "abc1234",
                   spent={"1": 30.0})
    old.sections["explorer"] = {"renders": 2, "meshes": {}}
    merged = measure.overlay(old, new)
    name = train_step.step_name(32, "shard_map")
    assert merged.median(name) == pytest.approx(1.5e-3) and "explorer" in merged.sections
    assert old.median(name) == pytest.approx(1e-3)  # the runs themselves are left alone
    text = report.render_report(merged, TRAIN_AND_TESTS[:1])
    assert ("## 1. Train\n\n_Measured by `python -m benchmarks.run --only 5` on D at commit "
            "`abc1234`, after the rest of this report, on the same machine (load average at "
            "start 1.00 / 1.00 / 1.00); raw results `benchmarks/results/20260102T000000Z.json`; "
            "this section took 30 s._") in text
    assert "Section 1 comes from another run: see its heading." in text
    assert runs.command("--only tests") == "`make bench-tests`" == runs.command(" --only tests")
    assert "shard_map step / pmap step: 1.50x" in text
    twice = report.render_report(measure.overlay(merged, new), TRAIN_AND_TESTS[:1])
    assert twice.count("_Measured by") == 1  # a section names only the run it shows


def test_the_checkout_commit_is_recorded_and_only_real_changes_make_it_dirty(tmp_path):
    import subprocess

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                       cwd=tmp_path, check=True, capture_output=True)

    assert runs.source_commit(tmp_path).startswith("unknown")
    (tmp_path / "README.md").write_text(f"x\n{report.BLOCK_START}\nold\n{report.BLOCK_END}\n")
    (tmp_path / "code.py").write_text("a = 1\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "c")
    head = runs.source_commit(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{7,}", head)
    (tmp_path / "README.md").write_text(f"x\n{report.BLOCK_START}\nnew\n{report.BLOCK_END}\n")
    (tmp_path / "BENCHMARKS.md").write_text("report\n")
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "S.json").write_text("{}\n")
    (tmp_path / "benchmarks" / "heldout").mkdir()
    (tmp_path / "benchmarks" / "heldout" / "set1.json").write_text("{}\n")  # a held-out set's scores
    assert runs.source_commit(tmp_path) == head  # what make bench writes itself
    (tmp_path / "README.md").write_text(f"y\n{report.BLOCK_START}\nnew\n{report.BLOCK_END}\n")
    assert runs.source_commit(tmp_path) == head + "+dirty"
    git("checkout", "README.md")
    (tmp_path / "code.py").write_text("a = 2\n")
    assert runs.source_commit(tmp_path) == head + "+dirty"


def test_the_report_takes_the_newest_test_suite_run_and_shows_its_stamp(tmp_path):
    full = _stamped(_train_results(1.0), "20260101T000000Z", duration=400.0, full=True,
                    spent={"1": 390.0})
    full.facts["skipped"] = {"tests": runs.TESTS_APART}
    full.save(tmp_path, "20260101T000000Z")
    alone = report.render_report(runs.compose(tmp_path), TRAIN_AND_TESTS)
    assert ("_Not measured in this run (the test suite takes as long as a whole `make test`, so "
            "`make bench` leaves it out: run `make bench-tests` to measure it") in alone
    _tests_run("20251231T000000Z", 999.0, commit=None, date="D0").save(tmp_path,
                                                                       "20251231T000000Z")
    suite = _tests_run("20260102T000000Z", 200.0)
    suite.save(tmp_path, "20260102T000000Z")
    quick = _stamped(_train_results(9.0), "20260103T000000Z", "--quick", quick=True)
    quick.save(tmp_path, "20260103T000000Z")  # not what make bench measures: never the base
    merged = runs.compose(tmp_path)
    assert merged.facts["stamp"] == "20260101T000000Z"
    assert testsuite.whole_suite_seconds(merged) == 200.0  # the newest test-suite run
    text = report.render_report(merged, TRAIN_AND_TESTS)
    assert ("## 2. The test suite\n\n_Measured by `make bench-tests` on D2 at commit `abc1234`, "
            "after the rest of this report, on the same machine") in text
    assert "this section took 250 s._" in text and "| 200 s | 9 passed |" in text
    assert "This run took 400 s (6.7 min; the budget for `make bench` is 10 min)." in text
    assert "| `make test`, warm (measured D2) | 10 min | 3.3 min ✅ |" in report.readme_block(
        _with_learner(merged))
    newer = _stamped(_train_results(1.2), "20260104T000000Z", "", "def5678", full=True)
    newer.facts["machine"]["jax / jaxlib"] = "0.10.3 / 0.10.3"
    newer.save(tmp_path, "20260104T000000Z")
    suite.facts["machine"]["jax / jaxlib"] = "0.10.2 / 0.10.2"
    suite.save(tmp_path, "20260102T000000Z")
    text = report.render_report(runs.compose(tmp_path), TRAIN_AND_TESTS)
    assert "at commit `def5678`, on the machine below" in text
    assert ("at commit `abc1234`, before the rest of this report, where the machine differed "
            "from the one above: jax / jaxlib 0.10.2 / 0.10.2 (load average") in text


def _with_learner(results: measure.Results) -> measure.Results:
    results.sections["learner"] = {"reps": 1, "selection": [], "notebooks": []}
    return results


def test_test_suite_runs_without_a_full_run_say_how_to_get_one(tmp_path):
    assert runs.compose(tmp_path) is None
    _tests_run("20260102T000000Z", 200.0).save(tmp_path, "20260102T000000Z")
    results = runs.compose(tmp_path)
    results.facts["skipped"] = {"course": "not in --only"}
    results.save(tmp_path, "20260102T000000Z")
    text = report.render_report(runs.compose(tmp_path), TRAIN_AND_TESTS)
    assert f"_Not measured in this run ({runs.NO_FULL_RUN})._" in text
    assert "| 200 s | 9 passed |" in text


def test_make_bench_tests_measures_only_the_suite_and_merges_it(tmp_path, monkeypatch):
    full = _stamped(_train_results(1.0), "20260101T000000Z", full=True, duration=400.0)
    full.save(tmp_path, "20260101T000000Z")

    def fake_suite(results, opts):
        measured = _tests_run("unused", 120.0)
        results.sections.update(measured.sections)
        results.add(*measured.benchmarks.values())

    monkeypatch.setattr(testsuite, "measure", fake_suite)
    monkeypatch.setattr(run, "SECTIONS", TRAIN_AND_TESTS)  # a report of two sections
    out = tmp_path / "B.md"
    assert run.main(["--only", "tests", "--output", str(out), "--results-dir", str(tmp_path),
                     "--no-readme"]) == 0
    saved = runs.saved_runs(tmp_path)
    assert len(saved) == 2 and "tests" in saved[-1][1]["sections"]
    facts = saved[-1][1]["facts"]
    assert facts["commit"] == runs.source_commit() and facts["full"] is False
    text = out.read_text(encoding="utf-8")
    assert "The raw results of this run are `benchmarks/results/20260101T000000Z.json`" in text
    assert f"_Measured by `python -m benchmarks.run {facts['flags']}` on " \
           f"{facts['machine']['date']} at commit `{facts['commit']}`, after the rest" in text
    assert "shard_map step / pmap step: 1.00x" in text and "| 120 s | 9 passed |" in text
    def broken_suite(results, opts):
        raise RuntimeError("pytest is missing")

    monkeypatch.setattr(testsuite, "measure", broken_suite)  # its failure, not the older suite
    assert run.main(["--only", "tests", "--output", str(out), "--results-dir", str(tmp_path),
                     "--no-readme"]) == 1
    text = out.read_text(encoding="utf-8")
    assert "_Not measured in this run (failed: RuntimeError: pytest is missing)._" in text
    assert "| 120 s |" not in text


def test_the_restart_section_shows_the_kill_to_first_resumed_step():
    results = measure.Results()
    results.add(measure.record(restarts.NAME, [4.0, 5.0, 6.0]))
    results.sections[restarts.KEY] = {"mesh": [2, 4], "repeats": 3}
    text = restarts.render(results)
    assert "| train_stack.py on 2 × 4, killed during save 4, resumed from checkpoint 2 | 5 s (4–6) |" \
        in text, text


def test_the_floor_section_times_a_process_that_imports_jax_and_runs_one_jitted_sum():
    import sys

    import jax

    from benchmarks import jax_floor

    results = measure.Results()
    jax_floor.measure(results, types.SimpleNamespace(quick=True, floor_against=[sys.executable]))
    rows = results.sections["floor"]["rows"]
    assert [r["jax"] for r in rows] == [jax.__version__] * 2 and all(len(r["seconds"]) == 3 for r in rows)
    assert jax_floor.bench_name(rows[0]) in results.benchmarks
    text = jax_floor.render(results)
    assert f"| jax {jax.__version__} | Python {rows[0]['python']} | `.venv (" in text and "| 1.00× |" in text
    assert "The course's floor on jax" not in text  # no row on another jax to compare with
    with pytest.raises(SystemExit, match=r"the floor program failed \(exit status 1\)"):
        jax_floor.one_run("/bin/false")


def test_the_floor_section_names_the_ratio_to_each_other_pin():
    from benchmarks import jax_floor

    rows = [{"jax": "0.12.0.1", "python": "3.12.1", "environment": ".venv (145 packages)", "seconds": [0.6] * 3},
            {"jax": "0.10.2", "python": "3.11.7", "environment": "old (146 packages)", "seconds": [0.5] * 3},
            {"jax": "0.12.0.1", "python": "3.13.0", "environment": "other (145 packages)", "seconds": [0.7] * 3}]
    assert jax_floor.pin_ratios(rows) == "\n\nThe course's floor on jax 0.12.0.1 is 1.20× jax 0.10.2's on Python 3.11.7."


def test_floor_envs_names_a_commit_the_clone_lacks():
    from benchmarks import floor_envs

    with pytest.raises(SystemExit, match="this clone has no commit no-such-rev"):
        floor_envs.short_commit("no-such-rev")
    try:
        lock = floor_envs.git("show", f"{floor_envs.LAST_ON_JAX_0_10_2}:requirements-lock.txt").decode()
    except Exception:
        pytest.skip("a shallow clone: the commit before the jax 0.12 pins is not in it")
    assert "\njax==0.10.2\n" in lock and "\njaxlib==0.10.2\n" in lock


def test_held_out_sets_are_named_kept_and_shown_without_their_folders(tmp_path, monkeypatch):
    """A named set's scores are kept in benchmarks/heldout/ and shown with the words written about them,
    on a machine without the folders; a bare folder is measured and shown, never kept."""
    assert migrate_bench.heldout_sets(f"set9=/a/b{os.pathsep}/c/d") == [("set9", Path("/a/b")), ("", Path("/c/d"))]
    kept = tmp_path / "heldout"
    kept.mkdir()
    monkeypatch.setattr(migrate_bench, "HELDOUT_KEPT", kept)
    row = {"script": "s.py", "source": "o/r s.py @ abc", "labelled": 2, "found": 1, "recall": 0.5, "precision": 1.0,
           "missed": [[3, "pmap"]], "extra": [], "wrong": [], "either": 0, "fresh_at": None, "before": []}
    (kept / "set9.json").write_text(json.dumps({"name": "set9", "commit": "abc1234", "before": [], "scripts": [row]}))
    (kept / "set9.md").write_text("Before the table.\n\n<!-- table -->\n\nAfter the table.\n")
    text = migrate_bench.render_heldout_sets(None)
    assert text.index("Before the table.") < text.index("| `s.py` |") < text.index("After the table.")
    assert "`s.py` line 3 (pmap)" in text
    assert "Unseen, set by set" not in text  # no script of set9 is fresh at a measured revision
    fresh = row | {"fresh_at": "r1", "before": [row | {"found": 0}]}
    (kept / "set9.json").write_text(json.dumps({"name": "set9", "commit": "abc1234", "before": ["r1"],
                                                "scripts": [fresh]}))
    assert "Unseen, set by set (right advice of labelled lines, wrong advice): set9 0 of 2 (0%), 0 wrong; all sets " \
        "together 0 of 2 (0%), 0 wrong." in migrate_bench.render_heldout_sets(None)
    (kept / "set10.json").write_text(json.dumps({"name": "set10", "commit": "abc1234", "before": ["r1"],
                                                 "scripts": [fresh | {"before": [row]}]}))
    shown = migrate_bench.render_heldout_sets(None)  # the sets in the order they were made, and their sum
    assert "set9 0 of 2 (0%), 0 wrong; set10 1 of 2 (50%), 0 wrong; all sets together 1 of 4 (25%), 0 wrong." in shown
    assert shown.index("Held-out set `set9`") < shown.index("Held-out set `set10`")
    (kept / "set10.json").unlink()
    bare = {"name": "heldout", "commit": "def5678", "before": [], "scripts": [row | {"script": "t.py"}]}
    assert "| `t.py` |" in migrate_bench.render_heldout_sets([bare]) and len(list(kept.iterdir())) == 2
