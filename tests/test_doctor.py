"""make doctor: every check passes on this machine, and each broken one names its fix.

The doctor's checks run here as tests, so `make test` fails loudly in a broken environment.
"""
from __future__ import annotations

import socket

import pytest

from helpers import doctor

REINSTALL_COMMANDS = ("make clean && make lab", "pip install -r requirements.txt")


@pytest.fixture(scope="module")
def results() -> dict[str, doctor.Result]:
    """Every check, run once for the whole module (as `make doctor` runs them)."""
    return {r.name: r for r in doctor.run_checks()}


@pytest.mark.parametrize("name", [
    pytest.param(c.name, id=c.name,
                 marks=[pytest.mark.multiprocess] if c.name == "multi-process" else [])
    for c in doctor.CHECKS
])
def test_check_passes_on_this_machine(results, name):
    r = results[name]
    assert r.ok, f"make doctor: {name} failed: {r.detail}\nfix: {r.fix}"
    assert r.detail and not r.fix


def test_all_checks_together_take_under_30_seconds(results):
    assert sum(r.seconds for r in results.values()) < 30, {n: r.seconds for n, r in results.items()}


# ------------------------------------------------------------------ broken on purpose

def test_a_wrong_jax_version_fails_and_names_the_reinstall():
    ok, detail, fix = doctor.check_jax(expected="0.0.0")
    assert not ok
    assert "0.0.0" in detail and "0.12.0.1" in detail
    for command in REINSTALL_COMMANDS:
        assert command in fix


def test_a_wrong_flax_version_fails_and_names_the_reinstall():
    ok, detail, fix = doctor.check_flax(expected="0.0.0")
    assert not ok
    assert "0.0.0" in detail and doctor.pinned("flax", "") in detail
    assert "make clean && make lab" in fix


def test_a_flax_without_the_nnx_transforms_fails_and_names_them(monkeypatch):
    from flax import nnx
    monkeypatch.delattr(nnx, "shard_map")
    ok, detail, fix = doctor.check_flax()
    assert not ok and "nnx.shard_map" in detail and "make clean && make lab" in fix


def test_the_expected_jax_version_is_read_from_requirements_txt():
    assert doctor.pinned_jax() == "0.12.0.1"


@pytest.fixture
def occupied_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


def test_an_occupied_port_fails_and_names_the_fix(occupied_port):
    ok, detail, fix = doctor.check_port(occupied_port)
    assert not ok
    assert f"127.0.0.1:{occupied_port} is already in use" in detail
    assert f"stop what holds port {occupied_port}" in fix and "pkill -f helpers.launch" in fix


def test_a_free_port_passes():
    assert doctor.check_port(0)[0]


def test_too_old_a_python_fails_and_names_the_fix():
    ok, detail, fix = doctor.check_python(minimum=(99, 0))
    assert not ok and "99.0" in detail
    assert "make clean && make PYTHON=python99.0 lab" in fix


def test_a_missing_widgets_extension_fails_and_names_the_fix(tmp_path):
    ok, detail, fix = doctor.check_widgets_extension(dirs=[tmp_path])
    assert not ok and "@jupyter-widgets/jupyterlab-manager" in detail
    assert "jupyterlab_widgets" in fix and REINSTALL_COMMANDS[0] in fix


def test_a_broken_jax_in_a_fresh_process_fails_and_names_the_fix(tmp_path, monkeypatch):
    fake = tmp_path / "jax"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('jax broken on purpose')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    ok, detail, fix = doctor.check_fake_devices()
    assert not ok and "jax broken on purpose" in detail
    assert REINSTALL_COMMANDS[0] in fix


def test_a_failing_multiprocess_run_fails_and_names_the_fix(monkeypatch):
    monkeypatch.setattr(doctor, "_PSUM_SOURCE", "raise SystemExit('broken on purpose')\n")
    ok, detail, fix = doctor.check_multiprocess()
    assert not ok and "failed" in detail
    assert "pkill -f helpers.launch" in fix and "127.0.0.1" in fix


def test_a_hostname_on_loopback_passes_and_names_what_it_means_on_a_cluster():
    ok, detail, fix = doctor.check_gloo_address("localhost")
    assert ok and not fix
    assert "'localhost' resolves to 127.0.0.1, a loopback address" in detail
    assert "/etc/hosts" in detail and "notebook 08, section 6" in detail


def test_a_hostname_that_does_not_resolve_fails_and_names_the_fix():
    ok, detail, fix = doctor.check_gloo_address("no-such-host.invalid")
    assert not ok and "'no-such-host.invalid' does not resolve" in detail
    assert "127.0.1.1 no-such-host.invalid" in fix and "/etc/hosts" in fix


