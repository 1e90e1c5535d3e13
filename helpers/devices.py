"""Fake CPU devices: configure them before JAX starts, and explain when it is too late."""
from __future__ import annotations

import os
import re
import sys

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"  # XLA's fake-CPU-device flag


class DeviceSetupError(RuntimeError):
    """JAX already started with a device set-up the notebook cannot use."""


def _validate_count(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(
            f"the number of fake devices must be a whole number of at least 1, like 8; got {n!r}"
        )
    return n


def backend_started() -> bool:
    """True once JAX has started its backends (from then on the device count is fixed)."""
    if "jax" not in sys.modules:
        return False
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def use_fake_devices(n: int) -> None:
    """Make JAX see `n` fake CPU devices. Call it before anything uses JAX.

    >>> use_fake_devices(8)   # first cell of a notebook, then `import jax`
    """
    n = _validate_count(n)
    if backend_started():
        import jax

        have, platform = jax.device_count(), jax.default_backend()
        if have == n and platform == "cpu":
            return
        raise DeviceSetupError(
            f"JAX already started with {have} {platform} device(s), and the device count "
            f"cannot change once it has started. Restart the kernel (Kernel > Restart Kernel) "
            f"and run use_fake_devices({n}) in the first cell, before any JAX call."
        )
    flags = re.sub(rf"{DEVICE_COUNT_FLAG}=\S+", "", os.environ.get("XLA_FLAGS", "")).split()
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"{DEVICE_COUNT_FLAG}={n}"])
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["JAX_NUM_CPU_DEVICES"] = str(n)  # it would override XLA_FLAGS if set elsewhere
    if "jax" in sys.modules:  # imported but not started: its config already read the env
        import jax

        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", n)


def require_devices(n: int, *, what: str = "this cell") -> None:
    """Raise a DeviceSetupError that says how to fix it unless JAX sees exactly `n` devices."""
    import jax

    have = jax.device_count()
    if have != n:
        raise DeviceSetupError(
            f"{what} needs {n} devices but JAX has {have}. Restart the kernel and run "
            f"use_fake_devices({n}) in the first cell, before any JAX call."
        )


def first_devices_mesh(layout: tuple[int, int]):
    """A (host, device) mesh of `layout` = (hosts, devices): the first `devices` devices of each
    process, host by host (what the course's exercises judged on real hosts run on)."""
    import jax

    per_process = [sorted((d for d in jax.devices() if d.process_index == p), key=lambda d: d.id)
                   for p in range(jax.process_count())]
    return jax.make_mesh(layout, ("host", "device"), devices=[d for ds in per_process for d in ds[:layout[1]]])
