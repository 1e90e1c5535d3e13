"""helpers.launch: real multi-process runs, their display, and every way a run can go wrong.

Each fault test also checks that no process the launcher started survives (psutil).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest
from processes import survivors

from helpers import launch
from helpers.launch import host, runner, warm
from helpers.launch.result import (BARE_INITIALIZE_ADVICE, HostResult, LaunchError, RunResult, clean_stderr,
                                   describe_exit, fatal_message, hosts_text)

PSUM = """
from helpers.launch import initialize
how = initialize()
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), ("host", "device"))
local = np.arange(4.0) + 10 * jax.process_index()
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P(("host", "device"))), local)
total = jax.jit(jax.shard_map(lambda b: jax.lax.psum(b, ("host", "device")), mesh=mesh,
                in_specs=P(("host", "device")), out_specs=P()))(x)
print(how, jax.process_index(), jax.process_count(), jax.local_device_count(), x.shape,
      float(total.addressable_data(0)[0]))
"""

# Host 0 waits in a collective that host 1 never joins (host 1 crashes / hangs first).
FAULT = """
import os, signal, sys, time
from helpers.launch import initialize
initialize()
import jax
from jax.experimental import multihost_utils
print("ready", flush=True)
if jax.process_index() == 1:
    {fault}
multihost_utils.process_allgather(jax.numpy.ones(1))
print("done")
"""




# Long enough never to be reached by a host that fails: a failure must stop the run at once,
# so a run that reports this timeout instead of the failure fails its test.
NEVER = 300


@pytest.mark.multiprocess
def test_two_hosts_build_a_global_array_and_psum():
    result = launch.run(source=PSUM, hosts=2, devices_per_host=4, timeout=NEVER)
    assert result.ok, str(result)
    assert result.stdout == ("course launcher 0 2 4 (8,) 52.0\n",
                             "course launcher 1 2 4 (8,) 52.0\n")
    assert result.returncode == (0, 0)
    assert str(result) == (
        "2 hosts x 4 devices: all hosts finished\n"
        "--- host 0 ---\ncourse launcher 0 2 4 (8,) 52.0\n"
        "--- host 1 ---\ncourse launcher 1 2 4 (8,) 52.0")
    html = result._repr_html_()
    assert html.count("<td") == 2 and "host 1" in html and "52.0" in html
    assert result.check() is result
    assert not survivors(result.pids)


@pytest.mark.multiprocess
def test_a_crashing_host_stops_the_others_and_shows_its_error():
    result = launch.run(source=FAULT.format(fault="raise RuntimeError('host 1 broke')"),
                        hosts=2, devices_per_host=2, timeout=NEVER)
    assert not result.ok
    assert result.failed_hosts == result.failed_first == (1,)
    assert result.message == "host 1 failed (exit status 1); the launcher stopped host 0"
    assert [h.status for h in result.hosts] == ["stopped", "failed"]
    text = str(result)
    assert "--- host 1 (failed, exit status 1) ---" in text
    assert 'File "<source>", line 9, in <module>' in text  # no temp paths on display
    assert "runpy" not in text  # the launcher's own frames are not the learner's concern
    assert text.rstrip().endswith("RuntimeError: host 1 broke")
    assert "Traceback" not in text.split("--- host 1")[0]  # stderr shown for failed hosts only
    with pytest.raises(LaunchError, match="host 1 failed"):
        result.check()
    assert not survivors(result.pids)


@pytest.mark.multiprocess
@pytest.mark.parametrize("fault, how", [
    ("sys.exit(3)", "exit status 3"),
    ("raise SystemExit(5)", "exit status 5"),
    ("os._exit(4)", "exit status 4"),
    ("raise SystemExit('out of data')", "exit status 1"),
    ("os.kill(os.getpid(), signal.SIGABRT)", "killed by SIGABRT"),
])
def test_a_host_exiting_with_an_error_status_is_a_failure_at_once(fault, how):
    """Without the launcher's help such a host would wait in JAX's exit barrier: a fake hang."""
    result = launch.run(source=FAULT.format(fault=fault), hosts=2, devices_per_host=2,
                        timeout=NEVER)
    assert result.message == f"host 1 failed ({how}); the launcher stopped host 0"
    assert [h.status for h in result.hosts] == ["stopped", "failed"]
    assert result.report() == [
        "host 0: stopped by the launcher at line 10: "
        "multihost_utils.process_allgather(jax.numpy.ones(1)); last printed: 'ready'",
        f"host 1: failed: {how}; last printed: 'ready'"]
    assert f"--- host 1 (failed, {how}) ---" in str(result)
    if "out of data" in fault:  # SystemExit's message goes to stderr, as Python does it
        assert str(result).rstrip().endswith("out of data")
    assert not survivors(result.pids)


@pytest.mark.multiprocess
def test_a_timeout_reports_each_host_its_line_and_last_output():
    """Host 0 waits in a collective, host 1 sleeps before it, host 2's script has ended."""
    source = FAULT.format(fault="time.sleep(600)").replace(
        'print("ready", flush=True)\n',
        'print("ready", flush=True)\nif jax.process_index() == 2:\n    sys.exit(0)\n')
    result = launch.run(source=source, hosts=3, devices_per_host=1, timeout=10)
    assert not result.ok
    assert result.message == (
        "stopped after the 10 s timeout: hosts 0 and 1 were still running; host 2 had ended "
        "its script and waited at JAX's exit barrier for the others")
    assert result.report() == [
        "host 0: still running at line 12: multihost_utils.process_allgather(jax.numpy.ones(1)); "
        "last printed: 'ready'",
        "host 1: still running at line 11: time.sleep(600); last printed: 'ready'",
        "host 2: its script had ended; it was waiting at JAX's exit barrier for the others; "
        "last printed: 'ready'"]
    assert str(result).splitlines()[1:4] == result.report()
    assert result.stdout == ("ready\n",) * 3
    assert result.returncode == (None, None, None)
    assert all(line in result._repr_html_() for line in
               ["host 1: still running at line 11: time.sleep(600); last printed: &#x27;ready&#x27;"])
    assert not survivors(result.pids)