def test_hosts_apart_without_root_passes_and_says_why_not_tried(monkeypatch):
    monkeypatch.setattr(doctor.netns.os, "geteuid", lambda: 1000)
    ok, detail, fix = doctor.check_hosts_apart()
    assert ok and not fix
    assert detail.startswith("not tried: --netns needs root")


@pytest.mark.multiprocess
@pytest.mark.skipif(bool(doctor.netns.unavailable()),
                    reason=doctor.netns.unavailable() or "available")
def test_a_host_advertising_loopback_is_named_as_the_cause():
    ok, detail, fix = doctor.check_multiprocess(netns=True, etc_hosts="loopback")
    assert not ok
    assert "dialled 127.0.1.1, a loopback address" in detail, detail


def test_too_little_disk_or_memory_fails_and_names_the_fix():
    ok, detail, fix = doctor.check_disk(min_gb=1e12)
    assert not ok and "free disk space" in fix
    ok, detail, fix = doctor.check_memory(min_gb=1e12)
    assert not ok and "close other programs" in fix


def test_a_crashing_check_is_reported_as_a_failure():
    def crash():
        raise RuntimeError("boom")

    r = doctor.run_check(doctor.Check("crash", crash))
    assert not r.ok and "boom" in r.detail and r.fix


def test_the_command_line_exits_1_and_prints_each_fix(occupied_port, capsys):
    status = doctor.main(["--only", "jax-pins", "--only", "localhost-port",
                          "--expect-jax", "0.0.0", "--port", str(occupied_port)])
    out = capsys.readouterr().out
    assert status == 1
    assert out.count("FAIL") == 2
    assert "fix: make clean && make lab" in out and f"fix: stop what holds port {occupied_port}" in out
    assert "2 of 2 checks failed (jax-pins, localhost-port)" in out


def test_the_command_line_exits_0_when_its_checks_pass(capsys):
    assert doctor.main(["--only", "python", "--only", "disk"]) == 0
    out = capsys.readouterr().out
    assert "all 2 checks passed" in out and "FAIL" not in out


# ------------------------------------------------------ optional launchers: mpirun and srun

def _fake_program(tmp_path, name: str, output: str, status: int = 0) -> str:
    """An executable `name` in tmp_path that prints `output` and exits with `status`."""
    program = tmp_path / name
    program.write_text(f"#!/bin/sh\necho '{output}'\nexit {status}\n")
    program.chmod(0o755)
    return str(program)


@pytest.mark.parametrize("name, check", [("mpirun", doctor.check_mpirun),
                                         ("srun", doctor.check_srun)])
def test_a_missing_launcher_passes_and_says_what_it_would_add(monkeypatch, name, check):
    monkeypatch.setattr(doctor.shutil, "which", lambda program: None)
    ok, detail, fix = check()
    assert ok and not fix
    assert detail.startswith("not installed (optional: ")
    assert ("apt-get install openmpi-bin" if name == "mpirun" else "tools/local_slurm.sh install") in detail


@pytest.mark.parametrize("version, says", [
    ("mpirun (Open MPI) 4.1.4", "Open MPI 4.1.4: notebook 08 and tests/test_mpirun.py run"),
    ("mpirun (Open MPI) 5.0.6", "Open MPI 5.0.6: JAX 0.12 detects Open MPI 5 and joins it through mpi4py"),
    ("HYDRA build details:", "not Open MPI, so notebook 08 skips its mpirun run"),
])
def test_mpirun_says_which_open_mpi_and_what_it_adds(tmp_path, monkeypatch, version, says):
    mpirun = _fake_program(tmp_path, "mpirun", version)
    monkeypatch.setattr(doctor.shutil, "which", lambda program: mpirun)
    ok, detail, fix = doctor.check_mpirun()
    assert ok and not fix and says in detail


@pytest.mark.parametrize("output, status, says", [
    ("slurm 22.05.8", 0, "slurm 22.05.8, with a cluster configured: srun -N1 -n2"),
    ("srun: fatal: Could not establish a configuration source", 1,
     "installed, no cluster configured: tests/test_slurm.py starts its own"),
])
def test_srun_says_whether_a_cluster_is_configured(tmp_path, monkeypatch, output, status, says):
    srun = _fake_program(tmp_path, "srun", output, status)
    monkeypatch.setattr(doctor.shutil, "which", lambda program: srun)
    ok, detail, fix = doctor.check_srun()
    assert ok and not fix and says in detail
