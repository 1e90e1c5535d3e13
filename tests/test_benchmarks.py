"""benchmarks/run.py cannot rot: its smallest pieces run here, fast and without timed assertions."""
import importlib.util
import sys
from pathlib import Path

import pytest

from helpers.devices import use_fake_devices

use_fake_devices(8)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "benchmarks" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_markdown_table_and_number_formats(bench):
    table = bench.md_table(["a", "b|c"], [["x", 1], ["y\nz", "p|q"]], "lr")
    assert table.splitlines() == ["| a | b|c |", "|---|---:|", "| x | 1 |", "| y z | p\\|q |"]
    assert bench.fmt_s(12.345) == "12.3 s" and bench.fmt_s(0.0456) == "45.6 ms"
    assert bench.fmt_s(0.00078) == "780 µs"
    stat = bench.Stat([0.010, 0.012, 0.030])
    assert bench.fmt_stat(stat) == "12 ms (10–30)"
    assert bench.fmt_stat(stat, "p95") == "12 ms (p95 30)"
    assert bench.fmt_stat(bench.Stat([2.0])) == "2 s"
    assert bench.fmt_ratio(bench.Stat([1.5, 2.0, 2.5])) == "2.00× (1.50–2.50)"


def test_pytest_output_is_read(bench):
    out = ("===== slowest 8 durations =====\n"
           "45.12s call     notebooks/08_real_multiprocess.ipynb::Cell 3\n"
           "3.20s setup    tests/test_x.py::test_y[a b]\n"
           "===== 2 failed, 751 passed in 256.01s (0:04:16) =====\n")
    assert bench._slowest_tests(out) == [
        (45.12, "call notebooks/08_real_multiprocess.ipynb::Cell 3"),
        (3.2, "setup tests/test_x.py::test_y[a b]")]
    assert bench._pytest_summary(out) == "2 failed, 751 passed"
    run = {"times": [200.0], "summary": "1 failed", "cmd": "python -m pytest", "broken": ["t.py::a"],
           "slowest": bench._slowest_tests(out)}
    text = bench.render_tests({"whole suite": run, "nbval alone": {**run, "times": [50.0]},
                               "workers": 2})
    assert "`t.py::a`" in text and "4.0× the nbval run" in text and "45.1 s" in text


def test_budgets_follow_the_issues(bench):
    assert bench.notebook_budget(0, False)[0] == 20
    assert bench.notebook_budget(6, True)[0] == 40
    assert bench.notebook_budget(4, False)[0] == 40
    assert bench.notebook_budget(7, False)[0] == 30 and bench.notebook_budget(9, False)[0] == 30
    assert bench.notebook_budget(8, True)[0] == 60
    assert bench.starts_real_processes("r = launch.run('t.py', hosts=2)")
    assert bench.starts_real_processes("from helpers.launch import run\n")
    assert not bench.starts_real_processes("from helpers.launch_result import RunResult")


def test_readme_block_is_inserted_once_then_replaced(bench):
    text = "# t\n\n## Troubleshooting\n\nx\n\n## For contributors\n\nsee\n"
    first = bench.update_readme(text, f"{bench.BLOCK_START}\nold\n{bench.BLOCK_END}")
    assert first.index(bench.BLOCK_START) < first.index("## For contributors")
    second = bench.update_readme(first, f"{bench.BLOCK_START}\nnew\n{bench.BLOCK_END}")
    assert "new" in second and "old" not in second and second.count(bench.BLOCK_START) == 1


def test_the_training_benchmark_uses_the_course_model(bench):
    assert bench._course_model()[1] == "helpers.train's MLP and data set"


def test_one_explorer_redraw_is_timed(bench):
    result = bench.worker_explorer(hosts=2, devices_per_host=4, renders=2)
    assert len(result["spec_only"]) == len(result["mesh_changed"]) == 2
    assert result["mesh_cached"] is True
    text = bench.render_explorer({8: {"mesh": (2, 4), **result}})
    assert "8 (2 hosts × 4)" in text and "mesh-changed" in text


def test_learner_table_reports_failed_runs_and_budgets(bench):
    ok = bench.NotebookResult("00_fake_devices", 0, True, 40.0, "real processes",
                              times=[8.0, 9.0], rounds=[0, 2], errors=["ValueError: boom"])
    slow = bench.NotebookResult("02_partition_specs", 2, False, 20.0, "00–06",
                                times=[25.0], rounds=[1])
    data = {"floor": [2.0, 2.5, 3.0], "notebooks": [ok, slow], "reps": 3, "selection": ["00", "02"]}
    text = bench.render_learner(data)
    assert "1 of 3 runs failed: ValueError: boom" in text and "⚠️ over" in text
    assert "| 10.00× |" in text  # 25 s over the floor of its own round (2.5 s)
    assert "budget" in bench.readme_block(data, 300.0, quick=False)