@pytest.mark.multiprocess
def test_a_stall_stops_a_silent_run_without_waiting_for_the_timeout():
    result = launch.run(source=FAULT.format(fault="time.sleep(600)"), hosts=2,
                        devices_per_host=1, timeout=NEVER, stall=2)
    assert result.message == ("stopped after no host printed anything for 2 s: hosts 0 and 1 "
                              "were still running")
    assert [h.where for h in result.hosts] == [
        "line 10: multihost_utils.process_allgather(jax.numpy.ones(1))", "line 9: time.sleep(600)"]
    assert not survivors(result.pids)


@pytest.mark.multiprocess
def test_a_run_where_every_host_waits_is_stopped_at_the_idle_limit():
    """Host 0 blocked in a collective, host 1 asleep: neither computes, so neither can print again."""
    result = launch.run(source=FAULT.format(fault="time.sleep(600)"), hosts=2,
                        devices_per_host=1, timeout=NEVER, stall=NEVER - 1, idle=2)
    assert result.message == ("stopped after no host printed anything for 2 s, and none was computing: "
                              "hosts 0 and 1 were still running")
    assert result.stopped_after == 2
    assert [h.activity for h in result.hosts] == ["idle", "idle"]
    assert not survivors(result.pids)


@pytest.mark.multiprocess
def test_a_loop_is_told_from_a_host_waiting_in_a_collective_by_its_cpu():
    """A host that spins or keeps waking up is computing: the idle limit leaves it to the stall limit."""
    for fault, doing in (("while True: pass", "busy"), ("while True: time.sleep(0.01)", "waking")):
        result = launch.run(source=FAULT.format(fault=fault), hosts=2, devices_per_host=1,
                            timeout=NEVER, stall=4, idle=1)
        assert result.stopped_after == 4, result.message
        assert [h.activity for h in result.hosts] == ["idle", doing]
        assert result.hosts[1].where == f"line 9: {fault}"
        assert not survivors(result.pids)


