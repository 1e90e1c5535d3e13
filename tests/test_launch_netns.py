"""helpers.launch with --netns: hosts in network namespaces of their own, as on a cluster.

Every test that makes namespaces needs root (CI's `.ci/run` runs as root); elsewhere they are
skipped with the reason. Each checks that the run left no namespace and no process behind.
"""
from __future__ import annotations

import ipaddress
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from processes import survivors
from test_launch import FAULT

from helpers import launch
from helpers.launch import cli, netns, runner, warm
from helpers.launch.netns import HostsApart, HostsApartError

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "notebooks" / "scripts"
TRANSCRIPTS = ROOT / "notebooks" / "transcripts"
NEVER = 300  # a timeout no test should reach: a failure must stop the run at once
SAME = 1e-6  # the bound for "the same losses" on loopback and under --netns
STEP_LOSS = re.compile(r"^step\s+(\d+)\s+loss\s+(\S+)$", re.MULTILINE)

needs_root = pytest.mark.skipif(bool(netns.unavailable()),
                                reason=netns.unavailable() or "available")

# Host 0 listens on its loopback and on its own address; host 1 dials both.
APART = """
import socket, sys, time
host = int(__import__("os").environ["JAX_PROCESS_ID"])
if host == 0:
    servers = []
    for address in ("127.0.0.1", "198.18.0.1"):
        s = socket.socket(); s.bind((address, 7001)); s.listen(); servers.append(s)
    print("listening", flush=True)
    conn, peer = servers[1].accept()
    print("host 0 was reached from", peer[0])
else:
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("198.18.0.1", 7001), timeout=1).close(); break
        except OSError:
            if time.monotonic() > deadline: raise
            time.sleep(0.05)
    print("198.18.0.1:7001 reached")
    try:
        socket.create_connection(("127.0.0.1", 7001), timeout=1)
        print("127.0.0.1:7001 reached")
    except OSError as error:
        print("127.0.0.1:7001:", error.strerror)
"""


def _namespaces() -> set[str]:
    return set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()


def _root_links_like_ours() -> list[str]:
    """Links in the machine's own namespace named as a --netns run names its own (port0, br0...):
    never the machine's whole list, which other tests and programs may change meanwhile."""
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    names = (line.split(":")[1].strip().split("@")[0] for line in out.splitlines())
    return sorted(n for n in names if re.fullmatch(r"port\d+|br0", n))


def _nothing_left(result: launch.RunResult | None = None) -> None:
    assert netns.leftovers() == [], "a namespace outlived its run"
    if result is not None:
        assert not survivors(result.pids)


def _losses(text: str) -> dict[int, float]:
    return {int(step): float(loss) for step, loss in STEP_LOSS.findall(text)}


# ------------------------------------------------------------------------ anywhere

