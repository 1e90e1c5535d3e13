"""Test set-up shared by every pytest run here (at the root, so `pytest notebooks/` gets it too).

- Unit tests see 8 fake CPU devices (set before anything imports JAX).
- nbval ignores stderr that is only JAX/absl log noise, or a library's warning (no notebook
  teaches with one on stderr), so a harmless line cannot fail a notebook; a cell that raises
  still fails (nbval checks errors apart from outputs), and a cell whose other stderr differs
  shows that stderr.
- No test, and no notebook kernel a test starts, records a learner's progress.
- Every JAX process of the suite (this one, notebook kernels, launched hosts) keeps what XLA
  compiles in `.jax-cache/`, so a second run loads the same programs instead of compiling them
  again. JAX keys each entry by the program, its flags and the JAX version. With a size limit,
  JAX reads and writes entries under a file lock (filelock), so no process reads a half-written
  one; the least recently used entries go first.
"""
import dataclasses
import os
import re
import sys
from pathlib import Path

import nbformat
import pytest

try:
    import filelock  # noqa: F401 (JAX locks the cache with it)
except ImportError:  # an older .venv (make test reinstalls it): no cache rather than an unlocked one
    pass
else:
    for name, value in {"JAX_COMPILATION_CACHE_DIR": str(Path(__file__).resolve().parent / ".jax-cache"),
                        "JAX_COMPILATION_CACHE_MAX_SIZE": str(512 * 2**20),
                        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}.items():  # small programs too
        os.environ.setdefault(name, value)

from helpers.devices import use_fake_devices  # noqa: E402 (after the cache settings: it imports JAX)
from helpers.launch.result import LOG_NOISE  # noqa: E402

use_fake_devices(8)
os.environ["COURSE_PROGRESS_FILE"] = "off"


# A warning that a library (site-packages) prints on stderr, in two lines: the warning, then its source
# line. No notebook teaches with one (the course shows warnings with catch_warnings(record=True), on
# stdout), and some come and go with the machine's load: the suite's shared compilation cache warns
# when it reads an entry another process is writing; Orbax's restore threads warn in their own time.
# A coroutine never awaited is always a library's (no notebook has one): Python warns of it when the
# garbage collector happens to free it, from whatever line runs then, and adds a hint on tracemalloc
# (which may arrive as a stream output of its own).
_LIBRARY_WARNING = re.compile(r"^\S*site-packages/\S+:\d+: \w*Warning: "
                              r"|^\S+:\d+: RuntimeWarning: coroutine '[^']+' was never awaited$")
_TRACEMALLOC_HINT = "RuntimeWarning: Enable tracemalloc to get the object allocation traceback"


def _without_suite_noise(text: str) -> list[str]:
    """The stderr lines of a cell that are the notebook's own: no log noise, no library's warning."""
    kept, after_warning = [], False
    for line in text.splitlines():
        if (after_warning and line.startswith("  ")) or line == _TRACEMALLOC_HINT:
            continue
        after_warning = bool(_LIBRARY_WARNING.match(line))
        if line.strip() and not after_warning and not LOG_NOISE.match(line):
            kept.append(line)
    return kept


def _without_log_noise(outputs):
    kept = []
    for output in outputs:
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            lines = _without_suite_noise(output["text"])
            if not lines:
                continue
            print("stderr the comparison keeps:", *lines, sep="\n  ")  # shown when the cell fails
            output = nbformat.from_dict({**output, "text": "\n".join(lines) + "\n"})  # nbval reads attributes
        kept.append(output)
    return kept


def _patch_nbval() -> None:
    try:
        import nbval.plugin as plugin
    except ImportError:
        return
    original = plugin.transform_streams_for_comparison
    plugin.transform_streams_for_comparison = lambda outputs: original(_without_log_noise(outputs))


_patch_nbval()


# ------------------------------------------------- spreading the suite over xdist workers
# `make test` runs `--dist loadgroup`: tests that share a group run on one worker, every other
# test goes wherever a worker is free. Groups: the cells of one notebook (nbval runs them in one
# kernel, in order); a module's tests that share a module-scoped fixture (built once); the tests
# of one exercise, in test_exercises.py and test_process_verdicts.py (its programs' outputs are
# computed once per worker, by real runs for some).

def _module_scoped_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(defs[-1].scope == "module" for defs in info.name2fixturedefs.values())