# Plain jax.distributed, no course code: host 1 raises, host 0 waits in a collective for it.
BARE_CRASH = """
import os, sys
import jax
from jax.experimental import multihost_utils
env = os.environ
jax.distributed.initialize(env["JAX_COORDINATOR_ADDRESS"], int(env["JAX_NUM_PROCESSES"]),
                           int(env["JAX_PROCESS_ID"]), shutdown_timeout_seconds=2)
print("course code loaded:", "helpers.launch" in sys.modules, flush=True)
multihost_utils.process_allgather(jax.numpy.ones(1))
if jax.process_index() == 1:
    raise ValueError("host 1 crashes")
multihost_utils.process_allgather(jax.numpy.ones(1))
"""


@pytest.mark.multiprocess
def test_a_bare_run_is_plain_python_and_a_crash_does_not_end_the_host():
    result = launch.run(source=BARE_CRASH, hosts=2, devices_per_host=1, timeout=NEVER, stall=3,
                        bare=True)
    assert [h.stdout for h in result.hosts] == ["course code loaded: False\n"] * 2
    # host 1 printed its traceback and kept running (JAX's shutdown barrier), unlike a host of
    # the course launcher; either both were still running at the stall, or the 2 s shutdown
    # barrier had already aborted them
    assert "ValueError: host 1 crashes" in result.hosts[1].stderr
    assert result.hosts[1].returncode != 1, str(result)
    assert not survivors(result.pids)


DIES_MID_RUN = """
import os, signal
from helpers.launch import initialize
initialize()
import jax
from jax.experimental import multihost_utils
multihost_utils.process_allgather(jax.numpy.ones(1))
print("step 1 done", flush=True)
if jax.process_index() == 1:
    os.kill(os.getpid(), signal.SIGKILL)
multihost_utils.process_allgather(jax.numpy.ones(1))
"""


@pytest.mark.multiprocess
def test_with_grace_the_others_show_what_a_dead_host_does_to_them():
    result = launch.run(source=DIES_MID_RUN, hosts=2, devices_per_host=1, timeout=NEVER,
                        grace=NEVER)
    # host 0 fails a moment later, and its error says it lost its peer: named as a consequence
    assert result.message == "host 1 failed (killed by SIGKILL), then host 0 (exit status 1)"
    assert [h.status for h in result.hosts] == ["failed", "failed"]
    survivor = result.hosts[0]
    assert 'File "<source>", line 11, in <module>' in survivor.error_tail()
    assert "Gloo" in survivor.error_tail().splitlines()[-1]  # the collective lost its peer
    assert "I1130" not in survivor.stderr and "Gloo" not in result.hosts[1].stderr
    assert not survivors(result.pids)


@pytest.mark.multiprocess
def test_an_interrupt_kills_every_host(monkeypatch):
    seen: list[int] = []

    def hosts() -> list[int]:
        return [p.pid for p in psutil.Process().children(recursive=True)
                if p.pid not in warm.pids()  # kept between runs, by design
                and "launch" in " ".join(p.cmdline())]

    def interrupt():  # once both hosts run (a loaded machine may take seconds), then Ctrl-C
        deadline = time.monotonic() + 30
        while len(hosts()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        seen.extend(hosts())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.5, interrupt)
    timer.start()
    result = None
    try:
        with pytest.raises(KeyboardInterrupt):
            result = launch.run(source=FAULT.format(fault="time.sleep(600)"), hosts=2,
                                devices_per_host=2, timeout=60)
    except pytest.fail.Exception:
        pytest.fail(f"the run ended before the interrupt: {result}")
    finally:
        timer.cancel()
    assert len(seen) >= 2
    assert not survivors(seen)