def test_without_root_it_says_so_in_one_line_and_makes_nothing(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    script = tmp_path / "hello.py"
    script.write_text("print('hello')\n")
    assert cli.main(["--netns", str(script)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["[launch] --netns needs root (it makes network namespaces); run as "
                                "root, or leave out --netns to run every host on 127.0.0.1"]
    with pytest.raises(HostsApartError, match="needs root"):
        launch.run(script, netns=True)
    assert netns.leftovers() == []  # none of this process's: other tests may make theirs meanwhile


def test_addresses_hostnames_and_hosts_files():
    assert netns.addresses_line(2) == "host 0 at 198.18.0.1 (host0), host 1 at 198.18.0.2 (host1)"
    assert all(ipaddress.ip_address(netns.address(i)) in netns.NETWORK
               for i in range(8))
    right, wrong = HostsApart(2, "address"), HostsApart(2, "loopback")
    assert right.hosts_file(1).splitlines() == ["127.0.0.1 localhost", "198.18.0.2 host1",
                                                "198.18.0.1 host0"]
    assert wrong.hosts_file(1).splitlines()[1] == "127.0.1.1 host1"
    with pytest.raises(ValueError, match="etc_hosts"):
        launch.run(source="print(1)", netns=True, etc_hosts="dns")


def test_the_gist_names_a_loopback_address_that_gloo_dialled():
    error = ("jax.errors.JaxRuntimeError: UNKNOWN: Gloo context initialization failed: "
             "[external/gloo/gloo/transport/tcp/pair.cc:152] timed out connecting: SO_ERROR: "
             "Connection refused, remote=[127.0.1.1]:<port>")
    host = launch.HostResult(host=1, status="failed", returncode=1, stdout="", stderr=error)
    ok = launch.HostResult(host=0, status="stopped", returncode=None, stdout="", stderr="")
    gist = runner._loopback_gist([ok, host])
    assert gist.startswith(" (gloo on host 1 dialled 127.0.1.1, a loopback address")
    assert runner._loopback_gist([ok]) == ""


# --------------------------------------------------------------------------- as root

@needs_root
@pytest.mark.multiprocess
def test_hosts_are_apart_each_at_its_own_address():
    links = _root_links_like_ours()
    result = launch.run(source=APART, hosts=2, devices_per_host=1, netns=True, timeout=60)
    assert result.ok, str(result)
    assert str(result).splitlines()[0] == netns.addresses_line(2)
    assert result.hosts[0].stdout.splitlines() == ["listening", "host 0 was reached from 198.18.0.2"]
    assert result.hosts[1].stdout.splitlines() == ["198.18.0.1:<port> reached",
                                                   "127.0.0.1:<port>: Connection refused"]
    _nothing_left(result)
    assert _root_links_like_ours() == links, "a link was left in (or made in) the machine's own namespace"


@needs_root
@pytest.mark.multiprocess
@pytest.mark.parametrize("start", ["warm", "cold", "bare"])
def test_each_host_has_its_hostname_resolving_to_its_address(start, monkeypatch):
    if start == "cold":
        monkeypatch.setenv("HELPERS_LAUNCH_WARM", "0")
    script = SCRIPTS / "where_am_i.py"
    if start == "bare":  # plain `python script.py`, which joins by itself
        source = script.read_text().replace("how = initialize()", (
            "import os, jax\njax.distributed.initialize(os.environ['JAX_COORDINATOR_ADDRESS'], "
            "2, int(os.environ['JAX_PROCESS_ID']))\nhow = 'bare'"))
        result = launch.run(source=source, hosts=2, devices_per_host=1, netns=True, bare=True,
                            timeout=60)
    else:
        result = launch.run(script, hosts=2, devices_per_host=1, netns=True, timeout=60)
    assert result.ok, str(result)
    for h in (0, 1):
        assert f"hostname 'host{h}' resolves to 198.18.0.{h + 1}" in result.hosts[h].stdout
        assert "gathered from every host: [0, 1]" in result.hosts[h].stdout
    _nothing_left(result)


@needs_root
@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["where_am_i", "train_dp"])
def test_the_recordings_notebook_08_shows_are_what_a_netns_run_prints(name):
    result = launch.run(SCRIPTS / f"{name}.py", hosts=2, devices_per_host=4, netns=True,
                        timeout=NEVER)
    assert result.ok, str(result)
    transcript = TRANSCRIPTS / f"apart_{name}.txt"
    if os.environ.get("UPDATE_TRANSCRIPTS") == "1":
        transcript.write_text(str(result) + "\n")
    assert str(result) + "\n" == transcript.read_text(), (
        f"a --netns run differs from {transcript.relative_to(ROOT)}, which notebook 08 shows to "
        "learners who are not root: rerun this test with UPDATE_TRANSCRIPTS=1, then make "
        "notebooks NB=08")
    _nothing_left(result)


@needs_root
@pytest.mark.multiprocess
@pytest.mark.parametrize("script, args", [
    ("train_dp.py", []),
    ("train_stack.py", ["--steps", "4", "--save-every", "0"]),
])
def test_netns_losses_equal_loopback_losses(script, args, tmp_path):
    runs = {}
    for netns in (False, True):
        ckpt = ["--ckpt-dir", str(tmp_path / f"ckpt-{netns}")] if script == "train_stack.py" else []
        result = launch.run(SCRIPTS / script, hosts=2, devices_per_host=4, netns=netns,
                            args=[*args, *ckpt], timeout=NEVER)
        assert result.ok, str(result)
        runs[netns] = _losses(result.hosts[0].stdout)
        _nothing_left(result)
    assert runs[False] and sorted(runs[False]) == sorted(runs[True])
    worst = max(abs(runs[False][s] - runs[True][s]) for s in runs[False])
    assert worst <= SAME, (runs, worst)


@needs_root
@pytest.mark.multiprocess
def test_gloo_advertising_loopback_fails_and_the_launcher_names_the_cause():
    result = launch.run(SCRIPTS / "where_am_i.py", hosts=2, devices_per_host=2, netns=True,
                        etc_hosts="loopback", timeout=NEVER)
    assert not result.ok
    for h in (0, 1):
        assert f"hostname 'host{h}' resolves to 127.0.1.1" in result.hosts[h].stdout
    failed = result.hosts[result.failed_first[0]]
    assert "Gloo context initialization failed" in failed.error_tail()
    assert "dialled 127.0.1.1, a loopback address" in result.message
    recorded = (TRANSCRIPTS / "gloo_advertises_loopback.txt").read_text()
    assert "Gloo context initialization failed" in recorded
    assert "dialled 127.0.1.1, a loopback address" in recorded
    _nothing_left(result)


@needs_root
@pytest.mark.multiprocess
def test_a_killed_namespaced_host_is_named_at_once():
    result = launch.run(source=FAULT.format(fault="os.kill(os.getpid(), signal.SIGKILL)"),
                        hosts=2, devices_per_host=2, netns=True, timeout=NEVER)
    assert result.message.startswith("host 1 failed (killed by SIGKILL)"), result.message
    assert result.failed_first == (1,)
    _nothing_left(result)


@needs_root
@pytest.mark.multiprocess
def test_a_stalled_run_is_stopped_and_cleaned_up():
    result = launch.run(source=FAULT.format(fault="time.sleep(600)"), hosts=2, devices_per_host=2,
                        netns=True, stall=2, timeout=NEVER)
    assert result.message.startswith("stopped after no host printed anything for 2 s")
    _nothing_left(result)


@needs_root
@pytest.mark.multiprocess
def test_an_interrupt_removes_every_namespace_and_host():
    seen: list[int] = []

    def hosts() -> list[int]:
        return [p.pid for p in psutil.Process().children(recursive=True)
                if p.pid not in warm.pids() and "launch" in " ".join(p.cmdline())]

    def interrupt():  # once both hosts run (a loaded machine may take seconds), then Ctrl-C
        deadline = time.monotonic() + 30
        while len(hosts()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        seen.extend(hosts())
        seen.append(-1 if netns.leftovers() else 0)  # the run's namespaces existed
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.5, interrupt)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            launch.run(source=FAULT.format(fault="time.sleep(600)"), hosts=2, devices_per_host=2,
                       netns=True, timeout=60)
    finally:
        timer.cancel()
    assert seen[-1] == -1 and len(seen) >= 3, seen
    assert not survivors(seen[:-1])
    _nothing_left()


@needs_root
def test_a_failure_while_making_the_network_leaves_nothing_half_made(monkeypatch):
    real, calls = netns._ip, []

    def fails_at_the_fifth(*args):
        calls.append(args)
        if len(calls) == 5:
            raise HostsApartError("--netns: 'ip ...' failed: made up for the test")
        real(*args)

    monkeypatch.setattr(netns, "_ip", fails_at_the_fifth)
    with pytest.raises(HostsApartError, match="made up for the test"):
        launch.run(source="print(1)", hosts=2, devices_per_host=1, netns=True)
    assert len(calls) == 5
    _nothing_left()


@needs_root
@pytest.mark.multiprocess
def test_the_cli_names_each_address_first_and_a_killed_launchers_namespaces_are_swept(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(FAULT.format(fault="time.sleep(600)"))
    launcher = subprocess.Popen([sys.executable, "-m", "helpers.launch", "--netns", "--hosts", "2",
                            "--devices-per-host", "1", str(script)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert launcher.stderr.readline() == f"[launch] {netns.addresses_line(2)}\n"
        assert sorted(launcher.stdout.readline() for _ in range(2)) == ["[host 0] ready\n",
                                                                   "[host 1] ready\n"]
        children = [p.pid for p in psutil.Process(launcher.pid).children(recursive=True)]
        theirs = {n for n in _namespaces() if n.startswith(f"jmc-{launcher.pid}-")}
        assert len(theirs) == 3  # two hosts and the switch
    finally:
        launcher.kill()  # no chance to clean up
        launcher.wait()
    assert not survivors(children)
    deadline = time.monotonic() + 10
    while theirs & _namespaces() and time.monotonic() < deadline:  # the next run sweeps them
        launch.run(source="print(1)", hosts=1, devices_per_host=1, netns=True)
    assert not theirs & _namespaces()
    _nothing_left()
