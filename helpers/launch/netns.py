"""Hosts that are really apart (`--netns`): each host of a run in a network namespace of its own.

On one machine every host shares one network stack, and 127.0.0.1 reaches them all: nothing a
host advertises can be wrong. With `run(..., netns=True)` (`python -m helpers.launch --netns`)
the launcher, as root, makes for each run:

- a namespace per host, with its own `lo` and an `eth0` at `NETWORK`'s address i + 1
  (host 0 at 198.18.0.1, the coordinator's address);
- a switch namespace holding a bridge, to which every host's `eth0` is wired by a veth pair;
- for each host its own hostname (`host0`, ...) and its own /etc/hosts, as on a cluster node.

Traffic stays inside the namespaces the run made; the machine's own network is not touched.
gloo, JAX's CPU collectives, advertises the address its host's *hostname* resolves to (JAX
0.12 passes gloo no address; jaxlib's `make_gloo_tcp_collectives` would take one). With
`etc_hosts="address"` each /etc/hosts maps the hostname to the host's address, as a cluster's
should; `etc_hosts="loopback"` maps it to 127.0.1.1, the line Debian's installer writes, and
gloo then advertises an address that no other host can reach.

Everything a run made (namespaces, the links inside them, the hosts file) is removed when it
ends, however it ends; a launcher killed outright leaves namespaces that the next `--netns`
run removes (their names carry the launcher's pid).
"""
from __future__ import annotations

import ctypes
import ipaddress
import itertools
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["NETWORK", "ETC_HOSTS", "HostsApart", "HostsApartError", "unavailable", "address",
           "hostname", "addresses_line", "enter_from_env", "exec_apart", "ENV_NAMES"]

# The only addresses --netns uses: RFC 2544's benchmarking range, which no real network routes.
NETWORK = ipaddress.IPv4Network("198.18.0.0/24")
ETC_HOSTS = ("address", "loopback")  # what each host's /etc/hosts maps its hostname to
DEBIAN_LOOPBACK = "127.0.1.1"  # the address Debian's installer gives a machine's own hostname
_NETNS_DIR = Path("/run/netns")
_PREFIX = "jmc"  # every namespace this launcher makes: jmc-<launcher pid>-<run>-<host or sw>
_OURS = re.compile(rf"^{_PREFIX}-(?P<pid>\d+)-\d+-(?:\d+|sw)$")
ENV_NAMES = ("HELPERS_NETNS", "HELPERS_NETNS_HOSTNAME", "HELPERS_NETNS_ETC_HOSTS")  # what a host reads
_IP_SECONDS = 10
_runs = itertools.count()


class HostsApartError(RuntimeError):
    """--netns cannot be used here; the message is one line that says why and what to do."""


def unavailable() -> str:
    """Why --netns cannot run here ('' when it can): root and iproute2's `ip` are needed."""
    if sys.platform != "linux":
        return "--netns needs Linux network namespaces; this is " + sys.platform
    if os.geteuid() != 0:
        return ("--netns needs root (it makes network namespaces); run as root, or leave out "
                "--netns to run every host on 127.0.0.1")
    if shutil.which("ip") is None:
        return "--netns needs iproute2's ip command: apt-get install iproute2"
    return ""


def address(host: int) -> str:
    """Host `host`'s address (host 0's is the coordinator's)."""
    return str(NETWORK[host + 1])


def hostname(host: int) -> str:
    return f"host{host}"


def addresses_line(hosts: int) -> str:
    """'host 0 at 198.18.0.1 (host0), host 1 at 198.18.0.2 (host1)': where a --netns run's hosts are."""
    return ", ".join(f"host {i} at {address(i)} ({hostname(i)})" for i in range(hosts))


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=_IP_SECONDS)
    if done.returncode != 0:
        said = " ".join(done.stderr.split()) or f"exit status {done.returncode}"
        raise HostsApartError(f"--netns: 'ip {' '.join(args)}' failed: {said}")


def _remove(names: list[str]) -> None:
    for name in names:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=_IP_SECONDS)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale() -> None:
    """Remove the namespaces of launchers that were killed before they could."""
    try:
        names = os.listdir(_NETNS_DIR)
    except OSError:
        return
    _remove([n for n in names if (m := _OURS.match(n)) and not _pid_alive(int(m["pid"]))])