@pytest.mark.multiprocess
def test_a_taken_port_is_retried_on_a_new_one(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        real = runner._free_port
        monkeypatch.setattr(runner, "_free_port", lambda: next(ports, None) or real())
        result = launch.run(source=PSUM, hosts=2, devices_per_host=2, timeout=60)
    assert result.ok, str(result)
    assert result.attempts == 2
    assert "port" not in str(result)
    assert not survivors(result.pids)


def test_processes_a_script_leaves_behind_are_killed_too(tmp_path):
    script = tmp_path / "spawner.py"
    script.write_text(
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print(p.pid)\n")
    result = launch.run(script, hosts=2, devices_per_host=1, timeout=30)
    assert result.ok, str(result)
    grandchildren = [int(out.strip()) for out in result.stdout]
    assert not survivors(grandchildren)


@pytest.mark.multiprocess
def test_cli_prefixes_lines_and_reports_failure(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text(
        "import sys\nfrom helpers.launch import initialize\nhow = initialize()\nimport jax\n"
        "print(f'{how}: process {jax.process_index()} sees {jax.device_count()} devices', sys.argv[1:])\n"
        "sys.stdout.flush()\n"
        "if jax.process_index() == 1 and 'fail' in sys.argv: raise SystemExit(3)\n")
    ok = subprocess.run([sys.executable, "-m", "helpers.launch", "--hosts", "2",
                         "--devices-per-host", "2", str(script), "--flag"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert sorted(ok.stdout.splitlines()) == [
        "[host 0] course launcher: process 0 sees 4 devices ['--flag']",
        "[host 1] course launcher: process 1 sees 4 devices ['--flag']"]
    bad = subprocess.run([sys.executable, "-m", "helpers.launch", "--hosts", "2",
                          "--devices-per-host", "2", "--timeout", "30", str(script), "fail"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1
    assert "[launch] 2 hosts x 2 devices: host 1 failed (exit status 3)" in bad.stderr
    assert "[launch] host 1: failed: exit status 3; last printed:" in bad.stderr


def _start_hanging_cli(tmp_path, stderr) -> subprocess.Popen:
    """`python -m helpers.launch` on 2 x 2 hosts that print "ready" and then hang."""
    script = tmp_path / "hang.py"
    script.write_text(FAULT.format(fault="time.sleep(600)"))
    return subprocess.Popen([sys.executable, "-m", "helpers.launch", "--hosts", "2",
                             "--devices-per-host", "2", str(script)],
                            stdout=subprocess.PIPE, stderr=stderr, text=True)


def _read_ready(cli: subprocess.Popen) -> None:
    ready = [cli.stdout.readline() for _ in range(2)]
    assert sorted(ready) == ["[host 0] ready\n", "[host 1] ready\n"]


@pytest.mark.multiprocess
def test_cli_stall_stops_a_silent_run_and_says_where_each_host_is(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(FAULT.format(fault="time.sleep(600)"))
    out = subprocess.run([sys.executable, "-m", "helpers.launch", "--hosts", "2",
                          "--devices-per-host", "1", "--stall", "2", str(script)],
                         capture_output=True, text=True, timeout=NEVER)
    assert out.returncode == 124
    assert "stopped after no host printed anything for 2 s" in out.stderr
    assert ("[launch] host 0: still running at line 10: multihost_utils.process_allgather("
            "jax.numpy.ones(1)); last printed: 'ready'") in out.stderr
    assert "[launch] host 1: still running at line 9: time.sleep(600); last printed: 'ready'" \
        in out.stderr


@pytest.mark.multiprocess
def test_cli_ctrl_c_stops_every_host(tmp_path):
    cli = _start_hanging_cli(tmp_path, subprocess.PIPE)
    try:
        _read_ready(cli)
        kids = psutil.Process(cli.pid).children(recursive=True)
        children = [p.pid for p in kids]
        listening = {c.laddr.ip for p in kids for c in p.net_connections() if c.status == "LISTEN"}
        assert listening and listening <= {"127.0.0.1", "::ffff:127.0.0.1"}  # loopback only
        cli.send_signal(signal.SIGINT)
        assert cli.wait(timeout=20) == 130
        assert "interrupted; stopped every host" in cli.stderr.read()
    finally:
        cli.kill()
        cli.wait()
    assert len(children) >= 2
    assert not survivors(children)


@pytest.mark.multiprocess
def test_hosts_die_with_a_killed_launcher(tmp_path):
    """A kernel killed outright (SIGKILL) cannot clean up; the hosts must not outlive it."""
    cli = _start_hanging_cli(tmp_path, subprocess.DEVNULL)
    try:
        _read_ready(cli)
        children = [p.pid for p in psutil.Process(cli.pid).children(recursive=True)]
    finally:
        cli.kill()
        cli.wait()
    assert len(children) >= 2 and not survivors(children)


def test_cli_rejects_a_missing_script():
    out = subprocess.run([sys.executable, "-m", "helpers.launch", "no_such_script.py"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "no script at 'no_such_script.py'" in out.stderr


def test_run_argument_errors(tmp_path):
    with pytest.raises(ValueError, match="either a script path or source"):
        launch.run()
    with pytest.raises(FileNotFoundError, match="no script at"):
        launch.run(tmp_path / "missing.py")
    with pytest.raises(ValueError, match="hosts must be a whole number"):
        launch.run(source="print(1)", hosts=0)


def test_child_environment_binds_loopback_and_sets_devices(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --other_flag")
    env = runner._child_env(1, 2, 4, "127.0.0.1:12345")
    assert env["JAX_COORDINATOR_ADDRESS"] == "127.0.0.1:12345"
    assert (env["JAX_NUM_PROCESSES"], env["JAX_PROCESS_ID"]) == ("2", "1")
    assert env["XLA_FLAGS"] == "--other_flag --xla_force_host_platform_device_count=4"
    assert env["JAX_PLATFORMS"] == "cpu" and env["JAX_NUM_CPU_DEVICES"] == "4"


# ------------------------------------------------------------------ initialize() paths

def test_initialize_alone_is_a_single_process(initialize_calls):
    assert launch.initialize() == "single process"
    assert initialize_calls == []


def test_initialize_under_the_course_launcher(initialize_calls, monkeypatch):
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:4321")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    monkeypatch.setenv("JAX_PROCESS_ID", "1")
    waited = []  # host 1 first waits for host 0's coordinator (none listens here: recorded, not waited)
    monkeypatch.setattr(host, "_wait_for_coordinator", lambda address, timeout: waited.append((address, timeout)))
    assert launch.initialize(timeout=7) == "course launcher"
    assert waited == [("127.0.0.1:4321", 7)]
    assert initialize_calls == [dict(
        coordinator_address="127.0.0.1:4321", num_processes=2, process_id=1,
        coordinator_bind_address="127.0.0.1:4321", initialization_timeout=7,
        cluster_detection_method="deactivate")]
    assert launch.initialize() == "course launcher"  # a second call is a no-op
    assert len(initialize_calls) == 1


@pytest.mark.parametrize("env, kind", [
    ({"OMPI_MCA_orte_hnp_uri": "1.0;tcp://10.0.0.1:1", "OMPI_COMM_WORLD_SIZE": "2"}, "Open MPI"),
    ({"SLURM_JOB_ID": "1", "SLURM_STEP_NODELIST": "n1", "SLURM_NTASKS": "2",
      "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}, "SLURM"),
])
def test_initialize_falls_back_to_jax_cluster_detection(initialize_calls, monkeypatch, env, kind):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert launch.initialize() == f"cluster auto-detect ({kind})"
    assert initialize_calls == [dict(initialization_timeout=60)]


def test_initialize_runs_alone_with_only_part_of_open_mpis_variables_as_jax_would(initialize_calls, monkeypatch):
    from jax._src.clusters import OmpiCluster

    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")  # no rank, no local rank, no OMPI_MCA_orte_hnp_uri
    assert not OmpiCluster.is_env_present()
    assert launch.initialize() == "single process" and initialize_calls == []


# ----------------------------------------------------------------------- display only

def _result(*hosts: HostResult, message: str) -> RunResult:
    return RunResult(hosts=hosts, devices_per_host=4, message=message)


def test_failed_host_stderr_is_trimmed_and_filtered():
    noise = ("I1130 04:31:14.428842    4643 add_port.cc:83] absl chatter\n"
             "[Gloo] Rank 4 is connected to 7 peer ranks. Expected number of connected peer ranks is : 7\n")
    tail = "".join(f"line {i}\n" for i in range(30))
    r = _result(HostResult(0, "stopped", None, "a\n", "Traceback: hidden\n"),
                HostResult(1, "failed", 2, "b\n", noise + tail), message="host 1 failed")
    text = str(r)
    assert "hidden" not in text and "chatter" not in text and "Gloo" not in text
    assert "line 14" not in text and "line 15\n" in text and text.endswith("line 29")
    assert "stderr (last 15 lines, log noise removed):" in text
    assert clean_stderr(noise) == ""


def test_a_bare_hosts_coordination_record_is_noise_with_its_continuation_lines():
    # CI saw these three lines on a bare host's stderr once the launcher stopped its peer
    record = ("E1203 11:02:03.123456    4643 coordination_service_agent.cc:332] Polled an error\n"
              "Additional GRPC error information from remote target coordination_service while "
              "calling /xla.coordination.CoordinationService/PollForError:\n"
              ':UNKNOWN:Error received from peer  {grpc_message:"Socket closed", grpc_status:14}\n')
    python = "ValueError: host 1 read a corrupt batch\n"
    assert clean_stderr(python + record) == python
    assert HostResult(1, "failed", 1, "", python + record).error_tail() == python.strip()


def test_exit_descriptions_and_host_lists():
    assert describe_exit(0) == "exit status 0" and describe_exit(3) == "exit status 3"
    assert describe_exit(-6) == "killed by SIGABRT" and describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(-77) == "killed by signal 77"
    assert hosts_text([1]) == "host 1" and hosts_text([0, 1, 2]) == "hosts 0, 1 and 2"


def test_report_without_a_known_line_or_output():
    r = _result(HostResult(0, "stopped", None, "", ""),
                HostResult(1, "failed", -9, "step 1\n\nstep 2\n\n", ""), message="m")
    assert r.report() == ["host 0: stopped by the launcher; last printed: nothing",
                          "host 1: failed: killed by SIGKILL; last printed: 'step 2'"]
    assert r.hosts[1].label == "host 1 (failed, killed by SIGKILL)"


ABORT_LOG = """I1130 08:30:04.208132   29580 coordination_service.cc:1549] chatter
F1130 08:30:04.208771   29591 client.h:80] Terminating process because of fatal errors. absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):
1
The tasks have crashed. [type.googleapis.com/tensorflow.CoordinationServiceError='']

RPC: /xla.coordination.CoordinationService/PollForError [type.googleapis.com/tensorflow.CoordinationServiceError='']
*** Check failure stack trace: ***
    @     0x7f0ee7a40634  absl::lts_20260107::log_internal::LogMessage::SendToLog()
"""


def test_an_aborted_host_shows_the_fatal_record_of_its_native_log():
    assert fatal_message(ABORT_LOG) == (
        "Terminating process because of fatal errors. absl::Status: UNAVAILABLE: The following "
        "tasks are unhealthy (stopped sending heartbeats): 1 The tasks have crashed. "
        "RPC: /xla.coordination.CoordinationService/PollForError")
    assert fatal_message("I1130 08:30:04.208132   29580 x.cc:1] fine\n") == ""
    aborted = HostResult(0, "failed", -6, "", "", log=ABORT_LOG)
    assert aborted.error_tail().endswith("native log, fatal: " + fatal_message(ABORT_LOG))
    exited = HostResult(0, "failed", 1, "", "ValueError: x\n", log=ABORT_LOG)
    assert exited.error_tail() == "ValueError: x"  # a Python error speaks for itself


def test_library_frames_are_folded_in_the_error_tail():
    stderr = ("Traceback (most recent call last):\n"
              '  File "<source>", line 3, in <module>\n    f()\n'
              '  File "site-packages/jax/a.py", line 1, in f\n    g()\n    ^^^\n'
              '  File "site-packages/jax/b.py", line 2, in g\n    raise ValueError\n'
              "ValueError: boom\n")
    tail = HostResult(0, "failed", 1, "", stderr).error_tail()
    assert tail.splitlines() == [
        "Traceback (most recent call last):", '  File "<source>", line 3, in <module>', "    f()",
        "  ... 2 frames inside site-packages ...", "ValueError: boom"]


def test_failures_at_the_same_moment_are_grouped_and_a_cascade_keeps_its_order():
    assert runner._failure_groups({1: 10.0, 0: 10.3}) == [[0, 1]]
    assert runner._failure_groups({1: 10.0, 0: 13.0, 2: 13.2}) == [[1], [0, 2]]
    assert runner._failure_groups({}) == []
    r = [HostResult(0, "failed", -6, "", ""), HostResult(1, "failed", -9, "", ""),
         HostResult(2, "stopped", None, "", "")]
    assert runner._failure_message([[1], [0]], r) == (
        "host 1 failed (killed by SIGKILL), then host 0 (killed by SIGABRT); "
        "the launcher stopped host 2")


def test_a_host_whose_collective_lost_its_peer_is_named_after_the_host_that_died():
    lost = "jax.errors.JaxRuntimeError: UNKNOWN: Gloo AllGather failed: Connection closed by peer\n"
    r = [HostResult(0, "failed", 1, "", lost), HostResult(1, "failed", -9, "", ""),
         HostResult(2, "failed", 1, "", "ValueError: boom\n")]
    assert runner._causes_first([[0, 1, 2]], r) == [[1, 2], [0]]
    assert runner._causes_first([[0], [1]], r) == [[0], [1]]


@pytest.mark.multiprocess
def test_a_learners_own_loopback_address_keeps_their_coordinators_apart(monkeypatch):
    """The workshop hub gives each learner a loopback address of their own (tools/hub.py)."""
    monkeypatch.setenv("HELPERS_LAUNCH_LOOPBACK", "127.3.233.1")
    result = launch.run(source="import os\nfrom helpers.launch import initialize\ninitialize()\n"
                               "import jax\nprint(os.environ['JAX_COORDINATOR_ADDRESS'].split(':')[0], "
                               "jax.process_count())\n", hosts=2, devices_per_host=1, timeout=60)
    assert result.ok, str(result)
    assert [h.stdout for h in result.hosts] == ["127.3.233.1 2\n"] * 2
    monkeypatch.setenv("HELPERS_LAUNCH_LOOPBACK", "10.0.0.1")
    with pytest.raises(ValueError, match="must be a loopback address"):
        launch.run(source="print(1)", hosts=1, devices_per_host=1)


def test_a_silent_process_is_told_busy_waking_or_idle_by_its_cpu():
    """Four processes watched side by side: a spin, a sleeping loop, a sleep, a wait."""
    from helpers.launch.activity import SAMPLE_SECONDS, Watch

    programs = {"busy": "while True: pass", "waking": "import time\nwhile True: time.sleep(0.01)",
                "idle": "import time; time.sleep(100)", "idle too": "import threading; threading.Event().wait()"}
    procs = {name: subprocess.Popen([sys.executable, "-c", f"import threading\nprint(flush=True)\n{source}"],
                                    stdout=subprocess.PIPE, text=True) for name, source in programs.items()}
    try:
        for proc in procs.values():  # past each Python's start-up, which is busy
            proc.stdout.readline()
        watches = {name: Watch(proc.pid) for name, proc in procs.items()}
        start = time.monotonic()
        while time.monotonic() - start < 2.5:
            for watch in watches.values():
                watch.sample(time.monotonic())
            time.sleep(SAMPLE_SECONDS)
        assert {name: w.activity() for name, w in watches.items()} == {
            "busy": "busy", "waking": "waking", "idle": "idle", "idle too": "idle"}
        assert all(w.activity(since=time.monotonic()) == "" for w in watches.values())  # no samples since
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_a_thread_that_wants_a_core_most_of_the_time_is_busy_one_that_wakes_now_and_then_is_not():
    """A loaded machine: a starved compile's thread waits for a core most of the time; a waiting
    host's helper threads wake now and then (measured: at most 0.034 s a second each)."""
    from helpers.launch import activity

    def watch(wanted_per_second):
        w = activity.Watch(pid=1)
        for i in range(9):
            w._samples.append(activity._Sample(i * 0.25, 0.0, 0.0, 0, {
                tid: int(share * 0.25e9 * i) for tid, share in wanted_per_second.items()}))
        return w

    assert watch({1: 0.0, 32: 0.04, 35: 0.03}).activity() == "idle"
    assert watch({1: 0.0, 7: 0.7, 32: 0.04}).activity() == "busy"


class _ReapedHost:
    """A host the run has reaped, whose number the kernel has since given to another process."""

    def __init__(self, pid: int, returncode: int | None = 0):
        self.pid, self.returncode = pid, returncode

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode


def test_the_cleanup_never_kills_a_stranger_that_got_a_reaped_hosts_number():
    """PIDs wrap around within a suite's run (threads take numbers too): a Jupyter kernel or another
    run's host, each leading a group of its own, may get a finished host's number."""
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        runner._kill_groups([_ReapedHost(stranger.pid)])
        time.sleep(0.2)
        assert stranger.poll() is None, "the cleanup killed a process that was not the run's"
    finally:
        stranger.kill()
        stranger.wait()


def test_the_cleanup_still_kills_what_a_reaped_host_left_in_its_group():
    leader = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', "
                               "'import time; time.sleep(60)']).pid, flush=True)"],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    orphan = int(leader.stdout.readline())
    leader.wait()  # reaped: its group now holds only the orphan
    runner._kill_groups([leader])
    assert not survivors([orphan])


STILL_COMPUTING = """
import os, time
from helpers.launch import initialize
initialize()
from jax.experimental import multihost_utils
if int(os.environ["JAX_PROCESS_ID"]) == 1:
    raise SystemExit(3)
deadline = time.monotonic() + 1.0
while time.monotonic() < deadline:  # host 0 is still computing when host 1 fails
    pass
multihost_utils.sync_global_devices("host 1 never comes")
"""


def test_a_host_still_computing_when_another_fails_is_named_where_it_then_waits():
    """A busy machine delays a host by seconds: the report must not name a line it was passing."""
    result = launch.run(source=STILL_COMPUTING, hosts=2, devices_per_host=1, timeout=NEVER)
    waits = STILL_COMPUTING.splitlines().index('multihost_utils.sync_global_devices("host 1 never comes")') + 1
    assert result.message.startswith("host 1 failed (exit status 3)"), result.message
    assert f"host 0: stopped by the launcher at line {waits}: multihost_utils.sync_global_devices" in str(result)
    assert not survivors(result.pids)


@pytest.mark.multiprocess
def test_a_bare_initialize_is_told_what_to_write_under_the_launcher():
    result = launch.run(source="import jax\njax.distributed.initialize()\nprint(jax.process_count())\n",
                        hosts=2, devices_per_host=1, timeout=NEVER)
    assert not result.ok
    assert result.report()[0] == BARE_INITIALIZE_ADVICE
    assert "from helpers.launch import initialize; initialize()" in BARE_INITIALIZE_ADVICE
    assert not survivors(result.pids)


def test_a_failure_of_another_kind_gets_no_initialize_advice():
    r = _result(HostResult(0, "failed", 1, "", "ValueError: out of data\n"), message="host 0 failed")
    assert BARE_INITIALIZE_ADVICE not in r.report()
