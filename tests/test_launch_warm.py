"""helpers.launch.warm: hosts forked from a process that has imported JAX are what cold hosts are."""
from __future__ import annotations

import json
import os
import signal

import pytest
from processes import survivors

from helpers import launch
from helpers.launch import warm

# What a script can see of how it was started, printed as one JSON line per host.
SEEN = """
import json, os, sys
imported = "jax" in sys.modules
from helpers.launch import initialize
initialize()
import jax, numpy as np
print(json.dumps({
    "imported": imported, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
    "process": os.environ["JAX_PROCESS_ID"], "devices": jax.local_device_count(),
    "global": jax.device_count(), "parent_is_launcher": os.getppid() == LAUNCHER,
    "session_leader": os.getsid(0) == os.getpid(), "random": float(np.random.rand()),
}))
"""


def _seen(tmp_path, devices: int = 2, **options) -> list[dict]:
    script = tmp_path / "seen.py"
    script.write_text(SEEN.replace("LAUNCHER", str(os.getpid())), encoding="utf-8")
    result = launch.run(script, hosts=2, devices_per_host=devices, args=["--flag", "x"],
                        timeout=60, **options)
    assert result.ok, str(result)
    return [json.loads(out) for out in result.stdout]


@pytest.mark.multiprocess
def test_a_forked_host_sees_what_a_cold_host_sees(tmp_path, monkeypatch):
    warm = _seen(tmp_path)
    monkeypatch.setenv("HELPERS_LAUNCH_WARM", "0")
    cold = _seen(tmp_path)
    assert [h["imported"] for h in warm] == [True, True]
    assert [h["imported"] for h in cold] == [False, False]
    assert not any(h["parent_is_launcher"] for h in warm)
    assert all(h["parent_is_launcher"] for h in cold)
    same = ("argv", "path0", "cwd", "process", "devices", "global", "session_leader")
    assert [{k: h[k] for k in same} for h in warm] == [{k: h[k] for k in same} for h in cold]
    assert warm[0]["argv"] == ["seen.py", "--flag", "x"]  # the launcher shows the name only
    assert warm[0]["random"] != warm[1]["random"]  # numpy is seeded afresh in each fork


@pytest.mark.multiprocess
def test_one_warm_process_serves_every_device_count(tmp_path):
    assert [h["devices"] for h in _seen(tmp_path, devices=2)] == [2, 2]
    before = warm.pids()
    assert [h["devices"] for h in _seen(tmp_path, devices=3)] == [3, 3]
    assert [h["global"] for h in _seen(tmp_path, devices=2)] == [4, 4]
    assert warm.pids() == before


@pytest.mark.multiprocess
def test_the_tests_of_a_suite_share_a_warm_process(tmp_path, monkeypatch):
    """pytest changes PYTEST_CURRENT_TEST for every test: each would otherwise start its own."""
    script = tmp_path / "which_test.py"
    script.write_text("import os\nprint(os.environ['PYTEST_CURRENT_TEST'])\n", encoding="utf-8")
    seen = []
    for name in ("test_one (call)", "test_two (call)"):
        monkeypatch.setenv("PYTEST_CURRENT_TEST", name)
        result = launch.run(script, hosts=2, devices_per_host=1, timeout=60)
        assert result.ok, str(result)
        seen.append((result.stdout, warm.pids()))
    assert [out for out, _ in seen] == [("test_one (call)\n",) * 2, ("test_two (call)\n",) * 2]
    assert seen[0][1] == seen[1][1]


@pytest.mark.multiprocess
def test_a_bare_run_never_forks(tmp_path):
    assert [h["imported"] for h in _seen(tmp_path, bare=False)] == [True, True]
    bare = tmp_path / "bare.py"
    bare.write_text("import sys\nprint('jax' in sys.modules)\n", encoding="utf-8")
    result = launch.run(bare, hosts=2, devices_per_host=1, timeout=60, bare=True)
    assert result.stdout == ("False\n", "False\n")


@pytest.mark.multiprocess
def test_a_dead_warm_process_is_replaced(tmp_path):
    _seen(tmp_path)
    for pid in warm.pids():
        os.kill(pid, signal.SIGKILL)
    assert not survivors(warm.pids())
    assert [h["imported"] for h in _seen(tmp_path)] == [True, True]


@pytest.mark.multiprocess
def test_a_script_that_uses_the_stack_finds_it_imported(tmp_path):
    uses = tmp_path / "uses.py"
    uses.write_text("import sys\nprint('optax' in sys.modules, 'grain' in sys.modules)\n"
                    "import optax\n", encoding="utf-8")
    plain = tmp_path / "plain.py"
    plain.write_text("import sys\nprint('optax' in sys.modules, 'jax' in sys.modules)\n",
                     encoding="utf-8")
    assert launch.run(uses, hosts=2, devices_per_host=1, timeout=60).stdout == ("True True\n",) * 2
    assert launch.run(plain, hosts=2, devices_per_host=1, timeout=60).stdout == ("False True\n",) * 2


def test_a_script_that_imports_the_stack_through_the_course_is_forked_from_a_stack_process():
    uses = ("from helpers.training import checkpoints, nnx_model, tiny", "import helpers.training.nnx_model",
            "from helpers.training.data import HostLoader", "import orbax.checkpoint as ocp")
    plain = ("from helpers.training import tiny", "import jax  # from helpers.training import data")
    assert all(warm._USES_STACK.search(line) for line in uses)
    assert not any(warm._USES_STACK.search(line) for line in plain)
