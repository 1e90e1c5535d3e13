"""Hosts, emulated in one process or real: `emulate_hosts`, and which host owns which device.

In a real multi-process run a device's host is its `process_index`. In one process the
course *emulates* hosts: with H emulated hosts and D = device_count // H, emulated host h
owns `jax.devices()[h*D:(h+1)*D]`.
"""
from __future__ import annotations

from contextlib import contextmanager

_emulated_hosts = 1


def emulate_hosts(num_hosts: int) -> None:
    """Treat this process's devices as `num_hosts` equal hosts (one-process emulation)."""
    import jax

    count = jax.device_count()
    if isinstance(num_hosts, bool) or not isinstance(num_hosts, int) or num_hosts < 1:
        raise ValueError(f"num_hosts must be a whole number of at least 1; got {num_hosts!r}")
    if count % num_hosts:
        raise ValueError(
            f"{count} devices cannot be split evenly into {num_hosts} hosts; pick a host "
            f"count that divides {count}, or restart with use_fake_devices(a multiple of {num_hosts})."
        )
    global _emulated_hosts
    _emulated_hosts = num_hosts


@contextmanager
def emulated_hosts(num_hosts: int):
    """Emulate `num_hosts` hosts inside the block, then restore the previous count (judges, tests).

    >>> with emulated_hosts(2):   # doctest: +SKIP
    ...     host_of(jax.devices()[4])
    1
    """
    before = _emulated_hosts
    emulate_hosts(num_hosts)
    try:
        yield
    finally:
        globals()["_emulated_hosts"] = before


def is_multiprocess() -> bool:
    """True in a real multi-controller run (more than one JAX process)."""
    import jax

    return jax.process_count() > 1


def num_hosts() -> int:
    """Number of hosts: real processes if there are several, else the emulated count."""
    import jax

    return jax.process_count() if is_multiprocess() else _emulated_hosts


def devices_per_host() -> int:
    """Devices each host owns."""
    import jax

    return jax.device_count() // num_hosts()


def host_of(device) -> int:
    """The host (process, or emulated host) that owns `device`."""
    if is_multiprocess():
        return device.process_index
    return emulated_host_of(device, devices_per_host())


def emulated_host_of(device, per_host: int) -> int:
    """The emulated host that owns `device` (or a device id) when each host owns `per_host` devices:
    host h owns the h-th block of `per_host` devices in JAX's device order."""
    import jax

    position = device if isinstance(device, int) else jax.devices().index(device)
    return position // per_host