class HostsApart:
    """The namespaces, links and hosts files of one run; a context manager that removes them all.

    `env(host)` is what a host's environment needs to enter its namespace (`enter_from_env`).
    """

    def __init__(self, hosts: int, etc_hosts: str = "address"):
        if etc_hosts not in ETC_HOSTS:
            raise ValueError(f"etc_hosts must be one of {ETC_HOSTS}; got {etc_hosts!r}")
        if not 1 <= hosts <= NETWORK.num_addresses - 2:
            raise ValueError(f"--netns runs 1 to {NETWORK.num_addresses - 2} hosts; got {hosts}")
        self.hosts, self.etc_hosts = hosts, etc_hosts
        run = f"{_PREFIX}-{os.getpid()}-{next(_runs)}"
        self.names = [f"{run}-{i}" for i in range(hosts)]
        self.switch = f"{run}-sw"
        self.made: list[str] = []
        self.files: str | None = None

    def __enter__(self) -> "HostsApart":
        why = unavailable()
        if why:
            raise HostsApartError(why)
        _sweep_stale()
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _make(self) -> None:
        for name in (self.switch, *self.names):
            _ip("netns", "add", name)
            self.made.append(name)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        prefix = NETWORK.prefixlen
        for i, name in enumerate(self.names):
            port = f"port{i}"
            _ip("link", "add", "eth0", "netns", name, "type", "veth", "peer", "name", port,
                "netns", self.switch)
            _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            _ip("-n", name, "addr", "add", f"{address(i)}/{prefix}", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")
            _ip("-n", name, "link", "set", "lo", "up")
        self.files = tempfile.mkdtemp(prefix="helpers-netns-")
        for i in range(self.hosts):
            Path(self.files, f"hosts{i}").write_text(self.hosts_file(i), encoding="utf-8")

    def hosts_file(self, host: int) -> str:
        """Host `host`'s /etc/hosts: its own name first, then every host's."""
        own = address(host) if self.etc_hosts == "address" else DEBIAN_LOOPBACK
        lines = ["127.0.0.1 localhost", f"{own} {hostname(host)}"]
        lines += [f"{address(i)} {hostname(i)}" for i in range(self.hosts) if i != host]
        return "\n".join(lines) + "\n"

    def env(self, host: int) -> dict[str, str]:
        return dict(zip(ENV_NAMES, (self.names[host], hostname(host),
                               str(Path(self.files, f"hosts{host}")))))

    def close(self) -> None:
        _remove(self.made[::-1])
        self.made = []
        if self.files:
            shutil.rmtree(self.files, ignore_errors=True)
            self.files = None


def leftovers() -> list[str]:
    """The namespaces this launcher process made that still exist (for the tests)."""
    try:
        names = os.listdir(_NETNS_DIR)
    except OSError:
        return []
    return sorted(n for n in names if (m := _OURS.match(n)) and int(m["pid"]) == os.getpid())


# ----------------------------------------------------------------------------- host side

_CLONE_NEWNET, _CLONE_NEWUTS, _CLONE_NEWNS = 0x40000000, 0x04000000, 0x00020000
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x40000


def enter_from_env() -> None:
    """In a host, before anything else: enter the namespace, hostname and /etc/hosts the launcher
    made for it (nothing when the environment names none). The process must still be single-threaded."""
    name, host, hosts_file = (os.environ.pop(k, None) for k in ENV_NAMES)
    if name is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)

    def call(result: int, what: str) -> None:
        if result != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"--netns: {what} failed: {os.strerror(err)}")

    fd = os.open(_NETNS_DIR / name, os.O_RDONLY)
    try:
        call(libc.setns(fd, _CLONE_NEWNET), f"joining network namespace {name}")
    finally:
        os.close(fd)
    call(libc.unshare(_CLONE_NEWUTS | _CLONE_NEWNS), "unshare")
    call(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "making mounts private")
    call(libc.mount(hosts_file.encode(), b"/etc/hosts", None, _MS_BIND, None), "/etc/hosts")
    socket.sethostname(host)


def exec_apart() -> None:
    """`python -c ... python script.py`: enter this host's namespace, then become the command."""
    enter_from_env()
    os.execv(sys.argv[1], sys.argv[1:])
