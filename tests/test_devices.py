"""The fake-device bootstrap: validation, no-op repeats, and a clear error once it is too late."""
import subprocess
import sys

import pytest

from helpers.devices import DeviceSetupError, require_devices, use_fake_devices


@pytest.mark.parametrize("bad", [0, -1, "8", 2.5, True, None])
def test_invalid_counts_name_the_accepted_values(bad):
    with pytest.raises(ValueError, match="whole number of at least 1"):
        use_fake_devices(bad)


def test_same_count_again_is_a_no_op():
    import jax

    use_fake_devices(8)
    assert jax.device_count() == 8


def test_a_different_count_after_start_says_restart_the_kernel():
    import jax

    jax.devices()
    with pytest.raises(DeviceSetupError, match=r"Restart the kernel.*use_fake_devices\(4\)"):
        use_fake_devices(4)


def test_require_devices_explains_the_fix():
    with pytest.raises(DeviceSetupError, match=r"needs 4 devices but JAX has 8.*use_fake_devices\(4\)"):
        require_devices(4)


def _fresh(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_works_when_jax_is_imported_but_not_started():
    assert _fresh("import jax\nfrom helpers.devices import use_fake_devices\n"
                  "use_fake_devices(4)\nprint(jax.device_count())") == "4"


def test_replaces_an_existing_device_count_flag():
    code = ("import os\nos.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=2 --xla_dump_to=/dev/null'\n"
            "from helpers.devices import use_fake_devices\nuse_fake_devices(3)\n"
            "import jax\nprint(jax.device_count(), os.environ['XLA_FLAGS'])")
    assert _fresh(code) == "3 --xla_dump_to=/dev/null --xla_force_host_platform_device_count=3"