def _exercise_id(item) -> str | None:
    if marker := item.get_closest_marker("exercise"):  # never two real-process runs of one exercise at once
        return marker.args[0]
    callspec = getattr(item, "callspec", None)
    return (callspec.params.get("ex_id")
            if callspec and item.path.name in ("test_exercises.py", "test_process_verdicts.py") else None)


def _group(item) -> str | None:
    if item.path.suffix == ".ipynb":
        return f"nbval-{item.path.stem[:2]}"
    if _module_scoped_fixture(item):
        return item.path.stem
    if _exercise_id(item):
        return f"exercise-{_exercise_id(item)}"
    return None


def _cost_rank(item) -> tuple[int, int]:
    """Heaviest first, so the workers end together: whole-notebook runs, later notebooks (the
    ones that start real processes) before earlier ones; then module groups and exercises judged in
    real processes; then the rest, in collection order."""
    from helpers.exercises import ProcessExercise, get

    if item.path.name == "test_solved_notebooks.py" and hasattr(item, "callspec"):
        return 0, -int(item.callspec.id[:2])
    if item.path.suffix == ".ipynb":
        return 1, -int(item.path.name[:2])
    if _module_scoped_fixture(item) or (_exercise_id(item) and isinstance(get(_exercise_id(item)), ProcessExercise)):
        return 2, 0
    return 3, 0


def _tell_the_scheduler(item, group: str) -> None:
    """xdist's scheduler reads a test's group from its id, `nodeid@group`. xdist 3.8 writes that
    into `item._nodeid`, which pytest 9.2 no longer reads (the id is `item._id`): write it there."""
    if hasattr(item, "_id") and not item.nodeid.endswith(f"@{group}"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(f"{item.nodeid}@{group}")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if group := _group(item):
            item.add_marker(pytest.mark.xdist_group(group))
            if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
                _tell_the_scheduler(item, group)
    items.sort(key=_cost_rank)  # stable: each notebook's cells keep their order


# ------------------------------------------------- the checks' stall limit, shortened for the suite
# Many tests hand a check a program that hangs on purpose (a collective on one host, an endless
# loop), and each such run waits out the stall limit the prompts promise (15 s). The suite waits
# TEST_STALL_SECONDS instead: the course's programs print again within about 3 s on a loaded 2-core
# machine, and the verdicts are the same apart from the seconds they quote. The reference's run and
# the catalogue's run of a `together` exercise keep the real limit: their programs can be silent for
# longer under load (10.4's NNX programs compile inside them). A handed-in program comes first in
# its run, so one that hangs is stopped before the reference after it starts. Only a run asking for
# STALL_SECONDS is shortened, so tests/test_process_verdicts.py, which expects TEST_STALL_SECONDS,
# fails for a check with another limit.
TEST_STALL_SECONDS = 6.0


@pytest.fixture(autouse=True)
def shortened_check_stalls(request, monkeypatch):
    if request.node.path.suffix == ".ipynb":  # a notebook's checks run in its kernel, with the real limit
        return
    from helpers.exercises.processes import STALL_SECONDS, RealProcesses, handed_in

    real_launch = RealProcesses._launch

    def launch(runner, exercise, sources, layout):
        reference_or_catalogue = runner.together and not handed_in(exercise, sources[0]) and (
            len(sources) > 1 or sources[0] == exercise.solution)
        if not reference_or_catalogue and runner.stall == STALL_SECONDS:
            runner = dataclasses.replace(runner, stall=TEST_STALL_SECONDS)
        return real_launch(runner, exercise, sources, layout)

    monkeypatch.setattr(RealProcesses, "_launch", launch)


# ------------------------------------------------- helpers.launch.initialize() without a cluster

@pytest.fixture
def initialize_calls(monkeypatch):
    """helpers.launch.initialize() with jax.distributed.initialize recorded, not called, and no
    launcher, SLURM or MPI variables left in the environment (a test sets the ones it needs)."""
    import jax

    from helpers.launch import host

    calls: list[dict] = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: calls.append(k))
    monkeypatch.setattr(host, "_joined_via", None)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(host, "_native_stdout_off_the_pipe", lambda **kwargs: None)  # keep pytest's fd 1
    for var in list(os.environ):
        if var.startswith(("SLURM_", "OMPI_", "PMIX_")) or var in (
                "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "HELPERS_LAUNCH_PARENT"):
            monkeypatch.delenv(var)
    return calls
